//! The row counters behind `stats`: kept by triggers whoever writes, read without scanning, corrected by a recount.

use crate::{TempStore, test_url};
use payhook_store::contract::{T0, ingest, new_order, pay, register_new, stats, test_policy, unparseable};
use payhook_store::{Stats, Store};

/// Orders of the history [`store_with_history`] writes, each paid once.
const ORDERS: i64 = 50;

/// A store with events, orders and outbox rows of the common statuses.
async fn store_with_history(url: &str) -> TempStore {
    let store = TempStore::open(url, test_policy()).await;
    for i in 0..ORDERS {
        register_new(&store, new_order(&format!("ord_{i}"), 100, T0)).await;
        ingest(&store, pay(&format!("evt_{i}"), &format!("ord_{i}"), 100, T0 + i)).await;
    }
    ingest(&store, pay("evt_early", "ord_missing", 100, T0)).await;
    ingest(&store, unparseable("evt_bad", b"{", "not JSON", T0)).await;
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_read_the_inbox_orders_and_outbox_only_one_step_down_a_partial_index() {
    let Some(url) = test_url() else { return };
    let store = store_with_history(&url).await;
    let side = store.schema().side().await;
    // The planner prefers reading a tiny table whole; with that option off it shows the path it has for a big one.
    side.batch_execute("ANALYZE; SET enable_seqscan = off").await.expect("analyze");
    for sql in payhook_postgres::STATS_STATEMENTS {
        let plan: Vec<String> =
            side.query(&format!("EXPLAIN {sql}"), &[]).await.expect("explain").iter().map(|r| r.get(0)).collect();
        for line in &plan {
            // The inbox is read through its partitions (`on inbox_held inbox_1`, `on inbox_20261201 inbox_2`).
            let Some(table) = ["inbox", "orders", "outbox"]
                .into_iter()
                .find(|t| line.contains(&format!(" on {t} ")) || line.contains(&format!(" on {t}_")))
            else {
                continue;
            };
            // Only a partial index holding nothing but the rows asked for answers min() in one step whatever the
            // history: a full index (`received_at`) is walked until a matching row turns up.
            let index = line.split(" using ").nth(1).and_then(|rest| rest.split_whitespace().next());
            let mut partial = false;
            if let Some(index) = index {
                let defs = side
                    .query(
                        "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = $1",
                        &[&index],
                    )
                    .await
                    .expect("pg_indexes");
                partial = defs.iter().any(|r| r.get::<_, String>(0).contains(" WHERE "));
            }
            assert!(
                line.contains("Index Only Scan") && partial,
                "`{sql}` reads {table} other than through a partial index: {line}\n{plan:#?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_changed_by_another_connection_are_counted_by_its_triggers() {
    let Some(url) = test_url() else { return };
    let store = store_with_history(&url).await;
    let before = stats(&store).await;
    let side = store.schema().side().await;
    // What an older process, an operator's SQL or a retention step would do.
    side.batch_execute(
        "DELETE FROM inbox WHERE event_id IN ('evt_0', 'evt_1');
         UPDATE orders SET status = 'refunded' WHERE id = 'ord_2';
         UPDATE outbox SET status = 'delivered' WHERE id = (SELECT min(id) FROM outbox);",
    )
    .await
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
    let Some(url) = test_url() else { return };
    let store = store_with_history(&url).await;
    let right = stats(&store).await;
    let side = store.schema().side().await;
    side.batch_execute(&format!(
        "INSERT INTO counter_deltas VALUES ('inbox', 'shop', '', 'processed', 5), ('orders', '', '', 'paid', -{ORDERS});"
    ))
    .await
    .expect("corrupt the counters");
    assert_ne!(stats(&store).await, right, "stats read the counters");

    let recounted = store.recount().await.expect("recount");
    let drift: Vec<(&str, &str, i64, i64)> =
        recounted.drift.iter().map(|d| (d.key.table().as_str(), d.key.status(), d.kept, d.counted)).collect();
    assert_eq!(drift, [("inbox", "processed", ORDERS + 5, ORDERS), ("orders", "paid", 0, ORDERS)]);
    assert_eq!(stats(&store).await, right, "corrected");
    assert_eq!(store.recount().await.expect("recount").drift, [], "nothing left to correct");
}

/// Every fold leaves its delta rows dead; the store vacuums `counter_deltas` after enough of them, so the table (and
/// the fold's read of it) does not grow with the history of folds, with autovacuum off as on this machine or behind.
/// Checked by the table's vacuum count: how much a vacuum reclaims also depends on other transactions of the cluster
/// (tests running beside this one hold back what it may remove), whether it ran does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folded_deltas_are_vacuumed_so_the_deltas_table_does_not_grow_with_history() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open(&url, test_policy()).await;
    let side = store.schema().side().await;
    let vacuums = async || -> i64 {
        side.batch_execute("SELECT pg_stat_clear_snapshot()").await.expect("fresh statistics");
        side.query_one("SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'counter_deltas'::regclass", &[])
            .await
            .expect("vacuum count")
            .get(0)
    };
    let before = vacuums().await;
    // Rows of a key nothing else counts, cancelling out, so the totals stay exact.
    let add = "INSERT INTO counter_deltas SELECT 'inbox', 'vacuum-test', '', 'processed', (-1) ^ g \
               FROM generate_series(1, 60000) g";
    for _ in 0..3 {
        side.batch_execute(add).await.expect("deltas");
        stats(&store).await;
    }
    // Statistics reach the view within a second or so of the vacuum's end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut ran = vacuums().await - before;
    while ran < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        ran = vacuums().await - before;
    }
    assert!(ran >= 3, "three folds of 60,000 deltas each ran {ran} vacuums of counter_deltas, not one each");
    let total: Option<i64> = side
        .query_one("SELECT sum(n)::bigint FROM counter_totals WHERE grp = 'vacuum-test'", &[])
        .await
        .expect("total")
        .get(0);
    assert_eq!(total, Some(0), "every delta folded once");
}
