//! The flags of `payhook-bench bench`, and their resolution for the chosen scenario.

use super::{DEFAULT_ATTEMPTS, STORM};
use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

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
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn name(self) -> &'static str {
        match self {
            ClientKind::Lean => "lean",
            ClientKind::Reqwest => "reqwest",
        }
    }
}

/// The arguments resolved for the chosen scenario: what actually runs, and what the report repeats.
#[derive(Debug)]
pub(super) struct Params {
    pub(super) scenario: Scenario,
    pub(super) orders: usize,
    pub(super) dup: f64,
    pub(super) refund: f64,
    pub(super) shuffle: bool,
    pub(super) concurrency: usize,
    /// Deliveries per second of the open loop; None: closed loop.
    pub(super) rate: Option<f64>,
    pub(super) duration_secs: Option<u64>,
    pub(super) client: ClientKind,
    pub(super) timeout_ms: u64,
    pub(super) attempts: u32,
    pub(super) verify: bool,
    pub(super) seed: u64,
    pub(super) scrape_ms: u64,
    pub(super) read_ms: u64,
}

impl Params {
    pub(super) fn resolve(args: &BenchArgs, urls: &[String]) -> Result<Params> {
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
    pub(super) fn command(&self, source: &str) -> String {
        let mut c = format!(
            "payhook-bench bench --scenario {} --source {source} --orders {}",
            self.scenario.name(),
            self.orders
        );
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

    pub(super) fn to_json(&self) -> Value {
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
