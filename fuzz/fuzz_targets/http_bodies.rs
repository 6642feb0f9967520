//! Any body an HTTP shipper can send: the OTLP/JSON and Loki JSON transcoders and the Loki label
//! parser never panic; what a transcoder writes is protobuf that decodes, with the records it
//! refused named in order and inside the request, the first with their reason cut short; a
//! label set that parses prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loghaul::ingest::loki::labels;
use loghaul::ingest::loki::proto::PushRequest;
use loghaul::ingest::transcode::Refused;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(transcoded) = loghaul::ingest::otlp::json::to_protobuf(data) {
        let request = ExportLogsServiceRequest::decode(&transcoded.protobuf[..])
            .expect("the OTLP/JSON transcoder writes valid protobuf");
        let records: usize = request
            .resource_logs
            .iter()
            .flat_map(|resource| &resource.scope_logs)
            .map(|scope| scope.log_records.len())
            .sum();
        check_refused(&transcoded.refused, records);
    }
    if let Ok(transcoded) = loghaul::ingest::loki::json::to_protobuf(data) {
        let request = PushRequest::decode(&transcoded.protobuf[..])
            .expect("the Loki JSON transcoder writes valid protobuf");
        let entries: usize = request.streams.iter().map(|stream| stream.entries.len()).sum();
        check_refused(&transcoded.refused, entries);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(parsed) = labels::parse(text) {
            let printed = labels::format(&parsed);
            assert_eq!(
                labels::parse(&printed).as_ref(),
                Ok(&parsed),
                "{printed:?} does not parse back"
            );
        }
    }
});

/// Refused records are named once each, in request order, each one of the request's (the
/// protobuf holds the `stored` others); the first of them keep their reason, cut short.
fn check_refused(refused: &Refused, stored: usize) {
    let total = stored as u64 + refused.count();
    let mut previous = None;
    let mut named = 0;
    for index in refused.indexes() {
        assert!(index < total, "index {index} of {total} records");
        assert!(previous < Some(index), "indexes in order, once each");
        assert!(refused.contains(index));
        previous = Some(index);
        named += 1;
    }
    assert_eq!(named, refused.count(), "every refused record is marked");
    let detailed: Vec<u64> = refused.detailed().iter().map(|(index, _)| *index).collect();
    let first: Vec<u64> = refused.indexes().take(detailed.len()).collect();
    assert_eq!(detailed, first, "the first refused keep their reason");
    assert!(refused
        .detailed()
        .iter()
        .all(|(_, invalid)| invalid.detail.chars().count() <= 200));
}
