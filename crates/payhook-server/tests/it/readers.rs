//! SQLite's read connections: a slow read holds one pooled connection and nothing else, `/readyz` never waits
//! behind reads, a read past `storage.read_timeout_ms` is stopped with a 503 `read_timeout`, and a read that finds
//! every connection busy gives up after the same time with a 503 `readers_busy`.
//!
//! Slow reads are made with two failpoints on the stats read (`GET /v1/stats`), scoped to each test's database:
//! `sqlite::stats_stall` holds its pooled connection until the point is removed, `sqlite::stats_runaway` runs a
//! query of many seconds. These tests take [`SERIAL`]: the failpoint registry is global to the process.

use crate::helpers::{API_TOKEN, Reply, TestApp, read_json};
use payhook_sqlite::SqliteStore;
use payhook_store::Store;
use reqwest::StatusCode;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A failpoint set to fire for one database until dropped.
struct Failpoint(&'static str);

impl Failpoint {
    fn set(name: &'static str, app: &TestApp) -> Self {
        let dir = app.db_path.parent().and_then(|d| d.file_name()).expect("temp dir name");
        fail::cfg(name, &format!("return({})", dir.to_string_lossy())).expect("failpoint configuration");
        Self(name)
    }
}

impl Drop for Failpoint {
    fn drop(&mut self) {
        fail::remove(self.0);
    }
}

/// An app whose SQLite store keeps `connections` read connections and stops reads at `timeout_ms`.
async fn spawn(connections: usize, timeout_ms: u64) -> TestApp {
    TestApp::spawn_with(|_, options| {
        options.read_connections = connections;
        options.read_timeout_ms = timeout_ms;
    })
    .await
}

/// Starts `n` `GET /v1/stats` requests in the background and waits until each holds a read connection.
async fn hold_read_connections(app: &TestApp, n: u64) -> Vec<JoinHandle<Reply>> {
    let readers: Vec<_> = (0..n)
        .map(|_| {
            let request = app.client.get(app.url("/v1/stats")).bearer_auth(API_TOKEN);
            tokio::spawn(async move { read_json(request.send().await.expect("GET /v1/stats")).await })
        })
        .collect();
    wait_for_reads_in_use(&app.store, n).await;
    readers
}

/// Waits (at most 10 s) until `n` read connections are in use.
async fn wait_for_reads_in_use(store: &SqliteStore, n: u64) {
    let start = Instant::now();
    while store.read_metrics().in_use != n {
        assert!(start.elapsed() < Duration::from_secs(10), "never {n} reads in use: {:?}", store.read_metrics());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn finish(readers: Vec<JoinHandle<Reply>>) {
    for r in readers {
        let reply = r.await.expect("reader task");
        assert_eq!(reply.status, StatusCode::OK, "a stalled read completes once released: {}", reply.json);
    }
}

#[tokio::test]
async fn readyz_answers_at_once_while_every_read_connection_is_held_by_a_slow_read() {
    let _serial = SERIAL.lock().await;
    let app = spawn(4, 2_000).await;
    let stall = Failpoint::set("sqlite::stats_stall", &app);
    let readers = hold_read_connections(&app, 4).await;

    let mut took = Vec::with_capacity(100);
    for i in 0..100 {
        let start = Instant::now();
        let resp = app.client.get(app.url("/readyz")).send().await.expect("GET /readyz");
        took.push(start.elapsed());
        let status = resp.status();
        let body = resp.text().await.expect("body");
        assert_eq!(status, StatusCode::OK, "probe {i} after {:?}: {body}", took[i]);
    }
    took.sort();
    // A probe that waited for a read connection would wait for the stalled reads' 2 s timeout; the bound leaves a
    // loaded machine's scheduling pauses room below that.
    let p99 = took[98];
    assert!(p99 < Duration::from_millis(500), "readyz p99 {p99:?} (max {:?})", took[99]);
    assert_eq!(app.store.read_metrics().in_use, 4, "the slow reads were in progress throughout");

    drop(stall);
    finish(readers).await;
}

#[tokio::test]
async fn an_order_is_read_at_once_while_a_slow_read_holds_a_pooled_connection() {
    let _serial = SERIAL.lock().await;
    let app = spawn(4, 5_000).await;
    assert_eq!(app.register_order("ord_beside", 100, "usd").await.0, StatusCode::CREATED);
    let stall = Failpoint::set("sqlite::stats_stall", &app);
    let readers = hold_read_connections(&app, 1).await;

    for _ in 0..20 {
        let start = Instant::now();
        let order = app.order("ord_beside").await;
        let took = start.elapsed();
        assert_eq!(order["status"], json!("pending"));
        // Waiting for the slow read's connection would take its 5 s timeout.
        assert!(took < Duration::from_secs(2), "GET /v1/orders/ord_beside took {took:?} beside a slow read");
    }
    assert_eq!(app.store.read_metrics().in_use, 1, "the slow read was in progress throughout");

    drop(stall);
    finish(readers).await;
}

#[tokio::test]
async fn a_read_past_read_timeout_ms_is_stopped_with_503_read_timeout_and_its_connection_serves_the_next_read() {
    let _serial = SERIAL.lock().await;
    // One connection: the read after the stopped one runs on the very connection that was interrupted.
    let app = spawn(1, 300).await;
    assert_eq!(app.register_order("ord_after", 100, "usd").await.0, StatusCode::CREATED);
    let runaway = Failpoint::set("sqlite::stats_runaway", &app);

    let start = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(5), app.api_get("/v1/stats"))
        .await
        .expect("a runaway read is stopped, not left running");
    let took = start.elapsed();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{}", reply.json);
    // The request's id, as in its X-Request-Id.
    let request_id = reply.headers.get("x-request-id").and_then(|v| v.to_str().ok()).expect("X-Request-Id");
    assert_eq!(
        reply.json,
        json!({
            "error": "read_timeout",
            "message": "the query took longer than storage.read_timeout_ms (300 ms) and was stopped",
            "request_id": request_id,
        })
    );
    assert_eq!(reply.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert!(took >= Duration::from_millis(300), "stopped after {took:?}, before its limit");
    drop(runaway);

    let reply = app.api_get("/v1/stats").await;
    assert_eq!(reply.status, StatusCode::OK, "the next read on the same connection: {}", reply.json);
    assert_eq!(app.order("ord_after").await["status"], json!("pending"));
    let reads = app.store.read_metrics();
    assert_eq!((reads.timed_out, reads.busy, reads.in_use), (1, 0, 0), "{reads:?}");
    let (status, text) = app.get_text_authorized("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(text.contains("payhook_reads_cut_off_total{reason=\"read_timeout\"} 1\n"), "{text}");
    assert!(text.contains("payhook_read_connections 1\n"), "{text}");
}

#[tokio::test]
async fn with_every_read_connection_held_a_further_read_gets_503_readers_busy_after_read_timeout_ms() {
    let _serial = SERIAL.lock().await;
    let app = spawn(2, 300).await;
    assert_eq!(app.register_order("ord_waits", 100, "usd").await.0, StatusCode::CREATED);
    let stall = Failpoint::set("sqlite::stats_stall", &app);
    let readers = hold_read_connections(&app, 2).await;

    let start = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(5), app.api_get("/v1/orders/ord_waits"))
        .await
        .expect("a read waiting for a connection gives up, never hangs");
    let took = start.elapsed();
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{}", reply.json);
    assert_eq!(reply.json["error"], json!("readers_busy"));
    assert_eq!(
        reply.json["message"],
        json!("every read connection stayed busy for storage.read_timeout_ms (300 ms); retry later")
    );
    assert_eq!(reply.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "gave up after {took:?}");
    let reads = app.store.read_metrics();
    assert_eq!((reads.busy, reads.waiting, reads.in_use), (1, 0, 2), "{reads:?}");

    drop(stall);
    finish(readers).await;
    assert_eq!(app.order("ord_waits").await["status"], json!("pending"), "connections free again serve reads");
}
