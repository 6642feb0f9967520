//! Upgrades: a database written by the schema before stream labels were kept apart (migrations
//! 0001 to 0003) is migrated in place by the current server, and its rows read as the docs say:
//! every label of an old row is structured metadata (`labels` is empty) and its rollup rows have
//! no `level` label, with their counts intact.

use std::path::Path;

use sqlx::migrate::Migrator;
use sqlx::{Connection, Row};

use crate::common::{Backend, TestDb};

/// The last version of the schema before `logs.labels` and `log_volume.level`.
const BEFORE_STREAM_LABELS: i64 = 3;

/// The project's own migrations for `backend`, up to and including `version`.
async fn migrations_up_to(backend: Backend, version: i64) -> Migrator {
    let dir = match backend {
        Backend::Sqlite => "migrations/sqlite",
        Backend::Postgres => "migrations/postgres",
    };
    let mut migrator = Migrator::new(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
        .await
        .unwrap();
    let kept: Vec<_> = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= version)
        .cloned()
        .collect();
    assert_eq!(kept.len() as i64, version, "migrations 1..={version}");
    migrator.migrations = kept.into();
    migrator
}

async fn old_rows_read_as_metadata_after_the_upgrade(db: &TestDb) {
    let old = migrations_up_to(db.backend, BEFORE_STREAM_LABELS).await;
    let (logs_sql, volume_sql, read_logs, read_volume) = match db.backend {
        Backend::Sqlite => (
            "INSERT INTO logs (tenant, ts, received_at, severity, service, message, attributes) \
             VALUES ('t', 1000000, 1000000, 13, 'api', 'old line', '{\"job\":\"batch\"}')",
            "INSERT INTO log_volume (tenant, minute, service, severity, records, bytes) \
             VALUES ('t', 60, 'api', 13, 7, 70)",
            "SELECT labels, attributes FROM logs",
            "SELECT level, records, bytes FROM log_volume",
        ),
        Backend::Postgres => (
            "INSERT INTO logs (tenant, ts, severity, service, message, attributes) \
             VALUES ('t', now(), 13, 'api', 'old line', '{\"job\":\"batch\"}')",
            "INSERT INTO log_volume (tenant, minute, service, severity, writer, records, bytes) \
             VALUES ('t', to_timestamp(60), 'api', 13, 1, 7, 70)",
            "SELECT labels::text AS labels, attributes::text AS attributes FROM logs",
            "SELECT level, records, bytes FROM log_volume",
        ),
    };
    match db.backend {
        Backend::Sqlite => {
            let options: sqlx::sqlite::SqliteConnectOptions = db.url.parse().unwrap();
            let mut conn = sqlx::SqliteConnection::connect_with(&options.create_if_missing(true))
                .await
                .unwrap();
            old.run(&mut conn).await.unwrap();
            sqlx::query(logs_sql).execute(&mut conn).await.unwrap();
            sqlx::query(volume_sql).execute(&mut conn).await.unwrap();
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            old.run(&mut conn).await.unwrap();
            sqlx::query(logs_sql).execute(&mut conn).await.unwrap();
            sqlx::query(volume_sql).execute(&mut conn).await.unwrap();
        }
    }

    // The current server finds the old schema and migrates it.
    let store = crate::common::migrated(db).await;
    drop(store);

    macro_rules! read {
        ($conn:expr) => {{
            let logs = sqlx::query(read_logs).fetch_all(&mut $conn).await.unwrap();
            let volume = sqlx::query(read_volume)
                .fetch_all(&mut $conn)
                .await
                .unwrap();
            let logs: Vec<(String, String)> = logs
                .iter()
                .map(|row| (row.get("labels"), row.get("attributes")))
                .collect();
            let volume: Vec<(String, i64, i64)> = volume
                .iter()
                .map(|row| (row.get("level"), row.get("records"), row.get("bytes")))
                .collect();
            (logs, volume)
        }};
    }
    let (logs, volume) = match db.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            read!(conn)
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            read!(conn)
        }
    };
    let attributes: serde_json::Value = serde_json::from_str(&logs[0].1).unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].0, "{}", "an old row has no stream labels");
    assert_eq!(
        attributes,
        serde_json::json!({"job": "batch"}),
        "nor loses a label"
    );
    assert_eq!(
        volume,
        [(String::new(), 7, 70)],
        "the rollup keeps its counts"
    );
}
on_both_backends!(
    upgrade_to_stream_labels,
    old_rows_read_as_metadata_after_the_upgrade
);
