//! When a read in no order is split in two, each half of its range stepped on a connection of
//! its own, side by side.
//!
//! The read index is `(tenant, ts, service)`: a read of some streams walks every entry of the
//! tenant's range and takes the rows of its streams. An entry passed over costs about a tenth of
//! a row the engine takes. A read of a few streams among many is therefore the walk, which two
//! threads halve; a read of many is the engine's work, which a second thread only slows by
//! taking its core. The volume rollup tells the two apart before the read starts.

use chrono::TimeDelta;
use sqlx::Row;

use super::read::{ReadConnection, SqliteReader};
use super::select::{
    push_catalog_narrowing, push_rollup_range, push_stream_conditions, VOLUME_LEVEL,
};
use super::statement::Statement;
use crate::model::selection::{Order, Selection};
use crate::storage::error::{unavailable, StoreError};

/// The shortest range a read is split for: below it the second statement costs more than the
/// rows it takes off the first.
const LEAST_SPLIT_RANGE: TimeDelta = TimeDelta::minutes(2);

/// A read whose streams hold fewer than one in this many of the rows it passes over is split.
const SPARSE_SHARE: i64 = 10;

/// The start of the range the rollup is asked about: the shares of the streams in it stand for
/// the whole range, and a month's range does not cost a month of rollup rows per query.
const SPARSE_SAMPLE: TimeDelta = TimeDelta::hours(1);

impl SqliteReader {
    /// The halves of a read of `selection` and a connection to step the second on, when the
    /// read is split: a read in no order and without a limit (a metric query's scan or count),
    /// of a range long enough, of streams few among the tenant's ([`SqliteReader::sparse`]),
    /// when the pool can spare a connection. `conn` asks the rollup.
    pub(super) async fn split_read(
        &self,
        conn: &mut ReadConnection,
        tenant: &str,
        selection: &Selection,
        order: Order,
        limit: Option<usize>,
    ) -> Result<Option<(Selection, Selection, ReadConnection)>, StoreError> {
        if order != Order::Any || limit.is_some() {
            return Ok(None);
        }
        let Some((early, late)) = selection.halves(LEAST_SPLIT_RANGE) else {
            return Ok(None);
        };
        if !Self::sparse(conn, tenant, selection).await? {
            return Ok(None);
        }
        Ok(self.spare().await.map(|second| (early, late, second)))
    }

    /// Whether `selection`'s streams hold fewer than one in [`SPARSE_SHARE`] of the tenant's
    /// rows over the first [`SPARSE_SAMPLE`] of its range, by the volume rollup: of its services
    /// and levels, and of the services the stream catalog names for a selection by other
    /// labels, as the read itself narrows.
    async fn sparse(
        conn: &mut ReadConnection,
        tenant: &str,
        selection: &Selection,
    ) -> Result<bool, StoreError> {
        let sample = Selection {
            to: selection.to.min(selection.from + SPARSE_SAMPLE),
            ..selection.clone()
        };
        let mut builder = Statement::new("SELECT ");
        for streams in [true, false] {
            if !streams {
                builder.push(", ");
            }
            builder.push("(SELECT coalesce(sum(records), 0) FROM log_volume WHERE tenant = ");
            push_rollup_range(&mut builder, tenant, &sample);
            if streams {
                push_catalog_narrowing(&mut builder, tenant, &sample);
                push_stream_conditions(&mut builder, &sample, VOLUME_LEVEL);
            }
            builder.push(")");
        }
        let (selected, all): (i64, i64) = builder
            .query()
            .try_map(|row: sqlx::sqlite::SqliteRow| Ok((row.try_get(0)?, row.try_get(1)?)))
            .fetch_one(&mut **conn)
            .await
            .map_err(unavailable)?;
        Ok(selected.saturating_mul(SPARSE_SHARE) < all)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::model::selection::TextCondition;
    use crate::observability::metrics::Registry;
    use crate::storage::metrics::StorageMetrics;
    use crate::storage::sqlite::SqliteStore;

    /// The hour the rollup rows below are in.
    const HOUR: i64 = 1_800_000_000 / 3600 * 3600;

    fn service(name: &str, from: i64, to: i64) -> Selection {
        let at = |seconds| DateTime::<Utc>::from_timestamp(seconds, 0).unwrap();
        Selection {
            services: vec![TextCondition::Eq(name.into())],
            ..Selection::range(at(from), at(to))
        }
    }

    #[tokio::test]
    async fn a_read_of_a_few_streams_among_many_is_split_while_a_connection_is_spare() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("split.db").display());
        let metrics = Arc::new(StorageMetrics::register(&Registry::new()));
        let store = SqliteStore::connect(&url, metrics).await.unwrap();
        store.migrate().await.unwrap();
        // Each minute of the first half hour: 5 lines of `rare`, 100 of `bulk`, 50 of
        // `middling`. `late` has its lines only in the second hour, 1,000 a minute, alone.
        for minute in (0..30).chain(60..120) {
            let at = HOUR + minute * 60;
            let rows: &[(&str, i64)] = if minute < 30 {
                &[("rare", 5), ("bulk", 100), ("middling", 50)]
            } else {
                &[("late", 1000)]
            };
            for (name, records) in rows {
                sqlx::query(
                    "INSERT INTO log_volume (tenant, minute, service, severity, level, records, bytes) \
                     VALUES ('t', ?, ?, 9, '', ?, 0)",
                )
                .bind(at)
                .bind(name)
                .bind(records)
                .execute(store.pool())
                .await
                .unwrap();
            }
        }
        let reader = store.reader(4, Duration::from_secs(5)).await.unwrap();
        let mut conn = reader.acquire().await.unwrap();
        let half_hour = |name| service(name, HOUR, HOUR + 1800);

        let split = reader
            .split_read(&mut conn, "t", &half_hour("rare"), Order::Any, None)
            .await
            .unwrap();
        let (early, late, second) = split.expect("5 lines in 160 are few");
        let middle = DateTime::<Utc>::from_timestamp(HOUR + 900, 0).unwrap();
        assert_eq!((early.to, late.from), (middle, middle));
        drop(second);
        // Among all the tenant's, not its own stream's: a third is many.
        for (name, order, limit) in [
            ("middling", Order::Any, None),
            ("bulk", Order::Any, None),
            ("rare", Order::Newest, None),
            ("rare", Order::Any, Some(100)),
        ] {
            let split = reader
                .split_read(&mut conn, "t", &half_hour(name), order, limit)
                .await
                .unwrap();
            assert!(split.is_none(), "{name} {order:?} {limit:?}");
        }
        // Too short a range to be worth a second statement.
        let minute = service("rare", HOUR, HOUR + 60);
        let split = reader.split_read(&mut conn, "t", &minute, Order::Any, None);
        assert!(split.await.unwrap().is_none());
        // The share is taken over the first hour of the range, whatever comes after: `late`,
        // most of the two hours' lines, has none in the first.
        let two_hours = service("late", HOUR, HOUR + 7200);
        let split = reader.split_read(&mut conn, "t", &two_hours, Order::Any, None);
        assert!(split.await.unwrap().is_some(), "none among many is few");

        // Of four connections, `conn` and two other reads' taken: the last stays for a fourth.
        let others = (reader.acquire().await, reader.acquire().await);
        let rare = half_hour("rare");
        let split = reader.split_read(&mut conn, "t", &rare, Order::Any, None);
        assert!(split.await.unwrap().is_none(), "no connection to spare");
        drop((others, conn));
        store.close().await;
    }
}
