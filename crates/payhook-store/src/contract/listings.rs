//! Listings: newest first, narrowed by their filters, paged with a cursor; a filter that no index serves whole examines at most the scan bound of rows per page and says where it
//! stopped; paging on from there visits every match once.

use super::{
    T0, claim_outbox, finish, ignored, ingest, new_order, outbox_of, pay, refund, register_new, source, stats,
    unparseable,
};
use crate::{Dispatched, EventFilter, EventSummary, Listing, OutboxFilter, OutboxView, Outcome, Stats, Store};

/// The scan bound the listing cases run with: small, so that a few dozen rows cross it many times.
pub const SCAN_BOUND: u32 = 3;

/// Listings come newest first, narrowed by their filters, and page with a cursor.
pub async fn events_and_outbox_rows_are_listed_newest_first_with_filters_and_cursors<S: Store>(store: S) {
    register_new(&store, new_order("ord_l", 100, T0)).await;
    ingest(&store, pay("evt_l1", "ord_l", 100, T0 + 1)).await;
    ingest(&store, ignored("evt_l2", "customer.created", T0 + 2)).await;
    ingest(&store, unparseable("evt_l3", b"x", "not json", T0 + 3)).await;
    ingest(&store, pay("evt_l4", "ord_missing", 100, T0 + 4)).await;
    let all = store.list_events(EventFilter { limit: 10, ..EventFilter::default() }).await.expect("list").rows;
    let ids: Vec<&str> = all.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_l4", "evt_l3", "evt_l2", "evt_l1"]);
    let page = store
        .list_events(EventFilter { limit: 2, before: Some(all[1].row_id), ..EventFilter::default() })
        .await
        .expect("list")
        .rows;
    assert_eq!(page.iter().map(|e| e.event_id.as_str()).collect::<Vec<_>>(), ["evt_l2", "evt_l1"]);
    let dead = store
        .list_events(EventFilter { status: Some(Outcome::DeadLettered), limit: 10, ..EventFilter::default() })
        .await
        .expect("list")
        .rows;
    assert_eq!(dead.iter().map(|e| e.event_id.as_str()).collect::<Vec<_>>(), ["evt_l3"]);
    let typed = store
        .list_events(EventFilter {
            event_type: Some("payment.succeeded".into()),
            since_ms: Some(T0 + 2),
            limit: 10,
            ..EventFilter::default()
        })
        .await
        .expect("list")
        .rows;
    assert_eq!(typed.iter().map(|e| e.event_id.as_str()).collect::<Vec<_>>(), ["evt_l4"]);
    let reason = store
        .list_events(EventFilter {
            reason_contains: Some("not registered".into()),
            limit: 10,
            ..EventFilter::default()
        })
        .await
        .expect("list")
        .rows;
    assert_eq!(reason.iter().map(|e| e.event_id.as_str()).collect::<Vec<_>>(), ["evt_l4"]);

    let rows = outbox_of(&store, OutboxFilter { order_id: Some("ord_l".into()), ..OutboxFilter::default() }).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    let older = outbox_of(&store, OutboxFilter { before: Some(rows[0].id), ..OutboxFilter::default() }).await;
    assert!(older.iter().all(|r| r.id < rows[0].id));
    let s = stats(&store).await;
    assert_eq!(Stats::count(&s.outbox_by_status, "pending"), 4, "three receipts and one alert: {s:?}");
    assert_eq!(s.oldest_pending_outbox_ms, Some(T0 + 1));
    assert_eq!(s.oldest_deferred_event_ms, Some(T0 + 4));
}

/// Pages through `first` with `list`, following each page's continuation, and returns every row with the pages.
pub(super) async fn page_through<T: Clone, F: Clone>(
    first: F,
    limit: u32,
    set_before: impl Fn(&mut F, Option<i64>),
    list: impl AsyncFn(F) -> Listing<T>,
    id: impl Fn(&T) -> i64 + Copy,
) -> (Vec<T>, Vec<(Option<i64>, Listing<T>)>) {
    let mut filter = first;
    let mut before = None;
    let mut rows = Vec::new();
    let mut pages = Vec::new();
    for _ in 0..1_000 {
        set_before(&mut filter, before);
        let page = list(filter.clone()).await;
        assert!(page.rows.len() <= limit as usize, "a page holds at most its limit");
        rows.extend(page.rows.iter().cloned());
        let next = page.next_before(limit, id);
        pages.push((before, page));
        if next.is_none() {
            return (rows, pages);
        }
        assert!(next < before.or(Some(i64::MAX)), "each page continues below the previous one");
        before = next;
    }
    panic!("the listing never ended");
}

async fn all_events<S: Store>(store: &S) -> Vec<EventSummary> {
    let page = store.list_events(EventFilter { limit: 1_000, ..EventFilter::default() }).await.expect("list");
    assert_eq!(page.scan_stopped_before, None, "the row id order serves an unfiltered listing whole");
    page.rows
}

async fn all_outbox<S: Store>(store: &S) -> Vec<OutboxView> {
    let page = store.list_outbox(OutboxFilter { limit: 1_000, ..OutboxFilter::default() }).await.expect("list");
    assert_eq!(page.scan_stopped_before, None, "the row id order serves an unfiltered listing whole");
    page.rows
}

/// Pages through `filter` two rows at a time; checks that every match comes once, newest first, and that every page
/// the bound stopped examined at most [`SCAN_BOUND`] rows of `path` (the rows its index walks). Returns how many
/// pages the bound stopped.
async fn check_events<S: Store>(
    store: &S,
    filter: EventFilter,
    matches: impl Fn(&EventSummary) -> bool,
    path: impl Fn(&EventSummary) -> bool,
) -> usize {
    let all = all_events(store).await;
    let expected: Vec<i64> = all.iter().filter(|e| matches(e)).map(|e| e.row_id).collect();
    let (rows, pages) = page_through(
        EventFilter { limit: 2, ..filter.clone() },
        2,
        |f, before| f.before = before,
        async |f| store.list_events(f).await.expect("list"),
        |e| e.row_id,
    )
    .await;
    let seen: Vec<i64> = rows.iter().map(|e| e.row_id).collect();
    assert_eq!(seen, expected, "every match once, newest first: {filter:?}");
    let mut stopped = 0;
    for (before, page) in &pages {
        let Some(floor) = page.scan_stopped_before else { continue };
        stopped += 1;
        assert!(page.rows.len() < 2, "only a short page says where the bound stopped it");
        let examined = all.iter().filter(|e| path(e) && e.row_id >= floor && before.is_none_or(|b| e.row_id < b));
        assert!(examined.count() <= SCAN_BOUND as usize, "a page examined more than the bound: {filter:?}");
    }
    stopped
}

/// A reason substring, a second filter beside the status, a time range: each examines at most the bound of rows
/// per page, says where it stopped (short pages, even empty ones, that are not the end), and paging on from there
/// visits every match once.
pub async fn a_filter_no_index_serves_stops_at_the_scan_bound_and_pages_on_to_every_match<S: Store>(store: S) {
    for i in 0..24 {
        let at = T0 + i;
        match i % 4 {
            0 => ingest(&store, unparseable(&format!("evt_n{i}"), b"x", "needle in the body", at)).await,
            1 => ingest(&store, unparseable(&format!("evt_h{i}"), b"x", "not JSON", at)).await,
            2 => ingest(&store, ignored(&format!("evt_i{i}"), "customer.created", at)).await,
            _ => ingest(&store, ignored(&format!("evt_u{i}"), "customer.updated", at)).await,
        };
    }
    let needle = |e: &EventSummary| e.reason.as_deref().is_some_and(|r| r.contains("needle"));
    let reason = EventFilter { reason_contains: Some("needle".into()), ..EventFilter::default() };
    let stopped = check_events(&store, reason, needle, |_| true).await;
    assert!(stopped > 0, "one match in four rows crosses a bound of {SCAN_BOUND}");

    let dead = |e: &EventSummary| e.status == Outcome::DeadLettered;
    let dead_needles = EventFilter {
        status: Some(Outcome::DeadLettered),
        reason_contains: Some("needle".into()),
        ..EventFilter::default()
    };
    let stopped = check_events(&store, dead_needles, |e| dead(e) && needle(e), dead).await;
    assert!(stopped > 0, "one needle in two dead letters crosses a bound of {SCAN_BOUND}");

    let typed = |e: &EventSummary| e.event_type.as_deref() == Some("customer.updated");
    let ignored_updates = EventFilter {
        status: Some(Outcome::Ignored),
        event_type: Some("customer.updated".into()),
        source: Some(source()),
        ..EventFilter::default()
    };
    check_events(&store, ignored_updates, typed, |e| e.status == Outcome::Ignored).await;

    let (since, until) = (T0 + 5, T0 + 19);
    let window = |e: &EventSummary| e.received_at_ms >= since && e.received_at_ms < until;
    let timed = EventFilter { since_ms: Some(since), until_ms: Some(until), ..EventFilter::default() };
    check_events(&store, timed, window, |_| true).await;
    let nothing_since = EventFilter { since_ms: Some(T0 + 1_000), ..EventFilter::default() };
    let page = store.list_events(nothing_since).await.expect("list");
    assert_eq!((page.rows.len(), page.scan_stopped_before), (0, None), "nothing received since: the end at once");

    // Outbox rows: a kind (no index), a sink beside a status.
    for i in 0..6 {
        let order = format!("ord_s{i}");
        register_new(&store, new_order(&order, 100, T0)).await;
        ingest(&store, pay(&format!("evt_p{i}"), &order, 100, T0 + 30 + i)).await;
        if i % 2 == 0 {
            ingest(&store, refund(&format!("evt_r{i}"), &order, 100, T0 + 40 + i)).await;
        }
    }
    // `processed` alone, rare here: the status index does not hold it, so it is a scan of the newest rows.
    let processed = EventFilter { status: Some(Outcome::Processed), ..EventFilter::default() };
    let stopped = check_events(&store, processed, |e| e.status == Outcome::Processed, |_| true).await;
    assert!(stopped > 0, "24 rows without a processed one cross a bound of {SCAN_BOUND}");

    // Every other mail row delivered, every crm row dead.
    for (i, job) in claim_outbox(&store, "mail", "d", T0 + 50).await.iter().enumerate() {
        if i % 2 == 0 {
            assert!(finish(&store, job, Dispatched::Delivered { status: 204 }, T0 + 51).await);
        }
    }
    for job in claim_outbox(&store, "crm", "d", T0 + 50).await {
        assert!(finish(&store, &job, Dispatched::Dead { status: Some(400), error: "400".into() }, T0 + 51).await);
    }
    let all = all_outbox(&store).await;
    assert!(all.iter().any(|r| r.status == crate::OutboxStatus::Delivered), "{all:?}");
    for filter in [
        OutboxFilter { status: Some(crate::OutboxStatus::Delivered), ..OutboxFilter::default() },
        OutboxFilter { kind: Some(crate::OutboxKind::OrderRefunded), ..OutboxFilter::default() },
        OutboxFilter {
            status: Some(crate::OutboxStatus::Pending),
            sink: Some("mail".into()),
            ..OutboxFilter::default()
        },
    ] {
        let expected: Vec<i64> = all
            .iter()
            .filter(|r| filter.kind.as_ref().is_none_or(|k| *k == r.kind))
            .filter(|r| filter.sink.as_ref().is_none_or(|s| Some(s) == r.sink.as_ref()))
            .filter(|r| filter.status.as_ref().is_none_or(|s| *s == r.status))
            .map(|r| r.id)
            .collect();
        let (rows, pages) = page_through(
            OutboxFilter { limit: 2, ..filter.clone() },
            2,
            |f, before| f.before = before,
            async |f| store.list_outbox(f).await.expect("list"),
            |r| r.id,
        )
        .await;
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), expected, "every match once: {filter:?}");
        assert!(pages.iter().any(|(_, p)| p.scan_stopped_before.is_some()), "the bound stopped a page: {filter:?}");
    }
}

/// A status, a source, a type, a sink, an order: their index yields only matches, so a page fills up whatever the
/// bound, and no page says it stopped. (Not `processed` nor `delivered`, the bulk, which the status indexes do not
/// hold: the previous contract pages through them.)
pub async fn filters_an_index_serves_whole_never_stop_at_the_scan_bound<S: Store>(store: S) {
    for i in 0..12 {
        let at = T0 + i;
        if i % 3 == 0 {
            ingest(&store, unparseable(&format!("evt_d{i}"), b"x", "not JSON", at)).await;
        } else {
            ingest(&store, ignored(&format!("evt_i{i}"), "customer.created", at)).await;
        }
    }
    for i in 0..5 {
        let order = format!("ord_w{i}");
        register_new(&store, new_order(&order, 100, T0)).await;
        ingest(&store, pay(&format!("evt_w{i}"), &order, 100, T0 + 20 + i)).await;
    }
    let whole = [
        EventFilter { status: Some(Outcome::DeadLettered), ..EventFilter::default() },
        EventFilter { source: Some(source()), ..EventFilter::default() },
        EventFilter { event_type: Some("customer.created".into()), ..EventFilter::default() },
    ];
    let all = all_events(&store).await;
    for filter in whole {
        let page = store.list_events(EventFilter { limit: 100, ..filter.clone() }).await.expect("list");
        let expected = all
            .iter()
            .filter(|e| filter.status.is_none_or(|s| s == e.status))
            .filter(|e| filter.event_type.as_ref().is_none_or(|t| Some(t) == e.event_type.as_ref()))
            .count();
        assert!(expected > SCAN_BOUND as usize, "more rows than the bound: {filter:?}");
        assert_eq!((page.rows.len(), page.scan_stopped_before), (expected, None), "{filter:?}");
    }
    let all = all_outbox(&store).await;
    for filter in [
        OutboxFilter { sink: Some("crm".into()), ..OutboxFilter::default() },
        OutboxFilter { status: Some(crate::OutboxStatus::Pending), ..OutboxFilter::default() },
        OutboxFilter {
            order_id: Some("ord_w1".into()),
            kind: Some(crate::OutboxKind::OrderPaid),
            ..OutboxFilter::default()
        },
    ] {
        let page = store.list_outbox(OutboxFilter { limit: 100, ..filter.clone() }).await.expect("list");
        let expected = all
            .iter()
            .filter(|r| filter.sink.as_ref().is_none_or(|s| Some(s) == r.sink.as_ref()))
            .filter(|r| filter.status.as_ref().is_none_or(|s| *s == r.status))
            .filter(|r| filter.order_id.as_ref().is_none_or(|o| Some(o) == r.order_id.as_ref()))
            .filter(|r| filter.kind.as_ref().is_none_or(|k| *k == r.kind))
            .count();
        assert!(expected > SCAN_BOUND as usize || filter.order_id.is_some(), "more rows than the bound: {filter:?}");
        assert_eq!((page.rows.len(), page.scan_stopped_before), (expected, None), "{filter:?}");
    }
}
