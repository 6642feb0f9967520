//! Reading clients of the `loghaul` binary.
//!
//! - [`filter_args`]: the filter flags `query` and `tail` share, turned into a wire filter.
//! - [`read`]: `loghaul query` (follows cursors up to `--limit`) and `loghaul tail`, printed by
//!   [`crate::query::render`].

pub mod filter_args;
pub mod read;
