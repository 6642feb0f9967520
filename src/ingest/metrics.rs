//! What ingest reports: open push streams, how each call ended, and records by protocol. The
//! per-tenant record counters are resolved with the tenant ([`crate::auth::TenantMetrics`]).

use metrics::{Label, Unit};

use crate::observability::metrics::{Counter, CounterVec, Gauge, Registry, Series};

const ACTIVE_STREAMS: Series = Series::new(
    "loghaul_active_streams",
    Unit::Count,
    "Push streams open now.",
);
const STREAMS: Series = Series::new(
    "loghaul_streams_total",
    Unit::Count,
    "Push streams ended, by outcome (ok or the error kind).",
);
const OTLP_EXPORTS: Series = Series::new(
    "loghaul_otlp_exports_total",
    Unit::Count,
    "OTLP Export requests answered, by outcome (ok, possibly with partial success, or the error).",
);
const HTTP_INGEST_REQUESTS: Series = Series::new("loghaul_http_ingest_requests_total", Unit::Count, "Requests answered on the HTTP ingest listener, by protocol (otlp_http, loki, cors_preflight, other) and outcome (ok, partial, or the error: unauthenticated, malformed_message, unsupported_media_type, request_too_large, backpressure, rate_limited, store_unavailable, ...).");
const INGEST_RECORDS: Series = Series::new(
    "loghaul_ingest_records_total",
    Unit::Count,
    "Records received, valid or not, by protocol: push, otlp_grpc, otlp_http, loki.",
);

/// The wire protocol a record came in by: the `protocol` label of `loghaul_ingest_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `loghaul.v1.LogIngest/Push`.
    Push = 0,
    /// OTLP over gRPC.
    OtlpGrpc = 1,
    /// OTLP over HTTP (`POST /v1/logs`).
    OtlpHttp = 2,
    /// The Loki push API (`POST /loki/api/v1/push`).
    Loki = 3,
}

impl Protocol {
    const ALL: [Protocol; 4] = [
        Protocol::Push,
        Protocol::OtlpGrpc,
        Protocol::OtlpHttp,
        Protocol::Loki,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Push => "push",
            Protocol::OtlpGrpc => "otlp_grpc",
            Protocol::OtlpHttp => "otlp_http",
            Protocol::Loki => "loki",
        }
    }
}

/// The series of every ingest protocol.
#[derive(Debug)]
pub struct IngestMetrics {
    /// Push streams open now.
    pub(crate) active_streams: Gauge,
    /// Push streams ended, by outcome.
    pub(crate) streams_ended: CounterVec<1>,
    /// OTLP Export calls answered, by outcome.
    pub(crate) otlp_exports: CounterVec<1>,
    /// Requests answered on the HTTP ingest listener, by protocol and outcome.
    pub(crate) http_ingest_requests: CounterVec<2>,
    /// Records received, by protocol (indexed like [`Protocol::ALL`]).
    records: Vec<Counter>,
}

impl IngestMetrics {
    /// Registers the series in `registry`.
    pub(crate) fn register(registry: &Registry) -> IngestMetrics {
        IngestMetrics {
            active_streams: Gauge::register(registry, ACTIVE_STREAMS, Vec::new()),
            streams_ended: CounterVec::register(registry, STREAMS, ["outcome"]),
            otlp_exports: CounterVec::register(registry, OTLP_EXPORTS, ["outcome"]),
            http_ingest_requests: CounterVec::register(
                registry,
                HTTP_INGEST_REQUESTS,
                ["protocol", "outcome"],
            ),
            records: Protocol::ALL
                .iter()
                .map(|protocol| {
                    let label = Label::from_static_parts("protocol", protocol.as_str());
                    Counter::register(registry, INGEST_RECORDS, vec![label])
                })
                .collect(),
        }
    }

    /// The counter of records received by `protocol`.
    pub(crate) fn records(&self, protocol: Protocol) -> &Counter {
        // `ALL` lists the protocols in discriminant order, which a test checks.
        &self.records[protocol as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_are_listed_in_discriminant_order() {
        for (index, protocol) in Protocol::ALL.iter().enumerate() {
            assert_eq!(*protocol as usize, index, "{protocol:?}");
        }
    }
}
