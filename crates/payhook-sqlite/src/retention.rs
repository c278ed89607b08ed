//! Retention: one bounded pruning step (see [`payhook_store::Store::prune`]), run by the writer like any write.
//!
//! Each phase (deleting events with their keys, clearing payloads) resumes from a cursor persisted in
//! `retention_cursor`: a position `(received_at, id)` in the `inbox_received` index. A step reads the rows after
//! it, prunes settled ones until `limit` are pruned, passes over dead letters (kept until an operator is done with
//! them; at most [`VISIT_FACTOR`] times `limit` rows visited in all) and stores the position it reached, in the
//! same transaction. So a step costs what it prunes: no step walks again
//! over rows an earlier one already cleared or skipped, however much history lies behind the cursor.
//!
//! A deferred event stops its phase's cursor until the worker settles it (processed or dead-lettered), so it is
//! pruned once it settles. Rows received after the cut are not read at all. A row written behind a cursor later (a
//! replay that records a derived event under its real id keeps the original `received_at`) is not pruned.
//!
//! With `auto_vacuum = INCREMENTAL` (every file created by this version; `payhook compact` converts older ones) a
//! step ends with `PRAGMA incremental_vacuum(N)`: at most N free pages go back to the file system, so the file
//! shrinks as it is pruned, in steps as short as the pruning ones.

use crate::context::{Result, SqlResult};
use crate::tally::{self, Table};
use payhook_store::{PruneRequest, Pruned};
use rusqlite::{Connection, OptionalExtension, params};

/// The rows after a phase's cursor, in index order, up to the cut (`?3`) and at most `?4` of them.
pub(crate) const SCAN_SQL: &str = "SELECT id, received_at, status, source, event_id, business_key, pruned_at
     FROM inbox WHERE received_at < ?3 AND (received_at, id) > (?1, ?2)
     ORDER BY received_at, id LIMIT ?4";

/// Whether an event in `status` is settled: nothing is left to do with it, so its payload and keys may age out.
fn settled(status: &str) -> bool {
    matches!(status, "processed" | "duplicate" | "ignored")
}

/// The two phases, each with its own cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Settled events older than the key retention are deleted with their keys and attempt log.
    Keys,
    /// Settled events older than the payload retention lose their raw body and headers.
    Payloads,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Keys => "keys",
            Phase::Payloads => "payloads",
        }
    }
}

struct Row {
    id: i64,
    received_at: i64,
    status: String,
    source: String,
    event_id: String,
    business_key: Option<String>,
    cleared: bool,
}

/// One step: up to `r.limit` rows of each phase, then up to `vacuum_pages` free pages released.
pub(crate) fn prune(conn: &Connection, r: &PruneRequest, vacuum_pages: u32) -> Result<Pruned> {
    let mut pruned = Pruned::default();
    phase(conn, Phase::Keys, r.keys_before_ms, r, &mut pruned)?;
    phase(conn, Phase::Payloads, r.payloads_before_ms, r, &mut pruned)?;
    crate::order_retention::prune_orders(conn, r, &mut pruned)?;
    release_pages(conn, vacuum_pages, &mut pruned)?;
    Ok(pruned)
}

/// Rows a phase may pass over in one step without pruning them (dead letters, payloads already cleared), in
/// multiples of the step's limit: a long run of them is crossed over a few steps, each still short.
pub(crate) const VISIT_FACTOR: u64 = 4;

fn phase(conn: &Connection, phase: Phase, before_ms: i64, r: &PruneRequest, pruned: &mut Pruned) -> Result<()> {
    let (mut at, mut id): (i64, i64) = conn
        .prepare_cached("SELECT received_at, id FROM retention_cursor WHERE phase = ?1")
        .db()?
        .query_row([phase.name()], |row| Ok((row.get(0)?, row.get(1)?)))
        .db()?;
    let limit = u64::from(r.limit);
    let (mut done, mut visited) = (0, 0);
    'scan: while done < limit && visited < limit * VISIT_FACTOR {
        let chunk = u32::try_from(limit - done).unwrap_or(r.limit).max(1);
        let rows = scan(conn, (at, id), before_ms, chunk)?;
        let exhausted = rows.len() < chunk as usize;
        for row in &rows {
            if done >= limit || visited >= limit * VISIT_FACTOR {
                break 'scan;
            }
            visited += 1;
            if row.status == "deferred" {
                // The worker is not done with it: hold the cursor here, and prune it once it settles.
                break 'scan;
            }
            if settled(&row.status) {
                done += match phase {
                    Phase::Keys => delete(conn, row, pruned)?,
                    Phase::Payloads if !row.cleared => clear(conn, row, r.now_ms, pruned)?,
                    Phase::Payloads => 0,
                };
            }
            (at, id) = (row.received_at, row.id);
        }
        if exhausted {
            break;
        }
    }
    pruned.rows_visited += visited;
    conn.prepare_cached("UPDATE retention_cursor SET received_at = ?2, id = ?3 WHERE phase = ?1")
        .db()?
        .execute(params![phase.name(), at, id])
        .db()?;
    Ok(())
}

/// Up to `limit` rows after `cursor` received before `before_ms`, in index order.
fn scan(conn: &Connection, cursor: (i64, i64), before_ms: i64, limit: u32) -> Result<Vec<Row>> {
    conn.prepare_cached(SCAN_SQL)
        .db()?
        .query_map(params![cursor.0, cursor.1, before_ms, limit], |row| {
            Ok(Row {
                id: row.get(0)?,
                received_at: row.get(1)?,
                status: row.get(2)?,
                source: row.get(3)?,
                event_id: row.get(4)?,
                business_key: row.get(5)?,
                cleared: row.get::<_, Option<i64>>(6)?.is_some(),
            })
        })
        .db()?
        .collect::<rusqlite::Result<_>>()
        .db()
}

/// Deletes a settled event with its key and attempt log; returns the events deleted (0 or 1).
fn delete(conn: &Connection, row: &Row, pruned: &mut Pruned) -> Result<u64> {
    if let Some(key) = &row.business_key {
        // Only the key this event holds: a duplicate's key belongs to the event that applied it.
        pruned.business_keys_deleted += conn
            .prepare_cached("DELETE FROM business_keys WHERE source = ?1 AND key = ?2 AND event_id = ?3")
            .db()?
            .execute(params![row.source, key, row.event_id])
            .db()? as u64;
    }
    conn.prepare_cached("DELETE FROM inbox_attempts WHERE inbox_id = ?1").db()?.execute([row.id]).db()?;
    // Its payload, if it has one in `inbox_payloads`, goes with it (what trigger `inbox_payload_deleted` does on the
    // connections that fire it).
    conn.prepare_cached("DELETE FROM inbox_payloads WHERE inbox_id = ?1").db()?.execute([row.id]).db()?;
    let deleted: Option<(String, String)> = conn
        .prepare_cached("DELETE FROM inbox WHERE id = ?1 RETURNING source, status")
        .db()?
        .query_row([row.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .db()?;
    let Some((source, status)) = deleted else {
        return Ok(0);
    };
    tally::count(Table::Inbox, &source, "", &status, -1);
    pruned.events_deleted += 1;
    Ok(1)
}

/// Clears a settled event's body and headers; returns the events cleared (0 or 1). The payload of a delivery
/// stored since migration 0010 is a row of `inbox_payloads`: deleting it, with the neighbours the same step
/// deletes, empties whole pages. A row stored before keeps its payload in its own columns, cleared in place.
fn clear(conn: &Connection, row: &Row, now_ms: i64, pruned: &mut Pruned) -> Result<u64> {
    conn.prepare_cached("DELETE FROM inbox_payloads WHERE inbox_id = ?1").db()?.execute([row.id]).db()?;
    let cleared = conn
        .prepare_cached("UPDATE inbox SET body = x'', headers = '{}', pruned_at = ?2 WHERE id = ?1")
        .db()?
        .execute(params![row.id, now_ms])
        .db()? as u64;
    pruned.payloads_cleared += cleared;
    Ok(cleared)
}

/// Releases up to `pages` free pages when the file is in incremental auto-vacuum mode (2); a file in mode 0
/// (NONE) keeps its free pages for reuse until `payhook compact` converts it.
fn release_pages(conn: &Connection, pages: u32, pruned: &mut Pruned) -> Result<()> {
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).db()?;
    if mode != 2 || pages == 0 {
        return Ok(());
    }
    let free = |conn: &Connection| conn.query_row("PRAGMA freelist_count", [], |r| r.get::<_, i64>(0)).db();
    let before = free(conn)?;
    if before > 0 {
        // The pragma returns a row per page released; running it to completion does the work.
        conn.prepare(&format!("PRAGMA incremental_vacuum({pages})"))
            .db()?
            .query_map([], |_| Ok(()))
            .db()?
            .collect::<rusqlite::Result<Vec<()>>>()
            .db()?;
    }
    let after = free(conn)?;
    pruned.pages_released = before.saturating_sub(after) as u64;
    pruned.pages_free = after as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    /// A migrated in-memory database holding `rows` settled events received at 1, 2, 3… ms, every tenth one a
    /// dead letter (kept, and passed over by the cursor).
    fn history(rows: i64) -> Connection {
        let mut conn = Connection::open_in_memory().expect("open");
        crate::migrate::run(&mut conn).expect("migrate");
        let tx = conn.transaction().expect("tx");
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO inbox (source, event_id, business_key, status, received_at, updated_at,
                                        verification, headers, body)
                     VALUES ('shop', ?1, ?1, ?2, ?3, ?3, 'hmac', '{\"a\":\"b\"}', zeroblob(200))",
                )
                .expect("prepare");
            let mut key = tx
                .prepare("INSERT INTO business_keys (source, key, event_id, created_at) VALUES ('shop', ?1, ?1, ?2)")
                .expect("prepare");
            for i in 1..=rows {
                let status = if i % 10 == 0 { "dead_lettered" } else { "processed" };
                insert.execute(params![format!("evt_{i}"), status, i]).expect("insert");
                key.execute(params![format!("evt_{i}"), i]).expect("key");
            }
        }
        tx.commit().expect("commit");
        conn
    }

    /// The SQLite VM steps the cursor scan took since the last call.
    fn scan_steps(conn: &Connection) -> i32 {
        let scan = conn.prepare_cached(SCAN_SQL).expect("cached scan");
        let steps = scan.get_status(StatementStatus::VmStep);
        scan.reset_status(StatementStatus::VmStep);
        steps
    }

    fn request(payloads_before_ms: i64, keys_before_ms: i64) -> PruneRequest {
        PruneRequest {
            keys_before_ms,
            payloads_from_ms: 0,
            payloads_before_ms,
            orders_before_ms: 0,
            limit: 1_000,
            now_ms: 1 << 40,
        }
    }

    /// Runs steps until none is left, returning each step's result and the VM steps its scans took.
    fn drain(conn: &Connection, r: &PruneRequest) -> Vec<(Pruned, i32)> {
        let mut steps = Vec::new();
        loop {
            let step = prune(conn, r, 0).expect("prune");
            steps.push((step, scan_steps(conn)));
            if !step.more(r.limit) {
                return steps;
            }
            assert!(steps.len() < 200, "pruning makes no progress: {:?}", &steps[steps.len() - 3..]);
        }
    }

    #[test]
    fn clearing_payloads_costs_the_same_per_row_early_and_late_in_a_long_history() {
        let conn = history(60_000);
        let steps = drain(&conn, &request(60_001, 0));
        let cleared: u64 = steps.iter().map(|(p, _)| p.payloads_cleared).sum();
        assert_eq!(cleared, 54_000, "every settled event is cleared, no dead letter");
        let (first, late) = (&steps[0], &steps[50]);
        assert_eq!((first.0.payloads_cleared, late.0.payloads_cleared), (1_000, 1_000), "{first:?} {late:?}");
        assert!(late.0.rows_visited <= first.0.rows_visited + 1, "{first:?} {late:?}");
        // The 51st step, with 50,000 payloads cleared behind it, does what the first one did.
        assert!(late.1 <= first.1 + first.1 / 10, "scan VM steps: first {}, 51st {}", first.1, late.1);
        let dead: i64 = conn
            .query_row("SELECT count(*) FROM inbox WHERE status = 'dead_lettered' AND length(body) = 200", [], |r| {
                r.get(0)
            })
            .expect("count");
        assert_eq!(dead, 6_000, "dead letters keep their payloads");
    }

    #[test]
    fn deleting_events_costs_the_same_per_row_early_and_late_in_a_long_history() {
        let conn = history(60_000);
        let steps = drain(&conn, &request(0, 60_001));
        let deleted: u64 = steps.iter().map(|(p, _)| p.events_deleted).sum();
        let keys: u64 = steps.iter().map(|(p, _)| p.business_keys_deleted).sum();
        assert_eq!((deleted, keys), (54_000, 54_000));
        let (first, late) = (&steps[0], &steps[50]);
        assert_eq!((first.0.events_deleted, late.0.events_deleted), (1_000, 1_000), "{first:?} {late:?}");
        // The dead letters left behind are not read again by later steps.
        assert!(late.1 <= first.1 + first.1 / 10, "scan VM steps: first {}, 51st {}", first.1, late.1);
    }

    #[test]
    fn a_deferred_event_holds_the_cursor_until_it_settles() {
        let conn = history(3_000);
        conn.execute("UPDATE inbox SET status = 'deferred' WHERE received_at = 1501", []).expect("defer");
        let r = request(3_001, 0);
        let cleared: u64 = drain(&conn, &r).iter().map(|(p, _)| p.payloads_cleared).sum();
        assert_eq!(cleared, 1_500 - 150, "settled events before the deferred one are cleared");
        conn.execute("UPDATE inbox SET status = 'processed' WHERE received_at = 1501", []).expect("settle");
        let cleared: u64 = drain(&conn, &r).iter().map(|(p, _)| p.payloads_cleared).sum();
        assert_eq!(cleared, 1_500 - 150, "once settled, it and the events after it are cleared");
    }
}
