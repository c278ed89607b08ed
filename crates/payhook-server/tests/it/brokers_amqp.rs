//! RabbitMQ sinks against the real broker (`PAYHOOK_TEST_AMQP_URL`, default `amqp://guest:guest@127.0.0.1:5672/%2f`):
//! every `order.paid` once per order, persistent and with `message_id` = the outbox id; a re-publish after the
//! broker's ack (a dispatcher that died before recording it) arrives again with the same `message_id`, as AMQP
//! cannot drop it; an order id fills one routing word, escaped; an unroutable message is returned and is a failed
//! attempt, not a delivery.
//!
//! Skipped with a message when RabbitMQ is unreachable, unless `PAYHOOK_TEST_BROKERS=1`.

use crate::brokers::{paid_order, reachable, rows, unique};
use crate::failpoints::{Failpoint, SERIAL};
use crate::helpers::TestApp;
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use payhook_server::settings::SinkSettings;
use payhook_server::{SecretUrl, SinkTransport, now_ms};
use std::collections::BTreeSet;

/// Taken for reading by every RabbitMQ test, for writing by the one that stops the broker.
pub(crate) static BROKER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

pub(crate) fn amqp_url() -> String {
    std::env::var("PAYHOOK_TEST_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

pub(crate) fn amqp_sink(name: &str, url: &str, routing_key: &str) -> SinkSettings {
    SinkSettings {
        name: name.to_owned(),
        url: SecretUrl::parse_broker(url, SinkTransport::AMQP_SCHEMES).unwrap(),
        kinds: vec!["order.paid".into()],
        signer: None,
        timeout_ms: 3_000,
        max_in_flight: 4,
        transport: SinkTransport::Amqp { exchange: String::new(), routing_key: routing_key.to_owned() },
        order: payhook_store::KeyOrder::default(),
        rate: None,
        filter: Default::default(),
    }
}

/// A durable queue of this test's own on the default exchange (routed by its name), and the connection and channel
/// that read it.
pub(crate) async fn declare_queue(url: &str, name: &str) -> (lapin::Connection, lapin::Channel) {
    let connection =
        lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await.expect("connect to RabbitMQ");
    let channel = connection.create_channel().await.expect("channel");
    let options = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    channel.queue_declare(name.into(), options, Default::default()).await.expect("declare the queue");
    (connection, channel)
}

/// Every message of the queue: (message_id, delivery mode, payload), taken off it.
pub(crate) async fn drain(channel: &lapin::Channel, queue: &str) -> Vec<(String, u8, serde_json::Value)> {
    let mut out = Vec::new();
    while let Some(m) = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.expect("basic.get") {
        let p = &m.delivery.properties;
        let id = p.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
        let mode = p.delivery_mode().unwrap_or(0);
        out.push((id, mode, serde_json::from_slice(&m.delivery.data).expect("JSON payload")));
    }
    channel.queue_delete(queue.into(), QueueDeleteOptions::default()).await.expect("delete the queue");
    out
}

#[tokio::test]
async fn every_order_paid_reaches_the_rabbitmq_queue_once_per_order_persistent_and_with_its_id() {
    let url = amqp_url();
    // Taken before the check: the restart test holds it for writing while RabbitMQ is down.
    let _broker = BROKER.read().await;
    if !reachable(&url, "every_order_paid_reaches_the_rabbitmq_queue_once_per_order").await {
        return;
    }
    let queue = unique("payhook-it-");
    let (_connection, channel) = declare_queue(&url, &queue).await;
    let app = TestApp::spawn_with(|s, _| s.sinks.push(amqp_sink("events", &url, &queue))).await;
    for i in 0..6 {
        paid_order(&app, &format!("ord_a{i}")).await;
    }
    let pass = app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(pass.delivered, 6, "{pass:?}");
    let seen = drain(&channel, &queue).await;
    assert_eq!(seen.len(), 6, "one message per order: {seen:?}");
    assert!(seen.iter().all(|(_, mode, _)| *mode == 2), "persistent messages: {seen:?}");
    let ids: BTreeSet<&str> = seen.iter().map(|(id, _, _)| id.as_str()).collect();
    let orders: BTreeSet<&str> = seen.iter().filter_map(|(_, _, p)| p["order_id"].as_str()).collect();
    assert_eq!((ids.len(), orders.len()), (6, 6), "{seen:?}");
    for row in rows(&app, "events").await {
        assert_eq!(row.status, payhook_store::OutboxStatus::Delivered, "{row:?}");
        assert!(ids.contains(row.id.to_string().as_str()), "row {} is not in the queue", row.id);
    }
}

#[tokio::test]
async fn a_rabbitmq_republish_after_the_ack_carries_the_same_message_id() {
    let url = amqp_url();
    let _serial = SERIAL.lock().await;
    let _broker = BROKER.read().await;
    if !reachable(&url, "a_rabbitmq_republish_after_the_ack_carries_the_same_message_id").await {
        return;
    }
    let (queue, sink_name) = (unique("payhook-it-"), unique("amqp-fp-"));
    let (_connection, channel) = declare_queue(&url, &queue).await;
    let app = TestApp::spawn_with(|s, _| s.sinks.push(amqp_sink(&sink_name, &url, &queue))).await;
    paid_order(&app, "ord_fp").await;
    let t = now_ms();
    {
        let _fp = Failpoint::set("dispatcher::after_sink_2xx", &sink_name);
        let pass = app.running.dispatcher.run_once(t).await.expect("dispatch");
        assert_eq!(pass.delivered, 0, "the ack was not recorded: {pass:?}");
    }
    let pass = app.running.dispatcher.run_until_idle(t + 3_600_000).await.expect("dispatch");
    assert_eq!(pass.delivered, 1, "the re-publish is acknowledged: {pass:?}");
    let seen = drain(&channel, &queue).await;
    let row = rows(&app, &sink_name).await.remove(0);
    assert_eq!(seen.len(), 2, "AMQP cannot drop the copy: {seen:?}");
    assert_eq!(seen[0], seen[1], "the copy is the same message");
    assert_eq!((seen[0].0.as_str(), row.status.as_str()), (row.id.to_string().as_str(), "delivered"));
}

/// An order id holding the routing key's word separator and a wildcard fills one word, escaped: on the default
/// exchange it reaches the queue named by the escaped key.
#[tokio::test]
async fn an_order_id_with_dots_is_one_escaped_routing_word() {
    let url = amqp_url();
    // Taken before the check: the restart test holds it for writing while RabbitMQ is down.
    let _broker = BROKER.read().await;
    if !reachable(&url, "an_order_id_with_dots_is_one_escaped_routing_word").await {
        return;
    }
    let prefix = unique("payhook-it-");
    let queue = format!("{prefix}.ord%2E1%2A%23");
    let (_connection, channel) = declare_queue(&url, &queue).await;
    let app =
        TestApp::spawn_with(|s, _| s.sinks.push(amqp_sink("events", &url, &format!("{prefix}.{{order_id}}")))).await;
    paid_order(&app, "ord.1*#").await;
    let pass = app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(pass.delivered, 1, "{pass:?}");
    let seen = drain(&channel, &queue).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].2["order_id"], "ord.1*#");
}

#[tokio::test]
async fn an_unroutable_rabbitmq_message_is_returned_and_retried_not_delivered() {
    let url = amqp_url();
    // Taken before the check: the restart test holds it for writing while RabbitMQ is down.
    let _broker = BROKER.read().await;
    if !reachable(&url, "an_unroutable_rabbitmq_message_is_returned_and_retried_not_delivered").await {
        return;
    }
    let nowhere = unique("payhook-it-unbound-");
    let app = TestApp::spawn_with(|s, _| s.sinks.push(amqp_sink("nowhere", &url, &nowhere))).await;
    paid_order(&app, "ord_u").await;
    let pass = app.running.dispatcher.run_once(now_ms()).await.expect("dispatch");
    assert_eq!((pass.delivered, pass.retried), (0, 1), "{pass:?}");
    let row = rows(&app, "nowhere").await.remove(0);
    assert_eq!((row.status.as_str(), row.attempts), ("pending", 1), "{row:?}");
    let error = row.last_error.unwrap_or_default();
    assert!(error.contains("returned") && !error.contains("guest:guest"), "{error}");
}
