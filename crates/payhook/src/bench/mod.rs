//! `payhook bench`: drive a running payhook the way providers do, and measure it.
//!
//! Why one file of about 1,000 lines: the workload (scenarios, orders, expectations), the delivery loop and the
//! verification share the run's state; the HTTP client, the open loop of `--rate`, the operator probes and the report
//! are modules of their own.
//!
//! Registers the orders, then delivers signed payment (and refund) events in one of four scenarios
//! ([`Scenario`]), signing each attempt at send time. Like a provider it retries on 5xx (honouring `Retry-After`),
//! timeouts and connection errors, never on 4xx. `--verify` then checks every order against what its events imply.
//!
//! Layout: `mod.rs` holds the arguments and the scenarios, `open_loop` the scheduled arrivals of `--rate`, `report`
//! the report, `probes` the operator probes; `http` is the minimal HTTP/1.1 client the deliveries use by default
//! (`--client lean`), so that the load generator leaves the machine's CPU to payhook.

mod cpu;
mod http;
mod open_loop;
mod probes;
mod report;

use crate::config::Config;
use crate::send::{base_url, source};
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use payhook_core::event::OrderAction;
use payhook_core::format::Outgoing;
use payhook_server::SourceSettings;
use report::{per_second, percentiles, print_text};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// payhook's base URL (default: the configured listen address). Several comma-separated URLs (instances
    /// sharing one database) receive the deliveries in turn.
    #[arg(long)]
    pub url: Option<String>,
    /// The configured source to deliver to (its secret signs the requests).
    #[arg(long)]
    pub source: String,
    /// The workload: steady (payments, refunds and duplicates), dup-storm (every event as 16 concurrent identical
    /// deliveries), refund-first (every order refunded, each refund delivered before its payment) or sustained
    /// (fresh events for --duration-secs, reported per second).
    #[arg(long, value_enum, default_value_t = Scenario::Steady)]
    pub scenario: Scenario,
    /// Orders to register; each gets one payment event. For sustained: the block of orders registered ahead of
    /// the deliveries (another block is registered whenever half of it is used).
    #[arg(long, default_value_t = 10_000)]
    pub orders: usize,
    /// Fraction of deliveries that are duplicates of another delivery [default: 0.2; not for dup-storm].
    #[arg(long)]
    pub dup: Option<f64>,
    /// Fraction of orders that also get a refund event [default: 0.1; refund-first refunds every order].
    #[arg(long)]
    pub refund: Option<f64>,
    /// Shuffle the deliveries (refunds may then arrive before their payments). refund-first always shuffles;
    /// sustained delivers each order's events in order.
    #[arg(long)]
    pub shuffle: bool,
    /// Requests in flight at once (dup-storm: rounded down to a multiple of 16, at least 16). With --rate, the cap
    /// on connections in flight.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Open loop: start deliveries at this many per second on a fixed schedule, whether or not earlier ones were
    /// answered, instead of each worker waiting for its answer. For offering a fixed load, e.g. twice the measured
    /// capacity, to see what the server does with more than it can take (its memory, its latency). --concurrency
    /// caps the connections in flight; latency counts from each delivery's scheduled time. Only for steady.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// How long sustained keeps delivering fresh events [default: 30]; only for sustained.
    #[arg(long)]
    pub duration_secs: Option<u64>,
    /// The HTTP client for the deliveries: lean (a minimal keep-alive HTTP/1.1 client, the default for http://
    /// URLs) or reqwest (the default for https://). Registering and verifying orders always use reqwest.
    #[arg(long, value_enum)]
    pub client: Option<ClientKind>,
    /// Per-request timeout in milliseconds (a timeout is retried).
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Attempts per delivery (the first one included) before the benchmark gives up on it, as a provider
    /// eventually does. `--verify` leaves out the orders with a delivery given up: their state is not known.
    #[arg(long, default_value_t = DEFAULT_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempts: u32,
    /// Check afterwards that every order is in the state its events imply, with at most one receipt.
    #[arg(long)]
    pub verify: bool,
    /// Seed for the workload (default: random; printed so a run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// While delivering, scrape `/metrics` every this many milliseconds, as Prometheus would (0: no scraper).
    #[arg(long, default_value_t = 0)]
    pub scrape_ms: u64,
    /// While delivering, read `/v1/stats`, pages of `/v1/events` and `/v1/outbox`, and `/readyz` every this many
    /// milliseconds, as a dashboard and an orchestrator would (0: no readers).
    #[arg(long, default_value_t = 0)]
    pub read_ms: u64,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The process id of the payhook server under test, on this machine: the report then gives its CPU time
    /// (user + system, all threads) per acknowledged delivery, split by thread name.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The name of the database server's processes on this machine (e.g. `postgres`): the report then gives the
    /// CPU time (user + system) of every process of that name per acknowledged delivery while the deliveries ran
    /// (processes that exit meanwhile are not counted, so pooled connections are what it measures).
    #[arg(long, value_name = "NAME")]
    pub database_process: Option<String>,
}

/// What the benchmark delivers, and in which order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Payments, refunds for `--refund` of the orders, `--dup` duplicates, optionally shuffled.
    Steady,
    /// Every event delivered as [`STORM`] identical deliveries, all in flight at once.
    DupStorm,
    /// Every order gets a refund, delivered (and answered) before any delivery of its payment, in a shuffled
    /// stream: every order must end refunded with no receipt.
    RefundFirst,
    /// Fresh events at the given concurrency for `--duration-secs`, with per-second throughput and latency.
    Sustained,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::DupStorm => "dup-storm",
            Scenario::RefundFirst => "refund-first",
            Scenario::Sustained => "sustained",
        }
    }
}

/// Which HTTP client sends the deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClientKind {
    /// `http::Conn`: one keep-alive HTTP/1.1 connection per concurrent request, plain TCP.
    Lean,
    /// reqwest with a connection pool (hyper): TLS, and the client the benchmark used before.
    Reqwest,
}

impl ClientKind {
    fn name(self) -> &'static str {
        match self {
            ClientKind::Lean => "lean",
            ClientKind::Reqwest => "reqwest",
        }
    }
}

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

/// The arguments resolved for the chosen scenario: what actually runs, and what the report repeats.
#[derive(Debug)]
struct Params {
    scenario: Scenario,
    orders: usize,
    dup: f64,
    refund: f64,
    shuffle: bool,
    concurrency: usize,
    /// Deliveries per second of the open loop; None: closed loop.
    rate: Option<f64>,
    duration_secs: Option<u64>,
    client: ClientKind,
    timeout_ms: u64,
    attempts: u32,
    verify: bool,
    seed: u64,
    scrape_ms: u64,
    read_ms: u64,
}

impl Params {
    fn resolve(args: &BenchArgs, urls: &[String]) -> Result<Params> {
        let scenario = args.scenario;
        let name = scenario.name();
        if args.dup.is_some() && scenario == Scenario::DupStorm {
            bail!("--dup: dup-storm delivers every event {STORM} times; it takes no --dup");
        }
        if args.refund.is_some() && scenario == Scenario::RefundFirst {
            bail!("--refund: refund-first refunds every order; it takes no --refund");
        }
        if args.shuffle && scenario == Scenario::Sustained {
            bail!("--shuffle: sustained delivers each order's events in order");
        }
        if args.duration_secs.is_some() && scenario != Scenario::Sustained {
            bail!("--duration-secs is for --scenario sustained, not {name}");
        }
        // dup-storm's identical deliveries are in flight together and refund-first's payments wait for their
        // refunds' answers: neither is a stream of independent arrivals. sustained's length is a time, not a plan.
        if args.rate.is_some() && scenario != Scenario::Steady {
            bail!("--rate is for --scenario steady, not {name}");
        }
        let dup = args.dup.unwrap_or(if scenario == Scenario::DupStorm { 0.0 } else { 0.2 });
        let refund = args.refund.unwrap_or(if scenario == Scenario::RefundFirst { 1.0 } else { 0.1 });
        if !(0.0..1.0).contains(&dup) || !(0.0..=1.0).contains(&refund) {
            bail!("--dup must be in [0, 1) and --refund in [0, 1]");
        }
        let https = urls.iter().any(|u| !u.starts_with("http://"));
        let client = match args.client {
            Some(ClientKind::Lean) if https => bail!("--client lean speaks plain http:// only; use --client reqwest"),
            Some(c) => c,
            None if https => ClientKind::Reqwest,
            None => ClientKind::Lean,
        };
        let concurrency = match scenario {
            Scenario::DupStorm => (args.concurrency / STORM).max(1) * STORM,
            _ => args.concurrency.max(1),
        };
        Ok(Params {
            scenario,
            orders: args.orders.max(1),
            dup,
            refund,
            shuffle: args.shuffle || scenario == Scenario::RefundFirst,
            concurrency,
            rate: args.rate,
            duration_secs: (scenario == Scenario::Sustained).then(|| args.duration_secs.unwrap_or(30).max(1)),
            client,
            timeout_ms: args.timeout_ms,
            attempts: args.attempts,
            verify: args.verify,
            seed: args.seed.unwrap_or_else(|| fastrand::u64(..)),
            scrape_ms: args.scrape_ms,
            read_ms: args.read_ms,
        })
    }

    /// The command line that repeats this run (with its seed), without `--config`, `--url` and output flags.
    fn command(&self, source: &str) -> String {
        let mut c =
            format!("payhook bench --scenario {} --source {source} --orders {}", self.scenario.name(), self.orders);
        if self.scenario != Scenario::DupStorm {
            c += &format!(" --dup {}", self.dup);
        }
        if self.scenario != Scenario::RefundFirst {
            c += &format!(" --refund {}", self.refund);
        }
        if self.shuffle && self.scenario != Scenario::RefundFirst {
            c += " --shuffle";
        }
        if let Some(d) = self.duration_secs {
            c += &format!(" --duration-secs {d}");
        }
        if let Some(rate) = self.rate {
            c += &format!(" --rate {rate}");
        }
        c += &format!(" --concurrency {} --client {}", self.concurrency, self.client.name());
        if self.attempts != DEFAULT_ATTEMPTS {
            c += &format!(" --attempts {}", self.attempts);
        }
        if self.verify {
            c += " --verify";
        }
        if self.scrape_ms > 0 {
            c += &format!(" --scrape-ms {}", self.scrape_ms);
        }
        if self.read_ms > 0 {
            c += &format!(" --read-ms {}", self.read_ms);
        }
        c + &format!(" --seed {}", self.seed)
    }

    fn to_json(&self) -> Value {
        json!({
            "scenario": self.scenario.name(),
            "orders": self.orders,
            "dup": self.dup,
            "refund": self.refund,
            "shuffle": self.shuffle,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "duration_secs": self.duration_secs,
            "client": self.client.name(),
            "timeout_ms": self.timeout_ms,
            "attempts": self.attempts,
            "verify": self.verify,
            "seed": self.seed,
            "scrape_ms": self.scrape_ms,
            "read_ms": self.read_ms,
        })
    }
}

/// `--rate`: a finite number of deliveries per second above 0.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err("a number of deliveries per second above 0".to_owned()),
    }
}

/// The part of payhook's answer the benchmark counts, read without building a JSON tree.
#[derive(serde::Deserialize)]
struct Answer<'a> {
    status: &'a str,
}

#[derive(Debug)]
struct Delivery {
    order: usize,
    event_id: String,
    action: OrderAction,
}

#[derive(Debug, Default)]
struct Counters {
    acked: AtomicUsize,
    rejected: AtomicUsize,
    gave_up: AtomicUsize,
    retried_5xx: AtomicUsize,
    retried_io: AtomicUsize,
    outcomes: [AtomicUsize; 5],
}

/// How one delivery ended, retries included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivered {
    Acked,
    Rejected,
    GaveUp,
}

/// What the deliveries share: the source that signs, the counters and the latency samples.
struct Run {
    src: SourceSettings,
    timeout: Duration,
    attempts: u32,
    started: Instant,
    counters: Counters,
    /// (milliseconds since the start when the answer was read, latency in microseconds), per acked delivery.
    samples: Mutex<Vec<(u32, u32)>>,
    /// When the last delivery was answered, if that is not when the phase returns (sustained stops its order
    /// registration afterwards, which is not part of the delivery rate).
    finished: std::sync::OnceLock<Instant>,
    /// The orders (their indexes) with a delivery given up on: `--verify` cannot know what state they are in.
    gave_up_orders: Mutex<std::collections::BTreeSet<usize>>,
}

/// One connection (lean) or a handle on the shared pool (reqwest), aimed at one of the URLs.
enum Conn {
    Lean { conn: http::Conn, target: Arc<http::Target> },
    Reqwest { client: reqwest::Client, url: reqwest::Url },
}

impl Conn {
    async fn post(&mut self, headers: &[(String, String)], body: &[u8]) -> std::io::Result<http::Response> {
        match self {
            Conn::Lean { conn, target } => conn.post(target, headers, body).await,
            Conn::Reqwest { client, url } => {
                let mut req = client.post(url.clone()).header("content-type", "application/json").body(body.to_vec());
                for (name, value) in headers {
                    req = req.header(name, value);
                }
                let resp = req.send().await.map_err(std::io::Error::other)?;
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let body = resp.bytes().await.map_err(std::io::Error::other)?.to_vec();
                Ok(http::Response { status, retry_after, body })
            }
        }
    }
}

/// Makes the connections of the workers, spreading them over the URLs.
struct Connector {
    client: reqwest::Client,
    lean: Vec<Arc<http::Target>>,
    urls: Vec<reqwest::Url>,
    kind: ClientKind,
}

impl Connector {
    fn conn(&self, j: usize) -> Conn {
        match self.kind {
            ClientKind::Lean => {
                Conn::Lean { conn: http::Conn::new(), target: Arc::clone(&self.lean[j % self.lean.len()]) }
            }
            ClientKind::Reqwest => {
                Conn::Reqwest { client: self.client.clone(), url: self.urls[j % self.urls.len()].clone() }
            }
        }
    }
}

/// Delivers one event like a provider: signs each attempt, retries 5xx (after `Retry-After`, capped), timeouts and
/// IO errors with a growing pause, never a 4xx.
///
/// The latency recorded is that of the answered attempt, or with `scheduled` (the open loop) the time since the
/// delivery was due: waiting for a free connection and earlier attempts then count, as they would for a provider
/// whose events keep arriving, rather than hiding the server's backlog in the client (coordinated omission).
async fn deliver(run: &Run, conn: &mut Conn, body: &[u8], d: &Delivery, scheduled: Option<Instant>) -> Delivered {
    let counters = &run.counters;
    let mut backoff = Duration::from_millis(20);
    for attempt in 1..=run.attempts {
        let headers = run.src.verifier.sign(body, payhook_server::now_ms() / 1000, &d.event_id);
        let t0 = Instant::now();
        let wait = match tokio::time::timeout(run.timeout, conn.post(&headers, body)).await {
            Ok(Ok(resp)) if (200..300).contains(&resp.status) => {
                let micros = scheduled.unwrap_or(t0).elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                let at_ms = run.started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32;
                if let Ok(mut s) = run.samples.lock() {
                    s.push((at_ms, micros));
                }
                counters.acked.fetch_add(1, Ordering::Relaxed);
                let status = serde_json::from_slice::<Answer<'_>>(&resp.body).map(|a| a.status).unwrap_or("");
                if let Some(i) = OUTCOMES.iter().position(|o| *o == status) {
                    counters.outcomes[i].fetch_add(1, Ordering::Relaxed);
                }
                return Delivered::Acked;
            }
            Ok(Ok(resp)) if (400..500).contains(&resp.status) => {
                counters.rejected.fetch_add(1, Ordering::Relaxed);
                return Delivered::Rejected;
            }
            Ok(Ok(resp)) => {
                counters.retried_5xx.fetch_add(1, Ordering::Relaxed);
                resp.retry_after.map(|r| r.min(RETRY_AFTER_CAP))
            }
            Ok(Err(_)) | Err(_) => {
                counters.retried_io.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        if attempt < run.attempts {
            tokio::time::sleep(wait.unwrap_or_default().max(backoff)).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
    counters.gave_up.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut orders) = run.gave_up_orders.lock() {
        orders.insert(d.order);
    }
    Delivered::GaveUp
}

/// refund-first: a payment is sent only once its order's refund has been answered.
struct Gate {
    open: Vec<AtomicBool>,
    notify: Notify,
}

impl Gate {
    fn new(n: usize) -> Gate {
        Gate { open: (0..n).map(|_| AtomicBool::new(false)).collect(), notify: Notify::new() }
    }

    async fn wait(&self, i: usize) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.open[i].load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    fn open(&self, i: usize) {
        self.open[i].store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

/// What `--verify` expects of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Paid, with exactly one receipt.
    Paid,
    /// Refunded, with at most one receipt (the payment may have been applied first).
    Refunded,
    /// Refunded with no receipt: the refund was applied before the payment arrived.
    RefundedNoReceipt,
}

pub async fn run(cfg: Config, args: BenchArgs) -> Result<()> {
    let src = source(&cfg, &args.source)?.clone();
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
        Some(list) => list.split(',').map(|u| base_url(&cfg, Some(u.trim()))).collect(),
        None => vec![base_url(&cfg, None)],
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

/// Registers orders through `/v1/orders`, the way a shop would before its customers pay.
struct Registrar {
    client: reqwest::Client,
    url: String,
    token: String,
    run_id: String,
}

impl Registrar {
    fn order_id(run_id: &str, i: usize) -> String {
        format!("bench-{run_id}-{i}")
    }

    async fn register(&self, concurrency: usize, range: std::ops::Range<usize>) -> Result<()> {
        let (client, url, token, run_id) =
            (self.client.clone(), self.url.clone(), self.token.clone(), self.run_id.clone());
        let start = range.start;
        pool(concurrency, range.len(), move |k| {
            let (client, url, token, id) =
                (client.clone(), url.clone(), token.clone(), Self::order_id(&run_id, start + k));
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
        .await
    }
}

/// The deliveries of a planned scenario (all but sustained), built before the clock starts.
struct Workload {
    unique: Vec<Delivery>,
    bodies: Vec<Vec<u8>>,
    /// Indexes into `unique`, in delivery order (dup-storm: each one is a storm).
    plan: Vec<usize>,
    /// Identical deliveries in flight at once per entry of the plan: 1, or [`STORM`] in dup-storm.
    width: usize,
    expect: Vec<Expect>,
}

impl Workload {
    fn build(p: &Params, rng: &mut fastrand::Rng, run_id: &str, src: &SourceSettings) -> Workload {
        let mut unique: Vec<Delivery> = Vec::new();
        let mut expect = vec![Expect::Paid; p.orders];
        for (i, e) in expect.iter_mut().enumerate() {
            unique.push(Delivery { order: i, event_id: event_id(run_id, "pay", i as u64), action: OrderAction::Pay });
            if rng.f64() < p.refund {
                unique.push(Delivery {
                    order: i,
                    event_id: event_id(run_id, "ref", i as u64),
                    action: OrderAction::Refund,
                });
                *e = if p.scenario == Scenario::RefundFirst { Expect::RefundedNoReceipt } else { Expect::Refunded };
            }
        }
        let total = (unique.len() as f64 / (1.0 - p.dup)).round() as usize;
        let mut plan: Vec<usize> = (0..unique.len()).collect();
        while plan.len() < total {
            plan.push(rng.usize(..unique.len()));
        }
        if p.shuffle {
            rng.shuffle(&mut plan);
        }
        if p.scenario == Scenario::RefundFirst {
            refunds_first(&unique, &mut plan, p.orders);
        }
        let created = payhook_server::now_ms() / 1000;
        let bodies = unique
            .iter()
            .map(|d| src.format.encode(&outgoing(d, &Registrar::order_id(run_id, d.order), created)))
            .collect();
        let width = if p.scenario == Scenario::DupStorm { STORM } else { 1 };
        Workload { unique, bodies, plan, width, expect }
    }

    fn deliveries(&self) -> usize {
        self.plan.len() * self.width
    }
}

fn outgoing<'a>(d: &'a Delivery, order_id: &'a str, created: i64) -> Outgoing<'a> {
    Outgoing { event_id: &d.event_id, action: d.action, order_id, amount_minor: AMOUNT, currency: CURRENCY, created }
}

/// Reorders `plan` so that each order's first delivery is a refund: where a payment (or a copy of it) comes first,
/// it trades places with the order's first refund. Every other delivery keeps its shuffled place.
fn refunds_first(unique: &[Delivery], plan: &mut [usize], orders: usize) {
    let (mut first_pay, mut first_ref) = (vec![usize::MAX; orders], vec![usize::MAX; orders]);
    for (k, &u) in plan.iter().enumerate() {
        let first = if unique[u].action == OrderAction::Refund { &mut first_ref } else { &mut first_pay };
        first[unique[u].order] = first[unique[u].order].min(k);
    }
    for (&pay, &refund) in first_pay.iter().zip(&first_ref) {
        if pay < refund && refund != usize::MAX {
            plan.swap(pay, refund);
        }
    }
}

/// steady, dup-storm and refund-first, closed loop: the workers take the plan's entries in order, each with its own
/// connection(s), until none is left. (steady with `--rate` is [`open_loop::deliver_at_rate`].)
async fn planned(p: &Params, run: &Arc<Run>, connector: &Connector, w: Workload) -> Result<()> {
    let w = Arc::new(w);
    let gate = Arc::new(Gate::new(if p.scenario == Scenario::RefundFirst { p.orders } else { 0 }));
    let next = Arc::new(AtomicUsize::new(0));
    let workers = (p.concurrency / w.width).max(1);
    let mut set = tokio::task::JoinSet::new();
    for worker in 0..workers {
        let mut conns: Vec<Conn> = (0..w.width).map(|j| connector.conn(worker * w.width + j)).collect();
        let (run, w, gate, next) = (Arc::clone(run), Arc::clone(&w), Arc::clone(&gate), Arc::clone(&next));
        set.spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&u) = w.plan.get(k) else { return };
                let (d, body) = (&w.unique[u], &w.bodies[u]);
                let gated = !gate.open.is_empty();
                if gated && d.action == OrderAction::Pay {
                    gate.wait(d.order).await;
                }
                let run = &run;
                futures_util::future::join_all(conns.iter_mut().map(|c| deliver(run, c, body, d, None))).await;
                if gated && d.action == OrderAction::Refund {
                    gate.open(d.order);
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r?;
    }
    Ok(())
}

/// sustained: fresh orders for `duration_secs`, each worker delivering an order's payment, its refund for
/// `refund` of the orders, and a repeat of each for `dup` of the deliveries; orders are registered a block ahead.
/// Returns the deliveries made, what each used order should end as, and how many orders were registered.
async fn sustained(
    p: &Params,
    run: &Arc<Run>,
    connector: &Connector,
    registrar: &Registrar,
) -> Result<(usize, Vec<Expect>, usize)> {
    let deadline = run.started + Duration::from_secs(p.duration_secs.unwrap_or(30));
    let next = Arc::new(AtomicUsize::new(0));
    let registered = Arc::new(AtomicUsize::new(p.orders));
    let stop = Arc::new(AtomicBool::new(false));
    let ahead = {
        let (next, registered, stop) = (Arc::clone(&next), Arc::clone(&registered), Arc::clone(&stop));
        let registrar = Registrar {
            client: registrar.client.clone(),
            url: registrar.url.clone(),
            token: registrar.token.clone(),
            run_id: registrar.run_id.clone(),
        };
        // Registering competes with the deliveries for the server: `--orders` should cover the run, and this
        // only keeps it going (the report says how many orders were registered during the run).
        let (block, helpers) = (p.orders, (p.concurrency / 4).max(4));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let have = registered.load(Ordering::Relaxed);
                if next.load(Ordering::Relaxed) + block / 2 >= have {
                    registrar.register(helpers, have..have + block).await?;
                    registered.store(have + block, Ordering::Release);
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Ok::<(), anyhow::Error>(())
        })
    };
    let (seed, refund, dup) = (p.seed, p.refund, p.dup / (1.0 - p.dup));
    let sent = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    for worker in 0..p.concurrency {
        let mut conn = connector.conn(worker);
        let (run, next, registered, sent) =
            (Arc::clone(run), Arc::clone(&next), Arc::clone(&registered), Arc::clone(&sent));
        let run_id = registrar.run_id.clone();
        set.spawn(async move {
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed);
                while i >= registered.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let order_id = Registrar::order_id(&run_id, i);
                let mut events = vec![(event_id(&run_id, "pay", i as u64), OrderAction::Pay)];
                let mut rng = order_rng(seed, i);
                if rng.f64() < refund {
                    events.push((event_id(&run_id, "ref", i as u64), OrderAction::Refund));
                }
                for (event_id, action) in events {
                    let d = Delivery { order: i, event_id, action };
                    let body = run.src.format.encode(&outgoing(&d, &order_id, payhook_server::now_ms() / 1000));
                    let copies = 1 + usize::from(rng.f64() < dup);
                    for _ in 0..copies {
                        deliver(&run, &mut conn, &body, &d, None).await;
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r?;
    }
    let _ = run.finished.set(Instant::now());
    stop.store(true, Ordering::Relaxed);
    ahead.await??;
    let used = next.load(Ordering::Relaxed);
    let expect =
        (0..used).map(|i| if order_rng(seed, i).f64() < refund { Expect::Refunded } else { Expect::Paid }).collect();
    Ok((sent.load(Ordering::Relaxed) as usize, expect, registered.load(Ordering::Relaxed)))
}

/// The event id of delivery `what` of order `i` in run `run_id`: random-looking as providers' are (`evt_` and 16
/// hex digits of a hash), so that a run's deliveries land all over the inbox's unique key, among the ids stored
/// before, rather than next to each other at one end of it; the same arguments give the same id.
pub(crate) fn event_id(run_id: &str, what: &str, i: u64) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    (run_id, what, i).hash(&mut hasher);
    format!("evt_{:016x}", hasher.finish())
}

/// The random choices of sustained's order `i`, the same when `--verify` asks again.
fn order_rng(seed: u64, i: usize) -> fastrand::Rng {
    fastrand::Rng::with_seed(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// What `--verify` checks: each order's expected state, but for the orders with a delivery given up on.
struct Checks<'a> {
    run_id: &'a str,
    expect: &'a [Expect],
    skipped: &'a std::collections::BTreeSet<usize>,
}

impl Checks<'_> {
    /// The orders to read back, with the state each should be in.
    fn orders(&self) -> Vec<(String, Expect)> {
        (self.expect.iter().enumerate())
            .filter(|(i, _)| !self.skipped.contains(i))
            .map(|(i, e)| (Registrar::order_id(self.run_id, i), *e))
            .collect()
    }
}

/// Reads every order to check back and lists those not in the state their events imply.
async fn verify(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    checks: &Checks<'_>,
    concurrency: usize,
) -> Result<Vec<String>> {
    let bad = Arc::new(Mutex::new(Vec::new()));
    let orders: Arc<[(String, Expect)]> = checks.orders().into();
    let (client, token, b, base) = (client.clone(), token.to_owned(), Arc::clone(&bad), base.to_owned());
    pool(concurrency, orders.len(), move |i| {
        let (client, token, bad) = (client.clone(), token.clone(), Arc::clone(&b));
        let (id, e) = orders[i].clone();
        let url = format!("{base}/v1/orders/{id}");
        async move {
            let v: Value = client.get(&url).bearer_auth(&token).send().await?.json().await?;
            let status = v["status"].as_str().unwrap_or("?");
            let receipts =
                v["outbox"].as_array().map_or(0, |rows| rows.iter().filter(|r| r["kind"] == "order.paid").count());
            let (ok, expected) = match e {
                Expect::Paid => (status == "paid" && receipts == 1, "paid with one receipt"),
                Expect::Refunded => (status == "refunded" && receipts <= 1, "refunded with at most one receipt"),
                Expect::RefundedNoReceipt => (status == "refunded" && receipts == 0, "refunded with no receipt"),
            };
            if !ok && let Ok(mut b) = bad.lock() {
                b.push(format!("{id}: {status} with {receipts} receipts, expected {expected}"));
            }
            Ok(())
        }
    })
    .await?;
    let bad = bad.lock().map(|b| b.clone()).unwrap_or_default();
    Ok(bad)
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

#[cfg(test)]
mod tests {
    use super::event_id;
    use std::collections::BTreeSet;

    /// A run's event ids are its own, the same when asked again, and spread over the whole key space: a run's
    /// deliveries are not written next to each other in the inbox's unique key.
    #[test]
    fn event_ids_are_stable_distinct_and_spread() {
        assert_eq!(event_id("0badf00d", "pay", 7), event_id("0badf00d", "pay", 7));
        let ids: BTreeSet<String> = (0..4096).map(|i| event_id("0badf00d", "pay", i)).collect();
        assert_eq!(ids.len(), 4096);
        assert!(!ids.contains(&event_id("0badf00d", "ref", 7)) && !ids.contains(&event_id("cafebabe", "pay", 7)));
        // Sorted, consecutive orders' ids are far apart: every one of the 256 leading byte values is used.
        let leading: BTreeSet<&str> = ids.iter().map(|id| &id["evt_".len().."evt_".len() + 2]).collect();
        assert_eq!(leading.len(), 256, "{leading:?}");
        assert!(ids.iter().all(|id| id.len() == "evt_".len() + 16 && id.starts_with("evt_")));
    }
}
