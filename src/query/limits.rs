//! The limits every read obeys, taken from the configuration once.

use crate::storage::reader::Budget;

/// Bytes of a Query or Tail answer besides its records: the next cursor, the bound of the
/// default range and the answer's own framing.
const ANSWER_OVERHEAD_BYTES: usize = 128;

/// Bounds on what one read may cost and return.
#[derive(Clone, Copy, Debug)]
pub struct ReadLimits {
    /// Largest Query page or Tail message, encoded; a page that reaches it stops early, with a
    /// cursor.
    pub max_answer_bytes: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_answer_bytes: 2 << 20,
        }
    }
}

impl ReadLimits {
    /// The read limits of `loghaul serve`.
    pub fn from_config(config: &crate::config::ServeConfig) -> Self {
        ReadLimits {
            max_answer_bytes: config.max_page_bytes.as_usize(),
        }
    }

    /// The budget of one answer of at most `rows` records.
    pub fn budget(&self, rows: usize) -> Budget {
        Budget {
            rows,
            bytes: self.max_answer_bytes.saturating_sub(ANSWER_OVERHEAD_BYTES),
        }
    }
}
