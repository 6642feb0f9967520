//! The first step of `serve`: everything the listeners share, built and checked before any port
//! answers (keys, TLS, the database migrated, both pools, the pipeline).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tonic::transport::ServerTlsConfig;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::health::set_health;
use super::metrics::Metrics;
use super::{ServeError, POOL_ACQUIRE_TIMEOUT};
use crate::auth::keys::KeySources;
use crate::auth::{KeyStore, OpenAccess};
use crate::config::ServeConfig;
use crate::ingest::validate::Limits;
use crate::observability::readiness::Readiness;
use crate::pipeline::{Pipeline, PipelineConfig};
use crate::query::Reads;
use crate::retention::RetentionConfig;
use crate::sealing::SealingConfig;
use crate::storage::{redact_url, PoolOptions, Reader, Store};

/// What every listener and background task shares.
pub(super) struct Core {
    /// The API keys in force.
    pub keys: Arc<KeyStore>,
    /// TLS for the gRPC port, when configured.
    pub tls: Option<ServerTlsConfig>,
    /// The same certificate for the HTTP ingest port.
    pub http_tls: Option<tokio_rustls::TlsAcceptor>,
    /// The writers' pool.
    pub store: Store,
    /// The readers' pool: queries, tails, probes.
    pub reader: Reader,
    /// Readiness flags the probes and the console show.
    pub readiness: Arc<Readiness>,
    /// The gRPC health statuses.
    pub health: HealthReporter,
    /// The shards.
    pub pipeline: Pipeline,
    /// Query and tail admission.
    pub reads: Reads,
    /// What retention keeps.
    pub retention: RetentionConfig,
    /// When past hours are sealed.
    pub sealing: SealingConfig,
    /// What every ingest protocol checks records against.
    pub limits: Limits,
    /// Cancelled when shutdown is requested: streams and tails end, readiness goes off.
    pub draining: CancellationToken,
    /// Cancelled once the pipeline is flushed: background tasks and the HTTP listeners stop.
    pub stopping: CancellationToken,
    /// The server's series, which `/metrics` renders.
    pub metrics: Metrics,
}

impl Core {
    /// Loads the keys and TLS files, opens and migrates the store, and starts the pipeline.
    pub(super) async fn build(config: &ServeConfig) -> Result<Core, ServeError> {
        let (tls, http_tls) = match (&config.tls.tls_cert, &config.tls.tls_key) {
            (Some(cert), Some(key)) => {
                let ca = config.tls.tls_client_ca.as_deref();
                (
                    Some(crate::tls::server_config(cert, key, ca)?),
                    Some(crate::tls::http_acceptor(cert, key, ca)?),
                )
            }
            _ => (None, None),
        };
        let metrics = Metrics::register();
        let keys = Arc::new(KeyStore::load(
            KeySources::from(&config.auth),
            OpenAccess::from(&config.auth),
            Arc::clone(&metrics.auth),
        )?);
        let pipeline_config = PipelineConfig::from(&config.pipeline);
        let shards = pipeline_config.shards;
        let pool = PoolOptions {
            max_connections: if config.storage.db_max_connections > 0 {
                config.storage.db_max_connections
            } else {
                shards as u32 + 2
            },
            // A writer must give up within --store-retry-timeout even while it waits for a
            // connection to a store that refuses them.
            acquire_timeout: POOL_ACQUIRE_TIMEOUT.min(config.pipeline.store_retry_timeout.0),
        };
        let store = Store::connect_counted(
            &config.storage.database_url,
            pool,
            Arc::clone(&metrics.storage),
        )
        .await?;
        store.migrate().await?;
        tracing::info!(backend = store.backend(), url = %redact_url(&config.storage.database_url), "store ready");
        log_access(&keys);
        let retention = RetentionConfig::from(&config.retention);
        // Not fatal: replicas starting together may race on the same CREATE (one of them errors),
        // and until a partition exists its rows go to the default partition. The first retention
        // run, right after start-up and under the advisory lock, creates whatever is missing.
        match crate::retention::prepare(&store, &retention).await {
            Ok(0) => {}
            Ok(partitions) => tracing::info!(partitions, "created daily partitions ahead"),
            Err(err) => {
                tracing::warn!(error = %err, "could not create partitions ahead; the retention task retries")
            }
        }
        let reader = store
            .reader(
                config.query.read_max_connections,
                config.query.query_timeout.0,
            )
            .await?;
        let readiness = Arc::new(Readiness::new(&metrics.registry));
        let pipeline = Pipeline::start(
            pipeline_config,
            store.clone(),
            Arc::clone(&readiness),
            Arc::clone(&metrics.pipeline),
        );
        let health = HealthReporter::new();
        set_health(&health, ServingStatus::Serving).await;
        let draining = CancellationToken::new();
        let reads = Reads::from_options(
            reader.clone(),
            &config.query,
            draining.clone(),
            Arc::clone(&metrics.query),
        );
        let limits = Limits {
            max_message_bytes: config.ingest.max_message_bytes.as_usize(),
            max_age: retention.keep,
        };
        Ok(Core {
            keys,
            tls,
            http_tls,
            store,
            reader,
            readiness,
            health,
            pipeline,
            reads,
            retention,
            sealing: SealingConfig::from(&config.sealing),
            limits,
            draining,
            stopping: CancellationToken::new(),
            metrics,
        })
    }
}

/// Says at start-up whom the service serves, loudly when it is without keys.
fn log_access(keys: &KeyStore) {
    match (keys.is_open(), keys.open_access()) {
        (true, OpenAccess::LoopbackOnly) => tracing::warn!(
            mode = "loopback-only",
            "no API keys are configured: only clients on this machine (loopback) are served, as tenant \"default\"; configure keys with --api-keys or --api-keys-file, or pass --allow-unauthenticated to serve clients elsewhere"
        ),
        (true, OpenAccess::Anyone) => tracing::warn!(
            mode = "open",
            "no API keys are configured and --allow-unauthenticated is set: the service is open to anyone who can reach it, and every record is stored as tenant \"default\""
        ),
        (false, access) => {
            let ring = keys.ring();
            tracing::info!(
                mode = "api-keys",
                keys = ring.key_count(),
                tenants = ring.tenant_names().len(),
                "API keys loaded"
            );
            if access == OpenAccess::Anyone {
                tracing::warn!("--allow-unauthenticated has no effect: API keys are configured, and every call needs one");
            }
        }
    }
}
