//! `/readyz`'s ping on a connection of its own: it answers while queries and batches hold every pooled connection.
//!
//! The pool is filled with a side session holding `LOCK TABLE orders`: an order read and an order registration
//! each wait for it on a pooled connection, and a pool of two has none left.

use crate::{TempStore, eventually, test_url, waiting_for_locks};
use payhook_core::event::OrderId;
use payhook_store::contract::{T0, new_order, register_new, test_policy};
use payhook_store::{Registered, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_answers_at_once_while_a_query_and_a_batch_hold_every_pooled_connection() {
    let Some(url) = test_url() else { return };
    let store = Arc::new(
        TempStore::open_with(&url, test_policy(), |o| {
            (o.pool_size, o.writers, o.pool_wait_ms, o.connect_timeout_ms) = (2, 1, 1_000, 1_000);
        })
        .await,
    );
    register_new(&*store, new_order("ord_p", 100, T0)).await;
    let side = store.schema().side().await;
    // Another session watches: pg_stat_activity is read once per transaction, and `side` stays in its own.
    let watch = store.schema().side().await;
    side.batch_execute("BEGIN; LOCK TABLE orders IN ACCESS EXCLUSIVE MODE").await.expect("lock the orders");

    let read = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.order(&OrderId::parse("ord_p").expect("order id")).await }
    });
    let write = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.register_order(new_order("ord_q", 100, T0)).await }
    });
    let name = store.schema().name().to_owned();
    eventually("a query and a batch wait for the lock", Duration::from_secs(10), async || {
        waiting_for_locks(&watch, &name).await >= 2
    })
    .await;

    for _ in 0..10 {
        let start = Instant::now();
        store.ping().await.expect("ping beside a full pool");
        let took = start.elapsed();
        assert!(took < Duration::from_millis(500), "ping took {took:?} while the pool was full");
    }
    assert_eq!(waiting_for_locks(&watch, &name).await, 2, "the pool was full throughout");

    side.batch_execute("ROLLBACK").await.expect("unlock the orders");
    assert!(read.await.expect("read task").expect("the read completes").is_some());
    assert!(matches!(write.await.expect("write task"), Ok(Registered::Created)));
}
