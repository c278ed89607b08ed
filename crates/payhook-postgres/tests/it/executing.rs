//! Batches in flight and batches executing: of the `writers` batches holding a connection, at most
//! `executing_writers` run their statements at once, and a batch gives its turn back once its `COMMIT` is sent, so
//! that the next batch runs while the flush is waited for.
//!
//! A side session holds up a batch where the test needs it, with an advisory lock that a trigger waits for: a
//! statement trigger on `inbox_keys` holds up its statements, a deferred constraint trigger its `COMMIT`. The two
//! tests use keys of their own (`(1347, 1)` and `(1347, 2)`): advisory locks are shared by the whole database.

use crate::{TempStore, eventually, test_url, waiting_for_locks};
use payhook_store::contract::{T0, ignored, test_policy};
use payhook_store::metrics::BatchOutcomes;
use payhook_store::{Outcome, Store};
use std::time::Duration;

/// Waits until `n` of the store's sessions wait for a lock.
async fn until_waiting(store: &TempStore, side: &tokio_postgres::Client, n: i64) {
    let name = store.schema().name().to_owned();
    eventually(&format!("{n} store sessions wait for a lock"), Duration::from_secs(10), async || {
        waiting_for_locks(side, &name).await >= n
    })
    .await;
}

fn batches(store: &TempStore) -> BatchOutcomes {
    store.pg().writer_metrics().batches.expect("PostgreSQL reports its batches")
}

/// Plants a trigger (`when`: its timing, event and level; a deferrable one is made a constraint trigger) that
/// waits for the advisory lock `(1347, key)`, and takes that lock on `side` until it unlocks it.
async fn hold(side: &tokio_postgres::Client, key: i32, when: &str) {
    let constraint = if when.contains("DEFERRABLE") { "CONSTRAINT" } else { "" };
    side.batch_execute(&format!(
        "CREATE FUNCTION hold_{key}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM pg_advisory_xact_lock_shared(1347, {key});
             RETURN NULL;
         END $$;
         CREATE {constraint} TRIGGER hold_{key} {when} EXECUTE FUNCTION hold_{key}();
         SELECT pg_advisory_lock(1347, {key});"
    ))
    .await
    .expect("plant the trigger that waits");
}

fn customer_event(i: usize) -> payhook_store::Delivery {
    ignored(&format!("evt_{i}"), "customer.created", T0 + i as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_executing_writers_batches_run_their_statements_at_once() {
    let Some(url) = test_url() else { return };
    for executing in [1, 2] {
        let store = TempStore::open_with(&url, test_policy(), |o| {
            o.writers = 4;
            o.executing_writers = executing;
        })
        .await;
        let side = store.schema().side().await;
        // Every batch's statements wait for the side session's lock, at their first insert into `inbox_keys`.
        hold(&side, 2, "BEFORE INSERT ON inbox_keys FOR EACH STATEMENT").await;
        let first = store.ingest(customer_event(0));
        until_waiting(&store, &side, 1).await;
        // Queued now, before the futures are polled.
        let rest: Vec<_> = (1..=6).map(|i| store.ingest(customer_event(i))).collect();
        if executing == 1 {
            // Writers are free, but the batch holding the turn has not finished its statements: nothing else runs.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let name = store.schema().name().to_owned();
            assert_eq!(waiting_for_locks(&side, &name).await, 1, "a second batch ran its statements");
            let now = batches(&store);
            assert_eq!((now.in_flight, now.executing), (1, 1), "{now:?}");
        } else {
            until_waiting(&store, &side, 2).await;
            let now = batches(&store);
            assert_eq!((now.in_flight, now.executing), (2, 2), "{now:?}");
        }
        side.batch_execute("SELECT pg_advisory_unlock(1347, 2)").await.expect("let the statements through");
        assert_eq!(first.await.expect("the first batch commits").outcome, Outcome::Ignored);
        for (i, pending) in rest.into_iter().enumerate() {
            assert_eq!(pending.await.expect("the batches after it commit").outcome, Outcome::Ignored, "evt_{}", i + 1);
        }
        // A batch leaves the gauges just after it has answered its requests.
        eventually("no batch in flight", Duration::from_secs(10), async || {
            let after = batches(&store);
            (after.in_flight, after.executing) == (0, 0)
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_gives_its_turn_back_once_its_commit_is_sent() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open_with(&url, test_policy(), |o| {
        o.writers = 4;
        o.executing_writers = 1;
    })
    .await;
    let side = store.schema().side().await;
    // At COMMIT, the transaction that claimed evt_held's key waits for the side session's lock.
    hold(
        &side,
        1,
        "AFTER INSERT ON inbox_keys DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.event_id = 'evt_held')",
    )
    .await;

    let held = store.ingest(ignored("evt_held", "customer.created", T0));
    until_waiting(&store, &side, 1).await;
    // The held batch has run its statements and sent its COMMIT: the next batch takes the turn and commits.
    let next = tokio::time::timeout(Duration::from_secs(10), store.ingest(customer_event(1)))
        .await
        .expect("the next batch runs while the one before waits for its COMMIT")
        .expect("the next batch commits");
    assert_eq!(next.outcome, Outcome::Ignored);
    // The held batch waits for its COMMIT, holding its connection but not the turn (the next batch leaves the
    // gauges just after it has answered).
    eventually("one batch in flight, none executing", Duration::from_secs(10), async || {
        let now = batches(&store);
        (now.in_flight, now.executing) == (1, 0)
    })
    .await;

    side.batch_execute("SELECT pg_advisory_unlock(1347, 1)").await.expect("let the COMMIT through");
    assert_eq!(held.await.expect("the held batch commits").outcome, Outcome::Ignored);
}
