//! Any body an HTTP shipper can send: the OTLP/JSON and Loki JSON transcoders and the Loki label
//! parser never panic; what a transcoder writes is protobuf that decodes, with the records it
//! refused named in order and inside the request; a label set that parses prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loghaul::server::loki::labels;
use loghaul::server::loki::proto::PushRequest;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(transcoded) = loghaul::server::otlp::json::to_protobuf(data) {
        let request = ExportLogsServiceRequest::decode(&transcoded.protobuf[..])
            .expect("the OTLP/JSON transcoder writes valid protobuf");
        let records: usize = request
            .resource_logs
            .iter()
            .flat_map(|resource| &resource.scope_logs)
            .map(|scope| scope.log_records.len())
            .sum();
        check_indexes(transcoded.invalid.iter().map(|(index, _)| *index), records);
    }
    if let Ok(transcoded) = loghaul::server::loki::json::to_protobuf(data) {
        let request = PushRequest::decode(&transcoded.protobuf[..])
            .expect("the Loki JSON transcoder writes valid protobuf");
        let entries: usize = request.streams.iter().map(|stream| stream.entries.len()).sum();
        check_indexes(transcoded.invalid.iter().map(|(index, _)| *index), entries);
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

/// Refused records are named once each, in request order, and each is one of the request's.
fn check_indexes(indexes: impl Iterator<Item = u64>, count: usize) {
    let mut previous = None;
    for index in indexes {
        assert!((index as usize) < count, "index {index} of {count} records");
        assert!(previous < Some(index), "indexes in order, once each");
        previous = Some(index);
    }
}
