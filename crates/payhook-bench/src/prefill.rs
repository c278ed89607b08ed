//! `payhook-bench prefill`: grows the configured database by N stored deliveries, quickly, through the store's own
//! operations (`register_order`, then `ingest` of a signed payment event for it), so that a scale benchmark runs
//! against the same rows, indexes and counters a long-lived installation has, and cannot drift from them the way
//! hand-written SQL would. Run it with no server on the database (it writes as fast as the writer allows).

use anyhow::{Context, Result, bail};
use clap::Args;
use futures_util::StreamExt;
use payhook::config::Config;
use payhook::store::StoreTask;
use payhook_core::event::{Currency, Money, OrderAction, OrderId};
use payhook_core::format::Outgoing;
use payhook_server::SourceSettings;
use payhook_store::{Delivery, NewOrder, Outcome, Parsed, ReceivedHeaders, Store, StoreError};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct PrefillArgs {
    /// The configured source the deliveries are recorded under (its format encodes them, its secret signs them).
    #[arg(long)]
    source: String,
    /// How many deliveries to add: one registered order and one payment event for it each.
    #[arg(long)]
    deliveries: u64,
    /// Received times are spread evenly over this many days, as a long-running installation's are…
    #[arg(long, default_value_t = 1.0)]
    days: f64,
    /// …ending this many days before now (old enough for retention to prune, when above its settings).
    #[arg(long, default_value_t = 0.0)]
    days_ago: f64,
    /// Orders and deliveries in flight at once. The writer commits them in batches and each waits for its batch's
    /// fsync, so the rate grows with this; a full queue is waited out, not an error.
    #[arg(long, default_value_t = 4000)]
    concurrency: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

impl StoreTask for PrefillArgs {
    type Output = ();

    /// Records `self.deliveries` paid orders in `store`.
    async fn run<S: Store>(self, store: &S, cfg: &Config) -> Result<()> {
        prefill(store, cfg, self).await
    }
}

async fn prefill<S: Store>(store: &S, cfg: &Config, args: PrefillArgs) -> Result<()> {
    let src = cfg.source(&args.source)?;
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    if !(args.days.is_finite() && args.days >= 0.0 && args.days_ago.is_finite() && args.days_ago >= 0.0) {
        bail!("--days and --days-ago must be numbers of days, 0 or more");
    }
    let end_ms = payhook_server::now_ms() - (args.days_ago * 86_400_000.0) as i64;
    let span_ms = (args.days * 86_400_000.0) as i64;
    let run_id = format!("{:08x}", fastrand::u32(..));
    let n = args.deliveries;
    let done = AtomicU64::new(0);
    let processed = AtomicU64::new(0);
    let started = Instant::now();
    let mut last_report = Instant::now();

    let mut steps = futures_util::stream::iter(0..n)
        .map(|i| {
            // Oldest first, so received times grow with row ids (give or take the in-flight window) as in a live
            // installation.
            let at_ms = end_ms - span_ms + span_ms.saturating_mul(i as i64) / (n.max(1) as i64);
            one(store, src, &run_id, i, at_ms)
        })
        .buffer_unordered(args.concurrency);
    while let Some(outcome) = steps.next().await {
        if outcome? == Outcome::Processed {
            processed.fetch_add(1, Ordering::Relaxed);
        }
        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
        if !args.json && last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            eprintln!("  {d}/{n} deliveries ({:.0}/s)", d as f64 / started.elapsed().as_secs_f64());
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let summary = json!({
        "deliveries": n,
        "processed": processed.load(Ordering::Relaxed),
        "seconds": secs,
        "deliveries_per_s": n as f64 / secs.max(1e-9),
        "run_id": run_id,
    });
    if args.json {
        println!("{summary}");
    } else {
        println!(
            "added {n} deliveries ({} processed) in {secs:.1} s, {:.0}/s",
            summary["processed"],
            summary["deliveries_per_s"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(())
}

/// Registers order `i` and records a signed payment event for it, received at `at_ms`.
async fn one<S: Store>(store: &S, src: &SourceSettings, run_id: &str, i: u64, at_ms: i64) -> Result<Outcome> {
    let order_id = format!("prefill-{run_id}-{i}");
    let event_id = crate::bench::event_id(run_id, "prefill", i);
    let amount_minor = 1_000 + (i % 90_000) as i64;
    let currency = "usd";
    let money = Money::new(amount_minor, Currency::parse(currency)?)?;
    let order = NewOrder { id: OrderId::parse(order_id.clone())?, money, now_ms: at_ms };
    patiently(|| store.register_order(order.clone())).await?;

    let outgoing = Outgoing {
        event_id: &event_id,
        action: OrderAction::Pay,
        order_id: &order_id,
        amount_minor,
        currency,
        created: at_ms / 1000,
    };
    let body = src.format.encode(&outgoing);
    let mut headers: Vec<(String, String)> = vec![("content-type".into(), "application/json".into())];
    headers.extend(src.format.encode_headers(&outgoing));
    headers.extend(src.verifier.sign(&body, at_ms / 1000, &event_id));
    // Recorded as every delivery is: from its verification (the store takes nothing else).
    let verified = src
        .verifier
        .verify(&headers, &body, at_ms / 1000)
        .with_context(|| format!("source {}: its verifier refuses what it signs", src.name))?;
    let events = src
        .format
        .parse_delivery(&headers, &body)
        .with_context(|| format!("source {}: its format cannot read back what it encodes", src.name))?;
    let received: ReceivedHeaders = headers.into_iter().collect();
    let mut outcome = Outcome::Processed;
    for event in events {
        let delivery = Delivery::verified(
            &verified,
            src.name.clone(),
            at_ms,
            Parsed::Event(event),
            body.clone(),
            received.clone(),
            format!("{} (prefill)", src.verifier.scheme().name()),
        );
        outcome = patiently(|| store.ingest(delivery.clone())).await?.outcome;
    }
    Ok(outcome)
}

/// Runs `op` until the writer's queue has room for it: prefill pushes as hard as the store takes.
async fn patiently<T, F, Fut>(op: F) -> Result<T, StoreError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    loop {
        match op().await {
            Err(StoreError::Overloaded) => tokio::time::sleep(Duration::from_millis(20)).await,
            other => return other,
        }
    }
}
