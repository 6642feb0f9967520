//! Where batches land: one concrete store per backend behind a small enum, chosen by the URL.
//!
//! sqlx's `Any` driver is not used on purpose: it has no timestamptz, arrays or jsonb, and its
//! placeholders do not suit PostgreSQL. Each backend writes a batch as one statement (PostgreSQL)
//! or one transaction (SQLite).

pub mod chunked_delete;
pub mod postgres;
pub mod read_postgres;
pub mod read_sqlite;
pub mod reader;
pub mod sqlite;
pub mod sqlite_checkpoint;

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::record::Record;

/// One row of a batch: a record and the tenant that sent it.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// Tenant that owns the record.
    pub tenant: &'a str,
    /// The record itself.
    pub record: &'a Record,
}

/// Names a chunk for deduplication: stored at most once per tenant, producer and sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkKey<'a> {
    /// Tenant that sent the chunk.
    pub tenant: &'a str,
    /// The producer's id, 1 to 64 bytes.
    pub producer_id: &'a [u8],
    /// The chunk's number within its producer.
    pub sequence: u64,
}

/// A chunk key to claim together with the rows it covers (positions in the rows written with it).
#[derive(Clone, Debug)]
pub struct Claim<'a> {
    /// The key.
    pub key: ChunkKey<'a>,
    /// The chunk's rows; written only if the key is claimed now.
    pub rows: Range<usize>,
}

/// Which claims succeeded, in claim order, given the keys the database reported as newly
/// inserted. Two claims of one key in the same write: the first wins, the second is a duplicate.
fn claimed_in_order<'a>(
    claims: &[Claim<'a>],
    inserted: impl IntoIterator<Item = (String, Vec<u8>, i64)>,
) -> Vec<bool> {
    let mut fresh: HashMap<(String, Vec<u8>, i64), usize> = HashMap::new();
    for key in inserted {
        *fresh.entry(key).or_default() += 1;
    }
    claims
        .iter()
        .map(|claim| {
            let key = (
                claim.key.tenant.to_owned(),
                claim.key.producer_id.to_vec(),
                claim.key.sequence as i64,
            );
            match fresh.get_mut(&key) {
                Some(left) if *left > 0 => {
                    *left -= 1;
                    true
                }
                _ => false,
            }
        })
        .collect()
}

/// The rows to write: all but those of claims that failed.
fn kept_rows<'a>(rows: &[Row<'a>], claims: &[Claim<'_>], claimed: &[bool]) -> Vec<Row<'a>> {
    let mut skip = vec![false; rows.len()];
    for (claim, won) in claims.iter().zip(claimed) {
        if !won {
            skip[claim.rows.clone()].fill(true);
        }
    }
    rows.iter()
        .zip(skip)
        .filter(|(_, skip)| !skip)
        .map(|(row, _)| *row)
        .collect()
}

/// What can go wrong talking to the database.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused the data itself (a constraint or a value it cannot hold); retrying
    /// the same rows cannot help, so the batch is split to find the culprit.
    #[error("the database refused the row: {0}")]
    RowRejected(String),
    /// The database is unreachable, overloaded or failing; the same write may succeed later.
    #[error("{0}")]
    Unavailable(String),
    /// The URL names no supported database or is malformed.
    #[error("invalid database url: {0}")]
    Url(String),
    /// A migration could not be applied.
    #[error("migration failed: {0}")]
    Migrate(String),
}

impl StoreError {
    /// The cause in a few words a client may see: what kind of failure, never the database's own
    /// text (host names, SQL), which is logged instead.
    pub fn public_cause(&self) -> &'static str {
        let detail = match self {
            StoreError::RowRejected(_) => return "the database refused a row",
            StoreError::Url(_) => return "the database URL is invalid",
            StoreError::Migrate(_) => return "a migration failed",
            StoreError::Unavailable(detail) => detail.to_ascii_lowercase(),
        };
        let says = |words: &[&str]| words.iter().any(|word| detail.contains(word));
        if says(&["disk is full", "no space left", "could not extend", "53100"]) {
            "the disk is full"
        } else if says(&["readonly", "read-only", "read only"]) {
            "the database is read-only"
        } else if says(&["pool timed out", "timed out", "timeout"]) {
            "the database did not answer in time"
        } else if says(&[
            "refused",
            "reset",
            "broken pipe",
            "communicating",
            "terminat",
            "closed",
        ]) {
            "the connection to the database failed"
        } else {
            "the database failed"
        }
    }

    /// A stable label value for the insert-errors metric.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::RowRejected(_) => "row_rejected",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Url(_) => "url",
            StoreError::Migrate(_) => "migrate",
        }
    }
}

/// Sizing of the connection pool.
#[derive(Clone, Copy, Debug)]
pub struct PoolOptions {
    /// Most connections open at once.
    pub max_connections: u32,
    /// How long a writer waits for a connection before the attempt counts as failed.
    pub acquire_timeout: Duration,
}

/// Which database a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `postgres://…` or `postgresql://…`.
    Postgres,
    /// `sqlite:…`.
    Sqlite,
}

impl Backend {
    /// The backend `url` names; any other scheme is refused (with the password redacted).
    pub fn of(url: &str) -> Result<Backend, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else {
            Err(StoreError::Url(format!(
                "{:?} is neither postgres://… nor sqlite://…",
                redact_url(url)
            )))
        }
    }

    /// True when `url` names a PostgreSQL database.
    pub fn is_postgres(url: &str) -> bool {
        matches!(Backend::of(url), Ok(Backend::Postgres))
    }
}

/// A connected store.
#[derive(Clone, Debug)]
pub enum Store {
    /// PostgreSQL, the production store.
    Postgres(postgres::PostgresStore),
    /// SQLite, the embedded default.
    Sqlite(sqlite::SqliteStore),
}

impl Store {
    /// Connects to the database the URL names: `postgres://…`/`postgresql://…` or `sqlite://…`.
    pub async fn connect(url: &str, pool: PoolOptions) -> Result<Store, StoreError> {
        match Backend::of(url)? {
            Backend::Postgres => postgres::PostgresStore::connect(url, pool)
                .await
                .map(Store::Postgres),
            Backend::Sqlite => sqlite::SqliteStore::connect(url).await.map(Store::Sqlite),
        }
    }

    /// Applies pending migrations (PostgreSQL: under an advisory lock, so replicas can start together).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Store::Postgres(store) => store.migrate().await,
            Store::Sqlite(store) => store.migrate().await,
        }
    }

    /// Writes all rows in one statement or transaction; on error none of them is stored.
    pub async fn insert(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        match self {
            Store::Postgres(store) => store.insert(rows).await,
            Store::Sqlite(store) => store.insert(rows).await,
        }
    }

    /// Claims `claims`' keys and writes the rows in one transaction, leaving out the rows of
    /// claims whose key was already taken. Returns, per claim, whether it was claimed now (its
    /// rows written) or is a duplicate (its rows skipped). On error nothing is stored or claimed.
    /// Without claims this is [`Store::insert`], with no transaction around it.
    pub async fn insert_claimed(
        &self,
        rows: &[Row<'_>],
        claims: &[Claim<'_>],
    ) -> Result<Vec<bool>, StoreError> {
        if claims.is_empty() {
            return self.insert(rows).await.map(|()| Vec::new());
        }
        match self {
            Store::Postgres(store) => store.insert_claimed(rows, claims).await,
            Store::Sqlite(store) => store.insert_claimed(rows, claims).await,
        }
    }

    /// Inserts the rows in a transaction that is rolled back: tells whether the database would
    /// refuse one of them without storing anything.
    pub async fn probe(&self, rows: &[Row<'_>]) -> Result<(), StoreError> {
        match self {
            Store::Postgres(store) => store.probe(rows).await,
            Store::Sqlite(store) => store.probe(rows).await,
        }
    }

    /// Deletes chunk keys stored before `before` (the dedup window's edge); returns how many.
    pub async fn prune_chunk_keys(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        match self {
            Store::Postgres(store) => store.prune_chunk_keys(before).await,
            Store::Sqlite(store) => store.prune_chunk_keys(before).await,
        }
    }

    /// Closes every connection, waiting for those in use.
    pub async fn close(&self) {
        match self {
            Store::Postgres(store) => store.close().await,
            Store::Sqlite(store) => store.close().await,
        }
    }

    /// "postgres" or "sqlite", for logs and the readiness page.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Postgres(_) => "postgres",
            Store::Sqlite(_) => "sqlite",
        }
    }
}

/// The URL with any password replaced, safe to log: the one in the credentials
/// (`user:password@host`) and any `password=` or `sslpassword=` query parameter.
pub fn redact_url(url: &str) -> String {
    // The query starts after the credentials, whose password may hold an unescaped `?`.
    let host_at = url.rfind('@').unwrap_or(0);
    let (address, query) = match url[host_at..].find('?') {
        Some(at) => (&url[..host_at + at], Some(&url[host_at + at + 1..])),
        None => (url, None),
    };
    let mut redacted = redact_credentials(address);
    if let Some(query) = query {
        let parameters: Vec<String> = query
            .split('&')
            .map(|parameter| match parameter.split_once('=') {
                Some((name, _)) if is_password_parameter(name) => format!("{name}=***"),
                _ => parameter.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&parameters.join("&"));
    }
    redacted
}

fn redact_credentials(address: &str) -> String {
    let Some((scheme, rest)) = address.split_once("://") else {
        return address.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return address.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => address.to_owned(),
    }
}

fn is_password_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "password" || name == "sslpassword"
}

/// Maps a sqlx error to retryable or row-level, given the backend's test for "the data is bad".
fn classify(err: sqlx::Error, is_data_error: impl Fn(&str) -> bool) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.code().is_some_and(|code| is_data_error(&code)) => {
            StoreError::RowRejected(db.message().to_owned())
        }
        _ => StoreError::Unavailable(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(tenant: &'static str, sequence: u64, rows: Range<usize>) -> Claim<'static> {
        Claim {
            key: ChunkKey {
                tenant,
                producer_id: b"p",
                sequence,
            },
            rows,
        }
    }

    #[test]
    fn the_first_claim_of_a_key_wins_and_the_others_are_duplicates() {
        let claims = [
            claim("a", 1, 0..2),
            claim("a", 2, 2..3),
            claim("a", 1, 3..5),
        ];
        let inserted = [("a".to_owned(), b"p".to_vec(), 1)];
        assert_eq!(
            claimed_in_order(&claims, inserted),
            vec![true, false, false]
        );
    }

    #[test]
    fn rows_of_lost_claims_are_left_out() {
        let record = Record {
            ts: Utc::now(),
            severity: 9,
            service: "s".into(),
            message: "m".into(),
            attributes: "{}".into(),
            trace_id: None,
            span_id: None,
        };
        let rows: Vec<Row<'_>> = (0..5)
            .map(|_| Row {
                tenant: "a",
                record: &record,
            })
            .collect();
        let claims = [claim("a", 1, 0..2), claim("a", 2, 3..5)];
        assert_eq!(kept_rows(&rows, &claims, &[false, true]).len(), 3);
        assert_eq!(kept_rows(&rows, &claims, &[true, true]).len(), 5);
    }

    #[test]
    fn a_public_cause_names_the_kind_of_failure_and_nothing_else() {
        let unavailable = |detail: &str| StoreError::Unavailable(detail.into()).public_cause();
        assert_eq!(
            unavailable("error returned from database: (code: 13) database or disk is full"),
            "the disk is full"
        );
        assert_eq!(
            unavailable("error communicating with database: Connection refused (os error 111)"),
            "the connection to the database failed"
        );
        assert_eq!(
            unavailable("pool timed out while waiting for an open connection"),
            "the database did not answer in time"
        );
        assert_eq!(
            unavailable("db-7.internal: INSERT INTO logs"),
            "the database failed"
        );
    }

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact_url("postgres://loghaul:s3cret@db:5432/logs"),
            "postgres://loghaul:***@db:5432/logs"
        );
        assert_eq!(
            redact_url("postgres://root@db/test"),
            "postgres://root@db/test"
        );
        assert_eq!(redact_url("sqlite://loghaul.db"), "sqlite://loghaul.db");
        assert_eq!(
            redact_url("postgres://loghaul@db/logs?sslmode=require&password=s3cret"),
            "postgres://loghaul@db/logs?sslmode=require&password=***"
        );
        assert_eq!(
            redact_url("postgres://u:a@b@db/logs?Password=x&sslpassword=y"),
            "postgres://u:***@db/logs?Password=***&sslpassword=***"
        );
        assert_eq!(
            redact_url("postgres://u:pa?ss@db/logs"),
            "postgres://u:***@db/logs"
        );
        assert_eq!(
            redact_url("sqlite://loghaul.db?mode=rwc"),
            "sqlite://loghaul.db?mode=rwc"
        );
    }
}
