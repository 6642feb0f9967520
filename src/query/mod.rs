//! `loghaul.v1.LogQuery`: reading a tenant's records back, page by page (`Query`) or live (`Tail`).
//!
//! - [`filter`] and [`cursor`] (from [`crate::model`]): the wire filter validated once, page-size
//!   rules; the opaque (ts, id, received_at) position of a record.
//! - [`limits`]: what one read may cost and return: time, range, bytes of an answer.
//! - [`admission`]: how many reads one tenant may run at once, and how many tails may be open.
//! - [`memory`]: how much memory one read, and every read together, may hold.
//! - [`search`]: one page, shared by the gRPC service and the console.
//! - [`render`]: a stored record as a line for people or a JSON object.
//! - [`service`]: the gRPC handlers; the tenant comes from the auth layer, never the request.
//! - [`tail`]: the follow loop of one subscriber: polls the database (so records committed by any
//!   replica show up) as far as its queue has room, dropped when too slow.
//! - [`tail_queue`]: one subscriber's queue, bounded in bytes until its transport takes them.
//! - [`metrics`]: the series every read is counted in, whichever API made it.
//!
//! The SQL lives with the other storage code, in each backend's `read.rs` and `tail.rs` under
//! `storage/`.

pub(crate) mod admission;
pub(crate) use crate::model::{cursor, filter};
pub(crate) mod limits;
pub(crate) mod memory;
pub(crate) mod metrics;
pub(crate) mod render;
pub(crate) mod service;
pub(crate) mod tail;
pub(crate) mod tail_queue;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use self::metrics::QueryMetrics;
use crate::config::QueryOptions;
use crate::error::QueryError;
use crate::model::time;
use crate::proto::v1::{QueryRequest, QueryResponse, StoredRecord};
use crate::storage::{Reader, StoredRow};
use admission::{Admission, AdmissionLimits};
use cursor::Cursor;
use filter::{page_size, Filter};
use limits::ReadLimits;
use memory::{ReadCharge, ReadMemory};
use tail::TailConfig;

/// What the gRPC service and the console read through, shared by both so that every limit on
/// reads holds across them.
#[derive(Clone, Debug)]
pub(crate) struct Reads {
    reader: Reader,
    limits: ReadLimits,
    admission: Arc<Admission>,
    memory: Arc<ReadMemory>,
    tail: TailConfig,
    draining: CancellationToken,
    metrics: Arc<QueryMetrics>,
}

impl Reads {
    /// Reads through `reader` within `limits`, admitted by `admission`, counted in `metrics`;
    /// tails end when `draining` is cancelled.
    pub(crate) fn new(
        reader: Reader,
        limits: ReadLimits,
        admission: Admission,
        tail: TailConfig,
        draining: CancellationToken,
        metrics: Arc<QueryMetrics>,
    ) -> Self {
        Reads {
            reader,
            memory: Arc::new(ReadMemory::new(limits.memory, &metrics)),
            limits,
            admission: Arc::new(admission),
            tail,
            draining,
            metrics,
        }
    }

    /// The read settings of `loghaul serve`.
    pub(crate) fn from_options(
        reader: Reader,
        config: &QueryOptions,
        draining: CancellationToken,
        metrics: Arc<QueryMetrics>,
    ) -> Self {
        Reads::new(
            reader,
            ReadLimits::from(config),
            Admission::new(
                AdmissionLimits {
                    reads_per_tenant: config.max_concurrent_reads_per_tenant,
                    tails: config.max_tails,
                    tails_per_tenant: config.max_tails_per_tenant,
                },
                &metrics,
            ),
            TailConfig::from(config),
            draining,
            metrics,
        )
    }

    /// Where every read is counted.
    pub(crate) fn metrics(&self) -> &QueryMetrics {
        &self.metrics
    }

    /// An empty memory charge for one read of `tenant`, against the limits every read shares.
    pub(crate) fn charge(&self, tenant: &Arc<str>) -> ReadCharge {
        self.memory.read(tenant)
    }

    /// Runs `work` as one admitted read of `tenant`, stopped at the read timeout: how every
    /// read outside this module (Loki's API, the console's histogram) is held to the same limits.
    pub(crate) async fn admitted<T, E: From<QueryError>>(
        &self,
        tenant: &Arc<str>,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let _slot = self.admission.tenant(tenant).admit().await?;
        self.limits.bounded(work).await
    }

    /// A second read slot of `tenant` for a read made within [`Reads::admitted`], if one is free
    /// now ([`admission::TenantReads::spare`]).
    pub(crate) fn spare_slot(&self, tenant: &Arc<str>) -> Option<OwnedSemaphorePermit> {
        self.admission.tenant(tenant).spare()
    }

    /// The store's read side, for reads made within [`Reads::admitted`].
    pub(crate) fn reader(&self) -> &Reader {
        &self.reader
    }

    /// The limits every read is held to.
    pub(crate) fn limits(&self) -> &ReadLimits {
        &self.limits
    }
}

/// One page of `tenant`'s records, newest first: the one implementation behind the gRPC `Query`
/// and the console's search, so both check, page and count (`loghaul_queries_total`) alike.
pub(crate) async fn search(
    reads: &Reads,
    tenant: &Arc<str>,
    request: QueryRequest,
) -> Result<QueryResponse, QueryError> {
    let started = Instant::now();
    let outcome = page(reads, tenant, request).await;
    reads
        .metrics
        .query_duration
        .record(started.elapsed().as_secs_f64());
    let label = match &outcome {
        Ok(_) => "ok",
        Err(err) => err.kind(),
    };
    reads.metrics.queries.increment_static([label], 1);
    outcome
}

async fn page(
    reads: &Reads,
    tenant: &Arc<str>,
    request: QueryRequest,
) -> Result<QueryResponse, QueryError> {
    let mut filter = Filter::from_proto(request.filter)?;
    let default_from = reads.limits.default_from(&filter);
    filter.from = filter.from.or(default_from);
    let size = page_size(request.page_size)?;
    let after = Cursor::decode(&request.cursor)?;
    // One row more than the page says whether there is a next page without a second query; a
    // page cut short by its byte budget has one too.
    let budget = reads.limits.page_size(size + 1);
    let _slot = reads.admission.tenant(tenant).admit().await?;
    let mut charge = reads.charge(tenant);
    charge.charge(reads.limits.page_reservation())?;
    let read = reads.reader.page(tenant, &filter, after, budget);
    let batch = reads.limits.within_timeout(read).await?;
    let mut rows = batch.rows;
    let more = batch.cut_short || rows.len() > size;
    rows.truncate(size);
    let next_cursor = match rows.last() {
        Some(last) if more => last.cursor().encode(),
        _ => String::new(),
    };
    Ok(QueryResponse {
        records: rows.into_iter().map(to_wire).collect(),
        next_cursor,
        default_from: default_from.map(time::to_proto),
    })
}

/// A stored row as the wire record, with its cursor.
/// Its stream's labels and its own attributes are one map there, its own winning on a key.
pub(crate) fn to_wire(row: StoredRow) -> StoredRecord {
    let mut attributes = BTreeMap::new();
    for json in [&row.labels, &row.attributes] {
        if let Ok(object) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)
        {
            attributes.extend(object.into_iter().map(|(key, value)| match value {
                serde_json::Value::String(text) => (key, text),
                other => (key, other.to_string()),
            }));
        }
    }
    StoredRecord {
        cursor: row.cursor().encode(),
        timestamp: Some(time::to_proto(row.ts)),
        severity: i32::from(row.severity),
        service: row.service,
        message: row.message,
        attributes,
        trace_id: row.trace_id.unwrap_or_default(),
        span_id: row.span_id.unwrap_or_default(),
        received_at: Some(time::to_proto(row.received_at)),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::storage::PageSize;

    fn row(attributes: String, message: String) -> StoredRow {
        StoredRow {
            id: i64::MIN,
            ts: chrono::DateTime::<chrono::Utc>::MIN_UTC,
            received_at: chrono::DateTime::<chrono::Utc>::MAX_UTC,
            severity: i16::MIN,
            service: "s".repeat(256),
            message,
            labels: "{}".into(),
            attributes,
            trace_id: Some("a".repeat(32)),
            span_id: Some("b".repeat(16)),
        }
    }

    #[test]
    fn the_size_estimate_bounds_the_encoded_record() {
        let tiny_entries: serde_json::Map<_, _> = (0..128)
            .map(|n| (format!("{n:x}"), serde_json::Value::from("")))
            .collect();
        let big_entries: serde_json::Map<_, _> = (0..128)
            .map(|n| {
                (
                    format!("{n:0>256}"),
                    serde_json::Value::from("v".repeat(16 << 10)),
                )
            })
            .collect();
        let cases = [
            ("{}".to_owned(), String::new()),
            (
                serde_json::Value::Object(tiny_entries).to_string(),
                "m".into(),
            ),
            (
                r#"{"a": 1, "b": [1, 2], "c": {"d": null}}"#.to_owned(),
                "m".repeat(300),
            ),
            (
                serde_json::Value::Object(big_entries).to_string(),
                "m".repeat(256 << 10),
            ),
        ];
        for (attributes, message) in cases {
            let row = row(attributes, message);
            let estimate = row.wire_bytes();
            let answer = QueryResponse {
                records: vec![to_wire(row)],
                next_cursor: String::new(),
                default_from: None,
            };
            assert!(
                answer.encoded_len() <= estimate,
                "{} encoded, {estimate} estimated",
                answer.encoded_len()
            );
        }
    }

    #[test]
    fn an_answer_within_its_budget_fits_the_configured_bytes() {
        let limits = ReadLimits {
            max_answer_bytes: 64 << 10,
            ..ReadLimits::default()
        };
        let PageSize { bytes, .. } = limits.page_size(1000);
        let row = row(r#"{"k":"v"}"#.into(), "m".repeat(1000));
        let fitting = bytes / row.wire_bytes();
        let answer = QueryResponse {
            records: (0..fitting).map(|_| to_wire(row.clone())).collect(),
            next_cursor: row.cursor().encode(),
            default_from: Some(time::to_proto(row.ts)),
        };
        assert!(answer.encoded_len() <= limits.max_answer_bytes);
    }
}
