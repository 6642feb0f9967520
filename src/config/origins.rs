//! The browser origins the HTTP ingest listener answers CORS requests for (`--http-cors-origins`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Allowed origins, as browsers send them in `Origin` (`https://app.example.com:8443`), or `*`
/// for any; empty allows none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CorsOrigins(pub Vec<String>);

impl CorsOrigins {
    /// True when no origin is allowed: CORS is off.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromStr for CorsOrigins {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut origins = Vec::new();
        for origin in text.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            if origin != "*" {
                let rest = origin
                    .strip_prefix("https://")
                    .or_else(|| origin.strip_prefix("http://"));
                let valid = rest.is_some_and(|host| {
                    !host.is_empty() && !host.contains(['/', '?', '#', ' ', '*'])
                });
                if !valid {
                    return Err(format!(
                        "invalid CORS origin {origin:?}: write scheme://host[:port] as the browser sends it in Origin (like https://app.example.com), without a path, or *"
                    ));
                }
            }
            // Browsers send the scheme and host in lower case.
            origins.push(origin.to_ascii_lowercase());
        }
        Ok(CorsOrigins(origins))
    }
}

impl fmt::Display for CorsOrigins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

impl Serialize for CorsOrigins {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CorsOrigins {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_as_a_browser_sends_them() {
        let parsed: CorsOrigins = " https://App.example.com, http://localhost:5173 ,"
            .parse()
            .unwrap();
        assert_eq!(
            parsed.0,
            ["https://app.example.com", "http://localhost:5173"]
        );
        assert_eq!(
            parsed.to_string(),
            "https://app.example.com,http://localhost:5173"
        );
        assert!("".parse::<CorsOrigins>().unwrap().is_empty());
        assert_eq!("*".parse::<CorsOrigins>().unwrap().0, ["*"]);
        for bad in [
            "app.example.com",
            "https://app.example.com/path",
            "ftp://x",
            "https://",
        ] {
            let err = bad.parse::<CorsOrigins>().unwrap_err();
            assert!(err.contains("scheme://host"), "{bad}: {err}");
        }
    }
}
