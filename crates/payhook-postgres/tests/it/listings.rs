//! Every listing walks an index that matches its filter, or is a bounded scan, whatever the table's size.
//!
//! The rule, for every filter shape the API, the dashboard and the CLI can send
//! (`payhook_store::listing::every_event_filter`, `every_outbox_filter`, `every_audit_filter`): each statement is
//! prepared and its
//! generic plan (the one a prepared statement keeps for every binding) explained with sequential scans, bitmap
//! scans and sorts priced out (`enable_* = off`), so that the plan shows the path the planner has for a big table:
//! * every scan of `inbox`, `outbox` or `audit` is an index scan (backward: newest first) on the index the listing names,
//!   never a sequential or bitmap scan, and nothing is sorted (an order's outbox rows, a handful read through
//!   `UNIQUE (order_id, kind, sink)`, are sorted, and only they);
//! * a page whose conditions are not all `Index Cond` (the plan shows the others as `Filter`) comes with a
//!   boundary statement that walks the same index with no `Filter`, `LIMIT 1 OFFSET n`: the bounded scan.

use crate::{TempStore, test_url};
use payhook_postgres::{ListingSql, Walk};
use payhook_store::contract::test_policy;
use payhook_store::listing::{every_audit_filter, every_event_filter, every_outbox_filter};

/// The generic plan of `sql`, one line per row of `EXPLAIN`.
async fn plan(side: &tokio_postgres::Client, sql: &str, sorts: bool) -> Vec<String> {
    let params = (1..).take_while(|n| sql.contains(&format!("${n}"))).count();
    let nulls = vec!["NULL"; params].join(", ");
    let args = if params == 0 { String::new() } else { format!("({nulls})") };
    let sort = if sorts { "on" } else { "off" };
    side.batch_execute(&format!("SET enable_sort = {sort}; DEALLOCATE ALL; PREPARE listing AS {sql}"))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let rows = side.query(&format!("EXPLAIN EXECUTE listing{args}"), &[]).await.expect("explain");
    rows.iter().map(|r| r.get(0)).collect()
}

/// `index` and, when it is the index of a partitioned table (the inbox is partitioned by day), the index of each
/// partition attached to it: a walk down `index` reads one of these per partition.
async fn index_family(side: &tokio_postgres::Client, index: &str) -> Vec<String> {
    let rows = side
        .query(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = $1",
            &[&index],
        )
        .await
        .expect("partition indexes");
    std::iter::once(index.to_owned()).chain(rows.iter().map(|r| r.get(0))).collect()
}

/// The plan's lines that scan `table` or one of its partitions (`inbox_held`, `inbox_20261201`, `inbox_default`).
fn scans_of<'a>(lines: &'a [String], table: &str) -> Vec<&'a String> {
    let partition = format!(" on {table}_");
    lines
        .iter()
        .filter(|l| l.contains(&format!(" on {table} ")) || (l.contains(" Scan") && l.contains(&partition)))
        .collect()
}

/// Whether a plan line is a sort node ("Sort Key:" lines of a Merge Append over partitions are not).
fn is_sort(line: &str) -> bool {
    let node = line.trim_start().trim_start_matches("->").trim_start();
    node.starts_with("Sort  (") || node.starts_with("Incremental Sort  (")
}

async fn check_search(side: &tokio_postgres::Client, table: &str, s: &ListingSql, sql: &str, whole: bool) {
    let by_order = s.walk == Walk::OrderRows;
    let lines = plan(side, sql, by_order).await;
    let scans = scans_of(&lines, table);
    assert!(!scans.is_empty(), "`{sql}` does not read {table}: {lines:#?}");
    let family = index_family(side, s.walk.index()).await;
    for line in scans {
        let direction = if by_order { "" } else { " Backward" };
        let walks = family.iter().flat_map(|index| {
            [format!("Index Scan{direction} using {index} on"), format!("Index Only Scan{direction} using {index} on")]
        });
        assert!(
            walks.into_iter().any(|w| line.contains(w.as_str())),
            "`{sql}` does not walk {}: {lines:#?}",
            s.walk.index()
        );
    }
    assert!(!lines.iter().any(|l| is_sort(l)) || by_order, "`{sql}` sorts: {lines:#?}");
    if whole && !by_order {
        assert!(
            !lines.iter().any(|l| l.trim_start().starts_with("Filter:")),
            "`{sql}` checks a condition its index does not serve: {lines:#?}"
        );
    }
}

async fn check_listing(side: &tokio_postgres::Client, table: &str, s: &ListingSql) {
    let (timed, time_index) = if table == "audit" { ("audit", "audit_at") } else { ("inbox", "inbox_received") };
    let received = index_family(side, time_index).await;
    for sql in &s.time_bounds {
        let lines = plan(side, sql, false).await;
        let scans = scans_of(&lines, timed);
        assert!(!scans.is_empty(), "`{sql}` does not read {timed}: {lines:#?}");
        for line in scans {
            assert!(received.iter().any(|i| line.contains(&format!("using {i} on {timed}"))), "`{sql}`: {lines:#?}");
        }
    }
    match &s.boundary {
        Some(boundary) => {
            assert!(boundary.contains("LIMIT 1 OFFSET $"), "{boundary}");
            check_search(side, table, s, boundary, true).await;
            check_search(side, table, s, &s.page, false).await;
        }
        None => check_search(side, table, s, &s.page, true).await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listing_walks_an_index_matching_its_filter_or_is_a_bounded_scan() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open(&url, test_policy()).await;
    let side = store.schema().side().await;
    // The planner prefers reading a tiny table whole and sorting it; with those options off it shows the path it
    // has for a big one. A generic plan is the one every execution of a prepared statement may get.
    side.batch_execute(
        "ANALYZE; SET enable_seqscan = off; SET enable_bitmapscan = off; SET plan_cache_mode = force_generic_plan",
    )
    .await
    .expect("settings");
    let (mut bounded, mut whole) = (0, 0);
    for f in every_event_filter() {
        let s = payhook_postgres::event_listing_sql(&f);
        check_listing(&side, "inbox", &s).await;
        if s.boundary.is_some() { bounded += 1 } else { whole += 1 }
    }
    for f in every_outbox_filter() {
        check_listing(&side, "outbox", &payhook_postgres::outbox_listing_sql(&f)).await;
    }
    let (mut audit_bounded, mut audit_whole) = (0, 0);
    for f in every_audit_filter() {
        let s = payhook_postgres::audit_listing_sql(&f);
        check_listing(&side, "audit", &s).await;
        if s.boundary.is_some() { audit_bounded += 1 } else { audit_whole += 1 }
    }
    assert!(audit_bounded > 0 && audit_whole > 0, "audit: {audit_bounded} bounded, {audit_whole} whole");
    assert!(bounded > 0 && whole > 0, "both kinds are checked: {bounded} bounded, {whole} whole");
}
