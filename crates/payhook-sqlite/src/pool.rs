//! The read connections: a small pool of read-only connections, separate from the writer's, and a time limit on
//! every read.
//!
//! WAL lets any number of readers run beside the writer, each on its own snapshot, so one slow read (a full count
//! for a scrape, a dashboard page) holds only its own connection while the others keep answering. A read checks a
//! connection out (waiting at most the read time limit for one to come free, then [`StoreError::ReadersBusy`]), runs
//! on one of the pool's own threads (`sqlite-reader`, as many as connections), and gives it back. While it runs,
//! SQLite's progress handler checks its deadline every [`PROGRESS_OPS`] virtual machine instructions and interrupts
//! the statement once it has passed ([`StoreError::ReadTimeout`]).
//!
//! Invariant: a connection goes back to the pool outside any transaction, so no read keeps a snapshot (and the WAL
//! it pins) beyond its own query. One that cannot be rolled back is replaced by a fresh connection.
//!
//! The pool is a `Mutex<Vec<Connection>>` counted by a semaphore with as many permits as connections: a permit
//! guarantees an idle connection, and the mutex is held only to push or pop one.
//!
//! The reads run on threads of the pool's own rather than on tokio's blocking pool, which starts a thread whenever
//! none is idle at the moment of the call: a connection given back wakes the next read before its thread is idle
//! again, so a steady stream of reads grew that pool to a hundred threads, each with its stack and its allocator
//! caches (BENCHMARKS.md, *Memory*). Here the threads are as many as the connections, and a read holds a permit
//! before it is queued to them, so the queue never holds more than one read per thread.

use crate::writer::unavailable;
use payhook_store::StoreError;
use payhook_store::metrics::ReadMetrics;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Virtual machine instructions between two looks at a read's deadline: a few microseconds of work, so a runaway
/// statement stops within a millisecond of its deadline, and the look (one clock read) costs nothing measurable.
const PROGRESS_OPS: i32 = 1_000;

/// The read connections of one store.
#[derive(Debug)]
pub(crate) struct ReadPool {
    inner: Arc<Inner>,
    /// The reads handed to the pool's threads; they stop when it is dropped.
    jobs: mpsc::SyncSender<ReadJob>,
}

/// A read as the pool's threads run it: checkout, query, give back, answer.
type ReadJob = Box<dyn FnOnce() + Send>;

/// Runs the reads queued on `jobs` until the pool is dropped. A read that panics loses its answer (its caller gets
/// `Unavailable`), not the thread: its checkout gives the connection back while unwinding.
fn serve_reads(jobs: Arc<Mutex<mpsc::Receiver<ReadJob>>>) {
    loop {
        let job = jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).recv();
        let Ok(job) = job else { return };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            tracing::error!("read pool: a read panicked; its caller is answered unavailable");
        }
    }
}

#[derive(Debug)]
struct Inner {
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection: holding one guarantees an idle connection in `idle`.
    permits: Arc<Semaphore>,
    size: u64,
    timeout: Duration,
    path: PathBuf,
    busy_timeout_ms: u64,
    in_use: AtomicU64,
    waiting: AtomicU64,
    timed_out: AtomicU64,
    busy: AtomicU64,
}

/// Opens a read-only connection to `path`.
pub(crate) fn open_reader(path: &Path, busy_timeout_ms: u64) -> rusqlite::Result<Connection> {
    let conn = crate::connect(path, busy_timeout_ms)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

impl Inner {
    /// The idle connections. A poisoned lock is taken all the same: a push or a pop cannot leave the list half
    /// changed.
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ReadPool {
    /// Opens `size` (at least one) read-only connections to `path`; a read may run for `timeout`.
    pub(crate) fn open(path: &Path, busy_timeout_ms: u64, size: usize, timeout: Duration) -> Result<Self, StoreError> {
        let size = size.max(1);
        let conns = (0..size).map(|_| open_reader(path, busy_timeout_ms)).collect::<rusqlite::Result<Vec<_>>>();
        let conns = conns.map_err(unavailable)?;
        let (jobs, queue) = mpsc::sync_channel::<ReadJob>(size);
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..size {
            let queue = Arc::clone(&queue);
            std::thread::Builder::new()
                .name("sqlite-reader".into())
                .spawn(move || serve_reads(queue))
                .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        }
        Ok(Self {
            jobs,
            inner: Arc::new(Inner {
                idle: Mutex::new(conns),
                permits: Arc::new(Semaphore::new(size)),
                size: size as u64,
                timeout,
                path: path.to_owned(),
                busy_timeout_ms,
                in_use: AtomicU64::new(0),
                waiting: AtomicU64::new(0),
                timed_out: AtomicU64::new(0),
                busy: AtomicU64::new(0),
            }),
        })
    }

    /// Runs `query` on a pooled connection, on one of the pool's threads, within the read time limit.
    pub(crate) async fn read<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let permit = self.checkout_permit().await?;
        let inner = Arc::clone(&self.inner);
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: ReadJob = Box::new(move || {
            // The checkout gives its connection (and permit) back before the answer is sent.
            let result = Checkout::take(inner, permit).and_then(|mut checkout| checkout.run(query));
            let _ = answer.send(result);
        });
        // A permit is held, so the queue (one place per thread) has room: this never waits.
        self.jobs.try_send(job).map_err(|e| {
            StoreError::Unavailable(match e {
                mpsc::TrySendError::Full(_) => "read pool: its queue is full (more reads than permits)".into(),
                mpsc::TrySendError::Disconnected(_) => "read pool: its threads have stopped".into(),
            })
        })?;
        answered.await.map_err(|_| StoreError::Unavailable("read pool: a read ended without an answer".into()))?
    }

    /// Waits, at most the read time limit, for a connection to come free.
    async fn checkout_permit(&self) -> Result<OwnedSemaphorePermit, StoreError> {
        let inner = &self.inner;
        // Counted while waiting, and uncounted however the wait ends (the caller may be dropped meanwhile).
        inner.waiting.fetch_add(1, Ordering::Relaxed);
        let _waiting = Uncount(&inner.waiting);
        match tokio::time::timeout(inner.timeout, Arc::clone(&inner.permits).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(closed)) => Err(StoreError::Unavailable(Box::new(closed))),
            Err(_elapsed) => {
                inner.busy.fetch_add(1, Ordering::Relaxed);
                Err(StoreError::ReadersBusy { timeout_ms: millis(inner.timeout) })
            }
        }
    }

    /// The pool's state, for `/metrics`.
    pub(crate) fn metrics(&self) -> ReadMetrics {
        let i = &self.inner;
        ReadMetrics {
            connections: i.size,
            in_use: i.in_use.load(Ordering::Relaxed),
            waiting: i.waiting.load(Ordering::Relaxed),
            timed_out: i.timed_out.load(Ordering::Relaxed),
            busy: i.busy.load(Ordering::Relaxed),
            list_scans_stopped: 0,
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Decrements a gauge when dropped.
struct Uncount<'a>(&'a AtomicU64);

impl Drop for Uncount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection taken from the pool. Dropping it gives the connection back (outside any transaction), then the
/// permit, so that whoever the permit wakes finds it idle.
struct Checkout {
    conn: Option<Connection>,
    inner: Arc<Inner>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Checkout {
    fn take(inner: Arc<Inner>, permit: OwnedSemaphorePermit) -> Result<Self, StoreError> {
        let conn = inner.idle().pop();
        // A permit without an idle connection would be a bug in this module; say so rather than wait.
        let conn = conn.ok_or_else(|| StoreError::inconsistent("read pool: a permit found no idle connection"))?;
        inner.in_use.fetch_add(1, Ordering::Relaxed);
        Ok(Self { conn: Some(conn), inner, permit: Some(permit) })
    }

    /// Runs `query` with the progress handler watching the deadline; an interrupted query is a
    /// [`StoreError::ReadTimeout`] whatever error the query made of it.
    fn run<T>(&mut self, query: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let conn = self.conn.as_ref().expect("a checkout holds its connection until dropped");
        let deadline = Instant::now() + self.inner.timeout;
        let interrupted = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&interrupted);
        conn.progress_handler(
            PROGRESS_OPS,
            Some(move || {
                let stop = Instant::now() >= deadline;
                if stop {
                    flag.store(true, Ordering::Relaxed);
                }
                stop
            }),
        );
        let result = query(conn);
        conn.progress_handler(0, None::<fn() -> bool>);
        match result {
            Err(_) if interrupted.load(Ordering::Relaxed) => {
                self.inner.timed_out.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    timeout_ms = millis(self.inner.timeout),
                    "a read ran past the read time limit and was stopped"
                );
                Err(StoreError::ReadTimeout { timeout_ms: millis(self.inner.timeout) })
            }
            other => other,
        }
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        self.inner.in_use.fetch_sub(1, Ordering::Relaxed);
        let Some(mut conn) = self.conn.take() else { return };
        if !conn.is_autocommit() && conn.execute_batch("ROLLBACK").is_err() {
            // Left inside a transaction it cannot end: replace it, so that no snapshot outlives its read.
            match open_reader(&self.inner.path, self.inner.busy_timeout_ms) {
                Ok(fresh) => conn = fresh,
                Err(e) => {
                    tracing::error!(error = %e, "read pool: a read connection could not be replaced; one fewer");
                    drop(conn);
                    // Its permit goes with it, so that every remaining permit still finds an idle connection.
                    if let Some(permit) = self.permit.take() {
                        permit.forget();
                    }
                    return;
                }
            }
        }
        self.inner.idle().push(conn);
        // The permit is released after this, when the field drops: whoever it wakes finds the connection idle.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(dir: &tempfile::TempDir, timeout: Duration) -> ReadPool {
        let path = dir.path().join("pool.db");
        // The file and its WAL mode are made by a read-write connection, as the writer makes them in production.
        crate::connect(&path, 5_000).expect("create the database");
        ReadPool::open(&path, 5_000, 1, timeout).expect("open the pool")
    }

    /// However many reads come at once, they run on the pool's own threads, as many as its connections, never on
    /// threads started for them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_run_on_the_pools_own_threads_however_many_come_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pool.db");
        crate::connect(&path, 5_000).expect("create the database");
        let pool = Arc::new(ReadPool::open(&path, 5_000, 3, Duration::from_secs(5)).expect("open the pool"));
        let mut reads = tokio::task::JoinSet::new();
        for _ in 0..300 {
            let pool = Arc::clone(&pool);
            reads.spawn(async move {
                pool.read(|conn| {
                    conn.query_row("SELECT 1", [], |_| Ok(())).map_err(unavailable)?;
                    let me = std::thread::current();
                    Ok((me.id(), me.name().map(str::to_owned)))
                })
                .await
            });
        }
        let mut threads = std::collections::HashSet::new();
        while let Some(read) = reads.join_next().await {
            let (id, name) = read.expect("task").expect("read");
            assert_eq!(name.as_deref(), Some("sqlite-reader"));
            threads.insert(id);
        }
        assert!(threads.len() <= 3, "300 reads ran on {} threads", threads.len());
    }

    #[tokio::test]
    async fn a_connection_goes_back_to_the_pool_outside_any_transaction() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pool = pool(&dir, Duration::from_secs(5));
        let left_open = pool
            .read(|conn| {
                conn.execute_batch("BEGIN; SELECT count(*) FROM sqlite_master;").map_err(unavailable)?;
                Err::<(), _>(StoreError::inconsistent("a read that fails inside its transaction"))
            })
            .await;
        assert!(matches!(left_open, Err(StoreError::Corrupt { .. })), "{left_open:?}");
        let autocommit = pool.read(|conn| Ok(conn.is_autocommit())).await.expect("the next read");
        assert!(autocommit, "the next read found the previous read's transaction (and snapshot) still open");
    }

    #[tokio::test]
    async fn a_query_past_the_time_limit_is_interrupted_and_the_connection_serves_the_next_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pool = pool(&dir, Duration::from_millis(100));
        let start = Instant::now();
        let runaway = pool
            .read(|conn| {
                conn.query_row(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000000) \
                     SELECT count(*) FROM n",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .map_err(unavailable)
            })
            .await;
        assert!(matches!(runaway, Err(StoreError::ReadTimeout { timeout_ms: 100 })), "{runaway:?}");
        assert!(start.elapsed() < Duration::from_secs(3), "stopped only after {:?}", start.elapsed());
        let one: i64 =
            pool.read(|conn| conn.query_row("SELECT 1", [], |r| r.get(0)).map_err(unavailable)).await.unwrap();
        assert_eq!(one, 1);
        let m = pool.metrics();
        assert_eq!((m.connections, m.in_use, m.waiting, m.timed_out, m.busy), (1, 0, 0, 1, 0), "{m:?}");
    }
}
