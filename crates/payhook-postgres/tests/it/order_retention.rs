//! Order retention walks the outbox from its cursor: a late step reads what an early one read, whatever was
//! deleted before it.

use crate::{TempStore, test_url};
use payhook_store::contract::{T0, test_policy};
use payhook_store::{PruneRequest, Pruned, Store};
use std::time::Instant;

/// Refunded orders of the history, each with a delivered `order.paid` and `order.refunded` row and two audit rows;
/// every tenth one's refund row is dead (kept, passed over).
const ORDERS: i64 = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_orders_costs_the_same_per_order_early_and_late_in_a_long_history() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open(&url, test_policy()).await;
    let side = store.schema().side().await;
    side.batch_execute(&format!(
        "INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
             SELECT 'ord_' || i, 100, 'usd', 'refunded', {T0} + i, {T0} + i FROM generate_series(1, {ORDERS}) i;
         INSERT INTO order_audit (order_id, source, event_id, event_type, from_status, to_status, at)
             SELECT 'ord_' || i, 'shop', e || i, e, f, t, {T0} + i FROM generate_series(1, {ORDERS}) i,
                 (VALUES ('pay_', 'pending', 'paid'), ('refund_', 'paid', 'refunded')) AS x(e, f, t);
         INSERT INTO outbox (kind, sink, order_id, source, event_id, payload, status, created_at)
             SELECT k, 'crm', 'ord_' || i, 'shop', k || i, '{{}}',
                    CASE WHEN k = 'order.refunded' AND i % 10 = 0 THEN 'dead' ELSE 'delivered' END, {T0} + i
             FROM generate_series(1, {ORDERS}) i, (VALUES (1, 'order.paid'), (2, 'order.refunded')) AS x(n, k)
             ORDER BY i, n;
         ANALYZE"
    ))
    .await
    .expect("history");

    // The scan is a range of the outbox's primary key from the cursor, never a walk from its start.
    side.batch_execute(&format!("PREPARE scan (bigint, bigint, text[]) AS {}", payhook_postgres::ORDER_RETENTION_SCAN))
        .await
        .expect("prepare");
    let plan: Vec<String> = side
        .query("EXPLAIN EXECUTE scan(30000, 4000, '{order.refunded,order.disputed}')", &[])
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let range = plan.iter().position(|l| l.contains("Index Scan using outbox_pkey on outbox"));
    assert!(
        range.is_some_and(|i| plan.get(i + 1).is_some_and(|l| l.contains("Index Cond: (id > '30000'::bigint)"))),
        "{plan:#?}"
    );

    let request = PruneRequest {
        keys_before_ms: 0,
        payloads_from_ms: 0,
        payloads_before_ms: 0,
        orders_before_ms: T0 + ORDERS + 1,
        limit: 1_000,
        now_ms: T0 + ORDERS + 1,
    };
    let mut steps: Vec<(Pruned, std::time::Duration)> = Vec::new();
    loop {
        let started = Instant::now();
        let step = store.prune(request).await.expect("prune");
        steps.push((step, started.elapsed()));
        if !step.more(request.limit) {
            break;
        }
        assert!(steps.len() < 100, "order retention makes no progress: {:?}", &steps[steps.len() - 3..]);
    }
    let deleted: u64 = steps.iter().map(|(p, _)| p.orders_deleted).sum();
    let rows: u64 = steps.iter().map(|(p, _)| p.outbox_deleted).sum();
    assert_eq!((deleted, rows), (18_000, 36_000), "every refunded order goes but those with a dead row");
    let (first, late) = (&steps[0], &steps[15]);
    assert_eq!((first.0.orders_deleted, late.0.orders_deleted), (1_000, 1_000), "{first:?} {late:?}");
    // The 16th step, with 15,000 orders deleted behind it, reads what the first one read.
    assert!(late.0.outbox_rows_visited <= first.0.outbox_rows_visited + 2, "{first:?} {late:?}");
    eprintln!("first step {:?}, 16th step {:?} ({} steps)", first.1, late.1, steps.len());
    let kept: i64 = side.query_one("SELECT count(*) FROM orders", &[]).await.expect("count").get(0);
    assert_eq!(kept, ORDERS / 10, "orders with a dead row stay");
    let audit: i64 = side.query_one("SELECT count(*) FROM order_audit", &[]).await.expect("count").get(0);
    assert_eq!(audit, 2 * ORDERS / 10, "their history stays with them, the others' went");
    assert_eq!(store.recount().await.expect("recount").drift, [], "the counters followed the deletes");
}
