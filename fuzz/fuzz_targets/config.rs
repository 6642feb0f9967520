//! Any text as a `--config` file, and any string as a duration or a size: parsing either
//! succeeds or returns an error, never panics, and a size or duration that parses prints back
//! to something that parses to the same value.
#![no_main]

use std::path::Path;
use std::str::FromStr;

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use loghaul::config::{ByteSize, HumanDuration, ServeConfig};

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    serve: ServeConfig,
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Values given as flags are printed and parsed again when a --config file is merged, so
    // printing must give back the same value.
    if let Ok(size) = ByteSize::from_str(text) {
        assert_eq!(ByteSize::from_str(&size.to_string()), Ok(size), "{text:?}");
    }
    if let Ok(duration) = HumanDuration::from_str(text) {
        assert_eq!(
            HumanDuration::from_str(&duration.to_string()),
            Ok(duration),
            "{text:?}"
        );
    }
    let defaults = Wrapper::parse_from(["loghaul"]).serve;
    if let Ok(config) = defaults.merge_toml(Path::new("fuzz.toml"), text, |_| false) {
        let _ = config.validate();
        let _ = config.pipeline.shard_count();
    }
});
