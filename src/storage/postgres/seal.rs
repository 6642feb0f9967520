//! Sealing: a past hour of `logs` rewritten into a compressed columnar partition.
//!
//! Rows land in heap partitions, where inserts, chunk-key claims and tail are cheapest. Once an
//! hour is past (plus a grace for late rows), it is copied, ordered by tenant, service, severity
//! and time, into a new table of the `columnar` access method (from the `citus_columnar`
//! extension), and the new table takes the heap's place in the partition tree. A large hour is
//! copied a slice of its time range at a time, and the copy may rest between slices, so that
//! sealing leaves the database's cores to ingest.
//!
//! **Nothing lost, nothing doubled.** The copy reads one snapshot and blocks nobody. Rows that
//! snapshot cannot see (late rows committed during the copy) were inserted by transactions that
//! had not started, or not finished, when it was taken, and `received_at` is the inserting
//! transaction's start time. So before the snapshot the oldest transaction start of the server
//! is noted, and the heap's rows received since then that the new table lacks (by id) are copied
//! too, using the BRIN index on `received_at`: a few times without a lock while many arrive, then
//! once more inside the swap, with inserts held off. The swap then detaches the heap, attaches the
//! columnar table with the same bounds and drops the heap, in one transaction whose locks are held
//! for milliseconds (a `CHECK` constraint spares the attach its validating scan). A lock it cannot
//! get within [`SWAP_LOCK_TIMEOUT`] fails the swap, which is tried again a few times (then the
//! seal fails, and the next run tries it again); ingest queues behind it for at most that long
//! each time.
//!
//! **Late rows after the seal** go into the columnar partition itself (columnar tables take
//! inserts), each transaction's rows as a small stripe of their own. A partition that gathered
//! [`RESEAL_SMALL_STRIPES`] such stripes is sealed again the same way.
//!
//! **On Citus** a leaf is a whole day, distributed by tenant: the new table is distributed too,
//! colocated with `logs`, so that each worker copies its own shards, and the catch-up matches rows
//! by tenant as well as id so that it runs shard by shard. The coordinator's tables are empty
//! shells, so sizes and stripes are asked of the shards.

use std::str::FromStr;
use std::time::{Duration, Instant};

use chrono::{DateTime, Days, TimeDelta, Utc};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use super::retention::{hour_partition_name, partition_day, PAST_HOUR_INDEXES};
use super::{citus, Flavor, PostgresStore};
use crate::storage::error::{unavailable, StoreError};

/// The advisory lock key that elects the replica doing the sealing ("loghaulS" in ASCII).
const SEAL_LOCK_KEY: i64 = 0x6c6f_6768_6175_6c53;
/// How long the swap waits for its locks, and so how long ingest can queue behind it.
const SWAP_LOCK_TIMEOUT: &str = "200ms";
/// PostgreSQL's `lock_not_available`: a lock not granted within `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";
/// Swaps tried before a seal fails for want of its locks.
const SWAP_ATTEMPTS: u32 = 5;
/// The rest between two swaps, which lets the reads that held the locks end.
const SWAP_RETRY_REST: Duration = Duration::from_millis(500);
/// A stripe of fewer rows than this was written by late rows, not by a seal.
const SMALL_STRIPE_ROWS: i64 = 10_000;
/// Small stripes a sealed partition gathers before it is sealed again.
pub(crate) const RESEAL_SMALL_STRIPES: i64 = 16;
/// Catch-up passes before the swap, while rows for the hour keep arriving.
const UNLOCKED_CATCH_UPS: usize = 3;
/// A catch-up that added fewer rows than this leaves little for the locked one.
const FEW_LATE_ROWS: u64 = 1_000;
/// The order rows are sealed in. A chunk group stores each column's values apart, so rows alike
/// side by side compress best, and a service's lines of one severity are mostly of one stream and
/// alike (`storage.py` in docs/bench measures it); a chunk group's minimum and maximum severity
/// then also let a read by severity skip it.
const SEALED_ORDER: &str = "tenant, service, severity, ts";
/// zstd level of sealed data.
const COMPRESSION_LEVEL: u8 = 9;
/// Bytes of a partition copied per slice: a paced seal rests after each. A partition smaller
/// than this is copied whole, in one [`SEALED_ORDER`], which its reads prune best; a larger one
/// is copied a slice of its time range at a time, each slice so ordered.
const SLICE_BYTES: i64 = 64 << 20;
/// The most slices a partition is copied in.
const MAX_SLICES: i64 = 60;

/// How a seal spreads its copy: slices of the partition, and rests between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Percent of the time the copy keeps its session busy.
    pub busy_percent: u8,
    /// Bytes of the partition copied per slice.
    pub slice_bytes: i64,
}

impl Pace {
    /// Busy `busy_percent` of the time, in slices of the default size.
    pub fn new(busy_percent: u8) -> Pace {
        Pace {
            busy_percent,
            slice_bytes: SLICE_BYTES,
        }
    }

    /// How many slices a partition of `bytes` is copied in.
    fn slices(&self, bytes: i64) -> i32 {
        (bytes / self.slice_bytes.max(1) + 1).clamp(1, MAX_SLICES) as i32
    }

    /// How long to rest after `worked`, for a share of `busy_percent` of the time working.
    fn rest_after(&self, worked: Duration) -> Duration {
        let busy = f64::from(self.busy_percent.clamp(1, 100)) / 100.0;
        worked.mul_f64((1.0 - busy) / busy)
    }
}

/// Chunk groups a sealed hour is cut into, at least: a read decompresses whole chunk groups,
/// and with the extension's default of 10,000 rows a small hour was one or two of them, so that a
/// page of one minute cost as much as a scan of the hour.
const CHUNK_GROUPS_PER_HOUR: i64 = 100;
/// The fewest rows per chunk group (the extension's least).
const MIN_CHUNK_GROUP_ROWS: i64 = 1_000;
/// The most: the extension's default. Smaller groups than this cost disk in a large hour (each
/// holds its own minimum, maximum and compression frame per column).
const MAX_CHUNK_GROUP_ROWS: i64 = 10_000;

/// Rows per chunk group of a sealed partition of `rows` rows.
fn chunk_group_rows(rows: i64) -> i64 {
    (rows / CHUNK_GROUPS_PER_HOUR).clamp(MIN_CHUNK_GROUP_ROWS, MAX_CHUNK_GROUP_ROWS)
}

/// Whether this server can seal, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sealing {
    /// The `columnar` access method is there.
    On,
    /// It is not, for this reason; partitions stay heap.
    Off(String),
}

/// Makes the columnar access method available if the server has it: present already, or
/// `CREATE EXTENSION citus_columnar` succeeds (on a Citus coordinator, on its workers too).
pub async fn sealing(conn: &mut PgConnection) -> Result<Sealing, sqlx::Error> {
    if has_columnar(conn).await? {
        return Ok(Sealing::On);
    }
    match sqlx::query("CREATE EXTENSION IF NOT EXISTS citus_columnar")
        .execute(&mut *conn)
        .await
    {
        Ok(_) if has_columnar(conn).await? => Ok(Sealing::On),
        Ok(_) => Ok(Sealing::Off(
            "citus_columnar is installed but provides no columnar access method".into(),
        )),
        Err(sqlx::Error::Database(db)) => Ok(Sealing::Off(format!(
            "the citus_columnar extension is not available: {}",
            db.message()
        ))),
        Err(err) => Err(err),
    }
}

async fn has_columnar(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_am WHERE amname = 'columnar')")
        .fetch_one(conn)
        .await
}

/// A leaf partition of `logs`: a heap hour (or a whole day, for days created before hours), or a
/// sealed one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// The table.
    pub name: String,
    /// The table it is a partition of: a day, or `logs`.
    pub parent: String,
    /// Its range of `ts`.
    pub from: DateTime<Utc>,
    /// The end of its range (excluded).
    pub to: DateTime<Utc>,
    /// Columnar (sealed) rather than heap.
    pub sealed: bool,
    /// Stripes written by late rows after it was sealed.
    pub small_stripes: i64,
    /// Bytes of its table; 0 for a heap no row was ever written to (on Citus, that holds none).
    pub bytes: i64,
    /// It has every index of a past hour, valid ([`super::hour_index`]).
    pub indexed: bool,
}

impl Leaf {
    /// Whether the next run should seal it, given the newest range end that may be sealed. A heap
    /// that never had a row stays one: most hours of a quiet tenant's days, and every hour created
    /// ahead, would otherwise each cost a swap for nothing.
    pub fn wants_sealing(&self, cutoff: DateTime<Utc>) -> bool {
        self.to <= cutoff
            && if self.sealed {
                self.small_stripes >= RESEAL_SMALL_STRIPES
            } else {
                self.bytes > 0
            }
    }
}

#[cfg(test)]
impl Leaf {
    /// Hour `hour` of `day` as a heap leaf no row was written to, for the policies' unit tests.
    pub(super) fn empty_heap_hour(day: chrono::NaiveDate, hour: u32) -> Leaf {
        let name = hour_partition_name(day, hour);
        let (from, to) = leaf_range(&name).expect("an hour's name");
        Leaf {
            name,
            parent: super::retention::partition_name(day),
            from,
            to,
            sealed: false,
            small_stripes: 0,
            bytes: 0,
            indexed: false,
        }
    }
}

/// The range a partition name stands for: `logs_pYYYYMMDD_hHH` an hour, `logs_pYYYYMMDD` a day.
fn leaf_range(name: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    if let Some(day) = partition_day(name) {
        let from = day.and_hms_opt(0, 0, 0)?.and_utc();
        return Some((from, (day + Days::new(1)).and_hms_opt(0, 0, 0)?.and_utc()));
    }
    let (day, hour) = name.rsplit_once("_h")?;
    let day = partition_day(day)?;
    let hour: u32 = hour.parse().ok()?;
    if hour_partition_name(day, hour) != name {
        return None;
    }
    let from = day.and_hms_opt(hour, 0, 0)?.and_utc();
    Some((from, from + TimeDelta::hours(1)))
}

/// Every leaf partition of `logs` with a range loghaul names, oldest first.
pub async fn leaves(conn: &mut PgConnection, flavor: Flavor) -> Result<Vec<Leaf>, StoreError> {
    // Without the extension there is no `columnar.stripe` to name, and no columnar leaf. On
    // Citus the coordinator's tables are empty shells: sizes are the shards', and stripes are
    // counted on the workers, below.
    let columnar = has_columnar(&mut *conn).await.map_err(unavailable)?;
    let small_stripes = if columnar && flavor == Flavor::Plain {
        "CASE WHEN am.amname = 'columnar' THEN ( \
             SELECT count(*) FROM columnar.stripe s \
             WHERE s.relation = c.oid::regclass AND s.row_count < $1) ELSE 0 END"
    } else {
        "0::int8 + 0 * $1"
    };
    let size = size_function(flavor, false);
    let rows: Vec<(String, String, bool, i64, i64, bool)> = sqlx::query_as(&format!(
        "SELECT c.relname::text, p.relname::text, am.amname = 'columnar', {small_stripes}, \
                {size}(c.oid), \
                (SELECT count(*) FROM pg_index x JOIN pg_class xc ON xc.oid = x.indexrelid \
                 WHERE x.indrelid = c.oid AND x.indisvalid \
                   AND xc.relname = ANY(SELECT c.relname || suffix FROM unnest($2::text[]) suffix)) \
                = cardinality($2::text[]) \
         FROM pg_class c \
         JOIN pg_inherits i ON i.inhrelid = c.oid \
         JOIN pg_class p ON p.oid = i.inhparent \
         JOIN pg_am am ON am.oid = c.relam \
         WHERE c.relkind = 'r' AND (p.relname = 'logs' OR p.oid IN ( \
             SELECT inhrelid FROM pg_inherits WHERE inhparent = 'logs'::regclass))"
    ))
    .bind(SMALL_STRIPE_ROWS)
    .bind(PAST_HOUR_INDEXES.map(|(suffix, _)| suffix).to_vec())
    .fetch_all(&mut *conn)
    .await
    .map_err(unavailable)?;
    let mut leaves: Vec<Leaf> = rows
        .into_iter()
        .filter_map(|(name, parent, sealed, small_stripes, bytes, indexed)| {
            let (from, to) = leaf_range(&name)?;
            Some(Leaf {
                name,
                parent,
                from,
                to,
                sealed,
                small_stripes,
                bytes,
                indexed,
            })
        })
        .collect();
    if flavor == Flavor::Citus {
        // A sealed day's late rows are stripes of the shards of the tenants that sent them.
        let command = format!(
            "SELECT count(*) FROM columnar.stripe \
             WHERE relation = '%1$s'::regclass AND row_count < {SMALL_STRIPE_ROWS}"
        );
        for leaf in leaves.iter_mut() {
            if leaf.sealed {
                leaf.small_stripes = citus::max_per_shard(conn, &leaf.name, &command).await?;
            } else if leaf.bytes > 0 {
                // Every shard of a heap takes a page before its first row.
                let any: bool =
                    sqlx::query_scalar(&format!("SELECT EXISTS (SELECT 1 FROM {})", leaf.name))
                        .fetch_one(&mut *conn)
                        .await
                        .map_err(unavailable)?;
                if !any {
                    leaf.bytes = 0;
                }
            }
        }
    }
    leaves.sort_by_key(|leaf| leaf.from);
    Ok(leaves)
}

/// The function giving a table's bytes, with its indexes if `total`, else without them:
/// on Citus, its shards'.
fn size_function(flavor: Flavor, total: bool) -> &'static str {
    match (flavor, total) {
        (Flavor::Plain, false) => "pg_relation_size",
        (Flavor::Plain, true) => "pg_total_relation_size",
        (Flavor::Citus, false) => "citus_table_size",
        (Flavor::Citus, true) => "citus_total_relation_size",
    }
}

/// Drops the tables seals left when they failed or were interrupted (their heaps are still in
/// place); returns how many. Only the lock holder calls it, so no seal is using them.
async fn drop_leftovers(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    let leftovers: Vec<String> = sqlx::query_scalar(
        "SELECT relname::text FROM pg_class \
         WHERE relkind = 'r' AND relname LIKE 'logs\\_p%\\_sealing'",
    )
    .fetch_all(&mut *conn)
    .await?;
    for table in &leftovers {
        sqlx::query(&format!("DROP TABLE IF EXISTS {table}"))
            .execute(&mut *conn)
            .await?;
    }
    Ok(leftovers.len() as u64)
}

/// Bytes on disk of the leaf partitions, heap and columnar (indexes and TOAST included; on
/// Citus, of their shards).
async fn bytes_by_tier(conn: &mut PgConnection, flavor: Flavor) -> Result<(i64, i64), sqlx::Error> {
    let size = size_function(flavor, true);
    sqlx::query_as(&format!(
        "SELECT coalesce(sum({size}(c.oid)) FILTER (WHERE am.amname <> 'columnar'), 0)::bigint, \
                coalesce(sum({size}(c.oid)) FILTER (WHERE am.amname = 'columnar'), 0)::bigint \
         FROM pg_class c JOIN pg_am am ON am.oid = c.relam \
         WHERE c.relkind = 'r' AND c.oid IN ( \
             SELECT inhrelid FROM pg_inherits WHERE inhparent = 'logs'::regclass \
             UNION ALL \
             SELECT i2.inhrelid FROM pg_inherits i1 JOIN pg_inherits i2 ON i2.inhparent = i1.inhrelid \
             WHERE i1.inhparent = 'logs'::regclass)"
    ))
    .fetch_one(conn)
    .await
}

/// What one seal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// Rows copied from the snapshot.
    pub rows: u64,
    /// Rows that arrived during the copy and were added at the swap.
    pub caught_up: u64,
    /// How long the swap held (or waited for) its locks, its tries together: how long inserts
    /// and reads of the day could queue behind it.
    pub swap: Duration,
}

/// Rewrites `leaf` into a columnar table and swaps it in; see the module docs. The copy goes at
/// `pace`.
pub async fn seal(
    conn: &mut PgConnection,
    flavor: Flavor,
    leaf: &Leaf,
    pace: Pace,
) -> Result<Sealed, sqlx::Error> {
    let name = &leaf.name;
    let work = format!("{name}_sealing");
    let columns: String = sqlx::query_scalar(
        "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute \
         WHERE attrelid = 'logs'::regclass AND attnum > 0 AND NOT attisdropped",
    )
    .fetch_one(&mut *conn)
    .await?;
    let (from, to) = (timestamp(leaf.from), timestamp(leaf.to));
    // Counted: an hour nobody analyzed has no statistics to estimate from.
    let held: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {name}"))
        .fetch_one(&mut *conn)
        .await?;
    let chunk_group_rows = chunk_group_rows(held);
    // A table left by a seal that was interrupted holds nothing the heap does not.
    sqlx::query(&format!("DROP TABLE IF EXISTS {work}"))
        .execute(&mut *conn)
        .await?;
    for statement in [
        format!("CREATE TABLE {work} (LIKE logs INCLUDING DEFAULTS) USING columnar"),
        format!(
            "ALTER TABLE {work} SET (columnar.compression = zstd, \
             columnar.compression_level = {COMPRESSION_LEVEL}, \
             columnar.chunk_group_row_limit = {chunk_group_rows})"
        ),
        format!(
            "ALTER TABLE {work} ADD CONSTRAINT {work}_range CHECK (ts >= '{from}' AND ts < '{to}')"
        ),
    ] {
        sqlx::query(&statement).execute(&mut *conn).await?;
    }
    if flavor == Flavor::Citus {
        // Colocated with `logs`, so that the copy runs on each worker between its own shards,
        // and so that the table can become a partition of `logs`.
        sqlx::query(
            "SELECT create_distributed_table($1::regclass, 'tenant', colocate_with => 'logs')",
        )
        .bind(&work)
        .execute(&mut *conn)
        .await?;
    }

    let catch_up_from = oldest_transaction_start(conn).await?;
    let mut copy = conn.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *copy)
        .await?;
    // A slice is a range of time, which the past hour's index (tenant, service, ts) does not lead
    // with: reading the slice and sorting it beats walking the whole index for it.
    sqlx::query("SET LOCAL enable_indexscan = off")
        .execute(&mut *copy)
        .await?;
    // One transaction for every slice: one snapshot, and the extension writes full stripes
    // only at its commit, whatever the slices.
    let copy_slice = format!(
        "INSERT INTO {work} ({columns}) SELECT {columns} FROM {name} \
         WHERE ts >= $1 AND ts < $2 ORDER BY {SEALED_ORDER}"
    );
    let slice = (leaf.to - leaf.from) / pace.slices(leaf.bytes);
    let mut rows = 0;
    let mut start = leaf.from;
    while start < leaf.to {
        let end = (start + slice).min(leaf.to);
        let worked = Instant::now();
        rows += sqlx::query(&copy_slice)
            .bind(start)
            .bind(end)
            .execute(&mut *copy)
            .await?
            .rows_affected();
        if end < leaf.to {
            tokio::time::sleep(pace.rest_after(worked.elapsed())).await;
        }
        start = end;
    }
    copy.commit().await?;
    let catch_up = CatchUp {
        statement: format!(
            "INSERT INTO {work} ({columns}) SELECT {columns} FROM {name} l \
             WHERE l.received_at >= $1 AND NOT EXISTS ( \
                 SELECT 1 FROM {work} w \
                 WHERE w.received_at >= $1 AND w.tenant = l.tenant AND w.id = l.id) \
             ORDER BY {SEALED_ORDER}"
        ),
        from: catch_up_from,
        rows: 0,
    };
    let (caught_up, swap) = swap_in(conn, leaf, &work, catch_up).await?;
    // The planner's statistics of the new table; without them it guesses row counts.
    sqlx::query(&format!("ANALYZE {name}"))
        .execute(&mut *conn)
        .await?;
    Ok(Sealed {
        rows,
        caught_up,
        swap,
    })
}

/// The rows received during the copy that the new table still lacks, and how to add them.
struct CatchUp {
    /// Copies the heap's rows received since `$1` that the new table lacks.
    statement: String,
    /// Every row the new table lacks was received at or after this.
    from: DateTime<Utc>,
    /// Rows added so far.
    rows: u64,
}

impl CatchUp {
    /// Adds the rows received since the last pass, and notes when this pass started.
    async fn pass(&mut self, conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
        let from = oldest_transaction_start(conn).await?;
        let added = self.rows_since_last_pass(conn).await?;
        self.rows += added;
        self.from = from;
        Ok(added)
    }

    /// Runs the catch-up from the last pass on `conn`, and how many rows it added.
    async fn rows_since_last_pass(&self, conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query(&self.statement)
            .bind(self.from)
            .execute(conn)
            .await?
            .rows_affected())
    }
}

/// Catches `work` up with the heap and swaps it in for `leaf`: the rows caught up, and how long
/// the swap's tries held or waited for their locks in all. A swap that cannot get its locks within
/// [`SWAP_LOCK_TIMEOUT`] (reads of the day longer than that, on a busy server) is tried again
/// after a rest, a few times, rather than throwing the copy away.
async fn swap_in(
    conn: &mut PgConnection,
    leaf: &Leaf,
    work: &str,
    mut catch_up: CatchUp,
) -> Result<(u64, Duration), sqlx::Error> {
    let mut attempt = 1;
    // Each try, the failed ones too, held inserts and reads of the day off while it waited.
    let mut locked = Duration::ZERO;
    loop {
        // Rows that arrived meanwhile are added without a lock first, until few are left, so
        // that the locked catch-up of the swap has little to do.
        for _ in 0..UNLOCKED_CATCH_UPS {
            if catch_up.pass(conn).await? < FEW_LATE_ROWS {
                break;
            }
        }
        let locking = Instant::now();
        let result = swap(conn, leaf, work, &catch_up).await;
        locked += locking.elapsed();
        match result {
            Ok(added) => return Ok((catch_up.rows + added, locked)),
            Err(err) if attempt < SWAP_ATTEMPTS && lock_not_available(&err) => {
                tracing::info!(
                    partition = %leaf.name,
                    attempt,
                    "the seal's swap did not get its locks in time; trying again"
                );
                attempt += 1;
                tokio::time::sleep(SWAP_RETRY_REST).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// The swap itself: the last catch-up with inserts held off (the rows it added are returned),
/// then `work` in `leaf`'s place, in one transaction.
async fn swap(
    conn: &mut PgConnection,
    leaf: &Leaf,
    work: &str,
    catch_up: &CatchUp,
) -> Result<u64, sqlx::Error> {
    let name = &leaf.name;
    let (from, to) = (timestamp(leaf.from), timestamp(leaf.to));
    let mut swap = conn.begin().await?;
    sqlx::query(&format!("SET LOCAL lock_timeout = '{SWAP_LOCK_TIMEOUT}'"))
        .execute(&mut *swap)
        .await?;
    // Parent before child, the order inserts and reads take them in, so no deadlock.
    sqlx::query(&format!(
        "LOCK TABLE ONLY {} IN ACCESS EXCLUSIVE MODE",
        leaf.parent
    ))
    .execute(&mut *swap)
    .await?;
    sqlx::query(&format!("LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE"))
        .execute(&mut *swap)
        .await?;
    let added = catch_up.rows_since_last_pass(&mut swap).await?;
    for statement in [
        format!("ALTER TABLE {} DETACH PARTITION {name}", leaf.parent),
        format!(
            "ALTER TABLE {} ATTACH PARTITION {work} FOR VALUES FROM ('{from}') TO ('{to}')",
            leaf.parent
        ),
        format!("DROP TABLE {name}"),
        format!("ALTER TABLE {work} RENAME TO {name}"),
    ] {
        sqlx::query(&statement).execute(&mut *swap).await?;
    }
    swap.commit().await?;
    Ok(added)
}

/// Whether `err` is [`LOCK_NOT_AVAILABLE`].
fn lock_not_available(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == LOCK_NOT_AVAILABLE)
}

/// The oldest start among the open transactions of client sessions on this database (or now):
/// every row a snapshot taken after this misses was received at or after it. Autovacuum and other
/// background workers insert no rows, and one vacuuming for an hour would otherwise widen the
/// catch-up, which the swap runs under its locks, to the whole hour.
async fn oldest_transaction_start(conn: &mut PgConnection) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT least(now(), min(xact_start)) FROM pg_stat_activity \
         WHERE xact_start IS NOT NULL AND backend_type = 'client backend' \
           AND datname = current_database()",
    )
    .fetch_one(conn)
    .await
}

/// A timestamp as a literal PostgreSQL reads as UTC.
fn timestamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S+00").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    #[test]
    fn a_small_hour_is_cut_into_small_chunk_groups_and_a_large_one_keeps_the_default() {
        assert_eq!(chunk_group_rows(0), 1_000);
        assert_eq!(chunk_group_rows(14_000), 1_000);
        assert_eq!(chunk_group_rows(500_000), 5_000);
        assert_eq!(chunk_group_rows(3_000_000), 10_000);
    }

    #[test]
    fn a_small_partition_is_copied_whole_and_a_large_one_in_slices() {
        let pace = Pace::new(20);
        assert_eq!(pace.slices(0), 1);
        assert_eq!(pace.slices(SLICE_BYTES - 1), 1);
        assert_eq!(pace.slices(SLICE_BYTES * 20), 21);
        assert_eq!(pace.slices(i64::MAX), MAX_SLICES as i32);
    }

    #[test]
    fn a_paced_seal_rests_so_that_it_works_its_share_of_the_time() {
        let worked = Duration::from_millis(400);
        let rest = |busy_percent| Pace::new(busy_percent).rest_after(worked);
        assert_eq!(rest(100), Duration::ZERO);
        assert_eq!(rest(20), Duration::from_millis(1600));
        assert_eq!(rest(50), worked);
        assert_eq!(rest(0), rest(1), "never a division by 0");
    }

    #[test]
    fn leaf_ranges_come_from_names_of_hours_and_days() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 5).unwrap();
        let at = |h: u32| day.and_hms_opt(h, 0, 0).unwrap().and_utc();
        assert_eq!(leaf_range("logs_p20261205_h07"), Some((at(7), at(8))));
        assert_eq!(
            leaf_range("logs_p20261205_h23"),
            Some((
                at(23),
                (day + Days::new(1)).and_hms_opt(0, 0, 0).unwrap().and_utc()
            ))
        );
        assert_eq!(
            leaf_range("logs_p20261205"),
            Some((
                at(0),
                (day + Days::new(1)).and_hms_opt(0, 0, 0).unwrap().and_utc()
            ))
        );
        for foreign in [
            "logs_default",
            "logs_p20261205_h24",
            "logs_p20261205_h7",
            "logs_p20261205_sealing",
            "logs_p20261205_h07_sealing",
        ] {
            assert_eq!(leaf_range(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn a_leaf_is_sealed_once_past_and_again_after_many_late_stripes() {
        let mut leaf = Leaf::empty_heap_hour(NaiveDate::from_ymd_opt(2026, 12, 5).unwrap(), 7);
        let to = leaf.to;
        assert!(!leaf.wants_sealing(to), "a heap never written to stays one");
        leaf.bytes = 8192;
        assert!(!leaf.wants_sealing(to - TimeDelta::seconds(1)));
        assert!(leaf.wants_sealing(to));
        leaf.sealed = true;
        leaf.small_stripes = RESEAL_SMALL_STRIPES - 1;
        assert!(!leaf.wants_sealing(to + TimeDelta::days(1)));
        leaf.small_stripes = RESEAL_SMALL_STRIPES;
        assert!(leaf.wants_sealing(to));
    }
}

/// A sealer's session: a connection of its own, outside the writers' pool.
#[derive(Debug)]
pub struct PgSealer {
    pub(super) conn: PgConnection,
    pub(super) flavor: Flavor,
}

impl PostgresStore {
    pub(in crate::storage) async fn sealer(&self) -> Result<PgSealer, StoreError> {
        // A seal's copy takes seconds by design: not a slow statement to warn about. Nor is a
        // leftover table that is not there a notice worth logging.
        let options = PgConnectOptions::from_str(self.url.as_str())
            .map_err(unavailable)?
            .log_slow_statements(log::LevelFilter::Off, Duration::ZERO)
            .options([("client_min_messages", "warning")]);
        let conn = PgConnection::connect_with(&options)
            .await
            .map_err(unavailable)?;
        Ok(PgSealer {
            conn,
            flavor: self.flavor,
        })
    }
}

impl PgSealer {
    /// Takes the sealing lock unless another replica holds it; false when it does.
    pub async fn try_lock(&mut self) -> Result<bool, StoreError> {
        sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(SEAL_LOCK_KEY)
            .fetch_one(&mut self.conn)
            .await
            .map_err(unavailable)
    }

    /// Releases the sealing lock (closing the session releases it too).
    pub async fn unlock(&mut self) {
        let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(SEAL_LOCK_KEY)
            .execute(&mut self.conn)
            .await;
    }

    /// Whether this server can seal (creating the extension if it can), and if not, why.
    pub async fn sealing(&mut self) -> Result<Sealing, StoreError> {
        sealing(&mut self.conn).await.map_err(unavailable)
    }

    /// Every leaf partition, oldest first.
    pub async fn leaves(&mut self) -> Result<Vec<Leaf>, StoreError> {
        leaves(&mut self.conn, self.flavor).await
    }

    /// Drops what failed seals left behind.
    pub async fn drop_leftovers(&mut self) -> Result<u64, StoreError> {
        drop_leftovers(&mut self.conn).await.map_err(unavailable)
    }

    /// Seals one leaf at `pace`.
    pub async fn seal(&mut self, leaf: &Leaf, pace: Pace) -> Result<Sealed, StoreError> {
        seal(&mut self.conn, self.flavor, leaf, pace)
            .await
            .map_err(unavailable)
    }

    /// Bytes on disk of heap and of columnar partitions.
    pub async fn bytes_by_tier(&mut self) -> Result<(i64, i64), StoreError> {
        bytes_by_tier(&mut self.conn, self.flavor)
            .await
            .map_err(unavailable)
    }

    /// Closes the session, which releases the lock.
    pub async fn close(self) {
        let _ = self.conn.close().await;
    }
}
