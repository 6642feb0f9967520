//! How operators see the service: Prometheus metrics, HTTP probes, and the service's own logs.

pub mod http;
pub mod logging;
pub mod metrics;
pub mod readiness;
