//! Reads made slow on purpose, to test what stops them.
//!
//! PostgreSQL: a test connection holds `ACCESS EXCLUSIVE` on `logs`, so every read waits behind
//! it for as long as the test wants, and the waiting backends show in `pg_stat_activity`.
//! SQLite readers never wait for locks (WAL), so there the slowness is work: rows whose
//! attributes hold about 1 MB of JSON, and a filter of 64 attribute terms of which only the last
//! fails, so every row's JSON is parsed 64 times (seconds for the whole set, on a debug build).

use std::collections::BTreeMap;
use std::time::Duration;

use loghaul::proto::v1::Filter;
use sqlx::Connection;

use super::{wait_until, Backend, TestDb};

/// Rows of slow SQLite reads.
const HEAVY_ROWS: i64 = 40;
/// Attributes that the slow filter matches, then padding up to the ingest limit of 128.
const MATCHED: usize = 63;
const PADDING: usize = 65;
const PADDING_BYTES: usize = 16_000;

/// Reads of one tenant made slow; see the module docs.
pub enum SlowRead {
    /// The connection holding the lock, inside its transaction.
    Postgres(sqlx::PgConnection),
    /// Heavy rows were inserted.
    Sqlite,
}

impl SlowRead {
    /// From now on, reads of `tenant` with [`SlowRead::filter`] are slow (on PostgreSQL, every
    /// read is, and so are writes).
    pub async fn start(db: &TestDb, tenant: &str) -> SlowRead {
        match db.backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
                sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
                sqlx::query("LOCK TABLE logs IN ACCESS EXCLUSIVE MODE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                SlowRead::Postgres(conn)
            }
            Backend::Sqlite => {
                let mut attributes = serde_json::Map::new();
                for n in 0..MATCHED {
                    attributes.insert(format!("k{n:02}"), "v".into());
                }
                for n in 0..PADDING {
                    attributes.insert(format!("pad{n:02}"), "p".repeat(PADDING_BYTES).into());
                }
                let now = chrono::Utc::now().timestamp_micros();
                let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
                sqlx::query(
                    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
                     INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes)
                     SELECT ?2, ?3 - i * 1000000, ?3, 9, 'heavy', 'heavy-' || i, ?4 FROM n",
                )
                .bind(HEAVY_ROWS)
                .bind(tenant)
                .bind(now)
                .bind(serde_json::Value::Object(attributes).to_string())
                .execute(&mut conn)
                .await
                .unwrap();
                SlowRead::Sqlite
            }
        }
    }

    /// A filter whose reads are slow.
    pub fn filter(&self) -> Filter {
        let mut attributes: BTreeMap<String, String> = (0..MATCHED)
            .map(|n| (format!("k{n:02}"), "v".into()))
            .collect();
        // Sorts last, so the terms before it are all evaluated first.
        attributes.insert("zz".into(), "no such value".into());
        Filter {
            attributes,
            ..Filter::default()
        }
    }

    /// The same filter as console query parameters.
    pub fn query_string(&self) -> String {
        let mut terms: Vec<String> = (0..MATCHED).map(|n| format!("attr=k{n:02}%3Dv")).collect();
        terms.push("attr=zz%3Dno+such+value".into());
        terms.join("&")
    }

    /// Ends the slowness: PostgreSQL's lock is released (SQLite's rows stay).
    pub async fn release(self) {
        if let SlowRead::Postgres(mut conn) = self {
            sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
        }
    }
}

/// PostgreSQL: the service's read sessions waiting for a lock now.
async fn waiting_reads(db: &TestDb) -> i64 {
    db.query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'loghaul-reads' AND wait_event_type = 'Lock'",
    )
    .await
}

/// PostgreSQL: waits until `waiting_reads` is `expected`, failing after `limit`.
pub async fn wait_for_waiting_reads(db: &TestDb, expected: i64, limit: Duration) {
    let what = format!("{expected} reads waiting for the lock");
    wait_until(&what, limit, async || waiting_reads(db).await == expected).await;
}
