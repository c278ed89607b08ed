//! The writer thread: one per process, fed by a bounded queue, committing jobs in batches (group commit).
//!
//! A durable commit costs an fsync. The writer takes the first waiting job, drains whatever else is already
//! queued (up to `batch_max`), runs every job in its own `SAVEPOINT` inside one `BEGIN IMMEDIATE` transaction,
//! commits once, and only then answers every job. Under light load a batch is one job, so latency never gets
//! worse; under heavy load one fsync is shared by hundreds of requests.
//!
//! Invariant: a job's reply is sent only after the commit that made its work durable (or with an error, in which
//! case none of its work is durable).

use payhook_store::StoreError;
use rusqlite::Connection;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Called with `None` once the batch committed, or with the reason it did not.
pub(crate) type Reply = Box<dyn FnOnce(Option<&Arc<rusqlite::Error>>) + Send>;

/// A unit of work for the writer.
pub(crate) trait Job: Send {
    /// Runs inside the batch transaction and returns what to do once the batch is settled.
    fn run(self: Box<Self>, conn: &Connection) -> Reply;
    /// Settles the job without running it (no transaction could be started).
    fn fail(self: Box<Self>, error: Arc<rusqlite::Error>);
}

struct Task<T, F> {
    work: F,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Task<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> Reply {
        let Task { work, reply } = *self;
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

    fn fail(self: Box<Self>, error: Arc<rusqlite::Error>) {
        let _ = self.reply.send(Err(StoreError::Unavailable(Box::new(CommitFailed(error)))));
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
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Task { work, reply: reply_tx });
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

    /// Asks the writer to finish the queued jobs and stop; returns at once.
    pub(crate) fn stop(&self) {
        // If the queue is full, the writer is busy and the stop is retried by `Drop` of the last handle.
        let _ = self.tx.try_send(Msg::Stop);
    }
}

/// The cause kept when a batch's commit failed.
#[derive(Debug, thiserror::Error)]
#[error("the batch commit failed: {0}")]
pub(crate) struct CommitFailed(Arc<rusqlite::Error>);

/// Runs `work` inside `SAVEPOINT job`: its failure rolls back its own writes only, never its batch-mates'.
fn in_savepoint<T>(conn: &Connection, work: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
    conn.execute_batch("SAVEPOINT job").map_err(unavailable)?;
    let result = work(conn);
    let end = if result.is_ok() { "RELEASE job" } else { "ROLLBACK TO job; RELEASE job" };
    if conn.is_autocommit() {
        // SQLite aborted the whole transaction (disk full, IO error): the batch loop notices and retries the rest.
        return result;
    }
    match conn.execute_batch(end) {
        Ok(()) => result,
        Err(e) => Err(unavailable(e)),
    }
}

pub(crate) fn unavailable(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

/// Starts the writer thread on `conn`.
pub(crate) fn spawn(
    conn: Connection,
    queue_depth: usize,
    batch_max: usize,
) -> std::io::Result<(WriterHandle, std::thread::JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel(queue_depth.max(1));
    let join = std::thread::Builder::new()
        .name("payhook-sqlite-writer".into())
        .spawn(move || run(conn, rx, batch_max.max(1)))?;
    Ok((WriterHandle { tx }, join))
}

fn run(conn: Connection, mut rx: mpsc::Receiver<Msg>, batch_max: usize) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(batch_max);
    let mut stopping = false;
    while !stopping {
        match rx.blocking_recv() {
            Some(Msg::Job(job)) => batch.push(job),
            Some(Msg::Stop) | None => stopping = true,
        }
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(Msg::Job(job)) => batch.push(job),
                Ok(Msg::Stop) => stopping = true,
                Err(_) => break,
            }
        }
        if stopping {
            // Refuse new work, but finish everything already accepted.
            rx.close();
            while let Some(msg) = rx.blocking_recv() {
                if let Msg::Job(job) = msg {
                    batch.push(job);
                }
            }
        }
        while !batch.is_empty() {
            let take = batch.len().min(batch_max);
            let jobs: Vec<Box<dyn Job>> = batch.drain(..take).collect();
            run_batch(&conn, jobs);
        }
    }
    tracing::debug!("sqlite writer stopped");
}

/// Runs `jobs` in as few transactions as possible and settles every one of them.
fn run_batch(conn: &Connection, jobs: Vec<Box<dyn Job>>) {
    let mut jobs = jobs.into_iter().peekable();
    while jobs.peek().is_some() {
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            // The database is locked beyond busy_timeout or unreachable: every job in hand fails, and its
            // requester answers 503 so that the provider retries.
            let e = Arc::new(e);
            tracing::warn!(error = %e, "sqlite writer could not begin a transaction");
            for job in jobs.by_ref() {
                job.fail(e.clone());
            }
            return;
        }
        let mut replies: Vec<Reply> = Vec::new();
        let mut aborted = None;
        for job in jobs.by_ref() {
            replies.push(job.run(conn));
            if conn.is_autocommit() {
                // SQLite rolled the transaction back on its own: everything before this point is lost.
                aborted = Some(Arc::new(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                    Some("transaction aborted by the database".into()),
                )));
                break;
            }
        }
        let outcome = match aborted {
            Some(e) => Some(e),
            None => conn.execute_batch("COMMIT").err().map(Arc::new),
        };
        if let Some(e) = &outcome {
            tracing::warn!(error = %e, jobs = replies.len(), "sqlite batch did not commit");
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        for reply in replies {
            reply(outcome.as_ref());
        }
    }
}
