//! Following one delivery end to end: request ids, OpenTelemetry spans' context on the wire (W3C `traceparent` and
//! `tracestate`), the links from later work (a retry, an outbox dispatch) to the delivery's trace, and the export's
//! counters for `/metrics`. Which spans exist and what each attribute means: docs/tracing.md.
//!
//! With export off (the default) nothing here makes a span: every caller asks [`on`] first, a relaxed load. The
//! request id is the one thing every request has, traced or not.
//!
//! Two ways to make a span, by where it is (decision 47): the request's span and its leaf spans (verification,
//! parsing) through OpenTelemetry's API, since a request's span is never entered and its leaves are made whole at
//! their end; the spans of work that others nest under or link to (the ingest, the store's effect and batch, a
//! retry, a dispatch) through `tracing`, bridged by `tracing-opentelemetry`, so that the store crates need no
//! OpenTelemetry at all.
//!
//! Invariant: no span attribute holds a secret, a signature, a token, an `Authorization` or cookie value: the spans
//! carry names, ids, outcomes and status codes only (`tests/it/traces.rs` in `payhook` scans every exported
//! attribute for the configured secrets and the signature sent).

use axum::http::{HeaderMap, HeaderValue};
use opentelemetry::KeyValue;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

pub use payhook_store::tracing_flag::{enable, on, scope as sampled_scope, traced};

/// The fraction of root traces recorded (`OTEL_TRACES_SAMPLER`'s ratio), as `f64` bits: decided here, before any
/// span is made, so that a request outside the sample costs a plain log span only (decision 47).
static ROOT_RATIO: AtomicU64 = AtomicU64::new(0x3FF0_0000_0000_0000); // 1.0
/// Whether an API request's sampled `traceparent` decides for its trace (the `parentbased_*` samplers).
static PARENT_BASED: AtomicBool = AtomicBool::new(true);

/// Sets how root traces are sampled: `ratio` of them (0 to 1), and whether a parent's decision is followed.
pub fn set_sampling(ratio: f64, parent_based: bool) {
    ROOT_RATIO.store(ratio.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
    PARENT_BASED.store(parent_based, Ordering::Relaxed);
}

/// Whether a new root trace (a webhook, a retry, a dispatch, a writer batch) is recorded.
pub fn sample_root() -> bool {
    if !on() {
        return false;
    }
    let ratio = f64::from_bits(ROOT_RATIO.load(Ordering::Relaxed));
    ratio >= 1.0 || (ratio > 0.0 && fastrand::f64() < ratio)
}

/// Whether the trace of a request with these headers is recorded: its parent's word when it has one and the
/// sampler is parent-based, else [`sample_root`].
pub fn sample_request(headers: &HeaderMap, may_join: bool) -> bool {
    if may_join && PARENT_BASED.load(Ordering::Relaxed) && headers.contains_key("traceparent") {
        return on();
    }
    sample_root()
}

/// The header a request's id travels in, both ways.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// The longest request id taken from a trusted proxy; a longer one is replaced by a new one.
pub const REQUEST_ID_MAX_CHARS: usize = 128;

/// Spans the export queue had no room for and dropped (`payhook_trace_spans_dropped_total`).
pub static SPANS_DROPPED: AtomicU64 = AtomicU64::new(0);
/// Spans handed to the exporter (`payhook_trace_spans_exported_total`), whether or not the collector took them.
pub static SPANS_EXPORTED: AtomicU64 = AtomicU64::new(0);
/// Export calls that failed (`payhook_trace_export_failures_total`): the collector down, refusing, or too slow.
pub static EXPORT_FAILURES: AtomicU64 = AtomicU64::new(0);

tokio::task_local! {
    /// The request this task serves: its id, for the JSON error bodies (`request_id`) and the log lines, and its
    /// span's context when its trace is recorded, for its children, what is set on it later and the log lines.
    static REQUEST: Served;
}

/// What is known of the request a task serves ([`with_request`]).
#[derive(Debug, Clone)]
pub struct Served {
    /// Its id (`X-Request-Id`).
    pub id: String,
    /// Its span's OpenTelemetry context, when its trace is recorded: what it learns later (its route, its status,
    /// its source and event id) is set on the span through it, and its leaf spans are its children.
    pub cx: Option<opentelemetry::Context>,
}

impl Served {
    /// Its span's trace id and span id, in hex, when its trace is recorded: for its log lines.
    pub fn trace_ids(&self) -> Option<(String, String)> {
        let cx = self.cx.as_ref()?;
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
    }
}

/// The OpenTelemetry context of the request this task serves, when its trace is recorded.
pub fn request_cx() -> Option<opentelemetry::Context> {
    REQUEST.try_with(|r| r.cx.clone()).ok().flatten()
}

/// Sets `attribute` on the span of the request this task serves, when its trace is recorded: through
/// OpenTelemetry's API, not `tracing`'s (a `record` passes every layer of the subscriber).
pub fn set_request_attribute(attribute: KeyValue) {
    if let Ok(Some(cx)) = REQUEST.try_with(|r| r.cx.clone()) {
        cx.span().set_attribute(attribute);
    }
}

/// The tracer of payhook's own leaf spans ([`leaf`]): the global provider's, which the binary sets when export is on.
static TRACER: LazyLock<opentelemetry::global::BoxedTracer> =
    LazyLock::new(|| opentelemetry::global::tracer("payhook"));

/// Runs `work` in a leaf span (one that has no children and is not awaited across: verification, parsing) under
/// `parent`, made through OpenTelemetry's API: started before `work`, given every attribute at once from what `work`
/// returned, ended after it. A fraction of the cost of a `tracing` span with its records, entries and exits
/// (decision 47).
pub fn leaf<T>(
    parent: &opentelemetry::Context,
    name: &'static str,
    work: impl FnOnce() -> T,
    attributes: impl FnOnce(&T) -> Vec<KeyValue>,
) -> T {
    use opentelemetry::trace::{Span as _, Tracer as _};
    let mut span = TRACER.start_with_context(name, parent);
    let done = work();
    span.set_attributes(attributes(&done));
    span.end();
    done
}

/// Whether `value` may be kept as a request id: 1 to [`REQUEST_ID_MAX_CHARS`] printable ASCII characters, no
/// space, so that it goes into a log line and a header as it came.
pub fn valid_request_id(value: &[u8]) -> bool {
    !value.is_empty() && value.len() <= REQUEST_ID_MAX_CHARS && value.iter().all(|b| b.is_ascii_graphic())
}

/// The id of a request: the one a trusted proxy sent (`X-Request-Id`, when valid), else a new one (32 hex digits).
/// A client that is not a trusted proxy cannot choose the id its request is logged under.
pub fn request_id(sent: Option<&HeaderValue>, from_trusted_proxy: bool) -> String {
    if from_trusted_proxy
        && let Some(value) = sent
        && valid_request_id(value.as_bytes())
        && let Ok(text) = value.to_str()
    {
        return text.to_owned();
    }
    hex::encode(fastrand::u128(..).to_be_bytes())
}

/// Runs `fut` as the request `served`, which [`current_request_id`] and [`current_request`] read.
pub async fn with_request<F: Future>(served: Served, fut: F) -> F::Output {
    REQUEST.scope(served, fut).await
}

/// The id of the request this task serves, if it serves one.
pub fn current_request_id() -> Option<String> {
    REQUEST.try_with(|r| r.id.clone()).ok()
}

/// The request this task serves, if it serves one.
pub fn current_request() -> Option<Served> {
    REQUEST.try_with(Clone::clone).ok()
}

/// `traceparent` and `tracestate` for `span`'s context, as the configured propagator (W3C trace context) writes
/// them; empty when the span is not traced.
pub fn headers_of(span: &tracing::Span) -> Vec<(String, String)> {
    let mut out = Fields(Vec::new());
    if !on() || span.is_none() {
        return out.0;
    }
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut out));
    out.0
}

/// The HTTP server span of a request whose trace is recorded (`otel.kind = server`, named after its method until
/// its route is matched), with the semantic conventions' attributes and its `request_id`; a child of the context in
/// `incoming`'s `traceparent` when there is a valid one. Its context, when sampled (a parent's decision is followed);
/// the span ends when [`end_request`] is called, or when the last clone of the context is dropped.
///
/// Made through OpenTelemetry's API, not `tracing`'s: it is never entered (its children name it as their parent),
/// its fields are never logged (the log lines read the request from its task, [`Served`]), and what it learns later
/// is set on it directly; a `tracing` span would add a pass through every layer of the subscriber to each of those.
pub fn request_span(
    incoming: Option<&HeaderMap>,
    method: &str,
    path: &str,
    id: &str,
) -> Option<opentelemetry::Context> {
    use opentelemetry::trace::{Span as _, SpanKind, Tracer as _};
    let parent = match incoming {
        Some(headers) => {
            let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)));
            if cx.span().span_context().is_valid() { cx } else { opentelemetry::Context::new() }
        }
        None => opentelemetry::Context::new(),
    };
    let span = TRACER
        .span_builder(method.to_owned())
        .with_kind(SpanKind::Server)
        .with_attributes({
            // Room for what the request learns later (route, status, source, event id): set without regrowing.
            let mut attributes = Vec::with_capacity(8);
            attributes.push(KeyValue::new("http.request.method", method.to_owned()));
            attributes.push(KeyValue::new("url.path", path.to_owned()));
            attributes.push(KeyValue::new("request_id", id.to_owned()));
            attributes
        })
        .start_with_context(&*TRACER, &parent);
    let sampled = span.span_context().is_sampled();
    sampled.then(|| parent.with_span(span))
}

/// Names the span of a request ([`request_span`]) after its route (`POST /webhooks/{source}`) and sets `http.route`,
/// as the semantic conventions for an HTTP server span ask.
pub fn name_request(cx: &opentelemetry::Context, method: &str, route: &str) {
    let span = cx.span();
    span.set_attribute(KeyValue::new("http.route", route.to_owned()));
    let mut name = String::with_capacity(method.len() + 1 + route.len());
    name.push_str(method);
    name.push(' ');
    name.push_str(route);
    span.update_name(name);
}

/// Ends the span of a request ([`request_span`]) with its answer's status.
pub fn end_request(cx: &opentelemetry::Context, status: u16) {
    let span = cx.span();
    span.set_attribute(KeyValue::new("http.response.status_code", i64::from(status)));
    if status >= 500 {
        span.set_status(opentelemetry::trace::Status::error(""));
    }
    span.end();
}

/// Header names and values a propagator writes.
struct Fields(Vec<(String, String)>);

impl Injector for Fields {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// How many span contexts [`remember`] keeps for later links by default, by key (a delivery's event and its order:
/// two per delivery; `telemetry.recent_traces`): the oldest is forgotten first.
pub const RECENT_TRACES: usize = 4096;

/// The bound in force ([`set_recent_traces`]).
static RECENT_BOUND: AtomicUsize = AtomicUsize::new(RECENT_TRACES);

/// Sets how many span contexts are kept for later links, by key (`telemetry.recent_traces`; 0 keeps none).
pub fn set_recent_traces(bound: usize) {
    RECENT_BOUND.store(bound, Ordering::Relaxed);
}

/// The keys whose span contexts are held for later links, and their bound (`payhook_trace_recent_contexts`).
pub fn recent_traces() -> (usize, usize) {
    let held = RECENT.lock().unwrap_or_else(PoisonError::into_inner).order.len();
    (held, RECENT_BOUND.load(Ordering::Relaxed))
}

/// The span contexts of recent deliveries by key (`event:SOURCE:ID`, `order:ID`), so that a retry or an outbox
/// dispatch made later by this process links to the delivery's trace. Held in memory only and bounded: work done
/// after a restart, by another instance, or after `telemetry.recent_traces` newer deliveries starts a trace without
/// a link.
static RECENT: LazyLock<Mutex<Recent>> = LazyLock::new(|| Mutex::new(Recent::default()));

#[derive(Default)]
struct Recent {
    by_key: HashMap<String, SpanContext>,
    order: VecDeque<String>,
}

/// Remembers `span`'s context under `keys` (when traces are exported).
pub fn remember(span: &tracing::Span, keys: impl IntoIterator<Item = String>) {
    if !on() || span.is_none() {
        return;
    }
    let sc = span.context().span().span_context().clone();
    if !sc.is_valid() {
        return;
    }
    let mut recent = RECENT.lock().unwrap_or_else(PoisonError::into_inner);
    for key in keys {
        if recent.by_key.insert(key.clone(), sc.clone()).is_none() {
            recent.order.push_back(key);
        }
        while recent.order.len() > RECENT_BOUND.load(Ordering::Relaxed) {
            if let Some(old) = recent.order.pop_front() {
                recent.by_key.remove(&old);
            }
        }
    }
}

/// The context remembered under `key`, if this process still holds it.
pub fn recalled(key: &str) -> Option<SpanContext> {
    if !on() {
        return None;
    }
    RECENT.lock().unwrap_or_else(PoisonError::into_inner).by_key.get(key).cloned()
}

/// Links `span` to the delivery remembered under `key`, if any.
pub fn link_to_delivery(span: &tracing::Span, key: &str) {
    if let Some(sc) = recalled(key) {
        span.add_link(sc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_is_taken_only_from_a_trusted_proxy_and_only_when_it_is_short_and_printable() {
        let sent = HeaderValue::from_static("req-123_abc");
        assert_eq!(request_id(Some(&sent), true), "req-123_abc");
        let ours = request_id(Some(&sent), false);
        assert_ne!(ours, "req-123_abc");
        assert_eq!(ours.len(), 32);
        assert!(ours.bytes().all(|b| b.is_ascii_hexdigit()));
        for bad in [&b""[..], b"has space", b"tab\there", &[b'a'; REQUEST_ID_MAX_CHARS + 1], "é".as_bytes()] {
            assert!(!valid_request_id(bad), "{bad:?}");
            if let Ok(value) = HeaderValue::from_bytes(bad) {
                assert_ne!(request_id(Some(&value), true).as_bytes(), bad);
            }
        }
        assert!(valid_request_id(&[b'a'; REQUEST_ID_MAX_CHARS]));
        assert_ne!(request_id(None, true), request_id(None, true), "each new id is its own");
    }
}
