//! Citus: the same schema sharded by tenant across worker nodes, reached through the coordinator.
//!
//! Nothing is configured: a database with the `citus` extension is detected at connect, and after
//! the migrations `producer_chunks` and `logs` are distributed by `tenant`, colocated, so a
//! batch's chunk-key claim and its rows of one tenant land on the same worker and every read
//! (always one tenant) is routed to one shard. Daily partitions created later are distributed
//! with their parent by Citus itself, and sealed as a whole day (`seal.rs`) into a distributed
//! columnar table colocated with them. Citus refuses statements that address rows by `ctid` across
//! shards, so the chunked deletes of retention, the BRIN summaries and the count of a sealed day's
//! small stripes run shard by shard through `run_command_on_shards`.

use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::PgConnection;

use crate::storage::chunked_delete::{CHUNK_PAUSE, DELETE_CHUNK};
use crate::storage::error::StoreError;

/// Which PostgreSQL the URL reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// One server: tables are local.
    Plain,
    /// A Citus coordinator: tables are distributed by tenant over its workers.
    Citus,
}

/// The advisory lock key that serializes distribution among replicas starting together
/// ("loghaulC" in ASCII).
const DISTRIBUTE_LOCK_KEY: i64 = 0x6c6f_6768_6175_6c43;

/// The distributed tables, in the order they are distributed: each after the one it is
/// colocated with.
const DISTRIBUTED: [(&str, Option<&str>); 4] = [
    ("producer_chunks", None),
    ("logs", Some("producer_chunks")),
    ("log_volume", Some("producer_chunks")),
    ("streams", Some("producer_chunks")),
];

/// What went wrong making the schema distributed.
#[derive(Debug, thiserror::Error)]
pub enum CitusError {
    /// The coordinator refused to distribute a table (no worker nodes registered, say).
    #[error("cannot distribute {table} by tenant: {source}")]
    Distribute {
        /// The table.
        table: &'static str,
        /// What the coordinator said.
        source: sqlx::Error,
    },
    /// A command run on each shard failed on one of them.
    #[error("a command on shard {shard} failed: {result}")]
    Shard {
        /// The shard's id.
        shard: i64,
        /// What the worker said.
        result: String,
    },
    /// The coordinator could not be asked.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl Flavor {
    /// Asks the database whether it is a Citus coordinator.
    pub async fn detect(conn: &mut PgConnection) -> Result<Flavor, sqlx::Error> {
        let citus: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
        )
        .fetch_one(conn)
        .await?;
        Ok(if citus { Flavor::Citus } else { Flavor::Plain })
    }
}

/// Sets up a writer session on Citus: keep connections to the workers open between statements.
///
/// With the default of one cached connection per worker, every multi-shard COPY opens new
/// connections to the shards it touches and closes them at commit; a 10k-row batch then took
/// 0.57 s instead of 0.21 s.
pub(super) async fn prepare_writer_session(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SET citus.max_cached_conns_per_worker = 64")
        .execute(conn)
        .await
        .map(|_| ())
}

/// Distributes the tables that are not yet, under an advisory lock; a no-op on a schema that
/// already is. Rows stored before (a database that ran on one server, then got Citus) move to
/// the shards, and the coordinator's local copies are emptied.
pub(super) async fn distribute(conn: &mut PgConnection) -> Result<(), CitusError> {
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(DISTRIBUTE_LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    let distributed = distribute_locked(conn).await;
    let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(DISTRIBUTE_LOCK_KEY)
        .execute(&mut *conn)
        .await;
    distributed
}

async fn distribute_locked(conn: &mut PgConnection) -> Result<(), CitusError> {
    for (table, colocate_with) in DISTRIBUTED {
        let already: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1::regclass)",
        )
        .bind(table)
        .fetch_one(&mut *conn)
        .await?;
        if already {
            continue;
        }
        let failed = |source| CitusError::Distribute { table, source };
        sqlx::query(
            "SELECT create_distributed_table($1::regclass, 'tenant', \
                    colocate_with => coalesce($2, 'default'))",
        )
        .bind(table)
        .bind(colocate_with)
        .execute(&mut *conn)
        .await
        .map_err(failed)?;
        sqlx::query("SELECT truncate_local_data_after_distributing_table($1::regclass)")
            .bind(table)
            .execute(&mut *conn)
            .await
            .map_err(failed)?;
        tracing::info!(table, "distributed by tenant over the Citus workers");
    }
    Ok(())
}

/// Deletes the rows of `table` older than `before` (by `column`), shard by shard, at most
/// [`DELETE_CHUNK`] per shard per round, until no shard has any left; returns how many.
pub(super) async fn delete_per_shard(
    conn: &mut PgConnection,
    table: &str,
    column: &str,
    before: DateTime<Utc>,
) -> Result<u64, CitusError> {
    // The command is run by the workers as text; the cutoff is ours, formatted, never input.
    let cutoff = before.to_rfc3339_opts(SecondsFormat::Micros, true);
    let command = format!(
        "WITH gone AS (DELETE FROM %1$s WHERE ctid = ANY(ARRAY( \
           SELECT ctid FROM %1$s WHERE {column} < '{cutoff}'::timestamptz LIMIT {DELETE_CHUNK})) \
         RETURNING 1) SELECT count(*) FROM gone"
    );
    let mut deleted = 0;
    loop {
        let per_shard = on_each_shard(conn, table, &command).await?;
        let mut full = false;
        for (shard, result) in per_shard {
            let rows: u64 = result
                .parse()
                .map_err(|_| CitusError::Shard { shard, result })?;
            deleted += rows;
            full |= rows >= DELETE_CHUNK as u64;
        }
        if !full {
            return Ok(deleted);
        }
        tokio::time::sleep(CHUNK_PAUSE).await;
    }
}

/// Summarizes the new BRIN ranges of every shard of `table`; returns how many ranges.
pub(super) async fn summarize_per_shard(
    conn: &mut PgConnection,
    table: &str,
) -> Result<u64, CitusError> {
    let command = "SELECT coalesce(sum(brin_summarize_new_values(x.indexrelid)), 0) \
                   FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid \
                   JOIN pg_am am ON am.oid = ic.relam \
                   WHERE am.amname = 'brin' AND x.indrelid = '%1$s'::regclass";
    let mut summarized = 0;
    for (shard, result) in on_each_shard(conn, table, command).await? {
        summarized += result
            .parse::<u64>()
            .map_err(|_| CitusError::Shard { shard, result })?;
    }
    Ok(summarized)
}

/// The largest count `command` (with `%1$s` standing for the shard's name) returns on any shard
/// of `table`.
pub(super) async fn max_per_shard(
    conn: &mut PgConnection,
    table: &str,
    command: &str,
) -> Result<i64, CitusError> {
    let mut most = 0;
    for (shard, result) in on_each_shard(conn, table, command).await? {
        most = most.max(
            result
                .parse::<i64>()
                .map_err(|_| CitusError::Shard { shard, result })?,
        );
    }
    Ok(most)
}

/// Runs `command` (with `%1$s` standing for the shard's name) on every shard of `table`; the
/// first value each returned, by shard id. A shard where it failed fails the call.
async fn on_each_shard(
    conn: &mut PgConnection,
    table: &str,
    command: &str,
) -> Result<Vec<(i64, String)>, CitusError> {
    let results: Vec<(i64, bool, String)> = sqlx::query_as(
        "SELECT shardid, success, coalesce(result, '') FROM run_command_on_shards($1::regclass, $2)",
    )
    .bind(table)
    .bind(command)
    .fetch_all(conn)
    .await?;
    results
        .into_iter()
        .map(|(shard, success, result)| {
            if success {
                Ok((shard, result))
            } else {
                Err(CitusError::Shard { shard, result })
            }
        })
        .collect()
}

impl From<CitusError> for StoreError {
    fn from(err: CitusError) -> StoreError {
        match err {
            CitusError::Distribute { .. } => StoreError::Migrate(err.to_string()),
            _ => StoreError::Unavailable(err.to_string()),
        }
    }
}
