//! `/readyz`'s ping on a connection of its own: it answers while queries and batches hold every pooled connection.
//!
//! The pool is filled with a side session holding `LOCK TABLE orders`: an order read and an order registration
//! each wait for it on a pooled connection, and a pool of two has none left.

use crate::{FullPool, test_url};
use payhook_store::Store;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_answers_at_once_while_a_query_and_a_batch_hold_every_pooled_connection() {
    let Some(url) = test_url() else { return };
    let store = FullPool::store(&url).await;
    let full = FullPool::hold(&store).await;

    for _ in 0..10 {
        let start = Instant::now();
        store.ping().await.expect("ping beside a full pool");
        let took = start.elapsed();
        assert!(took < Duration::from_millis(500), "ping took {took:?} while the pool was full");
    }
    full.release().await;
}
