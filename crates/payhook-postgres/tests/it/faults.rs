//! Faults inside a batch: a delivery whose write fails (an order's or a billing effect's), a deadlock with another
//! session, a statement timeout; an audit entry the database refuses, which takes its action down with it.
//!
//! Batches are shaped with a side session holding `LOCK TABLE inbox`: with one writer, the first delivery is taken
//! alone and blocks on the lock, and everything queued meanwhile forms the next batch together.

use crate::{TempStore, eventually, test_url, waiting_for_locks};
use payhook_core::billing::InvoiceAction;
use payhook_core::event::OrderId;
use payhook_core::ledger::OrderStatus;
use payhook_store::contract::{
    T0, audit_entry, claim, entitlements_of, event_id, event_view, ignored, ingest, invoice_event, new_order,
    order_view, paid_rows, pay, processed, register_new, source, test_policy, test_routing, unparseable,
};
use payhook_store::{
    AuditAction, AuditFilter, Delivery, Dispatched, OutboxStatus, Outcome, Recorded, Replayed, Store, StoreError,
};
use std::time::Duration;

/// Holds `LOCK TABLE inbox IN EXCLUSIVE MODE` on a side session until [`Jam::release`]: ingests wait for it.
struct Jam(tokio_postgres::Client);

impl Jam {
    async fn start(store: &TempStore) -> Self {
        let side = store.schema().side().await;
        side.batch_execute("BEGIN; LOCK TABLE inbox IN EXCLUSIVE MODE").await.expect("lock the inbox");
        Jam(side)
    }

    async fn release(self) {
        self.0.batch_execute("ROLLBACK").await.expect("unlock the inbox");
    }
}

/// Waits until `n` of the store's sessions wait for a lock.
async fn until_waiting(store: &TempStore, side: &tokio_postgres::Client, n: i64) {
    let name = store.schema().name().to_owned();
    eventually(&format!("{n} store sessions wait for a lock"), Duration::from_secs(10), async || {
        waiting_for_locks(side, &name).await >= n
    })
    .await;
}

async fn not_stored(store: &TempStore, delivery: &Delivery) {
    let stored = store.event(&source(), delivery.parsed().event_id()).await.expect("event");
    assert_eq!(stored, None, "nothing of the failed delivery may be stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_delivery_rolls_back_its_own_savepoint_only_and_its_batch_mates_commit() {
    let Some(url) = test_url() else { return };
    const N: usize = 40;
    let store = TempStore::open_with(&url, test_policy(), |o| o.writers = 1).await;
    let orders: Vec<String> = (0..N).map(|i| if i == N / 2 { "bad".to_owned() } else { format!("ord_{i}") }).collect();
    for order in &orders {
        register_new(&store, new_order(order, 100, T0)).await;
    }
    let side = store.schema().side().await;
    side.batch_execute(
        "CREATE FUNCTION fail_bad() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.order_id = 'bad' THEN RAISE EXCEPTION 'injected failure'; END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER fail_bad BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION fail_bad();",
    )
    .await
    .expect("plant the failing trigger");

    let jam = Jam::start(&store).await;
    let first = store.ingest(ignored("evt_first", "customer.created", T0));
    until_waiting(&store, &side, 1).await;
    let deliveries: Vec<Delivery> =
        orders.iter().map(|order| pay(&format!("evt_{order}"), order, 100, T0 + 1)).collect();
    // Queued now, before the futures are polled: they form the next batch together.
    let pending: Vec<_> = deliveries.iter().map(|d| store.ingest(d.clone())).collect();
    jam.release().await;
    assert_eq!(first.await.expect("the first batch commits").outcome, Outcome::Ignored);
    let mut results = Vec::new();
    for future in pending {
        results.push(future.await);
    }

    for (order, (delivery, result)) in orders.iter().zip(deliveries.iter().zip(results)) {
        if order == "bad" {
            match result {
                Err(StoreError::Unavailable(cause)) => {
                    assert!(cause.to_string().contains("injected failure"), "unexpected cause: {cause}");
                }
                other => panic!("the bad delivery must fail on its own, got {other:?}"),
            }
            not_stored(&store, delivery).await;
            let view = order_view(&store, order).await;
            assert_eq!((view.status, view.history.len(), view.outbox.len()), (OrderStatus::Pending, 0, 0));
        } else {
            assert_eq!(result.expect("batch-mates commit"), processed(), "{order}");
            assert_eq!(order_view(&store, order).await.status, OrderStatus::Paid, "{order}");
        }
    }
    let stats = store.pg().batch_stats();
    assert_eq!(stats.failed_batches, 0, "no batch failed as a whole: {stats:?}");
    assert!(stats.committed_batches <= 1 + 1 + orders.len() as u64, "{stats:?}");
    let keys: i64 = side.query_one("SELECT count(*) FROM business_keys", &[]).await.unwrap().get(0);
    assert_eq!(keys, N as i64 - 1, "the failed delivery's business key was rolled back with it");

    side.batch_execute("DROP TRIGGER fail_bad ON outbox").await.expect("drop the trigger");
    let bad = deliveries[N / 2].clone();
    assert_eq!(ingest(&store, bad).await, processed(), "the provider's retry goes through");
    assert_eq!(paid_rows(&store).await, N as u64);
}

/// A billing effect is applied after the batch function recorded its delivery, in a savepoint of its own: when it
/// fails, its savepoint and its inbox row are rolled back, and its batch-mates commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_billing_delivery_rolls_back_its_own_row_only_and_its_batch_mates_commit() {
    let Some(url) = test_url() else { return };
    const N: usize = 12;
    let store = TempStore::open_with(&url, test_policy(), |o| o.writers = 1).await;
    let side = store.schema().side().await;
    side.batch_execute(
        "CREATE FUNCTION fail_bad() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.invoice_id = 'in_bad' THEN RAISE EXCEPTION 'injected failure'; END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER fail_bad BEFORE INSERT ON entitlements FOR EACH ROW EXECUTE FUNCTION fail_bad();",
    )
    .await
    .expect("plant the failing trigger");
    let invoices: Vec<String> =
        (0..N).map(|i| if i == N / 2 { "in_bad".to_owned() } else { format!("in_{i}") }).collect();

    let jam = Jam::start(&store).await;
    let first = store.ingest(ignored("evt_first", "customer.created", T0));
    until_waiting(&store, &side, 1).await;
    let deliveries: Vec<Delivery> =
        invoices.iter().map(|inv| invoice_event(&format!("evt_{inv}"), inv, None, InvoiceAction::Paid, 100)).collect();
    let pending: Vec<_> = deliveries.iter().map(|d| store.ingest(d.clone())).collect();
    jam.release().await;
    assert_eq!(first.await.expect("the first batch commits").outcome, Outcome::Ignored);
    let mut results = Vec::new();
    for future in pending {
        results.push(future.await);
    }
    for (invoice, (delivery, result)) in invoices.iter().zip(deliveries.iter().zip(results)) {
        if invoice == "in_bad" {
            match result {
                Err(StoreError::Unavailable(cause)) => {
                    assert!(cause.to_string().contains("injected failure"), "unexpected cause: {cause}");
                }
                other => panic!("the bad delivery must fail on its own, got {other:?}"),
            }
            not_stored(&store, delivery).await;
        } else {
            assert_eq!(result.expect("batch-mates commit"), processed(), "{invoice}");
        }
    }
    let stats = store.pg().batch_stats();
    assert_eq!(stats.failed_batches, 0, "no batch failed as a whole: {stats:?}");
    let keys: i64 = side.query_one("SELECT count(*) FROM business_keys", &[]).await.unwrap().get(0);
    assert_eq!(keys, N as i64 - 1, "the failed delivery's business key was rolled back with it");
    assert_eq!(entitlements_of(&store).await.len(), N - 1);

    side.batch_execute("DROP TRIGGER fail_bad ON entitlements").await.expect("drop the trigger");
    let bad = deliveries[N / 2].clone();
    assert_eq!(ingest(&store, bad).await, processed(), "the provider's retry goes through");
    assert_eq!(entitlements_of(&store).await.len(), N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_deadlocks_is_run_again_whole_and_each_delivery_is_answered_once() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open_with(&url, test_policy(), |o| o.writers = 1).await;
    register_new(&store, new_order("ord_x", 100, T0)).await;
    let watcher = store.schema().side().await;
    // The other party of the deadlock: it holds the order's row, then wants the event-id key the batch inserted.
    let other = store.schema().side().await;
    // Make sure the batch, not this session, is the one PostgreSQL picks to abort (needs a superuser; without one,
    // either may be picked and the test still checks that nothing is answered twice).
    let _ = other.batch_execute("SET deadlock_timeout = '10s'").await;
    other.batch_execute("BEGIN; SELECT 1 FROM orders WHERE id = 'ord_x' FOR UPDATE").await.expect("lock the order");

    let jam = Jam::start(&store).await;
    let first = store.ingest(ignored("evt_first", "customer.created", T0));
    until_waiting(&store, &watcher, 1).await;
    // One batch: `evt_a` has no order, so it is inserted first; then `evt_b` waits for the order's row.
    let a = store.ingest(ignored("evt_a", "customer.updated", T0 + 1));
    let b = store.ingest(pay("evt_b", "ord_x", 100, T0 + 2));
    jam.release().await;
    assert_eq!(first.await.expect("the first batch commits").outcome, Outcome::Ignored);
    until_waiting(&store, &watcher, 1).await;

    let cycle = tokio::spawn(async move {
        let inserted = other.execute("INSERT INTO inbox_keys (source, event_id) VALUES ('shop', 'evt_a')", &[]).await;
        (other, inserted)
    });
    let (other, inserted) = tokio::time::timeout(Duration::from_secs(20), cycle)
        .await
        .expect("the deadlock is resolved")
        .expect("the side task");
    if inserted.is_ok() {
        // The batch was aborted and is waiting to run again, behind this session's uncommitted row.
        other.batch_execute("ROLLBACK").await.expect("roll back the side session");
    } else {
        other.batch_execute("ROLLBACK").await.expect("roll back the aborted side session");
    }

    let (a, b) = (a.await.expect("evt_a is answered"), b.await.expect("evt_b is answered"));
    assert_eq!(a, Recorded { outcome: Outcome::Ignored, detail: None });
    assert_eq!(b, processed());
    eprintln!("side insert: {inserted:?}; {:?}", store.pg().batch_stats());
    if inserted.is_ok() {
        assert!(store.pg().batch_stats().reruns >= 1, "{:?}", store.pg().batch_stats());
    }
    assert_eq!(store.pg().batch_stats().failed_batches, 0);
    assert_eq!(event_view(&store, "evt_a").await.verification, payhook_store::contract::VERIFICATION);
    let order = order_view(&store, "ord_x").await;
    assert_eq!((order.status, order.history.len(), order.outbox.len()), (OrderStatus::Paid, 1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_timeout_answers_unavailable_stores_nothing_and_the_retry_goes_through() {
    let Some(url) = test_url() else { return };
    // Long enough for a new session's first batch on a loaded machine (the registration and the retry below run
    // under it too); the jam holds until released, so only the jammed batch reaches it.
    let store = TempStore::open_with(&url, test_policy(), |o| o.statement_timeout_ms = 2_000).await;
    register_new(&store, new_order("ord_t", 100, T0)).await;
    let delivery = pay("evt_t", "ord_t", 100, T0 + 1);

    let jam = Jam::start(&store).await;
    let result = store.ingest(delivery.clone()).await;
    jam.release().await;
    match result {
        Err(StoreError::Unavailable(cause)) => {
            let chain = format!("{:?}", cause);
            assert!(chain.contains("statement timeout"), "unexpected cause: {chain}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    not_stored(&store, &delivery).await;
    assert_eq!(store.pg().batch_stats().failed_batches, 1);

    assert_eq!(ingest(&store, delivery).await, processed());
    assert_eq!(order_view(&store, "ord_t").await.status, OrderStatus::Paid);
}

/// An audited action and its entry are stored together or not at all: an entry the database refuses undoes its
/// replay, its re-queue and its registration (each answered with an error), and once it is accepted both are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audited_action_and_its_entry_are_stored_together_or_not_at_all() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open_with(&url, test_policy(), |o| o.routing = test_routing()).await;
    register_new(&store, new_order("ord_x", 100, T0)).await;
    let good = pay("evt_x", "ord_x", 100, T0);
    ingest(&store, unparseable("sha256:x", good.raw_body(), "format was broken", T0)).await;
    register_new(&store, new_order("ord_d", 100, T0)).await;
    ingest(&store, pay("evt_d", "ord_d", 100, T0)).await;
    let job = store.claim_outbox("crm", claim("d", T0 + 1, 30_000)).await.expect("claim").pop().expect("a crm row");
    let dead = Dispatched::Dead { status: Some(400), error: "400".into() };
    assert!(store.finish_outbox(&job, dead, T0 + 1).await.expect("finish"));
    let side = store.schema().side().await;
    side.batch_execute("ALTER TABLE audit ADD CONSTRAINT refuse_mallory CHECK (actor <> 'mallory')")
        .await
        .expect("plant the constraint");
    let replay = async |actor: &str, at_ms: i64| {
        let entry = audit_entry(at_ms, actor, AuditAction::Replay, Some("shop/sha256:x"));
        store.replay_audited(&source(), &event_id("sha256:x"), good.parsed().clone(), at_ms, Some(entry)).await
    };

    assert!(replay("mallory", T0 + 2).await.is_err());
    assert_eq!(event_view(&store, "sha256:x").await.status, Outcome::DeadLettered, "the replay was undone");
    let entry = audit_entry(T0 + 2, "mallory", AuditAction::OutboxRetry, Some("outbox/1"));
    assert!(store.retry_outbox_audited(job.id, T0 + 2, Some(entry)).await.is_err());
    let row = store.outbox_row(job.id).await.expect("outbox row").expect("the row");
    assert_eq!(row.status, OutboxStatus::Dead, "the re-queue was undone");
    let entry = audit_entry(T0 + 2, "mallory", AuditAction::OrderRegister, Some("order/ord_y"));
    assert!(store.register_order_audited(new_order("ord_y", 100, T0 + 2), Some(entry)).await.is_err());
    let ord_y = store.order(&OrderId::parse("ord_y").expect("order id")).await.expect("order");
    assert_eq!(ord_y, None, "the registration was undone");

    assert_eq!(replay("ops", T0 + 3).await.expect("replay"), Replayed::Done(processed()));
    let trail = store.list_audit(AuditFilter { limit: 10, ..AuditFilter::default() }).await.expect("list").rows;
    let written: Vec<(&str, &str)> = trail.iter().map(|r| (r.entry.actor.as_str(), r.entry.outcome.as_str())).collect();
    assert_eq!(written, [("ops", "processed")]);
}
