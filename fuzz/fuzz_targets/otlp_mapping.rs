//! Any bytes an OTLP exporter can send: decoding, flattening resource and scope, mapping each
//! record and validating it never panics, and whatever validates is storable.
#![no_main]

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use loghaul::ingest::otlp::mapping::{to_wire, Shared};
use loghaul::ingest::validate::{validate_with, Limits};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = ExportLogsServiceRequest::decode(data) else {
        return;
    };
    let limits = Limits {
        max_message_bytes: 4096,
        max_age: None,
    };
    let now = DateTime::<Utc>::from_timestamp(1_764_417_600, 0).unwrap();
    for resource_logs in request.resource_logs {
        let resource = Shared::from_resource(resource_logs.resource.as_ref());
        for scope_logs in resource_logs.scope_logs {
            let shared = resource.with_scope(scope_logs.scope.as_ref());
            for record in scope_logs.log_records {
                let Ok(wire) = to_wire(record, &shared) else {
                    continue;
                };
                if let Ok(stored) = validate_with(wire, &shared.labels, &limits, now) {
                    loghaul_fuzz::check_storable(&stored, now);
                }
            }
        }
    }
});
