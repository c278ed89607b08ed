//! The outbox dispatcher against a real HTTP sink started by the test on port 0: exactly-once receipts when the
//! sink answers 2xx, retries with growing delays and a stable idempotency key, dead letters, `Retry-After`,
//! recovery of rows whose dispatcher died, signatures, alerts, and sink isolation.

use crate::helpers::{TestApp, event, now_secs};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use payhook_core::event::OrderAction::Pay;
use payhook_core::retry::RetryPolicy;
use payhook_core::signature::{Scheme, Secret, Verifier};
use payhook_server::settings::{AlertSettings, SinkSettings};
use payhook_server::{SecretUrl, now_ms};
use payhook_store::{Claim, OutboxFilter, OutboxKind, OutboxView, Store};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SINK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the sink saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Answers to give, in order, per path: (status, Retry-After).
type Script = Vec<(String, VecDeque<(u16, Option<&'static str>)>)>;

#[derive(Default)]
struct SinkState {
    seen: Mutex<Vec<Seen>>,
    /// When a path's answers run out: 200.
    script: Mutex<Script>,
    delay: Mutex<Vec<(String, Duration)>>,
}

/// A local HTTP endpoint that records every request and answers from a script.
struct Sink {
    url: String,
    state: Arc<SinkState>,
}

impl Sink {
    async fn start() -> Self {
        let state = Arc::new(SinkState::default());
        let app = Router::new().route("/{*path}", post(record)).with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, state }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// The next answers of `path`: (status, Retry-After).
    fn answer(&self, path: &str, answers: &[(u16, Option<&'static str>)]) {
        self.state.script.lock().unwrap().push((path.to_owned(), answers.iter().copied().collect()));
    }

    fn slow(&self, path: &str, delay: Duration) {
        self.state.delay.lock().unwrap().push((path.to_owned(), delay));
    }

    fn seen(&self, path: &str) -> Vec<Seen> {
        self.state.seen.lock().unwrap().iter().filter(|s| s.path == path).cloned().collect()
    }
}

async fn record(
    State(state): State<Arc<SinkState>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> impl IntoResponse {
    let path = uri.path().to_owned();
    let delay = state.delay.lock().unwrap().iter().find(|(p, _)| *p == path).map(|(_, d)| *d);
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    state.seen.lock().unwrap().push(Seen { path: path.clone(), headers, body: body.to_vec() });
    let next = {
        let mut script = state.script.lock().unwrap();
        script.iter_mut().find(|(p, _)| *p == path).and_then(|(_, answers)| answers.pop_front())
    };
    let (status, retry_after) = next.unwrap_or((200, None));
    let mut response = (StatusCode::from_u16(status).unwrap(), "ok").into_response();
    if let Some(after) = retry_after {
        response.headers_mut().insert("retry-after", after.parse().unwrap());
    }
    response
}

/// Alerts to `url`: one per key in a 5-minute window, sent at once, 2 s timeout.
fn alerts_at(url: &str) -> AlertSettings {
    AlertSettings {
        url: SecretUrl::parse(url).unwrap(),
        window_ms: 300_000,
        gather_ms: 0,
        verification_failures: 100,
        timeout_ms: 2_000,
    }
}

fn sink(name: &str, url: String, kinds: &[&str]) -> SinkSettings {
    SinkSettings {
        name: name.to_owned(),
        url: SecretUrl::parse(&url).unwrap(),
        kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
        signer: Some(Verifier::new(Scheme::StandardWebhooks, &[Secret::new(SINK_SECRET)], 300).unwrap()),
        timeout_ms: 2_000,
        max_in_flight: 4,
        transport: payhook_server::SinkTransport::Http,
        order: payhook_store::KeyOrder::default(),
        rate: None,
        filter: Default::default(),
    }
}

/// 1 s doubling, no jitter: delays are exact.
fn exact_policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy { base_ms: 1_000, factor: 2, cap_ms: 60_000, jitter: 0.0, max_attempts }
}

async fn paid_order(app: &TestApp, order: &str) {
    app.register_order(order, 100, "usd").await;
    let (status, answer) = app.deliver("payments", &event(&format!("evt_{order}"), Pay, order, 100)).await;
    assert_eq!((status.as_u16(), answer["status"].as_str()), (200, Some("processed")), "{answer}");
}

async fn rows(app: &TestApp, sink: &str) -> Vec<OutboxView> {
    app.store
        .list_outbox(OutboxFilter { sink: Some(sink.into()), limit: 100, ..OutboxFilter::default() })
        .await
        .expect("list outbox")
        .rows
}

#[tokio::test]
async fn each_receipt_is_delivered_exactly_once_signed_with_the_sinks_secret() {
    let sink_server = Sink::start().await;
    let url = sink_server.url("/shop");
    let app = TestApp::spawn_with(|s, _| s.sinks.push(sink("shop", url, &["order.paid"]))).await;
    for i in 0..3 {
        paid_order(&app, &format!("ord_d{i}")).await;
    }
    let pass = app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(pass.delivered, 3, "{pass:?}");
    assert_eq!(
        app.running.dispatcher.run_until_idle(app.clock.advance(3_600_000)).await.expect("dispatch").delivered,
        0
    );

    let seen = sink_server.seen("/shop");
    assert_eq!(seen.len(), 3, "each receipt once");
    let verifier = Verifier::new(Scheme::StandardWebhooks, &[Secret::new(SINK_SECRET)], 300).unwrap();
    for s in &seen {
        let id = s.header("webhook-id").expect("webhook-id");
        assert_eq!(s.header("idempotency-key"), Some(id), "the idempotency key is the outbox id");
        verifier.verify(&s.headers, &s.body, now_secs()).expect("the sink can verify what it received");
        let payload: serde_json::Value = serde_json::from_slice(&s.body).unwrap();
        assert_eq!(payload["kind"], "order.paid");
    }
    for row in rows(&app, "shop").await {
        assert_eq!((row.status.as_str(), row.last_status, row.attempts), ("delivered", Some(200), 1));
        assert!(row.delivered_at_ms.is_some());
    }
}

#[tokio::test]
async fn a_sink_answering_500_three_times_is_retried_with_growing_delays_and_the_same_key() {
    let sink_server = Sink::start().await;
    let url = sink_server.url("/shop");
    sink_server.answer("/shop", &[(500, None), (500, None), (500, None)]);
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(sink("shop", url, &["order.paid"]));
        s.dispatcher.retry = exact_policy(10);
    })
    .await;
    paid_order(&app, "ord_r").await;
    let mut delays = Vec::new();
    let mut now = now_ms();
    for _ in 0..3 {
        let before = now_ms();
        let pass = app.running.dispatcher.run_once(now).await.expect("dispatch");
        assert_eq!(pass.retried, 1, "{pass:?}");
        let row = rows(&app, "shop").await.remove(0);
        let next = row.next_attempt_at_ms.expect("rescheduled");
        delays.push(next - before);
        assert_eq!(row.last_status, Some(500));
        assert_eq!(app.running.dispatcher.run_once(next - 1).await.expect("dispatch").retried, 0, "not before");
        now = next;
    }
    assert!(delays[0] >= 900 && delays[1] >= 1_900 && delays[2] >= 3_900, "growing delays: {delays:?}");
    assert!(delays.windows(2).all(|w| w[1] > w[0]), "{delays:?}");
    assert_eq!(app.running.dispatcher.run_once(now).await.expect("dispatch").delivered, 1);
    let seen = sink_server.seen("/shop");
    assert_eq!(seen.len(), 4);
    let keys: Vec<&str> = seen.iter().map(|s| s.header("idempotency-key").unwrap()).collect();
    assert!(keys.iter().all(|k| *k == keys[0]), "the same key every time: {keys:?}");
    let row = rows(&app, "shop").await.remove(0);
    assert_eq!((row.status.as_str(), row.attempts), ("delivered", 4));
}

#[tokio::test]
async fn a_400_is_permanent_and_a_spent_budget_is_dead_with_the_last_error_and_an_alert() {
    let sink_server = Sink::start().await;
    let (shop, crm, alerts) = (sink_server.url("/shop"), sink_server.url("/crm"), sink_server.url("/alerts"));
    sink_server.answer("/shop", &[(400, None)]);
    sink_server.answer("/crm", &[(503, None), (503, None)]);
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(sink("shop", shop, &["order.paid"]));
        s.sinks.push(sink("crm", crm, &["*"]));
        s.dispatcher.retry = exact_policy(2);
        s.alerts = Some(alerts_at(&alerts));
    })
    .await;
    paid_order(&app, "ord_x").await;
    let t = now_ms();
    app.running.dispatcher.run_once(t).await.expect("dispatch");
    let shop_row = rows(&app, "shop").await.remove(0);
    assert_eq!((shop_row.status.as_str(), shop_row.attempts, shop_row.last_status), ("dead", 1, Some(400)));
    assert!(shop_row.last_error.as_deref().is_some_and(|e| e.starts_with("400")), "{shop_row:?}");
    let crm_row = rows(&app, "crm").await.remove(0);
    assert_eq!(crm_row.status, payhook_store::OutboxStatus::Pending);
    app.running.dispatcher.run_once(crm_row.next_attempt_at_ms.unwrap()).await.expect("dispatch");
    let crm_row = rows(&app, "crm").await.remove(0);
    assert_eq!((crm_row.status.as_str(), crm_row.attempts), ("dead", 2));
    assert!(crm_row.last_error.as_deref().is_some_and(|e| e.contains("budget spent")), "{crm_row:?}");

    // Each dead row raised an alert, delivered as Slack-compatible JSON.
    app.running.dispatcher.run_until_idle(app.clock.advance(3_600_000)).await.expect("dispatch");
    let seen = sink_server.seen("/alerts");
    assert_eq!(seen.len(), 2, "one alert per dead sink: {seen:?}");
    for s in &seen {
        let v: serde_json::Value = serde_json::from_slice(&s.body).unwrap();
        assert!(v["text"].as_str().is_some_and(|t| t.contains("dead")), "{v}");
    }
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let sink_server = Sink::start().await;
    let url = sink_server.url("/shop");
    sink_server.answer("/shop", &[(429, Some("120"))]);
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(sink("shop", url, &["order.paid"]));
        s.dispatcher.retry = exact_policy(5);
    })
    .await;
    paid_order(&app, "ord_ra").await;
    let before = app.clock.now_ms();
    app.running.dispatcher.run_once(before).await.expect("dispatch");
    let row = rows(&app, "shop").await.remove(0);
    assert!(row.next_attempt_at_ms.unwrap() >= before + 120_000, "{row:?}");
    assert_eq!(app.running.dispatcher.run_once(before + 60_000).await.expect("dispatch").total_sent(), 0);
}

trait Sent {
    fn total_sent(&self) -> usize;
}

impl Sent for payhook_server::dispatcher::DispatchPass {
    fn total_sent(&self) -> usize {
        self.delivered + self.retried + self.dead
    }
}

#[tokio::test]
async fn a_row_whose_dispatcher_died_mid_delivery_is_sent_again_with_the_same_key() {
    let sink_server = Sink::start().await;
    let url = sink_server.url("/shop");
    let app = TestApp::spawn_with(|s, _| s.sinks.push(sink("shop", url, &["order.paid"]))).await;
    paid_order(&app, "ord_k").await;
    // A dispatcher claims the row, sends it (the sink sees it) and dies before recording the outcome.
    let t = now_ms();
    let claim = Claim { now_ms: t, lease_ms: 60_000, limit: 10, owner: "crashed".into() };
    let job = app.store.claim_outbox("shop", claim).await.expect("claim").pop().expect("due");
    reqwest::Client::new()
        .post(sink_server.url("/shop"))
        .header("idempotency-key", job.id.to_string())
        .body(job.payload.clone())
        .send()
        .await
        .expect("the first send");
    assert_eq!(app.running.dispatcher.run_once(t + 59_000).await.expect("dispatch").total_sent(), 0, "leased");
    assert_eq!(app.running.dispatcher.run_once(t + 60_000).await.expect("dispatch").delivered, 1);
    let seen = sink_server.seen("/shop");
    assert_eq!(seen.len(), 2, "at least once: the sink sees the row twice");
    assert_eq!(seen[0].header("idempotency-key"), seen[1].header("idempotency-key"), "always with the same key");
    assert_eq!(rows(&app, "shop").await.remove(0).status, payhook_store::OutboxStatus::Delivered);
}

#[tokio::test]
async fn a_hundred_dead_letters_in_a_minute_send_one_alert_with_the_count() {
    let sink_server = Sink::start().await;
    let url = sink_server.url("/alerts");
    let app = TestApp::spawn_with(|s, _| {
        s.alerts = Some(AlertSettings { gather_ms: 30_000, verification_failures: 1_000, ..alerts_at(&url) })
    })
    .await;
    for i in 0..100 {
        let (_, answer) = app.deliver_bytes("payments", format!("not json {i}").into_bytes()).await;
        assert_eq!(answer["status"], "dead_lettered");
    }
    let now = now_ms();
    assert_eq!(app.running.dispatcher.run_once(now).await.expect("dispatch").total_sent(), 0, "still gathering");
    assert_eq!(app.running.dispatcher.run_until_idle(now + 30_000).await.expect("dispatch").delivered, 1);
    let seen = sink_server.seen("/alerts");
    assert_eq!(seen.len(), 1);
    let v: serde_json::Value = serde_json::from_slice(&seen[0].body).unwrap();
    assert_eq!(v["count"], 100, "{v}");
    assert!(v["text"].as_str().is_some_and(|t| t.contains("100 alerts")), "{v}");
}

#[tokio::test]
async fn a_source_that_keeps_failing_verification_raises_one_alert() {
    let sink_server = Sink::start().await;
    let url = sink_server.url("/alerts");
    let app =
        TestApp::spawn_with(|s, _| s.alerts = Some(AlertSettings { verification_failures: 5, ..alerts_at(&url) }))
            .await;
    for _ in 0..12 {
        let reply = app.post_raw("payments", &[("x-webhook-signature".into(), "00".repeat(32))], "{}").await;
        assert_eq!(reply.status.as_u16(), 401);
    }
    app.running.dispatcher.run_until_idle(app.clock.advance(1)).await.expect("dispatch");
    let seen = sink_server.seen("/alerts");
    assert_eq!(seen.len(), 1, "{seen:?}");
    let v: serde_json::Value = serde_json::from_slice(&seen[0].body).unwrap();
    assert!(v["text"].as_str().is_some_and(|t| t.contains("payments") && t.contains("verification")), "{v}");
}

/// The text of a verification error can hold what the request chose (here an RFC 9421 component name full of
/// markup, reported missing): the alert carries the error's code, never that text, in the row stored and in what
/// the alerts endpoint gets.
#[tokio::test]
async fn a_verification_alert_carries_the_error_code_and_none_of_the_requests_text() {
    let sink_server = Sink::start().await;
    let url = sink_server.url("/alerts");
    let app =
        TestApp::spawn_with(|s, _| s.alerts = Some(AlertSettings { verification_failures: 1, ..alerts_at(&url) }))
            .await;
    let evil = "evil<script>alert(1)</script><!channel>";
    let body = b"{}";
    let input = format!(
        r#"sig1=("@method" "@authority" "@path" "content-digest" "{evil}");created={};keyid="payhook-test""#,
        now_secs()
    );
    let headers = [
        ("Content-Digest".to_owned(), payhook_core::signature::content_digest(body)),
        ("Signature-Input".to_owned(), input),
        ("Signature".to_owned(), "sig1=:AAAA:".to_owned()),
    ];
    let reply = app.post_raw("signed", &headers, body.to_vec()).await;
    assert_eq!((reply.status.as_u16(), &reply.json["error"]), (401, &serde_json::json!("missing_header")));

    let filter = OutboxFilter { kind: Some(OutboxKind::Alert), limit: 10, ..Default::default() };
    let alerts = app.store.list_outbox(filter).await.expect("outbox").rows;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let stored = alerts[0].payload.to_string();
    app.running.dispatcher.run_until_idle(app.clock.advance(1)).await.expect("dispatch");
    let seen = sink_server.seen("/alerts");
    assert_eq!(seen.len(), 1, "{seen:?}");
    let sent = String::from_utf8_lossy(&seen[0].body).into_owned();
    for text in [&stored, &sent] {
        assert!(text.contains("signed") && text.contains("missing_header"), "{text}");
        assert!(!text.contains("evil") && !text.contains("script") && !text.contains("channel"), "{text}");
    }
}

#[tokio::test]
async fn one_slow_sink_does_not_stall_the_others() {
    let sink_server = Sink::start().await;
    let (slow, fast) = (sink_server.url("/slow"), sink_server.url("/fast"));
    // The slow sink's first row takes 6 s: the fast rows must all arrive before it is answered, with room for a
    // loaded machine.
    const SLOW: Duration = Duration::from_secs(6);
    sink_server.slow("/slow", SLOW);
    let app = TestApp::spawn_with(|s, _| {
        let mut slow = sink("slow", slow, &["order.paid"]);
        (slow.max_in_flight, slow.timeout_ms) = (1, 10_000);
        s.sinks.push(slow);
        s.sinks.push(sink("fast", fast, &["order.paid"]));
        s.dispatcher.enabled = true;
        s.dispatcher.poll_interval_ms = 20;
    })
    .await;
    let started = std::time::Instant::now();
    for i in 0..4 {
        paid_order(&app, &format!("ord_s{i}")).await;
    }
    let deadline = started + SLOW;
    while sink_server.seen("/fast").len() < 4 {
        assert!(std::time::Instant::now() < deadline, "the fast sink was stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(started.elapsed() < SLOW, "fast rows arrived in {:?}", started.elapsed());
    assert!(sink_server.seen("/slow").len() <= 1, "the slow sink is still on its first row");
}

/// A token planted in sink and alert URLs; no stored error, answer, page or alert may ever show it.
const PLANTED: &str = "s3cr3t-PLANTED-token";

/// A port nobody listens on: bound, read and let go.
fn refused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Everything an operator can read about the outbox: the API's listing, the event's and the order's detail, and
/// the dashboard's outbox, event and order pages, as one text.
async fn everything_shown(app: &TestApp, event_id: &str, order_id: &str) -> String {
    let mut shown = String::new();
    for path in
        ["/v1/outbox?limit=500".to_owned(), format!("/v1/events/payments/{event_id}"), format!("/v1/orders/{order_id}")]
    {
        let reply = app.api_get(&path).await;
        assert_eq!(reply.status.as_u16(), 200, "{path}: {}", reply.json);
        shown.push_str(&reply.json.to_string());
    }
    let login = crate::ui::login(app).await;
    for path in
        ["/ui/outbox".to_owned(), format!("/ui/events/payments/{event_id}"), format!("/ui/orders?id={order_id}")]
    {
        let page = crate::ui::get(app, &path, Some(&login.cookie)).await;
        assert_eq!(page.status().as_u16(), 200, "{path}");
        shown.push_str(&page.text().await.unwrap());
    }
    shown
}

#[tokio::test]
async fn secrets_in_sink_and_alert_urls_reach_no_stored_error_answer_page_or_alert() {
    let sink_server = Sink::start().await;
    let host = sink_server.url.trim_start_matches("http://").to_owned();
    sink_server.answer(&format!("/hooks/{PLANTED}"), &[(500, None)]);
    let failing = format!("http://user:{PLANTED}@{host}/hooks/{PLANTED}?token={PLANTED}");
    let refused = format!("http://127.0.0.1:{}/hooks/{PLANTED}?token={PLANTED}#{PLANTED}", refused_port());
    let unresolvable = format!("http://payhook-test.invalid/hooks/{PLANTED}?token={PLANTED}");
    let alerts = format!("http://alerter:{PLANTED}@{host}/alerts/{PLANTED}?token={PLANTED}");
    let mut settings_debug = String::new();
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(sink("failing", failing, &["order.paid"]));
        s.sinks.push(sink("refused", refused, &["order.paid"]));
        s.sinks.push(sink("unresolvable", unresolvable, &["order.paid"]));
        s.dispatcher.retry = exact_policy(1);
        s.alerts = Some(alerts_at(&alerts));
        settings_debug = format!("{s:?}");
    })
    .await;
    // Should anything print the settings, their URLs are redacted too.
    assert!(!settings_debug.contains(PLANTED), "{settings_debug}");
    assert!(settings_debug.contains("http://payhook-test.invalid/hooks/…"), "{settings_debug}");
    paid_order(&app, "ord_s").await;
    let pass = app.running.dispatcher.run_once(now_ms()).await.expect("dispatch");
    assert_eq!(pass.dead, 3, "every sink fails: {pass:?}");

    // The stored errors name each endpoint by its redacted form and say what went wrong (after "retry budget spent
    // after 1 attempts: ").
    let expected = [
        ("failing", format!("500 Internal Server Error from http://{host}/hooks/…")),
        ("refused", "request to http://127.0.0.1:".to_owned()),
        ("unresolvable", "request to http://payhook-test.invalid/hooks/… failed".to_owned()),
    ];
    for (name, start) in &expected {
        let error = rows(&app, name).await.remove(0).last_error.expect("a last error");
        assert!(error.contains(start.as_str()) && !error.contains(PLANTED), "{name}: {error}");
    }

    // The alerts reach the alert endpoint, name the sinks' redacted URLs and nothing more.
    app.running.dispatcher.run_until_idle(app.clock.advance(3_600_000)).await.expect("dispatch");
    let seen = sink_server.seen(&format!("/alerts/{PLANTED}"));
    assert_eq!(seen.len(), 3, "one alert per dead row: {seen:?}");
    let alert_texts: Vec<String> = seen.iter().map(|s| String::from_utf8_lossy(&s.body).into_owned()).collect();
    let all_alerts = alert_texts.join("\n");
    assert!(!all_alerts.contains(PLANTED), "{all_alerts}");
    for fragment in [format!("http://{host}/hooks/…"), "payhook-test.invalid/hooks/…".to_owned()] {
        assert!(all_alerts.contains(&fragment), "{fragment} in {all_alerts}");
    }

    let shown = everything_shown(&app, "evt_ord_s", "ord_s").await;
    assert!(!shown.contains(PLANTED), "a planted secret is shown: {shown}");
    assert!(shown.contains(&format!("http://{host}/hooks/…")) && shown.contains("payhook-test.invalid"), "{shown}");
}

#[tokio::test]
async fn an_alert_endpoint_that_fails_keeps_its_secret_out_of_its_own_error() {
    let sink_server = Sink::start().await;
    sink_server.answer("/shop", &[(400, None)]);
    let port = refused_port();
    let alerts = format!("http://alerter:{PLANTED}@127.0.0.1:{port}/services/T0/B0/{PLANTED}?token={PLANTED}");
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(sink("shop", sink_server.url("/shop"), &["order.paid"]));
        s.alerts = Some(alerts_at(&alerts));
    })
    .await;
    paid_order(&app, "ord_a").await;
    app.running.dispatcher.run_once(now_ms()).await.expect("dispatch");
    // The dead row raises its alert; passes a minute ahead find it due whatever the machine's load did to the clock
    // between them, until its attempt fails (a few passes; up to 10 s on a loaded machine).
    let mut pass = app.running.dispatcher.run_once(app.clock.advance(60_000)).await.expect("dispatch");
    for _ in 0..100 {
        if pass.retried > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        pass = app.running.dispatcher.run_once(app.clock.advance(60_000)).await.expect("dispatch");
    }
    assert_eq!(pass.retried, 1, "the alert could not be sent: {pass:?}");
    let alert = rows(&app, "_alerts").await.remove(0);
    let error = alert.last_error.expect("the alert's last error");
    assert!(error.starts_with(&format!("request to http://127.0.0.1:{port}/services/… failed")), "{error}");
    assert!(!error.contains(PLANTED), "{error}");
    let shown = everything_shown(&app, "evt_ord_a", "ord_a").await;
    assert!(!shown.contains(PLANTED) && shown.contains(&format!("127.0.0.1:{port}/services/…")), "{shown}");
}

#[tokio::test]
async fn an_error_stored_with_a_full_url_is_shown_redacted_everywhere() {
    // A row recorded before errors were redacted at the source: the HTTP client's message with the sink's URL.
    let sink_server = Sink::start().await;
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(sink("shop", sink_server.url("/shop"), &["order.paid"]));
        s.alerts = Some(AlertSettings { gather_ms: 3_600_000, ..alerts_at(&sink_server.url("/alerts")) });
    })
    .await;
    paid_order(&app, "ord_old").await;
    let claim = Claim { now_ms: now_ms(), lease_ms: 60_000, limit: 10, owner: "older-version".into() };
    let job = app.store.claim_outbox("shop", claim).await.expect("claim").pop().expect("due");
    let error = format!(
        "request failed: error sending request for url (https://hooks.slack.com/services/T0/B0/{PLANTED}?token={PLANTED})"
    );
    let dead = payhook_store::Dispatched::Dead { status: None, error };
    assert!(app.store.finish_outbox(&job, dead, now_ms()).await.expect("finish"));
    let stored = app.store.list_outbox(OutboxFilter { limit: 10, ..OutboxFilter::default() }).await.unwrap().rows;
    assert!(stored.iter().any(|r| r.payload.to_string().contains(PLANTED)), "the alert's text holds it as stored");

    let shown = everything_shown(&app, "evt_ord_old", "ord_old").await;
    assert!(!shown.contains(PLANTED), "a planted secret is shown: {shown}");
    assert!(shown.contains("https://hooks.slack.com/services/…"), "{shown}");
}

/// The running dispatcher follows reloads: a sink added by a reload gets its own loop and the next receipts, a
/// removed sink's loop stops and its later rows are never written, and rows written before stay where they were.
#[tokio::test]
async fn a_sink_added_by_a_reload_is_delivered_to_and_a_removed_one_no_longer_is() {
    let sink_server = Sink::start().await;
    let (old_url, new_url) = (sink_server.url("/old"), sink_server.url("/new"));
    let app = TestApp::spawn_with(|s, _| {
        s.dispatcher.enabled = true;
        s.dispatcher.poll_interval_ms = 20;
        s.sinks.push(sink("old", old_url, &["order.paid"]));
    })
    .await;
    paid_order(&app, "ord_r1").await;
    let delivered_to = |path: &'static str, n: usize| {
        let sink_server = &sink_server;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while sink_server.seen(path).len() < n {
                assert!(std::time::Instant::now() < deadline, "{path} never received {n} rows");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    delivered_to("/old", 1).await;

    let mut settings = app.settings.clone();
    settings.sinks = vec![sink("new", new_url, &["order.paid"])];
    let report = app.running.state.apply(payhook_server::Reloaded {
        settings,
        changed_sources: Vec::new(),
        changed_sinks: Vec::new(),
        alerts_changed: false,
    });
    assert_eq!((report.sinks_added, report.sinks_removed), (vec!["new".to_owned()], vec!["old".to_owned()]));
    paid_order(&app, "ord_r2").await;
    delivered_to("/new", 1).await;
    assert_eq!(rows(&app, "old").await.len(), 1, "no row for the removed sink after the reload");
    assert_eq!(rows(&app, "new").await.len(), 1);
    assert_eq!(sink_server.seen("/old").len(), 1);
}

/// A sink's filter decides at the socket what it receives: only the receipts whose fields its `when` names reach it,
/// while an unfiltered sink gets them all; a reload that changes the filter routes the next receipts by the new one.
#[tokio::test]
async fn a_filtered_sink_receives_only_what_its_filter_names() {
    let sink_server = Sink::start().await;
    let (picky_url, all_url) = (sink_server.url("/picky"), sink_server.url("/all"));
    let picky = |orders: &[&str]| {
        let mut picky = sink("picky", picky_url.clone(), &["order.paid"]);
        let accepted = orders.iter().map(|o| (*o).to_owned()).collect();
        picky.filter.conditions = vec![payhook_store::Condition { pointer: "/order_id".into(), accepted }];
        picky
    };
    let first = picky(&["ord_f1", "ord_f3"]);
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(first);
        s.sinks.push(sink("all", all_url, &["order.paid"]));
    })
    .await;
    for order in ["ord_f1", "ord_f2", "ord_f3"] {
        paid_order(&app, order).await;
    }
    app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    let orders_at = |path: &str| -> Vec<String> {
        let mut orders: Vec<String> = sink_server
            .seen(path)
            .iter()
            .map(|s| serde_json::from_slice::<serde_json::Value>(&s.body).unwrap()["order_id"].to_string())
            .collect();
        orders.sort();
        orders
    };
    assert_eq!(orders_at("/picky"), ["\"ord_f1\"", "\"ord_f3\""]);
    assert_eq!(orders_at("/all"), ["\"ord_f1\"", "\"ord_f2\"", "\"ord_f3\""]);

    let mut settings = app.settings.clone();
    settings.sinks[0] = picky(&["ord_f4"]);
    app.running.state.apply(payhook_server::Reloaded {
        settings,
        changed_sources: Vec::new(),
        changed_sinks: vec!["picky".into()],
        alerts_changed: false,
    });
    for order in ["ord_f4", "ord_f5"] {
        paid_order(&app, order).await;
    }
    app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(orders_at("/picky"), ["\"ord_f1\"", "\"ord_f3\"", "\"ord_f4\""]);
    assert_eq!(orders_at("/all").len(), 5);
}
