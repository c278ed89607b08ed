//! The checkpointer: copies WAL frames back into the database file from its own thread and connection.
//!
//! SQLite's automatic checkpoint runs inside the committing connection, so on the writer it would stall every
//! batch behind two fsyncs once per thousand pages. Here the writer's automatic checkpoint is only a safety valve
//! (a very large WAL), and this thread runs a `PASSIVE` checkpoint every [`INTERVAL`], which never blocks the
//! writer.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Pages of WAL after which the writer checkpoints by itself (64 MiB with 4 KiB pages).
pub(crate) const WRITER_VALVE_PAGES: u32 = 16_384;

/// How often the checkpointer copies the WAL back. Each round copies the latest version of every page written
/// since the last one, so a longer interval copies hot pages (B-tree roots and interior pages) fewer times:
/// measured under `payhook bench`, 250 ms spends about a third of the CPU of 50 ms, while keeping the WAL well
/// under the writer's valve.
pub(crate) const INTERVAL: Duration = Duration::from_millis(250);

/// A running checkpointer; dropping `stop` ends it.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    stop: mpsc::Sender<()>,
    join: JoinHandle<()>,
}

impl Checkpointer {
    pub(crate) fn spawn(conn: rusqlite::Connection, interval: Duration) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let join = std::thread::Builder::new().name("sqlite-ckpt".into()).spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                });
                match result {
                    Ok((_, log, done)) => tracing::trace!(log, done, "wal checkpoint"),
                    Err(e) => tracing::warn!(error = %e, "wal checkpoint failed"),
                }
            }
        })?;
        Ok(Self { stop, join })
    }

    pub(crate) fn stop(self) {
        drop(self.stop);
        let _ = self.join.join();
    }
}
