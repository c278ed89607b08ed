//! The writer's own upkeep of what the schema's triggers keep for every other connection: the row counters
//! (migration 0008), an order's `outbox_ids` (0006) and a deleted inbox row's payload (0010).
//!
//! Firing a trigger costs SQLite about as much as the statement it runs: it materializes the row for `NEW`/`OLD`
//! and sets up a sub-program. A payment fired four (its inbox row, its order's status, its outbox row counted and
//! listed), about a fifth of the writer's instructions (docs/decisions/0033-row-counters.md). So the
//! writer's connection runs with triggers off ([`install`]) and its write operations report each counted change
//! here instead; the batch adds them up and writes one upsert per counter before its `COMMIT` ([`flush`]). Every
//! other connection (a CLI, an older payhook, `sqlite3` by hand) still fires the triggers, so the counters stay
//! right whoever writes.
//!
//! Invariant: on a thread where [`install`] ran, every statement that inserts, deletes or changes the status of an
//! inbox, order or outbox row reports the change through [`count`] (and an outbox row with an order is listed with
//! [`list_outbox`]); a rolled-back savepoint drops what it reported ([`mark`], [`undo`]). Elsewhere these calls do
//! nothing, and the triggers do the work. `payhook stats --recount` and the contract suite's recount after every
//! test check it.

use crate::kept::WriterConn;
use rusqlite::Connection;
use rusqlite::config::DbConfig;
use std::cell::RefCell;

/// A counted table, as the `counters.tbl` column names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Table {
    Inbox,
    Orders,
    Outbox,
}

impl Table {
    fn as_str(self) -> &'static str {
        match self {
            Table::Inbox => "inbox",
            Table::Orders => "orders",
            Table::Outbox => "outbox",
        }
    }
}

/// One counted change: `n` rows more (or fewer) under the counter `(table, grp, kind, status)`.
#[derive(Debug)]
struct Change {
    table: Table,
    grp: String,
    kind: String,
    status: String,
    n: i64,
}

thread_local! {
    /// The changes of the open transaction, in order; `None` on a thread whose connection fires the triggers.
    static CHANGES: RefCell<Option<Vec<Change>>> = const { RefCell::new(None) };
}

/// Turns the triggers off on `conn` and makes this thread report its changes instead. The writer thread calls it
/// once, after the migrations, on the connection it keeps.
pub(crate) fn install(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)?;
    CHANGES.with(|c| *c.borrow_mut() = Some(Vec::new()));
    Ok(())
}

/// Whether this thread reports its changes (and so must also do the triggers' other work).
pub(crate) fn active() -> bool {
    CHANGES.with(|c| c.borrow().is_some())
}

/// Reports `n` rows more (negative: fewer) under a counter. `grp` is the inbox row's source or the outbox row's
/// sink ('' for orders), `kind` the outbox row's kind ('' for the other tables).
pub(crate) fn count(table: Table, grp: &str, kind: &str, status: &str, n: i64) {
    CHANGES.with(|c| {
        if let Some(changes) = c.borrow_mut().as_mut() {
            changes.push(Change { table, grp: grp.to_owned(), kind: kind.to_owned(), status: status.to_owned(), n });
        }
    });
}

/// Reports a status change of one row: one fewer under `from`, one more under `to`.
pub(crate) fn moved(table: Table, grp: &str, kind: &str, from: &str, to: &str) {
    if from != to {
        count(table, grp, kind, from, -1);
        count(table, grp, kind, to, 1);
    }
}

/// Where the changes stand now, for [`undo`] when the savepoint opened here rolls back.
pub(crate) fn mark() -> usize {
    CHANGES.with(|c| c.borrow().as_ref().map_or(0, Vec::len))
}

/// Drops the changes reported since `mark`: their savepoint rolled back.
pub(crate) fn undo(mark: usize) {
    CHANGES.with(|c| {
        if let Some(changes) = c.borrow_mut().as_mut() {
            changes.truncate(mark);
        }
    });
}

/// Drops every change of the transaction: it rolled back.
pub(crate) fn discard() {
    undo(0);
}

/// Writes the transaction's changes into the counters, one upsert per counter that moved, and forgets them. Runs
/// in the transaction, before its `COMMIT`.
pub(crate) fn flush(conn: &WriterConn<'_>) -> rusqlite::Result<()> {
    let changes = CHANGES.with(|c| c.borrow_mut().as_mut().map(std::mem::take)).unwrap_or_default();
    if changes.is_empty() {
        return Ok(());
    }
    let mut sums: std::collections::BTreeMap<(Table, &str, &str, &str), i64> = std::collections::BTreeMap::new();
    for c in &changes {
        *sums.entry((c.table, c.grp.as_str(), c.kind.as_str(), c.status.as_str())).or_default() += c.n;
    }
    conn.kept(
        "INSERT INTO counters (tbl, grp, kind, status, n) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n + excluded.n",
        |upsert| {
            for ((table, grp, kind, status), n) in sums {
                if n != 0 {
                    upsert.execute(rusqlite::params![table.as_str(), grp, kind, status, n])?;
                }
            }
            Ok(())
        },
    )
}

/// Lists outbox row `id` in its order's `outbox_ids`, as trigger `outbox_listed_by_order` does for the other
/// connections.
pub(crate) fn list_outbox(conn: &WriterConn<'_>, order_id: &str, id: i64) -> rusqlite::Result<()> {
    if active() {
        conn.kept("UPDATE orders SET outbox_ids = json_insert(outbox_ids, '$[#]', ?2) WHERE id = ?1", |s| {
            s.execute(rusqlite::params![order_id, id])
        })?;
    }
    Ok(())
}
