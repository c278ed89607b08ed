//! Fault injection: schema planted by a side connection makes chosen outbox (or audit) inserts fail inside SQLite,
//! the way a full disk or a constraint bug would. The failing event must leave no trace; its batch-mates must
//! commit. An audited action and its entry fail together.
//!
//! The writer's connection runs with triggers off (`tally`), so the faults are planted where it cannot skip them:
//! an index whose expression overflows for the rows it covers, a generated column whose foreign key fails at
//! `COMMIT`.

use crate::{TempStore, side_connection};
use payhook_core::event::{EventId, OrderId};
use payhook_core::ledger::OrderStatus;
use payhook_sqlite::{SqliteOptions, SqliteStore};
use payhook_store::contract::{
    T0, audit_entry, counters_equal_a_full_count, event_id, event_view, ingest, new_order, order_view, pay, processed,
    register_new, source, test_policy, unparseable,
};
use payhook_store::{AuditAction, AuditFilter, Delivery, Outcome, Replayed, Store, StoreError};

fn business_keys(conn: &rusqlite::Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM business_keys", [], |r| r.get(0)).expect("count business keys")
}

/// An index on the outbox whose expression fails (`abs` of the smallest integer overflows) for every row `rows`
/// (an SQL condition on the row) selects: inserting such a row fails with SQLite's "integer overflow".
fn plant_failing_outbox_index(side: &rusqlite::Connection, rows: &str) {
    side.execute_batch(&format!(
        "CREATE INDEX fail_outbox ON outbox (abs(-9223372036854775807 - 1 + 0 * length(kind))) WHERE {rows};"
    ))
    .expect("plant the failing index");
}

fn assert_injected(result: Result<payhook_store::Recorded, StoreError>) {
    match result {
        Err(StoreError::Unavailable(cause)) => {
            assert!(cause.to_string().contains("integer overflow"), "unexpected cause: {cause}");
        }
        other => panic!("expected the injected failure, got {other:?}"),
    }
}

async fn assert_not_stored<S: Store>(store: &S, delivery: &Delivery) {
    let stored = store.event(&source(), delivery.parsed().event_id()).await.expect("event");
    assert_eq!(stored, None, "nothing of the failed event may be stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_outbox_insert_stores_nothing_of_its_event_and_its_redelivery_is_processed() {
    let store = TempStore::open(test_policy());
    register_new(&store, new_order("ord_f", 100, T0)).await;
    let side = side_connection(store.path());
    plant_failing_outbox_index(&side, "1");

    let delivery = pay("evt_f", "ord_f", 100, T0 + 1);
    assert_injected(store.ingest(delivery.clone()).await);
    assert_not_stored(&store, &delivery).await;
    let order = order_view(&store, "ord_f").await;
    assert_eq!(order.status, OrderStatus::Pending);
    assert!(order.history.is_empty() && order.outbox.is_empty(), "{order:?}");
    assert_eq!(business_keys(&side), 0, "the business key is not consumed");
    counters_equal_a_full_count(&store).await;

    side.execute_batch("DROP INDEX fail_outbox").expect("drop the index");
    assert_eq!(ingest(&store, delivery).await, processed(), "the provider's retry goes through");
    let order = order_view(&store, "ord_f").await;
    assert_eq!(order.status, OrderStatus::Paid);
    assert_eq!(order.outbox.len(), 1);
}

/// All jobs are queued while a side connection holds the write lock, so they run in at most two batches, and the
/// failing job (in the middle) shares its batch with others. The others commit durably.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_event_does_not_take_its_batch_mates_down() {
    const N: usize = 50;
    let store = TempStore::open(test_policy());
    let orders: Vec<String> = (0..=N).map(|i| if i == N / 2 { "bad".to_owned() } else { format!("ord_{i}") }).collect();
    for (i, order) in orders.iter().enumerate() {
        register_new(&store, new_order(order, 100 + i as i64, T0)).await;
    }
    let side = side_connection(store.path());
    plant_failing_outbox_index(&side, "order_id = 'bad'");

    let deliveries: Vec<Delivery> = orders
        .iter()
        .enumerate()
        .map(|(i, order)| pay(&format!("evt_{order}"), order, 100 + i as i64, T0 + 1 + i as i64))
        .collect();
    // The writer blocks on the lock with at most the first few jobs in hand; the rest wait in its queue. The
    // SQLite store queues a job when `ingest` is called, before the future is polled.
    side.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let pending: Vec<_> = deliveries.iter().map(|d| store.ingest(d.clone())).collect();
    side.execute_batch("ROLLBACK").expect("release the write lock");
    let mut results = Vec::new();
    for future in pending {
        results.push(future.await);
    }

    for (i, (delivery, result)) in deliveries.iter().zip(results).enumerate() {
        if i == N / 2 {
            assert_injected(result);
            assert_not_stored(&store, delivery).await;
        } else {
            assert_eq!(result.expect("batch-mates commit").outcome, Outcome::Processed, "{i}");
        }
    }

    // Durable: a new process opening the file sees every committed event.
    let (_dir, path) = store.close();
    let store = SqliteStore::open(SqliteOptions { retry: test_policy(), ..SqliteOptions::new(&path) }).expect("reopen");
    for (i, order) in orders.iter().enumerate() {
        let view = order_view(&store, order).await;
        if i == N / 2 {
            assert_eq!((view.status, view.outbox.len()), (OrderStatus::Pending, 0));
        } else {
            assert_eq!((view.status, view.outbox.len()), (OrderStatus::Paid, 1), "{order}");
            assert_eq!(event_view(&store, &format!("evt_{order}")).await.status, Outcome::Processed);
        }
    }
    assert_eq!(store.event(&source(), &EventId::parse("evt_bad").unwrap()).await.expect("event"), None);
    counters_equal_a_full_count(&store).await;
    side.execute_batch("DROP INDEX fail_outbox").expect("drop the index");
    assert_eq!(ingest(&store, deliveries[N / 2].clone()).await, processed());
}

/// A batch whose COMMIT fails (a deferred foreign key violation, planted for order `bad`) answers every one of its
/// jobs with an error and keeps none of them: no request is acknowledged for work that is not durable. The jobs
/// are queued while the write lock is held, so `bad` shares its batch with at least half of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_answers_every_job_of_its_batch_with_an_error_and_keeps_none() {
    const N: usize = 50;
    let store = TempStore::open(test_policy());
    let orders: Vec<String> = (0..=N).map(|i| if i == N / 2 { "bad".to_owned() } else { format!("ord_{i}") }).collect();
    for order in &orders {
        register_new(&store, new_order(order, 100, T0)).await;
    }
    let side = side_connection(store.path());
    // An outbox row of `bad` names an order that does not exist, checked only at COMMIT.
    side.execute_batch(
        "ALTER TABLE outbox ADD COLUMN poison TEXT
             GENERATED ALWAYS AS (CASE WHEN order_id = 'bad' THEN 'no-such-order' END) VIRTUAL
             REFERENCES orders (id) DEFERRABLE INITIALLY DEFERRED;",
    )
    .expect("plant the deferred violation");

    let deliveries: Vec<Delivery> =
        orders.iter().map(|order| pay(&format!("evt_{order}"), order, 100, T0 + 1)).collect();
    side.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let pending: Vec<_> = deliveries.iter().map(|d| store.ingest(d.clone())).collect();
    side.execute_batch("ROLLBACK").expect("release the write lock");
    let mut results = Vec::new();
    for future in pending {
        results.push(future.await);
    }

    let mut failed = Vec::new();
    for ((order, delivery), result) in orders.iter().zip(&deliveries).zip(results) {
        let view = order_view(&store, order).await;
        match result {
            Ok(recorded) => {
                assert_eq!(recorded, processed(), "{order}");
                assert_eq!((view.status, view.outbox.len()), (OrderStatus::Paid, 1), "{order} was acknowledged");
                assert_eq!(event_view(&store, delivery.parsed().event_id().as_str()).await.status, Outcome::Processed);
            }
            Err(StoreError::Unavailable(_)) => {
                assert_not_stored(&store, delivery).await;
                assert_eq!((view.status, view.outbox.len()), (OrderStatus::Pending, 0), "{order} failed");
                failed.push(delivery.clone());
            }
            Err(other) => panic!("{order}: unexpected {other:?}"),
        }
    }
    assert!(failed.iter().any(|d| d.parsed().event_id().as_str() == "evt_bad"), "the poisoned event cannot commit");
    assert!(failed.len() > N / 2, "bad's batch-mates share its fate: only {} failed", failed.len());
    counters_equal_a_full_count(&store).await;

    // The order it names now exists: the violation is gone.
    side.execute_batch(
        "INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
         VALUES ('no-such-order', 1, 'USD', 'pending', 0, 0);",
    )
    .expect("repair the deferred violation");
    for delivery in failed {
        assert_eq!(ingest(&store, delivery).await, processed(), "the provider's retry goes through");
    }
    assert_eq!(payhook_store::contract::paid_rows(&store).await, N as u64 + 1);
}

/// An audited action and its entry are stored together or not at all: a replay whose outbox row cannot be written
/// writes no entry, and an entry that cannot be written undoes its replay and its registration; once both can be
/// written, both are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audited_action_and_its_entry_are_stored_together_or_not_at_all() {
    let store = TempStore::open(test_policy());
    register_new(&store, new_order("ord_x", 100, T0)).await;
    let good = pay("evt_x", "ord_x", 100, T0);
    ingest(&store, unparseable("sha256:x", good.raw_body(), "format was broken", T0)).await;
    let replay = async |at_ms: i64| {
        let entry = audit_entry(at_ms, "ops", AuditAction::Replay, Some("shop/sha256:x"));
        store.replay_audited(&source(), &event_id("sha256:x"), good.parsed().clone(), at_ms, Some(entry)).await
    };
    let trail = async || store.list_audit(AuditFilter { limit: 10, ..AuditFilter::default() }).await.expect("list");
    let side = side_connection(store.path());

    plant_failing_outbox_index(&side, "1");
    assert!(matches!(replay(T0 + 1).await, Err(StoreError::Unavailable(_))));
    side.execute_batch("DROP INDEX fail_outbox").expect("drop the index");
    assert_eq!(trail().await.rows, [], "a replay that failed writes no entry");

    side.execute_batch("CREATE INDEX fail_audit ON audit (abs(-9223372036854775807 - 1 + 0 * length(actor)))")
        .expect("plant the failing index");
    assert!(matches!(replay(T0 + 2).await, Err(StoreError::Unavailable(_))));
    assert_eq!(event_view(&store, "sha256:x").await.status, Outcome::DeadLettered, "the replay was undone");
    let entry = audit_entry(T0 + 2, "ops", AuditAction::OrderRegister, Some("order/ord_y"));
    let registered = store.register_order_audited(new_order("ord_y", 100, T0 + 2), Some(entry)).await;
    assert!(matches!(registered, Err(StoreError::Unavailable(_))), "{registered:?}");
    let ord_y = store.order(&OrderId::parse("ord_y").expect("order id")).await.expect("order");
    assert_eq!(ord_y, None, "the registration was undone");
    side.execute_batch("DROP INDEX fail_audit").expect("drop the index");

    assert_eq!(replay(T0 + 3).await.expect("replay"), Replayed::Done(processed()));
    let written = trail().await.rows;
    assert_eq!(
        written.iter().map(|r| (r.entry.at_ms, r.entry.outcome.as_str())).collect::<Vec<_>>(),
        [(T0 + 3, "processed")]
    );
    counters_equal_a_full_count(&store).await;
}
