//! Schema migrations, embedded in the binary and tracked with `PRAGMA user_version`.
//!
//! Each migration runs in a `BEGIN IMMEDIATE` transaction together with the version bump, so several processes
//! opening the same file at once apply each migration exactly once.
//!
//! A new file's `auto_vacuum` mode is chosen before any of this, when its first connection is opened (`connect`):
//! it cannot change once a table exists.

use rusqlite::{Connection, TransactionBehavior};

/// The migrations in order; migration `i` moves the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_outbox_dispatch.sql"),
    include_str!("../migrations/0003_billing.sql"),
    include_str!("../migrations/0004_retention.sql"),
    include_str!("../migrations/0005_history_in_orders.sql"),
    include_str!("../migrations/0006_outbox_ids_in_orders.sql"),
    include_str!("../migrations/0007_billing_audit_by_event.sql"),
    include_str!("../migrations/0008_counters.sql"),
    include_str!("../migrations/0009_retention_cursor.sql"),
    include_str!("../migrations/0010_inbox_payloads.sql"),
    include_str!("../migrations/0011_listing_indexes.sql"),
    include_str!("../migrations/0012_counters_by_rowid.sql"),
    include_str!("../migrations/0013_status_indexes_without_the_bulk.sql"),
    include_str!("../migrations/0014_audit.sql"),
    include_str!("../migrations/0015_outbox_order_key.sql"),
];

/// Brings the schema up to date. Returns the number of migrations applied.
pub(crate) fn run(conn: &mut Connection) -> rusqlite::Result<usize> {
    let mut applied = 0;
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: usize = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let Some(sql) = MIGRATIONS.get(version) else {
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
