//! Any text as a LogQL query: parsing succeeds or returns an error whose position lies inside the
//! query (or at its end), never panics, and never recurses past the nesting limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loghaul::loki::logql::parse;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(err) = parse(text) {
        assert!(err.position <= text.len(), "{err:?} for {text:?}");
        assert!(err.line >= 1 && err.column >= 1, "{err:?}");
        assert!(!err.message.is_empty());
    }
});
