//! The writer thread: one per process, fed by a bounded queue, committing jobs in batches (group commit).
//!
//! A durable commit costs an fsync. The writer takes the first waiting job, drains whatever else is already
//! queued (up to `batch_max`), runs every job in its own `SAVEPOINT` inside one `BEGIN IMMEDIATE` transaction,
//! commits once, and only then answers every job. Under light load a batch is one job, so latency never gets
//! worse; under heavy load one fsync is shared by hundreds of requests.
//!
//! With the pipelined syncer, a commit made while the previous one still waits for its `fdatasync` would wait for
//! the next one anyway. So the writer commits when the syncer is idle: until then it keeps the transaction open
//! and runs what arrives in it (up to `batch_max`), and the syncer wakes it when it has answered everything handed
//! to it. One commit per sync instead of several writes the pages every delivery shares (the ends of the inbox,
//! its payloads, the outbox and their indexes) once per sync, not once per commit.
//!
//! Invariant: a job's reply is sent only after the commit that made its work durable (or with an error, in which
//! case none of its work is durable).

use crate::checkpoint::{self, WalCounters};
use crate::failpoint::fires;
use crate::kept::WriterConn;
use crate::tally;
use payhook_store::StoreError;
use payhook_store::metrics::{BATCH_SIZE_BOUNDS, Histogram, WriterMetrics};
use rusqlite::Connection;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::{Notify, mpsc, oneshot};

/// Why a batch is not durable.
pub(crate) type BatchError = Arc<dyn std::error::Error + Send + Sync>;

/// Called with `None` once the batch is durable, or with the reason it is not.
pub(crate) type Reply = Box<dyn FnOnce(Option<&BatchError>) + Send>;

/// A unit of work for the writer.
pub(crate) trait Job: Send {
    /// Runs inside the batch transaction and returns what to do once the batch is settled.
    fn run(self: Box<Self>, conn: &WriterConn<'_>) -> Reply;
    /// Settles the job without running it (no transaction could be started).
    fn fail(self: Box<Self>, error: BatchError);
    /// Links the span of the request that queued the job (if traced) to the span of the batch it runs in: one
    /// batch serves many requests, so the batch is a link of each, not a parent.
    fn link(&self, batch: &tracing::Span);
    /// Whether the request that queued the job is traced (its span is recorded).
    fn traced(&self) -> bool;
}

struct Task<T, F> {
    work: F,
    reply: oneshot::Sender<Result<T, StoreError>>,
    /// The caller's span when traces are exported (`payhook_store::tracing_flag`), else none.
    span: tracing::Span,
}

impl<T, F> Job for Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&WriterConn<'_>) -> Result<T, StoreError> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &WriterConn<'_>) -> Reply {
        let Task { work, reply, span: _ } = *self;
        let result = in_savepoint(conn, work);
        Box::new(move |commit_error| {
            let answer = match (result, commit_error) {
                (Ok(value), None) => Ok(value),
                (Ok(_), Some(e)) => Err(StoreError::Unavailable(Box::new(CommitFailed(e.clone())))),
                (Err(e), _) => Err(e),
            };
            // The requester may have gone away (client disconnected); the outcome stands regardless.
            let _ = reply.send(answer);
        })
    }

    fn fail(self: Box<Self>, error: BatchError) {
        let _ = self.reply.send(Err(StoreError::Unavailable(Box::new(CommitFailed(error)))));
    }

    fn link(&self, batch: &tracing::Span) {
        if let Some(id) = batch.id() {
            self.span.follows_from(id);
        }
    }

    fn traced(&self) -> bool {
        !self.span.is_none()
    }
}

pub(crate) enum Msg {
    Job(Box<dyn Job>),
    /// Finish what is queued, then stop.
    Stop,
}

/// Sending side of the writer queue.
#[derive(Clone)]
pub(crate) struct WriterHandle {
    tx: mpsc::Sender<Msg>,
    /// Jobs per committed batch, recorded by the writer thread.
    batch_sizes: Arc<Histogram>,
}

impl std::fmt::Debug for WriterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterHandle").field("capacity", &self.tx.capacity()).finish()
    }
}

impl WriterHandle {
    /// Queues `work` to run in its own savepoint; resolves after the batch holding it is settled. A full queue is
    /// answered at once with [`StoreError::Overloaded`]: load is shed, never queued without bound.
    pub(crate) fn submit<T, F>(&self, work: F) -> impl Future<Output = Result<T, StoreError>> + Send + use<T, F>
    where
        T: Send + 'static,
        F: FnOnce(&WriterConn<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel();
        let span = payhook_store::tracing_flag::current();
        let job: Box<dyn Job> = Box::new(Task { work, reply: reply_tx, span });
        let queued = match self.tx.try_send(Msg::Job(job)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(StoreError::Overloaded),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(StoreError::ShuttingDown),
        };
        async move {
            queued?;
            reply_rx.await.map_err(|_| StoreError::ShuttingDown)?
        }
    }

    /// The queue and the batches so far. The queue closes when the writer stops (asked to, or gone).
    pub(crate) fn metrics(&self) -> WriterMetrics {
        WriterMetrics {
            running: !self.tx.is_closed(),
            queued: (self.tx.max_capacity() - self.tx.capacity()) as u64,
            queue_capacity: self.tx.max_capacity() as u64,
            batch_sizes: self.batch_sizes.snapshot(),
            wal: None,
            page_cache: None,
            partitions: None,
            batches: None,
            connects: None,
        }
    }

    /// Asks the writer to finish the queued jobs and stop; returns at once.
    pub(crate) fn stop(&self) {
        if let Err(mpsc::error::TrySendError::Full(stop)) = self.tx.try_send(Msg::Stop) {
            // The queue is full, so the writer is busy and will make room. The stop must still get in: the caller
            // is about to join the writer, which would otherwise wait forever for a message. `blocking_send`
            // panics inside an async runtime, where stores are often dropped, so wait on a helper thread.
            let tx = self.tx.clone();
            let spawned = std::thread::Builder::new().name("payhook-sqlite-stop".into()).spawn(move || {
                let _ = tx.blocking_send(stop);
            });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "could not queue the sqlite writer's stop");
            }
        }
    }
}

/// The cause kept when a batch's commit failed.
#[derive(Debug, thiserror::Error)]
#[error("the batch commit failed: {0}")]
pub(crate) struct CommitFailed(BatchError);

/// Runs one SQL statement the writer keeps prepared: savepoints and transaction control run for every job, and
/// preparing them each time would cost more than the work they frame.
pub(crate) fn exec(conn: &WriterConn<'_>, sql: &'static str) -> rusqlite::Result<()> {
    conn.kept(sql, |s| s.execute([])).map(|_| ())
}

/// Rolls back to savepoint `name` and releases it.
pub(crate) fn rollback_to(
    conn: &WriterConn<'_>,
    rollback: &'static str,
    release: &'static str,
) -> rusqlite::Result<()> {
    exec(conn, rollback)?;
    exec(conn, release)
}

/// Runs `work` inside `SAVEPOINT job`: its failure rolls back its own writes only, never its batch-mates'.
fn in_savepoint<T>(
    conn: &WriterConn<'_>,
    work: impl FnOnce(&WriterConn<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mark = tally::mark();
    exec(conn, "SAVEPOINT job").map_err(unavailable)?;
    let result = work(conn);
    if conn.is_autocommit() {
        // SQLite aborted the whole transaction (disk full, IO error): the batch loop notices and retries the rest.
        return result;
    }
    let end = if result.is_ok() {
        exec(conn, "RELEASE job")
    } else {
        tally::undo(mark);
        rollback_to(conn, "ROLLBACK TO job", "RELEASE job")
    };
    match end {
        Ok(()) => result,
        Err(e) => Err(unavailable(e)),
    }
}

pub(crate) fn unavailable(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

/// When a committed batch becomes durable, and so when its requests are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitSync {
    /// `synchronous = NORMAL` for the writer, and a syncer thread `fdatasync`s the WAL file after each commit
    /// before answering that commit's requests. The writer starts the next batch while the previous one is being
    /// synced, so fsync latency no longer caps throughput; durability is the same as `synchronous = FULL`: no
    /// request is answered before the WAL frames of its commit are on disk.
    #[default]
    Pipelined,
    /// `synchronous = FULL`: SQLite syncs inside `COMMIT`, and the writer waits for it.
    InCommit,
}

/// A batch whose commit has returned, waiting to be made durable and answered.
struct Settled {
    replies: Vec<Reply>,
    outcome: Option<BatchError>,
}

/// Starts the writer thread on `conn` (and, when pipelined, its syncer thread for the WAL file at `wal_path`).
pub(crate) fn spawn(
    conn: Connection,
    sync: CommitSync,
    wal_path: &std::path::Path,
    queue_depth: usize,
    batch_max: usize,
    wal_counters: Arc<WalCounters>,
) -> std::io::Result<(WriterHandle, std::thread::JoinHandle<()>)> {
    let syncer = match sync {
        CommitSync::InCommit => None,
        CommitSync::Pipelined => {
            let wal = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(wal_path)?;
            conn.pragma_update(None, "synchronous", "NORMAL").map_err(std::io::Error::other)?;
            Some(wal)
        }
    };
    let (tx, rx) = mpsc::channel(queue_depth.max(1));
    let batch_sizes = Arc::new(Histogram::new(BATCH_SIZE_BOUNDS));
    let sizes = Arc::clone(&batch_sizes);
    let join = std::thread::Builder::new()
        .name("sqlite-writer".into())
        .spawn(move || run(conn, rx, batch_max.max(1), syncer, &sizes, &wal_counters))?;
    Ok((WriterHandle { tx, batch_sizes }, join))
}

fn run(
    conn: Connection,
    mut rx: mpsc::Receiver<Msg>,
    batch_max: usize,
    wal: Option<std::fs::File>,
    batch_sizes: &Histogram,
    wal_counters: &WalCounters,
) {
    let owned = conn;
    let conn = WriterConn::new(&owned);
    // Where this writer's failpoints apply (see `crate::failpoint`).
    let scope = conn.path().unwrap_or_default().to_owned();
    if let Err(e) = tally::install(&conn) {
        // The triggers stay on and keep the counters, at their cost.
        tracing::warn!(error = %e, "cannot turn the writer's triggers off; they keep the counters");
    }
    let syncer = match wal.map(|wal| start_syncer(wal, scope.clone())).transpose() {
        Ok(s) => s,
        Err(e) => {
            // Without the syncer nothing could ever be answered: fall back to syncing in COMMIT.
            tracing::error!(error = %e, "cannot start the WAL syncer; using synchronous = FULL");
            let _ = conn.pragma_update(None, "synchronous", "FULL");
            None
        }
    };
    let settle = |settled: Settled| match &syncer {
        Some(s) => {
            s.in_flight.fetch_add(1, Ordering::AcqRel);
            if let Err(std::sync::mpsc::SendError(settled)) = s.tx.send(settled) {
                s.in_flight.fetch_sub(1, Ordering::AcqRel);
                answer(settled.replies, Some(syncer_gone()), &scope);
            }
        }
        None => answer(settled.replies, settled.outcome, &scope),
    };
    // Waits for the queue, or for the queue and the syncer at once, on this thread.
    let waiter = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "the sqlite writer cannot wait for its queue; it stops");
            return;
        }
    };
    // Jobs taken from the queue and not yet run, and the transaction they run in.
    let mut queued: VecDeque<Box<dyn Job>> = VecDeque::with_capacity(batch_max);
    let mut open: Option<Open> = None;
    let mut stopping = false;
    loop {
        // Whatever is queued, without waiting, as far as the open transaction has room.
        let held = open.as_ref().map_or(0, |o| o.replies.len());
        while held + queued.len() < batch_max {
            match rx.try_recv() {
                Ok(msg) => take(msg, &mut queued, &mut rx, &mut stopping),
                Err(_) => break,
            }
        }
        // Run it, each job in its savepoint of the open transaction (begun if none is).
        while let Some(job) = queued.pop_front() {
            let batch = match open.as_mut() {
                Some(batch) => batch,
                None => match begin(&conn) {
                    Ok(batch) => open.insert(batch),
                    Err(e) => {
                        // The database is locked beyond busy_timeout or unreachable: every job in hand fails, and
                        // its requester answers 503 so that the provider retries.
                        tracing::warn!(error = %e, "sqlite writer could not begin a transaction");
                        job.fail(e.clone());
                        queued.drain(..).for_each(|job| job.fail(e.clone()));
                        break;
                    }
                },
            };
            if job.traced() {
                // The batch is a span only when a traced request is in it, from the first such job to the COMMIT.
                if batch.span.is_none() {
                    batch.span = tracing::debug_span!(parent: None, "payhook.store.batch", db.system.name = "sqlite",
                        payhook.batch.size = tracing::field::Empty);
                }
                job.link(&batch.span);
            }
            batch.replies.push(job.run(&conn));
            if conn.is_autocommit() {
                // SQLite rolled the transaction back on its own: everything before this point is lost, and the
                // jobs still queued go into a new transaction.
                let aborted = open.take().expect("the transaction the job ran in");
                tally::discard();
                settle(Settled { replies: aborted.replies, outcome: Some(transaction_aborted()) });
            }
        }
        let Some(batch) = open.as_ref() else {
            // Nothing in hand: wait for work. `None` once the queue is closed and drained, or every handle is gone.
            match waiter.block_on(rx.recv()) {
                Some(msg) => take(msg, &mut queued, &mut rx, &mut stopping),
                None => break,
            }
            continue;
        };
        // The queue is empty or the transaction full. While the previous commit waits for its `fdatasync`, one
        // made now would wait for the next one anyway: keep the transaction open and add what arrives meanwhile,
        // so that one commit (its WAL frames, the pages every delivery shares) serves all of it.
        if let Some(s) = syncer.as_ref().filter(|s| s.busy())
            && batch.replies.len() < batch_max
            && !stopping
        {
            let arrived = waiter.block_on(async {
                tokio::select! {
                    msg = rx.recv() => Some(msg),
                    () = s.idle.notified() => None,
                }
            });
            match arrived {
                Some(Some(msg)) => take(msg, &mut queued, &mut rx, &mut stopping),
                Some(None) => stopping = true,
                None => {}
            }
            continue;
        }
        let batch = open.take().expect("checked above");
        commit(&conn, batch, &settle, batch_sizes);
        // After the batch is handed on, so that a reset delays the next batch, not this one's answers.
        checkpoint::reset_if_asked(&conn, wal_counters);
    }
    if let Some(s) = syncer {
        drop(s.tx);
        let _ = s.join.join();
    }
    tracing::debug!("sqlite writer stopped");
}

/// Files one message from the queue: a job joins `queued`; a stop closes the queue, refusing new work while
/// everything already accepted is still run.
fn take(msg: Msg, queued: &mut VecDeque<Box<dyn Job>>, rx: &mut mpsc::Receiver<Msg>, stopping: &mut bool) {
    match msg {
        Msg::Job(job) => queued.push_back(job),
        Msg::Stop => {
            *stopping = true;
            rx.close();
        }
    }
}

fn syncer_gone() -> BatchError {
    Arc::new(std::io::Error::other("the WAL syncer stopped"))
}

fn transaction_aborted() -> BatchError {
    Arc::new(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
        Some("transaction aborted by the database".into()),
    ))
}

/// Answers every request of a settled batch. Failpoint `sqlite::after_commit` stands for a crash between the
/// durable commit and the answers: the requests get an error although their work is stored.
fn answer(replies: Vec<Reply>, outcome: Option<BatchError>, scope: &str) {
    let outcome = match outcome {
        None if fires("sqlite::after_commit", scope) => {
            Some(Arc::new(std::io::Error::other("failpoint sqlite::after_commit")) as BatchError)
        }
        outcome => outcome,
    };
    for reply in replies {
        reply(outcome.as_ref());
    }
}

/// The syncer thread, its hand-off, how many committed batches it holds that are not yet answered, its word to the
/// writer that it has answered all of them, and whether its thread has ended.
struct Syncer {
    tx: std::sync::mpsc::SyncSender<Settled>,
    join: std::thread::JoinHandle<()>,
    in_flight: Arc<AtomicUsize>,
    idle: Arc<Notify>,
    gone: Arc<AtomicBool>,
}

impl Syncer {
    /// Whether a commit handed over is still waiting for its `fdatasync`. A syncer that is gone is never busy: the
    /// writer then commits at once, and the hand-off answers every request with the error that it stopped.
    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0 && !self.gone.load(Ordering::Acquire)
    }
}

/// Marks the syncer gone and wakes the writer when the syncer's thread ends, however it ends (a panic included), so
/// that a transaction held open for it commits.
struct WakeOnExit {
    gone: Arc<AtomicBool>,
    idle: Arc<Notify>,
}

impl Drop for WakeOnExit {
    fn drop(&mut self) {
        self.gone.store(true, Ordering::Release);
        self.idle.notify_one();
    }
}

/// Committed batches waiting for the syncer's next `fdatasync`, at most. The syncer takes all of them at once, so
/// a few are enough to keep it busy; the bound is what makes a stalled `fdatasync` stop the writer, so that its own
/// bounded queue fills and requests are shed with 503 (`storage.queue_depth`, `payhook_writer_queue_depth`)
/// instead of waiting, in an unbounded hand-off, for a disk that does not answer.
const SYNC_QUEUE_BATCHES: usize = 8;

/// The syncer: takes every batch committed since its last sync, syncs the WAL once for all of them, answers them.
/// When it has answered everything handed to it, it wakes the writer (`idle`), so that a transaction held open for
/// it commits.
fn start_syncer(wal: std::fs::File, scope: String) -> std::io::Result<Syncer> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Settled>(SYNC_QUEUE_BATCHES);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let idle = Arc::new(Notify::new());
    let gone = Arc::new(AtomicBool::new(false));
    let (pending, wake, exited) = (Arc::clone(&in_flight), Arc::clone(&idle), Arc::clone(&gone));
    let join = std::thread::Builder::new().name("sqlite-syncer".into()).spawn(move || {
        let _wake_on_exit = WakeOnExit { gone: exited, idle: Arc::clone(&wake) };
        while let Ok(first) = rx.recv() {
            let mut group = vec![first];
            group.extend(rx.try_iter());
            let synced = if group.iter().any(|s| s.outcome.is_none()) {
                let started = std::time::Instant::now();
                crate::failpoint::stall_while_set("sqlite::fsync_stall", &scope);
                assert!(!fires("sqlite::syncer_panic", &scope), "failpoint sqlite::syncer_panic");
                let r = if fires("sqlite::fsync", &scope) {
                    Err(std::io::Error::other("failpoint sqlite::fsync"))
                } else if cfg!(feature = "mutant-skip-fdatasync") {
                    // The power-cut test's mutant (see Cargo.toml): no fdatasync, answers as if synced.
                    Ok(())
                } else {
                    wal.sync_data()
                };
                tracing::trace!(batches = group.len(), sync_us = started.elapsed().as_micros() as u64, "wal synced");
                r.err().map(|e| {
                    tracing::error!(error = %e, "fdatasync of the WAL failed; answering 503");
                    Arc::new(e) as BatchError
                })
            } else {
                None
            };
            let count = group.len();
            for settled in group {
                answer(settled.replies, settled.outcome.or_else(|| synced.clone()), &scope);
            }
            if pending.fetch_sub(count, Ordering::AcqRel) == count {
                wake.notify_one();
            }
        }
    })?;
    Ok(Syncer { tx, join, in_flight, idle, gone })
}

/// The transaction the writer is filling: begun, holding the replies of the jobs run in it so far.
struct Open {
    replies: Vec<Reply>,
    started: std::time::Instant,
    /// `payhook.store.batch`, a trace of its own, when a traced request is in the batch: to the `COMMIT`'s return.
    span: tracing::Span,
}

fn begin(conn: &WriterConn<'_>) -> Result<Open, BatchError> {
    exec(conn, "BEGIN IMMEDIATE").map_err(|e| Arc::new(e) as BatchError)?;
    tally::discard();
    Ok(Open { replies: Vec::new(), started: std::time::Instant::now(), span: tracing::Span::none() })
}

/// Commits `batch` (with the counters that moved in it) and settles every one of its jobs.
fn commit(conn: &WriterConn<'_>, batch: Open, settle: &impl Fn(Settled), batch_sizes: &Histogram) {
    let Open { replies, started, span } = batch;
    span.record("payhook.batch.size", replies.len());
    if fires("sqlite::answer_before_commit", conn.path().unwrap_or_default()) {
        // The control run of the invariant checker: a writer that answers before its commit and then loses the
        // batch. Tests use it to prove that the checker sees acknowledged deliveries go missing.
        answer(replies, None, "");
        let _ = conn.execute_batch("ROLLBACK");
        tally::discard();
        return;
    }
    let committing = std::time::Instant::now();
    // The counters move with the rows, in the same transaction.
    let outcome = tally::flush(conn).and_then(|()| exec(conn, "COMMIT")).err().map(|e| Arc::new(e) as BatchError);
    tracing::trace!(
        jobs = replies.len(),
        open_us = (committing - started).as_micros() as u64,
        commit_us = committing.elapsed().as_micros() as u64,
        "batch"
    );
    match &outcome {
        None => batch_sizes.observe(replies.len() as u64),
        Some(e) => {
            tracing::warn!(error = %e, jobs = replies.len(), "sqlite batch did not commit");
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
    }
    settle(Settled { replies, outcome });
}

#[cfg(test)]
mod tests {
    use crate::{SqliteOptions, SqliteStore};

    /// The writer's own connection, the one every write runs on, has its page cache bounded by
    /// `writer_cache_bytes`, in KiB; with the bound left out it kept SQLite's default of 2 MiB (-2000).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writers_page_cache_is_bounded_by_its_setting() {
        for (bytes, cache_size) in [(1u64 << 20, -1024i64), (16 << 20, -16384)] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut options = SqliteOptions::new(dir.path().join("payhook.db"));
            options.writer_cache_bytes = bytes;
            let store = SqliteStore::open(options).expect("open");
            let held: i64 = store
                .writer
                .submit(|conn| conn.pragma_query_value(None, "cache_size", |r| r.get(0)).map_err(super::unavailable))
                .await
                .expect("read on the writer's thread");
            assert_eq!(held, cache_size, "{bytes} bytes");
        }
    }

    /// The writer keeps its temporary files, its sub-journal among them, in memory (`temp_store = MEMORY`, 2):
    /// with SQLite's default (0) a job's pages went through a temporary file, a system call each, past 64 KiB.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_keeps_its_sub_journal_in_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(SqliteOptions::new(dir.path().join("payhook.db"))).expect("open");
        let temp_store: i64 = store
            .writer
            .submit(|conn| conn.pragma_query_value(None, "temp_store", |r| r.get(0)).map_err(super::unavailable))
            .await
            .expect("read on the writer's thread");
        assert_eq!(temp_store, 2);
    }
}
