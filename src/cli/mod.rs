//! Reading clients of the `loghaul` binary.
//!
//! - [`filter_args`]: the filter flags `query` and `tail` share, turned into a wire filter.
//! - [`print`](mod@print): human-readable lines or one JSON object per record.
//! - [`read`]: `loghaul query` (follows cursors up to `--limit`) and `loghaul tail`.

pub mod filter_args;
pub mod print;
pub mod read;
