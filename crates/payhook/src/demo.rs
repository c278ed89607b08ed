//! `payhook demo`: payhook on a temporary SQLite file with a local sink, playing the failure modes a newcomer
//! should see, each with what payhook answered and why, then the final state — and the dashboard left running.

use crate::config::{Config, StorageConfig};
use crate::table::Table;
use anyhow::{Context, Result, bail};
use clap::Args;
use payhook_core::event::{OrderAction, OrderId};
use payhook_core::format::Outgoing;
use payhook_core::signature::{Scheme, Secret, Verifier};
use payhook_server::settings::ProviderRequest;
use payhook_server::{SourceSettings, now_ms};
use payhook_sqlite::SqliteStore;
use payhook_store::{OutboxFilter, Stats, Store};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The demo's API token: public, like the demo, and long enough for the configuration's minimum.
const TOKEN: &str = "demo-token-0123456789abcdef";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const FORGER: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where the demo's payhook listens (and its dashboard).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Stop when the tour is over instead of leaving the dashboard running.
    #[arg(long)]
    pub exit: bool,
}

/// A sink of the merchant's that fails its first `fail_first` requests with 500, then accepts.
async fn start_sink(fail_first: usize) -> Result<(String, Arc<AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.context("bind the demo sink")?;
    let addr = listener.local_addr()?;
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                // One request per connection: read the head and the body its Content-Length announces.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let status = if n < fail_first { "500 Internal Server Error" } else { "200 OK" };
                let answer = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    Ok((format!("http://{addr}/receipts"), seen))
}

fn demo_config(listen: &str, db: &std::path::Path, sink_url: &str) -> String {
    format!(
        r#"[server]
listen = "{listen}"
api_token = "{TOKEN}"

[storage]
url = "sqlite://{db}"

[retry]
base_ms = 300
max_attempts = 100

[worker]
poll_interval_ms = 200

[dispatcher]
poll_interval_ms = 100

[dispatcher.retry]
base_ms = 300
jitter = 0.0

[[sources]]
name = "shop"
scheme = "standard-webhooks"
format = "generic"
secrets = ["{SECRET}"]

[[sinks]]
name = "receipts"
url = "{sink_url}"
kinds = ["order.paid"]
timeout_ms = 2000
"#,
        db = db.display()
    )
}

struct Tour {
    client: reqwest::Client,
    base: String,
    source: SourceSettings,
    store: Arc<SqliteStore>,
}

impl Tour {
    /// Posts `body` with `headers` to the shop source; returns the status and the answer's JSON.
    async fn post(&self, headers: &[(String, String)], body: Vec<u8>) -> Result<(u16, Value)> {
        let mut req = self.client.post(format!("{}/webhooks/shop", self.base)).body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let resp = req.send().await.context("POST /webhooks/shop")?;
        let status = resp.status().as_u16();
        let json = resp.json::<Value>().await.unwrap_or(Value::Null);
        Ok((status, json))
    }

    /// A payment-provider event, encoded and signed as the provider does.
    fn signed(&self, event_id: &str, action: OrderAction, order: &str, at: i64) -> Result<ProviderRequest> {
        let out = Outgoing { event_id, action, order_id: order, amount_minor: 1999, currency: "usd", created: at };
        let url = reqwest::Url::parse(&format!("{}/webhooks/shop", self.base))?;
        Ok(self.source.provider_delivery(&out, &url, at, event_id)?)
    }

    async fn deliver(&self, event_id: &str, action: OrderAction, order: &str) -> Result<(u16, Value)> {
        let request = self.signed(event_id, action, order, now_ms() / 1000)?;
        self.post(&request.headers, request.body).await
    }

    async fn register(&self, order: &str) -> Result<()> {
        let resp = self
            .client
            .post(format!("{}/v1/orders", self.base))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"id": order, "amount": 1999, "currency": "usd"}))
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("registering {order}: {}", resp.status());
        }
        Ok(())
    }

    async fn order_status(&self, order: &str) -> Result<String> {
        let view = self.store.order(&OrderId::parse(order)?).await?;
        Ok(view.map_or_else(|| "not registered".to_owned(), |v| v.status.as_str().to_owned()))
    }
}

fn answer(status: u16, json: &Value) -> String {
    let outcome = json["status"].as_str().or_else(|| json["error"].as_str()).unwrap_or("?");
    match json["detail"].as_str().or_else(|| json["message"].as_str()) {
        Some(detail) => format!("{status} {outcome} — {detail}"),
        None => format!("{status} {outcome}"),
    }
}

fn case(n: u32, title: &str) {
    println!("\n{n}. {title}");
}

fn said(what: &str) {
    println!("   → {what}");
}

fn why(text: &str) {
    println!("   why: {text}");
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("payhook-demo-{}-{}", std::process::id(), now_ms()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let result = tour(&args, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn tour(args: &DemoArgs, dir: &std::path::Path) -> Result<()> {
    let (sink_url, sink_seen) = start_sink(2).await?;
    let db: PathBuf = dir.join("demo.db");
    let text = demo_config(&args.listen, &db, &sink_url);
    let mut cfg = Config::from_toml_and_env(&text, "demo", None, std::iter::empty())?;
    cfg.storage.set_routing(cfg.settings.routing());
    let StorageConfig::Sqlite(options) = cfg.storage.clone() else { bail!("the demo runs on SQLite") };
    let store = Arc::new(SqliteStore::open(options).context("open the demo database")?);
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {} (pick another with --listen)", args.listen))?;
    let running = payhook_server::start(listener, cfg.settings.clone(), Arc::clone(&store))?;
    let base = format!("http://{}", running.addr);
    let source = cfg.settings.sources[0].clone();
    let tour = Tour { client: reqwest::Client::new(), base: base.clone(), source, store: Arc::clone(&store) };

    println!("payhook demo: a payhook on a temporary SQLite file ({}), listening on {base},", db.display());
    println!("with one source, `shop` (Standard Webhooks signatures), and one sink of yours that fails twice.");

    case(1, "The same payment delivered twice, as providers do");
    tour.register("ord_1").await?;
    for _ in 0..2 {
        let (s, j) = tour.deliver("evt_pay_1", OrderAction::Pay, "ord_1").await?;
        said(&answer(s, &j));
    }
    why("the second copy has the same event id: it is recorded once and answered 200, so the provider stops.");

    case(2, "Sixteen copies of one payment at the same moment");
    tour.register("ord_2").await?;
    let ProviderRequest { body, headers, .. } = tour.signed("evt_pay_2", OrderAction::Pay, "ord_2", now_ms() / 1000)?;
    let mut copies = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (client, url, body, headers) =
            (tour.client.clone(), format!("{base}/webhooks/shop"), body.clone(), headers.clone());
        copies.spawn(async move {
            let mut req = client.post(url).body(body);
            for (k, v) in &headers {
                req = req.header(k, v);
            }
            let resp = req.send().await.ok()?;
            resp.json::<Value>().await.ok().and_then(|j| j["status"].as_str().map(str::to_owned))
        });
    }
    let mut tally = std::collections::BTreeMap::new();
    while let Some(r) = copies.join_next().await {
        *tally.entry(r.ok().flatten().unwrap_or_else(|| "error".into())).or_insert(0) += 1;
    }
    said(&format!("{tally:?}"));
    why("the unique key on (source, event id) lets exactly one of them in; the others are answered duplicate.");

    case(3, "A refund that arrives before its payment");
    tour.register("ord_3").await?;
    let (s, j) = tour.deliver("evt_refund_3", OrderAction::Refund, "ord_3").await?;
    said(&format!("refund:  {}", answer(s, &j)));
    let (s, j) = tour.deliver("evt_pay_3", OrderAction::Pay, "ord_3").await?;
    said(&format!("payment: {}", answer(s, &j)));
    said(&format!("order ord_3 is {}", tour.order_status("ord_3").await?));
    why("a refunded order never goes back to paid: the late payment changes nothing and sends no receipt.");

    case(4, "A payment that arrives before its order exists");
    let (s, j) = tour.deliver("evt_pay_4", OrderAction::Pay, "ord_4").await?;
    said(&answer(s, &j));
    tour.register("ord_4").await?;
    let started = Instant::now();
    while tour.order_status("ord_4").await? != "paid" && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    said(&format!("after POST /v1/orders: order ord_4 is {}", tour.order_status("ord_4").await?));
    why("payhook kept the event and owns it now; registering the order woke the worker, which applied it once.");

    case(5, "A forged signature");
    let forger = Verifier::new(Scheme::StandardWebhooks, &[Secret::new(FORGER)], 300)?;
    let ProviderRequest { body, .. } = tour.signed("evt_forged", OrderAction::Pay, "ord_1", now_ms() / 1000)?;
    let mut headers = forger.sign(&body, now_ms() / 1000, "evt_forged");
    headers.push(("content-type".into(), "application/json".into()));
    let (s, j) = tour.post(&headers, body).await?;
    said(&answer(s, &j));
    why("the signature is checked on the raw bytes with your secret; a mismatch is refused 401 and nothing is stored.");

    case(6, "A captured delivery replayed an hour later");
    let ProviderRequest { body, headers, .. } =
        tour.signed("evt_stale", OrderAction::Pay, "ord_1", now_ms() / 1000 - 3_600)?;
    let (s, j) = tour.post(&headers, body).await?;
    said(&answer(s, &j));
    why("the signed timestamp is more than 5 minutes away from now: replays are refused 401.");

    case(7, "A signed body payhook cannot read");
    let body = b"{\"id\": \"evt_broken\", \"type\": ".to_vec();
    let mut headers = tour.source.verifier.sign(&body, now_ms() / 1000, "msg_broken");
    headers.push(("content-type".into(), "application/json".into()));
    let (s, j) = tour.post(&headers, body).await?;
    said(&answer(s, &j));
    why("it verified, so payhook owns it: kept byte for byte as a dead letter, answered 200; \
         after a fix, `payhook dlq replay` applies it.");

    case(8, "Your receipts endpoint fails twice");
    let started = Instant::now();
    let delivered = loop {
        let rows = store
            .list_outbox(OutboxFilter { sink: Some("receipts".into()), limit: 100, ..Default::default() })
            .await?
            .rows;
        if rows.iter().all(|r| r.status == payhook_store::OutboxStatus::Delivered)
            || started.elapsed() > Duration::from_secs(20)
        {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    said(&format!(
        "the sink was called {} times for {} receipts; attempts per row: {:?}",
        sink_seen.load(Ordering::SeqCst),
        delivered.len(),
        delivered.iter().map(|r| r.attempts).collect::<Vec<_>>()
    ));
    why("side effects wait in the outbox and are retried with backoff under the same Idempotency-Key until your \
         endpoint answers 2xx: late, never lost, never twice in effect.");

    println!("\nFinal state");
    let mut orders = Table::new(&["order", "status", "receipts"]);
    for id in ["ord_1", "ord_2", "ord_3", "ord_4"] {
        let view = store.order(&OrderId::parse(id)?).await?;
        let (status, receipts) = view.map_or(("missing".to_owned(), 0), |v| {
            (
                v.status.as_str().to_owned(),
                v.outbox.iter().filter(|o| o.kind == payhook_store::OutboxKind::OrderPaid).count(),
            )
        });
        orders.row(vec![id.to_owned(), status, receipts.to_string()]);
    }
    print!("{}", orders.render());
    let stats = store.stats().await?;
    let mut events = Table::new(&["stored events", "count"]);
    for status in ["processed", "duplicate", "deferred", "ignored", "dead_lettered"] {
        events.row(vec![status.to_owned(), Stats::count(&stats.events, status).to_string()]);
    }
    print!("{}", events.render());
    println!("Every paid order has exactly one receipt; the refunded one has none. (Copies with a known event id are");
    println!("answered without being stored again, so they do not appear as rows.)");

    if args.exit {
        running.shutdown().await?;
    } else {
        println!("\nThe dashboard is at {base}/ui (token: {TOKEN}); the API at {base}/v1. Ctrl-C to stop.");
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        running.shutdown().await?;
    }
    store.shutdown().await;
    Ok(())
}
