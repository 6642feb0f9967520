//! A tiny application that logs with `tracing` and ships its events to loghaul.
//!
//! `tracing_app [ENDPOINT] [EVENTS]` (API key from `LOGHAUL_API_KEY`, if set): emits EVENTS info
//! events inside a span that carries a trace context, then one warning, closes the shipper and
//! prints its counters; exits 0 when every event was acknowledged.

use std::process::ExitCode;
use std::time::Duration;

use loghaul::client::{Client, LoghaulLayer, ShipperConfig};
use tracing_subscriber::prelude::*;

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoint = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:4317".into());
    let events: u64 = args.next().map_or(Ok(10), |n| n.parse())?;
    let mut client = Client::builder(endpoint);
    if let Ok(key) = std::env::var("LOGHAUL_API_KEY") {
        client = client.api_key(key);
    }

    // The three lines that ship an application's logs:
    let shipper = client.build()?.shipper(ShipperConfig::default())?;
    let layer = LoghaulLayer::new(shipper.clone(), "tracing-app");
    tracing_subscriber::registry().with(layer).init();

    let request = tracing::info_span!(
        "request",
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736",
        span_id = "00f067aa0ba902b7"
    );
    for order in 0..events {
        let _entered = request.enter();
        tracing::info!(order, customer = "ada", "order {order} paid");
    }
    tracing::warn!(disk = "sda", "disk almost full");

    // Before exiting: send what is buffered and wait for the acknowledgements.
    let stats = shipper.close(Duration::from_secs(30));
    println!("{stats:?}");
    Ok(if stats.acknowledged == events + 1 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
