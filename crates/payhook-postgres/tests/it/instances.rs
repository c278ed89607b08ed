//! Several stores on one schema, as several payhook instances on one database: migrations apply once, dedup holds
//! across them, leases are split by `SKIP LOCKED`, and overlapping batches neither double-apply nor deadlock.

use crate::{TempSchema, TempStore, test_url};
use payhook_core::ledger::OrderStatus;
use payhook_postgres::PgStore;
use payhook_store::contract::{
    BASE_MS, T0, claim, new_order, order_view, pay, refund, register_new, stats, test_policy,
};
use payhook_store::{Claim, Outcome, Registered, Stats, Store};
use std::collections::HashSet;
use std::sync::Arc;

async fn instances(schema: &TempSchema, n: usize) -> Vec<Arc<PgStore>> {
    let opened = futures_util::future::join_all((0..n).map(|_| PgStore::open(schema.options(test_policy())))).await;
    opened.into_iter().map(|s| Arc::new(s.expect("open an instance"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_together_migrate_once_and_deduplicate_together() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let stores = instances(&schema, 4).await;
    let side = schema.side().await;
    let versions: Vec<i32> = side
        .query("SELECT version FROM payhook_schema_version ORDER BY version", &[])
        .await
        .expect("versions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=PgStore::schema_version() as i32).collect::<Vec<_>>());

    assert_eq!(stores[0].register_order(new_order("ord_s", 100, T0)).await.unwrap(), Registered::Created);
    assert_eq!(stores[1].register_order(new_order("ord_s", 100, T0)).await.unwrap(), Registered::AlreadyExists);
    let delivery = pay("evt_s", "ord_s", 100, T0 + 1);
    let answers = futures_util::future::join_all(stores.iter().map(|s| s.ingest(delivery.clone()))).await;
    let mut outcomes: Vec<Outcome> = answers.into_iter().map(|a| a.expect("ingest").outcome).collect();
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [Outcome::Duplicate, Outcome::Duplicate, Outcome::Duplicate, Outcome::Processed]);
    assert_eq!(order_view(&*stores[3], "ord_s").await.outbox.len(), 1);
    for store in &stores {
        store.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_from_several_instances_lease_each_due_event_to_exactly_one() {
    let Some(url) = test_url() else { return };
    const N: usize = 200;
    let schema = TempSchema::create(&url).await;
    let stores = instances(&schema, 4).await;
    let early = futures_util::future::join_all(
        (0..N).map(|i| stores[i % 4].ingest(pay(&format!("evt_c{i}"), &format!("ord_c{i}"), 100, T0))),
    )
    .await;
    assert!(early.into_iter().all(|r| r.expect("ingest").outcome == Outcome::Deferred));

    let claims = futures_util::future::join_all(stores.iter().enumerate().map(|(k, store)| {
        let store = Arc::clone(store);
        async move {
            let mut mine = Vec::new();
            loop {
                let batch = store
                    .claim_due(Claim { limit: 7, ..claim(&format!("worker-{k}"), T0 + BASE_MS, 60_000) })
                    .await
                    .expect("claim");
                if batch.is_empty() {
                    return mine;
                }
                assert!(batch.iter().all(|c| c.owner == format!("worker-{k}")));
                mine.extend(batch.into_iter().map(|c| c.event_id.as_str().to_owned()));
            }
        }
    }))
    .await;
    let total: usize = claims.iter().map(Vec::len).sum();
    let distinct: HashSet<&String> = claims.iter().flatten().collect();
    assert_eq!(
        (total, distinct.len()),
        (N, N),
        "each due event leased once: {:?}",
        claims.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(claims.iter().filter(|c| !c.is_empty()).count() > 1, "the instances shared the work");
    for store in &stores {
        store.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_of_three_instances_apply_every_fact_once_without_deadlocks() {
    let Some(url) = test_url() else { return };
    const ORDERS: usize = 400;
    // The TempStore owns the schema and reads the result; the three instances do the work.
    let store = TempStore::open(&url, test_policy()).await;
    let stores = instances(store.schema(), 3).await;
    for i in 0..ORDERS {
        register_new(&*stores[i % 3], new_order(&format!("ord_o{i}"), 100, T0)).await;
    }
    // Every order gets a payment; every third a refund too. Each delivery goes to all three instances at once, in
    // an order shuffled per instance, so their batches overlap on every key.
    let mut deliveries = Vec::new();
    for i in 0..ORDERS {
        deliveries.push(pay(&format!("evt_p{i}"), &format!("ord_o{i}"), 100, T0 + 1));
        if i % 3 == 0 {
            deliveries.push(refund(&format!("evt_r{i}"), &format!("ord_o{i}"), 100, T0 + 2));
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for store in &stores {
        let mut mine = deliveries.clone();
        fastrand::shuffle(&mut mine);
        for d in mine {
            let store = Arc::clone(store);
            tasks.spawn(async move { (d.parsed.event_id().as_str().to_owned(), store.ingest(d).await) });
        }
    }
    let mut processed = std::collections::HashMap::<String, usize>::new();
    while let Some(joined) = tasks.join_next().await {
        let (id, answer) = joined.expect("task");
        let answer = answer.unwrap_or_else(|e| panic!("{id}: {e:?}"));
        if answer.outcome == Outcome::Processed {
            *processed.entry(id).or_default() += 1;
        }
    }
    assert!(processed.values().all(|n| *n == 1), "an event was processed twice: {processed:?}");
    assert_eq!(processed.len(), deliveries.len(), "every event was processed by one of the instances");

    for i in 0..ORDERS {
        let order = order_view(&store, &format!("ord_o{i}")).await;
        let expected = if i % 3 == 0 { OrderStatus::Refunded } else { OrderStatus::Paid };
        assert_eq!(order.status, expected, "ord_o{i}: {order:?}");
        let receipts = order.outbox.iter().filter(|o| o.kind == "order.paid").count();
        assert!(receipts <= 1, "ord_o{i} has {receipts} receipts");
    }
    let s = stats(&store).await;
    assert_eq!(Stats::count(&s.events, "processed"), deliveries.len() as u64, "{s:?}");
    assert_eq!(Stats::count(&s.events, "duplicate"), 0, "{s:?}");
    for store in &stores {
        let batches = store.batch_stats();
        // No deadlock was ever detected (and no connection lost): no batch had to run again.
        assert_eq!((batches.failed_batches, batches.reruns), (0, 0), "{batches:?}");
        store.shutdown().await;
    }
}
