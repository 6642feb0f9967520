//! When to try again: capped exponential backoff with jitter, unless the server said how long to
//! wait (`google.rpc.RetryInfo`), which wins.

use std::time::Duration;

use prost::Message;
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// The longest server-suggested delay honoured, so a confused server cannot park a shipper.
const MAX_TOLD_DELAY: Duration = Duration::from_secs(300);

/// Capped exponential backoff with jitter.
#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `first`, doubles up to `max`.
    pub fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The delay before the next attempt: what the server asked for (plus up to 10% so that
    /// clients told the same do not return in step), else the exponential step with jitter
    /// (half to all of it).
    pub fn delay(&mut self, told: Option<Duration>) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.max);
        match told {
            Some(told) => {
                let told = told.min(MAX_TOLD_DELAY);
                told + told.mul_f64(fastrand::f64() * 0.1)
            }
            None => step.mul_f64(0.5 + fastrand::f64() * 0.5),
        }
    }

    /// After a success: the next failure starts from the first step again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// The delay a status asks for: `RetryInfo` in the status details, else in the
/// `google.rpc.retryinfo-bin` trailer.
pub fn told_delay(status: &Status) -> Option<Duration> {
    if let Some(delay) = status
        .get_error_details()
        .retry_info()
        .and_then(|info| info.retry_delay)
    {
        return Some(delay);
    }
    let trailer = status.metadata().get_bin("google.rpc.retryinfo-bin")?;
    let info = tonic_types::pb::RetryInfo::decode(trailer.to_bytes().ok()?).ok()?;
    let delay = info.retry_delay?;
    Duration::try_from(delay).ok()
}

/// False for failures that sending the same chunk again cannot fix: a refused key, a malformed
/// or oversized chunk, a server without the service.
pub fn is_retryable(status: &Status) -> bool {
    match status.code() {
        Code::Unauthenticated
        | Code::PermissionDenied
        | Code::InvalidArgument
        | Code::Unimplemented
        | Code::OutOfRange => false,
        // RESOURCE_EXHAUSTED is backpressure, except for a message over the size limit.
        Code::ResourceExhausted => !status.message().contains("request too large"),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_double_up_to_the_cap_with_jitter_and_reset() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(400));
        let delays: Vec<Duration> = (0..5).map(|_| backoff.delay(None)).collect();
        let caps = [100, 200, 400, 400, 400];
        for (delay, cap) in delays.iter().zip(caps) {
            let cap = Duration::from_millis(cap);
            assert!(
                *delay >= cap / 2 && *delay <= cap,
                "{delay:?} within [{:?}, {cap:?}]",
                cap / 2
            );
        }
        backoff.reset();
        assert!(backoff.delay(None) <= Duration::from_millis(100));
    }

    #[test]
    fn a_told_delay_wins() {
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(20));
        let delay = backoff.delay(Some(Duration::from_secs(2)));
        assert!(delay >= Duration::from_secs(2) && delay <= Duration::from_millis(2200));
    }

    #[test]
    fn retry_info_is_read_from_the_details_or_the_trailer() {
        let status = Status::with_error_details(
            Code::ResourceExhausted,
            "busy",
            tonic_types::ErrorDetails::with_retry_info(Some(Duration::from_millis(1500))),
        );
        assert_eq!(told_delay(&status), Some(Duration::from_millis(1500)));

        let mut trailer_only = Status::unavailable("down");
        let info = tonic_types::pb::RetryInfo {
            retry_delay: Some(prost_types::Duration {
                seconds: 3,
                nanos: 0,
            }),
        };
        trailer_only.metadata_mut().insert_bin(
            "google.rpc.retryinfo-bin",
            tonic::metadata::MetadataValue::from_bytes(&info.encode_to_vec()),
        );
        assert_eq!(told_delay(&trailer_only), Some(Duration::from_secs(3)));
        assert_eq!(told_delay(&Status::unavailable("down")), None);
    }

    #[test]
    fn only_transient_failures_are_retried() {
        assert!(is_retryable(&Status::unavailable("down")));
        assert!(is_retryable(&Status::resource_exhausted("overloaded")));
        assert!(!is_retryable(&Status::resource_exhausted(
            "request too large: 5 MB"
        )));
        assert!(!is_retryable(&Status::unauthenticated("no key")));
    }
}
