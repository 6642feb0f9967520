//! PostgreSQL retention: daily partitions of `logs` created ahead and dropped whole, old rows of
//! the default partition deleted in chunks, and the BRIN ranges of recent days summarized.
//!
//! Partitions are named `logs_pYYYYMMDD` and cover one UTC day. A run holds a session advisory
//! lock taken with `pg_try_advisory_lock`, so among replicas sharing the database one works and
//! the others skip. The session is a connection of its own, not one of the writer's pool, which
//! it would take from ingest for as long as the run lasts. DDL on a partition briefly needs a
//! strong lock on `logs`; every statement of the session runs with a short `lock_timeout`, so
//! ingest never queues behind it for longer than that (a run that cannot get its lock fails and
//! the next one tries again). On Citus the deletes and summaries run shard by shard.

use chrono::{DateTime, Days, NaiveDate, Utc};
use sqlx::{Connection, PgConnection};

use super::streams::hour_start;
use super::{citus, Flavor, PostgresStore};
use crate::storage::chunked_delete::{CHUNK_PAUSE, DELETE_CHUNK};
use crate::storage::error::{unavailable, StoreError};
use crate::storage::volume::{volume_cutoff, VOLUME_TENANTS_SQL};

/// The advisory lock key that elects the replica doing retention ("loghaul\0" in ASCII).
pub const RETENTION_LOCK_KEY: i64 = 0x6c6f_6768_6175_6c00;
/// How long DDL waits for its lock on `logs` (and so how long inserts can queue behind it).
const LOCK_TIMEOUT: &str = "1s";
/// SQLSTATE when a new partition's range holds rows already stored in the default partition.
const DEFAULT_PARTITION_HAS_ROWS: &str = "23514";

/// The partition holding `day`.
pub fn partition_name(day: NaiveDate) -> String {
    format!("logs_p{}", day.format("%Y%m%d"))
}

/// The day a partition name stands for, if it is one of ours.
pub fn partition_day(name: &str) -> Option<NaiveDate> {
    let digits = name.strip_prefix("logs_p")?;
    NaiveDate::parse_from_str(digits, "%Y%m%d").ok()
}

/// The names of every partition of `logs`, from the catalog.
pub(crate) async fn partitions(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'logs'::regclass ORDER BY 1",
    )
    .fetch_all(conn)
    .await
}

/// The partition holding hour `hour` (0..24) of `day`, on servers where days are split in hours.
pub fn hour_partition_name(day: NaiveDate, hour: u32) -> String {
    format!("logs_p{}_h{hour:02}", day.format("%Y%m%d"))
}

/// The indexes a past heap leaf gets (`hour_index.rs`): each one's name after the leaf's, and
/// what it indexes.
pub(super) const PAST_HOUR_INDEXES: [(&str, &str); 2] = [
    ("_service", "(tenant, service, ts)"),
    ("_labels", "USING gin (labels jsonb_path_ops)"),
];

/// The statements that give a new heap partition `name` its indexes. They are per partition, not
/// on `logs`, because a sealed partition is columnar and takes no BRIN index.
fn brin_indexes(name: &str) -> [String; 2] {
    ["ts", "received_at"].map(|column| {
        format!(
            "CREATE INDEX IF NOT EXISTS {name}_{column} ON {name} \
             USING brin ({column}) WITH (autosummarize = on)"
        )
    })
}

/// The statements that create the partition of `day`: on one server a day split into 24 hourly
/// heap partitions, each sealed on its own once it is past; on Citus (which cannot distribute a
/// table partitioned twice) one heap partition for the day.
fn day_partition_ddl(day: NaiveDate, flavor: Flavor) -> Vec<String> {
    let name = partition_name(day);
    let next = day + Days::new(1);
    let bounds = format!("FOR VALUES FROM ('{day} 00:00:00+00') TO ('{next} 00:00:00+00')");
    if flavor == Flavor::Citus {
        let mut ddl = vec![format!("CREATE TABLE {name} PARTITION OF logs {bounds}")];
        ddl.extend(brin_indexes(&name));
        return ddl;
    }
    let mut ddl = vec![format!(
        "CREATE TABLE {name} PARTITION OF logs {bounds} PARTITION BY RANGE (ts)"
    )];
    for hour in 0..24 {
        let leaf = hour_partition_name(day, hour);
        let from = day.and_hms_opt(hour, 0, 0).expect("an hour of the day");
        let to = from + chrono::TimeDelta::hours(1);
        ddl.push(format!(
            "CREATE TABLE {leaf} PARTITION OF {name} FOR VALUES FROM ('{from}+00') TO ('{to}+00')"
        ));
        ddl.extend(brin_indexes(&leaf));
    }
    ddl
}

/// Creates the partitions of the days `first..=last` that do not exist; returns how many it made.
pub async fn create_partitions(
    conn: &mut PgConnection,
    first: NaiveDate,
    last: NaiveDate,
) -> Result<u64, sqlx::Error> {
    let flavor = Flavor::detect(conn).await?;
    let existing = partitions(conn).await?;
    let mut created = 0;
    let mut day = first;
    while day <= last {
        let name = partition_name(day);
        if !existing.contains(&name) {
            // One transaction per day, so that a day never exists without its hours.
            let mut tx = conn.begin().await?;
            let mut made = Ok(());
            for statement in day_partition_ddl(day, flavor) {
                made = sqlx::query(&statement).execute(&mut *tx).await.map(drop);
                if made.is_err() {
                    break;
                }
            }
            match made {
                Ok(()) => {
                    tx.commit().await?;
                    created += 1;
                }
                // Rows of that day already sit in the default partition (retention was off, or
                // they were older than any partition): leave them there; they are deleted in
                // chunks when they leave the window.
                Err(sqlx::Error::Database(db))
                    if db.code().as_deref() == Some(DEFAULT_PARTITION_HAS_ROWS) =>
                {
                    tracing::warn!(partition = %name, "not creating a partition whose day already has rows in logs_default");
                }
                Err(err) => return Err(err),
            }
        }
        day = day + Days::new(1);
    }
    Ok(created)
}

/// A retention run's session: a connection of its own whose DDL waits at most `LOCK_TIMEOUT`.
#[derive(Debug)]
pub struct PgRetention {
    conn: PgConnection,
    flavor: Flavor,
}

impl PostgresStore {
    pub(in crate::storage) async fn retention(&self) -> Result<PgRetention, StoreError> {
        let mut conn = PgConnection::connect(self.url.as_str())
            .await
            .map_err(unavailable)?;
        sqlx::query(&format!("SET lock_timeout = '{LOCK_TIMEOUT}'"))
            .execute(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(PgRetention {
            conn,
            flavor: self.flavor,
        })
    }
}

impl PgRetention {
    pub(in crate::storage) async fn try_lock(&mut self) -> Result<bool, StoreError> {
        sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(RETENTION_LOCK_KEY)
            .fetch_one(&mut self.conn)
            .await
            .map_err(unavailable)
    }

    /// Errors are ignored: closing the session releases the lock anyway.
    pub(in crate::storage) async fn unlock(&mut self) {
        let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(RETENTION_LOCK_KEY)
            .execute(&mut self.conn)
            .await;
    }

    pub(in crate::storage) async fn create_partitions(
        &mut self,
        first: NaiveDate,
        last: NaiveDate,
    ) -> Result<u64, StoreError> {
        create_partitions(&mut self.conn, first, last)
            .await
            .map_err(unavailable)
    }

    pub(in crate::storage) async fn summarize_recent(&mut self, now: DateTime<Utc>) -> u64 {
        match self.flavor {
            Flavor::Plain => summarize_recent(&mut self.conn, now).await,
            Flavor::Citus => summarize_recent_per_shard(&mut self.conn, now).await,
        }
    }

    /// Drops every daily partition whose day ends at or before `cutoff`; returns how many.
    pub(in crate::storage) async fn drop_partitions_ending_by(
        &mut self,
        cutoff: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let mut dropped = 0;
        for name in partitions(&mut self.conn).await.map_err(unavailable)? {
            let Some(day) = partition_day(&name) else {
                continue;
            };
            let end = (day + Days::new(1))
                .and_hms_opt(0, 0, 0)
                .expect("midnight exists")
                .and_utc();
            if end <= cutoff {
                // Dropping a partition removes its rows and its index entries at once.
                sqlx::query(&format!("DROP TABLE IF EXISTS {name}"))
                    .execute(&mut self.conn)
                    .await
                    .map_err(unavailable)?;
                dropped += 1;
                tracing::info!(partition = %name, "dropped a partition older than the retention window");
            }
        }
        Ok(dropped)
    }

    /// Deletes the rows of the default partition older than `horizon`, in chunks; returns how
    /// many. Rows of a day with a partition go with their partition. The stream catalog forgets
    /// its hours before the horizon's.
    pub(in crate::storage) async fn delete_before(
        &mut self,
        horizon: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        // The stream catalog's hours before the horizon's: every row of theirs is gone with it.
        let forget = hour_start(horizon);
        if self.flavor == Flavor::Citus {
            let deleted =
                citus::delete_per_shard(&mut self.conn, "logs_default", "ts", horizon).await?;
            citus::delete_per_shard(&mut self.conn, "streams", "hour", forget).await?;
            return Ok(deleted);
        }
        let deleted = delete_older(&mut self.conn, "logs_default", "ts", horizon).await?;
        delete_older(&mut self.conn, "streams", "hour", forget).await?;
        Ok(deleted)
    }

    /// Deletes the rollup's minutes that ended before `horizon`: a tenant at a time through the
    /// primary key, in chunks (on Citus, shard by shard). Ingest never writes those minutes
    /// again (it refuses records older than the window), so the deletes wait on no writer.
    pub(in crate::storage) async fn delete_volume_before(
        &mut self,
        horizon: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let cutoff = volume_cutoff(horizon);
        if self.flavor == Flavor::Citus {
            return Ok(
                citus::delete_per_shard(&mut self.conn, "log_volume", "minute", cutoff).await?,
            );
        }
        let tenants: Vec<String> = sqlx::query_scalar(VOLUME_TENANTS_SQL)
            .fetch_all(&mut self.conn)
            .await
            .map_err(unavailable)?;
        let mut deleted = 0;
        for tenant in &tenants {
            deleted += delete_in_rounds(&mut self.conn, || {
                sqlx::query(
                    "DELETE FROM log_volume WHERE ctid = ANY(ARRAY( \
                       SELECT ctid FROM log_volume WHERE tenant = $1 AND minute < $2 LIMIT $3))",
                )
                .bind(tenant)
                .bind(cutoff)
                .bind(DELETE_CHUNK)
            })
            .await?;
        }
        Ok(deleted)
    }

    pub(in crate::storage) async fn close(self) -> Result<(), StoreError> {
        self.conn.close().await.map_err(unavailable)
    }
}

/// The tables whose BRIN ranges are summarized: the partitions of today and yesterday (with their
/// hours), and the default one.
fn recent_tables(now: DateTime<Utc>) -> Vec<String> {
    let today = now.date_naive();
    vec![
        partition_name(today),
        partition_name(today - Days::new(1)),
        "logs_default".to_owned(),
    ]
}

/// Summarizes the new BRIN ranges of the recent tables' shards. Each shard holds a fraction of a
/// day, so one statement per shard is the pacing.
async fn summarize_recent_per_shard(conn: &mut PgConnection, now: DateTime<Utc>) -> u64 {
    let existing = match partitions(conn).await {
        Ok(existing) => existing,
        Err(err) => {
            tracing::warn!(error = %err, "cannot list partitions to summarize");
            return 0;
        }
    };
    let mut summarized = 0;
    for table in recent_tables(now) {
        if !existing.contains(&table) {
            continue;
        }
        match citus::summarize_per_shard(conn, &table).await {
            Ok(ranges) => summarized += ranges,
            Err(err) => {
                tracing::warn!(table = %table, error = %err, "BRIN summarization failed; retrying next run")
            }
        }
    }
    summarized
}

/// BRIN ranges summarized per statement: 16 of the default 128 pages, 16 MiB of heap.
const SUMMARIZE_STEP_RANGES: i64 = 16;

/// Summarizes the BRIN ranges that filled since the last summary in the partitions of today and
/// yesterday (and the default one). Autosummarize asks autovacuum to do this as each range fills,
/// but autovacuum keeps only a small queue of such requests and drops the rest under heavy
/// ingest; an unsummarized range matches every query, so reads would scan it whole. Failures (a
/// vacuum holding the lock, say) are only logged: the next run tries again.
///
/// The work is paced, a few ranges per statement with a pause twice as long as the statement
/// took, so it takes at most a third of one core from ingest. One statement per index
/// (`brin_summarize_new_values`) would read a whole day's partition at once, holding a core and
/// the disk for seconds while the acks of every batch written meanwhile wait.
async fn summarize_recent(conn: &mut PgConnection, now: DateTime<Utc>) -> u64 {
    let tables = recent_tables(now);
    let indexes: Vec<(String, i64, i64)> = match sqlx::query_as(
        "SELECT ic.oid::regclass::text, \
                pg_relation_size(t.oid) / current_setting('block_size')::bigint, \
                coalesce((SELECT option_value::bigint FROM pg_options_to_table(ic.reloptions) \
                          WHERE option_name = 'pages_per_range'), 128) \
         FROM pg_index x \
         JOIN pg_class ic ON ic.oid = x.indexrelid JOIN pg_am am ON am.oid = ic.relam \
         JOIN pg_class t ON t.oid = x.indrelid \
         WHERE am.amname = 'brin' AND (t.relname = ANY($1) OR EXISTS ( \
               SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent \
               WHERE i.inhrelid = t.oid AND p.relname = ANY($1)))",
    )
    .bind(&tables)
    .fetch_all(&mut *conn)
    .await
    {
        Ok(indexes) => indexes,
        Err(err) => {
            tracing::warn!(error = %err, "cannot list BRIN indexes to summarize");
            return 0;
        }
    };
    let mut summarized = 0;
    for (index, blocks, pages_per_range) in indexes {
        match summarize_paced(conn, &index, blocks, pages_per_range).await {
            Ok(ranges) => summarized += ranges,
            Err(err) => {
                tracing::warn!(index = %index, error = %err, "BRIN summarization failed; retrying next run")
            }
        }
    }
    summarized
}

/// Summarizes the unsummarized ranges of `index` over a table of `blocks` blocks, a few per
/// statement. Ranges already summarized cost a lookup each and no pause.
async fn summarize_paced(
    conn: &mut PgConnection,
    index: &str,
    blocks: i64,
    pages_per_range: i64,
) -> Result<u64, sqlx::Error> {
    let step = SUMMARIZE_STEP_RANGES * pages_per_range.max(1);
    let mut summarized = 0;
    let mut first = 0;
    while first < blocks {
        let started = std::time::Instant::now();
        let ranges: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(brin_summarize_range($1::regclass, block)), 0)::bigint \
             FROM generate_series($2::bigint, $3::bigint, $4::bigint) AS block",
        )
        .bind(index)
        .bind(first)
        .bind((first + step).min(blocks) - 1)
        .bind(pages_per_range.max(1))
        .fetch_one(&mut *conn)
        .await?;
        first += step;
        if ranges > 0 {
            summarized += ranges as u64;
            tokio::time::sleep((started.elapsed() * 2).max(CHUNK_PAUSE)).await;
        }
    }
    Ok(summarized)
}

/// Runs the delete `statement` makes (at most [`DELETE_CHUNK`] rows each) on `conn` until one
/// comes back short, pausing [`CHUNK_PAUSE`] between rounds; returns the rows deleted. The
/// session's own connection, which [`crate::storage::chunked_delete::delete_in_chunks`]'s
/// closures cannot borrow from one round to the next.
/// Deletes the rows of `table` whose `column` is before `before`, in chunks, as
/// [`citus::delete_per_shard`] does shard by shard; returns how many.
async fn delete_older(
    conn: &mut PgConnection,
    table: &str,
    column: &str,
    before: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let statement = format!(
        "DELETE FROM {table} WHERE ctid = ANY(ARRAY( \
           SELECT ctid FROM {table} WHERE {column} < $1 LIMIT $2))"
    );
    delete_in_rounds(conn, || {
        sqlx::query(&statement).bind(before).bind(DELETE_CHUNK)
    })
    .await
}

async fn delete_in_rounds<'q>(
    conn: &mut PgConnection,
    statement: impl Fn() -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<u64, StoreError> {
    let mut deleted = 0;
    loop {
        let chunk = statement()
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?
            .rows_affected();
        deleted += chunk;
        if chunk < DELETE_CHUNK as u64 {
            return Ok(deleted);
        }
        tokio::time::sleep(CHUNK_PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_round_trip_and_foreign_tables_are_ignored() {
        let day = NaiveDate::from_ymd_opt(2026, 11, 29).unwrap();
        assert_eq!(partition_name(day), "logs_p20261129");
        assert_eq!(partition_day("logs_p20261129"), Some(day));
        assert_eq!(partition_day("logs_default"), None);
        assert_eq!(partition_day("logs_p2026"), None);
    }
}
