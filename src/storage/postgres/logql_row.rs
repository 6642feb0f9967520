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
use crate::storage::stored::{overwrite, overwrite_hex, overwrite_option, StoredRow};

impl IdColumns {
    /// A LogQL read's select list and table, decoded by [`decode_into`]; the tenant's bind follows.
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

    /// Writes the id in column `index` of a row of [`IdColumns::logql_select`] over `id`, as
    /// lowercase hex.
    fn overwrite_id(
        self,
        id: &mut Option<String>,
        row: &PgRow,
        index: usize,
    ) -> Result<(), sqlx::Error> {
        match self {
            IdColumns::Bytes => overwrite_hex(id, row.try_get_unchecked(index)?),
            IdColumns::BytesAndText => overwrite_option(id, row.try_get_unchecked(index)?),
        }
        Ok(())
    }
}

/// Writes a row of [`IdColumns::logql_select`], by position (see `read::decode`), over `out`.
/// Its `id` is 0 and its `received_at` its `ts`; a record without attributes has them empty.
pub(super) fn decode_into(
    row: &PgRow,
    ids: IdColumns,
    out: &mut StoredRow,
) -> Result<(), sqlx::Error> {
    let PgTime(ts) = row.try_get_unchecked(0)?;
    out.id = 0;
    out.ts = ts;
    out.received_at = ts;
    out.severity = row.try_get_unchecked(1)?;
    overwrite(&mut out.service, row.try_get_unchecked(2)?);
    overwrite(&mut out.message, row.try_get_unchecked(3)?);
    overwrite(&mut out.labels, row.try_get_unchecked(4)?);
    overwrite(
        &mut out.attributes,
        row.try_get_unchecked::<Option<&str>, _>(5)?
            .unwrap_or_default(),
    );
    ids.overwrite_id(&mut out.trace_id, row, 6)?;
    ids.overwrite_id(&mut out.span_id, row, 7)
}
