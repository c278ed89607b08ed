//! payhook-sqlite: the embedded backend. Nothing to install: SQLite is compiled in.
//!
//! - [`SqliteStore`]: implements [`payhook_store::Store`].
//! - `writer`: the single writer thread and its group commit; `kept`: the connection its jobs get, with the
//!   statements of the common path kept prepared.
//! - `ops`: the write transactions (ingest, retry, claim, register).
//! - `audit`: the operator audit trail's appends (alone, or in the job of the action they record) and pruning.
//! - `pool`: the read connections (a small pool beside the writer) and the time limit on every read.
//! - `read`: the read-only queries they run.
//! - `counters`: the row counters behind `stats`, and their recount.
//! - `migrate`: embedded migrations tracked by `PRAGMA user_version`.
//! - `checkpoint`: the checkpointer thread, which keeps the WAL under `wal_limit_bytes`.
//! - `page_cache`: the writer's page cache bound (`writer_cache_bytes`).
//! - `retention`: pruning steps that resume from a persisted cursor and give free pages back;
//!   `order_retention`: the step that deletes settled orders with their outbox rows.
//! - [`compact`]: the offline conversion of an older file to `auto_vacuum = INCREMENTAL`.
//!
//! Durability: WAL, and no request is answered before its commit's WAL frames are on disk: by default the writer
//! runs `synchronous = NORMAL` and a syncer thread `fdatasync`s the WAL after each commit
//! ([`CommitSync::Pipelined`]), or SQLite syncs inside `COMMIT` ([`CommitSync::InCommit`]). So a 2xx survives
//! power loss. Several
//! processes may share one file: each has its own writer, and `BEGIN IMMEDIATE` with `busy_timeout` serializes
//! them; unique keys keep dedup correct across them.

mod audit;
mod billing;
mod checkpoint;
mod context;
mod counters;
mod failpoint;
mod kept;
mod listing;
mod migrate;
mod ops;
mod order_retention;
mod outbox;
mod page_cache;
mod pool;
mod read;
mod retention;
mod tally;
mod writer;

use payhook_core::event::{CustomerId, EventId, OrderId, SourceName, SubscriptionId};
use payhook_core::retry::RetryPolicy;
use payhook_store::{
    Alert, AuditEntry, AuditFilter, AuditRecord, Claim, Claimed, Delivery, Dispatched, EntitlementView, EventFilter,
    EventSummary, EventView, Held, KeyOrder, Listing, NewOrder, NonceClaim, NonceClaimed, OrderView, OutboxFilter,
    OutboxJob, OutboxView, Parsed, PruneRequest, Pruned, Recorded, Recounted, Registered, Replayed, Retried, Routing,
    Stats, Store, StoreError, SubscriptionView,
};
use rusqlite::Connection;

pub use listing::{
    AUDIT_AT_SQL, ListingSql, RECEIVED_SQL, Walk, audit_listing_sql, event_listing_sql, list_audit, list_events,
    list_outbox, outbox_listing_sql,
};
pub use read::STATS_STATEMENTS;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use writer::{WriterHandle, unavailable};

pub use writer::CommitSync;

/// How the SQLite store is run.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// The database file; created when missing.
    pub path: PathBuf,
    /// At most this many jobs share one commit; 1 turns group commit off (one commit per event).
    pub batch_max: usize,
    /// Jobs waiting for the writer beyond this are refused with [`StoreError::Overloaded`].
    pub queue_depth: usize,
    /// How long a writer waits for another process's lock before giving up (the request then gets a 503).
    pub busy_timeout_ms: u64,
    /// Read-only connections that serve reads side by side (at least 1); `/readyz`'s ping has one more of its own.
    pub read_connections: usize,
    /// A read waits at most this long for a free read connection, and its query may then run at most this long
    /// before it is stopped ([`StoreError::ReadersBusy`], [`StoreError::ReadTimeout`]).
    pub read_timeout_ms: u64,
    /// Backoff for deferred events.
    pub retry: RetryPolicy,
    /// How commits are made durable before their requests are answered.
    pub sync: CommitSync,
    /// Which sinks receive which outbox kinds, forwards and alerts.
    pub routing: Routing,
    /// Above this many bytes of WAL the checkpointer resets the log (a `TRUNCATE` checkpoint), and a reset log is
    /// truncated to it (`journal_size_limit`).
    pub wal_limit_bytes: u64,
    /// How long that checkpoint may wait for readers and the writer, in milliseconds; new writes wait meanwhile.
    pub wal_checkpoint_wait_ms: u64,
    /// The writer's page cache holds at most this many bytes of pages (`PRAGMA cache_size`, in whole KiB).
    pub writer_cache_bytes: u64,
    /// Free pages a pruning step returns to the file system at most (files in `auto_vacuum = INCREMENTAL` mode).
    pub vacuum_step_pages: u32,
    /// Rows a listing page examines at most when no index serves its whole filter (a reason substring, two
    /// filters at once); the page then says where it stopped, and the caller pages on.
    pub list_scan_rows: u32,
}

impl SqliteOptions {
    /// Defaults for `path`: group commit of up to 512 jobs, a queue of 4096, 5 s busy timeout, 4 read connections
    /// and a 5 s read time limit, a WAL bounded at 256 MiB with checkpoints waiting at most 100 ms, a writer page
    /// cache of 8 MiB, 1024 pages released per pruning step, listing pages that examine at most 10,000 rows.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            batch_max: 512,
            queue_depth: 4096,
            busy_timeout_ms: 5_000,
            read_connections: 4,
            read_timeout_ms: 5_000,
            retry: RetryPolicy::default(),
            sync: CommitSync::default(),
            routing: Routing::default(),
            wal_limit_bytes: 256 << 20,
            wal_checkpoint_wait_ms: 100,
            writer_cache_bytes: 8 << 20,
            vacuum_step_pages: 1024,
            list_scan_rows: 10_000,
        }
    }
}

/// What [`compact`] did to a database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// Size of the file before, in bytes (its WAL checkpointed first).
    pub bytes_before: u64,
    /// Size of the file after.
    pub bytes_after: u64,
    /// The `auto_vacuum` mode it had before (0 none, 1 full, 2 incremental); it has 2 now.
    pub auto_vacuum_before: u8,
}

/// Rewrites the database file at `path` with `VACUUM` in `auto_vacuum = INCREMENTAL` mode, so that pruning gives
/// pages back to the file system from now on. Files created by this version are in that mode already; older ones
/// are converted here. An offline step: it rewrites the whole file (it needs about the file's size of free disk)
/// and holds the write lock throughout, so stop every process using the file first.
pub fn compact(path: &Path, busy_timeout_ms: u64) -> Result<Compacted, StoreError> {
    if !path.exists() {
        return Err(StoreError::Unavailable(Box::new(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} does not exist", path.display()),
        ))));
    }
    let conn = connect(path, busy_timeout_ms).map_err(unavailable)?;
    let size = |conn: &Connection| -> Result<u64, StoreError> {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).map_err(unavailable)?;
        std::fs::metadata(path).map(|m| m.len()).map_err(|e| StoreError::Unavailable(Box::new(e)))
    };
    let bytes_before = size(&conn)?;
    let auto_vacuum_before: u8 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).map_err(unavailable)?;
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL").map_err(unavailable)?;
    conn.execute_batch("VACUUM").map_err(unavailable)?;
    let bytes_after = size(&conn)?;
    Ok(Compacted { bytes_before, bytes_after, auto_vacuum_before })
}

/// The SQLite store. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct SqliteStore {
    writer: WriterHandle,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    checkpointer: Mutex<Option<checkpoint::Checkpointer>>,
    readers: pool::ReadPool,
    /// `ping`'s own connection, outside the pool: a probe never waits behind reads.
    probe: Arc<Mutex<Connection>>,
    wal: Arc<checkpoint::WalCounters>,
    /// The writer's page cache bound, in bytes (`SqliteOptions::writer_cache_bytes`).
    writer_cache_bytes: u64,
    vacuum_step_pages: u32,
    ctx: context::LiveCtx,
    path: PathBuf,
    /// Rows a listing page examines at most when its index does not serve its whole filter.
    list_scan_rows: u32,
    /// Listing pages that bound stopped short.
    list_scans_stopped: std::sync::atomic::AtomicU64,
}

/// Creates the database file, when there is none yet, readable and writable by its owner only (0600, less what
/// the umask takes): it holds every delivery's raw body and headers. SQLite's unix VFS creates
/// the `-wal` and `-shm` files with the database file's permissions, so they follow. An
/// existing file keeps its mode, which is the operator's; one that other users may read is logged.
fn create_owner_only(path: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let created = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path);
        match created {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mode =
                    std::fs::metadata(path).map_err(|e| StoreError::Unavailable(Box::new(e)))?.permissions().mode();
                if mode & 0o077 != 0 {
                    tracing::warn!(
                        path = %path.display(), mode = format!("{:o}", mode & 0o777),
                        "the database file is readable by other users: chmod 600 it and its -wal and -shm files"
                    );
                }
            }
            Err(e) => return Err(StoreError::Unavailable(Box::new(e))),
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn connect(path: &Path, busy_timeout_ms: u64) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_millis(busy_timeout_ms))?;
    // Takes effect only on a new file, and only before `journal_mode = WAL` writes its first page: pages freed by
    // pruning then go back to the file system in bounded steps (see `retention`). A file with tables keeps its
    // mode (SQLite ignores the pragma) until `compact` converts it.
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database and starts its writer thread.
    pub fn open(options: SqliteOptions) -> Result<Self, StoreError> {
        options.retry.validate().map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        create_owner_only(&options.path)?;
        let mut conn = connect(&options.path, options.busy_timeout_ms).map_err(unavailable)?;
        migrate::run(&mut conn).map_err(unavailable)?;
        let page_size: u64 = conn.pragma_query_value(None, "page_size", |r| r.get(0)).map_err(unavailable)?;
        conn.pragma_update(None, "wal_autocheckpoint", checkpoint::valve_pages(options.wal_limit_bytes, page_size))
            .map_err(unavailable)?;
        let journal_limit = i64::try_from(options.wal_limit_bytes).unwrap_or(i64::MAX);
        conn.pragma_update(None, "journal_size_limit", journal_limit).map_err(unavailable)?;
        page_cache::bound(&conn, options.writer_cache_bytes).map_err(unavailable)?;
        // The writer's sub-journal (the pages a savepoint may have to restore: every job and every effect runs in
        // one) stays in memory: SQLite keeps it there up to 64 KiB and then, by default, moves it to a temporary
        // file, with a system call for every page a job journals after that. `temp_store = MEMORY` keeps it in
        // SQLite's own in-memory journal instead (1 KiB pieces, freed at each job's `RELEASE`): measured against
        // the default under `scripts/bench-ab.sh` (steady), 0.80x the writer's CPU per acknowledged delivery and
        // 0.86x the server's. It grows to the pages of the largest job of a transaction, no more (each job's
        // savepoint is the outermost, and after its `RELEASE` the next job writes from the start), and jobs are
        // bounded (one delivery, a claim of `limit` rows, a retention step of `limit` rows). Only the writer's
        // connection: a large sort on a reader still spills to disk.
        conn.pragma_update(None, "temp_store", "MEMORY").map_err(unavailable)?;
        let mut wal_path = options.path.clone().into_os_string();
        wal_path.push("-wal");
        let wal = Arc::new(checkpoint::WalCounters::default());
        let checkpointer = checkpoint::Checkpointer::spawn(
            connect(&options.path, options.busy_timeout_ms).map_err(unavailable)?,
            checkpoint::INTERVAL,
            checkpoint::WalBound {
                wal_path: PathBuf::from(&wal_path),
                limit_bytes: options.wal_limit_bytes,
                page_size,
                wait_ms: options.wal_checkpoint_wait_ms,
            },
            Arc::clone(&wal),
        )
        .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        let readers = pool::ReadPool::open(
            &options.path,
            options.busy_timeout_ms,
            options.read_connections,
            Duration::from_millis(options.read_timeout_ms.max(1)),
        )?;
        let probe = pool::open_reader(&options.path, options.busy_timeout_ms).map_err(unavailable)?;
        let (writer, join) = writer::spawn(
            conn,
            options.sync,
            Path::new(&wal_path),
            options.queue_depth,
            options.batch_max,
            Arc::clone(&wal),
        )
        .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        Ok(Self {
            writer,
            writer_thread: Mutex::new(Some(join)),
            checkpointer: Mutex::new(Some(checkpointer)),
            readers,
            probe: Arc::new(Mutex::new(probe)),
            wal,
            writer_cache_bytes: options.writer_cache_bytes,
            vacuum_step_pages: options.vacuum_step_pages,
            ctx: context::LiveCtx::new(context::Ctx { retry: options.retry, routing: options.routing }),
            path: options.path,
            list_scan_rows: options.list_scan_rows.max(1),
            list_scans_stopped: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version this build migrates to.
    pub fn schema_version() -> usize {
        migrate::latest()
    }

    /// Stops accepting work, lets the writer commit and answer everything already queued, and waits for the writer
    /// and the checkpointer to finish and close their connections. The threads are joined on the runtime's
    /// blocking pool, never on an async worker thread. A thread that panicked is logged as an error.
    pub async fn shutdown(&self) {
        self.writer.stop();
        let writer = self.writer_thread.lock().ok().and_then(|mut j| j.take());
        let checkpointer = self.checkpointer.lock().ok().and_then(|mut c| c.take());
        let joined = tokio::task::spawn_blocking(move || {
            if let Some(Err(panic)) = writer.map(std::thread::JoinHandle::join) {
                tracing::error!(panic = panic_text(&*panic), "the sqlite writer thread panicked");
            }
            if let Some(Err(panic)) = checkpointer.map(checkpoint::Checkpointer::stop) {
                tracing::error!(panic = panic_text(&*panic), "the sqlite checkpointer thread panicked");
            }
        });
        if let Err(e) = joined.await {
            tracing::error!(error = %e, "waiting for the sqlite threads failed");
        }
    }

    async fn read<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.readers.read(query).await
    }

    /// Counts a listing page the scan bound stopped short.
    fn count_stop<T>(&self, page: &Listing<T>) {
        if page.scan_stopped_before.is_some() {
            self.list_scans_stopped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Never blocks (a store is usually dropped on an async runtime's thread): a store dropped without
/// [`SqliteStore::shutdown`] asks its threads to stop and leaves them to finish on their own. The writer still
/// commits and answers what is queued; the checkpointer ends when its stop channel closes with the store.
impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.writer.stop();
    }
}

/// The message of a thread's panic, when it was a string (as `panic!` and `expect` make it).
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

impl Store for SqliteStore {
    fn ingest(&self, delivery: Delivery) -> impl Future<Output = Result<Recorded, StoreError>> + Send {
        let ctx = self.ctx.current();
        // Encoded here, on the caller's task: the writer thread is the one every delivery waits for.
        let encoded = ops::Encoded::of(&delivery);
        // Traced: the effect is a span of its own, child of the caller's (`payhook.ingest`), around the savepoint.
        let parent = payhook_store::tracing_flag::traced().then(tracing::Span::current);
        self.writer.submit(move |conn| {
            let Some(parent) = parent else { return ops::ingest(conn, &delivery, encoded, &ctx) };
            let order = match delivery.parsed() {
                Parsed::Event(event) => event.order_id().map(|o| o.as_str().to_owned()),
                Parsed::Unparseable { .. } => None,
            };
            let span = tracing::debug_span!(parent: &parent, "payhook.effect",
                payhook.order_id = order.as_deref(), payhook.outcome = tracing::field::Empty);
            let recorded = ops::ingest(conn, &delivery, encoded, &ctx);
            span.record("payhook.outcome", recorded.as_ref().map_or("failed", |r| r.outcome.as_str()));
            recorded
        })
    }

    fn register_order_audited(
        &self,
        order: NewOrder,
        entry: Option<AuditEntry>,
    ) -> impl Future<Output = Result<Registered, StoreError>> + Send {
        self.writer.submit(move |conn| {
            let registered = ops::register_order(conn, &order);
            audit::after(conn, registered, entry.as_ref(), |r| Some(payhook_store::audit::registration_outcome(r)))
        })
    }

    async fn order(&self, id: &OrderId) -> Result<Option<OrderView>, StoreError> {
        let id = id.clone();
        self.read(move |conn| read::order(conn, &id)).await
    }

    async fn event(&self, source: &SourceName, event_id: &EventId) -> Result<Option<EventView>, StoreError> {
        let (source, event_id) = (source.clone(), event_id.clone());
        self.read(move |conn| read::event(conn, &source, &event_id)).await
    }

    fn claim_due(&self, claim: Claim) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + Send {
        self.writer.submit(move |conn| ops::claim_due(conn, &claim))
    }

    fn retry(&self, claimed: Claimed, now_ms: i64) -> impl Future<Output = Result<Retried, StoreError>> + Send {
        let ctx = self.ctx.current();
        self.writer.submit(move |conn| ops::retry(conn, &claimed, now_ms, &ctx))
    }

    async fn stats(&self) -> Result<Stats, StoreError> {
        self.read(|conn| {
            // Test-only slow reads (see `failpoint`): compiled out of release builds.
            failpoint::stall_while("sqlite::stats_stall", conn);
            failpoint::runaway_on("sqlite::stats_runaway", conn)?;
            read::stats(conn)
        })
        .await
    }

    async fn recount(&self) -> Result<Recounted, StoreError> {
        use counters::Step;
        let mut steps = vec![Step::Orders, Step::Outbox];
        steps.extend(self.read(counters::inbox_sources).await?.into_iter().map(Step::Inbox));
        let mut recounted = Recounted::default();
        for step in steps {
            let (counted, kept) = self.read(move |conn| counters::read_step(conn, &step)).await?;
            let drift = Recounted::drift_between(&counted, &kept);
            if !drift.is_empty() {
                let corrections = drift.clone();
                self.writer.submit(move |conn| counters::correct(conn, &corrections)).await?;
            }
            recounted.counted.extend(counted);
            recounted.drift.extend(drift);
        }
        recounted.drift.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(recounted)
    }

    async fn next_due_ms(&self) -> Result<Option<i64>, StoreError> {
        self.read(read::next_due).await
    }

    fn claim_outbox_ordered(
        &self,
        sink: &str,
        claim: Claim,
        order: KeyOrder,
    ) -> impl Future<Output = Result<Vec<OutboxJob>, StoreError>> + Send {
        let sink = sink.to_owned();
        self.writer.submit(move |conn| outbox::claim_outbox(conn, &sink, &claim, order))
    }

    async fn held_outbox(&self, sink: &str, order: KeyOrder, scan_rows: u32) -> Result<Held, StoreError> {
        let sink = sink.to_owned();
        self.read(move |conn| read::held_outbox(conn, &sink, order, scan_rows)).await
    }

    fn finish_outbox(
        &self,
        job: &OutboxJob,
        outcome: Dispatched,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let (ctx, job) = (self.ctx.current(), job.clone());
        self.writer.submit(move |conn| outbox::finish_outbox(conn, &ctx, &job, &outcome, now_ms))
    }

    fn retry_outbox_audited(
        &self,
        id: i64,
        now_ms: i64,
        entry: Option<AuditEntry>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.writer.submit(move |conn| {
            let requeued = outbox::retry_outbox(conn, id, now_ms);
            audit::after(conn, requeued, entry.as_ref(), |r| Some(payhook_store::audit::retry_outbox_outcome(*r)))
        })
    }

    async fn next_outbox_due_ms(&self, sink: &str) -> Result<Option<i64>, StoreError> {
        let sink = sink.to_owned();
        self.read(move |conn| read::next_outbox_due(conn, &sink)).await
    }

    async fn list_outbox(&self, filter: OutboxFilter) -> Result<Listing<OutboxView>, StoreError> {
        let scan_rows = self.list_scan_rows;
        let page = self.read(move |conn| listing::list_outbox(conn, &filter, scan_rows)).await?;
        self.count_stop(&page);
        Ok(page)
    }

    async fn list_events(&self, filter: EventFilter) -> Result<Listing<EventSummary>, StoreError> {
        let scan_rows = self.list_scan_rows;
        let page = self.read(move |conn| listing::list_events(conn, &filter, scan_rows)).await?;
        self.count_stop(&page);
        Ok(page)
    }

    fn replay_audited(
        &self,
        source: &SourceName,
        event_id: &EventId,
        parsed: Parsed,
        now_ms: i64,
        entry: Option<AuditEntry>,
    ) -> impl Future<Output = Result<Replayed, StoreError>> + Send {
        let (ctx, source, event_id) = (self.ctx.current(), source.clone(), event_id.clone());
        self.writer.submit(move |conn| {
            let replayed = ops::replay(conn, &ctx, source.as_str(), event_id.as_str(), &parsed, now_ms);
            audit::after(conn, replayed, entry.as_ref(), payhook_store::audit::replay_outcome)
        })
    }

    fn audit(&self, entries: Vec<AuditEntry>) -> impl Future<Output = Result<(), StoreError>> + Send {
        let appended = (!entries.is_empty()).then(|| self.writer.submit(move |conn| audit::append(conn, &entries)));
        async move {
            match appended {
                Some(appended) => appended.await,
                None => Ok(()),
            }
        }
    }

    async fn list_audit(&self, filter: AuditFilter) -> Result<Listing<AuditRecord>, StoreError> {
        let scan_rows = self.list_scan_rows;
        let page = self.read(move |conn| listing::list_audit(conn, &filter, scan_rows)).await?;
        self.count_stop(&page);
        Ok(page)
    }

    fn prune_audit(&self, before_ms: i64, limit: u32) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.writer.submit(move |conn| audit::prune(conn, before_ms, limit))
    }

    fn raise_alert(&self, alert: Alert) -> impl Future<Output = Result<(), StoreError>> + Send {
        let ctx = self.ctx.current();
        self.writer.submit(move |conn| outbox::raise_alert(conn, &ctx, &alert))
    }

    async fn subscription(&self, id: &SubscriptionId) -> Result<Option<SubscriptionView>, StoreError> {
        let id = id.clone();
        self.read(move |conn| billing::subscription(conn, &id)).await
    }

    async fn entitlements(&self, customer: &CustomerId) -> Result<Vec<EntitlementView>, StoreError> {
        let customer = customer.clone();
        self.read(move |conn| billing::entitlements(conn, &customer)).await
    }

    fn claim_nonce(&self, claim: NonceClaim) -> impl Future<Output = Result<NonceClaimed, StoreError>> + Send {
        self.writer.submit(move |conn| billing::claim_nonce(conn, &claim))
    }

    fn prune(&self, request: PruneRequest) -> impl Future<Output = Result<Pruned, StoreError>> + Send {
        let vacuum_pages = self.vacuum_step_pages;
        self.writer.submit(move |conn| retention::prune(conn, &request, vacuum_pages))
    }

    /// On its own connection, never one of the pool's: it answers while every read connection is busy.
    async fn ping(&self) -> Result<(), StoreError> {
        let probe = Arc::clone(&self.probe);
        tokio::task::spawn_blocking(move || {
            let conn = probe.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            conn.query_row("SELECT 1", [], |_| Ok(())).map_err(unavailable)
        })
        .await
        .map_err(|e| StoreError::Unavailable(Box::new(e)))?
    }

    fn set_routing(&self, routing: payhook_store::Routing) {
        self.ctx.set_routing(routing);
    }

    fn writer_metrics(&self) -> payhook_store::metrics::WriterMetrics {
        payhook_store::metrics::WriterMetrics {
            wal: Some(self.wal.snapshot()),
            page_cache: Some(payhook_store::metrics::PageCacheMetrics { limit_bytes: self.writer_cache_bytes }),
            ..self.writer.metrics()
        }
    }

    fn read_metrics(&self) -> payhook_store::metrics::ReadMetrics {
        let list_scans_stopped = self.list_scans_stopped.load(std::sync::atomic::Ordering::Relaxed);
        payhook_store::metrics::ReadMetrics { list_scans_stopped, ..self.readers.metrics() }
    }
}
