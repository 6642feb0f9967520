//! The query string of `/api/v1/logs`, `/api/v1/tail` and `/api/v1/volume` turned into the same
//! wire requests the gRPC `LogQuery` takes, so the filter rules and their reasons live in one
//! place ([`crate::query::filter`]); this module only refuses what cannot even be parsed.

use chrono::Utc;

use crate::config::HumanDuration;
use crate::model::severity::Severity;
use crate::model::time;
use crate::proto::v1::{Filter, QueryRequest, TailRequest};

/// Longest query string accepted; a filter never needs more.
const MAX_QUERY_BYTES: usize = 16 << 10;

/// Parameters common to search, tail and volume, and what they mean.
pub(crate) const FILTER_PARAMETERS: &str =
    "since, from, to, service, min_severity, contains, attr (key=value)";

/// Which endpoint the parameters are for: each takes the filter and a few of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `/logs`: `page_size` and `cursor`.
    Logs,
    /// `/tail`: `cursor`.
    Tail,
    /// `/volume`: the filter alone (it answers in one go).
    Volume,
}

impl Endpoint {
    fn takes_cursor(self) -> bool {
        matches!(self, Endpoint::Logs | Endpoint::Tail)
    }

    fn own_parameters(self) -> &'static str {
        match self {
            Endpoint::Logs => ", page_size, cursor",
            Endpoint::Tail => ", cursor",
            Endpoint::Volume => "",
        }
    }
}

/// The parsed parameters.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Params {
    /// The wire filter.
    pub filter: Filter,
    /// `page_size` (`/logs` only).
    pub page_size: u32,
    /// `cursor`: where a page or a tail continues (not `/volume`).
    pub cursor: String,
}

impl Params {
    /// Parses a raw query string (`None`: no parameters) for `endpoint`.
    pub(crate) fn parse(query: Option<&str>, endpoint: Endpoint) -> Result<Params, String> {
        let query = query.unwrap_or_default();
        if query.len() > MAX_QUERY_BYTES {
            return Err(format!(
                "the query string is longer than {MAX_QUERY_BYTES} bytes"
            ));
        }
        let mut params = Params::default();
        let mut since = None;
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.into_owned();
            match name.as_ref() {
                "since" => {
                    let parsed: HumanDuration =
                        value.parse().map_err(|err| format!("since: {err}"))?;
                    since = Some(parsed);
                }
                "from" => params.filter.from = Some(time::parse_rfc3339("from", &value)?),
                "to" => params.filter.to = Some(time::parse_rfc3339("to", &value)?),
                "service" => params.filter.services.push(value),
                "min_severity" => params.filter.min_severity = severity(&value)?,
                "contains" => params.filter.contains = value,
                "attr" => {
                    let (key, value) = value
                        .split_once('=')
                        .ok_or_else(|| format!("attr {value:?}: write it key=value"))?;
                    params
                        .filter
                        .attributes
                        .insert(key.to_owned(), value.to_owned());
                }
                "cursor" if endpoint.takes_cursor() => params.cursor = value,
                "page_size" if endpoint == Endpoint::Logs => {
                    params.page_size = value
                        .parse()
                        .map_err(|_| format!("page_size {value:?} is not a whole number"))?;
                }
                other => {
                    return Err(format!(
                        "unknown parameter {other:?}; known: {FILTER_PARAMETERS}{}",
                        endpoint.own_parameters()
                    ));
                }
            }
        }
        if let Some(since) = since {
            if params.filter.from.is_some() {
                return Err("give since or from, not both".into());
            }
            let since = chrono::TimeDelta::from_std(since.0)
                .ok()
                .and_then(|since| Utc::now().checked_sub_signed(since))
                .ok_or_else(|| "since is too long".to_owned())?;
            params.filter.from = Some(time::to_proto(since));
        }
        Ok(params)
    }

    /// The request of a search page.
    pub(crate) fn query_request(self) -> QueryRequest {
        QueryRequest {
            filter: Some(self.filter),
            page_size: self.page_size,
            cursor: self.cursor,
        }
    }

    /// The request of a tail.
    pub(crate) fn tail_request(self) -> TailRequest {
        TailRequest {
            filter: Some(self.filter),
            cursor: self.cursor,
        }
    }
}

/// A number passes as it is: the filter's own check says why one is out of range.
fn severity(text: &str) -> Result<i32, String> {
    if let Ok(number) = text.parse::<i32>() {
        return Ok(number);
    }
    Severity::parse_min(text).ok_or_else(|| {
        format!(
            "min_severity {text:?}: use trace, debug, info, warn, error, fatal or a number 0..=24"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_parameter_maps_onto_the_wire_filter() {
        let params = Params::parse(
            Some("service=a&service=b+c&min_severity=warn&contains=card%20declined&attr=region%3Deu&attr=k%3Dv%3Dw&from=2026-11-29T10:00:00Z&to=2026-11-29T11:00:00%2B01:00&page_size=50&cursor=xyz"),
            Endpoint::Logs,
        )
        .unwrap();
        assert_eq!(params.filter.services, ["a", "b c"]);
        assert_eq!(params.filter.min_severity, 13);
        assert_eq!(params.filter.contains, "card declined");
        assert_eq!(params.filter.attributes["region"], "eu");
        assert_eq!(params.filter.attributes["k"], "v=w");
        assert_eq!(params.filter.from.unwrap().seconds, 1_795_946_400);
        assert_eq!(params.filter.to.unwrap().seconds, 1_795_946_400);
        assert_eq!(params.page_size, 50);
        assert_eq!(params.cursor, "xyz");
    }

    #[test]
    fn since_is_relative_to_now() {
        let params = Params::parse(Some("since=15m"), Endpoint::Tail).unwrap();
        let from = params.filter.from.unwrap().seconds;
        let expected = Utc::now().timestamp() - 15 * 60;
        assert!((from - expected).abs() <= 2, "{from} vs {expected}");
        assert_eq!(
            Params::parse(None, Endpoint::Logs).unwrap(),
            Params::default()
        );
    }

    #[test]
    fn unparsable_values_say_which_parameter_and_why() {
        let cases = [
            ("from=yesterday", "from \"yesterday\""),
            ("since=soon", "since: invalid duration"),
            ("since=1h&from=2026-11-29T10:00:00Z", "not both"),
            ("min_severity=loud", "min_severity \"loud\""),
            ("attr=region", "write it key=value"),
            ("page_size=ten", "page_size \"ten\""),
            ("colour=red", "unknown parameter \"colour\""),
        ];
        for (query, expected) in cases {
            let err = Params::parse(Some(query), Endpoint::Logs).unwrap_err();
            assert!(err.contains(expected), "{query}: {err}");
        }
        let err = Params::parse(Some("page_size=10"), Endpoint::Tail).unwrap_err();
        assert!(err.contains("unknown parameter \"page_size\""), "{err}");
        for own in ["page_size=10", "cursor=xyz"] {
            let err = Params::parse(Some(own), Endpoint::Volume).unwrap_err();
            assert!(
                err.ends_with(&format!("known: {FILTER_PARAMETERS}")),
                "{own}: {err}"
            );
        }
    }
}
