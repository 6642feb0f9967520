//! Per-tenant ingest rate limits: a token bucket for records and one for bytes, refilled
//! continuously, holding at most `burst` worth of each rate.
//!
//! Each tenant has its own limiter behind its own small mutex, looked up from the immutable key
//! ring, so tenants never contend with each other and the hot path takes no global lock.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A tenant's limits. A rate of 0 means unlimited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TenantLimits {
    /// Records per second accepted in the long run.
    pub records_per_second: f64,
    /// Bytes per second accepted in the long run (records' approximate stored size).
    pub bytes_per_second: f64,
    /// How much unused rate a bucket keeps: a tenant idle for `burst` may send `burst × rate` at once.
    pub burst: Duration,
}

impl Default for TenantLimits {
    fn default() -> Self {
        TenantLimits {
            records_per_second: 0.0,
            bytes_per_second: 0.0,
            burst: Duration::from_secs(2),
        }
    }
}

impl TenantLimits {
    /// True when at least one rate is limited.
    pub fn is_limited(&self) -> bool {
        self.records_per_second > 0.0 || self.bytes_per_second > 0.0
    }

    /// Refuses negative or non-finite rates and a zero burst with a rate.
    pub fn check(&self) -> Result<(), String> {
        for (name, rate) in [
            ("records-per-second", self.records_per_second),
            ("bytes-per-second", self.bytes_per_second),
        ] {
            if !rate.is_finite() || rate < 0.0 {
                return Err(format!("{name} must be a number ≥ 0 (0: unlimited)"));
            }
        }
        if self.is_limited() && self.burst.is_zero() {
            return Err("burst must be above 0s when a rate is set".into());
        }
        Ok(())
    }
}

/// One tenant's buckets.
#[derive(Debug)]
pub struct RateLimiter {
    limits: TenantLimits,
    state: Mutex<Buckets>,
}

#[derive(Debug)]
struct Buckets {
    records: f64,
    bytes: f64,
    refilled: Instant,
}

/// One bucket's arithmetic: refill, then admit `cost` if `level` is at least `min(cost, capacity)`.
/// A cost larger than the whole bucket is admitted from a full bucket and leaves a debt, so big
/// chunks are not refused forever and the long-run rate still holds.
fn wait_for(level: f64, cost: f64, rate: f64, capacity: f64) -> Option<Duration> {
    if rate <= 0.0 {
        return None;
    }
    let needed = cost.min(capacity);
    if level >= needed {
        return None;
    }
    Some(Duration::from_secs_f64((needed - level) / rate))
}

impl RateLimiter {
    /// A limiter starting with full buckets.
    pub fn new(limits: TenantLimits) -> Self {
        let burst = limits.burst.as_secs_f64();
        RateLimiter {
            limits,
            state: Mutex::new(Buckets {
                records: limits.records_per_second * burst,
                bytes: limits.bytes_per_second * burst,
                refilled: Instant::now(),
            }),
        }
    }

    /// Takes `records` and `bytes` tokens, or says how long until there are enough of both.
    /// Nothing is taken on refusal.
    pub fn admit(&self, records: u64, bytes: u64) -> Result<(), Duration> {
        let limits = &self.limits;
        let burst = limits.burst.as_secs_f64();
        let record_capacity = limits.records_per_second * burst;
        let byte_capacity = limits.bytes_per_second * burst;
        let (records, bytes) = (records as f64, bytes as f64);
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let now = Instant::now();
        let elapsed = now.duration_since(state.refilled).as_secs_f64();
        state.refilled = now;
        state.records = (state.records + elapsed * limits.records_per_second).min(record_capacity);
        state.bytes = (state.bytes + elapsed * limits.bytes_per_second).min(byte_capacity);
        let wait = [
            wait_for(
                state.records,
                records,
                limits.records_per_second,
                record_capacity,
            ),
            wait_for(state.bytes, bytes, limits.bytes_per_second, byte_capacity),
        ]
        .into_iter()
        .flatten()
        .max();
        if let Some(wait) = wait {
            return Err(wait);
        }
        if limits.records_per_second > 0.0 {
            state.records -= records;
        }
        if limits.bytes_per_second > 0.0 {
            state.bytes -= bytes;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(records_per_second: f64, bytes_per_second: f64) -> RateLimiter {
        RateLimiter::new(TenantLimits {
            records_per_second,
            bytes_per_second,
            burst: Duration::from_secs(1),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_admits_its_burst_then_says_how_long_to_wait() {
        let limiter = limiter(100.0, 0.0);
        limiter.admit(60, 1_000_000).unwrap();
        limiter.admit(40, 0).unwrap();
        let wait = limiter.admit(50, 0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        tokio::time::advance(Duration::from_millis(500)).await;
        limiter.admit(50, 0).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_bytes_bucket_limits_independently() {
        let limiter = limiter(0.0, 1000.0);
        limiter.admit(1_000_000, 1000).unwrap();
        assert_eq!(
            limiter.admit(1, 100).unwrap_err(),
            Duration::from_millis(100)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_chunk_bigger_than_the_bucket_passes_when_full_and_leaves_a_debt() {
        let limiter = limiter(0.0, 1000.0);
        limiter.admit(1, 1500).unwrap();
        // 500 bytes of debt, then 1000 needed: 1.5 s.
        assert_eq!(
            limiter.admit(1, 1000).unwrap_err(),
            Duration::from_millis(1500)
        );
        // Refused calls took nothing.
        assert_eq!(
            limiter.admit(1, 1000).unwrap_err(),
            Duration::from_millis(1500)
        );
    }
}
