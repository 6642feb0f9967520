//! The slowest a request body (an HTTP body, a gRPC message) may arrive once it has started, as
//! Kestrel's `MinRequestBodyDataRate` and nginx's `client_body_timeout` require. Without it a client
//! that announces a large body and then sends a byte now and then keeps its claim on the budget for
//! as long as it likes. The rate is averaged from the body's start, after a grace period for slow
//! starts, so a body that came fast and then paused for a moment is not cut off; time the handler
//! spends waiting for room is not counted, since the client is not being read then.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::IngestOptions;
use crate::error::IngestError;

/// The minimum body rate (`--min-body-rate`, `--min-body-rate-grace`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinBodyRate {
    /// Bytes per second, averaged from the body's start; 0: no minimum.
    pub bytes_per_second: u64,
    /// How long a body may arrive at any rate before the minimum applies.
    pub grace: Duration,
}

impl MinBodyRate {
    /// No minimum: a body may take as long as its idle timeout allows.
    pub const OFF: MinBodyRate = MinBodyRate {
        bytes_per_second: 0,
        grace: Duration::ZERO,
    };
}

/// How a body, once its first byte is due, must keep arriving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyPace {
    /// Longest the client may send nothing in the middle of a body (`--stream-idle-timeout`);
    /// `None` waits as long as the minimum rate allows.
    pub idle: Option<Duration>,
    /// The slowest it may arrive (`--min-body-rate`).
    pub min_rate: MinBodyRate,
}

impl From<&IngestOptions> for BodyPace {
    fn from(config: &IngestOptions) -> Self {
        let idle = config.stream_idle_timeout.0;
        BodyPace {
            idle: (!idle.is_zero()).then_some(idle),
            min_rate: MinBodyRate {
                bytes_per_second: config.min_body_rate.0,
                grace: config.min_body_rate_grace.0,
            },
        }
    }
}

impl BodyPace {
    /// Starts timing a body whose first byte is about to be read.
    pub fn start(self) -> BodyClock {
        BodyClock {
            pace: self,
            started: Instant::now(),
            received: 0,
        }
    }
}

/// One body's bytes against the time since it started.
#[derive(Clone, Copy, Debug)]
pub struct BodyClock {
    pace: BodyPace,
    started: Instant,
    received: u64,
}

impl BodyClock {
    /// Counts `bytes` more of the body.
    pub fn received(&mut self, bytes: usize) {
        self.received += bytes as u64;
    }

    /// When the body falls below the minimum unless more of it arrives; `None` without one.
    pub fn deadline(&self) -> Option<Instant> {
        let rule = self.pace.min_rate;
        if rule.bytes_per_second == 0 {
            return None;
        }
        let earned = Duration::from_secs_f64(self.received as f64 / rule.bytes_per_second as f64);
        Some(self.started + earned.max(rule.grace))
    }

    /// Waits for the body's next frame, `next`, until the body would fall below the minimum or
    /// the idle timeout passes with nothing, whichever comes first.
    pub async fn next<F: Future>(&self, next: F) -> Result<F::Output, IngestError> {
        let idle = self.pace.idle;
        let idle_at = idle.map(|idle| Instant::now() + idle);
        let (until, too_slow) = match (self.deadline(), idle_at) {
            (Some(slow), Some(idle)) if idle < slow => (Some(idle), false),
            (Some(slow), _) => (Some(slow), true),
            (None, idle) => (idle, false),
        };
        let Some(until) = until else {
            return Ok(next.await);
        };
        tokio::time::timeout_at(until, next).await.map_err(|_| {
            if too_slow {
                IngestError::BodyTooSlow {
                    bytes_per_second: self.pace.min_rate.bytes_per_second,
                    received: self.received,
                    elapsed: self.started.elapsed(),
                }
            } else {
                IngestError::StreamIdle(idle.unwrap_or_default())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: MinBodyRate = MinBodyRate {
        bytes_per_second: 1000,
        grace: Duration::from_secs(5),
    };

    fn pace(idle: Option<Duration>, min_rate: MinBodyRate) -> BodyPace {
        BodyPace { idle, min_rate }
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_cut_off_when_the_grace_runs_out() {
        let mut clock = pace(None, RULE).start();
        clock.received(10);
        let started = Instant::now();
        let err = clock.next(std::future::pending::<()>()).await;
        assert_eq!(started.elapsed(), RULE.grace);
        assert!(
            matches!(err, Err(IngestError::BodyTooSlow { received: 10, .. })),
            "{err:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_came_fast_may_pause_for_what_it_earned() {
        let mut clock = pace(None, RULE).start();
        // 20 s worth at the minimum rate, sent at once: it may then pause 20 s, not more.
        clock.received(20_000);
        let started = Instant::now();
        let err = clock.next(std::future::pending::<()>()).await;
        assert_eq!(started.elapsed(), Duration::from_secs(20));
        assert!(matches!(err, Err(IngestError::BodyTooSlow { .. })));
        // The idle timeout still comes first when it is shorter.
        let idle = Duration::from_secs(2);
        let clock = pace(Some(idle), RULE).start();
        let err = clock.next(std::future::pending::<()>()).await;
        assert!(
            matches!(err, Err(IngestError::StreamIdle(d)) if d == idle),
            "{err:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_minimum_only_the_idle_timeout_applies() {
        let clock = pace(None, MinBodyRate::OFF).start();
        assert_eq!(clock.deadline(), None);
        assert_eq!(clock.next(async { 7 }).await.unwrap(), 7);
    }
}
