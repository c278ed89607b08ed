//! `payhook bench`: drive a running payhook the way providers do, and measure it.
//!
//! Registers the orders, builds one payment per order and refunds for a fraction of them, adds duplicate
//! deliveries, optionally shuffles (so refunds can arrive before payments), then delivers everything with a
//! fixed concurrency, signing each request at send time. Like a provider it retries on 5xx, timeouts and
//! connection errors, never on 4xx. `--verify` then checks every order against what its events imply.

use crate::config::Config;
use crate::send::{base_url, source};
use anyhow::{Context, Result, bail};
use clap::Args;
use payhook_core::event::OrderAction;
use payhook_core::format::Outgoing;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// payhook's base URL (default: the configured listen address). Several comma-separated URLs (instances
    /// sharing one database) receive the deliveries in turn.
    #[arg(long)]
    pub url: Option<String>,
    /// The configured source to deliver to (its secret signs the requests).
    #[arg(long)]
    pub source: String,
    /// Orders to register; each gets one payment event.
    #[arg(long, default_value_t = 10_000)]
    pub orders: usize,
    /// Fraction of deliveries that are duplicates of another delivery.
    #[arg(long, default_value_t = 0.2)]
    pub dup: f64,
    /// Fraction of orders that also get a refund event.
    #[arg(long, default_value_t = 0.1)]
    pub refund: f64,
    /// Shuffle the deliveries (refunds may then arrive before their payments).
    #[arg(long)]
    pub shuffle: bool,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Per-request timeout in milliseconds (a timeout is retried).
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Check afterwards that every order is in the state its events imply, with at most one receipt.
    #[arg(long)]
    pub verify: bool,
    /// Seed for the workload (default: random; printed so a run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The part of payhook's answer the benchmark counts, read without building a JSON tree.
#[derive(serde::Deserialize)]
struct Answer<'a> {
    status: &'a str,
}

struct Delivery {
    order: usize,
    event_id: String,
    action: OrderAction,
}

#[derive(Default)]
struct Counters {
    acked: AtomicUsize,
    rejected: AtomicUsize,
    gave_up: AtomicUsize,
    retried_5xx: AtomicUsize,
    retried_io: AtomicUsize,
    outcomes: [AtomicUsize; 5],
}

const OUTCOMES: [&str; 5] = ["processed", "duplicate", "deferred", "ignored", "dead_lettered"];
const AMOUNT: i64 = 1999;
const CURRENCY: &str = "usd";

pub async fn run(cfg: Config, args: BenchArgs) -> Result<()> {
    if !(0.0..1.0).contains(&args.dup) || !(0.0..=1.0).contains(&args.refund) {
        bail!("--dup must be in [0, 1) and --refund in [0, 1]");
    }
    let src = source(&cfg, &args.source)?.clone();
    {
        use payhook_core::signature::Scheme;
        let in_body = matches!(src.verifier.scheme(), Scheme::Adyen | Scheme::HttpMessageSignatures);
        let probe = Outgoing {
            event_id: "e",
            action: OrderAction::Pay,
            order_id: "o",
            amount_minor: 1,
            currency: "usd",
            created: 0,
        };
        if in_body || !src.format.encode_headers(&probe).is_empty() || !src.format.encodes(OrderAction::Refund) {
            bail!(
                "--source: bench drives sources whose provider signs in headers and needs no other headers \
                 (stripe, standard-webhooks, hmac, github, paystack); {} is not one",
                src.name
            );
        }
    }
    let bases: Vec<String> = match args.url.as_deref() {
        Some(list) => list.split(',').map(|u| base_url(&cfg, Some(u.trim()))).collect(),
        None => vec![base_url(&cfg, None)],
    };
    let base = bases[0].clone();
    let token = cfg.settings.api_token.as_ref().map(|t| t.expose().to_owned());
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let run_id = format!("{:08x}", rng.u32(..));
    let concurrency = args.concurrency.max(1);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .timeout(Duration::from_millis(args.timeout_ms))
        .build()?;
    let order_id = {
        let run_id = run_id.clone();
        move |i: usize| format!("bench-{run_id}-{i}")
    };

    // 1. Register the orders.
    let token_header = token.clone().context("bench needs the API token to register orders (PAYHOOK_API_TOKEN)")?;
    let register_started = Instant::now();
    let orders_url = format!("{base}/v1/orders");
    let (c, token, ids) = (client.clone(), token_header.clone(), order_id.clone());
    pool(concurrency, args.orders, move |i| {
        let (client, url, token, id) = (c.clone(), orders_url.clone(), token.clone(), ids(i));
        async move {
            let body = json!({ "id": id, "amount": AMOUNT, "currency": CURRENCY });
            for _ in 0..20 {
                match client.post(&url).bearer_auth(&token).json(&body).send().await {
                    Ok(r) if r.status().is_success() => return Ok(()),
                    Ok(r) if r.status().is_client_error() => bail!("registering {id}: {}", r.status()),
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            bail!("registering {id}: gave up")
        }
    })
    .await?;
    let register_secs = register_started.elapsed().as_secs_f64();

    // 2. The workload.
    let mut unique: Vec<Delivery> = Vec::new();
    for i in 0..args.orders {
        unique.push(Delivery { order: i, event_id: format!("evt-{run_id}-pay-{i}"), action: OrderAction::Pay });
        if rng.f64() < args.refund {
            unique.push(Delivery { order: i, event_id: format!("evt-{run_id}-ref-{i}"), action: OrderAction::Refund });
        }
    }
    let refunded: Vec<bool> = {
        let mut r = vec![false; args.orders];
        for d in &unique {
            if d.action == OrderAction::Refund {
                r[d.order] = true;
            }
        }
        r
    };
    let total = (unique.len() as f64 / (1.0 - args.dup)).round() as usize;
    let mut plan: Vec<usize> = (0..unique.len()).collect();
    while plan.len() < total {
        plan.push(rng.usize(..unique.len()));
    }
    if args.shuffle {
        rng.shuffle(&mut plan);
    }
    let bodies: Vec<Vec<u8>> = unique
        .iter()
        .map(|d| {
            src.format.encode(&Outgoing {
                event_id: &d.event_id,
                action: d.action,
                order_id: &order_id(d.order),
                amount_minor: AMOUNT,
                currency: CURRENCY,
                created: payhook_server::now_ms() / 1000,
            })
        })
        .collect();

    // 3. Deliver.
    let shared = Arc::new((unique, bodies, plan, src));
    let counters = Arc::new(Counters::default());
    let latencies = Arc::new(std::sync::Mutex::new(Vec::with_capacity(total)));
    // Parsed once: a URL string would be parsed again for every request.
    let urls: Vec<reqwest::Url> = bases
        .iter()
        .map(|b| reqwest::Url::parse(&format!("{b}/webhooks/{}", shared.3.name)))
        .collect::<Result<_, _>>()
        .context("--url")?;
    let urls = Arc::new(urls);
    let done = Arc::new(AtomicU64::new(0));
    let progress = (!args.json).then(|| {
        let (counters, done) = (Arc::clone(&counters), Arc::clone(&done));
        tokio::spawn(async move {
            let started = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if done.load(Ordering::Relaxed) == 1 {
                    break;
                }
                let acked = counters.acked.load(Ordering::Relaxed);
                eprintln!("  {acked}/{total} acked ({:.0}/s)", acked as f64 / started.elapsed().as_secs_f64());
            }
        })
    });
    let started = Instant::now();
    let (c, sh, co, la, ur) =
        (client.clone(), Arc::clone(&shared), Arc::clone(&counters), Arc::clone(&latencies), Arc::clone(&urls));
    pool(concurrency, total, move |k| {
        let (client, shared, counters, latencies, urls) =
            (c.clone(), Arc::clone(&sh), Arc::clone(&co), Arc::clone(&la), Arc::clone(&ur));
        async move {
            let (unique, bodies, plan, src) = &*shared;
            let u = plan[k];
            let body = &bodies[u];
            let url = &urls[k % urls.len()];
            let mut backoff = Duration::from_millis(20);
            for _ in 0..50 {
                let now = payhook_server::now_ms() / 1000;
                let mut req = client.post(url.clone()).header("content-type", "application/json").body(body.clone());
                for (name, value) in src.verifier.sign(body, now, &unique[u].event_id) {
                    req = req.header(name, value);
                }
                let t0 = Instant::now();
                match req.send().await {
                    Ok(resp) if resp.status().is_success() => {
                        let answer = resp.bytes().await.unwrap_or_default();
                        let micros = t0.elapsed().as_micros() as u64;
                        if let Ok(mut l) = latencies.lock() {
                            l.push(micros);
                        }
                        counters.acked.fetch_add(1, Ordering::Relaxed);
                        let status = serde_json::from_slice::<Answer<'_>>(&answer).map(|a| a.status).unwrap_or("");
                        if let Some(i) = OUTCOMES.iter().position(|o| *o == status) {
                            counters.outcomes[i].fetch_add(1, Ordering::Relaxed);
                        }
                        return Ok(());
                    }
                    Ok(resp) if resp.status().is_client_error() => {
                        counters.rejected.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    Ok(_) => counters.retried_5xx.fetch_add(1, Ordering::Relaxed),
                    Err(_) => counters.retried_io.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            counters.gave_up.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    })
    .await?;
    let elapsed = started.elapsed().as_secs_f64();
    done.store(1, Ordering::Relaxed);
    if let Some(p) = progress {
        let _ = p.await;
    }

    let mut lat = latencies.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default();
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1000.0
    };
    let acked = counters.acked.load(Ordering::Relaxed);
    let mut result = json!({
        "urls": urls.iter().map(reqwest::Url::as_str).collect::<Vec<_>>(),
        "seed": seed,
        "orders": args.orders,
        "deliveries": total,
        "concurrency": concurrency,
        "acked": acked,
        "rejected_4xx": counters.rejected.load(Ordering::Relaxed),
        "gave_up": counters.gave_up.load(Ordering::Relaxed),
        "retried_5xx": counters.retried_5xx.load(Ordering::Relaxed),
        "retried_io": counters.retried_io.load(Ordering::Relaxed),
        "elapsed_s": elapsed,
        "acked_per_s": acked as f64 / elapsed,
        "latency_ms": { "p50": pct(0.50), "p99": pct(0.99), "max": pct(1.0) },
        "outcomes": OUTCOMES.iter().enumerate()
            .map(|(i, o)| ((*o).to_owned(), json!(counters.outcomes[i].load(Ordering::Relaxed))))
            .collect::<serde_json::Map<_, _>>(),
        "register_orders_s": register_secs,
    });

    // 4. Verify.
    if args.verify {
        let bad = Arc::new(std::sync::Mutex::new(Vec::new()));
        let refunded = Arc::new(refunded);
        let (c, token, b, re, base) =
            (client.clone(), token_header.clone(), Arc::clone(&bad), Arc::clone(&refunded), base.clone());
        pool(concurrency, args.orders, move |i| {
            let (client, id, token, bad, refunded) =
                (c.clone(), order_id(i), token.clone(), Arc::clone(&b), Arc::clone(&re));
            let url = format!("{base}/v1/orders/{id}");
            async move {
                let v: Value = client.get(&url).bearer_auth(&token).send().await?.json().await?;
                let status = v["status"].as_str().unwrap_or("?");
                let receipts =
                    v["outbox"].as_array().map_or(0, |rows| rows.iter().filter(|r| r["kind"] == "order.paid").count());
                let expected = if refunded[i] { "refunded" } else { "paid" };
                let ok = status == expected && receipts <= 1 && (refunded[i] || receipts == 1);
                if !ok && let Ok(mut b) = bad.lock() {
                    b.push(format!("{id}: {status} with {receipts} receipts, expected {expected}"));
                }
                Ok(())
            }
        })
        .await?;
        let bad = bad.lock().map(|b| b.clone()).unwrap_or_default();
        result["verify"] = json!({ "orders_checked": args.orders, "violations": bad.len(), "first": bad.first() });
        if !bad.is_empty() {
            eprintln!("{}", serde_json::to_string_pretty(&result)?);
            bail!("{} orders are not in the state their events imply, e.g. {}", bad.len(), bad[0]);
        }
    }

    if args.json {
        println!("{result}");
    } else {
        println!(
            "{acked}/{total} deliveries acked in {elapsed:.2} s: {:.0} acked/s, latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (concurrency {concurrency}, seed {seed})",
            acked as f64 / elapsed,
            pct(0.5),
            pct(0.99),
            pct(1.0)
        );
        println!("outcomes: {}", result["outcomes"]);
        println!(
            "retries: {} after 5xx, {} after IO errors; {} rejected with 4xx; {} gave up",
            result["retried_5xx"], result["retried_io"], result["rejected_4xx"], result["gave_up"]
        );
        if let Some(v) = result.get("verify") {
            println!("verify: {v}");
        }
    }
    Ok(())
}

/// Runs `job(0..n)` with at most `concurrency` in flight; the first error stops the run.
async fn pool<F, Fut>(concurrency: usize, n: usize, job: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let job = Arc::new(job);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.min(n.max(1)) {
        let (next, job) = (Arc::clone(&next), Arc::clone(&job));
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<(), anyhow::Error>(());
                }
                job(i).await?;
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r??;
    }
    Ok(())
}
