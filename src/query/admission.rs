//! Who may read now: at most `--max-concurrent-reads-per-tenant` reads of one tenant run at once,
//! so one tenant cannot take every read connection; the others' reads never wait behind its own.
//!
//! The state is one map of per-tenant semaphores behind a mutex, held only to find a tenant's
//! semaphore, once per request (a tail looks its semaphore up once and keeps it). The map holds
//! one entry per tenant that has read, and tenants come from the keys configuration, so it stays
//! small. Ingest never touches it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use metrics::counter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::QueryError;

/// How long a read beyond its tenant's limit waits for one of the tenant's reads to finish before
/// it is refused: enough to smooth a burst of quick reads, not to queue slow ones.
pub const ADMISSION_WAIT: Duration = Duration::from_millis(250);

/// The read slots of every tenant.
#[derive(Debug)]
pub struct Admission {
    reads_per_tenant: usize,
    tenants: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
}

/// One tenant's read slots, for a tail to take one per poll without going through the map.
#[derive(Clone, Debug)]
pub struct TenantReads {
    tenant: Arc<str>,
    limit: usize,
    slots: Arc<Semaphore>,
}

impl Admission {
    /// At most `reads_per_tenant` reads of each tenant at once.
    pub fn new(reads_per_tenant: usize) -> Self {
        Admission {
            reads_per_tenant: reads_per_tenant.max(1),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// The read slots of `tenant`.
    pub fn tenant(&self, tenant: &Arc<str>) -> TenantReads {
        // A panic elsewhere cannot leave the map half-updated: take it as it is.
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let slots = tenants
            .entry(Arc::clone(tenant))
            .or_insert_with(|| Arc::new(Semaphore::new(self.reads_per_tenant)));
        TenantReads {
            tenant: Arc::clone(tenant),
            limit: self.reads_per_tenant,
            slots: Arc::clone(slots),
        }
    }
}

impl TenantReads {
    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.tenant
    }

    /// A slot for one read, waiting at most [`ADMISSION_WAIT`]; refused past it.
    pub async fn admit(&self) -> Result<OwnedSemaphorePermit, QueryError> {
        let waited = tokio::time::timeout(ADMISSION_WAIT, self.wait()).await;
        if let Ok(Some(permit)) = waited {
            return Ok(permit);
        }
        counter!("loghaul_reads_refused_total", "reason" => "tenant_reads", "tenant" => self.tenant.to_string())
            .increment(1);
        Err(QueryError::TooManyReads {
            tenant: Arc::clone(&self.tenant),
            limit: self.limit,
        })
    }

    /// A slot for one read, waiting as long as it takes (a tail poll, which its own deadline
    /// bounds); `None` only if the semaphore were closed, which it never is.
    pub async fn wait(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tenant_past_its_limit_waits_briefly_then_is_refused_and_others_are_not() {
        let admission = Admission::new(2);
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
}
