//! The checkpointer: copies WAL frames back into the database file from its own thread and connection.
//!
//! SQLite's automatic checkpoint runs inside the committing connection, so on the writer it would stall every
//! batch behind two fsyncs once per thousand pages. Here the writer's automatic checkpoint is only a safety valve
//! (twice the WAL's limit, see [`valve_pages`]), and this thread runs a `PASSIVE` checkpoint every [`INTERVAL`],
//! which never blocks the writer.
//!
//! A `PASSIVE` checkpoint copies frames but never resets the WAL: the writer starts again from the beginning of
//! the file only when a transaction of its begins with every frame copied and no reader using the WAL. Under a
//! steady stream of commits the first never holds (the writer always has its next batch queued, and each
//! checkpoint ends behind the commits made while it ran), and overlapping readers (or one long one) keep the
//! second from holding, so the log would grow without bound. Two resets keep it bounded by
//! `storage.wal_limit_bytes`:
//!
//! - Past half the limit, the checkpointer runs more `PASSIVE` passes until one copies next to nothing, then asks
//!   the writer to reset ([`reset_if_asked`]): after its next commit the writer copies the last batch or two itself
//!   (it is the only one adding frames, so then every frame is copied) and its next transaction restarts the log,
//!   overwriting the file in place. That holds the writer for a copy of at most about a thousand pages and two
//!   syncs.
//! - Past the whole limit at the round after it asked (readers kept the writer's reset from taking), the
//!   checkpointer runs `TRUNCATE`: `RESTART` (wait for the readers of old frames to finish, so the next write
//!   starts at the beginning of the WAL) followed by truncating the file to zero bytes. While it waits it holds
//!   the write lock, so new writers wait too: the connection's busy timeout bounds that wait
//!   (`storage.wal_checkpoint_wait_ms`), and a checkpoint that runs out of it gives up (counted as busy) and is
//!   tried again at the next tick.
//!
//! `journal_size_limit` is set to the limit on the writer, so a file that grew past it is cut back to it when the
//! log restarts. Before the writer's reset, the log was reset by the writer's valve at the limit: its checkpoint
//! copied everything the checkpointer had not copied yet (up to an interval's worth of pages) inside a commit,
//! holding the writer for tens of milliseconds once or twice a second under `payhook bench`, which was most of
//! its p99 (BENCHMARKS.md).

use payhook_store::metrics::WalMetrics;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes a WAL frame takes besides its page: the frame header.
const FRAME_HEADER_BYTES: u64 = 24;

/// WAL frames after which the writer checkpoints by itself (`wal_autocheckpoint`): twice the WAL's limit, so that
/// only a checkpointer that cannot keep up (stalled, or refused again and again by readers) leaves the work to
/// the writer.
pub(crate) fn valve_pages(limit_bytes: u64, page_size: u64) -> u32 {
    u32::try_from(limit_bytes.saturating_mul(2) / (page_size + FRAME_HEADER_BYTES)).unwrap_or(u32::MAX).max(1)
}

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
    /// Past half of this many bytes of log the writer resets the WAL; past all of them, a `TRUNCATE` checkpoint.
    pub(crate) limit_bytes: u64,
    /// The database's page size: a frame is a page and its header.
    pub(crate) page_size: u64,
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
    writer: AtomicU64,
    writer_busy: AtomicU64,
    /// Set by the checkpointer when the writer should reset the log after its next commit.
    reset_asked: AtomicBool,
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
            writer: get(&self.writer),
            writer_busy: get(&self.writer_busy),
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
            let mut asked = false;
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                asked = tick(&conn, &bound, &counters, asked);
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

/// A `PASSIVE` checkpoint that copied fewer frames than this has caught up with the writer closely enough for the
/// reset to hold the writer only briefly (4 MiB of pages with 4 KiB pages, a few milliseconds of copying).
const CAUGHT_UP_FRAMES: u64 = 1024;

/// At most this many more `PASSIVE` passes before the reset. The writer may write faster than they copy, and each
/// pass syncs twice and copies the hot pages (B-tree roots, the pages rows are appended to) again: with up to 8
/// passes until one copied under 256 frames, `payhook bench` spent more CPU per delivery than it saved.
const CATCH_UP_PASSES: usize = 2;

/// One round: a `PASSIVE` checkpoint; if the log then holds more than half its limit, more `PASSIVE` passes until
/// one copies next to nothing (each copies what was committed during the one before, so they shrink quickly), and
/// then the reset: the writer's, asked for here ([`reset_if_asked`]), or a `TRUNCATE` from here, which waits for
/// the readers, when the log is past the whole limit although the writer was asked at the last round (readers kept
/// its reset from taking). Returns whether it asked the writer.
fn tick(conn: &rusqlite::Connection, bound: &WalBound, counters: &WalCounters, asked_before: bool) -> bool {
    let passive = |c: &rusqlite::Connection| checkpoint(c, "PASSIVE", &counters.passive, &counters.passive_busy);
    let mut asked = false;
    if let Some((mut log, mut copied)) = passive(conn)
        && log_bytes(log, bound) > bound.limit_bytes / 2
    {
        for _ in 0..CATCH_UP_PASSES {
            let Some((now_log, now_copied)) = passive(conn) else { break };
            let caught_up = now_copied.saturating_sub(copied) < CAUGHT_UP_FRAMES;
            (log, copied) = (now_log, now_copied);
            if caught_up {
                break;
            }
        }
        if asked_before && log_bytes(log, bound) > bound.limit_bytes {
            checkpoint(conn, "TRUNCATE", &counters.truncate, &counters.truncate_busy);
        } else {
            counters.reset_asked.store(true, Ordering::Relaxed);
            asked = true;
        }
    }
    let wal_bytes = std::fs::metadata(&bound.wal_path).map(|m| m.len()).unwrap_or(0);
    counters.wal_bytes.store(wal_bytes, Ordering::Relaxed);
    asked
}

/// The bytes `frames` frames of log take.
fn log_bytes(frames: u64, bound: &WalBound) -> u64 {
    frames.saturating_mul(bound.page_size + FRAME_HEADER_BYTES)
}

/// Called by the writer after each commit. When the checkpointer has asked for it (it has caught up with the log
/// and the log is past half its limit), copies the frames it has not copied yet, a batch or two: the writer is
/// the only one adding frames, so afterwards every frame is copied and the next transaction starts the log from
/// the beginning of the file (when no reader holds an older snapshot at that moment). The copy and its two
/// syncs hold the writer for a few milliseconds; the checkpointer holding the write lock for the same reset
/// would make the writer sleep in SQLite's busy handler, whose steps are milliseconds long.
pub(crate) fn reset_if_asked(conn: &rusqlite::Connection, counters: &WalCounters) {
    if counters.reset_asked.swap(false, Ordering::Relaxed) {
        checkpoint(conn, "PASSIVE", &counters.writer, &counters.writer_busy);
    }
}

/// Runs a checkpoint; returns the frames in the log and the frames copied from it so far (`None` when SQLite
/// could not tell: the checkpoint failed, or another one held the lock).
fn checkpoint(conn: &rusqlite::Connection, mode: &str, runs: &AtomicU64, busy: &AtomicU64) -> Option<(u64, u64)> {
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
            Some((u64::try_from(log).ok()?, u64::try_from(done).ok()?))
        }
        Err(e) => {
            tracing::warn!(mode, error = %e, "wal checkpoint failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    const LIMIT: u64 = 1 << 20;

    /// A writer connection (no automatic checkpoint: only what the test runs), a checkpointer connection and the
    /// checkpointer's bound, on a new WAL file in `dir`.
    fn open(dir: &std::path::Path) -> (Connection, Connection, WalBound) {
        let path = dir.join("wal.db");
        let writer = Connection::open(&path).expect("open the writer");
        writer.pragma_update(None, "journal_mode", "WAL").expect("wal");
        writer.pragma_update(None, "wal_autocheckpoint", 0).expect("no automatic checkpoint");
        writer.execute_batch("CREATE TABLE t (b BLOB NOT NULL)").expect("table");
        let checkpointer = Connection::open(&path).expect("open the checkpointer");
        let bound = WalBound { wal_path: dir.join("wal.db-wal"), limit_bytes: LIMIT, page_size: 4096, wait_ms: 100 };
        (writer, checkpointer, bound)
    }

    /// Commits `pages` pages of new rows, one transaction per 8.
    fn write(writer: &Connection, pages: usize) {
        for _ in 0..pages.div_ceil(8) {
            writer.execute_batch("BEGIN IMMEDIATE").expect("begin");
            for _ in 0..8 {
                writer.execute("INSERT INTO t (b) VALUES (zeroblob(4000))", []).expect("insert");
            }
            writer.execute_batch("COMMIT").expect("commit");
        }
    }

    /// A round of the checkpointer while the writer runs its next batch (as under load: the writer never waits for
    /// the checkpointer, so no transaction of its starts on a log that is all copied, which is when SQLite restarts
    /// it by itself). Returns whether the round asked the writer to reset.
    fn tick_beside_a_batch(
        writer: &Connection,
        checkpointer: &Connection,
        bound: &WalBound,
        counters: &WalCounters,
        asked_before: bool,
    ) -> bool {
        writer.execute_batch("BEGIN IMMEDIATE").expect("begin");
        writer.execute("INSERT INTO t (b) VALUES (zeroblob(4000))", []).expect("insert");
        let asked = tick(checkpointer, bound, counters, asked_before);
        writer.execute_batch("COMMIT").expect("commit");
        asked
    }

    /// The frames in the log now, and the frames copied from it.
    fn log(checkpointer: &Connection) -> (u64, u64) {
        let counters = WalCounters::default();
        checkpoint(checkpointer, "PASSIVE", &counters.passive, &counters.passive_busy).expect("a passive checkpoint")
    }

    #[test]
    fn past_half_its_limit_the_log_is_reset_by_the_writer_after_its_next_commit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (writer, checkpointer, bound) = open(dir.path());
        // About 0.3 MiB of log: under half the limit, nothing to reset.
        write(&writer, 80);
        let counters = WalCounters::default();
        assert!(!tick(&checkpointer, &bound, &counters, false), "{:?}", counters.snapshot());
        assert!(!counters.reset_asked.load(Ordering::Relaxed), "{:?}", counters.snapshot());
        // About 0.7 MiB: past half the limit, under the limit. The checkpointer copies what is committed and asks.
        write(&writer, 100);
        assert!(tick_beside_a_batch(&writer, &checkpointer, &bound, &counters, false), "{:?}", counters.snapshot());
        let asked = counters.snapshot();
        assert!(counters.reset_asked.load(Ordering::Relaxed), "the checkpointer asks the writer: {asked:?}");
        assert_eq!((asked.truncate, asked.writer), (0, 0), "nothing reset the log yet: {asked:?}");
        // After its commit the writer resets: its next transaction writes from the start of the file again.
        reset_if_asked(&writer, &counters);
        let reset = counters.snapshot();
        assert_eq!((reset.writer, reset.writer_busy), (1, 0), "{reset:?}");
        assert!(!counters.reset_asked.load(Ordering::Relaxed), "asked once, reset once: {reset:?}");
        reset_if_asked(&writer, &counters);
        assert_eq!(counters.snapshot().writer, 1, "not asked again, no second checkpoint");
        write(&writer, 8);
        let (frames, _) = log(&checkpointer);
        assert!(frames < 32, "the log started again at the beginning of the file: {frames} frames");
    }

    #[test]
    fn past_its_whole_limit_after_an_ask_the_checkpointer_truncates_the_log_itself() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (writer, checkpointer, bound) = open(dir.path());
        // About 1.2 MiB of log. The first round past half the limit asks the writer, whatever the log's size.
        write(&writer, 300);
        let counters = WalCounters::default();
        assert!(tick_beside_a_batch(&writer, &checkpointer, &bound, &counters, false), "{:?}", counters.snapshot());
        assert_eq!(counters.snapshot().truncate, 0);
        // The writer's reset did not take (here: it never ran; in production, a reader at every reset) and the log
        // is still past the limit at the next round: the checkpointer truncates it, waiting for the readers.
        counters.reset_asked.store(false, Ordering::Relaxed);
        write(&writer, 8);
        assert!(!tick(&checkpointer, &bound, &counters, true), "{:?}", counters.snapshot());
        let after = counters.snapshot();
        assert_eq!((after.truncate, after.truncate_busy), (1, 0), "{after:?}");
        assert!(!counters.reset_asked.load(Ordering::Relaxed), "{after:?}");
        assert_eq!(std::fs::metadata(&bound.wal_path).map(|m| m.len()).unwrap_or(0), 0, "the file is cut to zero");
        write(&writer, 8);
        let (frames, _) = log(&checkpointer);
        assert!(frames < 32, "the log started again at the beginning of the file: {frames} frames");
    }

    #[test]
    fn the_writers_valve_is_twice_the_limit() {
        assert_eq!(valve_pages(64 << 20, 4096), 32_577);
        assert_eq!(valve_pages(1 << 20, 4096), 509);
        assert_eq!(valve_pages(1, 4096), 1, "never 0, which would turn the valve off");
        assert_eq!(valve_pages(u64::MAX, 4096), u32::MAX);
    }
}
