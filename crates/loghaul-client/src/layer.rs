//! [`LoghaulLayer`]: a `tracing_subscriber` layer that ships every event through a [`Shipper`].
//!
//! - level → severity (TRACE 1, DEBUG 5, INFO 9, WARN 13, ERROR 17);
//! - the `message` field → the message; every other field of the event → an attribute (text as
//!   is, other values as their `Debug` form), plus `target` (the event's target) and `span`
//!   (the names of the spans it is in, outermost first, joined by `:`);
//! - trace context: fields named `trace_id` (32 hex characters) and `span_id` (16 hex
//!   characters) on the event, else on the nearest enclosing span that has them (recorded when
//!   the span is created or later with `Span::record`). A value of another shape stays an
//!   attribute instead;
//! - the service name given to [`LoghaulLayer::new`].
//!
//! Events emitted on the shipper's own thread (its transport's logs) are not shipped, so the
//! layer never feeds itself.

use std::collections::BTreeMap;
use std::fmt;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::shipper::{Shipper, ON_SHIPPER_THREAD};
use loghaul_proto::v1::LogRecord;

/// Ships tracing events as log records.
#[derive(Clone, Debug)]
pub struct LoghaulLayer {
    shipper: Shipper,
    service: String,
}

impl LoghaulLayer {
    /// Events become records of `service`, pushed to `shipper` (never blocking under the
    /// drop-newest policy).
    pub fn new(shipper: Shipper, service: impl Into<String>) -> Self {
        LoghaulLayer {
            shipper,
            service: service.into(),
        }
    }
}

/// The OpenTelemetry severity number of a tracing level.
pub fn severity(level: &Level) -> i32 {
    match *level {
        Level::TRACE => 1,
        Level::DEBUG => 5,
        Level::INFO => 9,
        Level::WARN => 13,
        _ => 17,
    }
}

/// Trace context carried by a span.
#[derive(Clone, Debug, Default)]
struct SpanIds {
    trace_id: Option<String>,
    span_id: Option<String>,
}

impl<S> Layer<S> for LoghaulLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let ids = fields.take_ids();
        if ids.trace_id.is_some() || ids.span_id.is_some() {
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(ids);
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        values.record(&mut fields);
        let ids = fields.take_ids();
        if ids.trace_id.is_none() && ids.span_id.is_none() {
            return;
        }
        if let Some(span) = ctx.span(id) {
            let mut extensions = span.extensions_mut();
            match extensions.get_mut::<SpanIds>() {
                Some(known) => {
                    known.trace_id = ids.trace_id.or(known.trace_id.take());
                    known.span_id = ids.span_id.or(known.span_id.take());
                }
                None => extensions.insert(ids),
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if ON_SHIPPER_THREAD.with(|flag| flag.get()) {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut ids = fields.take_ids();
        let mut span_names = Vec::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                span_names.push(span.name());
                if ids.trace_id.is_some() && ids.span_id.is_some() {
                    continue;
                }
                if let Some(known) = span.extensions().get::<SpanIds>() {
                    if ids.trace_id.is_none() && ids.span_id.is_none() {
                        ids = known.clone();
                    } else if ids.trace_id.is_none() {
                        ids.trace_id.clone_from(&known.trace_id);
                    }
                }
            }
        }
        let metadata = event.metadata();
        let mut attributes = fields.attributes;
        attributes.insert("target".into(), metadata.target().to_owned());
        if !span_names.is_empty() {
            span_names.reverse();
            attributes.insert("span".into(), span_names.join(":"));
        }
        let record = LogRecord {
            timestamp: None,
            severity: severity(metadata.level()),
            service: self.service.clone(),
            message: fields.message.unwrap_or_default(),
            attributes,
            trace_id: ids.trace_id.unwrap_or_default(),
            span_id: ids.span_id.unwrap_or_default(),
        };
        // A full buffer drops the record and counts it; the application goes on.
        let _ = self.shipper.push(record);
    }
}

/// An event's or span's fields, split into message, trace context and attributes.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    trace_id: Option<String>,
    span_id: Option<String>,
    attributes: BTreeMap<String, String>,
}

impl Fields {
    fn take_ids(&mut self) -> SpanIds {
        SpanIds {
            trace_id: self.trace_id.take(),
            span_id: self.span_id.take(),
        }
    }

    fn add(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.message = Some(value),
            "trace_id" if is_hex(&value, 32) => self.trace_id = Some(value.to_ascii_lowercase()),
            "span_id" if is_hex(&value, 16) => self.span_id = Some(value.to_ascii_lowercase()),
            name => {
                self.attributes.insert(name.to_owned(), value);
            }
        }
    }
}

fn is_hex(value: &str, length: usize) -> bool {
    value.len() == length && value.bytes().all(|byte| byte.is_ascii_hexdigit())
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.add(field, value.to_owned());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.add(field, value.to_string());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.add(field, value.to_string());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.add(field, value.to_string());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.add(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.add(field, format!("{value:?}"));
    }
}
