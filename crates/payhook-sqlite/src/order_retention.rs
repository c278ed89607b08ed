//! Order retention: orders in a final state (refunded, disputed: see `OrderStatus::is_final`) whose last change is
//! older than `orders_before_ms` are deleted with their history (a column of their row) and their outbox rows.
//!
//! The step walks the outbox, not the orders: outbox rows are appended in id order, and every transition into a
//! final state writes one (per sink, or one `unrouted`) as it happens, so the rows of kind `order.refunded` and
//! `order.disputed` list the orders that became final, in the order they did. A cursor persisted in
//! `retention_cursor` (phase `orders`: the last outbox row passed, `(created_at, id)`) makes each step start where
//! the previous one stopped; the walk needs no index beyond the outbox's rowid and writes nothing on the ingest
//! path. A step reads at most `VISIT_FACTOR` times `limit` rows and deletes at most `limit` orders.
//!
//! An order is kept when one of its outbox rows is not delivered, or an event waits (deferred) on it:
//! - a pending row or a deferred event holds the cursor (the dispatcher or the worker settles them soon), and the
//!   order is pruned by a later step;
//! - a dead row is passed over: it waits for an operator, maybe for ever, and must not stop the retention of every
//!   later order. Its order stays (a later re-queue and delivery does not bring the cursor back to it).
//!
//! The walk stops at the first row created at or after the cut; rows after it are not read.

use crate::context::{Result, SqlResult};
use crate::retention::VISIT_FACTOR;
use crate::tally::{self, Table};
use payhook_core::event::OrderAction;
use payhook_core::ledger::{OrderStatus, Transitions as _};
use payhook_store::{PruneRequest, Pruned};
use rusqlite::{Connection, OptionalExtension, params};

/// The outbox rows after the cursor, in id order, at most `?2` of them.
pub(crate) const SCAN_SQL: &str =
    "SELECT id, created_at, kind, order_id FROM outbox WHERE id > ?1 ORDER BY id LIMIT ?2";

/// The pending and dead rows among an order's outbox rows (`?1`: its `outbox_ids`).
pub(crate) const OUTBOX_STATUS_SQL: &str =
    "SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead')
     FROM outbox WHERE id IN (SELECT value FROM json_each(?1))";

/// What the walk does with the order of a final transition's row.
enum Verdict {
    /// Deleted (or already gone): move on.
    Pass,
    /// Waits on something that settles by itself: stop here and look again next step.
    Hold,
}

/// One step of the order retention, in the caller's transaction.
pub(crate) fn prune_orders(conn: &Connection, r: &PruneRequest, pruned: &mut Pruned) -> Result<()> {
    let (mut at, mut id): (i64, i64) = conn
        .prepare_cached("SELECT received_at, id FROM retention_cursor WHERE phase = 'orders'")
        .db()?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
        .db()?;
    let limit = u64::from(r.limit);
    let budget = limit * VISIT_FACTOR;
    let (mut done, mut visited) = (0, 0);
    'scan: while done < limit && visited < budget {
        let chunk = (budget - visited).min(limit);
        let rows = scan(conn, id, chunk)?;
        let exhausted = (rows.len() as u64) < chunk;
        for (row_id, created_at, kind, order_id) in rows {
            if done >= limit || created_at >= r.orders_before_ms {
                break 'scan;
            }
            visited += 1;
            if let Some(order_id) = order_id.filter(|_| OrderAction::is_final_kind(&kind)) {
                match prune_order(conn, &order_id, r.orders_before_ms, pruned)? {
                    (Verdict::Hold, _) => break 'scan,
                    (Verdict::Pass, deleted) => done += deleted,
                }
            }
            (at, id) = (created_at, row_id);
        }
        if exhausted {
            break;
        }
    }
    pruned.outbox_rows_visited += visited;
    conn.prepare_cached("UPDATE retention_cursor SET received_at = ?1, id = ?2 WHERE phase = 'orders'")
        .db()?
        .execute(params![at, id])
        .db()?;
    Ok(())
}

/// An outbox row as the walk reads it: id, created_at, kind, order id.
type Scanned = (i64, i64, String, Option<String>);

fn scan(conn: &Connection, after: i64, limit: u64) -> Result<Vec<Scanned>> {
    conn.prepare_cached(SCAN_SQL)
        .db()?
        .query_map(params![after, limit as i64], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .db()?
        .collect::<rusqlite::Result<_>>()
        .db()
}

/// Deletes one order with its outbox rows if it is final, older than the cut and waited on by nothing. Returns
/// what the walk should do, and the orders deleted (0 or 1).
fn prune_order(conn: &Connection, order_id: &str, before_ms: i64, pruned: &mut Pruned) -> Result<(Verdict, u64)> {
    let order: Option<(String, i64, String)> = conn
        .prepare_cached("SELECT status, updated_at, outbox_ids FROM orders WHERE id = ?1")
        .db()?
        .query_row([order_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()
        .db()?;
    let Some((status, updated_at, outbox_ids)) = order else {
        // Deleted through another of its rows (one per sink), or by hand.
        return Ok((Verdict::Pass, 0));
    };
    if !OrderStatus::parse(&status).is_some_and(OrderStatus::is_final) {
        return Ok((Verdict::Pass, 0));
    }
    if updated_at >= before_ms {
        return Ok((Verdict::Hold, 0));
    }
    let (pending, dead): (i64, i64) = conn
        .prepare_cached(OUTBOX_STATUS_SQL)
        .db()?
        .query_row([&outbox_ids], |row| Ok((row.get(0)?, row.get(1)?)))
        .db()?;
    let waiting: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM inbox WHERE status = 'deferred' AND order_id = ?1)")
        .db()?
        .query_row([order_id], |row| row.get(0))
        .db()?;
    if pending > 0 || waiting {
        return Ok((Verdict::Hold, 0));
    }
    if dead > 0 {
        return Ok((Verdict::Pass, 0));
    }
    let mut outbox = conn
        .prepare_cached("DELETE FROM outbox WHERE id IN (SELECT value FROM json_each(?1)) RETURNING sink, kind, status")
        .db()?;
    let mut rows = outbox.query([&outbox_ids]).db()?;
    while let Some(row) = rows.next().db()? {
        let (sink, kind, status): (String, String, String) = (row.get(0).db()?, row.get(1).db()?, row.get(2).db()?);
        tally::count(Table::Outbox, &sink, &kind, &status, -1);
        pruned.outbox_deleted += 1;
    }
    let deleted: Option<String> = conn
        .prepare_cached("DELETE FROM orders WHERE id = ?1 RETURNING status")
        .db()?
        .query_row([order_id], |r| r.get(0))
        .optional()
        .db()?;
    let Some(status) = deleted else {
        return Ok((Verdict::Pass, 0));
    };
    tally::count(Table::Orders, "", "", &status, -1);
    pruned.orders_deleted += 1;
    Ok((Verdict::Pass, 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::StatementStatus;

    /// A migrated in-memory database holding `orders` refunded orders changed at 1, 2, 3… ms, each with a
    /// delivered `order.paid` and `order.refunded` row; every tenth one's refund row is dead (kept, passed over).
    fn history(orders: i64) -> Connection {
        let mut conn = Connection::open_in_memory().expect("open");
        crate::migrate::run(&mut conn).expect("migrate");
        let tx = conn.transaction().expect("tx");
        {
            let mut order = tx
                .prepare(
                    "INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
                     VALUES (?1, 100, 'usd', 'refunded', ?2, ?2)",
                )
                .expect("prepare");
            let mut row = tx
                .prepare(
                    "INSERT INTO outbox (kind, sink, order_id, source, event_id, payload, status, created_at)
                     VALUES (?1, 'crm', ?2, 'shop', ?2, '{}', ?3, ?4)",
                )
                .expect("prepare");
            for i in 1..=orders {
                let id = format!("ord_{i}");
                order.execute(params![id, i]).expect("order");
                row.execute(params!["order.paid", id, "delivered", i]).expect("paid row");
                let refund = if i % 10 == 0 { "dead" } else { "delivered" };
                row.execute(params!["order.refunded", id, refund, i]).expect("refund row");
            }
        }
        tx.commit().expect("commit");
        conn
    }

    /// Each order is checked on its own row too: one changed after the cut (another process's clock, an
    /// operator) holds the cursor, one that is not final (changed by hand) is passed over and kept.
    #[test]
    fn an_order_changed_after_the_cut_holds_the_walk_and_one_not_final_is_kept() {
        let conn = history(4);
        conn.execute("UPDATE orders SET status = 'paid' WHERE id = 'ord_1'", []).expect("not final");
        conn.execute("UPDATE orders SET updated_at = 100 WHERE id = 'ord_3'", []).expect("changed later");
        let r = PruneRequest {
            keys_before_ms: 0,
            payloads_from_ms: 0,
            payloads_before_ms: 0,
            orders_before_ms: 50,
            limit: 1_000,
            now_ms: 1 << 40,
        };
        let mut step = Pruned::default();
        prune_orders(&conn, &r, &mut step).expect("prune");
        let left: Vec<String> = conn
            .prepare("SELECT id FROM orders ORDER BY id")
            .expect("prepare")
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        assert_eq!(left, ["ord_1", "ord_3", "ord_4"], "{step:?}");
        assert_eq!((step.orders_deleted, step.outbox_rows_visited), (1, 6), "the walk stops at ord_3's refund row");
        conn.execute("UPDATE orders SET updated_at = 3 WHERE id = 'ord_3'", []).expect("back");
        let mut step = Pruned::default();
        prune_orders(&conn, &r, &mut step).expect("prune");
        assert_eq!(step.orders_deleted, 2, "ord_3 and ord_4 go once ord_3's last change is before the cut");
    }

    /// The SQLite VM steps `sql` (a cached statement) took since the last call.
    fn vm_steps(conn: &Connection, sql: &str) -> i32 {
        let stmt = conn.prepare_cached(sql).expect("cached statement");
        let steps = stmt.get_status(StatementStatus::VmStep);
        stmt.reset_status(StatementStatus::VmStep);
        steps
    }

    #[test]
    fn deleting_orders_costs_the_same_per_order_early_and_late_in_a_long_history() {
        let conn = history(60_000);
        let r = PruneRequest {
            keys_before_ms: 0,
            payloads_from_ms: 0,
            payloads_before_ms: 0,
            orders_before_ms: 60_001,
            limit: 1_000,
            now_ms: 1 << 40,
        };
        let mut steps = Vec::new();
        loop {
            let mut step = Pruned::default();
            let started = std::time::Instant::now();
            prune_orders(&conn, &r, &mut step).expect("prune");
            let elapsed = started.elapsed();
            steps.push((step, vm_steps(&conn, SCAN_SQL), vm_steps(&conn, OUTBOX_STATUS_SQL), elapsed));
            if !step.more(r.limit) {
                break;
            }
            assert!(steps.len() < 200, "order retention makes no progress: {:?}", &steps[steps.len() - 3..]);
        }
        let deleted: u64 = steps.iter().map(|(p, ..)| p.orders_deleted).sum();
        let rows: u64 = steps.iter().map(|(p, ..)| p.outbox_deleted).sum();
        assert_eq!((deleted, rows), (54_000, 108_000), "every refunded order goes but those with a dead row");
        let (first, late) = (&steps[0], &steps[50]);
        assert_eq!((first.0.orders_deleted, late.0.orders_deleted), (1_000, 1_000), "{first:?} {late:?}");
        assert!(late.0.outbox_rows_visited <= first.0.outbox_rows_visited + 2, "{first:?} {late:?}");
        // The 51st step, with 50,000 orders deleted behind it, does what the first one did.
        assert!(late.1 <= first.1 + first.1 / 10, "scan VM steps: first {}, 51st {}", first.1, late.1);
        assert!(late.2 <= first.2 + first.2 / 10, "outbox status VM steps: first {}, 51st {}", first.2, late.2);
        eprintln!("first step {:?}, 51st step {:?}", first.3, late.3);
        let kept: i64 = conn.query_row("SELECT count(*) FROM orders", [], |r| r.get(0)).expect("count");
        assert_eq!(kept, 6_000, "orders with a dead row stay");
    }
}
