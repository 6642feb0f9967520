//! What authentication reports (refusals, the keys in force, reloads), and the series of each
//! tenant's records, resolved once when a key ring sets the tenant up: the per-tenant map's lock
//! is taken then, never per record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{Label, Unit};

use crate::model::reject::RejectReason;
use crate::observability::metrics::{Counter, CounterVec, Gauge, Registry, Series};

const AUTH_FAILURES: Series = Series::new("loghaul_auth_failures_total", Unit::Count, "Calls refused before their handler, by reason: missing_key, unknown_key, not_loopback, org_id_mismatch; and without API keys over HTTP: foreign_host (a Host that is not a loopback name or an IP address), foreign_origin (an Origin --http-cors-origins does not list), org_id_without_keys (an X-Scope-OrgID other than default without --allow-org-id-tenants).");
const API_KEYS: Series = Series::new("loghaul_api_keys", Unit::Count, "API keys in force (0: the service serves tenant default, to loopback clients unless --allow-unauthenticated).");
const API_KEYS_RELOADS: Series = Series::new("loghaul_api_keys_reloads_total", Unit::Count, "API key reloads (SIGHUP or a changed keys file), by outcome: ok, failed (the previous keys stay).");
const RECORDS_RECEIVED: Series = Series::new(
    "loghaul_records_received_total",
    Unit::Count,
    "Records received by any protocol, valid or not, by tenant.",
);
const RECORDS_COMMITTED: Series = Series::new(
    "loghaul_records_committed_total",
    Unit::Count,
    "Records committed to the database, by tenant.",
);
const RECORDS_REJECTED: Series = Series::new(
    "loghaul_records_rejected_total",
    Unit::Count,
    "Records refused, by reason and tenant; each is reported to its client with its index.",
);
const RECORDS_FAILED: Series = Series::new("loghaul_records_failed_total", Unit::Count, "Records whose batch could not be stored after retries, by tenant; their streams got UNAVAILABLE.");
const RATE_LIMITED: Series = Series::new("loghaul_rate_limited_total", Unit::Count, "Push streams ended with RESOURCE_EXHAUSTED for exceeding their tenant's rate limit, by tenant.");

/// The series of authentication, and of every tenant it has set up.
#[derive(Debug)]
pub(crate) struct AuthMetrics {
    registry: Registry,
    /// Calls refused with UNAUTHENTICATED or PERMISSION_DENIED, by reason.
    pub failures: CounterVec<1>,
    /// API keys in force.
    pub api_keys: Gauge,
    /// Key reloads, by outcome.
    pub api_keys_reloads: CounterVec<1>,
    tenants: Mutex<HashMap<Arc<str>, Arc<TenantMetrics>>>,
}

impl AuthMetrics {
    /// Registers the series in `registry`; each tenant's are registered when it is set up.
    pub(crate) fn register(registry: &Registry) -> AuthMetrics {
        AuthMetrics {
            registry: registry.clone(),
            failures: CounterVec::register(registry, AUTH_FAILURES, ["reason"]),
            api_keys: Gauge::register(registry, API_KEYS, Vec::new()),
            api_keys_reloads: CounterVec::register(registry, API_KEYS_RELOADS, ["outcome"]),
            tenants: Mutex::default(),
        }
    }

    /// The series of `tenant`'s records, registered on first use. Called when a tenant is set up
    /// (a key ring is loaded), not per record: the map's lock is off the hot path.
    pub(crate) fn tenant(&self, tenant: &str) -> Arc<TenantMetrics> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = tenants.get(tenant) {
            return Arc::clone(known);
        }
        let registered = Arc::new(TenantMetrics::register(&self.registry, tenant));
        tenants.insert(Arc::from(tenant), Arc::clone(&registered));
        registered
    }
}

/// The series of one tenant's records.
#[derive(Debug)]
pub struct TenantMetrics {
    /// Records received, valid or not.
    pub received: Counter,
    /// Records committed.
    pub committed: Counter,
    /// Records refused, by reason (indexed like [`RejectReason::ALL`]).
    rejected: Vec<Counter>,
    /// Records of batches that failed for good.
    pub failed: Counter,
    /// Streams ended for exceeding the tenant's rate.
    pub rate_limited: Counter,
}

impl TenantMetrics {
    fn register(registry: &Registry, tenant: &str) -> TenantMetrics {
        let by_tenant = || vec![Label::new("tenant", tenant.to_owned())];
        let rejected = RejectReason::ALL
            .iter()
            .map(|reason| {
                let mut labels = vec![Label::from_static_parts("reason", reason.as_str())];
                labels.extend(by_tenant());
                Counter::register(registry, RECORDS_REJECTED, labels)
            })
            .collect();
        TenantMetrics {
            received: Counter::register(registry, RECORDS_RECEIVED, by_tenant()),
            committed: Counter::register(registry, RECORDS_COMMITTED, by_tenant()),
            rejected,
            failed: Counter::register(registry, RECORDS_FAILED, by_tenant()),
            rate_limited: Counter::register(registry, RATE_LIMITED, by_tenant()),
        }
    }

    /// The counter of records refused for `reason`.
    pub fn rejected(&self, reason: RejectReason) -> &Counter {
        // Registered in `RejectReason::ALL` order, which is discriminant order (a test checks).
        &self.rejected[reason as usize]
    }

    /// Records refused, whatever the reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().map(Counter::get).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_listed_in_discriminant_order() {
        for (index, reason) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index, "{reason:?}");
        }
    }

    #[test]
    fn a_tenants_rejections_are_counted_under_their_reason() {
        let registry = Registry::new();
        let auth = AuthMetrics::register(&registry);
        let tenant = auth.tenant("metrics-unit-test");
        tenant.rejected(RejectReason::InvalidSeverity).increment(2);
        tenant.rejected(RejectReason::MalformedRecord).increment(1);
        assert_eq!(tenant.rejected(RejectReason::InvalidSeverity).get(), 2);
        assert_eq!(tenant.rejected_total(), 3);
        assert!(Arc::ptr_eq(&tenant, &auth.tenant("metrics-unit-test")));
        let text = registry.render();
        let line = format!(
            "loghaul_records_rejected_total{{reason=\"{}\",tenant=\"metrics-unit-test\"}} 2",
            RejectReason::InvalidSeverity.as_str()
        );
        assert!(text.lines().any(|got| got == line), "{line} in\n{text}");
    }
}
