//! SQLite tails follow ids: with one writer connection, and `AUTOINCREMENT` so ids are never
//! reused, they are assigned in commit order, and the last id sent is all a tail remembers.

use sqlx::QueryBuilder;

use super::read::{push_filter, SqliteReader, COLUMNS};
use crate::model::cursor::Cursor;
use crate::model::filter::Filter;
use crate::storage::error::{unavailable, StoreError};
use crate::storage::stored::{PageSize, StoredRow};

/// A SQLite tail: its read pool and the last id sent.
#[derive(Debug)]
pub struct SqliteTail {
    reader: SqliteReader,
    after_id: i64,
}

impl SqliteReader {
    /// A tail after the cursor's record, or after the newest record now.
    pub(in crate::storage) async fn tail(
        &self,
        after: Option<Cursor>,
    ) -> Result<SqliteTail, StoreError> {
        let after_id = match after {
            Some(cursor) => cursor.id,
            None => sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM logs")
                .fetch_one(&mut *self.acquire().await?)
                .await
                .map_err(unavailable)?,
        };
        Ok(SqliteTail {
            reader: self.clone(),
            after_id,
        })
    }
}

impl SqliteTail {
    /// Ids remembered for de-duplication: none, the last id is enough.
    pub(in crate::storage) fn remembered(&self) -> usize {
        0
    }

    pub(in crate::storage) async fn poll(
        &mut self,
        tenant: &str,
        filter: &Filter,
        budget: PageSize,
    ) -> Result<(Vec<StoredRow>, bool), StoreError> {
        // The newest id now, read first: every row up to it is committed and visible to the scan
        // below, so the watermark can move past rows that do not match the filter.
        let mut conn = self.reader.acquire().await?;
        let newest: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM logs")
            .fetch_one(&mut *conn)
            .await
            .map_err(unavailable)?;
        let mut builder = QueryBuilder::new(COLUMNS);
        push_filter(&mut builder, tenant, filter);
        builder
            .push(" AND id > ")
            .push_bind(self.after_id)
            .push(" AND id <= ")
            .push_bind(newest)
            .push(" ORDER BY id LIMIT ")
            .push_bind(budget.rows as i64);
        let batch = SqliteReader::collect(&mut conn, builder, budget).await?;
        let more = batch.cut_short || batch.rows.len() >= budget.rows;
        let rows = batch.rows;
        self.after_id = match rows.last() {
            Some(last) if more => last.id,
            _ => newest.max(self.after_id),
        };
        Ok((rows, more))
    }
}
