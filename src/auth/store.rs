//! The current key ring, swapped whole on reload (on SIGHUP, or when the keys file's content
//! changes): requests read it through an atomic pointer load, never a lock, and a failed reload
//! keeps the keys in force.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::keys::{check_tenant_name, KeyRing, KeySources, KeysError};
use super::{AuthFailure, AuthMetrics, OpenAccess, Tenant};
use crate::ratelimit::RateLimiter;
use tokio_util::sync::CancellationToken;

/// The keys in force, where they come from, and whom the service serves while there are none.
#[derive(Debug)]
pub(crate) struct KeyStore {
    current: ArcSwap<KeyRing>,
    sources: KeySources,
    open_access: OpenAccess,
    /// Tenants that Loki's `X-Scope-OrgID` named while no key is configured, made on first use.
    org_tenants: ArcSwap<HashMap<Arc<str>, Tenant>>,
    metrics: Arc<AuthMetrics>,
}

/// Distinct `X-Scope-OrgID` tenants a keyless service takes: each has its own metric series, so
/// their number must be bounded.
pub(crate) const MAX_ORG_TENANTS: usize = 64;

impl KeyStore {
    /// Loads the keys for the first time; refusals, keys and tenants are counted in `metrics`.
    pub(crate) fn load(
        sources: KeySources,
        open_access: OpenAccess,
        metrics: Arc<AuthMetrics>,
    ) -> Result<KeyStore, KeysError> {
        let ring = KeyRing::load(&sources, None, &metrics)?;
        metrics.api_keys.set(ring.key_count() as f64);
        Ok(KeyStore {
            current: ArcSwap::from_pointee(ring),
            sources,
            open_access,
            org_tenants: ArcSwap::default(),
            metrics,
        })
    }

    /// Where refusals, keys and tenants are counted.
    pub(crate) fn metrics(&self) -> &AuthMetrics {
        &self.metrics
    }

    /// Re-reads the sources and swaps the new ring in. On error the current keys stay in force;
    /// a reload that would leave no key at all is refused, so an emptied file never opens the
    /// service.
    pub(crate) fn reload(&self) -> Result<Arc<KeyRing>, KeysError> {
        let outcome = self.try_reload();
        let label = if outcome.is_ok() { "ok" } else { "failed" };
        self.metrics.api_keys_reloads.increment_static([label], 1);
        outcome
    }

    fn try_reload(&self) -> Result<Arc<KeyRing>, KeysError> {
        let previous = self.current.load_full();
        let ring = KeyRing::load(&self.sources, Some(&previous), &self.metrics)?;
        if ring.is_open() && !previous.is_open() {
            return Err(KeysError::WouldOpen);
        }
        self.metrics.api_keys.set(ring.key_count() as f64);
        let ring = Arc::new(ring);
        self.current.store(Arc::clone(&ring));
        Ok(ring)
    }

    /// The ring in force now.
    pub(crate) fn ring(&self) -> Arc<KeyRing> {
        self.current.load_full()
    }

    /// True when no key is configured.
    pub(crate) fn is_open(&self) -> bool {
        self.current.load().is_open()
    }

    /// The tenant that a caller of a keyless service names with Loki's `X-Scope-OrgID`, with the
    /// default limits; refused when the name is not a valid tenant name, or when
    /// [`MAX_ORG_TENANTS`] others exist already. Looked up without a lock; made once per name.
    pub(crate) fn org_tenant(&self, org: &str) -> Result<Tenant, String> {
        if let Some(tenant) = self.org_tenants.load().get(org) {
            return Ok(tenant.clone());
        }
        check_tenant_name(org).map_err(|err| format!("X-Scope-OrgID: {err}"))?;
        let mut made = None;
        let mut full = false;
        self.org_tenants.rcu(|known| {
            full = false;
            let mut known = HashMap::clone(known);
            if let Some(tenant) = known.get(org) {
                made = Some(tenant.clone());
            } else if known.len() >= MAX_ORG_TENANTS {
                full = true;
            } else {
                let limits = self.sources.defaults;
                let limiter = limits
                    .is_limited()
                    .then(|| Arc::new(RateLimiter::new(limits)));
                let tenant = made
                    .get_or_insert_with(|| {
                        Tenant::new(Arc::from(org), limiter, self.metrics.tenant(org))
                    })
                    .clone();
                known.insert(Arc::clone(tenant.name()), tenant);
            }
            known
        });
        match made {
            Some(tenant) if !full => Ok(tenant),
            _ => Err(format!(
                "X-Scope-OrgID: this server already serves {MAX_ORG_TENANTS} tenants named by the header and takes no more; configure API keys to give tenants names"
            )),
        }
    }

    /// Whom the service serves while no key is configured.
    pub(crate) fn open_access(&self) -> OpenAccess {
        self.open_access
    }

    /// The tenant of a presented key, from a caller at `peer` (which only matters while no key is
    /// configured), counting failures in `loghaul_auth_failures_total{reason}`.
    pub(crate) fn authenticate(
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
        outcome.map_err(|failure| failure.counted(&self.metrics))
    }
}

/// Reloads `keys` on every SIGHUP and, looking every `poll` (when there is a keys file and `poll`
/// is not zero), whenever the file's content changed, until `stopping` is cancelled. The content
/// is compared, not the file's metadata: a Kubernetes Secret volume replaces its files by swapping
/// a symlink, which leaves the path's own inode and events alone. A failed reload is logged
/// (without any key) and counted, and the keys in force stay; a content that failed is not tried
/// again until it changes.
pub(crate) async fn reload_keys(keys: Arc<KeyStore>, poll: Duration, stopping: CancellationToken) {
    let mut hangups = Hangups::listen();
    let path = keys.sources.file.clone();
    let mut ticks = (path.is_some() && !poll.is_zero()).then(|| {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
    let mut file = FileLook::default();
    loop {
        let trigger = tokio::select! {
            () = stopping.cancelled() => return,
            () = hangups.next() => "sighup",
            () = tick(&mut ticks) => "file_change",
        };
        let mut changed_to = None;
        if trigger == "file_change" {
            let Some(path) = &path else { continue };
            match file.new_content(&keys, path).await {
                Some(digest) => changed_to = Some(digest),
                None => continue,
            }
        }
        match keys.reload() {
            Ok(ring) => tracing::info!(
                trigger,
                keys = ring.key_count(),
                tenants = ring.tenant_names().len(),
                "API keys reloaded"
            ),
            Err(err) => {
                file.refused = changed_to.or(file.refused);
                tracing::error!(trigger, error = %err, "API keys reload failed; the previous keys stay in force")
            }
        }
    }
}

async fn tick(ticks: &mut Option<tokio::time::Interval>) {
    match ticks {
        Some(ticks) => {
            ticks.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// What the poller remembers of the keys file between two looks.
#[derive(Debug, Default)]
struct FileLook {
    /// A content whose reload failed.
    refused: Option<[u8; 32]>,
    /// The last look could not read the file (said once, not at every look).
    unreadable: bool,
}

impl FileLook {
    /// The digest of the file's content when it differs from the keys in force and from a
    /// content already refused.
    async fn new_content(&mut self, keys: &KeyStore, path: &Path) -> Option<[u8; 32]> {
        let content = match tokio::fs::read(path).await {
            Ok(content) => content,
            Err(err) => {
                if !self.unreadable {
                    tracing::warn!(path = %path.display(), error = %err, "cannot read the API keys file; the keys in force stay");
                }
                self.unreadable = true;
                return None;
            }
        };
        self.unreadable = false;
        let digest = super::keys::digest(&content);
        let known = [keys.ring().file_digest(), self.refused];
        (!known.contains(&Some(digest))).then_some(digest)
    }
}

/// SIGHUP, where there is one.
struct Hangups {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Hangups {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let signal = signal(SignalKind::hangup())
                .inspect_err(|err| {
                    tracing::error!(error = %err, "cannot listen for SIGHUP; API keys reload only when the keys file changes");
                })
                .ok();
            Hangups { signal }
        }
        #[cfg(not(unix))]
        Hangups {}
    }

    /// Resolves at the next SIGHUP; never, without them.
    async fn next(&mut self) {
        #[cfg(unix)]
        if let Some(signal) = &mut self.signal {
            if signal.recv().await.is_some() {
                return;
            }
            self.signal = None;
        }
        std::future::pending().await
    }
}
