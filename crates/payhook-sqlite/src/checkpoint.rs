//! The checkpointer: copies WAL frames back into the database file from its own thread and connection.
//!
//! SQLite's automatic checkpoint runs inside the committing connection, so on the writer it would stall every
//! batch behind two fsyncs once per thousand pages. Here the writer's automatic checkpoint is only a safety valve
//! (a very large WAL), and this thread runs a `PASSIVE` checkpoint every [`INTERVAL`], which never blocks the
//! writer.
//!
//! A `PASSIVE` checkpoint copies frames but never resets the WAL: the writer starts again from the beginning of
//! the file only when no reader is using the WAL at that moment, and a steady stream of overlapping readers (or one
//! long one) keeps that from happening, so the file grows without bound. When the file exceeds its limit
//! (`storage.wal_limit_bytes`), the checkpointer runs `TRUNCATE`, which is `RESTART` (wait for the readers of old
//! frames to finish, so the next write starts at the beginning of the WAL) followed by truncating the file to zero
//! bytes. While it waits it holds the write lock, so new writers wait too: the connection's busy timeout bounds that
//! wait (`storage.wal_checkpoint_wait_ms`), and a checkpoint that runs out of it gives up (counted as busy) and is
//! tried again at the next tick. `journal_size_limit` is set to the same limit on the writer, so a WAL reset by an
//! ordinary checkpoint is truncated as well.

use payhook_store::metrics::WalMetrics;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

/// Pages of WAL after which the writer checkpoints by itself (64 MiB with 4 KiB pages).
pub(crate) const WRITER_VALVE_PAGES: u32 = 16_384;

/// How often the checkpointer copies the WAL back. Each round copies the latest version of every page written
/// since the last one, so a longer interval copies hot pages (B-tree roots and interior pages) fewer times:
/// measured under `payhook bench`, 250 ms spends about a third of the CPU of 50 ms, while keeping the WAL well
/// under the writer's valve.
pub(crate) const INTERVAL: Duration = Duration::from_millis(250);

/// How the checkpointer bounds the WAL.
#[derive(Debug, Clone)]
pub(crate) struct WalBound {
    /// The WAL file, measured after every checkpoint.
    pub(crate) wal_path: PathBuf,
    /// Above this size a `TRUNCATE` checkpoint resets the WAL.
    pub(crate) limit_bytes: u64,
    /// How long a `TRUNCATE` checkpoint waits for readers and the writer before giving up until the next tick.
    pub(crate) wait_ms: u64,
}

/// Counters shared between the checkpointer thread and `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct WalCounters {
    wal_bytes: AtomicU64,
    limit_bytes: AtomicU64,
    passive: AtomicU64,
    truncate: AtomicU64,
    passive_busy: AtomicU64,
    truncate_busy: AtomicU64,
}

impl WalCounters {
    pub(crate) fn snapshot(&self) -> WalMetrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WalMetrics {
            wal_bytes: get(&self.wal_bytes),
            limit_bytes: get(&self.limit_bytes),
            passive: get(&self.passive),
            truncate: get(&self.truncate),
            passive_busy: get(&self.passive_busy),
            truncate_busy: get(&self.truncate_busy),
        }
    }
}

/// A running checkpointer; dropping `stop` ends it.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    stop: mpsc::Sender<()>,
    join: JoinHandle<()>,
}

impl Checkpointer {
    pub(crate) fn spawn(
        conn: rusqlite::Connection,
        interval: Duration,
        bound: WalBound,
        counters: Arc<WalCounters>,
    ) -> std::io::Result<Self> {
        // Only the TRUNCATE checkpoint ever waits (PASSIVE never calls the busy handler), and it must not wait long.
        conn.busy_timeout(Duration::from_millis(bound.wait_ms)).map_err(std::io::Error::other)?;
        counters.limit_bytes.store(bound.limit_bytes, Ordering::Relaxed);
        let (stop, stopped) = mpsc::channel::<()>();
        let join = std::thread::Builder::new().name("sqlite-ckpt".into()).spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                tick(&conn, &bound, &counters);
            }
        })?;
        Ok(Self { stop, join })
    }

    /// Ends the thread and waits for it (blocking: call it off the async runtime's threads). `Err` carries a
    /// panic of the thread.
    pub(crate) fn stop(self) -> std::thread::Result<()> {
        drop(self.stop);
        self.join.join()
    }
}

/// One round: a `PASSIVE` checkpoint, then a `TRUNCATE` one if the WAL is still over its limit.
fn tick(conn: &rusqlite::Connection, bound: &WalBound, counters: &WalCounters) {
    checkpoint(conn, "PASSIVE", &counters.passive, &counters.passive_busy);
    let wal_bytes = std::fs::metadata(&bound.wal_path).map(|m| m.len()).unwrap_or(0);
    let wal_bytes = if wal_bytes > bound.limit_bytes {
        checkpoint(conn, "TRUNCATE", &counters.truncate, &counters.truncate_busy);
        std::fs::metadata(&bound.wal_path).map(|m| m.len()).unwrap_or(0)
    } else {
        wal_bytes
    };
    counters.wal_bytes.store(wal_bytes, Ordering::Relaxed);
}

fn checkpoint(conn: &rusqlite::Connection, mode: &str, runs: &AtomicU64, busy: &AtomicU64) {
    let result = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    runs.fetch_add(1, Ordering::Relaxed);
    match result {
        Ok((blocked, log, done)) => {
            if blocked != 0 {
                busy.fetch_add(1, Ordering::Relaxed);
            }
            tracing::trace!(mode, blocked, log, done, "wal checkpoint");
        }
        Err(e) => tracing::warn!(mode, error = %e, "wal checkpoint failed"),
    }
}
