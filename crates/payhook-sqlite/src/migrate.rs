//! Schema migrations, embedded in the binary and tracked with `PRAGMA user_version`.
//!
//! Each migration runs in a `BEGIN IMMEDIATE` transaction together with the version bump, so several processes
//! opening the same file at once apply each migration exactly once.

use rusqlite::{Connection, TransactionBehavior};

/// The migrations in order; migration `i` moves the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_outbox_dispatch.sql"),
    include_str!("../migrations/0003_billing.sql"),
    include_str!("../migrations/0004_retention.sql"),
    include_str!("../migrations/0005_history_in_orders.sql"),
    include_str!("../migrations/0006_outbox_ids_in_orders.sql"),
];

/// Brings the schema up to date. Returns the number of migrations applied.
///
/// A file whose schema is newer than this build is refused: an older build would write it the old way (for
/// example outbox rows that their orders do not list, after 0006).
pub(crate) fn run(conn: &mut Connection) -> rusqlite::Result<usize> {
    let mut applied = 0;
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: usize = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let Some(sql) = MIGRATIONS.get(version) else {
            if version > MIGRATIONS.len() {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                    Some(format!(
                        "the database's schema version is {version}, newer than this build of payhook knows ({}): \
                         run the payhook release that wrote it, or a newer one",
                        MIGRATIONS.len()
                    )),
                ));
            }
            return Ok(applied);
        };
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version + 1)?;
        tx.commit()?;
        applied += 1;
    }
}

/// The schema version this build expects.
pub(crate) fn latest() -> usize {
    MIGRATIONS.len()
}
