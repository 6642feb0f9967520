//! What a series is before any handle of it exists: the name, unit and help text a registry
//! describes it with.

use metrics::Unit;

/// A series' name, unit and help text: what `# HELP` says and what every handle of it registers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Series {
    /// The Prometheus name.
    pub name: &'static str,
    pub(super) unit: Unit,
    pub(super) help: &'static str,
}

impl Series {
    /// A series of `unit` named `name` (with the `loghaul_` prefix and Prometheus suffixes).
    pub(crate) const fn new(name: &'static str, unit: Unit, help: &'static str) -> Series {
        Series { name, unit, help }
    }
}
