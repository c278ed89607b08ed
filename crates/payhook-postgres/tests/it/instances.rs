//! Several stores on one schema, as several payhook instances on one database: migrations apply once, dedup holds
//! across them, leases (of deferred events and of outbox rows) are split by `SKIP LOCKED`, alert windows and
//! replays are race-free, and overlapping batches neither double-apply nor deadlock, dead letters and their alerts
//! included.

use crate::{TempSchema, TempStore, test_url};
use payhook_core::ledger::OrderStatus;
use payhook_core::retry::RetryPolicy;
use payhook_postgres::PgStore;
use payhook_store::contract::{
    BASE_MS, T0, audit_entry, claim, event_id, event_view, new_order, order_view, pay, processed, refund, register_new,
    source, stats, test_policy, test_routing, unparseable,
};
use payhook_store::{
    Alert, AuditAction, AuditFilter, Claim, Dispatched, OutboxFilter, Outcome, Registered, Replayed, Stats, Store,
};
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
    let steps: Vec<i32> = (11..=PgStore::schema_version() as i32).collect();
    assert_eq!(versions, steps, "the baseline and each migration after it, applied once");

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

/// Every instance appends to the one audit trail: entries written by one (alone, or with a registration batched
/// with another instance's) are listed whole by another, and by a store opened on the database after the first
/// has shut down; each instance's pruning steps prune them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_entries_written_by_one_instance_are_seen_by_another_and_outlive_it() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let stores = instances(&schema, 2).await;
    stores[0].audit(vec![audit_entry(T0, "ops", AuditAction::Login, None)]).await.expect("audit");
    let entry = audit_entry(T0 + 1, "ops", AuditAction::OrderRegister, Some("order/ord_a"));
    let (first, second) = tokio::join!(
        stores[0].register_order_audited(new_order("ord_a", 100, T0 + 1), Some(entry)),
        stores[1].register_order(new_order("ord_b", 100, T0 + 1)),
    );
    assert_eq!((first.expect("register"), second.expect("register")), (Registered::Created, Registered::Created));
    stores[1].audit(vec![audit_entry(T0 + 2, "ci", AuditAction::Reload, None)]).await.expect("audit");
    let all = AuditFilter { limit: 10, ..AuditFilter::default() };
    let written = stores[1].list_audit(all.clone()).await.expect("list").rows;
    let seen: Vec<(&str, &str)> = written.iter().map(|r| (r.entry.actor.as_str(), r.entry.outcome.as_str())).collect();
    assert_eq!(seen, [("ci", "ok"), ("ops", "created"), ("ops", "ok")]);
    assert_eq!(stores[0].list_audit(all.clone()).await.expect("list").rows, written);
    for store in &stores {
        store.shutdown().await;
    }

    let later = PgStore::open(schema.options(test_policy())).await.expect("open again");
    assert_eq!(later.list_audit(all.clone()).await.expect("list").rows, written, "the entries outlive the instances");
    assert_eq!(later.prune_audit(T0 + 2, 10).await.expect("prune"), 2);
    assert_eq!(later.list_audit(all).await.expect("list").rows, written[..1]);
    later.shutdown().await;
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
            tasks.spawn(async move { (d.parsed().event_id().as_str().to_owned(), store.ingest(d).await) });
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
        let receipts = order.outbox.iter().filter(|o| o.kind == payhook_store::OutboxKind::OrderPaid).count();
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

async fn routed_instances(schema: &TempSchema, n: usize, policy: RetryPolicy) -> Vec<Arc<PgStore>> {
    let opened = futures_util::future::join_all((0..n).map(|_| {
        let mut options = schema.options(policy.clone());
        options.routing = test_routing();
        PgStore::open(options)
    }))
    .await;
    opened.into_iter().map(|s| Arc::new(s.expect("open an instance"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_alerts_of_one_key_from_several_instances_make_one_alert_with_every_repeat_counted() {
    let Some(url) = test_url() else { return };
    const EACH: i64 = 25;
    let schema = TempSchema::create(&url).await;
    let stores = routed_instances(&schema, 4, test_policy()).await;
    let raised = futures_util::future::join_all(stores.iter().enumerate().map(|(k, store)| async move {
        for i in 0..EACH {
            let alert = Alert { key: "shop:verification".into(), text: format!("{k}/{i}"), now_ms: T0 + i };
            store.raise_alert(alert).await.expect("raise_alert");
        }
    }))
    .await;
    assert_eq!(raised.len(), 4);
    let rows = stores[0]
        .list_outbox(OutboxFilter {
            kind: Some(payhook_store::OutboxKind::Alert),
            limit: 100,
            ..OutboxFilter::default()
        })
        .await
        .expect("list")
        .rows;
    assert_eq!(rows.len(), 1, "one window, one alert: {rows:?}");
    assert_eq!(rows[0].payload["count"], 4 * EACH, "{}", rows[0].payload);
    for store in &stores {
        store.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_outbox_claims_from_several_instances_lease_each_row_to_exactly_one() {
    let Some(url) = test_url() else { return };
    const N: usize = 120;
    let schema = TempSchema::create(&url).await;
    let stores = routed_instances(&schema, 4, test_policy()).await;
    for i in 0..N {
        register_new(&*stores[i % 4], new_order(&format!("ord_d{i}"), 100, T0)).await;
    }
    let paid = futures_util::future::join_all(
        (0..N).map(|i| stores[i % 4].ingest(pay(&format!("evt_d{i}"), &format!("ord_d{i}"), 100, T0 + 1))),
    )
    .await;
    assert!(paid.into_iter().all(|r| r.expect("ingest").outcome == Outcome::Processed));

    let claims = futures_util::future::join_all(stores.iter().enumerate().map(|(k, store)| {
        let store = Arc::clone(store);
        async move {
            let mut mine = Vec::new();
            loop {
                let owner = format!("dispatcher-{k}");
                let jobs = store
                    .claim_outbox("crm", Claim { limit: 7, ..claim(&owner, T0 + 2, 60_000) })
                    .await
                    .expect("claim_outbox");
                if jobs.is_empty() {
                    return mine;
                }
                for job in jobs {
                    assert!(store.finish_outbox(&job, Dispatched::Delivered { status: 200 }, T0 + 3).await.unwrap());
                    mine.push(job.id);
                }
            }
        }
    }))
    .await;
    let total: usize = claims.iter().map(Vec::len).sum();
    let distinct: HashSet<&i64> = claims.iter().flatten().collect();
    assert_eq!(
        (total, distinct.len()),
        (N, N),
        "each crm row leased once: {:?}",
        claims.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let s = stores[0].stats().await.expect("stats");
    assert_eq!(Stats::count(&s.outbox_by_status, "delivered"), N as u64, "{s:?}");
    assert_eq!(Stats::count(&s.outbox_by_status, "pending"), 2 * N as u64, "mail and audit untouched: {s:?}");
    for store in &stores {
        store.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replays_of_one_dead_letter_from_several_instances_apply_it_once() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    // One attempt: a payment for an order that does not exist is dead-lettered on arrival.
    let stores = routed_instances(&schema, 4, RetryPolicy { max_attempts: 1, ..test_policy() }).await;
    let early = pay("evt_rp", "ord_rp", 100, T0);
    let parsed = early.parsed().clone();
    assert_eq!(stores[0].ingest(early).await.expect("ingest").outcome, Outcome::DeadLettered);
    register_new(&*stores[1], new_order("ord_rp", 100, T0 + 1)).await;

    let (src, id) = (source(), event_id("evt_rp"));
    let replays =
        futures_util::future::join_all(stores.iter().map(|store| store.replay(&src, &id, parsed.clone(), T0 + 2)))
            .await;
    let mut outcomes: Vec<Replayed> = replays.into_iter().map(|r| r.expect("replay")).collect();
    outcomes.sort_by_key(|r| format!("{r:?}"));
    let not_dead = Replayed::NotDeadLetter(Outcome::Processed);
    assert_eq!(outcomes, [Replayed::Done(processed()), not_dead.clone(), not_dead.clone(), not_dead]);
    let order = order_view(&*stores[2], "ord_rp").await;
    assert_eq!((order.status, order.outbox.len()), (OrderStatus::Paid, 3), "{order:?}");
    assert_eq!(event_view(&*stores[3], "evt_rp").await.attempts, 2);
    for store in &stores {
        store.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_with_dead_letters_and_alerts_on_three_instances_never_deadlock() {
    let Some(url) = test_url() else { return };
    const ORDERS: usize = 150;
    const UNREADABLE: usize = 60;
    let store = TempStore::open(&url, test_policy()).await;
    let stores = routed_instances(store.schema(), 3, test_policy()).await;
    for i in 0..ORDERS {
        register_new(&*stores[i % 3], new_order(&format!("ord_x{i}"), 100, T0)).await;
    }
    // Payments (every fifth of the wrong amount: a dead letter), refunds of every third of the others (a refund
    // first makes its payment a no-op), and unreadable bodies
    // (dead letters without an order), each sent to all three instances in a shuffled order: every batch raises
    // the same alert while others hold the same orders and inbox keys.
    let mut deliveries = Vec::new();
    for i in 0..ORDERS {
        let amount = if i % 5 == 0 { 99 } else { 100 };
        deliveries.push(pay(&format!("evt_xp{i}"), &format!("ord_x{i}"), amount, T0 + 1));
        if i % 3 == 0 && i % 5 != 0 {
            deliveries.push(refund(&format!("evt_xr{i}"), &format!("ord_x{i}"), 100, T0 + 2));
        }
    }
    for i in 0..UNREADABLE {
        deliveries.push(unparseable(&format!("sha256:x{i}"), b"<xml/>", "not json", T0 + 3));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for store in &stores {
        let mut mine = deliveries.clone();
        fastrand::shuffle(&mut mine);
        for d in mine {
            let store = Arc::clone(store);
            tasks.spawn(async move { (d.parsed().event_id().as_str().to_owned(), store.ingest(d).await) });
        }
    }
    let mut first = std::collections::HashMap::<String, Outcome>::new();
    while let Some(joined) = tasks.join_next().await {
        let (id, answer) = joined.expect("task");
        let outcome = answer.unwrap_or_else(|e| panic!("{id}: {e:?}")).outcome;
        if outcome != Outcome::Duplicate {
            assert!(first.insert(id.clone(), outcome).is_none(), "{id} was recorded twice");
        }
    }
    assert_eq!(first.len(), deliveries.len(), "every delivery was recorded by one of the instances");
    let dead = first.values().filter(|o| **o == Outcome::DeadLettered).count();
    assert_eq!(dead, ORDERS / 5 + UNREADABLE, "{first:?}");

    let alerts = stores[0]
        .list_outbox(OutboxFilter {
            kind: Some(payhook_store::OutboxKind::Alert),
            limit: 100,
            ..OutboxFilter::default()
        })
        .await
        .expect("list")
        .rows;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].payload["count"], dead, "{}", alerts[0].payload);
    for i in 0..ORDERS {
        let order = order_view(&store, &format!("ord_x{i}")).await;
        let receipts = order.outbox.iter().filter(|o| o.kind == payhook_store::OutboxKind::OrderPaid).count();
        let expected: &[usize] = match (i % 5, i % 3) {
            (0, _) => &[0],    // the payment was dead-lettered
            (_, 0) => &[0, 3], // refunded; paid first (a receipt per sink: crm, mail, audit) or never
            _ => &[3],
        };
        assert!(expected.contains(&receipts), "ord_x{i}: {receipts} receipts: {order:?}");
    }
    for store in &stores {
        let batches = store.batch_stats();
        assert_eq!((batches.failed_batches, batches.reruns), (0, 0), "{batches:?}");
        store.shutdown().await;
    }
}

/// Three instances claiming one sink's rows at once, each attempt failing one time in three: every order's
/// `order.paid` is delivered before its `order.refunded`, and neither is ever sent while the other is in flight,
/// whichever instance holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_claiming_at_once_deliver_each_orders_rows_in_commit_order() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let stores = routed_instances(&schema, 3, test_policy()).await;
    let orders = 30;
    for i in 0..orders {
        let order = format!("ord_k{i}");
        register_new(&*stores[i % 3], new_order(&order, 100, T0)).await;
        stores[i % 3].ingest(pay(&format!("evt_p{i}"), &order, 100, T0 + 1)).await.expect("pay");
        stores[(i + 1) % 3].ingest(refund(&format!("evt_r{i}"), &order, 100, T0 + 2)).await.expect("refund");
    }
    // What the sink saw, in order: (order key, kind, delivered), and the keys in flight right now.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(String, String, bool)>::new()));
    let in_flight = Arc::new(std::sync::Mutex::new(HashSet::<String>::new()));
    let clock = Arc::new(std::sync::atomic::AtomicI64::new(T0 + 10));
    let dispatchers = stores.iter().enumerate().map(|(n, store)| {
        let (store, seen, in_flight, clock) = (Arc::clone(store), seen.clone(), in_flight.clone(), clock.clone());
        async move {
            let mut idle = 0;
            while idle < 20 {
                let now = clock.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let claim = Claim { now_ms: now, lease_ms: 60_000, limit: 8, owner: format!("d{n}") };
                let jobs = store.claim_outbox("audit", claim).await.expect("claim");
                idle = if jobs.is_empty() { idle + 1 } else { 0 };
                if jobs.is_empty() {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                for job in jobs {
                    let key = job.key.clone().expect("an order's row has a key");
                    assert!(in_flight.lock().unwrap().insert(key.clone()), "{key} sent twice at once");
                    tokio::time::sleep(std::time::Duration::from_millis(fastrand::u64(0..3))).await;
                    let ok = fastrand::u8(0..3) != 0;
                    seen.lock().unwrap().push((key.clone(), job.kind.as_str().to_owned(), ok));
                    in_flight.lock().unwrap().remove(&key);
                    let outcome = if ok {
                        Dispatched::Delivered { status: 200 }
                    } else {
                        Dispatched::Retry { at_ms: now, status: Some(503), error: "503".into() }
                    };
                    assert!(store.finish_outbox(&job, outcome, now).await.expect("finish"));
                }
            }
        }
    });
    futures_util::future::join_all(dispatchers).await;
    let seen = seen.lock().unwrap().clone();
    for i in 0..orders {
        let key = format!("order:ord_k{i}");
        let attempts: Vec<(&str, bool)> =
            seen.iter().filter(|(k, _, _)| *k == key).map(|(_, kind, ok)| (kind.as_str(), *ok)).collect();
        let paid = attempts.iter().position(|a| *a == ("order.paid", true));
        let paid = paid.unwrap_or_else(|| panic!("{key}: paid never delivered: {attempts:?} of {}", seen.len()));
        let first_refund = attempts.iter().position(|(kind, _)| *kind == "order.refunded").expect("refund sent");
        assert!(paid < first_refund, "{key}: {attempts:?}");
        assert!(attempts.contains(&("order.refunded", true)), "{key}: {attempts:?}");
    }
    for store in &stores {
        store.shutdown().await;
    }
}
