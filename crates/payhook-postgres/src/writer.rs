//! Group commit: the batcher task, its bounded queue, and the batch transaction.
//!
//! Requests wait on a bounded queue (a full queue answers [`StoreError::Overloaded`] at once). The batcher takes
//! the first waiting job and whatever else is queued (up to `batch_max`) and runs them as one transaction on a
//! pooled connection, while the next batch forms; at most `writers` batches are in flight, and `batch_max` is at
//! most [`crate::MAX_BATCH`]. Under light load a batch is one job, so latency never gets worse; under load one
//! commit (one WAL flush) serves dozens.
//!
//! Of the batches in flight, at most `executing` run their statements at once (1 by default); the others have
//! sent their `COMMIT` and wait for its WAL flush. A batch therefore forms while the one before it runs, and is as
//! large as what arrived meanwhile; each batch costs the database about the same fixed work whatever its size (a
//! transaction, a function call, a handful of statements), so fewer, larger batches cost less per delivery, while
//! the commits' flushes (a slow disk, a synchronous standby) still overlap.
//!
//! A batch is two pipelined round trips and two or three statements, whatever its size:
//!
//! ```text
//! BEGIN; SELECT … FROM payhook_ingest_batch(arrays)     distinct deliveries: a set of multi-row statements in one
//!                                                        subtransaction; otherwise (or if the set fails) one
//!                                                        savepoint per delivery (plpgsql EXCEPTION blocks);
//!                                                        outbox rows per sink of the routing passed in
//! [SELECT payhook_settle_batch(arrays);] COMMIT          settlements of the guard misses (explained in Rust),
//!                                                        forwarded events, dead-letter alerts (by key)
//! ```
//!
//! The second statement is sent only when there is something to settle, forward or alert; alerts are raised
//! there, after every delivery of the batch took its locks (the schema's locking protocol).
//!
//! Registrations drained with the ingests go first, in a transaction of their own (`payhook_register_batch`); the
//! audit entries that came with some of them are appended with the settlements, before its `COMMIT`, in one more
//! statement only when there are any (a batch run again after the answer to its `COMMIT` was lost may append them a
//! second time: see `Store::register_order_audited`).
//!
//! Invariant: a job is answered only after the COMMIT of the transaction that holds its work has returned (or
//! with an error, and then none of its work is stored). A deadlock or serialization failure rolls the whole
//! transaction back; the batch is then run again from scratch, so nobody is answered twice or early. A lost
//! connection (or a server that turned read-only under it: a failover) before `COMMIT` was sent is retried the same
//! way. After `COMMIT` was sent the outcome is unknown; the batch is run again too, which is safe because every job
//! is idempotent (its keys are claimed `ON CONFLICT DO NOTHING`): what did commit answers `duplicate`. A rerun that
//! cannot get a connection (the database is down, or no host of a multi-host URL is primary yet) answers every job
//! 503, and the provider's retry finds a duplicate or records the event.
//!
//! Invariant (no lock cycles between batches): a batch runs its jobs sorted by [`IngestCall::lock_key`], and
//! each job takes its order's advisory lock before any other key of that order (the schema's locking protocol),
//! so concurrent batches, in this process or another, take their locks in one global order. PostgreSQL's deadlock
//! detector and the rerun above remain the safety net.
//!
//! Why one file of about 700 lines: the batcher, its bounded queue and the batch transaction share one batch's
//! state (its jobs, its span, its writer slot); split, each part would reach into the others' fields.

use crate::error::PgError;
use crate::ops::{self, IngestCall, Landed};
use crate::pipeline::send;
use crate::pool;
use crate::pool::{Object, Pool};
use payhook_store::metrics::{BATCH_SIZE_BOUNDS, Histogram, WriterMetrics};
use payhook_store::{AuditEntry, NewOrder, Recorded, Registered, StoreError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio_postgres::types::ToSql;

/// The COMMIT of a batch that wrote nothing: a WAL record first (a transactional logical-decoding message with the
/// prefix `payhook` and no content, which also gives it a transaction id), so that its COMMIT waits like any
/// write's: for the WAL flush (`synchronous_commit = on`) and for the synchronous standbys. PostgreSQL waits for
/// neither when a transaction wrote no WAL before its commit record, which is what a batch of nothing but
/// duplicates (its keys found, `ON CONFLICT DO NOTHING` writing nothing) is: it would answer 2xx at once. That is
/// wrong when the delivery it found is committed on the primary but not yet on the standby: a session terminated
/// while its COMMIT waits for the standby leaves its work visible ("committed locally, but might not have been
/// replicated"), and the batch's rerun or the provider's retry would then answer `duplicate` for a delivery that
/// dies with the primary. With the record, the duplicate's COMMIT comes later in the WAL than the original's, so
/// when the standby acknowledges it, it holds both (`failover::a_commit_cut_off_while_it_waits_for_the_…`). A
/// transaction id alone (`pg_current_xact_id()`) is not enough: the commit waits only if WAL was written before
/// it. Any role may call `pg_logical_emit_message`, at any `wal_level`; logical decoding consumers see the
/// messages under the prefix `payhook` and may ignore them. A batch that wrote anything waits anyway and commits
/// plainly.
const QUIET_COMMIT_SQL: &str = "SELECT pg_logical_emit_message(true, 'payhook', ''); COMMIT";

/// How often a batch is run at most: again after a deadlock, a serialization failure, a read-only server or a lost
/// connection (see `Failed::can_rerun`).
const MAX_BATCH_ATTEMPTS: u32 = 5;

/// How the batcher runs.
#[derive(Debug, Clone)]
pub(crate) struct WriterConfig {
    pub(crate) batch_max: usize,
    pub(crate) queue_depth: usize,
    pub(crate) writers: usize,
    /// Of those, how many may be running their statements at once (the rest wait for their `COMMIT`).
    pub(crate) executing: usize,
    /// A batch that has not committed by then is abandoned (its connection dropped) and answered 503.
    pub(crate) deadline: Duration,
    /// The retry policy of guard misses that defer, and the routing of outbox rows, forwards and alerts.
    pub(crate) ctx: Arc<ops::LiveCtx>,
}

/// Counters of the batcher, for tests and operators.
#[derive(Debug)]
pub(crate) struct Counters {
    batches: AtomicU64,
    jobs: AtomicU64,
    reruns: AtomicU64,
    failed_batches: AtomicU64,
    /// Jobs per committed batch transaction.
    batch_sizes: Histogram,
    /// Batches holding a connection now (at most `writers`), and those of them running their statements (at most
    /// `executing`; the rest wait for their `COMMIT`).
    in_flight: AtomicU64,
    executing: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            batches: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            reruns: AtomicU64::new(0),
            failed_batches: AtomicU64::new(0),
            batch_sizes: Histogram::new(BATCH_SIZE_BOUNDS),
            in_flight: AtomicU64::new(0),
            executing: AtomicU64::new(0),
        }
    }
}

/// A batch's turn to run its statements: given back (dropped) once its last `COMMIT` is sent, or when it ends.
struct Turn {
    _permit: OwnedSemaphorePermit,
    counters: Arc<Counters>,
}

impl Turn {
    fn new(permit: OwnedSemaphorePermit, counters: &Arc<Counters>) -> Self {
        counters.executing.fetch_add(1, Ordering::Relaxed);
        Turn { _permit: permit, counters: Arc::clone(counters) }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.counters.executing.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the batcher has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Batch transactions committed.
    pub committed_batches: u64,
    /// Jobs (ingests and registrations) in those batches.
    pub committed_jobs: u64,
    /// Batches run again after a deadlock, a serialization failure or a connection lost before COMMIT.
    pub reruns: u64,
    /// Batches given up, whose jobs were all answered with an error.
    pub failed_batches: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> BatchStats {
        BatchStats {
            committed_batches: self.batches.load(Ordering::Relaxed),
            committed_jobs: self.jobs.load(Ordering::Relaxed),
            reruns: self.reruns.load(Ordering::Relaxed),
            failed_batches: self.failed_batches.load(Ordering::Relaxed),
        }
    }
}

/// The work of a job.
#[derive(Debug)]
enum Work {
    Ingest(IngestCall),
    /// A registration, and the audit entry to append with it (boxed: most have none, and every job carries a
    /// `Work`).
    Register(NewOrder, Option<Box<AuditEntry>>),
}

impl Work {
    fn lock_key(&self) -> (bool, i64, &str, &str, &str) {
        match self {
            Work::Ingest(call) => call.lock_key(),
            Work::Register(order, _) => ops::register_lock_key(order),
        }
    }
}

/// Where a job's answer goes.
#[derive(Debug)]
enum Reply {
    Ingest(oneshot::Sender<Result<Recorded, StoreError>>),
    Register(oneshot::Sender<Result<Registered, StoreError>>),
}

#[derive(Debug)]
struct Job {
    work: Work,
    reply: Reply,
    /// The caller's span when traces are exported (`payhook_store::tracing_flag`), else none: linked to the span of
    /// the batch the job runs in.
    span: tracing::Span,
}

/// The caller's span, when traces are exported.
fn caller_span() -> tracing::Span {
    payhook_store::tracing_flag::current()
}

/// A job's result inside a transaction that has not committed yet.
#[derive(Debug)]
enum Pending {
    Ingest(Landed),
    Register(ops::RegisterLanded),
}

impl Pending {
    /// Whether the job wrote anything (so that its transaction's COMMIT waits for the flush and the standbys).
    /// A failed savepoint may have written WAL too, but is not counted on.
    fn wrote(&self) -> bool {
        match self {
            Pending::Ingest(Landed::Done { inserted, .. }) => *inserted,
            Pending::Ingest(Landed::Settle(..) | Landed::Billing { .. }) => true,
            Pending::Ingest(Landed::Failed(_)) => false,
            Pending::Register(registered) => matches!(registered, ops::RegisterLanded::Done(Registered::Created)),
        }
    }
}

/// The sending side of the batcher, and the means to stop it.
#[derive(Debug)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Job>,
    stop: Arc<Notify>,
    task: std::sync::Mutex<Option<JoinHandle<()>>>,
    pub(crate) counters: Arc<Counters>,
}

impl Writer {
    /// Starts the batcher on the current tokio runtime.
    pub(crate) fn spawn(pool: Pool, config: WriterConfig) -> Self {
        let (tx, rx) = mpsc::channel(config.queue_depth.max(1));
        let stop = Arc::new(Notify::new());
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(run(pool, rx, Arc::clone(&stop), config, Arc::clone(&counters)));
        Self { tx, stop, task: std::sync::Mutex::new(Some(task)), counters }
    }

    /// Queues an ingest now (before the returned future is polled); resolves after its batch has committed.
    pub(crate) fn ingest(&self, call: IngestCall) -> impl Future<Output = Result<Recorded, StoreError>> + Send + use<> {
        let (reply, answer) = oneshot::channel();
        let queued = self.queue(Job { work: Work::Ingest(call), reply: Reply::Ingest(reply), span: caller_span() });
        async move {
            queued?;
            answer.await.map_err(|_| StoreError::ShuttingDown)?
        }
    }

    /// Queues a registration now, with the audit entry to append in its transaction; resolves after its batch has
    /// committed.
    pub(crate) fn register(
        &self,
        order: NewOrder,
        audit: Option<AuditEntry>,
    ) -> impl Future<Output = Result<Registered, StoreError>> + Send + use<> {
        let (reply, answer) = oneshot::channel();
        let queued = self.queue(Job {
            work: Work::Register(order, audit.map(Box::new)),
            reply: Reply::Register(reply),
            span: caller_span(),
        });
        async move {
            queued?;
            answer.await.map_err(|_| StoreError::ShuttingDown)?
        }
    }

    fn queue(&self, job: Job) -> Result<(), StoreError> {
        self.tx.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => StoreError::Overloaded,
            mpsc::error::TrySendError::Closed(_) => StoreError::ShuttingDown,
        })
    }

    /// The queue and the batches so far. The queue closes when the batcher stops (asked to, or gone).
    pub(crate) fn metrics(&self) -> WriterMetrics {
        WriterMetrics {
            running: !self.tx.is_closed(),
            queued: (self.tx.max_capacity() - self.tx.capacity()) as u64,
            queue_capacity: self.tx.max_capacity() as u64,
            batch_sizes: self.counters.batch_sizes.snapshot(),
            wal: None,
            page_cache: None,
            partitions: None,
            batches: Some(payhook_store::metrics::BatchOutcomes {
                reruns: self.counters.reruns.load(Ordering::Relaxed),
                failed: self.counters.failed_batches.load(Ordering::Relaxed),
                in_flight: self.counters.in_flight.load(Ordering::Relaxed),
                executing: self.counters.executing.load(Ordering::Relaxed),
            }),
            connects: None,
        }
    }

    /// Stops taking jobs, runs and answers every job already queued, and returns once all of them are answered.
    pub(crate) async fn shutdown(&self) {
        self.stop.notify_one();
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

async fn run(
    pool: Pool,
    mut rx: mpsc::Receiver<Job>,
    stop: Arc<Notify>,
    config: WriterConfig,
    counters: Arc<Counters>,
) {
    let writers = config.writers.max(1);
    let batch_max = config.batch_max.max(1);
    let permits = Arc::new(Semaphore::new(writers));
    let executing = Arc::new(Semaphore::new(config.executing.clamp(1, writers)));
    let config = Arc::new(config);
    let mut in_flight = JoinSet::new();
    loop {
        // The permit first: while every writer is busy, jobs pile up in the queue and the next batch grows.
        let permit = tokio::select! {
            biased;
            _ = stop.notified() => break,
            permit = Arc::clone(&permits).acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        // Then the turn to execute: jobs keep arriving while the batch before runs its statements.
        let turn = tokio::select! {
            biased;
            _ = stop.notified() => break,
            turn = Arc::clone(&executing).acquire_owned() => turn.expect("the semaphore is never closed"),
        };
        let first = tokio::select! {
            biased;
            _ = stop.notified() => break,
            job = rx.recv() => match job {
                Some(job) => job,
                None => break,
            },
        };
        let mut batch = vec![first];
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let (pool, config, counters) = (pool.clone(), Arc::clone(&config), Arc::clone(&counters));
        let turn = Turn::new(turn, &counters);
        in_flight.spawn(async move {
            run_batch(&pool, batch, &config, &counters, turn).await;
            drop(permit);
        });
        while let Some(done) = in_flight.try_join_next() {
            if let Err(e) = done {
                tracing::error!(error = %e, "a batch task panicked");
            }
        }
    }
    // Refuse new jobs, but run everything already accepted.
    rx.close();
    loop {
        let mut batch = Vec::new();
        while batch.len() < batch_max {
            match rx.recv().await {
                Some(job) => batch.push(job),
                None => break,
            }
        }
        if batch.is_empty() {
            break;
        }
        let permit = Arc::clone(&permits).acquire_owned().await.expect("the semaphore is never closed");
        let turn = Arc::clone(&executing).acquire_owned().await.expect("the semaphore is never closed");
        let (pool, config, counters) = (pool.clone(), Arc::clone(&config), Arc::clone(&counters));
        let turn = Turn::new(turn, &counters);
        in_flight.spawn(async move {
            run_batch(&pool, batch, &config, &counters, turn).await;
            drop(permit);
        });
    }
    while in_flight.join_next().await.is_some() {}
    tracing::debug!("postgres batcher stopped");
}

/// Why a batch attempt failed, and whether it may be run again.
#[derive(Debug)]
struct Failed {
    error: BatchError,
    /// COMMIT had been sent when it failed: what the server did with it is unknown (logged with the rerun).
    commit_sent: bool,
}

#[derive(Debug)]
enum BatchError {
    Pg(PgError),
    Corrupt(String),
}

impl Failed {
    /// Running the batch again cannot apply anything twice, nor answer anyone for work that did not commit:
    /// - the server said it rolled the transaction back (deadlock, serialization failure);
    /// - the connection was lost (or its server turned read-only) before COMMIT was sent, so nothing committed;
    /// - the connection was lost after COMMIT was sent, so the outcome is unknown. Every job of a batch is
    ///   idempotent: a delivery claims its inbox key and its business key `ON CONFLICT DO NOTHING`, a
    ///   registration of the same order is `AlreadyExists`. If the lost COMMIT did commit, the rerun finds its
    ///   keys and answers `duplicate` (a 2xx for work that is committed), and applies nothing a second time.
    ///
    /// A batch past its deadline is not run again: its time is up, and its requests are answered 503.
    fn can_rerun(&self) -> bool {
        match &self.error {
            BatchError::Pg(e) => e.is_conflict() || (e.breaks_connection() && !matches!(e, PgError::Timeout(_))),
            BatchError::Corrupt(_) => false,
        }
    }
}

impl From<tokio_postgres::Error> for BatchError {
    fn from(e: tokio_postgres::Error) -> Self {
        BatchError::Pg(PgError::Db(e))
    }
}

impl From<StoreError> for BatchError {
    fn from(e: StoreError) -> Self {
        BatchError::Corrupt(e.to_string())
    }
}

/// The cause every job of a failed batch is answered with.
#[derive(Debug, thiserror::Error)]
#[error("the batch holding this request did not commit")]
pub struct BatchFailed(#[source] Arc<PgError>);

/// Runs a drained batch: its registrations in one transaction, then its ingests in another (each kind is one
/// call of its batch function), and answers every job. `turn` (the batch's turn to execute) is given back once
/// the last transaction has sent its `COMMIT`, or when the batch ends.
async fn run_batch(pool: &Pool, jobs: Vec<Job>, config: &WriterConfig, counters: &Counters, turn: Turn) {
    if !jobs.iter().any(|j| !j.span.is_none()) {
        return run_batch_untraced(pool, jobs, config, counters, turn).await;
    }
    // A trace of its own, linked from each request it serves: one batch serves many requests.
    let span = tracing::debug_span!(parent: None, "payhook.store.batch", db.system.name = "postgresql",
        payhook.batch.size = jobs.len());
    if let Some(id) = span.id() {
        for job in &jobs {
            job.span.follows_from(id.clone());
        }
    }
    tracing::Instrument::instrument(run_batch_untraced(pool, jobs, config, counters, turn), span).await;
}

async fn run_batch_untraced(pool: &Pool, jobs: Vec<Job>, config: &WriterConfig, counters: &Counters, turn: Turn) {
    counters.in_flight.fetch_add(1, Ordering::Relaxed);
    let (registers, ingests): (Vec<Job>, Vec<Job>) =
        jobs.into_iter().partition(|j| matches!(j.work, Work::Register(..)));
    // Registrations first: an event drained together with its order's registration then finds the order.
    let groups: Vec<Vec<Job>> = [registers, ingests].into_iter().filter(|g| !g.is_empty()).collect();
    let last = groups.len().saturating_sub(1);
    let mut turn = Some(turn);
    for (i, group) in groups.into_iter().enumerate() {
        let mut held = None;
        run_group(pool, group, config, counters, if i == last { &mut turn } else { &mut held }).await;
    }
    drop(turn);
    counters.in_flight.fetch_sub(1, Ordering::Relaxed);
}

async fn run_group(
    pool: &Pool,
    mut jobs: Vec<Job>,
    config: &WriterConfig,
    counters: &Counters,
    turn: &mut Option<Turn>,
) {
    jobs.sort_by(|a, b| a.work.lock_key().cmp(&b.work.lock_key()));
    let mut attempt = 1;
    let outcome = loop {
        match execute(pool, &jobs, config, turn).await {
            Ok(pending) => break Ok(pending),
            Err(failed) if failed.can_rerun() && attempt < MAX_BATCH_ATTEMPTS => {
                counters.reruns.fetch_add(1, Ordering::Relaxed);
                if failed.commit_sent && !matches!(&failed.error, BatchError::Pg(e) if e.is_conflict()) {
                    tracing::info!(attempt, jobs = jobs.len(), error = ?failed.error,
                        "the connection was lost after COMMIT was sent; running the batch again (what committed answers duplicate)");
                } else {
                    tracing::info!(attempt, jobs = jobs.len(), error = ?failed.error, "running a rolled-back batch again");
                }
                // A little jitter, so that two batches that deadlocked do not meet again in the same way.
                tokio::time::sleep(Duration::from_millis(fastrand::u64(1..=5 * u64::from(attempt)))).await;
                attempt += 1;
            }
            Err(failed) => break Err(failed.error),
        }
    };
    match outcome {
        Ok(pending) => {
            counters.batches.fetch_add(1, Ordering::Relaxed);
            counters.jobs.fetch_add(jobs.len() as u64, Ordering::Relaxed);
            counters.batch_sizes.observe(jobs.len() as u64);
            for (job, pending) in jobs.into_iter().zip(pending) {
                answer(job.reply, pending);
            }
        }
        Err(error) => {
            counters.failed_batches.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(jobs = jobs.len(), error = ?error, "a batch did not commit; answering 503");
            let shared = match error {
                BatchError::Pg(e) => Ok(Arc::new(e)),
                BatchError::Corrupt(what) => Err(what),
            };
            for job in jobs {
                let error = || match &shared {
                    Ok(e) => StoreError::Unavailable(Box::new(BatchFailed(Arc::clone(e)))),
                    Err(what) => StoreError::inconsistent(what.clone()),
                };
                // The requester may have gone away (client disconnected): the outcome stands regardless.
                let _ = match job.reply {
                    Reply::Ingest(reply) => reply.send(Err(error())).is_ok(),
                    Reply::Register(reply) => reply.send(Err(error())).is_ok(),
                };
            }
        }
    }
}

fn answer(reply: Reply, pending: Pending) {
    let savepoint = |detail: String| StoreError::Unavailable(Box::new(PgError::Savepoint(detail)));
    let _ = match (reply, pending) {
        (Reply::Ingest(reply), Pending::Ingest(landed)) => reply
            .send(match landed {
                Landed::Done { recorded, .. } | Landed::Settle(recorded, _) => Ok(recorded),
                Landed::Failed(detail) => Err(savepoint(detail)),
                Landed::Billing { .. } => Err(StoreError::inconsistent("a billing delivery was not applied")),
            })
            .is_ok(),
        (Reply::Register(reply), Pending::Register(registered)) => reply
            .send(match registered {
                ops::RegisterLanded::Done(registered) => Ok(registered),
                ops::RegisterLanded::Failed(detail) => Err(savepoint(detail)),
            })
            .is_ok(),
        (reply, pending) => unreachable!("job and result kinds match by construction: {reply:?} {pending:?}"),
    };
}

/// The batch's billing deliveries (recorded by the batch function, not applied yet): their billing locks, all at
/// once and ascending, after every delivery took its order lock and event keys; then each in batch order, in a
/// savepoint of its own (see `crate::billing`).
async fn apply_billing(
    client: &Object,
    jobs: &[Job],
    pending: &mut [Pending],
    ctx: &ops::Ctx,
) -> Result<(), BatchError> {
    let mut locks = Vec::new();
    for (job, p) in jobs.iter().zip(pending.iter()) {
        if let (Work::Ingest(call), Pending::Ingest(Landed::Billing { .. })) = (&job.work, p) {
            locks.extend(call.billing_locks());
        }
    }
    if locks.is_empty() {
        return Ok(());
    }
    locks.sort_unstable();
    locks.dedup();
    let lock_all = client.prepare_cached(crate::billing::LOCK_ALL_SQL).await?;
    client.execute(&lock_all, &[&locks]).await?;
    for (job, p) in jobs.iter().zip(pending.iter_mut()) {
        if let (Work::Ingest(call), Pending::Ingest(Landed::Billing { row_id })) = (&job.work, &*p) {
            let landed = call.apply_billing(client, ctx, *row_id).await.map_err(|e| match e {
                ops::Failure::Pg(e) => BatchError::Pg(e),
                ops::Failure::Corrupt(e) => BatchError::Corrupt(e.to_string()),
            })?;
            *p = Pending::Ingest(landed);
        }
    }
    Ok(())
}

/// One attempt at a batch, on one pooled connection.
async fn execute(
    pool: &Pool,
    jobs: &[Job],
    config: &WriterConfig,
    turn: &mut Option<Turn>,
) -> Result<Vec<Pending>, Failed> {
    let client = pool::get(pool).await.map_err(|e| Failed { error: BatchError::Pg(e), commit_sent: false })?;
    let mut commit_sent = false;
    let attempt = tokio::time::timeout(config.deadline, transact(&client, jobs, config, &mut commit_sent, turn)).await;
    let error = match attempt {
        Ok(Ok(pending)) => return Ok(pending),
        Ok(Err(error)) => error,
        Err(_) => BatchError::Pg(PgError::Timeout(config.deadline)),
    };
    let broken = match &error {
        BatchError::Pg(e) => e.breaks_connection(),
        BatchError::Corrupt(_) => false,
    };
    pool::release_after(client, broken).await;
    Err(Failed { error, commit_sent })
}

/// The batch transaction, for jobs of one kind: `BEGIN` and the kind's batch function in one pipelined round
/// trip, then the settlements of the guard misses, forwarded events and alerts (if any) and `COMMIT` in another.
async fn transact(
    client: &Object,
    jobs: &[Job],
    config: &WriterConfig,
    commit_sent: &mut bool,
    turn: &mut Option<Turn>,
) -> Result<Vec<Pending>, BatchError> {
    // One routing for the whole batch, even if a reload replaces it meanwhile.
    let ctx = config.ctx.current();
    let (policy, routing) = (&ctx.retry, &ctx.routing);
    let registering = jobs.iter().any(|j| matches!(j.work, Work::Register(..)));
    let statement = client.prepare_cached(if registering { ops::REGISTER_SQL } else { ops::INGEST_SQL }).await?;
    let settle = client.prepare_cached(ops::SETTLE_SQL).await?;
    let (mut ingests, mut registers) = (ops::IngestColumns::default(), ops::RegisterColumns::default());
    for job in jobs {
        match &job.work {
            Work::Ingest(call) => ingests.push(call, routing),
            Work::Register(order, _) => registers.push(order),
        }
    }
    let (ingest_params, register_params) = (ingests.params(), registers.params());
    let params: &[&(dyn ToSql + Sync)] = if registering { &register_params } else { &ingest_params };
    let begun = send(client.batch_execute("BEGIN")).await;
    let answered = send(client.query(&statement, params)).await;
    begun.answer().await?;
    let rows = answered.answer().await?;
    if rows.len() != jobs.len() {
        return Err(BatchError::Corrupt(format!("{} answers to a batch of {}", rows.len(), jobs.len())));
    }
    let mut pending = Vec::with_capacity(jobs.len());
    for (job, row) in jobs.iter().zip(&rows) {
        pending.push(match &job.work {
            Work::Ingest(call) => Pending::Ingest(call.landed(row, policy)?),
            Work::Register(order, _) => Pending::Register(ops::registered(order, row)?),
        });
    }

    // A read-only server (a standby the connection ended up on, a primary being demoted or fenced) fails every
    // delivery inside its savepoint; that is the connection's fault, not the deliveries': fail the batch so that
    // the connection is dropped and the batch run again on a new one, which finds the primary.
    if pending.iter().any(|p| match p {
        Pending::Ingest(Landed::Failed(detail)) | Pending::Register(ops::RegisterLanded::Failed(detail)) => {
            crate::error::detail_is_read_only(detail)
        }
        _ => false,
    }) {
        return Err(BatchError::Pg(PgError::ReadOnly));
    }

    apply_billing(client, jobs, &mut pending, &ctx).await?;

    let mut follow = ops::FollowUps::default();
    for (job, p) in jobs.iter().zip(&pending) {
        if let (Work::Ingest(call), Pending::Ingest(landed)) = (&job.work, p) {
            call.follow_ups(landed, routing, &mut follow);
        }
    }
    // The audit entries of the registrations that landed (a failed one's savepoint rolled back: it has none).
    let mut audits = crate::audit::AuditColumns::default();
    if registering {
        for (job, p) in jobs.iter().zip(&pending) {
            if let (Work::Register(_, Some(entry)), Pending::Register(ops::RegisterLanded::Done(registered))) =
                (&job.work, p)
            {
                audits.push(entry, payhook_store::audit::registration_outcome(registered))?;
            }
        }
    }
    let audit = if audits.is_empty() { None } else { Some(client.prepare_cached(crate::audit::INSERT_SQL).await?) };
    // In a block: the settlements borrow `pending` until their answer is in.
    {
        let mut settlements = ops::SettleColumns::default();
        for p in &pending {
            if let Pending::Ingest(Landed::Settle(_, s)) = p {
                settlements.push(s);
            }
        }
        settlements.follow(&mut follow, routing);
        let settle_params = settlements.params();
        let settled =
            if settlements.is_empty() { None } else { Some(send(client.query_one(&settle, &settle_params)).await) };
        let audit_params = audits.params();
        let audited = match &audit {
            Some(insert) => Some(send(client.execute(insert, &audit_params)).await),
            None => None,
        };
        *commit_sent = true;
        let quiet = settled.is_none() && audited.is_none() && !pending.iter().any(Pending::wrote);
        let commit = if quiet { QUIET_COMMIT_SQL } else { "COMMIT" };
        let committed = send(client.batch_execute(commit)).await;
        // The statements are done; what is left is the flush. The next batch may run meanwhile.
        drop(turn.take());
        // A failed settlement aborted the transaction, and the COMMIT after it rolled back: report the settlement.
        if let Some(settled) = settled {
            settled.answer().await?;
        }
        if let Some(audited) = audited {
            audited.answer().await?;
        }
        committed.answer().await?;
    }
    Ok(pending)
}
