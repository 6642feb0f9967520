//! How operators see the service: Prometheus metrics, readiness, and the service's own logs (the
//! HTTP port that serves them is [`crate::web::probes`]).

pub mod logging;
pub(crate) mod metrics;
pub(crate) mod readiness;
