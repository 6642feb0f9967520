//! What a connection needs to know: which backend a URL names, how large a pool may grow, and
//! the URL as it may be logged.

use std::fmt;
use std::time::Duration;

use super::error::StoreError;

/// Sizing of the connection pool.
#[derive(Clone, Copy, Debug)]
pub struct PoolOptions {
    /// Most connections open at once.
    pub max_connections: u32,
    /// How long a writer waits for a connection before the attempt counts as failed.
    pub acquire_timeout: Duration,
}

/// Which database a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `postgres://…` or `postgresql://…`.
    Postgres,
    /// `sqlite:…`.
    Sqlite,
}

impl Backend {
    /// The backend `url` names; any other scheme is refused (with the password redacted).
    pub fn of(url: &str) -> Result<Backend, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else {
            Err(StoreError::Url(format!(
                "{:?} is neither postgres://… nor sqlite://…",
                redact_url(url)
            )))
        }
    }

    /// True when `url` names a PostgreSQL database.
    pub fn is_postgres(url: &str) -> bool {
        matches!(Backend::of(url), Ok(Backend::Postgres))
    }
}

/// A database URL kept to open more connections later; its Debug output hides the password, so a
/// handle holding it can be logged.
#[derive(Clone)]
pub(in crate::storage) struct DatabaseUrl(String);

impl DatabaseUrl {
    pub(in crate::storage) fn new(url: &str) -> Self {
        DatabaseUrl(url.to_owned())
    }

    pub(in crate::storage) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

/// The URL with any password replaced, safe to log: the one in the credentials
/// (`user:password@host`) and any `password=` or `sslpassword=` query parameter.
pub(crate) fn redact_url(url: &str) -> String {
    // The query starts after the credentials, whose password may hold an unescaped `?`.
    let host_at = url.rfind('@').unwrap_or(0);
    let (address, query) = match url[host_at..].find('?') {
        Some(at) => (&url[..host_at + at], Some(&url[host_at + at + 1..])),
        None => (url, None),
    };
    let mut redacted = redact_credentials(address);
    if let Some(query) = query {
        let parameters: Vec<String> = query
            .split('&')
            .map(|parameter| match parameter.split_once('=') {
                Some((name, _)) if is_password_parameter(name) => format!("{name}=***"),
                _ => parameter.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&parameters.join("&"));
    }
    redacted
}

fn redact_credentials(address: &str) -> String {
    let Some((scheme, rest)) = address.split_once("://") else {
        return address.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return address.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => address.to_owned(),
    }
}

fn is_password_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "password" || name == "sslpassword"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact_url("postgres://loghaul:s3cret@db:5432/logs"),
            "postgres://loghaul:***@db:5432/logs"
        );
        assert_eq!(
            redact_url("postgres://root@db/test"),
            "postgres://root@db/test"
        );
        assert_eq!(redact_url("sqlite://loghaul.db"), "sqlite://loghaul.db");
        assert_eq!(
            redact_url("postgres://loghaul@db/logs?sslmode=require&password=s3cret"),
            "postgres://loghaul@db/logs?sslmode=require&password=***"
        );
        assert_eq!(
            redact_url("postgres://u:a@b@db/logs?Password=x&sslpassword=y"),
            "postgres://u:***@db/logs?Password=***&sslpassword=***"
        );
        assert_eq!(
            redact_url("postgres://u:pa?ss@db/logs"),
            "postgres://u:***@db/logs"
        );
        assert_eq!(
            redact_url("sqlite://loghaul.db?mode=rwc"),
            "sqlite://loghaul.db?mode=rwc"
        );
    }
}
