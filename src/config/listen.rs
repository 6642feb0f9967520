//! A listener address that can also be switched off (`--console-listen off`).

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Where an optional listener binds, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionalListen(pub Option<SocketAddr>);

impl FromStr for OptionalListen {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("off") {
            return Ok(OptionalListen(None));
        }
        text.parse()
            .map(|addr| OptionalListen(Some(addr)))
            .map_err(|_| {
                format!(
                    "invalid listen address {text:?}: write HOST:PORT (like 127.0.0.1:8080) or off"
                )
            })
    }
}

impl fmt::Display for OptionalListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(addr) => write!(f, "{addr}"),
            None => f.write_str("off"),
        }
    }
}

impl Serialize for OptionalListen {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OptionalListen {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_or_off() {
        let on: OptionalListen = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(on.0, Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(on.to_string(), "127.0.0.1:8080");
        let off: OptionalListen = "OFF".parse().unwrap();
        assert_eq!(off, OptionalListen(None));
        assert_eq!(off.to_string(), "off");
        let err = "8080".parse::<OptionalListen>().unwrap_err();
        assert!(err.contains("HOST:PORT"), "{err}");
    }
}
