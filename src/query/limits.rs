//! The limits every read obeys, taken from the configuration once.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::filter::Filter;
use super::memory::MemoryLimits;
use crate::config::QueryOptions;
use crate::error::QueryError;
use crate::storage::{PageSize, StoreError};

/// Bytes of a Query or Tail answer besides its records: the next cursor, the bound of the
/// default range and the answer's own framing.
const ANSWER_OVERHEAD_BYTES: usize = 128;

/// Bounds on what one read may cost and return.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadLimits {
    /// How long one read (a page, a tail's start or one of its polls) may take.
    pub timeout: Duration,
    /// How far back a page without `from` reads; `None`: to the oldest record.
    pub default_range: Option<TimeDelta>,
    /// Largest Query page or Tail message, encoded; a page that reaches it stops early, with a
    /// cursor.
    pub max_answer_bytes: usize,
    /// Memory one read, and every read together, may hold.
    pub memory: MemoryLimits,
    /// Most series a LogQL metric query may answer with.
    pub max_series: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            timeout: Duration::from_secs(10),
            default_range: Some(TimeDelta::hours(24)),
            max_answer_bytes: 2 << 20,
            memory: MemoryLimits::default(),
            max_series: 500,
        }
    }
}

impl From<&QueryOptions> for ReadLimits {
    fn from(config: &QueryOptions) -> Self {
        ReadLimits {
            timeout: config.query_timeout.0,
            default_range: Some(config.query_default_range.0)
                .filter(|range| !range.is_zero())
                .map(|range| TimeDelta::from_std(range).unwrap_or(TimeDelta::MAX)),
            max_answer_bytes: config.max_page_bytes.as_usize(),
            memory: MemoryLimits {
                per_read: config.max_query_bytes.as_usize(),
                all_reads: config.max_read_bytes.as_usize(),
            },
            max_series: config.max_query_series,
        }
    }
}

impl ReadLimits {
    /// The lower bound of a page whose filter has no `from`: the default range before `to`, or
    /// before now when `to` is later or absent. `None` when the filter has `from`, or there is no
    /// default range.
    pub(crate) fn default_from(&self, filter: &Filter) -> Option<DateTime<Utc>> {
        if filter.from.is_some() {
            return None;
        }
        let now = Utc::now();
        let anchor = filter.to.map_or(now, |to| to.min(now));
        // A range reaching past the representable past bounds nothing.
        anchor.checked_sub_signed(self.default_range?)
    }

    /// Runs `read` within the timeout. Past it the read's future is dropped, which is what stops
    /// its work in the database (see `storage`).
    pub(crate) async fn within_timeout<T>(
        &self,
        read: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, QueryError> {
        self.bounded(async { Ok(read.await?) }).await
    }

    /// Runs `work`, a read of several steps with an error of its own, within the timeout, ended
    /// as [`ReadLimits::within_timeout`] ends a read.
    pub(crate) async fn bounded<T, E: From<QueryError>>(
        &self,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(outcome) => outcome,
            Err(_) => Err(QueryError::DeadlineExceeded {
                timeout: self.timeout,
            }
            .into()),
        }
    }

    /// The size of one answer of at most `rows` records.
    pub(crate) fn page_size(&self, rows: usize) -> PageSize {
        PageSize {
            rows,
            bytes: self.max_answer_bytes.saturating_sub(ANSWER_OVERHEAD_BYTES),
        }
    }

    /// The memory a page reserves before it reads: twice its budget, as its records are held
    /// twice at once, as read and as the answer made of them.
    pub(crate) fn page_reservation(&self) -> usize {
        self.max_answer_bytes.saturating_mul(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_range_ends_at_to_or_now_whichever_is_earlier() {
        let limits = ReadLimits::default();
        let day = TimeDelta::hours(24);
        let explicit = Filter {
            from: Some(Utc::now()),
            ..Filter::default()
        };
        assert_eq!(limits.default_from(&explicit), None, "from is kept");
        let to = Utc::now() - TimeDelta::hours(5);
        let before_to = Filter {
            to: Some(to),
            ..Filter::default()
        };
        assert_eq!(limits.default_from(&before_to), Some(to - day));
        let future = Filter {
            to: Some(Utc::now() + TimeDelta::days(30)),
            ..Filter::default()
        };
        let from = limits.default_from(&future).unwrap();
        assert!((Utc::now() - day - from).num_seconds().abs() <= 1, "{from}");
        let unbounded = ReadLimits {
            default_range: None,
            ..ReadLimits::default()
        };
        assert_eq!(unbounded.default_from(&Filter::default()), None);
    }
}
