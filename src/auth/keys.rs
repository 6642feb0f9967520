//! The key ring: which API key belongs to which tenant, and each tenant's ingest limits.
//!
//! Keys come from a TOML file (`--api-keys-file`) and from an inline list (`--api-keys`,
//! `key1=tenant_a,key2=tenant_b`). Only SHA-256 digests of the keys are kept in memory, and a
//! presented key is compared against every digest in constant time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{AuthFailure, AuthMetrics, Tenant, DEFAULT_TENANT};
use crate::config::{AuthOptions, ByteSize, HumanDuration};
use crate::ratelimit::{RateLimiter, TenantLimits};

/// Longest tenant name: it is stored with every record and used as a metric label.
pub(crate) const MAX_TENANT_NAME: usize = 64;

/// Why keys could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// The keys file could not be read.
    #[error("cannot read API keys file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The keys file is not valid.
    #[error("API keys file {path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong (never includes a key).
        message: String,
    },
    /// The inline list (`--api-keys`, `LOGHAUL_API_KEYS`) is malformed.
    #[error("--api-keys: {0}")]
    Inline(String),
    /// The default limits (`--tenant-*`) are invalid.
    #[error("invalid tenant limits (--tenant-records-per-second, --tenant-bytes-per-second, --tenant-burst): {0}")]
    Limits(String),
    /// A reload would have removed every key, opening the service to anyone.
    #[error("the reloaded configuration has no API keys; keeping the current keys (restart without keys to run open)")]
    WouldOpen,
}

/// The keys file: `[keys]` maps key to tenant, `[tenants.NAME]` optionally sets limits.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: BTreeMap<String, String>,
    #[serde(default)]
    tenants: BTreeMap<String, TenantEntry>,
}

/// Per-tenant overrides of the default limits; 0 means unlimited.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct TenantEntry {
    records_per_second: Option<f64>,
    bytes_per_second: Option<ByteSize>,
    burst: Option<HumanDuration>,
}

/// Where keys come from, kept so that a reload reads the same places.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeySources {
    /// The TOML keys file, re-read on reload.
    pub file: Option<std::path::PathBuf>,
    /// The inline `key=tenant,…` list (fixed for the life of the process).
    pub inline: Option<String>,
    /// Limits of tenants the file does not configure.
    pub defaults: TenantLimits,
}

impl From<&AuthOptions> for KeySources {
    fn from(config: &AuthOptions) -> Self {
        KeySources {
            file: config.api_keys_file.clone(),
            inline: config
                .api_keys
                .as_ref()
                .map(|keys| keys.expose().to_owned()),
            defaults: TenantLimits {
                records_per_second: config.tenant_records_per_second,
                bytes_per_second: config.tenant_bytes_per_second.0 as f64,
                burst: config.tenant_burst.0,
            },
        }
    }
}

/// An immutable snapshot of the keys and tenants. Replaced whole on reload.
#[derive(Debug)]
pub(crate) struct KeyRing {
    /// (SHA-256 of a key, its tenant).
    digests: Vec<([u8; 32], Tenant)>,
    /// Every tenant by name, so a reload can keep the rate-limit state of unchanged tenants.
    tenants: HashMap<Arc<str>, (TenantLimits, Tenant)>,
    /// The tenant of every call when no key is configured.
    open: Option<Tenant>,
    /// SHA-256 of the keys file this ring was read from, so a poller can tell when it changed.
    file_digest: Option<[u8; 32]>,
}

impl KeyRing {
    /// Builds the ring from its sources, reusing limiters of `previous` whose limits are unchanged.
    /// Each tenant's series are resolved in `metrics`.
    pub(crate) fn load(
        sources: &KeySources,
        previous: Option<&KeyRing>,
        metrics: &AuthMetrics,
    ) -> Result<KeyRing, KeysError> {
        let mut file = KeysFile::default();
        let mut file_digest = None;
        if let Some(path) = &sources.file {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| KeysError::Read {
                path: shown.clone(),
                source,
            })?;
            file_digest = Some(digest(text.as_bytes()));
            file = toml::from_str(&text).map_err(|err| KeysError::File {
                path: shown.clone(),
                message: toml_error_without_keys(&text, &err),
            })?;
        }
        let mut pairs: Vec<(String, String, &'static str)> = file
            .keys
            .into_iter()
            .map(|(key, tenant)| (key, tenant, "file"))
            .collect();
        if let Some(inline) = &sources.inline {
            for (key, tenant) in parse_inline(inline)? {
                pairs.push((key, tenant, "--api-keys"));
            }
        }
        let file_error = |message: String| match &sources.file {
            Some(path) => KeysError::File {
                path: path.display().to_string(),
                message,
            },
            None => KeysError::Inline(message),
        };
        sources.defaults.check().map_err(KeysError::Limits)?;
        let mut overrides = HashMap::new();
        for (name, entry) in file.tenants {
            check_tenant_name(&name).map_err(file_error)?;
            let mut limits = sources.defaults;
            if let Some(rate) = entry.records_per_second {
                limits.records_per_second = rate;
            }
            if let Some(rate) = entry.bytes_per_second {
                limits.bytes_per_second = rate.0 as f64;
            }
            if let Some(burst) = entry.burst {
                limits.burst = burst.0;
            }
            limits
                .check()
                .map_err(|err| file_error(format!("tenant {name}: {err}")))?;
            overrides.insert(name, limits);
        }

        let mut ring = KeyRing {
            digests: Vec::new(),
            tenants: HashMap::new(),
            open: None,
            file_digest,
        };
        let mut by_digest: HashMap<[u8; 32], Arc<str>> = HashMap::new();
        for (key, tenant, origin) in pairs {
            let origin_error = |message: String| match origin {
                "file" => file_error(message),
                _ => KeysError::Inline(message),
            };
            if key.is_empty() {
                return Err(origin_error("an empty key".into()));
            }
            // The value is not quoted: with key and tenant swapped, it would be the key.
            check_tenant_name(&tenant).map_err(|_| {
                origin_error(format!(
                    "a key's tenant is not 1 to {MAX_TENANT_NAME} characters of A-Z a-z 0-9 . _ - \
                     (not shown, in case it is a key written where its tenant belongs)"
                ))
            })?;
            let digest = digest(key.as_bytes());
            if let Some(existing) = by_digest.get(&digest) {
                if **existing != *tenant {
                    return Err(file_error(format!(
                        "one key is mapped to two tenants ({existing} and {tenant})"
                    )));
                }
                continue;
            }
            let limits = overrides.get(&tenant).copied().unwrap_or(sources.defaults);
            let tenant = ring.tenant(&tenant, limits, previous, metrics);
            by_digest.insert(digest, Arc::clone(tenant.name()));
            ring.digests.push((digest, tenant));
        }
        if ring.digests.is_empty() {
            let limits = overrides
                .get(DEFAULT_TENANT)
                .copied()
                .unwrap_or(sources.defaults);
            ring.open = Some(ring.tenant(DEFAULT_TENANT, limits, previous, metrics));
        }
        Ok(ring)
    }

    /// The tenant named `name`, created once per ring; its limiter is carried over from the
    /// previous ring when the limits are the same, so a reload does not refill every bucket.
    fn tenant(
        &mut self,
        name: &str,
        limits: TenantLimits,
        previous: Option<&KeyRing>,
        metrics: &AuthMetrics,
    ) -> Tenant {
        if let Some((_, tenant)) = self.tenants.get(name) {
            return tenant.clone();
        }
        let carried = previous
            .and_then(|ring| ring.tenants.get(name))
            .filter(|(old_limits, _)| *old_limits == limits)
            .map(|(_, tenant)| tenant.clone());
        let tenant = carried.unwrap_or_else(|| {
            let name: Arc<str> = Arc::from(name);
            let limiter = limits
                .is_limited()
                .then(|| Arc::new(RateLimiter::new(limits)));
            let series = metrics.tenant(&name);
            Tenant::new(name, limiter, series)
        });
        self.tenants
            .insert(Arc::clone(tenant.name()), (limits, tenant.clone()));
        tenant
    }

    /// True when no key is configured and every call is tenant `default`.
    pub(crate) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// SHA-256 of the keys file as this ring read it; `None` without a file.
    pub(crate) fn file_digest(&self) -> Option<[u8; 32]> {
        self.file_digest
    }

    /// Number of distinct keys.
    pub(crate) fn key_count(&self) -> usize {
        self.digests.len()
    }

    /// Names of the configured tenants.
    pub(crate) fn tenant_names(&self) -> Vec<Arc<str>> {
        let mut names: Vec<_> = self.tenants.keys().cloned().collect();
        names.sort();
        names
    }

    /// The tenant a presented key belongs to.
    pub(crate) fn authenticate(&self, presented: Option<&[u8]>) -> Result<Tenant, AuthFailure> {
        if let Some(open) = &self.open {
            return Ok(open.clone());
        }
        let presented = presented.ok_or(AuthFailure::MissingKey)?;
        let wanted = digest(presented);
        // Every digest is compared, each in constant time, so the time taken says nothing about
        // how close a guess came to any key.
        let mut found = None;
        for (candidate, tenant) in &self.digests {
            if bool::from(candidate.ct_eq(&wanted)) {
                found = Some(tenant);
            }
        }
        found.cloned().ok_or(AuthFailure::UnknownKey)
    }
}

/// SHA-256 of a key, or of a keys file's content.
pub(crate) fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

/// What is wrong with a keys file and where, never quoting it: toml's own message quotes keys
/// (`duplicate key `…` in table `keys``) and its display shows the line, so only the file's own
/// names are kept of what it quotes, and the place is given as a line number and a table.
fn toml_error_without_keys(text: &str, err: &toml::de::Error) -> String {
    let first_line = err.message().lines().next().unwrap_or_default();
    let what = without_quoted_text(first_line);
    let what = if what.is_empty() {
        "invalid TOML".into()
    } else {
        what
    };
    let Some(span) = err.span() else {
        return format!("{what} (the file's text is not shown: it may hold keys)");
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let earlier_lines = &before[..before.rfind('\n').unwrap_or(0)];
    match enclosing_table(earlier_lines) {
        Some(table) => {
            format!("line {line} in [{table}]: {what} (the line is not shown: it may hold a key)")
        }
        None => format!("line {line}: {what} (the line is not shown: it may hold a key)"),
    }
}

/// The keys file's own table and field names: the only quoted text an error may repeat.
const FILE_NAMES: [&str; 5] = [
    "keys",
    "tenants",
    "records-per-second",
    "bytes-per-second",
    "burst",
];

/// `message` without what it quotes: a name in backquotes is kept only if it is one of
/// [`FILE_NAMES`], and a value in double quotes (serde's `string "…"`) never, as it may be a key
/// written where its tenant belongs. An unclosed quote hides the rest.
fn without_quoted_text(message: &str) -> String {
    let mut kept = String::new();
    for (index, part) in message.split('`').enumerate() {
        if index % 2 == 0 {
            kept.extend(part.split('"').step_by(2));
        } else if FILE_NAMES.contains(&part) {
            kept.push('`');
            kept.push_str(part);
            kept.push('`');
        }
    }
    kept.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" ,", ",")
        .trim_end_matches([' ', ',', ':'])
        .to_owned()
}

/// The table of the file's own that the text after `earlier_lines` is in: `keys`, `tenants` or
/// `tenants.NAME`; `None` at the top level or under any other header, which could be a key.
fn enclosing_table(earlier_lines: &str) -> Option<&str> {
    let header = earlier_lines
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| line.starts_with('['))?;
    let name = header.trim_start_matches('[').split(']').next()?.trim();
    let ours = match name.split_once('.') {
        None => name == "keys" || name == "tenants",
        Some((parent, tenant)) => parent == "tenants" && check_tenant_name(tenant).is_ok(),
    };
    ours.then_some(name)
}

/// Splits `key1=tenant_a,key2=tenant_b`. A key may itself contain `=` (base64 padding), so each
/// item is split at its last `=`; tenant names cannot contain one.
pub(crate) fn parse_inline(text: &str) -> Result<Vec<(String, String)>, KeysError> {
    let mut pairs = Vec::new();
    for (position, item) in text.split(',').enumerate() {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some((key, tenant)) = item.rsplit_once('=') else {
            return Err(KeysError::Inline(format!(
                "item {} is not key=tenant",
                position + 1
            )));
        };
        pairs.push((key.trim().to_owned(), tenant.trim().to_owned()));
    }
    Ok(pairs)
}

/// Tenant names are stored with every record and used as metric labels: keep them short and plain.
pub(crate) fn check_tenant_name(name: &str) -> Result<(), String> {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if name.is_empty() || name.len() > MAX_TENANT_NAME || !plain {
        return Err(format!(
            "tenant name {name:?} must be 1 to {MAX_TENANT_NAME} characters of A-Z a-z 0-9 . _ -"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::Registry;

    fn load(sources: &KeySources, previous: Option<&KeyRing>) -> Result<KeyRing, KeysError> {
        KeyRing::load(sources, previous, &AuthMetrics::register(&Registry::new()))
    }

    fn inline(text: &str) -> KeySources {
        KeySources {
            inline: Some(text.into()),
            ..KeySources::default()
        }
    }

    #[test]
    fn inline_keys_map_to_tenants_and_unknown_keys_are_refused() {
        let ring = load(&inline("k1=team-a, k2==team-b,"), None).unwrap();
        assert!(!ring.is_open());
        let tenant = ring.authenticate(Some(b"k1")).unwrap();
        assert_eq!(&**tenant.name(), "team-a");
        // The key "k2=" keeps its own '='.
        assert_eq!(&**ring.authenticate(Some(b"k2=")).unwrap().name(), "team-b");
        assert_eq!(
            ring.authenticate(Some(b"k3")).unwrap_err(),
            AuthFailure::UnknownKey
        );
        assert_eq!(
            ring.authenticate(None).unwrap_err(),
            AuthFailure::MissingKey
        );
    }

    #[test]
    fn no_keys_means_open_as_default() {
        let ring = load(&KeySources::default(), None).unwrap();
        assert!(ring.is_open());
        assert_eq!(&**ring.authenticate(None).unwrap().name(), DEFAULT_TENANT);
    }

    #[test]
    fn bad_lists_are_errors_that_never_show_the_key() {
        let err = load(&inline("secret-key"), None).unwrap_err();
        assert!(!err.to_string().contains("secret-key"), "{err}");
        let err = load(&inline("secret-key=bad tenant"), None).unwrap_err();
        assert!(!err.to_string().contains("secret-key"), "{err}");
        let err = load(&inline("same=a,same=b"), None).unwrap_err();
        assert!(err.to_string().contains("two tenants"), "{err}");
    }

    #[test]
    fn a_bad_file_names_the_line_and_table_never_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let sources = KeySources {
            file: Some(path.clone()),
            ..KeySources::default()
        };
        let key = "k-3f9a1c77e0b24d5e8a6b";
        let cases = [
            (
                format!("# keys\n[keys]\nk-other = \"b\"\n{key} = \"a\"\n\n{key} = \"a\"\n"),
                "line 6 in [keys]: duplicate key",
            ),
            (
                format!("{key} = \"a\"\n[keys]\n"),
                "line 1: unknown field, expected `keys` or `tenants`",
            ),
            (
                format!("[keys]\nacme = \"{key}/x+\"\n"),
                "a key's tenant is not 1 to 64 characters",
            ),
            (
                format!("[keys]\n\"{key}\" = \"acme\n"),
                "line 2 in [keys]: invalid basic string",
            ),
            (
                format!("[tenants.a]\nburst = \"1s\"\n\n[keys]\n{key} = 5\n"),
                "line 5 in [keys]: invalid type: integer, expected a string",
            ),
        ];
        for (text, says) in cases {
            std::fs::write(&path, &text).unwrap();
            let err = load(&sources, None).unwrap_err().to_string();
            assert!(!err.contains(key), "{err}");
            assert!(!err.contains(&key[..8]), "{err}");
            assert!(err.contains(says), "{err} should say {says:?}");
            assert!(err.contains("keys.toml"), "{err}");
        }
    }

    #[test]
    fn the_file_sets_limits_and_reload_keeps_unchanged_buckets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        std::fs::write(
            &path,
            "[keys]\nka = \"a\"\nkb = \"b\"\n[tenants.a]\nrecords-per-second = 10\nburst = \"1s\"\n",
        )
        .unwrap();
        let sources = KeySources {
            file: Some(path.clone()),
            ..KeySources::default()
        };
        let first = load(&sources, None).unwrap();
        let a = first.authenticate(Some(b"ka")).unwrap();
        assert!(a.is_limited(), "a has limits");
        assert!(!first.authenticate(Some(b"kb")).unwrap().is_limited());
        a.admit(10, 0).unwrap();
        assert!(a.admit(1, 0).is_err(), "the burst is spent");

        let second = load(&sources, Some(&first)).unwrap();
        let a_again = second.authenticate(Some(b"ka")).unwrap();
        assert!(
            a_again.admit(1, 0).is_err(),
            "the reload kept a's spent bucket"
        );

        assert_eq!(second.file_digest(), first.file_digest(), "same content");
        std::fs::write(&path, "[keys]\nka = \"a\"\n").unwrap();
        let third = load(&sources, Some(&second)).unwrap();
        assert_ne!(third.file_digest(), second.file_digest(), "changed content");

        std::fs::write(&path, "bogus = 1\n[keys]\nka = \"a\"\n").unwrap();
        let err = load(&sources, Some(&first)).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
