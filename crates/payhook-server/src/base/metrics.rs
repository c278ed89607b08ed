//! Instruments kept in memory and rendered in the Prometheus text format (0.0.4) at `/metrics`.
//!
//! Plain atomics: the ingest hot path pays one relaxed increment for its outcome and two for its latency, and
//! takes no lock. What the database knows (rows by status, the writer's queue and batch sizes) is read at scrape
//! time, from [`Store::stats`] and [`Store::writer_metrics`]. The text is written by hand: a dozen families
//! do not need a metrics library, and the names and labels stay in one file. That is why it is about 700 lines:
//! every family's name, help text and labels, once.

use payhook_store::metrics::{Histogram, HistogramSnapshot, ReadMetrics, WriterMetrics};
use payhook_store::{Outcome, Stats};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

mod auth;
mod held;
mod throughput;
pub(crate) use auth::{AuthMetrics, AuthSnapshot, SURFACES, Surface};
pub(crate) use held::{HELD_SCAN_ROWS, render_held};
pub(crate) use throughput::{Minute, Throughput};

const OUTCOMES: [Outcome; 5] =
    [Outcome::Processed, Outcome::Duplicate, Outcome::Deferred, Outcome::Ignored, Outcome::DeadLettered];

/// Every reason a delivery is refused with 401: `payhook_core::signature::VerifyError::code`, and `replayed` (a
/// signature nonce used before for another body).
pub(crate) const REASONS: [&str; 8] = [
    "missing_header",
    "malformed",
    "stale",
    "mismatch",
    "digest_mismatch",
    "insufficient_coverage",
    "body_mismatch",
    "replayed",
];

/// What asking a provider's API to confirm a delivery (`confirm = "api"`) came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirmed {
    /// The API answered the resource; its events are recorded.
    Answered,
    /// The API has no such resource, or answered something that cannot be read: a dead letter.
    Unreadable,
    /// The API failed, timed out or refused the token: 503, the provider retries.
    Unavailable,
    /// Every confirmation slot of the source was busy: 503, the provider retries.
    Busy,
}

const CONFIRMED: [(Confirmed, &str); 4] = [
    (Confirmed::Answered, "answered"),
    (Confirmed::Unreadable, "unreadable"),
    (Confirmed::Unavailable, "unavailable"),
    (Confirmed::Busy, "busy"),
];

/// Upper bounds of the latency histograms, in microseconds (rendered in seconds): 0.5 ms to 10 s.
const LATENCY_BOUNDS_US: &[u64] = &[
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
    10_000_000,
];

/// Inbox statuses always rendered (0 when absent), so that alerting rules find their series.
const EVENT_STATUSES: [&str; 2] = ["deferred", "dead_lettered"];
/// Outbox statuses always rendered (0 when absent).
const OUTBOX_STATUSES: [&str; 4] = payhook_store::OutboxStatus::NAMES;

/// Per-source instruments.
#[derive(Debug)]
pub struct SourceMetrics {
    outcomes: [AtomicU64; 5],
    verification_failures: [AtomicU64; REASONS.len()],
    confirmations: [AtomicU64; CONFIRMED.len()],
    /// Confirmations waiting for the provider's API now.
    confirming: AtomicU64,
    /// From the request reaching the handler to its answer, whatever the answer, in microseconds.
    ingest_latency_us: Histogram,
}

impl Default for SourceMetrics {
    fn default() -> Self {
        Self {
            outcomes: Default::default(),
            verification_failures: Default::default(),
            confirmations: Default::default(),
            confirming: AtomicU64::new(0),
            ingest_latency_us: Histogram::new(LATENCY_BOUNDS_US),
        }
    }
}

impl SourceMetrics {
    pub(crate) fn recorded(&self, outcome: Outcome) {
        if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
            self.outcomes[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn verification_failed(&self, reason: &str) {
        match REASONS.iter().position(|r| *r == reason) {
            Some(i) => self.verification_failures[i].fetch_add(1, Ordering::Relaxed),
            None => {
                debug_assert!(false, "verification failure reason {reason:?} is not in metrics::REASONS");
                0
            }
        };
    }

    /// Counts a confirmation's outcome.
    pub(crate) fn confirmed(&self, outcome: Confirmed) {
        if let Some(i) = CONFIRMED.iter().position(|(o, _)| *o == outcome) {
            self.confirmations[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a confirmation starting (`true`) or ending (`false`) its request to the provider's API.
    pub(crate) fn confirming(&self, started: bool) {
        if started {
            self.confirming.fetch_add(1, Ordering::Relaxed);
        } else {
            self.confirming.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Confirmations that came to `outcome`.
    pub fn confirmation_count(&self, outcome: &str) -> u64 {
        CONFIRMED.iter().position(|(_, o)| *o == outcome).map_or(0, |i| self.confirmations[i].load(Ordering::Relaxed))
    }

    pub(crate) fn answered(&self, elapsed: std::time::Duration) {
        self.ingest_latency_us.observe(micros(elapsed));
    }

    /// Deliveries recorded with `outcome`.
    pub fn outcome_count(&self, outcome: Outcome) -> u64 {
        OUTCOMES.iter().position(|o| *o == outcome).map_or(0, |i| self.outcomes[i].load(Ordering::Relaxed))
    }

    /// Deliveries refused because their signature failed to verify.
    pub fn verification_failures(&self) -> u64 {
        self.verification_failures.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// The dispatcher's instruments: the latency of each POST to a sink, by sink. A sink added by a reload gets its
/// instruments then; a removed sink keeps its counters (they are counters: a sink added back goes on from them).
#[derive(Debug)]
pub(crate) struct DispatchMetrics {
    sinks: std::sync::RwLock<Vec<SinkInstruments>>,
}

#[derive(Debug)]
struct SinkInstruments {
    name: String,
    latency_us: Histogram,
    /// Broker acknowledgements: `[new, duplicate]` (the broker dropped a re-publish).
    published: [AtomicU64; 2],
}

impl DispatchMetrics {
    pub(crate) fn new<'a>(sinks: impl Iterator<Item = &'a str>) -> Self {
        let this = Self { sinks: std::sync::RwLock::new(Vec::new()) };
        this.add(sinks);
        this
    }

    /// Gives instruments to the sinks among `names` that have none yet.
    pub(crate) fn add<'a>(&self, names: impl Iterator<Item = &'a str>) {
        let mut sinks = self.sinks.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for name in names {
            if !sinks.iter().any(|s| s.name == name) {
                sinks.push(SinkInstruments {
                    name: name.to_owned(),
                    latency_us: Histogram::new(LATENCY_BOUNDS_US),
                    published: Default::default(),
                });
            }
        }
    }

    fn with<T>(&self, f: impl FnOnce(&[SinkInstruments]) -> T) -> T {
        f(&self.sinks.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Counts a broker's acknowledgement of a publish to `sink`, and whether it was a re-publish it dropped.
    pub(crate) fn published(&self, sink: &str, duplicate: bool) {
        self.with(|sinks| {
            if let Some(s) = sinks.iter().find(|s| s.name == sink) {
                s.published[usize::from(duplicate)].fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// Counts one attempt to deliver to `sink` (whatever its outcome) that took `elapsed`.
    pub(crate) fn sent(&self, sink: &str, elapsed: std::time::Duration) {
        self.with(|sinks| {
            if let Some(s) = sinks.iter().find(|s| s.name == sink) {
                s.latency_us.observe(micros(elapsed));
            }
        });
    }
}

/// Configuration reloads: how many were applied and refused, the generation in force and when it was loaded.
#[derive(Debug, Default)]
pub(crate) struct ReloadMetrics {
    /// `[ok, refused]`.
    outcomes: [AtomicU64; 2],
    generation: AtomicU64,
    loaded_at_ms: std::sync::atomic::AtomicI64,
}

impl ReloadMetrics {
    pub(crate) fn new(loaded_at_ms: i64) -> Self {
        let this = Self::default();
        this.loaded_at_ms.store(loaded_at_ms, Ordering::Relaxed);
        this
    }

    pub(crate) fn applied(&self, generation: u64, at_ms: i64) {
        self.outcomes[0].fetch_add(1, Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        self.loaded_at_ms.store(at_ms, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self) {
        self.outcomes[1].fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the reload families in the Prometheus text format.
    pub(crate) fn render_into(&self, out: &mut String) {
        family(out, "payhook_config_reloads_total", "counter", "Configuration reloads, by outcome (ok, refused).");
        for (i, outcome) in ["ok", "refused"].iter().enumerate() {
            let labels = format!("outcome=\"{outcome}\"");
            sample(out, "payhook_config_reloads_total", &labels, self.outcomes[i].load(Ordering::Relaxed));
        }
        family(
            out,
            "payhook_config_generation",
            "gauge",
            "The configuration in force: 0 as started, one more for each reload applied.",
        );
        sample(out, "payhook_config_generation", "", self.generation.load(Ordering::Relaxed));
        family(
            out,
            "payhook_config_loaded_timestamp_seconds",
            "gauge",
            "When the configuration in force was read (start or last applied reload), in Unix seconds.",
        );
        let at = u64::try_from(self.loaded_at_ms.load(Ordering::Relaxed) / 1000).unwrap_or(0);
        sample(out, "payhook_config_loaded_timestamp_seconds", "", at);
    }
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Everything a scrape shows.
pub(crate) struct Scrape<'a, I> {
    /// Sources by name, sorted.
    pub(crate) sources: I,
    pub(crate) dispatch: &'a DispatchMetrics,
    pub(crate) writer: WriterMetrics,
    /// The store's read connections; rendered only when it has some of its own (SQLite).
    pub(crate) reads: ReadMetrics,
    pub(crate) auth: AuthSnapshot,
    /// `None` when the database could not be read: the in-memory families are rendered all the same.
    pub(crate) stats: Option<Stats>,
    /// The database's replication (PostgreSQL); `None` for a store without one, or when it could not be read.
    pub(crate) replication: Option<payhook_store::Replication>,
    pub(crate) now_ms: i64,
}

/// Renders every family.
pub(crate) fn render<'a, I>(scrape: Scrape<'a, I>) -> String
where
    I: Iterator<Item = (&'a str, &'a SourceMetrics)> + Clone,
{
    let mut out = String::with_capacity(8192);
    let sources = scrape.sources;
    family(&mut out, "payhook_deliveries_total", "counter", "Verified deliveries recorded, by source and outcome.");
    for (name, m) in sources.clone() {
        for (i, o) in OUTCOMES.iter().enumerate() {
            let n = m.outcomes[i].load(Ordering::Relaxed);
            let labels = format!("source=\"{}\",outcome=\"{}\"", escape(name), o.as_str());
            sample(&mut out, "payhook_deliveries_total", &labels, n);
        }
    }
    family(
        &mut out,
        "payhook_verification_failures_total",
        "counter",
        "Deliveries refused with 401, by source and reason.",
    );
    for (name, m) in sources.clone() {
        for (i, r) in REASONS.iter().enumerate() {
            let n = m.verification_failures[i].load(Ordering::Relaxed);
            let labels = format!("source=\"{}\",reason=\"{r}\"", escape(name));
            sample(&mut out, "payhook_verification_failures_total", &labels, n);
        }
    }
    family(
        &mut out,
        "payhook_confirmations_total",
        "counter",
        "Deliveries confirmed from the provider's API (confirm = \"api\"), by source and outcome.",
    );
    for (name, m) in sources.clone() {
        for (i, (_, o)) in CONFIRMED.iter().enumerate() {
            let n = m.confirmations[i].load(Ordering::Relaxed);
            let labels = format!("source=\"{}\",outcome=\"{o}\"", escape(name));
            sample(&mut out, "payhook_confirmations_total", &labels, n);
        }
    }
    family(
        &mut out,
        "payhook_confirmations_in_flight",
        "gauge",
        "Confirmations waiting for the provider's API, by source (at most the source's confirm_max_in_flight).",
    );
    for (name, m) in sources.clone() {
        let labels = format!("source=\"{}\"", escape(name));
        sample(&mut out, "payhook_confirmations_in_flight", &labels, m.confirming.load(Ordering::Relaxed));
    }
    family(
        &mut out,
        "payhook_ingest_duration_seconds",
        "histogram",
        "Time from a webhook request reaching its handler to its answer, whatever the answer, by source.",
    );
    for (name, m) in sources {
        let labels = format!("source=\"{}\"", escape(name));
        histogram(&mut out, "payhook_ingest_duration_seconds", &labels, &m.ingest_latency_us.snapshot(), 1e6);
    }
    family(
        &mut out,
        "payhook_dispatch_duration_seconds",
        "histogram",
        "Time of one POST of an outbox row to its sink, whatever the answer, by sink.",
    );
    scrape.dispatch.with(|sinks| {
        for s in sinks {
            let labels = format!("sink=\"{}\"", escape(&s.name));
            histogram(&mut out, "payhook_dispatch_duration_seconds", &labels, &s.latency_us.snapshot(), 1e6);
        }
    });
    family(
        &mut out,
        "payhook_broker_published_total",
        "counter",
        "Publishes a broker sink acknowledged, by sink and outcome (duplicate: the broker dropped a re-publish).",
    );
    scrape.dispatch.with(|sinks| {
        for s in sinks {
            for (i, outcome) in ["new", "duplicate"].iter().enumerate() {
                let labels = format!("sink=\"{}\",outcome=\"{outcome}\"", escape(&s.name));
                sample(&mut out, "payhook_broker_published_total", &labels, s.published[i].load(Ordering::Relaxed));
            }
        }
    });
    let w = &scrape.writer;
    family(&mut out, "payhook_commit_batch_size", "histogram", "Jobs per committed write transaction.");
    histogram(&mut out, "payhook_commit_batch_size", "", &w.batch_sizes, 1.0);
    family(&mut out, "payhook_writer_queue_depth", "gauge", "Jobs waiting for the writer, not yet in a batch.");
    sample(&mut out, "payhook_writer_queue_depth", "", w.queued);
    family(
        &mut out,
        "payhook_writer_queue_capacity",
        "gauge",
        "Jobs the writer queue holds before writes are answered 503.",
    );
    sample(&mut out, "payhook_writer_queue_capacity", "", w.queue_capacity);
    family(&mut out, "payhook_writer_up", "gauge", "1 while the writer takes work.");
    sample(&mut out, "payhook_writer_up", "", u64::from(w.running));
    render_reads(&mut out, &scrape.reads);
    if let Some(wal) = &w.wal {
        render_wal(&mut out, wal);
    }
    if let Some(cache) = &w.page_cache {
        render_page_cache(&mut out, cache);
    }
    if let Some(p) = &w.partitions {
        render_partitions(&mut out, p);
    }
    if let Some(b) = &w.batches {
        render_batches(&mut out, b);
    }
    if let Some(c) = &w.connects {
        render_connects(&mut out, c);
    }
    if let Some(r) = &scrape.replication {
        render_replication(&mut out, r);
    }

    family(
        &mut out,
        "payhook_auth_failures_total",
        "counter",
        "Attempts with a missing, wrong or expired token, by surface (api: /v1, ui: the dashboard's login).",
    );
    for s in SURFACES {
        sample(
            &mut out,
            "payhook_auth_failures_total",
            &format!("surface=\"{}\"", s.as_str()),
            scrape.auth.failures[s.index()],
        );
    }
    family(
        &mut out,
        "payhook_auth_throttled_total",
        "counter",
        "Attempts answered 429 because their client address failed too often, by surface.",
    );
    for s in SURFACES {
        sample(
            &mut out,
            "payhook_auth_throttled_total",
            &format!("surface=\"{}\"", s.as_str()),
            scrape.auth.throttled[s.index()],
        );
    }
    family(&mut out, "payhook_auth_throttle_addresses", "gauge", "Client addresses the authentication throttle holds.");
    sample(&mut out, "payhook_auth_throttle_addresses", "", scrape.auth.addresses);
    family(
        &mut out,
        "payhook_auth_forbidden_total",
        "counter",
        "Authenticated callers refused 403 because their token or identity lacks the route's scope.",
    );
    sample(&mut out, "payhook_auth_forbidden_total", "", scrape.auth.forbidden);
    family(
        &mut out,
        "payhook_auth_identity_ignored_total",
        "counter",
        "Requests carrying server.identity_header from a peer that is not a trusted proxy (the header was ignored).",
    );
    sample(&mut out, "payhook_auth_identity_ignored_total", "", scrape.auth.identity_ignored);

    family(&mut out, "payhook_stats_up", "gauge", "1 when the database answered this scrape's row counts.");
    sample(&mut out, "payhook_stats_up", "", u64::from(scrape.stats.is_some()));
    let Some(stats) = scrape.stats else { return out };
    family(
        &mut out,
        "payhook_events",
        "gauge",
        "Recorded deliveries (inbox rows) by status, deferred and dead-lettered included.",
    );
    for (status, n) in with_required(&stats.events, &EVENT_STATUSES) {
        sample(&mut out, "payhook_events", &format!("status=\"{}\"", escape(&status)), n);
    }
    family(&mut out, "payhook_outbox_rows", "gauge", "Outbox rows by status.");
    for (status, n) in with_required(&stats.outbox_by_status, &OUTBOX_STATUSES) {
        sample(&mut out, "payhook_outbox_rows", &format!("status=\"{}\"", escape(&status)), n);
    }
    let age = |since: Option<i64>| since.map_or(0.0, |t| (scrape.now_ms - t).max(0) as f64 / 1000.0);
    family(
        &mut out,
        "payhook_oldest_deferred_event_age_seconds",
        "gauge",
        "Age of the oldest deferred event (0 when none).",
    );
    let _ = writeln!(out, "payhook_oldest_deferred_event_age_seconds {}", age(stats.oldest_deferred_event_ms));
    family(
        &mut out,
        "payhook_oldest_pending_outbox_age_seconds",
        "gauge",
        "Age of the oldest pending outbox row (0 when none).",
    );
    let _ = writeln!(out, "payhook_oldest_pending_outbox_age_seconds {}", age(stats.oldest_pending_outbox_ms));
    out
}

/// The reads' families: listing pages stopped by the scan bound, and SQLite's reader pool, next to the writer's.
fn render_reads(out: &mut String, r: &ReadMetrics) {
    family(
        out,
        "payhook_list_scans_stopped_total",
        "counter",
        "Listing pages (API, dashboard, CLI, bulk replay) stopped at storage.list_scan_rows examined rows before they \
         found a full page; each answered with a cursor to continue.",
    );
    sample(out, "payhook_list_scans_stopped_total", "", r.list_scans_stopped);
    if r.connections == 0 {
        return;
    }
    family(out, "payhook_read_connections", "gauge", "Read connections the store keeps (storage.read_connections).");
    sample(out, "payhook_read_connections", "", r.connections);
    family(out, "payhook_read_connections_in_use", "gauge", "Read connections running a read now.");
    sample(out, "payhook_read_connections_in_use", "", r.in_use);
    family(out, "payhook_reads_waiting", "gauge", "Reads waiting for a read connection to come free.");
    sample(out, "payhook_reads_waiting", "", r.waiting);
    family(
        out,
        "payhook_reads_cut_off_total",
        "counter",
        "Reads answered 503 at storage.read_timeout_ms, by reason: read_timeout (the query ran too long and was \
         stopped), readers_busy (no read connection came free).",
    );
    sample(out, "payhook_reads_cut_off_total", "reason=\"read_timeout\"", r.timed_out);
    sample(out, "payhook_reads_cut_off_total", "reason=\"readers_busy\"", r.busy);
}

/// `list` sorted by key, with every key of `required` present (0 when absent).
fn with_required(list: &[(String, u64)], required: &[&str]) -> Vec<(String, u64)> {
    let mut all: Vec<(String, u64)> = list.to_vec();
    for r in required {
        if !all.iter().any(|(k, _)| k == r) {
            all.push(((*r).to_owned(), 0));
        }
    }
    all.sort();
    all
}

/// The SQLite WAL: its size against its limit, and the checkpoints that keep it there.
fn render_partitions(out: &mut String, p: &payhook_store::metrics::PartitionMetrics) {
    family(
        out,
        "payhook_postgres_partitions_total",
        "counter",
        "Day partitions of the inbox detached past the key retention, and dropped once their keys were deleted.",
    );
    sample(out, "payhook_postgres_partitions_total", "action=\"detached\"", p.detached);
    sample(out, "payhook_postgres_partitions_total", "action=\"dropped\"", p.dropped);
    family(
        out,
        "payhook_postgres_partition_lock_timeouts_total",
        "counter",
        "Partition creations or detaches given up after storage.partition_lock_timeout_ms, tried again later.",
    );
    sample(out, "payhook_postgres_partition_lock_timeouts_total", "", p.lock_timeouts);
}

/// Batch transactions run again, and given up (their requests answered 503): a failover shows as both.
fn render_batches(out: &mut String, b: &payhook_store::metrics::BatchOutcomes) {
    family(
        out,
        "payhook_postgres_batch_reruns_total",
        "counter",
        "Batch transactions run again: deadlock, serialization failure, connection lost, read-only server.",
    );
    sample(out, "payhook_postgres_batch_reruns_total", "", b.reruns);
    family(out, "payhook_postgres_batches_failed_total", "counter", "Batch transactions given up, answered 503.");
    sample(out, "payhook_postgres_batches_failed_total", "", b.failed);
    family(
        out,
        "payhook_postgres_batches_in_flight",
        "gauge",
        "Batch transactions holding a connection now (at most storage.writers).",
    );
    sample(out, "payhook_postgres_batches_in_flight", "", b.in_flight);
    family(
        out,
        "payhook_postgres_batches_executing",
        "gauge",
        "Of those, the ones running their statements (at most storage.executing_writers); the rest wait for COMMIT.",
    );
    sample(out, "payhook_postgres_batches_executing", "", b.executing);
}

/// Failed connection attempts, and requests refused by the reconnect backoff: a database down, or a failover.
fn render_connects(out: &mut String, c: &payhook_store::metrics::ConnectMetrics) {
    family(
        out,
        "payhook_postgres_connect_failures_total",
        "counter",
        "Attempts to open a database connection that failed.",
    );
    sample(out, "payhook_postgres_connect_failures_total", "", c.failures);
    family(
        out,
        "payhook_postgres_connects_held_back_total",
        "counter",
        "Requests answered 503 at once while the next connection attempt was not due (storage.reconnect_backoff_max_ms).",
    );
    sample(out, "payhook_postgres_connects_held_back_total", "", c.held_back);
}

/// The synchronous standbys the primary counts, when payhook's role may see them (see
/// [`payhook_store::Replication::sync_standbys`]): nothing is rendered rather than a 0 that would be a guess.
fn render_replication(out: &mut String, r: &payhook_store::Replication) {
    let Some(n) = r.sync_standbys else { return };
    family(
        out,
        "payhook_postgres_sync_standbys",
        "gauge",
        "Standbys the primary counts as synchronous (pg_stat_replication sync_state sync or quorum); a 2xx is on a \
         standby only when this is above 0 and synchronous_commit waits for it.",
    );
    sample(out, "payhook_postgres_sync_standbys", "", u64::from(n));
}

fn render_wal(out: &mut String, wal: &payhook_store::metrics::WalMetrics) {
    family(out, "payhook_sqlite_wal_bytes", "gauge", "Size of the SQLite WAL file after the latest checkpoint.");
    sample(out, "payhook_sqlite_wal_bytes", "", wal.wal_bytes);
    family(
        out,
        "payhook_sqlite_wal_limit_bytes",
        "gauge",
        "The WAL's bound: past half of it the writer resets the log, past all of it the checkpointer truncates it.",
    );
    sample(out, "payhook_sqlite_wal_limit_bytes", "", wal.limit_bytes);
    family(out, "payhook_sqlite_checkpoints_total", "counter", "WAL checkpoints run, by mode.");
    sample(out, "payhook_sqlite_checkpoints_total", "mode=\"passive\"", wal.passive);
    sample(out, "payhook_sqlite_checkpoints_total", "mode=\"truncate\"", wal.truncate);
    sample(out, "payhook_sqlite_checkpoints_total", "mode=\"writer\"", wal.writer);
    family(
        out,
        "payhook_sqlite_checkpoints_busy_total",
        "counter",
        "WAL checkpoints that could not finish (readers or a writer in the way; retried at the next tick), by mode.",
    );
    sample(out, "payhook_sqlite_checkpoints_busy_total", "mode=\"passive\"", wal.passive_busy);
    sample(out, "payhook_sqlite_checkpoints_busy_total", "mode=\"truncate\"", wal.truncate_busy);
    sample(out, "payhook_sqlite_checkpoints_busy_total", "mode=\"writer\"", wal.writer_busy);
}

fn render_page_cache(out: &mut String, cache: &payhook_store::metrics::PageCacheMetrics) {
    family(
        out,
        "payhook_sqlite_writer_cache_limit_bytes",
        "gauge",
        "The bound of the SQLite writer's page cache (storage.writer_cache_bytes).",
    );
    sample(out, "payhook_sqlite_writer_cache_limit_bytes", "", cache.limit_bytes);
}

/// The trace export's counters (`crate::base::trace`): zero while export is off.
pub(crate) fn render_trace(out: &mut String) {
    use crate::base::trace::{EXPORT_FAILURES, SPANS_DROPPED, SPANS_EXPORTED};
    use std::sync::atomic::Ordering::Relaxed;
    family(
        out,
        "payhook_trace_spans_dropped_total",
        "counter",
        "Finished spans dropped because the export queue (telemetry.export_queue) was full.",
    );
    sample(out, "payhook_trace_spans_dropped_total", "", SPANS_DROPPED.load(Relaxed));
    family(out, "payhook_trace_spans_exported_total", "counter", "Spans handed to the OTLP exporter.");
    sample(out, "payhook_trace_spans_exported_total", "", SPANS_EXPORTED.load(Relaxed));
    family(
        out,
        "payhook_trace_export_failures_total",
        "counter",
        "OTLP export calls that failed (collector unreachable, refusing or too slow); their spans are lost.",
    );
    sample(out, "payhook_trace_export_failures_total", "", EXPORT_FAILURES.load(Relaxed));
    let (held, bound) = crate::base::trace::recent_traces();
    family(
        out,
        "payhook_trace_recent_contexts",
        "gauge",
        "Span contexts held for the links of later retries and dispatches, by key (a delivery's event and order).",
    );
    sample(out, "payhook_trace_recent_contexts", "", held as u64);
    family(
        out,
        "payhook_trace_recent_contexts_limit",
        "gauge",
        "The most span contexts held for links, by key (telemetry.recent_traces).",
    );
    sample(out, "payhook_trace_recent_contexts_limit", "", bound as u64);
}

/// `payhook_build_info{version, commit} 1`: which build answers, to join with any other series (the Prometheus
/// convention for build information).
pub(crate) fn render_build_info(out: &mut String, build: &crate::base::settings::BuildInfo) {
    family(out, "payhook_build_info", "gauge", "The running build: its version and commit, always 1.");
    let labels = format!("version=\"{}\",commit=\"{}\"", escape(&build.version), escape(&build.commit));
    sample(out, "payhook_build_info", &labels, 1);
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: u64) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// A histogram's `_bucket` (cumulative, `le` in the unit of the family: observations divided by `scale`),
/// `_sum` and `_count` samples.
fn histogram(out: &mut String, name: &str, labels: &str, h: &HistogramSnapshot, scale: f64) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (i, n) in h.counts.iter().enumerate() {
        cumulative += n;
        let le = h.bounds.get(i).map_or_else(|| "+Inf".to_owned(), |b| (*b as f64 / scale).to_string());
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}");
    }
    let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
    let _ = writeln!(out, "{name}_sum{braces} {}", h.sum as f64 / scale);
    let _ = writeln!(out, "{name}_count{braces} {cumulative}");
}

/// A label value as the text format wants it: backslash, double quote and newline escaped.
fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return std::borrow::Cow::Borrowed(value);
    }
    std::borrow::Cow::Owned(value.replace('\\', r"\\").replace('"', "\\\"").replace('\n', r"\n"))
}

#[cfg(test)]
mod tests;
