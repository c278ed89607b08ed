//! payhook-postgres: the PostgreSQL backend, for running several payhook instances on one database.
//!
//! N stateless instances share one database; unique keys, per-order advisory locks and `SKIP LOCKED` leases
//! coordinate them, and nothing is coordinated in memory. The ledger rules stay in `payhook_core::ledger`: SQL
//! applies a plan and reports when its guard matched nothing, Rust explains why and settles the row in the same
//! transaction.
//!
//! Why one file of about 700 lines: the module map below, the options and the `Store` implementation, whose
//! methods each hand the call to the module that does it; split, one trait's implementation would be scattered.
//!
//! # Layout
//!
//! - [`PgStore`]: implements [`payhook_store::Store`]; [`PgOptions`] says how it runs.
//! - `writer`: group commit. A batcher task drains a bounded queue into batch transactions (at most `writers` in
//!   flight, at most [`MAX_BATCH`] deliveries each, sorted by lock): a batch of distinct deliveries runs as a set of
//!   multi-row statements, any other one delivery at a time, each in its own savepoint; it answers only after
//!   `COMMIT`; batches rolled back by a deadlock or a serialization failure, or whose
//!   connection was lost before `COMMIT`, are run again whole.
//! - `ops`: what each operation sends to the schema's SQL functions, the ledger decisions taken in Rust, the
//!   worker's operations (`claim_due` with `FOR UPDATE SKIP LOCKED`, `retry` under its lease) and `replay`.
//! - `audit`: the operator audit trail's appends (alone, or in the transaction of the action they record) and
//!   pruning, in the one table every instance shares.
//! - `billing`: subscription and invoice effects (decided by `payhook_core::billing` from rows read under their
//!   advisory locks, applied after the batch function recorded them, in the same transaction), the subscription
//!   and entitlement reads, and signature nonce claims.
//! - `outbox`: the dispatchers' claims (`FOR UPDATE SKIP LOCKED` under a lease), outcomes recorded by the lease
//!   holder only, re-queueing dead rows, and alerts (`payhook_raise_alert`, race-free across instances).
//! - `read`: queries and listings; an order and its history, an event and what it caused, come from one snapshot.
//! - `retention`: pruning steps. The inbox is partitioned by day; a day past the key retention is detached and
//!   dropped (its unsettled rows moved to the held partition first, its keys deleted in bounded steps), the held
//!   and default partitions are pruned row by row.
//! - `order_retention`: settled orders with their outbox rows, walked from a persisted cursor.
//! - `counters`: the row counters behind `stats` (deltas appended by triggers, folded into totals) and their
//!   recount.
//! - `pipeline`: sending several statements before reading any answer, in a guaranteed order.
//! - `pool`: deadpool-postgres, per-session settings, and discarding connections left in doubt.
//! - `tls`: libpq's `sslmode` and `sslrootcert` ([`TlsOptions`]) with rustls, and failed handshakes explained
//!   ([`TlsError`]).
//! - `migrate`: embedded migrations (`migrations/*.sql`, with the plpgsql functions and the locking protocol)
//!   under an advisory lock.
//! - `error`: [`PgError`] and its mapping to [`StoreError`].
//!
//! # Routing
//!
//! [`PgOptions::routing`] (from the configuration) decides which sinks get each effect's outbox rows, which
//! sources are forwarded and where alerts go. It is passed into the SQL functions with each call rather than
//! stored in the database, so every instance applies its own configuration, in the effect's transaction.
//!
//! # Reads on a standby
//!
//! With [`PgOptions::read`] (`storage.read_url`), listings (`list_events`, `list_outbox`, `list_audit`) and the counts of
//! `stats` are read from a pool of their own there, a standby typically. They may lag the primary by the
//! replication delay, which an operator's page can afford. Everything else stays on the primary: every write, the
//! claims and leases, and the reads that must see a write just made (an order, an event, a subscription, one
//! outbox row after its retry: [`Store::outbox_row`]). The fold of the counters' deltas is a write and runs on the
//! primary; the counts read on the standby sum the totals with the deltas not folded yet, so they are right
//! whatever the fold has reached there.
//!
//! Bounds: batches hold at most `writers` of the main pool's `pool_size` connections and everything else on the
//! primary at most the rest (`others`); the read pool holds at most `read_pool_size`, and a read routed there
//! waits for one of its connections (at most `pool_wait_ms`, then 503), never for a turn on the primary; the
//! probe has one connection.
//!
//! # Durability
//!
//! A 2xx is sent only after `COMMIT` returned, so it is as durable as the server's `synchronous_commit` makes a
//! commit (`on`, PostgreSQL's default: flushed to the WAL on disk; with synchronous replicas, on them too).
//! payhook does not change that setting. [`Store::replication`] reads what it is and whether a synchronous standby
//! is connected (on the probe's connection); the store logs it when it opens (a warning when a 2xx would not be on
//! a standby), and with [`PgOptions::require_sync_standby`] `/readyz` is not ready unless it is.

mod audit;
mod billing;
mod counters;
mod error;
mod listing;
mod migrate;
mod ops;
mod order_retention;
mod outbox;
mod pipeline;
mod pool;
mod read;
mod retention;
mod tls;
mod writer;

pub use error::PgError;
pub use listing::{
    AUDIT_AT_SQL, ListingSql, RECEIVED_SQL, Walk, audit_listing_sql, event_listing_sql, outbox_listing_sql,
};
pub use order_retention::SCAN_SQL as ORDER_RETENTION_SCAN;
pub use read::STATS_STATEMENTS;
pub use tls::{SslMode, TlsConfigError, TlsError, TlsOptions, TlsProblem};
pub use writer::{BatchFailed, BatchStats};

use crate::pool::Pool;
use payhook_core::event::{CustomerId, EventId, OrderId, SourceName, SubscriptionId};
use payhook_core::retry::RetryPolicy;
use payhook_store::{
    Alert, AuditEntry, AuditFilter, AuditRecord, Claim, Claimed, Delivery, Dispatched, EntitlementView, EventFilter,
    EventSummary, EventView, Held, KeyOrder, Listing, NewOrder, NonceClaim, NonceClaimed, OrderView, OutboxFilter,
    OutboxJob, OutboxView, Parsed, PruneRequest, Pruned, Recorded, Recounted, Registered, Replayed, Retried, Stats,
    Store, StoreError, SubscriptionView,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

/// The most deliveries one batch transaction holds, whatever `batch_max` says. Each delivery is a subtransaction
/// with its own transaction id, and PostgreSQL keeps at most 64 of those per session in shared memory
/// (`PGPROC_MAX_CACHED_SUBXIDS`): beyond that every concurrent snapshot "overflows" and visibility checks go
/// through `pg_subtrans`. Each delivery also holds two lock-table entries (its transaction id and its order's
/// advisory lock) until commit, and the lock table is sized for 64 per session by default.
pub const MAX_BATCH: usize = 64;

/// How the PostgreSQL store is run.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Where to connect: parsed from a `postgres://` URL or a `key=value` string. Its `Debug` hides the password.
    pub config: tokio_postgres::Config,
    /// How to use TLS: `sslmode` and `sslrootcert` of the same string (tokio-postgres's parser knows neither
    /// `verify-ca`, `verify-full` nor `sslrootcert`, so they are taken out before it parses the rest).
    pub tls: TlsOptions,
    /// Connections in the pool, shared by the batch transactions, queries and the retry worker. `/readyz`'s ping has
    /// one more of its own.
    pub pool_size: usize,
    /// Batch transactions in flight at once (each holds one pooled connection); the rest of the pool serves
    /// queries and the worker.
    pub writers: usize,
    /// Of the `writers` batches, how many may be running their statements at once; the others have sent their
    /// `COMMIT` and wait for its flush. 1 (the default) makes the next batch as large as what arrived while the one
    /// before ran; more suit a database machine with cores to spare for one instance's batches.
    pub executing_writers: usize,
    /// The server cancels any statement running longer than this (`statement_timeout`); 0 leaves the server's.
    pub statement_timeout_ms: u64,
    /// How long to wait for a new connection (the server is down or unreachable: answer 503 after this).
    pub connect_timeout_ms: u64,
    /// How long a request waits for a free pooled connection before answering 503.
    pub pool_wait_ms: u64,
    /// At most this many jobs share one transaction (capped at [`MAX_BATCH`]); 1 turns group commit off (one
    /// commit per event).
    pub batch_max: usize,
    /// Jobs waiting for a batch beyond this are refused with [`StoreError::Overloaded`].
    pub queue_depth: usize,
    /// How long creating or detaching an inbox partition waits for its lock on the inbox (both need a short
    /// exclusive lock, and every delivery queues behind a waiting one); given up, the next pruning step tries
    /// again.
    pub partition_lock_timeout_ms: u64,
    /// Backoff for deferred events.
    pub retry: RetryPolicy,
    /// Which sinks receive which outbox kinds, forwards and alerts.
    pub routing: payhook_store::Routing,
    /// Rows a listing page examines at most when no index serves its whole filter (a reason substring, two
    /// filters at once); the page then says where it stopped, and the caller pages on.
    pub list_scan_rows: u32,
    /// `/readyz` is not ready unless a 2xx is acknowledged on a standby: a synchronous standby is connected and
    /// `synchronous_commit` waits for it (see [`payhook_store::Replication::ready`]).
    pub require_sync_standby: bool,
    /// Where listings and the counts of `stats` are read, when not on `config` (a standby, typically reached with
    /// `target_session_attrs=read-only`): a pool of [`PgOptions::read_pool_size`] connections of its own.
    /// Everything else, and every read that must see a write just made, stays on `config`.
    pub read: Option<ReadTarget>,
    /// Connections of the `read` pool; its own bound, beside `pool_size` (reads routed there wait for one of
    /// these, at most `pool_wait_ms`, and take no turn of the main pool's).
    pub read_pool_size: usize,
    /// The longest wait between two attempts to open a connection while they fail (see `pool`): requests that
    /// need a new connection meanwhile are answered [`StoreError::Unavailable`] at once.
    pub reconnect_backoff_max_ms: u64,
}

/// A second place to read from (`storage.read_url`): the connection string parsed as `storage.url` is, TLS
/// included.
#[derive(Debug, Clone)]
pub struct ReadTarget {
    /// Where to connect. Its `Debug` hides the password.
    pub config: tokio_postgres::Config,
    /// How to use TLS: `sslmode` and `sslrootcert` of the same string.
    pub tls: TlsOptions,
}

impl ReadTarget {
    /// Parses `url` as [`PgOptions::new`] does (`sslmode=prefer` unless it says otherwise; a `sslrootcert` file is
    /// read here).
    pub fn new(url: &str) -> Result<Self, PgError> {
        let split = tls::split(url)?;
        let mut config: tokio_postgres::Config = split.rest.parse().map_err(PgError::Url)?;
        let mode = split.mode.as_deref().map(SslMode::parse).transpose()?.unwrap_or(SslMode::Prefer);
        let tls = TlsOptions::new(mode, split.root_cert.map(std::path::PathBuf::from))?;
        config.ssl_mode(mode.wire());
        Ok(Self { config, tls })
    }

    /// Where it connects, for logs and messages: user, hosts and database, never the password.
    pub fn target(&self) -> String {
        target(&self.config)
    }

    /// The TLS it uses, for logs and messages, as [`PgOptions::tls_summary`].
    pub fn tls_summary(&self) -> String {
        if tls::unix_sockets_only(&self.config) { "off (Unix socket)".to_owned() } else { self.tls.to_string() }
    }
}

/// User, hosts and database of `c`, never the password.
fn target(c: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let ports = c.get_ports();
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(dir) => format!("{}:{port}", dir.display()),
            }
        })
        .collect();
    format!("postgres://{}@{}/{}", c.get_user().unwrap_or(""), hosts.join(","), c.get_dbname().unwrap_or(""))
}

impl PgOptions {
    /// Defaults for `url`: a pool of 16 with 4 writers, group commit of up to [`MAX_BATCH`] jobs, a queue of
    /// 4096, 5 s statement and connect timeouts, 1 s for a partition's lock, listing pages that examine at most
    /// 10,000 rows, no synchronous standby required, every read on `url`; `sslmode=prefer` unless the string says
    /// otherwise. A `sslrootcert` file is read here, so that a missing or empty one is found before anything
    /// starts.
    pub fn new(url: &str) -> Result<Self, PgError> {
        let ReadTarget { config, tls } = ReadTarget::new(url)?;
        Ok(Self {
            config,
            tls,
            pool_size: 16,
            writers: Self::default_writers(16),
            executing_writers: 1,
            statement_timeout_ms: 5_000,
            connect_timeout_ms: 5_000,
            pool_wait_ms: 5_000,
            batch_max: MAX_BATCH,
            queue_depth: 4096,
            partition_lock_timeout_ms: 1_000,
            retry: RetryPolicy::default(),
            routing: payhook_store::Routing::default(),
            list_scan_rows: 10_000,
            require_sync_standby: false,
            read: None,
            read_pool_size: 8,
            reconnect_backoff_max_ms: 1_000,
        })
    }

    /// Batch transactions in flight for a pool of `pool_size`: 4, and never more than half the pool.
    ///
    /// Few writers make big batches: measured on 2 cores, 2 to 4 writers sustain the most deliveries per second
    /// and 8 spend about 40 % more database CPU per delivery (BENCHMARKS.md). More only help when the server's
    /// commits are slow (one `fsync` per commit on a slow disk) and the queue keeps more than 4 × 64 waiting.
    pub fn default_writers(pool_size: usize) -> usize {
        (pool_size / 2).clamp(1, 4)
    }

    /// Where it connects, for logs and messages: user, hosts and database, never the password.
    pub fn target(&self) -> String {
        target(&self.config)
    }

    /// Reads listings and the counts of `stats` from `url` (see [`PgOptions::read`]).
    pub fn set_read_url(&mut self, url: &str) -> Result<(), PgError> {
        self.read = Some(ReadTarget::new(url)?);
        Ok(())
    }

    /// Where listings and the counts of `stats` are read, for logs and messages (never the password): the read
    /// URL's target, or `None` when they are read where everything else is.
    pub fn read_target(&self) -> Option<String> {
        self.read.as_ref().map(ReadTarget::target)
    }

    /// The TLS it uses, for logs and messages: the mode and the roots file (`verify-full with sslrootcert
    /// /etc/payhook/ca.pem`), or `off (Unix socket)` when every host is a socket, where the server never speaks
    /// TLS.
    pub fn tls_summary(&self) -> String {
        if tls::unix_sockets_only(&self.config) { "off (Unix socket)".to_owned() } else { self.tls.to_string() }
    }

    /// A batch that has not committed by then is abandoned and its requests answered 503: a little more than
    /// its two round trips can take with every statement at the server's timeout.
    fn batch_deadline(&self) -> Duration {
        let statement = if self.statement_timeout_ms == 0 { 30_000 } else { self.statement_timeout_ms };
        Duration::from_millis(3 * statement + self.connect_timeout_ms)
    }
}

/// Partitions detached and dropped by this store's pruning, and partition locks it gave up on.
#[derive(Debug, Default)]
struct PartitionCounters {
    detached: AtomicU64,
    dropped: AtomicU64,
    lock_timeouts: AtomicU64,
}

/// The PostgreSQL store. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct PgStore {
    pool: Pool,
    writer: writer::Writer,
    /// Connections left to everything but the batches: queries and the retry worker wait here, not in the
    /// pool's queue, so that a burst of them (a worker claiming 128 events, an API client reading orders) never
    /// holds up a batch. Invariant: batches hold at most `writers` connections, the rest at most
    /// `pool_size - writers`.
    others: Arc<Semaphore>,
    ctx: Arc<ops::LiveCtx>,
    /// `ping`'s own pool of one connection, opened when first needed and re-created after a failure: a probe never
    /// waits behind queries and batches for one of `pool`'s.
    probe: Pool,
    /// The pool of [`PgOptions::read`], bounded by its own size; `None` when every read is on `pool`.
    read_pool: Option<Pool>,
    /// See [`PgOptions::partition_lock_timeout_ms`].
    partition_lock_timeout_ms: i32,
    /// What pruning did with the inbox's partitions, for the metrics.
    partitions: PartitionCounters,
    ping_timeout: Duration,
    /// Rows a listing page examines at most when its index does not serve its whole filter.
    list_scan_rows: u32,
    /// Listing pages that bound stopped short.
    list_scans_stopped: std::sync::atomic::AtomicU64,
    /// Counter deltas folded since `counter_deltas` was last vacuumed (see [`counters::fold`]).
    folded_since_vacuum: std::sync::atomic::AtomicU64,
    /// See [`PgOptions::require_sync_standby`].
    require_sync_standby: bool,
}

impl PgStore {
    /// Connects, migrates the schema (the first schema of the `search_path`) and starts the batcher. Must be called
    /// inside a tokio runtime.
    pub async fn open(options: PgOptions) -> Result<Self, StoreError> {
        options.retry.validate().map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        let pool = pool::build(&options)?;
        let probe = pool::build_beside(&PgOptions { pool_size: 1, ..options.clone() }, &pool)?;
        // The same session settings (statement timeout, application_name, connect timeout), on the read target.
        let read_pool = match &options.read {
            Some(read) => Some(pool::build(&PgOptions {
                config: read.config.clone(),
                tls: read.tls.clone(),
                pool_size: options.read_pool_size.max(1),
                ..options.clone()
            })?),
            None => None,
        };
        let pool_size = options.pool_size.max(1);
        let writers = options.writers.clamp(1, pool_size);
        let mut client = pool::get(&pool).await?;
        migrate::run(&mut client).await?;
        drop(client);
        let partition_lock_timeout_ms = i32::try_from(options.partition_lock_timeout_ms).unwrap_or(i32::MAX);
        // Today's and tomorrow's partitions, so that deliveries land in them from the start (the retention task
        // keeps creating them ahead).
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let partitions = PartitionCounters::default();
        if !retention::ensure_partitions(&pool, now_ms, partition_lock_timeout_ms).await? {
            tracing::warn!("today's inbox partition could not be created in time; the next pruning step tries again");
            partitions.lock_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        let ctx =
            Arc::new(ops::LiveCtx::new(ops::Ctx { retry: options.retry.clone(), routing: options.routing.clone() }));
        let writer = writer::Writer::spawn(
            pool.clone(),
            writer::WriterConfig {
                batch_max: options.batch_max.clamp(1, MAX_BATCH),
                queue_depth: options.queue_depth,
                writers,
                executing: options.executing_writers.clamp(1, writers),
                deadline: options.batch_deadline(),
                ctx: Arc::clone(&ctx),
            },
        );
        let store = Self {
            pool,
            writer,
            others: Arc::new(Semaphore::new((pool_size - writers).max(1))),
            ctx,
            probe,
            read_pool,
            partition_lock_timeout_ms,
            partitions,
            ping_timeout: Duration::from_millis(options.connect_timeout_ms.max(1)),
            list_scan_rows: options.list_scan_rows.max(1),
            list_scans_stopped: std::sync::atomic::AtomicU64::new(0),
            folded_since_vacuum: std::sync::atomic::AtomicU64::new(0),
            require_sync_standby: options.require_sync_standby,
        };
        store.log_replication().await;
        if let Some(read) = &options.read {
            tracing::info!(
                target = %read.target(),
                tls = %read.tls_summary(),
                read_pool_size = options.read_pool_size.max(1),
                "postgres: listings and stats counts are read from the read URL"
            );
        }
        Ok(store)
    }

    /// Says once, at start, whether a 2xx will survive the loss of this database machine. Not reading it is no
    /// reason to refuse to start: `/readyz` reads it again (and is not ready without it when it is required).
    async fn log_replication(&self) {
        match read::replication(&self.probe, self.ping_timeout, self.require_sync_standby).await {
            Ok(r) => match r.problem() {
                None => tracing::info!(
                    synchronous_commit = %r.synchronous_commit,
                    synchronous_standby_names = %r.synchronous_standby_names,
                    sync_standbys = ?r.sync_standbys,
                    streaming_standbys = ?r.streaming_standbys,
                    required = r.required,
                    "postgres replication: a 2xx is acknowledged on a synchronous standby"
                ),
                Some(problem) => tracing::warn!(
                    synchronous_commit = %r.synchronous_commit,
                    synchronous_standby_names = %r.synchronous_standby_names,
                    sync_standbys = ?r.sync_standbys,
                    streaming_standbys = ?r.streaming_standbys,
                    in_recovery = r.in_recovery,
                    required = r.required,
                    problem = %problem,
                    "postgres replication: a 2xx survives the loss of this database machine only with a synchronous \
                     standby"
                ),
            },
            Err(e) => tracing::warn!(
                error = %e,
                cause = ?std::error::Error::source(&e),
                required = self.require_sync_standby,
                "postgres replication: its state could not be read"
            ),
        }
    }

    /// Creates the inbox partitions of the day of `now_ms` and of the next day if they are missing, as the store
    /// does when it opens and at every pruning step. False when the lock was not had in time.
    pub async fn ensure_partitions(&self, now_ms: i64) -> Result<bool, StoreError> {
        let created = retention::ensure_partitions(&self.pool, now_ms, self.partition_lock_timeout_ms).await?;
        if !created {
            self.partitions.lock_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        Ok(created)
    }

    /// The schema version this build migrates to.
    pub fn schema_version() -> usize {
        migrate::latest()
    }

    /// What the batcher has done so far.
    pub fn batch_stats(&self) -> BatchStats {
        self.writer.counters.snapshot()
    }

    /// Stops accepting writes, commits and answers everything already queued, then closes the pools.
    pub async fn shutdown(&self) {
        self.writer.shutdown().await;
        self.others.close();
        self.pool.close();
        self.probe.close();
        if let Some(read) = &self.read_pool {
            read.close();
        }
    }

    /// A turn for an operation other than a batch (see `PgStore::others`).
    async fn turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, StoreError> {
        self.others.acquire().await.map_err(|_| StoreError::ShuttingDown)
    }

    /// Where a read that may lag the primary runs (see *Reads on a standby*): the read pool, which bounds itself,
    /// or the main pool with a turn of `others`.
    async fn lagging_read(&self) -> Result<(&Pool, Option<tokio::sync::SemaphorePermit<'_>>), StoreError> {
        match &self.read_pool {
            Some(read) => Ok((read, None)),
            None => Ok((&self.pool, Some(self.turn().await?))),
        }
    }

    /// Counts a listing page the scan bound stopped short.
    fn count_stop<T>(&self, page: &Listing<T>) {
        if page.scan_stopped_before.is_some() {
            self.list_scans_stopped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Store for PgStore {
    fn ingest(&self, delivery: Delivery) -> impl Future<Output = Result<Recorded, StoreError>> + Send {
        let queued = ops::IngestCall::new(delivery, &self.ctx.current().routing).map(|call| self.writer.ingest(call));
        async move { queued?.await }
    }

    fn register_order_audited(
        &self,
        order: NewOrder,
        audit: Option<AuditEntry>,
    ) -> impl Future<Output = Result<Registered, StoreError>> + Send {
        self.writer.register(order, audit)
    }

    async fn order(&self, id: &OrderId) -> Result<Option<OrderView>, StoreError> {
        let _turn = self.turn().await?;
        read::order(&self.pool, id).await
    }

    async fn event(&self, source: &SourceName, event_id: &EventId) -> Result<Option<EventView>, StoreError> {
        let _turn = self.turn().await?;
        read::event(&self.pool, source, event_id).await
    }

    async fn claim_due(&self, claim: Claim) -> Result<Vec<Claimed>, StoreError> {
        let _turn = self.turn().await?;
        ops::claim_due(&self.pool, &claim).await
    }

    async fn retry(&self, claimed: Claimed, now_ms: i64) -> Result<Retried, StoreError> {
        let _turn = self.turn().await?;
        ops::retry(&self.pool, &claimed, now_ms, &self.ctx.current()).await
    }

    async fn stats(&self) -> Result<Stats, StoreError> {
        let turn = self.turn().await?;
        // A write, so on the primary whatever `read_pool` is.
        counters::fold(&self.pool, &self.folded_since_vacuum).await?;
        match &self.read_pool {
            Some(read) => {
                drop(turn);
                read::stats(read).await
            }
            None => read::stats(&self.pool).await,
        }
    }

    async fn recount(&self) -> Result<Recounted, StoreError> {
        let _turn = self.turn().await?;
        counters::recount(&self.pool).await
    }

    async fn next_due_ms(&self) -> Result<Option<i64>, StoreError> {
        let _turn = self.turn().await?;
        read::next_due(&self.pool).await
    }

    async fn claim_outbox_ordered(
        &self,
        sink: &str,
        claim: Claim,
        order: KeyOrder,
    ) -> Result<Vec<OutboxJob>, StoreError> {
        let _turn = self.turn().await?;
        outbox::claim(&self.pool, sink, &claim, order).await
    }

    async fn held_outbox(&self, sink: &str, order: KeyOrder, scan_rows: u32) -> Result<Held, StoreError> {
        let _turn = self.turn().await?;
        outbox::held(&self.pool, sink, order, scan_rows).await
    }

    async fn finish_outbox(&self, job: &OutboxJob, outcome: Dispatched, now_ms: i64) -> Result<bool, StoreError> {
        let _turn = self.turn().await?;
        outbox::finish(&self.pool, &self.ctx.current(), job, &outcome, now_ms).await
    }

    async fn retry_outbox_audited(&self, id: i64, now_ms: i64, audit: Option<AuditEntry>) -> Result<bool, StoreError> {
        let _turn = self.turn().await?;
        outbox::requeue(&self.pool, id, now_ms, audit.as_ref()).await
    }

    async fn next_outbox_due_ms(&self, sink: &str) -> Result<Option<i64>, StoreError> {
        let _turn = self.turn().await?;
        read::next_outbox_due(&self.pool, sink).await
    }

    async fn list_outbox(&self, filter: OutboxFilter) -> Result<Listing<OutboxView>, StoreError> {
        let (pool, _turn) = self.lagging_read().await?;
        let page = listing::list_outbox(pool, &filter, self.list_scan_rows).await?;
        self.count_stop(&page);
        Ok(page)
    }

    /// On the primary, whatever `read_pool` is: it is read right after the row was re-queued.
    async fn outbox_row(&self, id: i64) -> Result<Option<OutboxView>, StoreError> {
        let Some(before) = id.checked_add(1) else { return Ok(None) };
        let filter = OutboxFilter { before: Some(before), limit: 1, ..OutboxFilter::default() };
        let _turn = self.turn().await?;
        let page = listing::list_outbox(&self.pool, &filter, self.list_scan_rows).await?;
        Ok(page.rows.into_iter().next().filter(|row| row.id == id))
    }

    async fn list_events(&self, filter: EventFilter) -> Result<Listing<EventSummary>, StoreError> {
        let (pool, _turn) = self.lagging_read().await?;
        let page = listing::list_events(pool, &filter, self.list_scan_rows).await?;
        self.count_stop(&page);
        Ok(page)
    }

    async fn replay_audited(
        &self,
        source: &SourceName,
        event_id: &EventId,
        parsed: Parsed,
        now_ms: i64,
        audit: Option<AuditEntry>,
    ) -> Result<Replayed, StoreError> {
        let _turn = self.turn().await?;
        ops::replay(&self.pool, &self.ctx.current(), (source, event_id), &parsed, now_ms, audit.as_ref()).await
    }

    async fn audit(&self, entries: Vec<AuditEntry>) -> Result<(), StoreError> {
        let _turn = self.turn().await?;
        audit::append(&self.pool, &entries).await
    }

    /// Read where the other listings are: on the read URL's pool, when there is one.
    async fn list_audit(&self, filter: AuditFilter) -> Result<Listing<AuditRecord>, StoreError> {
        let (pool, _turn) = self.lagging_read().await?;
        let page = listing::list_audit(pool, &filter, self.list_scan_rows).await?;
        self.count_stop(&page);
        Ok(page)
    }

    async fn prune_audit(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _turn = self.turn().await?;
        audit::prune(&self.pool, before_ms, limit).await
    }

    async fn raise_alert(&self, alert: Alert) -> Result<(), StoreError> {
        let _turn = self.turn().await?;
        outbox::raise(&self.pool, &self.ctx.current(), &alert).await
    }

    async fn subscription(&self, id: &SubscriptionId) -> Result<Option<SubscriptionView>, StoreError> {
        let _turn = self.turn().await?;
        billing::subscription(&self.pool, id).await
    }

    async fn entitlements(&self, customer: &CustomerId) -> Result<Vec<EntitlementView>, StoreError> {
        let _turn = self.turn().await?;
        billing::entitlements(&self.pool, customer).await
    }

    async fn claim_nonce(&self, claim: NonceClaim) -> Result<NonceClaimed, StoreError> {
        let _turn = self.turn().await?;
        billing::claim_nonce(&self.pool, &claim).await
    }

    async fn prune(&self, request: PruneRequest) -> Result<Pruned, StoreError> {
        let _turn = self.turn().await?;
        let pruned = retention::prune(&self.pool, &request, self.partition_lock_timeout_ms).await?;
        let p = &self.partitions;
        p.detached.fetch_add(pruned.partitions_detached, Ordering::Relaxed);
        p.dropped.fetch_add(pruned.partitions_dropped, Ordering::Relaxed);
        p.lock_timeouts.fetch_add(pruned.partition_lock_timeouts, Ordering::Relaxed);
        Ok(pruned)
    }

    /// On a connection of its own, outside the pool and its limits: readiness must not look like an outage while
    /// queries and batches hold every pooled connection.
    async fn ping(&self) -> Result<(), StoreError> {
        read::ping(&self.probe, self.ping_timeout).await
    }

    /// On the probe's connection and within the ping's bound, like [`PgStore::ping`], in one round trip.
    async fn replication(&self) -> Result<Option<payhook_store::Replication>, StoreError> {
        read::replication(&self.probe, self.ping_timeout, self.require_sync_standby).await.map(Some)
    }

    fn requires_sync_standby(&self) -> bool {
        self.require_sync_standby
    }

    fn set_routing(&self, routing: payhook_store::Routing) {
        self.ctx.set_routing(routing);
    }

    fn writer_metrics(&self) -> payhook_store::metrics::WriterMetrics {
        let p = &self.partitions;
        let partitions = payhook_store::metrics::PartitionMetrics {
            detached: p.detached.load(Ordering::Relaxed),
            dropped: p.dropped.load(Ordering::Relaxed),
            lock_timeouts: p.lock_timeouts.load(Ordering::Relaxed),
        };
        let mut connects = self.pool.connect_metrics();
        // The probe shares the main pool's backoff and its counters; the read pool has its own.
        if let Some(read) = &self.read_pool {
            let m = read.connect_metrics();
            (connects.failures, connects.held_back) =
                (connects.failures + m.failures, connects.held_back + m.held_back);
        }
        payhook_store::metrics::WriterMetrics {
            partitions: Some(partitions),
            connects: Some(connects),
            ..self.writer.metrics()
        }
    }

    fn read_metrics(&self) -> payhook_store::metrics::ReadMetrics {
        let list_scans_stopped = self.list_scans_stopped.load(std::sync::atomic::Ordering::Relaxed);
        payhook_store::metrics::ReadMetrics { list_scans_stopped, ..Default::default() }
    }
}
