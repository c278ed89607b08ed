//! Per-key order at a real HTTP sink that fails about 30 % of attempts at random and answers in up to 20 ms,
//! eight requests in flight: every order's `order.paid` arrives before its `order.refunded`, a dead row holds its
//! order's refund until it is retried through the API, and `ordering = "none"` does not wait. And a sink's rate.

use crate::helpers::{API_TOKEN, TestApp, event};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use payhook_core::event::OrderAction::{Pay, Refund};
use payhook_core::retry::RetryPolicy;
use payhook_server::settings::SinkSettings;
use payhook_server::{SecretUrl, SinkRate};
use payhook_store::{KeyOrder, OutboxFilter, Store};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the flaky sink saw: (order id, kind, the status it answered), in arrival order.
#[derive(Default)]
struct Flaky {
    seen: Mutex<Vec<(String, String, u16)>>,
    /// (order id, kind) answered 410 (permanent) while listed.
    refused: Mutex<HashSet<(String, String)>>,
    /// Never fails at random.
    reliable: std::sync::atomic::AtomicBool,
}

async fn answer(State(flaky): State<Arc<Flaky>>, body: axum::body::Bytes) -> StatusCode {
    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=20))).await;
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let (order, kind) = (doc["order_id"].as_str().unwrap().to_owned(), doc["kind"].as_str().unwrap().to_owned());
    let status = if flaky.refused.lock().unwrap().contains(&(order.clone(), kind.clone())) {
        StatusCode::GONE
    } else if !flaky.reliable.load(std::sync::atomic::Ordering::Relaxed) && fastrand::f64() < 0.3 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    flaky.seen.lock().unwrap().push((order, kind, status.as_u16()));
    status
}

async fn flaky_sink() -> (String, Arc<Flaky>) {
    let flaky = Arc::new(Flaky::default());
    let app = Router::new().route("/{*path}", post(answer)).with_state(Arc::clone(&flaky));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/shop", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, flaky)
}

async fn app_with(url: &str, order: KeyOrder) -> TestApp {
    app_rated(url, order, None).await
}

async fn app_rated(url: &str, order: KeyOrder, rate: Option<SinkRate>) -> TestApp {
    TestApp::spawn_with(|s, _| {
        s.sinks.push(SinkSettings {
            name: "shop".into(),
            url: SecretUrl::parse(url).unwrap(),
            kinds: vec!["order.paid".into(), "order.refunded".into()],
            signer: None,
            timeout_ms: 2_000,
            max_in_flight: 8,
            transport: payhook_server::SinkTransport::Http,
            order,
            rate,
            filter: Default::default(),
        });
        // Retries 10 ms to 80 ms later: each pass below moves the clock past any of them.
        s.dispatcher.retry = RetryPolicy { base_ms: 10, factor: 2, cap_ms: 80, jitter: 0.0, max_attempts: 1_000 };
    })
    .await
}

/// Orders `ord_0`… registered, paid, then refunded, `n` of them.
async fn paid_then_refunded(app: &TestApp, n: usize) {
    for i in 0..n {
        app.register_order(&format!("ord_{i}"), 100, "usd").await;
    }
    for action in [Pay, Refund] {
        for i in 0..n {
            let (order, id) = (format!("ord_{i}"), format!("evt_{i}_{action:?}"));
            let (status, answer) = app.deliver("payments", &event(&id, action, &order, 100)).await;
            assert_eq!((status.as_u16(), answer["status"].as_str()), (200, Some("processed")), "{answer}");
        }
    }
}

/// Dispatcher passes, the clock 100 ms further each time, until the sink has acknowledged `rows` rows.
async fn pass_until_delivered(app: &TestApp, flaky: &Flaky, rows: usize) {
    for _ in 0..2_000 {
        let acknowledged = flaky.seen.lock().unwrap().iter().filter(|s| s.2 == 200).count();
        if acknowledged >= rows {
            return;
        }
        app.running.dispatcher.run_once(app.clock.advance(100)).await.expect("dispatch");
    }
    panic!("the sink acknowledged too few rows: {:?}", flaky.seen.lock().unwrap());
}

/// Orders whose first `order.refunded` request reached the sink before its `order.paid` was acknowledged.
fn refunded_before_paid(seen: &[(String, String, u16)], orders: usize) -> Vec<String> {
    (0..orders)
        .map(|i| format!("ord_{i}"))
        .filter(|order| {
            let of: Vec<&(String, String, u16)> = seen.iter().filter(|s| &s.0 == order).collect();
            let paid = of.iter().position(|s| s.1 == "order.paid" && s.2 == 200);
            let refund = of.iter().position(|s| s.1 == "order.refunded");
            match (paid, refund) {
                (Some(paid), Some(refund)) => refund < paid,
                _ => true,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_random_failures_with_eight_in_flight_every_order_arrives_paid_then_refunded() {
    let (url, flaky) = flaky_sink().await;
    let app = app_with(&url, KeyOrder::Hold).await;
    paid_then_refunded(&app, 40).await;
    pass_until_delivered(&app, &flaky, 80).await;
    let seen = flaky.seen.lock().unwrap().clone();
    assert!(seen.iter().any(|s| s.2 == 503), "the sink failed some attempts");
    assert_eq!(refunded_before_paid(&seen, 40), Vec::<String>::new(), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unordered_a_refund_can_arrive_before_its_payment() {
    let (url, flaky) = flaky_sink().await;
    let app = app_with(&url, KeyOrder::Unordered).await;
    // Every payment fails its first attempt for certain: each refund then goes out while its payment backs off.
    for i in 0..4 {
        flaky.refused.lock().unwrap().insert((format!("ord_{i}"), "order.paid".into()));
    }
    paid_then_refunded(&app, 4).await;
    app.running.dispatcher.run_once(app.clock.advance(100)).await.expect("dispatch");
    let seen = flaky.seen.lock().unwrap().clone();
    assert_eq!(refunded_before_paid(&seen, 4).len(), 4, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_payment_holds_its_refund_until_it_is_retried_through_the_api() {
    let (url, flaky) = flaky_sink().await;
    let app = app_with(&url, KeyOrder::Hold).await;
    let held = ("ord_0".to_owned(), "order.paid".to_owned());
    flaky.refused.lock().unwrap().insert(held.clone());
    paid_then_refunded(&app, 20).await;
    // Every row but the dead payment and the refund behind it.
    pass_until_delivered(&app, &flaky, 38).await;
    for _ in 0..20 {
        app.running.dispatcher.run_once(app.clock.advance(100)).await.expect("dispatch");
    }
    let seen = flaky.seen.lock().unwrap().clone();
    assert!(!seen.iter().any(|s| s.0 == "ord_0" && s.1 == "order.refunded"), "the refund was held: {seen:?}");
    let metrics = app.client.get(app.url("/metrics")).bearer_auth(API_TOKEN).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(metrics.contains("payhook_outbox_held_rows{sink=\"shop\"} 1"), "{metrics}");
    let age = metrics.lines().find_map(|l| l.strip_prefix("payhook_outbox_oldest_held_age_seconds{sink=\"shop\"} "));
    // At least the 20 passes of 100 ms since the refund was written.
    assert!(age.and_then(|a| a.parse::<u64>().ok()).is_some_and(|a| a >= 2), "{metrics}");

    flaky.refused.lock().unwrap().remove(&held);
    let filter = OutboxFilter { sink: Some("shop".into()), limit: 100, ..OutboxFilter::default() };
    let dead: Vec<i64> = app
        .store
        .list_outbox(filter)
        .await
        .unwrap()
        .rows
        .iter()
        .filter(|r| r.status.as_str() == "dead")
        .map(|r| r.id)
        .collect();
    assert_eq!(dead.len(), 1, "only the refused payment died");
    let reply = app.api_post(&format!("/v1/outbox/{}/retry", dead[0]), String::new()).await;
    assert!(reply.status.is_success(), "{}", reply.json);
    pass_until_delivered(&app, &flaky, 40).await;
    let seen = flaky.seen.lock().unwrap().clone();
    assert_eq!(refunded_before_paid(&seen, 20), Vec::<String>::new(), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_with_a_rate_gets_its_burst_then_one_attempt_per_interval() {
    let (url, flaky) = flaky_sink().await;
    flaky.reliable.store(true, std::sync::atomic::Ordering::Relaxed);
    let app = app_rated(&url, KeyOrder::Hold, Some(SinkRate { per_second: 4.0, burst: 3 })).await;
    paid_then_refunded(&app, 10).await;
    let dispatcher = &app.running.dispatcher;
    let now = app.clock.advance(1);
    assert_eq!(dispatcher.run_once(now).await.unwrap().delivered, 3, "the burst, though 8 may be in flight");
    assert_eq!(dispatcher.run_once(now).await.unwrap().delivered, 0, "the bucket is empty");
    assert_eq!(dispatcher.run_once(app.clock.advance(249)).await.unwrap().delivered, 0, "before the next token");
    assert_eq!(dispatcher.run_once(app.clock.advance(1)).await.unwrap().delivered, 1, "one token per 250 ms");
    assert_eq!(dispatcher.run_once(app.clock.advance(500)).await.unwrap().delivered, 2);
    // Sixteen more tokens, 250 ms apart, for the fourteen rows left.
    let mut delivered = 6;
    for _ in 0..16 {
        delivered += dispatcher.run_once(app.clock.advance(250)).await.unwrap().delivered;
    }
    assert_eq!(delivered, 20);
    assert_eq!(flaky.seen.lock().unwrap().len(), 20);
}
