//! `POST /webhooks/{source}`: body limit → source lookup → verify on the raw bytes → normalize → record → answer.
//!
//! Invariant: a 2xx is sent only after the store's commit returned; every verified delivery reaches the store
//! (parseable or not), so nothing verified is dropped.

use crate::base::schema::{BatchAnswer, WebhookAnswer};
use crate::base::trace;
use crate::http::error::ApiError;
use crate::runtime::confirm::Answer;
use crate::runtime::live::Live;
use crate::runtime::live::SourceRuntime;
use crate::state::AppState;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use opentelemetry::KeyValue;
use opentelemetry::trace::TraceContextExt as _;
use payhook_core::event::EventId;
use payhook_core::format::{Format, ParseError};
use payhook_core::signature::Headers;
use payhook_store::{Alert, Delivery, NonceClaim, NonceClaimed, Parsed, ReceivedHeaders, Store, StoreError};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Headers never stored with a delivery: they carry credentials of their own.
const UNSTORED_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// Adapts the request's head to the core's header lookup, including the derived components of RFC 9421
/// (`@method`, `@authority`, `@path`, …) that HTTP Message Signatures cover.
///
/// `@authority` is the `Host` header as received and `@scheme` is `https` when a proxy says so in
/// `X-Forwarded-Proto`: a proxy in front of payhook must keep the host and path the provider signed.
struct HttpHeaders<'a>(&'a axum::http::request::Parts);

impl HttpHeaders<'_> {
    fn authority(&self) -> &str {
        let host = self.0.headers.get(header::HOST).and_then(|v| v.to_str().ok());
        host.or_else(|| self.0.uri.authority().map(|a| a.as_str())).unwrap_or("")
    }

    fn scheme(&self) -> &str {
        match self.0.headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()) {
            Some(p) if p.eq_ignore_ascii_case("https") => "https",
            _ => self.0.uri.scheme_str().unwrap_or("http"),
        }
    }
}

impl Headers for HttpHeaders<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        let uri = &self.0.uri;
        let path = if uri.path().is_empty() { "/" } else { uri.path() };
        let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        Some(match component {
            "@method" => Cow::Borrowed(self.0.method.as_str()),
            "@authority" => Cow::Borrowed(self.authority()),
            "@scheme" => Cow::Borrowed(self.scheme()),
            "@path" => Cow::Borrowed(path),
            "@query" => Cow::Owned(if query.is_empty() { "?".to_owned() } else { query }),
            "@target-uri" => Cow::Owned(format!("{}://{}{path}{query}", self.scheme(), self.authority())),
            "@request-target" => Cow::Owned(format!("{path}{query}")),
            _ => return None,
        })
    }
}

/// The webhook route.
pub(crate) const ROUTE: &str = "/webhooks/{source}";

#[utoipa::path(post, path = "/webhooks/{source}", tag = "webhooks",
    params(("source" = String, Path, description = "A configured source's name")),
    request_body(content = Vec<u8>, description = "The provider's payload, verified on its raw bytes", content_type = "*/*"),
    responses(
        (status = 200, description = "Recorded (after the commit): `processed`, `duplicate`, `deferred`, `ignored` or \
            `dead_lettered`; Adyen is answered `[accepted]`", body = crate::base::schema::WebhookAnswer),
        (status = 401, description = "Missing, malformed, wrong, stale or replayed signature, or one that does not cover the required components; nothing stored", body = crate::base::schema::ErrorBody),
        (status = 404, description = "No such source", body = crate::base::schema::ErrorBody),
        (status = 408, description = "The body was not complete within `server.body_timeout_ms`; the connection is closed", body = crate::base::schema::ErrorBody),
        (status = 413, description = "The body is over the limit", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable, queue full, shutting down, the server's body buffer full (`body_buffer_full`) or the request past `server.request_timeout_ms` (`request_timeout`; it may have been recorded: the retry is answered `duplicate`); `Retry-After`", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn handle<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Path(source): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    if let Some(cx) = trace::request_cx() {
        trace::name_request(&cx, "POST", ROUTE);
    }
    // The configuration in force now is the one this request runs under to its answer, whatever a reload swaps
    // in meanwhile.
    let live = state.live();
    let Some(src) = live.source(source.as_str()) else {
        return Err(ApiError::NotFound(format!("no source named {source:?} is configured")));
    };
    let answer = ingest(&state, &live, src, request).await;
    let elapsed = started.elapsed();
    src.metrics.answered(elapsed);
    if answer.is_ok() {
        // The dashboard's chart: deliveries answered 2xx per minute and how long they took.
        state.throughput.record(state.clock.now_ms(), elapsed);
    }
    answer
}

/// Logs carry `source`, `event_id` (wherever it is known: nothing of a refused delivery is trusted) and `outcome`
/// (a recorded delivery's status, `refused` or `failed`) as fields.
async fn ingest<S: Store>(
    state: &AppState<S>,
    live: &Live,
    src: &SourceRuntime,
    request: Request,
) -> Result<Response, ApiError> {
    // The request is consumed by `deliveries`, so nothing of it lives across the wait for the commit: its body and
    // header values are slices of the connection's read buffer, and held while the request waits they would keep
    // that buffer from being reused, so that hyper, reading on meanwhile, allocated another for every request
    // waiting (BENCHMARKS.md, *Memory*). The deliveries own copies.
    let deliveries = deliveries(state, live, src, request).await?;
    let mut answers = Vec::with_capacity(deliveries.len());
    let mut failure = None;
    for (index, event_id, recorded) in record_all(&state.store, deliveries).await? {
        match recorded {
            Ok(recorded) => {
                src.metrics.recorded(recorded.outcome);
                // Debug, not info: a line per delivery costs a write at thousands of deliveries per second.
                tracing::debug!(
                    source = %src.settings.name, event_id, outcome = recorded.outcome.as_str(), "delivery recorded"
                );
                let answer = WebhookAnswer { detail: recorded.detail, event_id, status: recorded.outcome.as_str() };
                answers.push((index, answer));
            }
            // The events recorded before the failure are kept; the provider's retry deduplicates them.
            Err(e) => {
                tracing::warn!(
                    source = %src.settings.name, event_id, outcome = "failed", error = %e, "delivery not recorded"
                );
                failure = Some(e);
            }
        }
    }
    if let Some(e) = failure {
        return Err(e.into());
    }
    if src.settings.format == Format::Adyen {
        // Adyen treats any other answer as a failure and retries.
        return Ok(([(header::CONTENT_TYPE, "text/plain")], "[accepted]").into_response());
    }
    answers.sort_by_key(|(index, _)| *index);
    let mut answers: Vec<WebhookAnswer> = answers.into_iter().map(|(_, a)| a).collect();
    if answers.len() == 1 {
        return Ok(Json(answers.remove(0)).into_response());
    }
    Ok(Json(BatchAnswer { events: answers, status: "accepted" }).into_response())
}

/// Reads, verifies and parses the request into the deliveries to record (one per event), refusing what fails
/// verification or replays a nonce.
async fn deliveries<S: Store>(
    state: &AppState<S>,
    live: &Live,
    src: &SourceRuntime,
    request: Request,
) -> Result<Vec<Delivery>, ApiError> {
    // The parts are taken apart rather than extracted, so the header map is read in place, not cloned.
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    let body = read_body(headers, body, state.settings.body_limit_bytes).await?;
    let received_at_ms = state.clock.now_ms();
    let verify = || src.settings.verifier.verify(&HttpHeaders(&parts), &body, received_at_ms / 1000);
    let verified = if trace::traced() { traced_verify(src, verify) } else { verify() };
    let verified = match verified {
        Ok(v) => v,
        Err(e) => {
            src.metrics.verification_failed(e.code());
            tracing::warn!(
                source = %src.settings.name, outcome = "refused", reason = e.code(), "signature verification failed"
            );
            if let Some(alerts) = &live.settings.alerts
                && src.verification_failure_reaches(received_at_ms, alerts.window_ms, alerts.verification_failures)
            {
                // The error's code only: its text can hold what the request chose (an RFC 9421 component name, a
                // header's contents), and an alert is forwarded to people.
                let text = format!(
                    "payhook: source {} failed signature verification {} times within {} min (last: {}); \
                     is its secret right?",
                    src.settings.name,
                    alerts.verification_failures,
                    alerts.window_ms / 60_000,
                    e.code()
                );
                let alert = Alert { key: format!("{}:verification", src.settings.name), text, now_ms: received_at_ms };
                if let Err(err) = state.store.raise_alert(alert).await {
                    tracing::warn!(error = %err, "could not raise a verification alert");
                }
            }
            return Err(ApiError::Unauthorized {
                reason: e.code(),
                message: format!("signature verification failed: {e}"),
            });
        }
    };
    if let Some(nonce) = verified.nonce() {
        let claim = NonceClaim {
            keyid: nonce.keyid.clone(),
            nonce: nonce.value.clone(),
            body_sha256: hex::encode(Sha256::digest(&body)),
            expires_at: nonce.expires_at,
            now: received_at_ms / 1000,
        };
        if state.store.claim_nonce(claim).await? == NonceClaimed::Replayed {
            src.metrics.verification_failed("replayed");
            tracing::warn!(
                source = %src.settings.name, outcome = "refused", reason = "replayed", keyid = %nonce.keyid,
                "signature nonce replayed"
            );
            return Err(ApiError::Unauthorized {
                reason: "replayed",
                message: "signature verification failed: this signature was already used with another body".into(),
            });
        }
    }

    let verification = format!("{} (secret #{})", src.settings.verifier.scheme().name(), verified.secret_index());
    // A provider that does not sign its body is confirmed from its API: the effect is read from its answer about the
    // signed resource, and that answer is what is stored (the unsigned notification decides nothing).
    let (raw_body, parsed, verification) = match &src.confirmer {
        Some(confirmer) => {
            let request = HttpHeaders(&parts);
            let verification = format!("{verification}, {}", confirmer.describe(&request));
            match confirmer.confirm(&request, state.settings.body_limit_bytes, &src.metrics).await? {
                Answer::Events { answer, events } => {
                    (answer, events.into_iter().map(Parsed::Event).collect(), verification)
                }
                Answer::Unreadable { answer, reason } => {
                    let kept = if answer.is_empty() { body.to_vec() } else { answer };
                    let event_id = derived_event_id(verified.delivery_id(), &kept);
                    (kept, vec![Parsed::Unparseable { event_id, reason }], verification)
                }
            }
        }
        None if let Some(request) = trace::request_cx() => {
            let parsed = trace::leaf(
                &request,
                "payhook.parse",
                || parse(src, &parts, &body, verified.delivery_id()),
                |parsed| {
                    vec![
                        KeyValue::new("payhook.format", src.settings.format.name().to_owned()),
                        KeyValue::new("payhook.events", i64::try_from(parsed.len()).unwrap_or(i64::MAX)),
                    ]
                },
            );
            (body.to_vec(), parsed, verification)
        }
        None => (body.to_vec(), parse(src, &parts, &body, verified.delivery_id()), verification),
    };
    let received = received_headers(headers, src.settings.verifier.secret_header());
    let deliveries: Vec<Delivery> = parsed
        .into_iter()
        .map(|parsed| {
            Delivery::verified(
                &verified,
                src.settings.name.clone(),
                received_at_ms,
                parsed,
                raw_body.clone(),
                received.clone(),
                verification.clone(),
            )
        })
        .collect();
    Ok(deliveries)
}

/// Verifies in a `payhook.verify` span: the scheme and the outcome (`verified` or the refusal's code), never a
/// secret or a signature. The request's span gets the source.
fn traced_verify<T>(
    src: &SourceRuntime,
    verify: impl FnOnce() -> Result<T, payhook_core::signature::VerifyError>,
) -> Result<T, payhook_core::signature::VerifyError> {
    let Some(request) = trace::request_cx() else { return verify() };
    request.span().set_attribute(KeyValue::new("payhook.source", src.settings.name.as_str().to_owned()));
    trace::leaf(&request, "payhook.verify", verify, |verified| {
        let outcome = verified.as_ref().map_or_else(|e| e.code(), |_| "verified");
        vec![
            KeyValue::new("payhook.verify.scheme", src.settings.verifier.scheme().name().to_owned()),
            KeyValue::new("payhook.verify.outcome", outcome),
        ]
    })
}

/// A delivery is one event, except for formats that batch (an Adyen notification carries several items): each event
/// is recorded as its own delivery of the same bytes, and the answer waits for all of them. A verified body the
/// format cannot read is one dead letter.
fn parse(
    src: &SourceRuntime,
    parts: &axum::http::request::Parts,
    body: &[u8],
    delivery_id: Option<&str>,
) -> Vec<Parsed> {
    match src.settings.format.parse_delivery(&HttpHeaders(parts), body) {
        Ok(events) => events.into_iter().map(Parsed::Event).collect(),
        // A body that does not confirm an unsigned header is kept under an id of its own bytes, never the header's
        // event id: a forger holding the body cannot make the real delivery a duplicate of its copy.
        Err(e @ ParseError::Unconfirmed { .. }) => {
            vec![Parsed::Unparseable { event_id: derived_event_id(None, body), reason: e.to_string() }]
        }
        Err(e) => vec![Parsed::Unparseable { event_id: derived_event_id(delivery_id, body), reason: e.to_string() }],
    }
}

/// A delivery's result: its index in the batch, its event id and what the store made of it.
type RecordResult = (usize, String, Result<payhook_store::Recorded, StoreError>);

/// Records the events of one delivery: one (the common case) on this task; several (an Adyen batch) concurrently,
/// so that they share a group commit.
async fn record_all<S: Store>(store: &Arc<S>, deliveries: Vec<Delivery>) -> Result<Vec<RecordResult>, ApiError> {
    let mut deliveries = deliveries;
    if trace::traced() {
        return Ok(record_traced(store, deliveries).await);
    }
    if deliveries.len() == 1
        && let Some(delivery) = deliveries.pop()
    {
        let event_id = delivery.parsed().event_id().as_str().to_owned();
        return Ok(vec![(0, event_id, store.ingest(delivery).await)]);
    }
    let mut pending = tokio::task::JoinSet::new();
    for (index, delivery) in deliveries.into_iter().enumerate() {
        let store = Arc::clone(store);
        pending.spawn(async move {
            let event_id = delivery.parsed().event_id().as_str().to_owned();
            (index, event_id, store.ingest(delivery).await)
        });
    }
    let mut results = Vec::with_capacity(pending.len());
    while let Some(joined) = pending.join_next().await {
        // A task that did not finish recorded nothing the answer could vouch for: the provider retries.
        results.push(joined.map_err(|e| ApiError::Store(StoreError::Unavailable(Box::new(e))))?);
    }
    Ok(results)
}

/// [`record_all`] with traces exported: each event is recorded in a `payhook.ingest` span (source, event id,
/// outcome), linked by the store to the writer batch it committed in, and remembered for the links of its later
/// retries and outbox rows. The request's span gets the event id too, so a trace is found from the event's page.
async fn record_traced<S: Store>(store: &Arc<S>, deliveries: Vec<Delivery>) -> Vec<RecordResult> {
    let request = trace::request_cx();
    let mut pending = Vec::with_capacity(deliveries.len());
    for (index, delivery) in deliveries.into_iter().enumerate() {
        let source = delivery.source().as_str().to_owned();
        let event_id = delivery.parsed().event_id().as_str().to_owned();
        trace::set_request_attribute(KeyValue::new("payhook.event_id", event_id.clone()));
        // A `tracing` span: the store's spans (the effect, the link from its batch) are made by `tracing` under it.
        let span = tracing::debug_span!(parent: None, "payhook.ingest", payhook.source = source.as_str(),
            payhook.event_id = event_id.as_str(), payhook.outcome = tracing::field::Empty);
        if let Some(request) = &request {
            let _ = span.set_parent(request.clone());
        }
        let mut keys = vec![format!("event:{source}:{event_id}")];
        if let Parsed::Event(event) = delivery.parsed()
            && let Some(order) = event.order_id()
        {
            keys.push(format!("order:{}", order.as_str()));
        }
        trace::remember(&span, keys);
        // The store reads the ingest's span (its parent, its batch's link) when it queues the work: now.
        let recorded = span.in_scope(|| store.ingest(delivery));
        pending.push(async move {
            let recorded = recorded.await;
            span.record("payhook.outcome", recorded.as_ref().map_or("failed", |r| r.outcome.as_str()));
            (index, event_id, recorded)
        });
    }
    futures_util::future::join_all(pending).await
}

/// Reads the body, refusing it as soon as it passes the limit (whatever Content-Length claimed). Its deadline and
/// the process's body buffer bound are the listener's, on every route (`crate::runtime::body`): a body they stop fails
/// here, and the listener answers for it.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::TooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::TooLarge { limit }),
        Err(e) => Err(ApiError::from_body_error(&*e)),
    }
}

/// The id an unparseable body is stored under: the scheme's delivery id when it has one, else a hash of the
/// bytes, so that the provider's redeliveries of the same body deduplicate.
fn derived_event_id(delivery_id: Option<&str>, body: &[u8]) -> EventId {
    if let Some(id) = delivery_id.and_then(|id| EventId::parse(id).ok()) {
        return id;
    }
    let digest = hex::encode(Sha256::digest(body));
    EventId::parse(format!("sha256:{digest}")).unwrap_or_else(|_| unreachable!("a hex digest is a valid id"))
}

/// The request headers, without credentials: every value of a repeated header, in the order it arrived (the
/// verifier and the format read the first). A value that is not UTF-8 is kept with U+FFFD in place of each
/// invalid sequence. `secret` is the header that carries the source's secret itself (a `shared-secret` rule's):
/// it is dropped like the credentials, not redacted, so nothing of it (not even its length) is kept.
fn received_headers(headers: &HeaderMap, secret: Option<&str>) -> ReceivedHeaders {
    let mut received = ReceivedHeaders::new();
    for name in headers.keys() {
        if UNSTORED_HEADERS.contains(&name.as_str()) || secret == Some(name.as_str()) {
            continue;
        }
        for value in headers.get_all(name) {
            received.append(name.as_str(), String::from_utf8_lossy(value.as_bytes()));
        }
    }
    received
}
