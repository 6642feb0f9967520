//! The limits every read obeys, taken from the configuration once.

use std::future::Future;
use std::time::Duration;

use crate::error::QueryError;
use crate::storage::reader::Budget;
use crate::storage::StoreError;

/// Bytes of a Query or Tail answer besides its records: the next cursor, the bound of the
/// default range and the answer's own framing.
const ANSWER_OVERHEAD_BYTES: usize = 128;

/// Bounds on what one read may cost and return.
#[derive(Clone, Copy, Debug)]
pub struct ReadLimits {
    /// How long one read (a page, a tail's start or one of its polls) may take.
    pub timeout: Duration,
    /// Largest Query page or Tail message, encoded; a page that reaches it stops early, with a
    /// cursor.
    pub max_answer_bytes: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            timeout: Duration::from_secs(10),
            max_answer_bytes: 2 << 20,
        }
    }
}

impl ReadLimits {
    /// The read limits of `loghaul serve`.
    pub fn from_config(config: &crate::config::ServeConfig) -> Self {
        ReadLimits {
            timeout: config.query_timeout.0,
            max_answer_bytes: config.max_page_bytes.as_usize(),
        }
    }

    /// Runs `read` within the timeout. Past it the read's future is dropped, which is what stops
    /// its work in the database (see `storage::reader`).
    pub async fn within_timeout<T>(
        &self,
        read: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, QueryError> {
        match tokio::time::timeout(self.timeout, read).await {
            Ok(outcome) => Ok(outcome?),
            Err(_) => Err(QueryError::DeadlineExceeded {
                timeout: self.timeout,
            }),
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
