//! The current key ring, swapped whole on reload: requests read it through an atomic pointer load,
//! never a lock, and a failed reload keeps the keys in force.

use std::sync::Arc;

use arc_swap::ArcSwap;
use metrics::{counter, gauge};

use super::keys::{KeyRing, KeySources, KeysError};
use super::{AuthFailure, OpenAccess, Tenant};

/// The keys in force, where they come from, and whom the service serves while there are none.
#[derive(Debug)]
pub struct KeyStore {
    current: ArcSwap<KeyRing>,
    sources: KeySources,
    open_access: OpenAccess,
}

impl KeyStore {
    /// Loads the keys for the first time.
    pub fn load(sources: KeySources, open_access: OpenAccess) -> Result<KeyStore, KeysError> {
        let ring = KeyRing::load(&sources, None)?;
        gauge!("loghaul_api_keys").set(ring.key_count() as f64);
        Ok(KeyStore {
            current: ArcSwap::from_pointee(ring),
            sources,
            open_access,
        })
    }

    /// Re-reads the sources and swaps the new ring in. On error the current keys stay in force;
    /// a reload that would leave no key at all is refused, so an emptied file never opens the
    /// service.
    pub fn reload(&self) -> Result<Arc<KeyRing>, KeysError> {
        let outcome = self.try_reload();
        let label = if outcome.is_ok() { "ok" } else { "failed" };
        counter!("loghaul_api_keys_reloads_total", "outcome" => label).increment(1);
        outcome
    }

    fn try_reload(&self) -> Result<Arc<KeyRing>, KeysError> {
        let previous = self.current.load_full();
        let ring = KeyRing::load(&self.sources, Some(&previous))?;
        if ring.is_open() && !previous.is_open() {
            return Err(KeysError::WouldOpen);
        }
        gauge!("loghaul_api_keys").set(ring.key_count() as f64);
        let ring = Arc::new(ring);
        self.current.store(Arc::clone(&ring));
        Ok(ring)
    }

    /// The ring in force now.
    pub fn ring(&self) -> Arc<KeyRing> {
        self.current.load_full()
    }

    /// True when no key is configured.
    pub fn is_open(&self) -> bool {
        self.current.load().is_open()
    }

    /// Whom the service serves while no key is configured.
    pub fn open_access(&self) -> OpenAccess {
        self.open_access
    }

    /// The tenant of a presented key, from a caller at `peer` (which only matters while no key is
    /// configured), counting failures in `loghaul_auth_failures_total{reason}`.
    pub fn authenticate(
        &self,
        presented: Option<&[u8]>,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Tenant, AuthFailure> {
        let ring = self.current.load();
        let outcome = if ring.is_open() && !self.open_access.admits(peer) {
            Err(AuthFailure::NotLoopback)
        } else {
            ring.authenticate(presented)
        };
        if let Err(failure) = &outcome {
            counter!("loghaul_auth_failures_total", "reason" => failure.as_str()).increment(1);
        }
        outcome
    }
}

/// Reloads `keys` on every SIGHUP until `stopping` is cancelled. A failed reload is logged (without
/// any key) and counted, and the keys in force stay.
pub async fn reload_on_sighup(keys: Arc<KeyStore>, stopping: tokio_util::sync::CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGHUP; API keys reload only on restart");
                return;
            }
        };
        loop {
            tokio::select! {
                () = stopping.cancelled() => return,
                received = hangups.recv() => if received.is_none() { return },
            }
            match keys.reload() {
                Ok(ring) => tracing::info!(
                    keys = ring.key_count(),
                    tenants = ring.tenant_names().len(),
                    "API keys reloaded"
                ),
                Err(err) => {
                    tracing::error!(error = %err, "API keys reload failed; the previous keys stay in force")
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = keys;
        stopping.cancelled().await;
    }
}
