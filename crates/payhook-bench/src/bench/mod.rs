//! `payhook-bench bench`: drive a running payhook the way providers do, and measure it.
//!
//! Registers the orders, then delivers signed payment (and refund) events in one of four scenarios
//! ([`Scenario`]), signing each attempt at send time. Like a provider it retries on 5xx (honouring `Retry-After`),
//! timeouts and connection errors, never on 4xx. `--verify` then checks every order against what its events imply.
//!
//! Layout: `mod.rs` runs the phases (register, deliver, report, verify); `args` holds the flags and their
//! resolution for the chosen scenario, `workload` the scenarios' deliveries and the order registration, `deliver`
//! the run's shared state and one delivery with its retries, `open_loop` the scheduled arrivals of `--rate`,
//! `verify` the read-back of every order, `report` the report, `probes` the operator probes, `cpu` the server's and
//! the database's CPU time; `http` is the minimal HTTP/1.1 client the deliveries use by default (`--client lean`),
//! so that the load generator leaves the machine's CPU to payhook.

mod args;
mod cpu;
mod deliver;
mod http;
mod open_loop;
mod probes;
mod report;
mod verify;
mod workload;

use anyhow::{Context, Result, bail};
pub use args::BenchArgs;
use args::{ClientKind, Params, Scenario};
use deliver::{Conn, Connector, Counters, Run, deliver};
use payhook::config::Config;
use payhook_core::event::OrderAction;
use payhook_core::format::Outgoing;
use report::{per_second, percentiles, print_text};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use verify::{Checks, verify};
pub(crate) use workload::event_id;
use workload::{Registrar, Workload, planned, sustained};

/// Identical deliveries per event in dup-storm.
const STORM: usize = 16;
const OUTCOMES: [&str; 5] = ["processed", "duplicate", "deferred", "ignored", "dead_lettered"];
const AMOUNT: i64 = 1999;
const CURRENCY: &str = "usd";
/// The longest `Retry-After` the benchmark waits for before a retry.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(5);
/// Attempts per delivery before the benchmark gives up on it, unless `--attempts` says otherwise.
const DEFAULT_ATTEMPTS: u32 = 50;
/// Orders registered (and read back by `--verify`) at once at most, whatever `--concurrency` is.
const REGISTER_CONCURRENCY: usize = 256;

pub async fn run(cfg: Config, args: BenchArgs) -> Result<()> {
    let src = cfg.source(&args.source)?.clone();
    {
        use payhook_core::signature::Scheme;
        let in_body =
            matches!(src.verifier.scheme(), Scheme::Adyen | Scheme::Braintree | Scheme::HttpMessageSignatures);
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
        Some(list) => list.split(',').map(|u| cfg.base_url(Some(u.trim()))).collect(),
        None => vec![cfg.base_url(None)],
    };
    let p = Params::resolve(&args, &bases)?;
    let base = bases[0].clone();
    let token = cfg.settings.api_token.as_ref().map(|t| t.expose().to_owned());
    let token = token.context("bench needs the API token to register orders (PAYHOOK_API_TOKEN)")?;
    let mut rng = fastrand::Rng::with_seed(p.seed);
    let run_id = format!("{:08x}", rng.u32(..));
    let client = reqwest::Client::builder().pool_max_idle_per_host(p.concurrency).build()?;
    let path = format!("/webhooks/{}", src.name);
    let connector = Connector {
        client: client.clone(),
        lean: match p.client {
            ClientKind::Lean => bases
                .iter()
                .map(|b| http::Target::post(b, &path).map(Arc::new))
                .collect::<Result<_, _>>()
                .map_err(anyhow::Error::msg)
                .context("--url")?,
            ClientKind::Reqwest => Vec::new(),
        },
        // Parsed once: a URL string would be parsed again for every request.
        urls: bases
            .iter()
            .map(|b| reqwest::Url::parse(&format!("{b}{path}")))
            .collect::<Result<_, _>>()
            .context("--url")?,
        kind: p.client,
    };
    // Registration has a client of its own, whose pooled connections are closed once the orders are registered
    // (sustained keeps registering while it delivers): left open, they would count against the server's
    // `max_connections` beside the deliveries' own.
    let register_client = reqwest::Client::builder().pool_max_idle_per_host(REGISTER_CONCURRENCY).build()?;
    let mut registrar =
        Registrar { client: register_client, url: format!("{base}/v1/orders"), token: token.clone(), run_id };

    // 1. Register the orders, at most REGISTER_CONCURRENCY at once: registering (and verifying) is not what is
    //    measured, and an open loop's thousands of connections would take the server's `max_connections` twice.
    let register_started = Instant::now();
    registrar.register(p.concurrency.min(REGISTER_CONCURRENCY), 0..p.orders).await?;
    let register_secs = register_started.elapsed().as_secs_f64();
    if p.scenario != Scenario::Sustained {
        registrar.client = client.clone();
    }

    // 2. Deliver.
    let cpu_before = match args.server_pid {
        Some(pid) => Some(cpu::CpuSnapshot::read(pid).with_context(|| format!("--server-pid {pid}: /proc/{pid}"))?),
        None => None,
    };
    let database_before = args.database_process.as_deref().map(cpu::ticks_of_processes_named).transpose()?;
    let run = Arc::new(Run {
        src,
        timeout: Duration::from_millis(p.timeout_ms),
        attempts: p.attempts,
        started: Instant::now(),
        counters: Counters::default(),
        samples: Mutex::new(Vec::new()),
        finished: std::sync::OnceLock::new(),
        gave_up_orders: Mutex::new(std::collections::BTreeSet::new()),
    });
    let progress = (!args.json).then(|| progress(Arc::clone(&run)));
    let probes = probes::Probes::start(&client, &base, &token, p.scrape_ms, p.read_ms);
    let mut open = None;
    let (deliveries, expect, registered) = match p.scenario {
        Scenario::Sustained => sustained(&p, &run, &connector, &registrar).await?,
        _ => {
            let w = Workload::build(&p, &mut rng, &registrar.run_id, &run.src);
            let deliveries = w.deliveries();
            let expect = w.expect.clone();
            match p.rate {
                Some(rate) => open = Some(open_loop::deliver_at_rate(&run, &connector, w, rate, p.concurrency).await?),
                None => planned(&p, &run, &connector, w).await?,
            }
            (deliveries, expect, p.orders)
        }
    };
    let elapsed = run.finished.get().copied().unwrap_or_else(Instant::now).duration_since(run.started).as_secs_f64();
    let database_after = args.database_process.as_deref().map(cpu::ticks_of_processes_named).transpose()?;
    let cpu_after = match args.server_pid {
        Some(pid) => Some(cpu::CpuSnapshot::read(pid).with_context(|| format!("--server-pid {pid}: /proc/{pid}"))?),
        None => None,
    };
    if let Some(task) = progress {
        task.abort();
    }
    let probes = probes.finish();

    // 3. Report.
    let samples = run.samples.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default();
    let c = &run.counters;
    let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let acked = load(&c.acked);
    let mut lat: Vec<u32> = samples.iter().map(|s| s.1).collect();
    let mut result = json!({
        "scenario": p.scenario.name(),
        "params": p.to_json(),
        "command": p.command(run.src.name.as_str()),
        "urls": connector.urls.iter().map(reqwest::Url::as_str).collect::<Vec<_>>(),
        "client": p.client.name(),
        "seed": p.seed,
        "orders": expect.len(),
        "orders_registered": registered,
        "orders_registered_during_run": registered - p.orders,
        "deliveries": deliveries,
        "concurrency": p.concurrency,
        "acked": acked,
        "rejected_4xx": load(&c.rejected),
        "gave_up": load(&c.gave_up),
        "retries": load(&c.retried_5xx) + load(&c.retried_io),
        "retried_5xx": load(&c.retried_5xx),
        "retried_io": load(&c.retried_io),
        "elapsed_s": elapsed,
        "acked_per_s": acked as f64 / elapsed,
        "latency_ms": percentiles(&mut lat),
        "outcomes": OUTCOMES.iter().enumerate()
            .map(|(i, o)| ((*o).to_owned(), json!(load(&c.outcomes[i]))))
            .collect::<serde_json::Map<_, _>>(),
        "register_orders_s": register_secs,
    });
    if let Some(secs) = p.duration_secs {
        result["per_second"] = per_second(&samples, secs);
    }
    if let Some(open) = open {
        result["open_loop"] = open;
    }
    if probes.as_object().is_some_and(|o| !o.is_empty()) {
        result["probes"] = probes;
    }
    if let (Some(before), Some(after)) = (&cpu_before, &cpu_after) {
        result["server_cpu"] = after.since(before, acked);
    }
    if let (Some(name), Some(before), Some(after)) = (&args.database_process, database_before, database_after) {
        result["database_cpu"] = cpu::per_acked(name, after.saturating_sub(before), acked);
    }

    // 4. Verify.
    if p.verify {
        let skipped = run.gave_up_orders.lock().map(|mut o| std::mem::take(&mut *o)).unwrap_or_default();
        let checks = Checks { run_id: &registrar.run_id, expect: &expect, skipped: &skipped };
        let bad = verify(&client, &base, &token, &checks, p.concurrency.min(REGISTER_CONCURRENCY)).await?;
        result["verify"] = json!({
            "orders_checked": expect.len() - skipped.len(),
            "orders_skipped": skipped.len(),
            "violations": bad.len(),
            "first": bad.first(),
        });
        if !bad.is_empty() {
            eprintln!("{}", serde_json::to_string_pretty(&result)?);
            bail!("{} orders are not in the state their events imply, e.g. {}", bad.len(), bad[0]);
        }
    }

    if args.json {
        println!("{result}");
    } else {
        print_text(&result);
    }
    Ok(())
}

/// Prints how far the deliveries are, every second, to stderr.
fn progress(run: Arc<Run>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let acked = run.counters.acked.load(Ordering::Relaxed);
            eprintln!("  {acked} acked ({:.0}/s)", acked as f64 / run.started.elapsed().as_secs_f64());
        }
    })
}
