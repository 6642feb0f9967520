//! Who may read now: at most `--max-concurrent-reads-per-tenant` reads of one tenant run at once,
//! so one tenant cannot take every read connection, and the others' reads never wait behind its
//! own; at most `--max-tails` tails are open, `--max-tails-per-tenant` of one tenant, since every
//! open tail polls the database.
//!
//! The state is one map of per-tenant semaphores behind a mutex, held only to find a tenant's
//! semaphores, once per request (a tail looks its read slots up once and keeps them). The map
//! holds one entry per tenant that has read, and tenants come from the keys configuration, so it
//! stays small. Ingest never touches it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::metrics::QueryMetrics;
use crate::error::QueryError;
use crate::observability::metrics::CounterVec;

/// How long a read beyond its tenant's limit waits for one of the tenant's reads to finish before
/// it is refused: enough to smooth a burst of quick reads, not to queue slow ones.
pub(crate) const ADMISSION_WAIT: Duration = Duration::from_millis(250);

/// How many reads and tails may run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdmissionLimits {
    /// Reads one tenant may run at once.
    pub reads_per_tenant: usize,
    /// Tails open at once, all tenants together.
    pub tails: usize,
    /// Tails one tenant may have open.
    pub tails_per_tenant: usize,
}

/// The read and tail slots of every tenant.
#[derive(Debug)]
pub(crate) struct Admission {
    limits: AdmissionLimits,
    tails: Arc<Semaphore>,
    tenants: Mutex<HashMap<Arc<str>, TenantSlots>>,
    /// `loghaul_reads_refused_total`.
    refused: CounterVec<2>,
}

/// One tenant's semaphores.
#[derive(Debug)]
struct TenantSlots {
    reads: Arc<Semaphore>,
    tails: Arc<Semaphore>,
}

/// An open tail's place, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct TailSlot {
    _tenant: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

/// One tenant's read slots, for a tail to take one per poll without going through the map.
#[derive(Clone, Debug)]
pub(crate) struct TenantReads {
    tenant: Arc<str>,
    limit: usize,
    slots: Arc<Semaphore>,
    refused: CounterVec<2>,
}

impl Admission {
    /// Admission within `limits` (each at least 1), counting refusals in `metrics`.
    pub(crate) fn new(limits: AdmissionLimits, metrics: &QueryMetrics) -> Self {
        let limits = AdmissionLimits {
            reads_per_tenant: limits.reads_per_tenant.max(1),
            tails: limits.tails.max(1),
            tails_per_tenant: limits.tails_per_tenant.max(1),
        };
        Admission {
            limits,
            tails: Arc::new(Semaphore::new(limits.tails)),
            tenants: Mutex::new(HashMap::new()),
            refused: metrics.reads_refused.clone(),
        }
    }

    /// Runs `take` on the semaphores of `tenant`, created on its first read.
    fn with_tenant<T>(&self, tenant: &Arc<str>, take: impl FnOnce(&TenantSlots) -> T) -> T {
        // A panic elsewhere cannot leave the map half-updated: take it as it is.
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let slots = tenants
            .entry(Arc::clone(tenant))
            .or_insert_with(|| TenantSlots {
                reads: Arc::new(Semaphore::new(self.limits.reads_per_tenant)),
                tails: Arc::new(Semaphore::new(self.limits.tails_per_tenant)),
            });
        take(slots)
    }

    /// The read slots of `tenant`.
    pub(crate) fn tenant(&self, tenant: &Arc<str>) -> TenantReads {
        let slots = self.with_tenant(tenant, |slots| Arc::clone(&slots.reads));
        TenantReads {
            tenant: Arc::clone(tenant),
            limit: self.limits.reads_per_tenant,
            slots,
            refused: self.refused.clone(),
        }
    }

    /// A place for one more open tail of `tenant`, refused at once when the tenant or the server
    /// has as many as it may: a tail lasts until its client leaves, so waiting would not help.
    pub(crate) fn tail(&self, tenant: &Arc<str>) -> Result<TailSlot, QueryError> {
        let refuse = |reason: &'static str, err: QueryError| {
            self.refused.increment([reason, tenant], 1);
            Err(err)
        };
        let Ok(own) =
            self.with_tenant(tenant, |slots| Arc::clone(&slots.tails).try_acquire_owned())
        else {
            return refuse(
                "tenant_tails",
                QueryError::TooManyTenantTails {
                    tenant: Arc::clone(tenant),
                    limit: self.limits.tails_per_tenant,
                },
            );
        };
        let Ok(all) = Arc::clone(&self.tails).try_acquire_owned() else {
            return refuse(
                "tails",
                QueryError::TooManyTails {
                    limit: self.limits.tails,
                },
            );
        };
        Ok(TailSlot {
            _tenant: own,
            _all: all,
        })
    }
}

impl TenantReads {
    /// The tenant's name.
    pub(crate) fn name(&self) -> &str {
        &self.tenant
    }

    /// A slot for one read, waiting at most [`ADMISSION_WAIT`]; refused past it.
    pub(crate) async fn admit(&self) -> Result<OwnedSemaphorePermit, QueryError> {
        let waited = tokio::time::timeout(ADMISSION_WAIT, self.wait()).await;
        if let Ok(Some(permit)) = waited {
            return Ok(permit);
        }
        self.refused.increment(["tenant_reads", &self.tenant], 1);
        Err(QueryError::TooManyReads {
            tenant: Arc::clone(&self.tenant),
            limit: self.limit,
        })
    }

    /// A slot for one more read of a query that already holds one, if one is free now: its
    /// reads may then run side by side, and otherwise they run one after the other. Never
    /// waited for and never refused, so a tenant's reads together hold no more connections than
    /// its slots.
    pub(crate) fn spare(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// A slot for one read, waiting as long as it takes (a tail poll, which its own deadline
    /// bounds); `None` only if the semaphore were closed, which it never is.
    pub(crate) async fn wait(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::Registry;

    fn admission(reads_per_tenant: usize, tails: usize, tails_per_tenant: usize) -> Admission {
        Admission::new(
            AdmissionLimits {
                reads_per_tenant,
                tails,
                tails_per_tenant,
            },
            &QueryMetrics::register(&Registry::new()),
        )
    }

    #[test]
    fn tails_are_capped_per_tenant_then_overall_and_a_closed_one_frees_its_place() {
        let admission = admission(1, 3, 2);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let first = admission.tail(&a).unwrap();
        let _second = admission.tail(&a).unwrap();
        let err = admission.tail(&a).unwrap_err();
        assert!(err.to_string().contains("--max-tails-per-tenant"), "{err}");
        let _third = admission.tail(&b).unwrap();
        let err = admission.tail(&b).unwrap_err();
        assert!(err.to_string().contains("(--max-tails)"), "{err}");
        drop(first);
        assert!(admission.tail(&b).is_ok(), "a closed tail frees its place");
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_past_its_limit_waits_briefly_then_is_refused_and_others_are_not() {
        let admission = admission(2, 1, 1);
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        let first = admission.tenant(&a).admit().await.unwrap();
        let _second = admission.tenant(&a).admit().await.unwrap();
        let refused = admission.tenant(&a).admit().await.unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("--max-concurrent-reads-per-tenant"),
            "{refused}"
        );
        assert!(
            admission.tenant(&b).admit().await.is_ok(),
            "b has its own slots"
        );

        // A slot freed while a read waits is its.
        let reads = admission.tenant(&a);
        let waiting = tokio::spawn(async move { reads.admit().await.map(drop) });
        tokio::time::sleep(ADMISSION_WAIT / 2).await;
        drop(first);
        assert!(waiting.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn a_spare_slot_is_one_of_the_tenants_own() {
        let admission = admission(2, 1, 1);
        let a: Arc<str> = Arc::from("a");
        let reads = admission.tenant(&a);
        let first = reads.admit().await.unwrap();
        let spare = reads.spare().expect("the tenant's second slot is free");
        assert!(reads.spare().is_none(), "no third slot");
        drop(spare);
        assert!(reads.spare().is_some());
        drop(first);
    }
}
