//! `PgOptions::read` (`storage.read_url`): listings and the counts of `stats` come from the read target, and
//! everything else from the primary. The test server has no standby, so the read target is another schema of it
//! (its own store migrated it, and writes its own rows there). The two schemas hold different rows, so each
//! answer shows where it was read.

use crate::{FullPool, TempStore, test_url};
use payhook_postgres::ReadTarget;
use payhook_store::contract::{
    T0, event_view, ingest, new_order, order_view, pay, processed, register_new, test_policy, test_routing,
};
use payhook_store::{EventFilter, OutboxFilter, Stats, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A store whose listings and stats are read from `reads`'s schema, its pool of `read_pool_size`.
async fn routed(url: &str, reads: &TempStore, adjust: impl FnOnce(&mut payhook_postgres::PgOptions)) -> TempStore {
    let mut read = ReadTarget::new(url).expect("the test URL parses");
    read.config.options(format!("-c search_path={}", reads.schema().name()));
    TempStore::open_with(url, test_policy(), |o| {
        o.routing = test_routing();
        o.read = Some(read);
        o.read_pool_size = 2;
        adjust(o);
    })
    .await
}

fn events(stats: &Stats) -> u64 {
    stats.events.iter().map(|(_, n)| n).sum()
}

fn orders(stats: &Stats) -> u64 {
    stats.orders.iter().map(|(_, n)| n).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_stats_come_from_the_read_url_while_writes_and_point_reads_stay_on_the_primary() {
    let Some(url) = test_url() else { return };
    // The read target: a schema of its own with one paid order, written by a store of its own.
    let reads = TempStore::open_with(&url, test_policy(), |o| o.routing = test_routing()).await;
    register_new(&reads, new_order("ord_standby", 100, T0)).await;
    assert_eq!(ingest(&reads, pay("evt_standby", "ord_standby", 100, T0 + 1)).await, processed());

    let store = routed(&url, &reads, |_| {}).await;
    for i in 0..3 {
        register_new(&store, new_order(&format!("ord_p{i}"), 100, T0)).await;
        assert_eq!(ingest(&store, pay(&format!("evt_p{i}"), &format!("ord_p{i}"), 100, T0 + 1)).await, processed());
    }

    // Listings: the read target's one event and its outbox rows, none of the primary's.
    let listed = store.list_events(EventFilter { limit: 50, ..EventFilter::default() }).await.expect("list events");
    let ids: Vec<&str> = listed.rows.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_standby"]);
    let outbox = store.list_outbox(OutboxFilter { limit: 50, ..OutboxFilter::default() }).await.expect("list outbox");
    assert!(!outbox.rows.is_empty(), "the read target's payment has outbox rows");
    assert!(outbox.rows.iter().all(|r| r.order_id.as_deref() == Some("ord_standby")), "{:?}", outbox.rows);

    // Stats: the read target's counts; the fold, a write, ran on the primary.
    let side = store.schema().side().await;
    let deltas = async || -> i64 {
        side.query_one("SELECT count(*) FROM counter_deltas", &[]).await.expect("count the deltas").get(0)
    };
    assert!(deltas().await > 0, "the primary's writes left deltas to fold");
    let stats = store.stats().await.expect("stats");
    assert_eq!((events(&stats), orders(&stats)), (1, 1), "{stats:?}");
    assert_eq!(deltas().await, 0, "stats folded the primary's deltas");
    let primary = reads.stats().await.expect("the read target's own stats");
    assert_eq!(stats, primary, "the same counts as the read target's own store reads");

    // Point reads, and the row re-read after an outbox retry, are the primary's.
    assert_eq!(event_view(&store, "evt_p1").await.event_id.as_str(), "evt_p1");
    let order = order_view(&store, "ord_p2").await;
    let row = order.outbox.first().expect("the paid order's outbox row");
    let fresh = store.outbox_row(row.id).await.expect("outbox row").expect("found on the primary");
    assert_eq!(fresh.order_id.as_deref(), Some("ord_p2"));
    assert!(
        store
            .event(&payhook_store::contract::source(), &payhook_store::contract::event_id("evt_standby"))
            .await
            .expect("event")
            .is_none(),
        "the read target's event is not on the primary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_on_the_read_url_waits_for_no_connection_of_the_primarys_full_pool() {
    let Some(url) = test_url() else { return };
    let reads = TempStore::open(&url, test_policy()).await;
    let store = Arc::new(
        routed(&url, &reads, |o| {
            (o.pool_size, o.writers, o.pool_wait_ms, o.connect_timeout_ms) = (2, 1, 1_000, 1_000);
        })
        .await,
    );
    // A query holds the one connection left to everything but batches, and a batch the writers' one.
    let full = FullPool::hold(&store).await;

    for _ in 0..5 {
        let start = Instant::now();
        let page = store.list_events(EventFilter { limit: 10, ..EventFilter::default() }).await.expect("listing");
        let took = start.elapsed();
        assert!(page.rows.is_empty(), "the read target has no events");
        assert!(took < Duration::from_millis(500), "a listing took {took:?} while the primary's pool was full");
    }
    full.release().await;
}
