//! OTLP's trace export request (`ExportTraceServiceRequest`, opentelemetry-proto's `trace.proto` and
//! `trace_service.proto`), written in protobuf's wire format straight from the SDK's finished spans.
//!
//! Why not opentelemetry-proto's conversion and prost (decision 47): they build a second copy of every span in the
//! generated types, group the spans by scope through a SipHash map, and then measure each nested message again at
//! every level of nesting (an attribute's value six times); that was half of what a recorded delivery cost. Here
//! each message is written once, into one buffer, and its length is patched in after it. What is written is the
//! same message opentelemetry-proto's conversion makes, field for field: `tests` decodes it with opentelemetry-proto
//! and compares it with that conversion.
//!
//! Invariant: everything a span holds is written (its attributes, events, links, status and flags as the
//! conversion sets them); a value the SDK adds later is written as its text rather than dropped.

use opentelemetry::trace::{SpanContext, SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;
use std::time::{SystemTime, UNIX_EPOCH};

/// Protobuf's wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// `SpanFlags`: the flags say whether the parent's remoteness is known (always, here) and whether it was remote.
const CONTEXT_HAS_IS_REMOTE: u32 = 0x100;
const CONTEXT_IS_REMOTE: u32 = 0x200;

/// Writes export requests for one resource: its attributes are written once, when the encoder is made.
#[derive(Debug)]
pub struct Encoder {
    /// The `Resource` message's fields.
    resource: Vec<u8>,
    schema_url: String,
}

impl Encoder {
    /// An encoder for spans of `resource`.
    pub fn new(resource: &Resource) -> Self {
        let mut out = Vec::new();
        for (key, value) in resource.iter() {
            message(&mut out, 1, |out| key_value(out, key.as_str(), value));
        }
        Self { resource: out, schema_url: resource.schema_url().unwrap_or_default().to_owned() }
    }

    /// Replaces `out` with the `ExportTraceServiceRequest` for `spans`: one `ResourceSpans`, a `ScopeSpans` for
    /// each instrumentation scope in the order they first appear, each holding its spans in their order.
    pub fn encode(&self, spans: &[SpanData], out: &mut Vec<u8>) {
        out.clear();
        // Each span's scope, as an index into the scopes in the order they first appear (usually one).
        let mut scopes: Vec<&InstrumentationScope> = Vec::new();
        let scope_of: Vec<usize> = spans
            .iter()
            .map(|span| {
                let scope = &span.instrumentation_scope;
                scopes.iter().position(|s| *s == scope).unwrap_or_else(|| {
                    scopes.push(scope);
                    scopes.len() - 1
                })
            })
            .collect();
        // A batch's and a scope's lengths take three bytes up to 2 MiB, a span's two up to 16 KiB.
        message_sized(out, 1, 3, |out| {
            message(out, 1, |out| out.extend_from_slice(&self.resource));
            for (index, scope) in scopes.iter().enumerate() {
                message_sized(out, 2, 3, |out| {
                    message(out, 1, |out| instrumentation_scope(out, scope));
                    for (span, _) in spans.iter().zip(&scope_of).filter(|(_, s)| **s == index) {
                        message_sized(out, 2, 2, |out| span_fields(out, span));
                    }
                    string(out, 3, scope.schema_url().unwrap_or_default());
                });
            }
            string(out, 3, &self.schema_url);
        });
    }
}

fn instrumentation_scope(out: &mut Vec<u8>, scope: &InstrumentationScope) {
    string(out, 1, scope.name());
    string(out, 2, scope.version().unwrap_or_default());
    for kv in scope.attributes() {
        message(out, 3, |out| key_value(out, kv.key.as_str(), &kv.value));
    }
}

fn span_fields(out: &mut Vec<u8>, span: &SpanData) {
    let cx = &span.span_context;
    bytes(out, 1, &cx.trace_id().to_bytes());
    bytes(out, 2, &cx.span_id().to_bytes());
    string(out, 3, &cx.trace_state().header());
    if span.parent_span_id != opentelemetry::trace::SpanId::INVALID {
        bytes(out, 4, &span.parent_span_id.to_bytes());
    }
    string(out, 5, &span.name);
    uint(
        out,
        6,
        match span.span_kind {
            SpanKind::Internal => 1,
            SpanKind::Server => 2,
            SpanKind::Client => 3,
            SpanKind::Producer => 4,
            SpanKind::Consumer => 5,
        },
    );
    fixed64(out, 7, nanos(span.start_time));
    fixed64(out, 8, nanos(span.end_time));
    attributes(out, 9, &span.attributes);
    uint(out, 10, u64::from(span.dropped_attributes_count));
    for event in &span.events.events {
        message(out, 11, |out| {
            fixed64(out, 1, nanos(event.timestamp));
            string(out, 2, &event.name);
            attributes(out, 3, &event.attributes);
            uint(out, 4, u64::from(event.dropped_attributes_count));
        });
    }
    uint(out, 12, u64::from(span.events.dropped_count));
    for link in &span.links.links {
        message(out, 13, |out| {
            bytes(out, 1, &link.span_context.trace_id().to_bytes());
            bytes(out, 2, &link.span_context.span_id().to_bytes());
            string(out, 3, &link.span_context.trace_state().header());
            attributes(out, 4, &link.attributes);
            uint(out, 5, u64::from(link.dropped_attributes_count));
            fixed32(out, 6, flags(&link.span_context, link.span_context.is_remote()));
        });
    }
    uint(out, 14, u64::from(span.links.dropped_count));
    // The conversion always sets a status, an unset one too (an empty message).
    message(out, 15, |out| {
        let (code, message) = match &span.status {
            Status::Unset => (0, ""),
            Status::Ok => (1, ""),
            Status::Error { description } => (2, description.as_ref()),
        };
        string(out, 2, message);
        uint(out, 3, code);
    });
    fixed32(out, 16, flags(cx, span.parent_span_is_remote));
}

fn flags(cx: &SpanContext, remote: bool) -> u32 {
    u32::from(cx.trace_flags().to_u8()) | CONTEXT_HAS_IS_REMOTE | if remote { CONTEXT_IS_REMOTE } else { 0 }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn attributes(out: &mut Vec<u8>, field: u32, kvs: &[KeyValue]) {
    for kv in kvs {
        message(out, field, |out| key_value(out, kv.key.as_str(), &kv.value));
    }
}

/// A `KeyValue`'s fields: its key, and its value (always present, as the conversion makes it).
fn key_value(out: &mut Vec<u8>, key: &str, value: &Value) {
    string(out, 1, key);
    message(out, 2, |out| any_value(out, value));
}

/// An `AnyValue`'s fields: one member of its `oneof`, written even when it is the default (`""`, `false`, `0`).
fn any_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => string_always(out, 1, s.as_str()),
        Value::Bool(b) => {
            tag(out, 2, VARINT);
            varint(out, u64::from(*b));
        }
        Value::I64(i) => {
            tag(out, 3, VARINT);
            varint(out, *i as u64);
        }
        Value::F64(f) => {
            tag(out, 4, FIXED64);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Array(array) => message(out, 5, |out| match array {
            Array::Bool(v) => v.iter().for_each(|b| message(out, 1, |out| any_value(out, &Value::Bool(*b)))),
            Array::I64(v) => v.iter().for_each(|i| message(out, 1, |out| any_value(out, &Value::I64(*i)))),
            Array::F64(v) => v.iter().for_each(|f| message(out, 1, |out| any_value(out, &Value::F64(*f)))),
            Array::String(v) => v.iter().for_each(|s| message(out, 1, |out| string_always(out, 1, s.as_str()))),
            other => message(out, 1, |out| string_always(out, 1, &other.to_string())),
        }),
        other => string_always(out, 1, &other.to_string()),
    }
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field << 3 | u32::from(wire)));
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: usize) -> usize {
    let bits = usize::BITS - (v | 1).leading_zeros();
    bits.div_ceil(7) as usize
}

/// A length-delimited field whose content `body` writes, in room for a length of one byte (anything shorter than
/// 128 bytes); see [`message_sized`].
fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    message_sized(out, field, 1, body);
}

/// A length-delimited field whose content `body` writes after `room` bytes kept for its length: the length is
/// written when it is known, and the content moved when it needs more or fewer bytes than were kept (the shortest
/// form, as every encoder writes it).
fn message_sized(out: &mut Vec<u8>, field: u32, room: usize, body: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, LEN);
    let at = out.len();
    out.resize(at + room, 0);
    body(out);
    let len = out.len() - at - room;
    let width = varint_len(len);
    if width > room {
        out.resize(out.len() + width - room, 0);
        out.copy_within(at + room..at + room + len, at + width);
    } else if width < room {
        out.copy_within(at + room..at + room + len, at + width);
        out.truncate(at + width + len);
    }
    let mut rest = len;
    for (i, byte) in out[at..at + width].iter_mut().enumerate() {
        let low = (rest & 0x7f) as u8;
        rest >>= 7;
        *byte = if i + 1 < width { low | 0x80 } else { low };
    }
}

/// A proto3 string field: left out when empty, as its default.
fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    if !s.is_empty() {
        string_always(out, field, s);
    }
}

fn string_always(out: &mut Vec<u8>, field: u32, s: &str) {
    tag(out, field, LEN);
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A proto3 integer (or enum) field: left out when 0.
fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        tag(out, field, VARINT);
        varint(out, v);
    }
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        tag(out, field, FIXED64);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    if v != 0 {
        tag(out, field, FIXED32);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Event, Link, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use prost::Message as _;
    use std::borrow::Cow;
    use std::time::Duration;

    /// What opentelemetry-proto's conversion and prost make of the same spans.
    fn reference(spans: &[SpanData], resource: &Resource) -> Vec<u8> {
        let resource = ResourceAttributesWithSchema::from(resource);
        ExportTraceServiceRequest { resource_spans: group_spans_by_resource_and_scope(spans.to_vec(), &resource) }
            .encode_to_vec()
    }

    fn ours(spans: &[SpanData], resource: &Resource) -> Vec<u8> {
        let mut out = vec![1, 2, 3];
        Encoder::new(resource).encode(spans, &mut out);
        out
    }

    fn text(rng: &mut fastrand::Rng, longest: usize) -> String {
        let len = rng.usize(..=longest);
        (0..len).map(|_| rng.choice(['a', 'é', '0', ' ', '"', '\u{1F980}']).unwrap_or('a')).collect()
    }

    fn value(rng: &mut fastrand::Rng) -> Value {
        let n = rng.usize(..4);
        match rng.u8(..9) {
            0 => Value::Bool(rng.bool()),
            1 => {
                let any = rng.i64(..);
                Value::I64(rng.choice([0, 1, -1, i64::MIN, i64::MAX, any]).unwrap_or(0))
            }
            2 => {
                let any = rng.f64();
                Value::F64(rng.choice([0.0, -0.0, 1.5, f64::MAX, any]).unwrap_or(0.0))
            }
            3 => Value::Array(Array::Bool((0..n).map(|_| rng.bool()).collect())),
            4 => Value::Array(Array::I64((0..n).map(|_| rng.i64(..)).collect())),
            5 => Value::Array(Array::F64((0..n).map(|_| rng.f64()).collect())),
            6 => Value::Array(Array::String((0..n).map(|_| text(rng, 20).into()).collect())),
            // Long enough for two- and three-byte lengths.
            7 => Value::String(text(rng, 20_000).into()),
            _ => Value::String(text(rng, 30).into()),
        }
    }

    fn attributes(rng: &mut fastrand::Rng) -> Vec<KeyValue> {
        (0..rng.usize(..6)).map(|_| KeyValue::new(text(rng, 12), value(rng))).collect()
    }

    fn context(rng: &mut fastrand::Rng) -> SpanContext {
        let state =
            if rng.bool() { TraceState::default() } else { TraceState::from_key_value([("vendor", "x1")]).unwrap() };
        SpanContext::new(
            TraceId::from_bytes(rng.u128(1..).to_be_bytes()),
            SpanId::from_bytes(rng.u64(1..).to_be_bytes()),
            if rng.bool() { TraceFlags::SAMPLED } else { TraceFlags::default() },
            rng.bool(),
            state,
        )
    }

    fn time(rng: &mut fastrand::Rng) -> SystemTime {
        // Before the epoch too: written as 0, as the conversion does.
        let t = UNIX_EPOCH + Duration::from_nanos(rng.u64(..1 << 62));
        if rng.u8(..20) == 0 { UNIX_EPOCH - Duration::from_secs(1) } else { t }
    }

    fn span(rng: &mut fastrand::Rng, scopes: &[InstrumentationScope]) -> SpanData {
        let mut events = SpanEvents::default();
        for _ in 0..rng.usize(..3) {
            events.events.push(Event::new(text(rng, 10), time(rng), attributes(rng), rng.u32(..3)));
        }
        events.dropped_count = rng.u32(..3);
        let mut links = SpanLinks::default();
        for _ in 0..rng.usize(..3) {
            links.links.push(Link::new(context(rng), attributes(rng), rng.u32(..3)));
        }
        links.dropped_count = rng.u32(..3);
        SpanData {
            span_context: context(rng),
            parent_span_id: if rng.bool() { SpanId::INVALID } else { SpanId::from_bytes(rng.u64(1..).to_be_bytes()) },
            parent_span_is_remote: rng.bool(),
            span_kind: rng
                .choice([
                    SpanKind::Internal,
                    SpanKind::Server,
                    SpanKind::Client,
                    SpanKind::Producer,
                    SpanKind::Consumer,
                ])
                .unwrap_or(SpanKind::Internal),
            name: Cow::Owned(text(rng, 40)),
            start_time: time(rng),
            end_time: time(rng),
            attributes: attributes(rng),
            dropped_attributes_count: rng.u32(..3),
            events,
            links,
            status: match rng.u8(..3) {
                0 => Status::Unset,
                1 => Status::Ok,
                _ => Status::error(text(rng, 20)),
            },
            instrumentation_scope: rng
                .choice(scopes)
                .cloned()
                .unwrap_or_else(|| InstrumentationScope::builder("x").build()),
        }
    }

    #[test]
    fn a_request_is_byte_for_byte_what_opentelemetry_protos_conversion_and_prost_write() {
        let scopes = [
            InstrumentationScope::builder("payhook").build(),
            InstrumentationScope::builder("payhook")
                .with_version("1.2.3")
                .with_schema_url("https://opentelemetry.io/schemas/1.26.0")
                .with_attributes([KeyValue::new("scope.attr", 7)])
                .build(),
            InstrumentationScope::builder("other").build(),
        ];
        let resources = [
            Resource::builder_empty().build(),
            Resource::builder_empty()
                .with_service_name("payhook")
                .with_attributes([KeyValue::new("deployment.environment.name", "prod"), KeyValue::new("n", 3)])
                .with_schema_url([], "https://opentelemetry.io/schemas/1.26.0")
                .build(),
        ];
        let mut rng = fastrand::Rng::with_seed(47);
        for round in 0..300 {
            let resource = &resources[round % 2];
            let spans: Vec<SpanData> = (0..rng.usize(..8)).map(|_| span(&mut rng, &scopes)).collect();
            let (ours, reference) = (ours(&spans, resource), reference(&spans, resource));
            if ours != reference {
                let decoded = ExportTraceServiceRequest::decode(ours.as_slice());
                panic!(
                    "round {round}: {} bytes against {}\nours decodes to {decoded:#?}\nreference: {:#?}",
                    ours.len(),
                    reference.len(),
                    ExportTraceServiceRequest::decode(reference.as_slice())
                );
            }
        }
    }

    #[test]
    fn lengths_take_as_many_bytes_as_they_need() {
        for (len, width) in [(0, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (2_097_152, 4)] {
            assert_eq!(varint_len(len), width, "{len}");
            for room in 1..=4 {
                let mut out = vec![9];
                message_sized(&mut out, 1, room, |out| out.extend((0..len).map(|i| i as u8)));
                let mut expected = vec![9, 0x0a];
                varint(&mut expected, len as u64);
                expected.extend((0..len).map(|i| i as u8));
                assert!(out == expected, "{len} bytes in room for {room}");
            }
        }
    }
}
