//! The values every layer speaks of, owned by none of them: what a read asks for ([`filter`]),
//! where a page ends ([`cursor`]), why a record is refused ([`reject`]), severities and their
//! level names ([`severity`]), and instants on the wire ([`time`]). The server, the
//! pipeline, the query service and the stores all depend on this module; it depends on none of
//! them.

pub(crate) mod cursor;
pub(crate) mod filter;
pub(crate) mod reject;
pub(crate) mod selection;
pub(crate) mod severity;
pub(crate) mod time;

/// A read request that cannot be served as asked (a bad time range, page size or cursor); the
/// message says which and why. Becomes `INVALID_ARGUMENT` (HTTP 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRequest(pub String);
