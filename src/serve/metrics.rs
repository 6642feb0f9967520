//! Every series of one server: a registry of its own and each subsystem's series, registered
//! once when the server's core is built and handed to the subsystems as they are made. Two servers
//! in one process (as the tests run them) count apart, and `/metrics` shows one server's numbers.

use std::sync::Arc;

use crate::auth::AuthMetrics;
use crate::console::metrics::ConsoleMetrics;
use crate::ingest::metrics::IngestMetrics;
use crate::loki::api::metrics::LokiMetrics;
use crate::observability::metrics::Registry;
use crate::pipeline::PipelineMetrics;
use crate::query::metrics::QueryMetrics;
use crate::retention::metrics::RetentionMetrics;
use crate::sealing::metrics::SealingMetrics;
use crate::storage::metrics::StorageMetrics;
use crate::web::metrics::ListenerMetrics;

/// One server's registry and the series of each of its subsystems.
#[derive(Debug)]
pub(crate) struct Metrics {
    /// What `/metrics` renders.
    pub registry: Registry,
    /// Refusals, API keys, and each tenant's records.
    pub auth: Arc<AuthMetrics>,
    /// Push streams, OTLP exports, HTTP ingest requests, records by protocol.
    pub ingest: Arc<IngestMetrics>,
    /// The byte budget, duplicates, insert errors, and each shard's queue and batches.
    pub pipeline: Arc<PipelineMetrics>,
    /// SQLite's checkpoints.
    pub storage: Arc<StorageMetrics>,
    /// Queries, read admission and memory, tails.
    pub query: Arc<QueryMetrics>,
    /// Loki's query API.
    pub loki: Arc<LokiMetrics>,
    /// The console's answers.
    pub console: Arc<ConsoleMetrics>,
    /// The HTTP listeners' connections.
    pub listeners: Arc<ListenerMetrics>,
    /// Retention runs.
    pub retention: Arc<RetentionMetrics>,
    /// Sealing of past hours.
    pub sealing: Arc<SealingMetrics>,
}

impl Metrics {
    /// A new registry with every subsystem's series registered in it.
    pub(crate) fn register() -> Metrics {
        let registry = Registry::new();
        Metrics {
            auth: Arc::new(AuthMetrics::register(&registry)),
            ingest: Arc::new(IngestMetrics::register(&registry)),
            pipeline: Arc::new(PipelineMetrics::register(&registry)),
            storage: Arc::new(StorageMetrics::register(&registry)),
            query: Arc::new(QueryMetrics::register(&registry)),
            loki: Arc::new(LokiMetrics::register(&registry)),
            console: Arc::new(ConsoleMetrics::register(&registry)),
            listeners: Arc::new(ListenerMetrics::register(&registry)),
            retention: Arc::new(RetentionMetrics::register(&registry)),
            sealing: Arc::new(SealingMetrics::register(&registry)),
            registry,
        }
    }
}
