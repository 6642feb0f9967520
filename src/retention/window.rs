//! The days a retention window needs partitions for, and how long past the window a day's
//! partition stays.

use chrono::{DateTime, Days, NaiveDate, TimeDelta, Utc};

/// Days of partitions created ahead of today.
pub(crate) const DAYS_AHEAD: u64 = 3;
/// A partition is dropped only once its whole day is older than the window by this much more,
/// so a record validated just inside the window and still in flight never loses its partition.
pub(crate) const DROP_GRACE: TimeDelta = TimeDelta::hours(1);

/// The days a window needs: from the horizon's day (or yesterday, with no window) to a few ahead.
pub(super) fn needed_days(keep: Option<TimeDelta>, now: DateTime<Utc>) -> (NaiveDate, NaiveDate) {
    let today = now.date_naive();
    let first = match keep {
        Some(keep) => (now - keep).date_naive(),
        None => today - Days::new(1),
    };
    (first.min(today), today + Days::new(DAYS_AHEAD))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_needs_days_from_its_horizon_to_a_few_ahead() {
        let now = DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z")
            .unwrap()
            .to_utc();
        let (first, last) = needed_days(Some(TimeDelta::days(7)), now);
        assert_eq!(first.to_string(), "2026-11-22");
        assert_eq!(last.to_string(), "2026-12-02");
        let (first, _) = needed_days(None, now);
        assert_eq!(first.to_string(), "2026-11-28");
    }
}
