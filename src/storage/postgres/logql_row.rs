//! The row a LogQL read selects, and its decoding.
//!
//! A LogQL read may go through every row of an hour, and on PostgreSQL its time is mostly the
//! server's, per row and per column sent. So it selects only what a LogQL answer is made of: no
//! id and no receive time (rows are ordered by them in SQL, never in the service), the ids as
//! their bytes, and attributes only where a record has some (`jsonb` turned into text costs as
//! much as the scan that finds the row).

use sqlx::postgres::PgRow;
use sqlx::Row;

use super::read::{IdColumns, PgTime};
use crate::storage::stored::StoredRow;

impl IdColumns {
    /// A LogQL read's select list and table, decoded by [`decode`]; the tenant's bind follows.
    pub(super) fn logql_select(self) -> &'static str {
        match self {
            IdColumns::Bytes => concat!(
                "SELECT ts, severity, service, message, labels::text, ",
                "nullif(attributes, '{}'::jsonb)::text, trace_id_bytes, span_id_bytes ",
                "FROM logs WHERE tenant = "
            ),
            // Rows written before ids were bytes have them as text only.
            IdColumns::BytesAndText => concat!(
                "SELECT ts, severity, service, message, labels::text, ",
                "nullif(attributes, '{}'::jsonb)::text, ",
                "coalesce(encode(trace_id_bytes, 'hex'), trace_id), ",
                "coalesce(encode(span_id_bytes, 'hex'), span_id) ",
                "FROM logs WHERE tenant = "
            ),
        }
    }

    /// The id in column `index` of a row of [`IdColumns::logql_select`], as lowercase hex.
    fn hex_id(self, row: &PgRow, index: usize) -> Result<Option<String>, sqlx::Error> {
        match self {
            IdColumns::Bytes => Ok(row
                .try_get_unchecked::<Option<&[u8]>, _>(index)?
                .map(hex::encode)),
            IdColumns::BytesAndText => row.try_get_unchecked(index),
        }
    }
}

/// A row of [`IdColumns::logql_select`], by position (see `read::decode`). Its `id` is 0 and its
/// `received_at` its `ts`; a record without attributes has them empty.
pub(super) fn decode(row: PgRow, ids: IdColumns) -> Result<StoredRow, sqlx::Error> {
    let PgTime(ts) = row.try_get_unchecked(0)?;
    Ok(StoredRow {
        id: 0,
        ts,
        received_at: ts,
        severity: row.try_get_unchecked(1)?,
        service: row.try_get_unchecked(2)?,
        message: row.try_get_unchecked(3)?,
        labels: row.try_get_unchecked(4)?,
        attributes: row
            .try_get_unchecked::<Option<String>, _>(5)?
            .unwrap_or_default(),
        trace_id: ids.hex_id(&row, 6)?,
        span_id: ids.hex_id(&row, 7)?,
    })
}
