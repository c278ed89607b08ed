//! Order retention: orders in a final state (refunded, disputed: see `OrderStatus::is_final`) whose last change is
//! older than `orders_before_ms` are deleted with their audit history and their outbox rows.
//!
//! As on SQLite, the step walks the outbox from a persisted cursor (`order_retention_cursor`): its
//! rows are appended in id order and every transition into a final state writes one (per sink, or one `unrouted`)
//! as it happens, so rows of kind `order.refunded` and `order.disputed` list the orders that became final, in the
//! order they did. The walk uses the outbox's primary key and the indexes that already exist (`outbox (order_id,
//! kind, sink)`, `order_audit`'s primary key, the partial index of deferred events by order): nothing is added to
//! the ingest path. A step reads at most [`VISIT_FACTOR`] times `limit` rows and deletes at most `limit` orders, in
//! one transaction that holds the cursor's row (`FOR UPDATE SKIP LOCKED`: another instance pruning at the same
//! time skips the step).
//!
//! An order is kept when one of its outbox rows is not delivered, or an event waits (deferred) on it. A pending row
//! or a deferred event holds the cursor (they settle by themselves); a dead row is passed over (it waits for an
//! operator, maybe for ever) and its order stays. Each order is deleted under its advisory lock, taken with
//! `pg_try_advisory_xact_lock` (never waiting, so no lock order to respect): an order whose lock is busy, an event
//! being applied to it right now, holds the cursor until the next step.
//!
//! A final order's status never changes again, no event defers on it any more, and its delivered or unrouted
//! outbox rows never change status: what the step reads stays true until it commits.

use crate::ops::{Failure, order_lock, rerun_on_conflict};
use crate::pool::{Object, Pool};
use payhook_core::event::OrderAction;
use payhook_core::ledger::{OrderStatus, Transitions as _};
use payhook_store::{PruneRequest, Pruned, StoreError};
use std::collections::HashSet;

/// Rows the step may pass over, in multiples of its limit (as SQLite's `retention::VISIT_FACTOR`).
const VISIT_FACTOR: i64 = 4;

/// The outbox rows after the cursor (`$1`), at most `$2`, each with what decides its order's fate when the row
/// records a final transition (`$3`: those kinds): the order's status and last change, its pending and dead outbox
/// rows, and whether an event is deferred on it.
pub const SCAN_SQL: &str = "
    WITH r AS (SELECT id, created_at, kind, order_id FROM outbox WHERE id > $1 ORDER BY id LIMIT $2)
    SELECT r.id, r.created_at, o.id, o.status, o.updated_at,
           CASE WHEN o.id IS NOT NULL THEN
               (SELECT count(*) FROM outbox x WHERE x.order_id = o.id AND x.status = 'pending') END,
           CASE WHEN o.id IS NOT NULL THEN
               (SELECT count(*) FROM outbox x WHERE x.order_id = o.id AND x.status = 'dead') END,
           CASE WHEN o.id IS NOT NULL THEN
               EXISTS (SELECT 1 FROM inbox i WHERE i.status = 'deferred' AND i.order_id = o.id) END
    FROM r LEFT JOIN orders o ON o.id = r.order_id AND r.kind = ANY($3)
    ORDER BY r.id";

/// Takes the advisory locks it can, in the order given; one boolean per lock.
const TRY_LOCKS_SQL: &str =
    "SELECT pg_try_advisory_xact_lock(l) FROM unnest($1::bigint[]) WITH ORDINALITY AS t(l, n) ORDER BY n";

/// Deletes the orders `$1` with their history and outbox rows; returns the orders and outbox rows deleted.
const DELETE_SQL: &str = "
    WITH rows AS (DELETE FROM outbox WHERE order_id = ANY($1) RETURNING 1),
         audit AS (DELETE FROM order_audit WHERE order_id = ANY($1) RETURNING 1),
         gone AS (DELETE FROM orders WHERE id = ANY($1) RETURNING 1)
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM rows), (SELECT count(*) FROM audit)";

/// One row of the scan, with its order's facts when it records a final transition.
struct Scanned {
    id: i64,
    created_at: i64,
    order: Option<OrderFacts>,
}

struct OrderFacts {
    id: String,
    status: String,
    updated_at: i64,
    pending: i64,
    dead: i64,
    waiting: bool,
}

/// One step of the order retention; adds what it did to `pruned`.
pub(crate) async fn prune_orders(pool: &Pool, r: &PruneRequest, pruned: &mut Pruned) -> Result<(), StoreError> {
    let final_kinds: Vec<&str> =
        OrderAction::ALL.iter().map(|a| a.outbox_kind()).filter(|k| OrderAction::is_final_kind(k)).collect();
    let step = rerun_on_conflict(pool, "order retention", || {
        let final_kinds = &final_kinds;
        async move |client: &Object| {
            client.batch_execute("BEGIN").await?;
            let Some(cursor) = client
                .query_opt("SELECT created_at, id FROM order_retention_cursor FOR UPDATE SKIP LOCKED", &[])
                .await?
            else {
                // Another instance is walking the outbox right now.
                client.batch_execute("COMMIT").await?;
                return Ok::<_, Failure>(Pruned::default());
            };
            let (at, id): (i64, i64) = (cursor.get(0), cursor.get(1));
            let limit = i64::from(r.limit);
            let scan = client.prepare_cached(SCAN_SQL).await?;
            let rows: Vec<Scanned> = client
                .query(&scan, &[&id, &(limit * VISIT_FACTOR), final_kinds])
                .await?
                .iter()
                .map(|row| Scanned {
                    id: row.get(0),
                    created_at: row.get(1),
                    order: row.get::<_, Option<String>>(2).map(|order_id| OrderFacts {
                        id: order_id,
                        status: row.get(3),
                        updated_at: row.get(4),
                        pending: row.get(5),
                        dead: row.get(6),
                        waiting: row.get(7),
                    }),
                })
                .collect();
            let (mut chosen, mut positions) = (Vec::new(), Vec::new());
            let (mut cursor, mut visited) = ((at, id), 0u64);
            let mut seen = HashSet::new();
            for row in &rows {
                if chosen.len() as i64 >= limit || row.created_at >= r.orders_before_ms {
                    break;
                }
                if let Some(order) = &row.order {
                    let settled = OrderStatus::parse(&order.status).is_some_and(OrderStatus::is_final);
                    if settled && (order.updated_at >= r.orders_before_ms || order.pending > 0 || order.waiting) {
                        break;
                    }
                    if settled && order.dead == 0 && seen.insert(order.id.clone()) {
                        chosen.push(order.id.clone());
                        // The cursor may only pass this row once the order is locked and deleted.
                        positions.push(cursor);
                    }
                }
                visited += 1;
                cursor = (row.created_at, row.id);
            }
            // Orders being changed right now (their lock is taken) wait for the next step: the cursor stops before
            // the first of them.
            let locks: Vec<i64> = chosen.iter().map(|o| order_lock(o)).collect();
            let taken: Vec<bool> = client.query(TRY_LOCKS_SQL, &[&locks]).await?.iter().map(|row| row.get(0)).collect();
            if let Some(busy) = taken.iter().position(|t| !t) {
                chosen.truncate(busy);
                cursor = positions[busy];
            }
            let mut step = Pruned { outbox_rows_visited: visited, ..Pruned::default() };
            if !chosen.is_empty() {
                let delete = client.prepare_cached(DELETE_SQL).await?;
                let row = client.query_one(&delete, &[&chosen]).await?;
                step.orders_deleted = row.get::<_, i64>(0) as u64;
                step.outbox_deleted = row.get::<_, i64>(1) as u64;
            }
            client
                .execute("UPDATE order_retention_cursor SET created_at = $1, id = $2", &[&cursor.0, &cursor.1])
                .await?;
            client.batch_execute("COMMIT").await?;
            Ok(step)
        }
    })
    .await?;
    pruned.add(&step);
    Ok(())
}
