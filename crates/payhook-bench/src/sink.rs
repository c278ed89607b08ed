//! `payhook-bench sink`: the merchant's end of the dispatch benchmark (`scripts/bench-dispatch.sh`). It answers
//! every POST 200 at once, except that with `--fail-first-key` every row of the first order it hears of is answered
//! 500 (a key that keeps failing); it exits once no row has been acknowledged for `--idle-exit-ms` and prints, as
//! JSON, the rows it acknowledged, how fast, and what a consumer would have seen go wrong: a row received twice
//! after its acknowledgement, or an order's `order.paid` after its `order.refunded`.

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct SinkArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:18480")]
    listen: SocketAddr,
    /// Answer 500 to every row of the first order heard of: one key that keeps failing.
    #[arg(long)]
    fail_first_key: bool,
    /// Exit this long after the last acknowledged row, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    idle_exit_ms: u64,
    /// Exit when nothing has been acknowledged after this many seconds.
    #[arg(long, default_value_t = 300)]
    max_wait_secs: u64,
}

#[derive(Debug, Default)]
struct Seen {
    first: Option<Instant>,
    last_ok: Option<Instant>,
    acknowledged: HashSet<String>,
    again: u64,
    failed_answers: u64,
    failing_order: Option<String>,
    refunded: HashSet<String>,
    paid_after_refund: u64,
}

type Shared = Arc<Mutex<Seen>>;

async fn receive(State(seen): State<Shared>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let id = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let order = doc["order_id"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let now = Instant::now();
    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
    s.first.get_or_insert(now);
    if s.failing_order.as_deref() == Some(order) {
        s.failed_answers += 1;
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    if !s.acknowledged.insert(id) {
        s.again += 1;
    }
    match kind {
        "order.refunded" => {
            s.refunded.insert(order.to_owned());
        }
        "order.paid" if s.refunded.contains(order) => s.paid_after_refund += 1,
        _ => {}
    }
    s.last_ok = Some(now);
    StatusCode::OK
}

pub async fn run(args: SinkArgs) -> Result<()> {
    let seen: Shared = Arc::default();
    let fail_first = args.fail_first_key;
    let app = Router::new()
        .route(
            "/{*path}",
            post(move |State(seen): State<Shared>, headers: HeaderMap, body: Bytes| async move {
                if fail_first {
                    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    if let Some(order) = doc["order_id"].as_str() {
                        seen.lock().unwrap_or_else(|e| e.into_inner()).failing_order.get_or_insert(order.to_owned());
                    }
                }
                receive(State(seen), headers, body).await
            }),
        )
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("bind {}", args.listen))?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    let started = Instant::now();
    let idle = Duration::from_millis(args.idle_exit_ms);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let s = seen.lock().unwrap_or_else(|e| e.into_inner());
        let done = match s.last_ok {
            Some(last) => last.elapsed() >= idle,
            None => started.elapsed() >= Duration::from_secs(args.max_wait_secs),
        };
        if done {
            let seconds = match (s.first, s.last_ok) {
                (Some(first), Some(last)) => last.duration_since(first).as_secs_f64(),
                _ => 0.0,
            };
            let rows = s.acknowledged.len() as f64;
            let report = serde_json::json!({
                "acknowledged": s.acknowledged.len(),
                "seconds": seconds,
                "rows_per_s": if seconds > 0.0 { rows / seconds } else { 0.0 },
                "received_again": s.again,
                "failed_answers": s.failed_answers,
                "failing_order": s.failing_order,
                "paid_after_refund": s.paid_after_refund,
            });
            println!("{report}");
            return Ok(());
        }
    }
}
