//! Listings cost the same with a few hundred thousand rows as with a few: every statement walks an index that
//! matches its filter, and a filter no index serves whole examines at most `list_scan_rows` rows a page.
//!
//! The rule the plan test enforces, for every filter shape the API, the dashboard and the CLI can send
//! (`payhook_store::listing::every_event_filter`, `every_outbox_filter`, `every_audit_filter`), with and without
//! `ANALYZE`:
//! * every step on `inbox`, `outbox` or `audit` is a `SEARCH` (never a `SCAN`, never a temporary b-tree for the order), on
//!   the index the listing names (the row id for the table's own order), bounded by the id range;
//! * a page whose conditions are not all constraints of that search (SQLite lists them in the plan, one `?` each)
//!   comes with a boundary statement that walks the same path with only its constraints, `LIMIT 1 OFFSET n`:
//!   the bounded scan. An order's outbox rows are the exception: they are the handful its row lists.

use crate::{TempStore, side_connection};
use payhook_sqlite::{ListingSql, Walk};
use payhook_store::listing::{every_audit_filter, every_event_filter, every_outbox_filter};
use payhook_store::{EventFilter, Listing, Outcome};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn plan(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap_or_else(|e| panic!("{sql}: {e}"));
    // The plan does not depend on the values: a prepared statement's plan serves every binding.
    let nulls = vec![rusqlite::types::Value::Null; stmt.parameter_count()];
    let lines = stmt.query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3)).expect("plan");
    lines.map(|d| d.expect("plan line")).collect()
}

/// The `?` of a statement's own `WHERE`, before its `ORDER BY`.
fn conditions(sql: &str) -> usize {
    let clause = sql.split(" WHERE ").nth(1).and_then(|w| w.split(" ORDER BY ").next()).unwrap_or("");
    clause.matches('?').count()
}

/// Checks one statement's plan: a `SEARCH` of `table` down `index` (or the row id), whose constraints hold every
/// condition of the statement when `whole` is set. Returns its lines, for messages.
fn check_search(conn: &rusqlite::Connection, table: &str, s: &ListingSql, sql: &str, whole: bool) {
    let lines = plan(conn, sql);
    let on_table: Vec<&String> = lines.iter().filter(|l| l.split_whitespace().nth(1) == Some(table)).collect();
    assert!(!on_table.is_empty(), "`{sql}` does not read {table}: {lines:?}");
    let by_order = s.walk == Walk::OrderList;
    assert!(!lines.iter().any(|l| l.contains("TEMP B-TREE")) || by_order, "`{sql}` sorts: {lines:?}");
    for line in on_table {
        let path = match s.walk {
            Walk::Index(index) => format!("SEARCH {table} USING INDEX {index} ("),
            Walk::RowId | Walk::OrderList => format!("SEARCH {table} USING INTEGER PRIMARY KEY ("),
        };
        let covering = path.replace("USING INDEX", "USING COVERING INDEX");
        assert!(line.starts_with(&path) || line.starts_with(&covering), "`{sql}` does not walk its path: {line}");
        if whole && !by_order {
            let constraints = line.split('(').nth(1).map_or(0, |c| c.matches('?').count());
            assert_eq!(constraints, conditions(sql), "`{sql}` checks a condition its path does not serve: {line}");
        }
    }
}

fn check_listing(conn: &rusqlite::Connection, table: &str, s: &ListingSql) {
    let time_index = match table {
        "audit" => "SEARCH audit USING COVERING INDEX audit_at (at_ms>?)",
        _ => "SEARCH inbox USING COVERING INDEX inbox_received (received_at>?)",
    };
    for sql in &s.time_bounds {
        let lines = plan(conn, sql);
        assert!(lines.iter().all(|l| l.starts_with(time_index)), "`{sql}`: {lines:?}");
    }
    match &s.boundary {
        Some(boundary) => {
            assert!(boundary.ends_with("LIMIT 1 OFFSET ?"), "{boundary}");
            check_search(conn, table, s, boundary, true);
            check_search(conn, table, s, &s.page, false);
        }
        None => check_search(conn, table, s, &s.page, true),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listing_walks_an_index_matching_its_filter_or_is_a_bounded_scan() {
    let store = TempStore::open(payhook_store::contract::test_policy());
    let conn = side_connection(store.path());
    let (mut bounded, mut whole) = (0, 0);
    for analyzed in [false, true] {
        if analyzed {
            conn.execute_batch("ANALYZE").expect("analyze");
        }
        for f in every_event_filter() {
            let s = payhook_sqlite::event_listing_sql(&f);
            check_listing(&conn, "inbox", &s);
            if s.boundary.is_some() { bounded += 1 } else { whole += 1 }
        }
        for f in every_outbox_filter() {
            check_listing(&conn, "outbox", &payhook_sqlite::outbox_listing_sql(&f));
        }
        let (mut audit_bounded, mut audit_whole) = (0, 0);
        for f in every_audit_filter() {
            let s = payhook_sqlite::audit_listing_sql(&f);
            check_listing(&conn, "audit", &s);
            if s.boundary.is_some() { audit_bounded += 1 } else { audit_whole += 1 }
        }
        assert!(audit_bounded > 0 && audit_whole > 0, "audit: {audit_bounded} bounded, {audit_whole} whole");
    }
    assert!(bounded > 0 && whole > 0, "both kinds are checked: {bounded} bounded, {whole} whole");
}

/// Rows of a large inbox, inserted in one transaction: `processed`, four types, no reason, one a millisecond; every
/// 40,000th from the 123rd on has the reason `needle`.
fn fill_inbox(path: &std::path::Path, rows: i64) {
    let conn = side_connection(path);
    conn.execute_batch(&format!(
        "BEGIN;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
         INSERT INTO inbox (source, event_id, event_type, status, reason, received_at, updated_at, verification,
                            headers, body)
         SELECT 'shop', 'evt_' || i, 'type.' || (i % 4), 'processed',
                CASE WHEN i % 40000 = 123 THEN 'needle' END, {t0} + i, {t0} + i, 'none', '[]', x'00'
         FROM n;
         COMMIT;",
        t0 = payhook_store::contract::T0
    ))
    .expect("fill the inbox");
}

/// A listing on a connection of our own, counting the virtual machine instructions it ran (a progress callback
/// every 100).
fn counted(
    conn: &rusqlite::Connection,
    f: &EventFilter,
    scan_rows: u32,
) -> (Listing<payhook_store::EventSummary>, u64) {
    let ticks = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&ticks);
    conn.progress_handler(
        100,
        Some(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            false
        }),
    );
    let page = payhook_sqlite::list_events(conn, f, scan_rows).expect("list");
    conn.progress_handler(0, None::<fn() -> bool>);
    (page, ticks.load(Ordering::Relaxed) * 100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_matching_nothing_in_300k_rows_answers_promptly_and_paging_on_finds_every_match() {
    const ROWS: i64 = 300_000;
    const SCAN_ROWS: u32 = 10_000;
    let store = TempStore::open(payhook_store::contract::test_policy());
    fill_inbox(store.path(), ROWS);
    let conn = side_connection(store.path());
    let nothing = EventFilter { reason_contains: Some("no such text".into()), limit: 51, ..EventFilter::default() };

    // The same filter without a bound reads every row: the yardstick.
    let started = Instant::now();
    let (all, unbounded) = counted(&conn, &nothing, u32::MAX);
    let unbounded_time = started.elapsed();
    assert_eq!((all.rows.len(), all.scan_stopped_before), (0, None));

    let started = Instant::now();
    let (first, bounded) = counted(&conn, &nothing, SCAN_ROWS);
    let bounded_time = started.elapsed();
    assert_eq!(first.rows.len(), 0);
    let stopped = first.scan_stopped_before.expect("a page stopped by the bound says where");
    assert_eq!(stopped, ROWS - i64::from(SCAN_ROWS) + 1, "it examined exactly the bound, newest first");
    println!(
        "no match among {ROWS} rows: {bounded} VM instructions in {bounded_time:?} with the bound of {SCAN_ROWS}, \
         {unbounded} in {unbounded_time:?} without"
    );
    assert!(bounded * 10 < unbounded, "the bound cuts the work: {bounded} vs {unbounded}");
    assert!(bounded_time < Duration::from_secs(1), "{bounded_time:?}");

    // Paging on from each stop visits every match, each page doing bounded work.
    let needles = EventFilter { reason_contains: Some("needle".into()), limit: 51, ..EventFilter::default() };
    let mut found = Vec::new();
    let (mut before, mut pages, mut most) = (None, 0, 0);
    loop {
        let (page, work) = counted(&conn, &EventFilter { before, ..needles.clone() }, SCAN_ROWS);
        pages += 1;
        most = most.max(work);
        found.extend(page.rows.iter().map(|e| e.event_id.clone()));
        before = page.next_before(needles.limit, |e| e.row_id);
        if before.is_none() {
            break;
        }
    }
    let expected: Vec<String> = (1..=ROWS).rev().filter(|i| i % 40_000 == 123).map(|i| format!("evt_{i}")).collect();
    assert_eq!(found, expected, "every match once, newest first");
    // One page per bound's worth of rows, and one more when the last stop falls on the oldest row.
    let least = (ROWS as u64).div_ceil(u64::from(SCAN_ROWS));
    assert!((least..=least + 1).contains(&pages), "{pages} pages");
    assert!(most <= bounded * 2, "no page works much more than the first: {most} vs {bounded}");

    // A filter an index serves reads a page's worth, whatever the table's size.
    let typed = EventFilter { event_type: Some("type.1".into()), limit: 51, ..EventFilter::default() };
    let (page, work) = counted(&conn, &typed, SCAN_ROWS);
    assert_eq!((page.rows.len(), page.scan_stopped_before), (51, None));
    assert!(work * 100 < unbounded, "an indexed page reads only its rows: {work}");
    println!("a page of one type: {work} VM instructions");
    let dead = EventFilter { status: Some(Outcome::DeadLettered), limit: 51, ..EventFilter::default() };
    let (page, work) = counted(&conn, &dead, SCAN_ROWS);
    assert_eq!((page.rows.len(), page.scan_stopped_before), (0, None), "no dead letter: the end at once");
    assert!(work * 100 < unbounded, "{work}");
}
