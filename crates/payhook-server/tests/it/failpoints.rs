//! Named failpoints (`fail` crate, compiled in by the `failpoints` features this crate's dev-dependencies turn on):
//! a fault at each step between a delivery's arrival and its answer, and between a sink's 2xx and its record,
//! ends in a clean retry or at most a repeated delivery under the same key — never a lost acknowledged event, never
//! a double effect. Every test ends with the invariant checker; the control run shows the checker sees loss.
//!
//! The failpoint registry is global to the process: these tests take [`SERIAL`] and scope each point to their own
//! database (or sink), so the other tests of this binary, running at the same time, are never touched.

use crate::helpers::{Reply, TestApp, event, now_secs};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use payhook_core::event::OrderAction::Pay;
use payhook_server::now_ms;
use payhook_server::settings::SinkSettings;
use payhook_store::checker::{self, Acked, Evidence, SinkReceipt};
use payhook_store::{OutboxFilter, Store};
use reqwest::StatusCode;
use serde_json::json;
use std::sync::{Arc, Mutex};

pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A failpoint set to fire for one scope (a database's temp dir, a sink's address) until dropped.
pub(crate) struct Failpoint(&'static str);

impl Failpoint {
    pub(crate) fn set(name: &'static str, scope: &str) -> Self {
        fail::cfg(name, &format!("return({scope})")).expect("failpoint configuration");
        Self(name)
    }
}

impl Drop for Failpoint {
    fn drop(&mut self) {
        fail::remove(self.0);
    }
}

/// The app's own scope: the name of its temp dir, part of its database's path.
fn scope(app: &TestApp) -> String {
    let dir = app.db_path.parent().and_then(|d| d.file_name()).expect("temp dir name");
    dir.to_string_lossy().into_owned()
}

fn assert_retry_later(reply: &Reply, point: &str) {
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{point}: {}", reply.json);
    assert!(reply.headers.contains_key("retry-after"), "{point}: no Retry-After");
}

async fn check(app: &TestApp, acked: &[&str], sink: Option<Vec<SinkReceipt>>) {
    let acked = acked.iter().map(|id| Acked::new("payments", *id)).collect();
    if let Err(v) = checker::check(&*app.store, &Evidence { acked, sink }).await {
        panic!("{v}");
    }
}

/// A failure inside the delivery's savepoint rolls back everything of it; the provider's retry applies it once.
async fn fault_rolls_back_the_delivery_and_the_retry_applies_it_once(point: &'static str) {
    let _serial = SERIAL.lock().await;
    let app = TestApp::spawn().await;
    app.register_order("ord_fp", 100, "usd").await;
    let body = app.encode("payments", &event("evt_fp", Pay, "ord_fp", 100));
    let headers = app.sign("payments", &body, now_secs());
    {
        let _fp = Failpoint::set(point, &scope(&app));
        let reply = app.post_raw("payments", &headers, body.clone()).await;
        assert_retry_later(&reply, point);
    }
    assert!(app.event("payments", "evt_fp").await.is_none(), "{point}: nothing of the event is stored");
    let order = app.order("ord_fp").await;
    assert_eq!((&order["status"], &order["history"], &order["outbox"]), (&json!("pending"), &json!([]), &json!([])));

    let reply = app.post_raw("payments", &headers, body.clone()).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("processed")), "{point}");
    let reply = app.post_raw("payments", &headers, body).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("duplicate")), "{point}");
    assert_eq!(app.receipts("ord_fp").await, 1, "{point}");
    check(&app, &["evt_fp"], None).await;
}

#[tokio::test]
async fn a_fault_after_the_inbox_insert_rolls_back_and_the_retry_applies_once() {
    fault_rolls_back_the_delivery_and_the_retry_applies_it_once("sqlite::after_inbox_insert").await;
}

#[tokio::test]
async fn a_fault_after_the_ledger_update_rolls_back_and_the_retry_applies_once() {
    fault_rolls_back_the_delivery_and_the_retry_applies_it_once("sqlite::after_ledger_update").await;
}

#[tokio::test]
async fn a_fault_in_the_outbox_insert_rolls_back_and_the_retry_applies_once() {
    fault_rolls_back_the_delivery_and_the_retry_applies_it_once("sqlite::outbox_insert").await;
}

/// The work is stored but the answer is lost (a crash after the commit, or a failed fdatasync): the provider
/// retries and gets `duplicate`; the effect exists once.
async fn lost_answer_is_retried_as_a_duplicate(point: &'static str) {
    let _serial = SERIAL.lock().await;
    let app = TestApp::spawn().await;
    app.register_order("ord_fp", 100, "usd").await;
    let body = app.encode("payments", &event("evt_fp", Pay, "ord_fp", 100));
    let headers = app.sign("payments", &body, now_secs());
    {
        let _fp = Failpoint::set(point, &scope(&app));
        let reply = app.post_raw("payments", &headers, body.clone()).await;
        assert_retry_later(&reply, point);
    }
    let reply = app.post_raw("payments", &headers, body).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("duplicate")), "{point}");
    assert_eq!(app.order("ord_fp").await["status"], "paid", "{point}");
    assert_eq!(app.receipts("ord_fp").await, 1, "{point}");
    check(&app, &["evt_fp"], None).await;
}

#[tokio::test]
async fn a_crash_between_the_commit_and_the_answer_makes_the_retry_a_duplicate() {
    lost_answer_is_retried_as_a_duplicate("sqlite::after_commit").await;
}

#[tokio::test]
async fn a_failed_fdatasync_answers_503_and_the_retry_is_a_duplicate() {
    lost_answer_is_retried_as_a_duplicate("sqlite::fsync").await;
}

/// What the test sink received: (idempotency key, body).
#[derive(Default)]
struct Received(Mutex<Vec<SinkReceipt>>);

async fn receive(State(received): State<Arc<Received>>, headers: HeaderMap, body: axum::body::Bytes) -> &'static str {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    received.0.lock().unwrap().push(SinkReceipt { idempotency_key: key, payload: body.to_vec() });
    "ok"
}

#[tokio::test]
async fn a_dispatcher_dying_after_the_sinks_2xx_repeats_the_delivery_with_the_same_key_only() {
    let _serial = SERIAL.lock().await;
    let received = Arc::new(Received::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
    let addr = listener.local_addr().expect("sink addr");
    let app = Router::new().route("/shop", post(receive)).with_state(Arc::clone(&received));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://{addr}/shop");
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(SinkSettings {
            name: "shop".into(),
            url: payhook_server::SecretUrl::parse(&url).unwrap(),
            kinds: vec!["order.paid".into()],
            signer: None,
            timeout_ms: 2_000,
            max_in_flight: 4,
            transport: payhook_server::SinkTransport::Http,
            order: payhook_store::KeyOrder::default(),
            rate: None,
            filter: Default::default(),
        })
    })
    .await;
    app.register_order("ord_fp", 100, "usd").await;
    let (status, answer) = app.deliver("payments", &event("evt_fp", Pay, "ord_fp", 100)).await;
    assert_eq!((status.as_u16(), answer["status"].as_str()), (200, Some("processed")), "{answer}");

    let t = now_ms();
    {
        let _fp = Failpoint::set("dispatcher::after_sink_2xx", &addr.to_string());
        app.running.dispatcher.run_once(t).await.expect("dispatch");
    }
    assert_eq!(received.0.lock().unwrap().len(), 1, "the sink got it once");
    // Leased to the dispatcher that "died": nobody sends it again before the lease ends.
    app.running.dispatcher.run_once(t + 1_000).await.expect("dispatch");
    assert_eq!(received.0.lock().unwrap().len(), 1, "not again while leased");
    let pass = app.running.dispatcher.run_until_idle(t + 3_600_000).await.expect("dispatch");
    assert_eq!(pass.delivered, 1, "{pass:?}");

    let seen = received.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "at most a repeat");
    assert_eq!(seen[0], seen[1], "the repeat has the same key and the same payload");
    let rows = app.store.list_outbox(OutboxFilter { limit: 10, ..OutboxFilter::default() }).await.unwrap().rows;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].status.as_str(), rows[0].id.to_string()), ("delivered", seen[0].idempotency_key.clone()));
    check(&app, &["evt_fp"], Some(seen)).await;
}

/// The control run: a writer that answers 2xx before its commit and then loses the batch. If the checker did not
/// report these deliveries, every green run of it would prove nothing.
#[tokio::test]
async fn the_checker_reports_acknowledged_deliveries_that_a_writer_answering_before_commit_lost() {
    let _serial = SERIAL.lock().await;
    let app = TestApp::spawn().await;
    app.register_order("ord_kept", 100, "usd").await;
    let (_, answer) = app.deliver("payments", &event("evt_kept", Pay, "ord_kept", 100)).await;
    assert_eq!(answer["status"], "processed", "{answer}");
    let mut acked = vec!["evt_kept".to_owned()];
    for i in 0..3 {
        app.register_order(&format!("ord_lost{i}"), 100, "usd").await;
    }
    {
        let _fp = Failpoint::set("sqlite::answer_before_commit", &scope(&app));
        for i in 0..3 {
            let id = format!("evt_lost{i}");
            let (status, answer) = app.deliver("payments", &event(&id, Pay, &format!("ord_lost{i}"), 100)).await;
            assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("processed")), "{answer}");
            acked.push(id);
        }
    }
    let acked: Vec<Acked> = acked.iter().map(|id| Acked::new("payments", id.as_str())).collect();
    let violations = checker::check(&*app.store, &Evidence { acked, sink: None })
        .await
        .expect_err("the checker must see the lost deliveries");
    let lost: Vec<&str> = violations.lost().iter().map(|a| a.event_id.as_str()).collect();
    assert_eq!(lost, ["evt_lost0", "evt_lost1", "evt_lost2"], "{violations}");
}

/// While a commit waits for its `fdatasync`, the writer keeps its next transaction open and adds what arrives
/// meanwhile: deliveries that come one by one during a sync are committed together once it is done, not one commit
/// each (whose WAL frames would repeat the pages they share), and none is answered before its own commit is synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_arriving_during_an_fdatasync_share_the_next_commit() {
    let _serial = SERIAL.lock().await;
    let app = TestApp::spawn_with(|_, storage| storage.sync = payhook_sqlite::CommitSync::Pipelined).await;
    let app = Arc::new(app);
    let commits = || app.store.writer_metrics().batch_sizes.count();
    let before = commits();
    let stall = Failpoint::set("sqlite::fsync_stall", &scope(&app));
    let send = |id: String| {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            let body = app.encode("payments", &event(&id, Pay, &format!("ord_{id}"), 100));
            let headers = app.sign("payments", &body, now_secs());
            app.post_raw("payments", &headers, body).await
        })
    };
    // The first commits at once (the syncer was idle) and its sync stalls.
    let first = send("evt_share_0".into());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while commits() == before {
        assert!(std::time::Instant::now() < deadline, "the first delivery was never committed");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // The next five arrive one at a time, each after the writer has run the one before and found its queue empty.
    let mut rest = Vec::new();
    for i in 1..=5 {
        rest.push(send(format!("evt_share_{i}")));
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    }
    assert_eq!(commits(), before + 1, "a delivery was committed while the sync before it was still in flight");
    assert!(!first.is_finished(), "answered before its fdatasync");
    drop(stall);
    assert_eq!(first.await.expect("first").status, StatusCode::OK);
    for reply in rest {
        assert_eq!(reply.await.expect("delivery").status, StatusCode::OK);
    }
    let sizes = app.store.writer_metrics().batch_sizes;
    assert_eq!(sizes.count(), before + 2, "the five that came during the sync share one commit");
    check(&app, &["evt_share_0", "evt_share_1", "evt_share_2", "evt_share_3", "evt_share_4", "evt_share_5"], None)
        .await;
}

/// A syncer that is gone holds nothing open: the batch it had is answered 503 (stored, but not known to be durable),
/// and so is every later delivery, at once, rather than waiting in a transaction the writer keeps open for a
/// sync that will never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_syncer_is_gone_every_delivery_is_answered_503_at_once() {
    let _serial = SERIAL.lock().await;
    let app = TestApp::spawn_with(|_, storage| storage.sync = payhook_sqlite::CommitSync::Pipelined).await;
    let panic = Failpoint::set("sqlite::syncer_panic", &scope(&app));
    for id in ["evt_gone_0", "evt_gone_1", "evt_gone_2"] {
        let body = app.encode("payments", &event(id, Pay, &format!("ord_{id}"), 100));
        let headers = app.sign("payments", &body, now_secs());
        let reply = tokio::time::timeout(std::time::Duration::from_secs(5), app.post_raw("payments", &headers, body))
            .await
            .unwrap_or_else(|_| panic!("{id} was not answered: held for a syncer that is gone"));
        assert_retry_later(&reply, "syncer_panic");
    }
    drop(panic);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_wal_fsync_stalls_deliveries_are_shed_with_503_and_every_200_is_durable() {
    let _serial = SERIAL.lock().await;
    let app = TestApp::spawn_with(|_, storage| {
        storage.sync = payhook_sqlite::CommitSync::Pipelined;
        storage.queue_depth = 16;
        storage.batch_max = 4;
    })
    .await;
    let stall = Failpoint::set("sqlite::fsync_stall", &scope(&app));
    let ids: Vec<String> = (0..300).map(|i| format!("evt_stall_{i}")).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for id in &ids {
        let body = app.encode("payments", &event(id, Pay, &format!("ord_{id}"), 100));
        let headers = app.sign("payments", &body, now_secs());
        let (client, url, id) = (app.client.clone(), app.url("/webhooks/payments"), id.clone());
        tasks.spawn(async move {
            let mut req = client.post(url).body(body);
            for (k, v) in &headers {
                req = req.header(k.as_str(), v.as_str());
            }
            (id, crate::helpers::read_json(req.send().await.expect("POST")).await, std::time::Instant::now())
        });
    }
    // The disk does not answer: nothing can be acknowledged, and the queue in front of the stopped writer fills, so
    // the rest is refused at once rather than left waiting (a writer that kept handing batches to the syncer would
    // keep draining its queue, and nobody would be answered until the disk came back).
    let stalled_at = std::time::Instant::now();
    let mut answered = Vec::new();
    // At most (1 + 8 + 1) batches of 4 wait on the disk, the writer holds one more, and 16 wait in the queue.
    while answered.len() < ids.len() - 100 {
        let joined = tokio::time::timeout(std::time::Duration::from_secs(10), tasks.join_next())
            .await
            .expect("requests are answered while the fsync stalls")
            .expect("a task is left");
        answered.push(joined.expect("request task"));
    }
    let during = stalled_at.elapsed();
    for (id, reply, _) in &answered {
        assert_retry_later(reply, "fsync_stall");
        assert_eq!(reply.json["error"], "overloaded", "{id}: {}", reply.json);
    }
    eprintln!("{} deliveries shed with 503 within {during:?} of a stalled fsync", answered.len());

    drop(stall);
    let mut acked = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (id, reply, _) = joined.expect("request task");
        if reply.status == StatusCode::OK {
            acked.push(id);
        } else {
            assert_eq!(reply.json["error"], "overloaded", "{id}: {}", reply.json);
        }
    }
    assert!(!acked.is_empty(), "what was queued is answered once the disk is back");
    let acked: Vec<&str> = acked.iter().map(String::as_str).collect();
    check(&app, &acked, None).await;
}
