//! Named failpoints for fault-injection tests, compiled in only with the `failpoints` feature (never in a release
//! build: without it [`fires`] is a constant `false`).
//!
//! The `fail` crate's registry is global to the process, and a test binary runs many tests at once, each on its
//! own database file. So every point here is scoped: configured as `return(SCOPE)`, it fires only where `SCOPE` is
//! part of the database's path; a bare `return` fires everywhere.
//!
//! | point | where | what a test should see |
//! | --- | --- | --- |
//! | `sqlite::after_inbox_insert` | the delivery's inbox row was inserted | its savepoint rolls back: 503, nothing stored |
//! | `sqlite::after_ledger_update` | the guarded `UPDATE orders` changed the order | same |
//! | `sqlite::outbox_insert` | an outbox row is about to be inserted | same |
//! | `sqlite::after_commit` | the batch committed (and synced), before the answers | 503 for a stored delivery: the retry is a duplicate |
//! | `sqlite::fsync` | the syncer's `fdatasync` of the WAL | fails: 503 for every batch it covered |
//! | `sqlite::fsync_stall` | the syncer, before its `fdatasync` | it waits until the point is removed (at most [`STALL_LIMIT`]), as on a disk that stopped answering: the writer stops once its hand-off is full, and requests are shed |
//! | `sqlite::syncer_panic` | the syncer, before its `fdatasync` | its thread panics: the batches it held are answered 503 (stored, not known durable: the retry is a duplicate), and every later one 503 at once, none held open for a syncer that is gone |
//! | `sqlite::answer_before_commit` | the control run: answers 2xx, then rolls the batch back | acknowledged deliveries are lost |
//! | `sqlite::stats_stall` | the stats read, on its pooled connection | it holds the connection until the point is removed (at most [`STALL_LIMIT`]) |
//! | `sqlite::stats_runaway` | the stats read, on its pooled connection | it runs a query of many seconds, which the read time limit stops first |

/// Whether failpoint `point` is set for the database at `scope` (its path).
#[cfg(feature = "failpoints")]
pub(crate) fn fires(point: &str, scope: &str) -> bool {
    match fail::eval(point, |arg| arg) {
        Some(Some(only)) => scope.contains(only.as_str()),
        Some(None) => true,
        None => false,
    }
}

/// Failpoints are compiled out: nothing ever fires.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn fires(_point: &str, _scope: &str) -> bool {
    false
}

/// Whether `point` is set for the database `conn` writes to.
pub(crate) fn fires_on(point: &str, conn: &rusqlite::Connection) -> bool {
    cfg!(feature = "failpoints") && fires(point, conn.path().unwrap_or_default())
}

/// The error an injected fault produces: what a failing database would report.
pub(crate) fn injected(point: &str) -> payhook_store::StoreError {
    payhook_store::StoreError::Unavailable(Box::new(std::io::Error::other(format!("failpoint {point}"))))
}

/// The longest a stalled read holds its connection, so that a test that forgets to remove its point still ends.
pub(crate) const STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// While `point` is set for the database at `scope`, sleeps, at most [`STALL_LIMIT`].
pub(crate) fn stall_while_set(point: &str, scope: &str) {
    let start = std::time::Instant::now();
    while cfg!(feature = "failpoints") && fires(point, scope) && start.elapsed() < STALL_LIMIT {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// While `point` is set for the database `conn` reads, sleeps (holding `conn`, as a read blocked on a slow disk
/// would), at most [`STALL_LIMIT`]. The read time limit cannot stop this: it only stops SQLite's own work.
pub(crate) fn stall_while(point: &str, conn: &rusqlite::Connection) {
    stall_while_set(point, conn.path().unwrap_or_default());
}

/// When `point` is set for the database `conn` reads, runs a query that counts to 20 million (many seconds of
/// work, and no IO): the read time limit stops it first, and its error is what the read returns. It is finite so
/// that a build whose limit does not work fails its test instead of leaving a thread spinning for ever.
pub(crate) fn runaway_on(point: &str, conn: &rusqlite::Connection) -> Result<(), payhook_store::StoreError> {
    if !fires_on(point, conn) {
        return Ok(());
    }
    conn.query_row(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000000) SELECT count(*) FROM n",
        [],
        |_| Ok(()),
    )
    .map_err(crate::writer::unavailable)
}
