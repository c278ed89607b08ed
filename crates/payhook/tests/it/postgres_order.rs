//! Per-key order across three `payhook serve` processes on one PostgreSQL database, delivering to one sink that
//! fails about 30 % of attempts at random and answers in up to 20 ms, eight requests in flight per instance:
//! every order's `order.paid` arrives before its `order.refunded`, and a dead payment holds its order's refund
//! until an operator retries it through another instance's API.

use crate::helpers::*;
use crate::postgres::{PgServer, TestDb, event, test_url, until_acked};
use payhook_core::event::OrderAction;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ORDERS: usize = 30;
/// The order whose payment the sink refuses (410) until the test lets it through.
const HELD: &str = "pgo-held";

/// What the sink answered, in order: (order id, kind, status).
type Log = Arc<Mutex<Vec<(String, String, u16)>>>;

fn acknowledged(log: &Log) -> usize {
    log.lock().unwrap().iter().filter(|s| s.2 == 200).count()
}

async fn until(what: &str, log: &Log, done: impl Fn(&[(String, String, u16)]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(&log.lock().unwrap()) {
        assert!(Instant::now() < deadline, "{what}: {:?}", log.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Orders whose first `order.refunded` request came before their `order.paid` was acknowledged.
fn out_of_order(log: &[(String, String, u16)], orders: &[String]) -> Vec<String> {
    let mut late = Vec::new();
    for order in orders {
        let of: Vec<&(String, String, u16)> = log.iter().filter(|s| &s.0 == order).collect();
        let paid = of.iter().position(|s| s.1 == "order.paid" && s.2 == 200);
        let refund = of.iter().position(|s| s.1 == "order.refunded");
        if !matches!((paid, refund), (Some(p), Some(r)) if p < r) {
            late.push(order.clone());
        }
    }
    late
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_deliver_each_orders_payment_before_its_refund_and_hold_a_dead_payments_refund() {
    let Some(admin) = test_url() else { return };
    let db = TestDb::schema(&admin).await;
    let dir = TestDir::new();
    let log: Log = Arc::default();
    let refused = Arc::new(Mutex::new(HashSet::from([(HELD.to_owned(), "order.paid".to_owned())])));
    let sink = {
        let (log, refused) = (Arc::clone(&log), Arc::clone(&refused));
        Recorder::answering(move |body| {
            let doc: serde_json::Value = serde_json::from_slice(body).unwrap();
            let (order, kind) =
                (doc["order_id"].as_str().unwrap().to_owned(), doc["kind"].as_str().unwrap().to_owned());
            let status = if refused.lock().unwrap().contains(&(order.clone(), kind.clone())) {
                410
            } else if fastrand::f64() < 0.3 {
                503
            } else {
                200
            };
            log.lock().unwrap().push((order, kind, status));
            (status, fastrand::u64(0..=20))
        })
        .await
    };
    let extra = format!(
        r#"
[dispatcher]
poll_interval_ms = 20

[dispatcher.retry]
base_ms = 10
cap_ms = 80
jitter = 0.0
max_attempts = 1000

[[sinks]]
name = "shop"
url = "http://{}/shop"
kinds = ["order.paid", "order.refunded"]
max_in_flight = 8
"#,
        sink.addr
    );
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(PgServer::start_with(&dir, &db.url, &extra).await);
    }
    let mut orders: Vec<String> = (0..ORDERS).map(|i| format!("pgo-{i}")).collect();
    orders.push(HELD.to_owned());
    for order in &orders {
        assert_eq!(servers[fastrand::usize(..3)].register_order(order).await, reqwest::StatusCode::CREATED);
    }
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    for (action, name) in [(OrderAction::Pay, "pay"), (OrderAction::Refund, "refund")] {
        for order in &orders {
            let d = Arc::new(event(&format!("evt-{order}-{name}"), action, order));
            let url = servers[fastrand::usize(..3)].webhook_url();
            assert_eq!(until_acked(client.clone(), url, d).await, "processed");
        }
    }

    // Every row but the refused payment and the refund behind it; then a while longer, and still no refund.
    until("every other row acknowledged", &log, |l| l.iter().filter(|s| s.2 == 200).count() >= 2 * ORDERS).await;
    until("the payment refused", &log, |l| l.iter().any(|s| s.0 == HELD && s.2 == 410)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!log.lock().unwrap().iter().any(|s| s.0 == HELD && s.1 == "order.refunded"), "the refund was held");
    assert_eq!(acknowledged(&log), 2 * ORDERS);

    refused.lock().unwrap().clear();
    let dead = client
        .get(servers[0].url("/v1/outbox?status=dead"))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    let rows = dead["outbox"].as_array().unwrap_or_else(|| panic!("{dead}"));
    assert_eq!(rows.len(), 1, "{dead}");
    let id = rows[0]["id"].as_i64().unwrap_or_else(|| panic!("{dead}"));
    let retried =
        client.post(servers[1].url(&format!("/v1/outbox/{id}/retry"))).bearer_auth(API_TOKEN).send().await.unwrap();
    assert!(retried.status().is_success(), "{retried:?}");
    until("the held order acknowledged", &log, |l| l.iter().filter(|s| s.2 == 200).count() >= 2 * orders.len()).await;

    assert_eq!(out_of_order(&log.lock().unwrap(), &orders), Vec::<String>::new(), "{:?}", log.lock().unwrap());
    for server in servers {
        let server_log = server.log();
        assert!(!server_log.contains("panicked"), "{server_log}");
        server.stop();
    }
}
