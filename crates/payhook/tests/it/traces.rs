//! Following one delivery end to end (docs/tracing.md): the real binary exports its spans over OTLP to a receiver
//! that stands in for an OpenTelemetry Collector, decoding them with the official protobuf definitions
//! (`opentelemetry-proto`), over both protocols (http/protobuf and gRPC). A payment is delivered with an HTTP sink
//! configured; the spans, their attributes, their parents and links, the sink request's `traceparent` and the
//! absence of every secret from every attribute are checked. Request ids (`X-Request-Id`) are checked here too.

use crate::helpers::{AMOUNT, API_TOKEN, SECRET, SOURCE, Server, TestDir, payment, post};
use axum::http::HeaderMap;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use reqwest::StatusCode;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The secret the sink's requests are signed with: it must not appear in any span either.
const SINK_SECRET: &str = "whsec_c2lua19zZWNyZXRfZm9yX3RyYWNpbmc=";
/// The trace context the API request arrives with: its span must continue it.
const INCOMING_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const INCOMING_PARENT: &str = "00f067aa0ba902b7";
/// The collector's token, sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`, percent-encoded there): the
/// receiver refuses an export without it.
const COLLECTOR_TOKEN: &str = "Bearer collector token";

/// Everything the receiver was sent: each export request as decoded.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

impl Received {
    fn spans(&self) -> Vec<Span> {
        let requests = self.0.lock().expect("received");
        requests
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| ss.spans.clone())
            .collect()
    }

    /// Every attribute of every export: resources', scopes', spans', their events' and links'.
    fn attributes(&self) -> Vec<KeyValue> {
        let requests = self.0.lock().expect("received");
        let mut out = Vec::new();
        for rs in requests.iter().flat_map(|r| &r.resource_spans) {
            out.extend(rs.resource.iter().flat_map(|r| r.attributes.clone()));
            for ss in &rs.scope_spans {
                out.extend(ss.scope.iter().flat_map(|s| s.attributes.clone()));
                for span in &ss.spans {
                    out.extend(span.attributes.clone());
                    out.extend(span.events.iter().flat_map(|e| e.attributes.clone()));
                    out.extend(span.links.iter().flat_map(|l| l.attributes.clone()));
                }
            }
        }
        out
    }
}

struct Grpc(Received);

#[async_trait::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let token = request.metadata().get("authorization").and_then(|v| v.to_str().ok());
        if token != Some(COLLECTOR_TOKEN) {
            return Err(tonic::Status::unauthenticated(format!("the collector's token, not {token:?}")));
        }
        self.0.0.lock().expect("received").push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// An OTLP receiver on a free port: `http://127.0.0.1:PORT`, over `protocol`.
async fn receiver(protocol: &str) -> (String, Received) {
    let received = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
    let addr = listener.local_addr().expect("addr");
    match protocol {
        "grpc" => {
            let service = TraceServiceServer::new(Grpc(received.clone()));
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
        }
        _ => {
            let kept = received.clone();
            let app = axum::Router::new().route(
                "/v1/traces",
                axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
                    let kept = kept.clone();
                    async move {
                        assert_eq!(
                            headers.get("content-type").and_then(|v| v.to_str().ok()),
                            Some("application/x-protobuf"),
                            "OTLP/HTTP binary"
                        );
                        let token = headers.get("authorization").and_then(|v| v.to_str().ok());
                        assert_eq!(token, Some(COLLECTOR_TOKEN), "the collector's token");
                        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
                        kept.0.lock().expect("received").push(request);
                        let answer = ExportTraceServiceResponse { partial_success: None }.encode_to_vec();
                        ([("content-type", "application/x-protobuf")], answer)
                    }
                }),
            );
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
    }
    (format!("http://{addr}"), received)
}

/// A sink that answers 200 and keeps each request's `traceparent`.
async fn sink() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap| {
            let kept = Arc::clone(&kept);
            async move {
                let parent = headers.get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                kept.lock().expect("sink").push(parent);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the sink");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), seen)
}

fn string(value: &Option<AnyValue>) -> Option<String> {
    match value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| string(&kv.value))
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    one_where(spans, name, |_| true)
}

/// The one span named `name` that `keep` keeps.
fn one_where<'a>(spans: &'a [Span], name: &str, keep: impl Fn(&Span) -> bool) -> &'a Span {
    let found: Vec<&Span> = named(spans, name).into_iter().filter(|s| keep(s)).collect();
    assert_eq!(
        found.len(),
        1,
        "one {name:?} span; the spans: {:#?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    found[0]
}

/// Delivers a payment with an HTTP sink configured, exporting over `protocol`, and checks what was exported.
async fn a_delivery_is_one_trace_and_its_dispatch_another_linked_to_it(protocol: &str) {
    let dir = TestDir::new();
    let (endpoint, received) = receiver(protocol).await;
    let (sink_url, sink_seen) = sink().await;
    let extra = format!(
        "\n[log]\nformat = \"json\"\n\n[[sinks]]\nname = \"shop\"\nurl = \"{sink_url}\"\nkinds = [\"order.paid\"]\nsecret = \"{SINK_SECRET}\"\n"
    );
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_SERVICE_NAME", "payhook-it"),
        ("OTEL_TRACES_SAMPLER", "parentbased_always_on"),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20collector%20token"),
    ];
    let server = Server::start_edited_with_env(&dir, |c| format!("{c}{extra}"), &env).await;

    // An API request continues the caller's trace.
    let registered = server
        .client
        .post(server.url("/v1/orders"))
        .bearer_auth(API_TOKEN)
        .header("traceparent", format!("00-{INCOMING_TRACE}-{INCOMING_PARENT}-01"))
        .json(&serde_json::json!({ "id": "o-trace", "amount": AMOUNT, "currency": "usd" }))
        .send()
        .await
        .expect("POST /v1/orders");
    assert_eq!(registered.status(), StatusCode::CREATED, "{:?}", registered.text().await);
    let delivery = payment("evt_trace_1", "o-trace");
    let (status, answer) = post(&server.client, &server.webhook_url(), &delivery).await.expect("deliver");
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("processed")), "{answer}");
    // A forged delivery is refused and logged: its log line names its request and the request's trace.
    let forged = server
        .client
        .post(server.webhook_url())
        .header("content-type", "application/json")
        .header("x-webhook-signature", "sha256=00")
        .body(delivery.body.clone())
        .send()
        .await
        .expect("POST a forged delivery");
    assert_eq!(forged.status(), StatusCode::UNAUTHORIZED);
    let deadline = Instant::now() + Duration::from_secs(20);
    while sink_seen.lock().expect("sink").is_empty() {
        assert!(Instant::now() < deadline, "the sink got nothing:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metrics = server.client.get(server.url("/metrics")).bearer_auth(API_TOKEN).send().await.expect("metrics");
    let metrics = metrics.text().await.expect("metrics text");
    assert!(metrics.contains("payhook_trace_spans_dropped_total 0"), "{metrics}");
    // The payment's span context is held under its event and its order, for the links of later work.
    assert!(metrics.contains("payhook_trace_recent_contexts 2\n"), "{metrics}");
    assert!(metrics.contains("payhook_trace_recent_contexts_limit 4096\n"), "{metrics}");
    // SIGTERM flushes what is queued.
    let stopped = server.stop_keeping_log();
    let spans = received.spans();
    assert!(!spans.is_empty(), "nothing exported over {protocol}:\n{metrics}\n{stopped}");

    // The webhook's HTTP server span, named and attributed as the semantic conventions say.
    let status = |span: &Span| attr(span, "http.response.status_code");
    let request = one_where(&spans, "POST /webhooks/{source}", |s| status(s).as_deref() == Some("200"));
    assert_eq!(request.kind, 2, "SPAN_KIND_SERVER");
    assert_eq!(attr(request, "http.request.method").as_deref(), Some("POST"));
    assert_eq!(attr(request, "http.route").as_deref(), Some("/webhooks/{source}"));
    assert_eq!(attr(request, "http.response.status_code").as_deref(), Some("200"));
    assert_eq!(attr(request, "payhook.source").as_deref(), Some(SOURCE));
    assert_eq!(attr(request, "payhook.event_id").as_deref(), Some("evt_trace_1"));
    assert!(attr(request, "request_id").is_some_and(|id| id.len() == 32));
    assert!(request.parent_span_id.is_empty(), "a provider's trace is not joined");

    // Verification, parsing and the ingest are its children; the effect is the ingest's.
    let child = |name: &str| one_where(&spans, name, |s| s.parent_span_id == request.span_id);
    let (verify, parse, ingest) = (child("payhook.verify"), child("payhook.parse"), child("payhook.ingest"));
    let effect = one(&spans, "payhook.effect");
    for child in [verify, parse, ingest] {
        assert_eq!((&child.trace_id, &child.parent_span_id), (&request.trace_id, &request.span_id), "{}", child.name);
    }
    assert_eq!((&effect.trace_id, &effect.parent_span_id), (&ingest.trace_id, &ingest.span_id));
    assert_eq!(attr(verify, "payhook.verify.scheme").as_deref(), Some("hmac"));
    assert_eq!(attr(verify, "payhook.verify.outcome").as_deref(), Some("verified"));
    assert_eq!(attr(parse, "payhook.format").as_deref(), Some("generic"));
    assert_eq!(attr(ingest, "payhook.event_id").as_deref(), Some("evt_trace_1"));
    assert_eq!(attr(ingest, "payhook.outcome").as_deref(), Some("processed"));
    assert_eq!(attr(effect, "payhook.order_id").as_deref(), Some("o-trace"));
    assert_eq!(attr(effect, "payhook.outcome").as_deref(), Some("processed"));

    // The ingest links to the writer batch it committed in, a trace of its own.
    let batches = named(&spans, "payhook.store.batch");
    let batch = ingest
        .links
        .iter()
        .find_map(|l| batches.iter().find(|b| b.span_id == l.span_id && b.trace_id == l.trace_id))
        .unwrap_or_else(|| panic!("the ingest links to an exported batch: {:?}", ingest.links));
    assert!(batch.parent_span_id.is_empty() && batch.trace_id != request.trace_id);
    assert_eq!(attr(batch, "db.system.name").as_deref(), Some("sqlite"));

    // The dispatch: its own trace, linked to the delivery's, and the trace the sink's request joins.
    let dispatch = named(&spans, "payhook.dispatch")
        .into_iter()
        .find(|s| attr(s, "payhook.sink").as_deref() == Some("shop"))
        .expect("a dispatch span for the sink");
    assert_ne!(dispatch.trace_id, request.trace_id);
    assert!(dispatch.links.iter().any(|l| l.trace_id == ingest.trace_id && l.span_id == ingest.span_id));
    assert_eq!(attr(dispatch, "payhook.attempt").as_deref(), Some("1"));
    assert_eq!(attr(dispatch, "payhook.outcome").as_deref(), Some("delivered"));
    assert_eq!(attr(dispatch, "http.response.status_code").as_deref(), Some("200"));
    let traceparent = sink_seen.lock().expect("sink")[0].clone();
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "a W3C traceparent: {traceparent:?}");
    let exported: Vec<String> = spans.iter().map(|s| hex(&s.trace_id)).collect();
    assert!(exported.contains(&parts[1].to_owned()), "the sink's trace {} is exported", parts[1]);
    assert_eq!((parts[1], parts[2]), (hex(&dispatch.trace_id).as_str(), hex(&dispatch.span_id).as_str()));

    // The refusal's JSON log line carries its request's trace and span ids, those of an exported request span.
    let line = stopped
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"].as_str().is_some_and(|m| m.contains("signature verification failed")))
        .unwrap_or_else(|| panic!("the refusal's JSON log line:\n{stopped}"));
    let refused = one_where(&spans, "POST /webhooks/{source}", |s| status(s).as_deref() == Some("401"));
    let refusal = one_where(&spans, "payhook.verify", |s| s.parent_span_id == refused.span_id);
    assert_eq!(attr(refusal, "payhook.verify.outcome").as_deref(), Some("mismatch"));
    assert_eq!(line["trace_id"].as_str(), Some(hex(&refused.trace_id).as_str()), "{line}");
    assert_eq!(line["span_id"].as_str(), Some(hex(&refused.span_id).as_str()), "{line}");
    assert!(line["request_id"].as_str().is_some_and(|id| Some(id.to_owned()) == attr(refused, "request_id")));

    // The API request continued the incoming trace.
    let api = one(&spans, "POST /v1/orders");
    assert_eq!((hex(&api.trace_id), hex(&api.parent_span_id)), (INCOMING_TRACE.to_owned(), INCOMING_PARENT.to_owned()));
    assert_eq!(attr(api, "http.response.status_code").as_deref(), Some("201"));

    // The resource says who sent it.
    let resource: Vec<KeyValue> = received.0.lock().expect("received")[0].resource_spans[0]
        .resource
        .as_ref()
        .map(|r| r.attributes.clone())
        .unwrap_or_default();
    let service = resource.iter().find(|kv| kv.key == "service.name").and_then(|kv| string(&kv.value));
    assert_eq!(service.as_deref(), Some("payhook-it"));

    // Nothing secret anywhere: the source's secret, the sink's, the API token, the signature sent.
    let mut secrets =
        vec![SECRET.to_owned(), SINK_SECRET.to_owned(), API_TOKEN.to_owned(), "collector token".to_owned()];
    secrets.extend(delivery.headers.iter().map(|(_, v)| v.clone()).filter(|v| v.len() >= 16));
    for kv in received.attributes() {
        let value = string(&kv.value).unwrap_or_default();
        for secret in &secrets {
            assert!(!value.contains(secret.as_str()), "attribute {} holds a secret: {value}", kv.key);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_of_a_delivery_are_exported_over_otlp_http_protobuf() {
    a_delivery_is_one_trace_and_its_dispatch_another_linked_to_it("http/protobuf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_of_a_delivery_are_exported_over_otlp_grpc() {
    a_delivery_is_one_trace_and_its_dispatch_another_linked_to_it("grpc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_has_a_request_id_taken_from_a_trusted_proxy_only() {
    let dir = TestDir::new();
    let untrusted = Server::start(&dir).await;
    let answer = untrusted
        .client
        .get(untrusted.url("/v1/orders/nope"))
        .bearer_auth(API_TOKEN)
        .header("x-request-id", "from-the-client")
        .send()
        .await
        .expect("GET");
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    let id = answer.headers().get("x-request-id").and_then(|v| v.to_str().ok()).expect("X-Request-Id").to_owned();
    assert_ne!(id, "from-the-client", "a client that is no trusted proxy does not choose its id");
    let body: Value = answer.json().await.expect("JSON error body");
    assert_eq!(body["request_id"], id.as_str(), "{body}");
    untrusted.stop();

    let dir = TestDir::new();
    let proxied =
        Server::start_edited(&dir, |c| c.replace("[server]\n", "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n"))
            .await;
    let sent = |id: &'static str| proxied.client.get(proxied.url("/healthz")).header("x-request-id", id).send();
    let kept = sent("edge-7f3a").await.expect("GET");
    assert_eq!(kept.headers().get("x-request-id").and_then(|v| v.to_str().ok()), Some("edge-7f3a"));
    let replaced = sent("bad id with spaces").await.expect("GET");
    let new = replaced.headers().get("x-request-id").and_then(|v| v.to_str().ok()).expect("X-Request-Id");
    assert_eq!(new.len(), 32, "an invalid id is replaced: {new}");
    // The id is in the log lines of its request.
    let refused = proxied
        .client
        .post(proxied.webhook_url())
        .header("x-request-id", "edge-bad-signature")
        .body("{}")
        .send()
        .await
        .expect("POST");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let log = proxied.log();
    let line = log.lines().find(|l| l.contains("signature verification failed")).expect("the refusal's log line");
    assert!(line.contains("request") && line.contains("request_id") && line.contains("edge-bad-signature"), "{line}");
    proxied.stop();
}
