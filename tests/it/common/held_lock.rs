//! A write lock on `logs` held by another connection, so tests can stall commits at will.

use sqlx::Connection;

use super::{Backend, TestDb};

/// A write lock held by another connection: the table cannot be written until it is released.
pub enum HeldLock {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl HeldLock {
    /// Takes the lock: SQLite's write lock, or a PostgreSQL SHARE lock on `logs`.
    pub async fn take(db: &TestDb) -> HeldLock {
        match db.backend {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
                sqlx::query("BEGIN IMMEDIATE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                HeldLock::Sqlite(conn)
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
                sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
                // SHARE blocks inserts but not reads, so the test can still count rows.
                sqlx::query("LOCK TABLE logs IN SHARE MODE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                HeldLock::Postgres(conn)
            }
        }
    }

    /// Rolls back, so the writes that waited go through.
    pub async fn release(self) {
        match self {
            HeldLock::Sqlite(mut conn) => {
                sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
            }
            HeldLock::Postgres(mut conn) => {
                sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
            }
        }
    }
}
