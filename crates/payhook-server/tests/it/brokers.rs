//! Broker sinks against the real brokers: NATS JetStream (`PAYHOOK_TEST_NATS_URL`, default
//! `nats://127.0.0.1:4222`) and Redis (`PAYHOOK_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`). Every
//! `order.paid` arrives once per order; a re-publish after the broker's ack (a dispatcher that died before recording
//! it) is dropped by the broker; an order id fills one subject token or stream key piece, escaped, and cannot reach
//! the script's own keys; a broker that is down leaves rows pending, then dead with an alert; a broker
//! restarted under load loses and doubles nothing.
//!
//! A test whose broker is unreachable prints why and passes, unless `PAYHOOK_TEST_BROKERS=1` (set by `.ci/run`),
//! where it fails. Each test uses its own subject prefix, stream and key names, so tests share the brokers safely.

use crate::failpoints::{Failpoint, SERIAL};
use crate::helpers::{TestApp, event};
use payhook_core::event::OrderAction::Pay;
use payhook_core::retry::RetryPolicy;
use payhook_server::settings::{AlertSettings, SinkSettings};
use payhook_server::{SecretUrl, SinkTransport, now_ms};
use payhook_store::{OutboxFilter, OutboxView, Store};
use std::collections::BTreeSet;
use std::time::Duration;

pub(crate) fn nats_url() -> String {
    std::env::var("PAYHOOK_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

pub(crate) fn redis_url() -> String {
    std::env::var("PAYHOOK_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Whether the broker at `url` answers on TCP; when it does not, the test is skipped with a message, or fails
/// when `PAYHOOK_TEST_BROKERS=1`.
pub(crate) async fn reachable(url: &str, test: &str) -> bool {
    let parsed = reqwest::Url::parse(url).expect("broker URL");
    let addr = format!("{}:{}", parsed.host_str().unwrap_or("127.0.0.1"), parsed.port().unwrap_or(0));
    let up =
        matches!(tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(&addr)).await, Ok(Ok(_)));
    if !up {
        assert!(std::env::var("PAYHOOK_TEST_BROKERS").as_deref() != Ok("1"), "{test}: no broker at {addr}");
        eprintln!("skipped {test}: no broker at {addr} (set PAYHOOK_TEST_BROKERS=1 to fail instead)");
    }
    up
}

/// A name no other test run uses.
pub(crate) fn unique(prefix: &str) -> String {
    format!("{prefix}{:012x}", fastrand::u64(..) >> 16)
}

pub(crate) fn nats_sink(name: &str, url: &str, subject: &str) -> SinkSettings {
    SinkSettings {
        name: name.to_owned(),
        url: SecretUrl::parse_broker(url, SinkTransport::NATS_SCHEMES).unwrap(),
        kinds: vec!["order.paid".into()],
        signer: None,
        timeout_ms: 3_000,
        max_in_flight: 4,
        transport: SinkTransport::Nats { subject: subject.to_owned() },
        order: payhook_store::KeyOrder::default(),
        rate: None,
        filter: Default::default(),
    }
}

pub(crate) fn redis_sink(name: &str, url: &str, stream: &str) -> SinkSettings {
    SinkSettings {
        name: name.to_owned(),
        url: SecretUrl::parse_broker(url, SinkTransport::REDIS_SCHEMES).unwrap(),
        kinds: vec!["order.paid".into()],
        signer: None,
        timeout_ms: 3_000,
        max_in_flight: 4,
        transport: SinkTransport::Redis { stream: stream.to_owned(), dedup_window_secs: 600 },
        order: payhook_store::KeyOrder::default(),
        rate: None,
        filter: Default::default(),
    }
}

/// A JetStream stream taking `{prefix}.>`, with a two-minute duplicate window.
pub(crate) async fn create_stream(url: &str, name: &str, prefix: &str) -> async_nats::jetstream::Context {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.expect("connect to NATS"));
    js.create_stream(async_nats::jetstream::stream::Config {
        name: name.to_owned(),
        subjects: vec![format!("{prefix}.>")],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .expect("create the stream");
    js
}

/// Every message of a stream, in order: (subject, Nats-Msg-Id, payload).
pub(crate) async fn stream_messages(
    js: &async_nats::jetstream::Context,
    name: &str,
) -> Vec<(String, String, serde_json::Value)> {
    let mut stream = js.get_stream(name).await.expect("stream");
    let last = stream.info().await.expect("stream info").state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        let m = stream.get_raw_message(seq).await.expect("stream message");
        let id = m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned()).unwrap_or_default();
        out.push((m.subject.to_string(), id, serde_json::from_slice(&m.payload).expect("JSON payload")));
    }
    out
}

/// Every entry of a Redis stream: (outbox id, kind, payload).
pub(crate) async fn redis_entries(url: &str, key: &str) -> Vec<(String, String, serde_json::Value)> {
    let client = redis::Client::open(url).expect("redis URL");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect to Redis");
    let entries: Vec<(String, Vec<String>)> =
        redis::cmd("XRANGE").arg(key).arg("-").arg("+").query_async(&mut conn).await.expect("XRANGE");
    entries
        .into_iter()
        .map(|(_, fields)| {
            let field =
                |name: &str| fields.chunks(2).find(|kv| kv[0] == name).map(|kv| kv[1].clone()).unwrap_or_default();
            (field("id"), field("kind"), serde_json::from_str(&field("payload")).expect("JSON payload"))
        })
        .collect()
}

pub(crate) async fn redis_delete(url: &str, pattern: &str) {
    let client = redis::Client::open(url).expect("redis URL");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect to Redis");
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query_async(&mut conn).await.expect("KEYS");
    for key in keys {
        let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await.expect("DEL");
    }
}

pub(crate) async fn paid_order(app: &TestApp, order: &str) {
    app.register_order(order, 100, "usd").await;
    let (status, answer) = app.deliver("payments", &event(&format!("evt_{order}"), Pay, order, 100)).await;
    assert_eq!((status.as_u16(), answer["status"].as_str()), (200, Some("processed")), "{answer}");
}

pub(crate) async fn rows(app: &TestApp, sink: &str) -> Vec<OutboxView> {
    let filter = OutboxFilter { sink: Some(sink.into()), limit: 1_000, ..OutboxFilter::default() };
    app.store.list_outbox(filter).await.expect("outbox rows").rows
}

/// Each order once, under its outbox row's id, and every row delivered.
fn assert_once_per_order(app_rows: &[OutboxView], seen: &[(String, String, serde_json::Value)], orders: usize) {
    assert_eq!(seen.len(), orders, "one message per order: {seen:?}");
    let ids: BTreeSet<&str> = seen.iter().map(|(_, id, _)| id.as_str()).collect();
    let order_ids: BTreeSet<&str> = seen.iter().filter_map(|(_, _, p)| p["order_id"].as_str()).collect();
    assert_eq!((ids.len(), order_ids.len()), (orders, orders), "{seen:?}");
    assert_eq!(app_rows.len(), orders);
    for row in app_rows {
        assert_eq!(row.status, payhook_store::OutboxStatus::Delivered, "{row:?}");
        assert!(ids.contains(row.id.to_string().as_str()), "row {} is not in the broker", row.id);
    }
}

#[tokio::test]
async fn every_order_paid_reaches_jetstream_once_per_order_under_its_subject() {
    let url = nats_url();
    if !reachable(&url, "every_order_paid_reaches_jetstream_once_per_order_under_its_subject").await {
        return;
    }
    let (stream, prefix) = (unique("PAYHOOK_IT_"), unique("payhook-it-"));
    let js = create_stream(&url, &stream, &prefix).await;
    let subject = format!("{prefix}.{{kind}}.{{order_id}}");
    let app = TestApp::spawn_with(|s, _| s.sinks.push(nats_sink("events", &url, &subject))).await;
    for i in 0..6 {
        paid_order(&app, &format!("ord_n{i}")).await;
    }
    let pass = app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(pass.delivered, 6, "{pass:?}");
    let seen = stream_messages(&js, &stream).await;
    assert_once_per_order(&rows(&app, "events").await, &seen, 6);
    for (subject, _, payload) in &seen {
        assert_eq!(subject, &format!("{prefix}.order.paid.{}", payload["order_id"].as_str().unwrap()));
    }
    js.delete_stream(&stream).await.expect("delete the stream");
}

/// An order id holding NATS's token separator, wildcards and a space fills one subject token, escaped, which
/// percent-decoding reads back.
#[tokio::test]
async fn an_order_id_with_dots_and_wildcards_lands_on_one_escaped_subject_token() {
    let url = nats_url();
    if !reachable(&url, "an_order_id_with_dots_and_wildcards_lands_on_one_escaped_subject_token").await {
        return;
    }
    let (stream, prefix) = (unique("PAYHOOK_IT_"), unique("payhook-it-"));
    let js = create_stream(&url, &stream, &prefix).await;
    let subject = format!("{prefix}.{{kind}}.{{order_id}}");
    let app = TestApp::spawn_with(|s, _| s.sinks.push(nats_sink("events", &url, &subject))).await;
    paid_order(&app, "ord.1 >*").await;
    let pass = app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(pass.delivered, 1, "{pass:?}");
    let seen = stream_messages(&js, &stream).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, format!("{prefix}.order.paid.ord%2E1%20%3E%2A"));
    assert_eq!(seen[0].2["order_id"], "ord.1 >*");
    js.delete_stream(&stream).await.expect("delete the stream");
}

#[tokio::test]
async fn a_jetstream_republish_after_the_ack_is_dropped_as_a_duplicate() {
    let url = nats_url();
    if !reachable(&url, "a_jetstream_republish_after_the_ack_is_dropped_as_a_duplicate").await {
        return;
    }
    let _serial = SERIAL.lock().await;
    let (stream, prefix) = (unique("PAYHOOK_IT_"), unique("payhook-it-"));
    let js = create_stream(&url, &stream, &prefix).await;
    let sink_name = unique("nats-fp-");
    let subject = format!("{prefix}.{{order_id}}");
    let app = TestApp::spawn_with(|s, _| s.sinks.push(nats_sink(&sink_name, &url, &subject))).await;
    paid_order(&app, "ord_fp").await;
    let t = now_ms();
    {
        let _fp = Failpoint::set("dispatcher::after_sink_2xx", &sink_name);
        let pass = app.running.dispatcher.run_once(t).await.expect("dispatch");
        assert_eq!(pass.delivered, 0, "the ack was not recorded: {pass:?}");
    }
    assert_eq!(
        rows(&app, &sink_name).await[0].status,
        payhook_store::OutboxStatus::Pending,
        "still leased, not delivered"
    );
    let pass = app.running.dispatcher.run_until_idle(t + 3_600_000).await.expect("dispatch");
    assert_eq!(pass.delivered, 1, "the re-publish is acknowledged: {pass:?}");
    let seen = stream_messages(&js, &stream).await;
    assert_once_per_order(&rows(&app, &sink_name).await, &seen, 1);
    let (_, metrics) = app.get_text_authorized("/metrics").await;
    let line = format!("payhook_broker_published_total{{sink=\"{sink_name}\",outcome=\"duplicate\"}} 1");
    assert!(metrics.contains(&line), "JetStream reported the duplicate: {line} not in the metrics");
    js.delete_stream(&stream).await.expect("delete the stream");
}

#[tokio::test]
async fn every_order_paid_reaches_the_redis_stream_once_per_order() {
    let url = redis_url();
    if !reachable(&url, "every_order_paid_reaches_the_redis_stream_once_per_order").await {
        return;
    }
    let prefix = unique("payhook-it-");
    let app = TestApp::spawn_with(|s, _| s.sinks.push(redis_sink("events", &url, &format!("{prefix}:{{kind}}")))).await;
    for i in 0..6 {
        paid_order(&app, &format!("ord_r{i}")).await;
    }
    let pass = app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(pass.delivered, 6, "{pass:?}");
    let seen = redis_entries(&url, &format!("{prefix}:order.paid")).await;
    assert!(seen.iter().all(|(_, kind, _)| kind == "order.paid"), "{seen:?}");
    let seen: Vec<_> = seen.into_iter().map(|(id, kind, payload)| (kind, id, payload)).collect();
    assert_once_per_order(&rows(&app, "events").await, &seen, 6);
    redis_delete(&url, &format!("{prefix}*")).await;
}

/// Row N of order `ord_c` is remembered by the script under a key of its own; an order named
/// `ord_c:payhook-id:N` used to render that very key as its stream, so one of the two rows was lost: taken for a
/// re-publish (never added), or refused (its stream key held the other's id). Both are added, each to its stream.
#[tokio::test]
async fn a_redis_order_id_shaped_like_the_scripts_key_is_published_not_swallowed() {
    let url = redis_url();
    if !reachable(&url, "a_redis_order_id_shaped_like_the_scripts_key_is_published_not_swallowed").await {
        return;
    }
    let prefix = unique("payhook-it-");
    let app =
        TestApp::spawn_with(|s, _| s.sinks.push(redis_sink("events", &url, &format!("{prefix}:{{order_id}}")))).await;
    paid_order(&app, "ord_c").await;
    let first = rows(&app, "events").await.remove(0).id;
    let shaped = format!("ord_c:payhook-id:{first}");
    paid_order(&app, &shaped).await;
    let pass = app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(pass.delivered, 2, "{pass:?}");
    let plain = redis_entries(&url, &format!("{prefix}:ord_c")).await;
    assert_eq!(plain.iter().map(|(id, _, _)| id.clone()).collect::<Vec<_>>(), [first.to_string()], "{plain:?}");
    let escaped = redis_entries(&url, &format!("{prefix}:ord_c%3Apayhook-id%3A{first}")).await;
    assert_eq!(escaped.len(), 1, "{escaped:?}");
    assert_eq!(escaped[0].2["order_id"], shaped.as_str());
    let all_rows = rows(&app, "events").await;
    assert!(all_rows.iter().all(|r| r.status == payhook_store::OutboxStatus::Delivered), "{all_rows:?}");
    redis_delete(&url, &format!("{prefix}*")).await;
    redis_delete(&url, &format!("#payhook-id:{prefix}*")).await;
}

#[tokio::test]
async fn a_redis_republish_after_the_ack_is_dropped_by_the_script() {
    let url = redis_url();
    if !reachable(&url, "a_redis_republish_after_the_ack_is_dropped_by_the_script").await {
        return;
    }
    let _serial = SERIAL.lock().await;
    let (prefix, sink_name) = (unique("payhook-it-"), unique("redis-fp-"));
    let app = TestApp::spawn_with(|s, _| s.sinks.push(redis_sink(&sink_name, &url, &prefix))).await;
    paid_order(&app, "ord_fp").await;
    let t = now_ms();
    {
        let _fp = Failpoint::set("dispatcher::after_sink_2xx", &sink_name);
        let pass = app.running.dispatcher.run_once(t).await.expect("dispatch");
        assert_eq!(pass.delivered, 0, "the ack was not recorded: {pass:?}");
    }
    assert_eq!(redis_entries(&url, &prefix).await.len(), 1, "the first publish was added");
    let pass = app.running.dispatcher.run_until_idle(t + 3_600_000).await.expect("dispatch");
    assert_eq!(pass.delivered, 1, "the re-publish is acknowledged: {pass:?}");
    let seen: Vec<_> = redis_entries(&url, &prefix).await.into_iter().map(|(id, k, p)| (k, id, p)).collect();
    assert_once_per_order(&rows(&app, &sink_name).await, &seen, 1);
    let (_, metrics) = app.get_text_authorized("/metrics").await;
    let line = format!("payhook_broker_published_total{{sink=\"{sink_name}\",outcome=\"duplicate\"}} 1");
    assert!(metrics.contains(&line), "the script reported the duplicate: {line} not in the metrics");
    redis_delete(&url, &format!("{prefix}*")).await;
}

/// Nothing listens on port 1 of the loopback: a broker that is down.
#[tokio::test]
async fn a_broker_that_is_down_leaves_rows_pending_then_dead_with_an_alert() {
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(nats_sink("nats-down", "nats://user:n4ts-PLANTED@127.0.0.1:1", "payhook.{order_id}"));
        s.sinks.push(redis_sink("redis-down", "redis://:r3dis-PLANTED@127.0.0.1:1", "payhook"));
        s.sinks.push(crate::brokers_amqp::amqp_sink("amqp-down", "amqp://guest:amqp-PLANTED@127.0.0.1:1/%2f", "k"));
        s.dispatcher.retry = RetryPolicy { base_ms: 1_000, factor: 2, cap_ms: 60_000, jitter: 0.0, max_attempts: 2 };
        s.alerts = Some(AlertSettings {
            url: SecretUrl::parse("http://127.0.0.1:1/alerts").unwrap(),
            window_ms: 300_000,
            gather_ms: 0,
            verification_failures: 100,
            timeout_ms: 1_000,
        });
    })
    .await;
    paid_order(&app, "ord_down").await;
    let t = now_ms();
    app.running.dispatcher.run_once(t).await.expect("dispatch");
    for sink in ["nats-down", "redis-down", "amqp-down"] {
        let row = rows(&app, sink).await.remove(0);
        assert_eq!((row.status.as_str(), row.attempts), ("pending", 1), "{row:?}");
        let error = row.last_error.unwrap_or_default();
        assert!(error.contains("cannot connect to") && error.contains("127.0.0.1:1"), "{error}");
        assert!(!error.contains("PLANTED"), "the password leaked: {error}");
    }
    app.running.dispatcher.run_once(t + 60_000).await.expect("dispatch");
    for sink in ["nats-down", "redis-down", "amqp-down"] {
        let row = rows(&app, sink).await.remove(0);
        assert_eq!((row.status.as_str(), row.attempts), ("dead", 2), "{row:?}");
        assert!(row.last_error.as_deref().is_some_and(|e| e.contains("budget spent")), "{row:?}");
    }
    let alerts = rows(&app, "_alerts").await;
    assert!(!alerts.is_empty(), "the dead rows raised an alert");
    assert!(alerts.iter().all(|a| !a.payload.to_string().contains("PLANTED")), "{alerts:?}");
}
