//! The row counters behind `stats`: kept by triggers whoever writes, read without scanning, corrected by a recount.

use crate::{TempStore, side_connection};
use payhook_store::contract::{T0, ingest, new_order, pay, register_new, stats, test_policy, unparseable};
use payhook_store::{Stats, Store};

/// A store with a few hundred events, orders and outbox rows of every common status.
async fn store_with_history() -> TempStore {
    let store = TempStore::open(test_policy());
    for i in 0..200 {
        register_new(&store, new_order(&format!("ord_{i}"), 100, T0)).await;
        ingest(&store, pay(&format!("evt_{i}"), &format!("ord_{i}"), 100, T0 + i)).await;
    }
    ingest(&store, pay("evt_early", "ord_missing", 100, T0)).await;
    ingest(&store, unparseable("evt_bad", b"{", "not JSON", T0)).await;
    store
}

/// The plan of every statement `stats` runs, one line per step.
fn plans(conn: &rusqlite::Connection) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    for sql in payhook_sqlite::STATS_STATEMENTS {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).expect("explain");
        let details = stmt.query_map([], |r| r.get::<_, String>(3)).expect("plan");
        lines.extend(details.map(|d| (sql.to_owned(), d.expect("plan line"))));
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_read_the_inbox_orders_and_outbox_only_one_step_down_a_partial_index() {
    let store = store_with_history().await;
    let conn = side_connection(store.path());
    for analyzed in [false, true] {
        if analyzed {
            conn.execute_batch("ANALYZE").expect("analyze");
        }
        let plans = plans(&conn);
        assert!(plans.len() >= payhook_sqlite::STATS_STATEMENTS.len(), "{plans:?}");
        for (sql, detail) in plans {
            let named = detail.split_whitespace().nth(1);
            let Some(table) = ["inbox", "orders", "outbox"].into_iter().find(|t| named == Some(t)) else {
                continue;
            };
            // Only a partial index holding nothing but the rows asked for answers min() in one step whatever the
            // history: a full index (`received_at`) is walked until a matching row turns up.
            let index = detail.split(" INDEX ").nth(1).and_then(|rest| rest.split_whitespace().next());
            let partial = index.is_some_and(|index| {
                conn.query_row("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?1", [index], |r| {
                    r.get::<_, String>(0)
                })
                .is_ok_and(|ddl| ddl.contains(" WHERE "))
            });
            assert!(
                detail.starts_with(&format!("SEARCH {table} ")) && partial,
                "`{sql}` reads {table} other than through a partial index (analyzed: {analyzed}): {detail}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_changed_by_another_connection_are_counted_by_its_triggers() {
    let store = store_with_history().await;
    let before = stats(&store).await;
    let conn = side_connection(store.path());
    // What an older process, an operator's SQL or a retention step would do.
    conn.execute_batch(
        "DELETE FROM inbox WHERE event_id IN ('evt_0', 'evt_1');
         UPDATE orders SET status = 'refunded' WHERE id = 'ord_2';
         UPDATE outbox SET status = 'delivered' WHERE id = (SELECT min(id) FROM outbox);",
    )
    .expect("side writes");
    let after = stats(&store).await;
    assert_eq!(Stats::count(&after.events, "processed"), Stats::count(&before.events, "processed") - 2);
    assert_eq!(Stats::count(&after.orders, "refunded"), 1);
    assert_eq!(Stats::count(&after.outbox_by_status, "delivered"), 1);
    let recounted = store.recount().await.expect("recount");
    assert_eq!(recounted.drift, [], "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recount_reports_and_corrects_counters_that_drifted() {
    let store = store_with_history().await;
    let right = stats(&store).await;
    let conn = side_connection(store.path());
    conn.execute_batch(
        "UPDATE counters SET n = n + 5 WHERE tbl = 'inbox' AND status = 'processed';
         DELETE FROM counters WHERE tbl = 'orders' AND status = 'paid';",
    )
    .expect("corrupt the counters");
    assert_ne!(stats(&store).await, right, "stats read the counters");

    let recounted = store.recount().await.expect("recount");
    let drift: Vec<(&str, &str, i64, i64)> =
        recounted.drift.iter().map(|d| (d.key.table().as_str(), d.key.status(), d.kept, d.counted)).collect();
    assert_eq!(drift, [("inbox", "processed", 205, 200), ("orders", "paid", 0, 200)]);
    assert_eq!(stats(&store).await, right, "corrected");
    assert_eq!(store.recount().await.expect("recount").drift, [], "nothing left to correct");
}
