//! Retention by partition: days past the key retention are detached and dropped, not deleted row by row; what must
//! outlive its day (dead letters, deferred events) is moved to the held partition first; keys go with their day;
//! counters stay exact; several instances prune at once while deliveries keep arriving.

use crate::{TempSchema, TempStore, test_url};
use payhook_postgres::PgStore;
use payhook_store::contract::{
    T0, claim, claim_due, event_id, event_view, ignored, ingest, new_order, pay, processed, register_new, retry,
    source, test_policy, unparseable,
};
use payhook_store::metrics::PartitionMetrics;
use payhook_store::{Outcome, PruneRequest, Pruned, Replayed, Retried, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DAY: i64 = 86_400_000;
/// Midnight UTC after [`T0`]: day `i` of the tests starts at `D0 + i * DAY`.
const D0: i64 = (T0 / DAY + 1) * DAY;

/// The step the retention task sends at `now` with 30 days of keys and 7 of payloads.
fn request(now: i64, limit: u32) -> PruneRequest {
    PruneRequest {
        keys_before_ms: now - 30 * DAY,
        payloads_from_ms: 0,
        payloads_before_ms: now - 7 * DAY,
        orders_before_ms: 0,
        limit,
        now_ms: now,
    }
}

/// Prunes step by step until a step says there is nothing more, and returns the totals.
async fn prune_all<S: Store>(store: &S, request: PruneRequest) -> Pruned {
    let mut total = Pruned::default();
    for _ in 0..10_000 {
        let step = store.prune(request).await.expect("prune");
        total.add(&step);
        if !step.more(request.limit) {
            return total;
        }
    }
    panic!("pruning did not finish: {total:?}");
}

/// The partition of day `i` (`inbox_YYYYMMDD`).
async fn day_name(side: &tokio_postgres::Client, i: i64) -> String {
    side.query_one("SELECT payhook_day_partition($1)", &[&(((D0 + i * DAY) / DAY) as i32)])
        .await
        .expect("partition name")
        .get(0)
}

/// Tables of the schema whose name starts with `prefix`.
async fn tables_like(side: &tokio_postgres::Client, prefix: &str) -> Vec<String> {
    side.query(
        "SELECT relname::text FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')
           AND starts_with(relname, $1) ORDER BY 1",
        &[&prefix],
    )
    .await
    .expect("pg_class")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The partitions `inbox` has now.
async fn partitions(side: &tokio_postgres::Client) -> Vec<String> {
    side.query(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'inbox'::regclass ORDER BY 1",
        &[],
    )
    .await
    .expect("pg_inherits")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The partition a recorded event's row is in.
async fn partition_of(side: &tokio_postgres::Client, event: &str) -> String {
    side.query_one("SELECT tableoid::regclass::text FROM inbox WHERE event_id = $1", &[&event])
        .await
        .expect("the event's row")
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn days_past_the_key_retention_are_dropped_whole_and_dead_letters_and_deferred_events_survive() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open(&url, test_policy()).await;
    let side = store.schema().side().await;

    // Five old days, as the store would have seen them: each day's partition made ahead, then its deliveries.
    for i in 0..5 {
        assert!(store.pg().ensure_partitions(D0 + i * DAY).await.expect("partitions"));
        let at = D0 + i * DAY + 1_000;
        for k in 0..4 {
            let order = format!("ord_{i}_{k}");
            register_new(&store, new_order(&order, 100, at)).await;
            assert_eq!(ingest(&store, pay(&format!("evt_{i}_{k}"), &order, 100, at + k)).await, processed());
            let other = ignored(&format!("evt_ign_{i}_{k}"), "customer.updated", at + k);
            assert_eq!(ingest(&store, other).await.outcome, Outcome::Ignored);
        }
    }
    assert_eq!(partition_of(&side, "evt_0_0").await, day_name(&side, 0).await, "a delivery lands in its day");
    // A dead letter whose bytes parse once replayed, on day 0; an early payment on day 1, deferred.
    let good = pay("evt_late", "ord_late", 100, D0 + 2_000);
    let dead = ingest(&store, unparseable("sha256:late", good.raw_body(), "format was broken", D0 + 2_000)).await;
    assert_eq!(dead.outcome, Outcome::DeadLettered);
    let early = ingest(&store, pay("evt_early", "ord_early", 100, D0 + DAY + 2_000)).await;
    assert_eq!(early.outcome, Outcome::Deferred);
    // A day within the key retention.
    let young_day = D0 + 35 * DAY;
    assert!(store.pg().ensure_partitions(young_day).await.expect("partitions"));
    register_new(&store, new_order("ord_young", 100, young_day)).await;
    assert_eq!(ingest(&store, pay("evt_young", "ord_young", 100, young_day + 1)).await, processed());
    let old_days: Vec<String> = futures_util::future::join_all((0..5).map(|i| day_name(&side, i))).await;
    let before = partitions(&side).await;
    assert!(old_days.iter().all(|d| before.contains(d)), "{before:?}");

    // Day 40: keys are kept 30 days, so days 0 to 4 go; small steps, so each day takes several.
    let now = D0 + 40 * DAY;
    let total = prune_all(&store, request(now, 3)).await;
    assert_eq!(total.events_deleted, 5 * 8, "every settled event of the old days: {total:?}");
    // Days 0 to 4, and day 5, made ahead with day 4 and empty.
    assert_eq!((total.partitions_detached, total.partitions_dropped), (6, 6), "{total:?}");
    assert_eq!(total.business_keys_deleted, 5 * 4, "the payments' business keys: {total:?}");
    assert_eq!(total.partition_lock_timeouts, 0, "{total:?}");
    let metrics = store.pg().writer_metrics().partitions;
    assert_eq!(metrics, Some(PartitionMetrics { detached: 6, dropped: 6, lock_timeouts: 0 }));
    let after = partitions(&side).await;
    for day in &old_days {
        assert!(!after.contains(day), "{day} is still attached: {after:?}");
    }
    assert_eq!(tables_like(&side, "inbox_gone_").await, Vec::<String>::new(), "detached days are dropped");
    assert!(tables_like(&side, &old_days[0]).await.is_empty(), "no table of day 0 is left");
    assert!(after.contains(&day_name(&side, 35).await) && after.contains(&day_name(&side, 40).await), "{after:?}");
    let keys: i64 = side
        .query_one("SELECT count(*) FROM inbox_keys WHERE event_id LIKE 'evt\\_%\\_%'", &[])
        .await
        .expect("keys")
        .get(0);
    assert_eq!(keys, 0, "the old days' event-id keys are gone");
    let attempts: i64 = side.query_one("SELECT count(*) FROM inbox_attempts", &[]).await.expect("attempts").get(0);
    assert!(attempts >= 2, "the held events keep their attempt log: {attempts}");

    // What must outlive its day was moved to the held partition and can still be replayed and retried.
    assert_eq!(partition_of(&side, "sha256:late").await, "inbox_held");
    assert_eq!(partition_of(&side, "evt_early").await, "inbox_held");
    assert_eq!(event_view(&store, "sha256:late").await.status, Outcome::DeadLettered);
    register_new(&store, new_order("ord_late", 100, now)).await;
    let replayed = store.replay(&source(), &event_id("sha256:late"), good.parsed().clone(), now).await.expect("replay");
    assert_eq!(replayed, Replayed::Done(processed()));
    assert_eq!(event_view(&store, "evt_late").await.status, Outcome::Processed);
    register_new(&store, new_order("ord_early", 100, now)).await;
    let due = claim_due(&store, claim("w", now, 30_000)).await;
    assert_eq!(due.len(), 1, "{due:?}");
    for c in due {
        assert_eq!(retry(&store, c, now).await, Retried::Done(processed()));
    }

    // A pruned event delivered again is new (its order's state keeps it from paying twice); a young one is still
    // a duplicate.
    assert!(store.event(&source(), &event_id("evt_ign_0_0")).await.expect("event").is_none());
    let again = ingest(&store, ignored("evt_ign_0_0", "customer.updated", now)).await;
    assert_eq!(again.outcome, Outcome::Ignored, "{again:?}");
    let paid_again = ingest(&store, pay("evt_0_1", "ord_0_1", 100, now)).await;
    assert_eq!(paid_again.outcome, Outcome::Processed, "{paid_again:?}");
    assert!(paid_again.detail.is_some(), "a no-op: {paid_again:?}");
    assert_eq!(ingest(&store, pay("evt_young", "ord_young", 100, now)).await.outcome, Outcome::Duplicate);

    // The counters followed every row that left with a partition.
    assert_eq!(store.recount().await.expect("recount").drift, [], "{total:?}");
    // The held events settled since (the replayed dead letter, retired as a duplicate, its replay under its own
    // id and the deferred payment) are older than the key retention: the next run deletes them row by row.
    let held = prune_all(&store, request(now, 3)).await;
    assert_eq!((held.events_deleted, held.partitions_detached), (3, 0), "{held:?}");
    for gone in ["sha256:late", "evt_late", "evt_early"] {
        assert!(store.event(&source(), &event_id(gone)).await.expect("event").is_none(), "{gone}");
    }
    assert_eq!(prune_all(&store, request(now, 3)).await, Pruned::default(), "nothing is left to do");
    assert_eq!(store.recount().await.expect("recount").drift, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_prune_at_once_while_deliveries_arrive_and_nothing_is_lost() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let open = || PgStore::open(schema.options(test_policy()));
    let (a, b) = (Arc::new(open().await.expect("instance a")), Arc::new(open().await.expect("instance b")));
    let side = schema.side().await;

    const OLD_DAYS: i64 = 4;
    const PER_DAY: i64 = 400;
    for i in 0..OLD_DAYS {
        assert!(a.ensure_partitions(D0 + i * DAY).await.expect("partitions"));
        let sent = (0..PER_DAY).map(|k| {
            let store = if k % 2 == 0 { &a } else { &b };
            store.ingest(ignored(&format!("old_{i}_{k}"), "customer.updated", D0 + i * DAY + k))
        });
        for r in futures_util::future::join_all(sent).await {
            assert_eq!(r.expect("ingest").outcome, Outcome::Ignored);
        }
        let dead = unparseable(&format!("sha256:dead_{i}"), b"{", "not JSON", D0 + i * DAY + 5);
        assert_eq!(a.ingest(dead).await.expect("ingest").outcome, Outcome::DeadLettered);
    }

    let now = D0 + 40 * DAY;
    assert!(a.ensure_partitions(now).await.expect("partitions"));
    let prune = |store: Arc<PgStore>| tokio::spawn(async move { prune_all(&*store, request(now, 50)).await });
    let (pa, pb) = (prune(Arc::clone(&a)), prune(Arc::clone(&b)));
    let deliveries = {
        let (a, b) = (Arc::clone(&a), Arc::clone(&b));
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for k in 0..200 {
                let store = if k % 2 == 0 { &a } else { &b };
                answers.push(store.ingest(ignored(&format!("new_{k}"), "customer.updated", now + k)).await);
            }
            answers
        })
    };
    let (ta, tb) = (pa.await.expect("instance a prunes"), pb.await.expect("instance b prunes"));
    for answer in deliveries.await.expect("deliveries") {
        assert_eq!(answer.expect("a delivery during pruning").outcome, Outcome::Ignored);
    }

    assert_eq!(ta.events_deleted + tb.events_deleted, (OLD_DAYS * PER_DAY) as u64, "{ta:?} {tb:?}");
    // The old days and the empty one made ahead with the last of them.
    assert_eq!(ta.partitions_dropped + tb.partitions_dropped, OLD_DAYS as u64 + 1, "{ta:?} {tb:?}");
    assert_eq!(tables_like(&side, "inbox_gone_").await, Vec::<String>::new());
    for k in 0..200 {
        assert!(a.event(&source(), &event_id(&format!("new_{k}"))).await.expect("event").is_some(), "new_{k}");
    }
    for i in 0..OLD_DAYS {
        let dead = b.event(&source(), &event_id(&format!("sha256:dead_{i}"))).await.expect("event");
        assert_eq!(dead.map(|e| e.status), Some(Outcome::DeadLettered), "dead letter of day {i}");
    }
    let left: i64 = side.query_one("SELECT count(*) FROM inbox", &[]).await.expect("count").get(0);
    assert_eq!(left, 200 + OLD_DAYS);
    let keys: i64 = side.query_one("SELECT count(*) FROM inbox_keys", &[]).await.expect("count").get(0);
    assert_eq!(keys, 200 + OLD_DAYS, "one key per row left, none for what was dropped");
    assert_eq!(a.recount().await.expect("recount").drift, []);
    a.shutdown().await;
    b.shutdown().await;
}

/// `n` settled events of day `day` (each with its event-id and business key and a 300-byte body), written in bulk
/// into `bucket`: the day's own partition, or 0 (the held partition, pruned row by row as the whole inbox was
/// before partitioning).
async fn bulk_day(side: &tokio_postgres::Client, n: i64, day: i64, bucket: i32) {
    let n = i32::try_from(n).expect("a day's events fit an integer");
    side.execute(
        "INSERT INTO inbox_keys (source, event_id) SELECT 'shop', 'bulk_' || g FROM generate_series(1, $1) g",
        &[&n],
    )
    .await
    .expect("keys");
    side.execute(
        "INSERT INTO business_keys (source, key, event_id, created_at)
         SELECT 'shop', 'bk_' || g, 'bulk_' || g, $2 FROM generate_series(1, $1) g",
        &[&n, &day],
    )
    .await
    .expect("business keys");
    side.execute(
        "INSERT INTO inbox (source, event_id, event_type, business_key, status, received_at, updated_at, verification,
                            headers, body, bucket)
         SELECT 'shop', 'bulk_' || g, 'payment_intent.succeeded', 'bk_' || g, 'processed', $2::bigint + g, $2::bigint + g,
                'v', '{}',
                convert_to(repeat('x', 300), 'UTF8'), $3
         FROM generate_series(1, $1) g",
        &[&n, &day, &bucket],
    )
    .await
    .expect("rows");
    side.batch_execute("ANALYZE").await.expect("analyze");
}

async fn inbox_bytes(side: &tokio_postgres::Client) -> i64 {
    side.query_one(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'inbox\\_%'
           AND c.relname NOT IN ('inbox_keys', 'inbox_attempts')",
        &[],
    )
    .await
    .expect("size")
    .get(0)
}

/// The same day of settled events pruned both ways. Dropping its partition returns its space at once and deletes
/// only the narrow keys row by row; deleting its rows leaves the table as large as before, for vacuum. Prints the
/// times; `PAYHOOK_PARTITION_ROWS` sets the day's size (default 20,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_day_returns_its_space_where_deleting_its_rows_does_not() {
    let Some(url) = test_url() else { return };
    let n: i64 = std::env::var("PAYHOOK_PARTITION_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let now = D0 + 40 * DAY;
    let mut results = Vec::new();
    for by_partition in [true, false] {
        let store = TempStore::open(&url, test_policy()).await;
        let side = store.schema().side().await;
        assert!(store.pg().ensure_partitions(D0).await.expect("partitions"));
        bulk_day(&side, n, D0, if by_partition { (D0 / DAY) as i32 } else { 0 }).await;
        let before = inbox_bytes(&side).await;
        let started = std::time::Instant::now();
        let total = prune_all(&store, request(now, 1_000)).await;
        let took = started.elapsed();
        let after = inbox_bytes(&side).await;
        assert_eq!(total.events_deleted, n as u64, "{total:?}");
        assert_eq!(total.business_keys_deleted, n as u64, "{total:?}");
        let left: i64 = side.query_one("SELECT count(*) FROM inbox_keys", &[]).await.expect("keys").get(0);
        assert_eq!(left, 0, "every event-id key went with its event");
        assert_eq!(store.recount().await.expect("recount").drift, []);
        let how = if by_partition { "partition drop" } else { "row deletes" };
        eprintln!(
            "{how}: {n} events pruned in {} ms ({} steps of 1000); inbox tables {} kB before, {} kB after",
            took.as_millis(),
            (n + 999) / 1000,
            before / 1024,
            after / 1024
        );
        results.push((before, after));
    }
    let [(dropped_before, dropped_after), (deleted_before, deleted_after)] = results[..] else { unreachable!() };
    assert!(
        dropped_after * 4 < dropped_before,
        "the dropped day's space is returned: {dropped_before} → {dropped_after}"
    );
    assert!(
        deleted_after * 10 >= deleted_before * 9,
        "deleted rows keep their space until a vacuum: {deleted_before} → {deleted_after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detach_waits_at_most_the_partition_lock_timeout_and_the_next_step_does_it() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open_with(&url, test_policy(), |o| o.partition_lock_timeout_ms = 200).await;
    let side = store.schema().side().await;
    assert!(store.pg().ensure_partitions(D0).await.expect("partitions"));
    assert_eq!(ingest(&store, ignored("evt_old", "customer.updated", D0 + 1)).await.outcome, Outcome::Ignored);
    let now = D0 + 40 * DAY;
    assert!(store.pg().ensure_partitions(now).await.expect("partitions"));

    // A long transaction that has read the inbox keeps the exclusive lock of a detach away.
    let reader = store.schema().side().await;
    reader.batch_execute("BEGIN; SELECT count(*) FROM inbox").await.expect("a long reader");
    let started = Instant::now();
    let step = store.prune(request(now, 100)).await.expect("prune");
    let waited = started.elapsed();
    assert_eq!((step.partitions_detached, step.partition_lock_timeouts, step.events_deleted), (0, 1, 0), "{step:?}");
    assert!(waited < Duration::from_secs(2), "the step gave up after its lock timeout: {waited:?}");
    assert!(partitions(&side).await.contains(&day_name(&side, 0).await), "the day is still there");
    let metrics = store.pg().writer_metrics().partitions.expect("partition metrics");
    assert_eq!(metrics.lock_timeouts, 1, "{metrics:?}");
    // Deliveries go on meanwhile.
    assert_eq!(ingest(&store, ignored("evt_new", "customer.updated", now)).await.outcome, Outcome::Ignored);

    reader.batch_execute("COMMIT").await.expect("the reader ends");
    let total = prune_all(&store, request(now, 100)).await;
    assert_eq!(
        (total.partitions_detached, total.events_deleted, total.partition_lock_timeouts),
        (2, 1, 0),
        "{total:?}"
    );
    assert!(store.event(&source(), &event_id("evt_old")).await.expect("event").is_none());
    assert_eq!(store.recount().await.expect("recount").drift, []);
}
