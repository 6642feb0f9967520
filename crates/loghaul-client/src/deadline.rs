//! Timers armed only while something is pending (the batcher's linger, the shipper's batch and
//! close deadlines), as `tokio::select!` branches that never fire while unarmed.

use tokio::time::Instant;

/// Sleeps until `deadline`, or forever when there is none.
pub async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_deadline_fires_and_none_never_does() {
        let due = Instant::now() + Duration::from_secs(5);
        sleep_until_some(Some(due)).await;
        assert!(Instant::now() >= due);
        let unarmed = tokio::time::timeout(Duration::from_secs(3600), sleep_until_some(None));
        assert!(unarmed.await.is_err(), "an unarmed timer fired");
    }
}
