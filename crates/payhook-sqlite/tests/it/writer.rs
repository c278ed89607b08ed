//! The writer: group commit under load (with and without batching), load shedding, shutdown, its sub-journal and
//! its page cache.

use crate::{TempStore, side_connection};
use payhook_core::event::EventId;
use payhook_core::ledger::OrderStatus;
use payhook_store::contract::{T0, event_view, new_order, order_view, pay, source, stats, test_policy};
use payhook_store::{Outcome, Recorded, Registered, Stats, Store, StoreError};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// Registers `n` orders and pays each of them, all concurrently, and checks that every write is recorded.
async fn concurrent_payments_are_all_recorded(batch_max: usize) {
    const N: usize = 200;
    let store = Arc::new(TempStore::open_with(|o| {
        o.batch_max = batch_max;
        o.retry = test_policy();
    }));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..N {
        let store = Arc::clone(&store);
        tasks.spawn(async move { store.register_order(new_order(&format!("ord_{i}"), 100, T0)).await });
    }
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.expect("task").expect("register"), Registered::Created);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..N {
        let store = Arc::clone(&store);
        tasks.spawn(async move { store.ingest(pay(&format!("evt_{i}"), &format!("ord_{i}"), 100, T0 + 1)).await });
    }
    while let Some(r) = tasks.join_next().await {
        let recorded = r.expect("task").expect("ingest");
        assert_eq!(recorded, Recorded { outcome: Outcome::Processed, detail: None });
    }
    let s = stats(&*store).await;
    assert_eq!(Stats::count(&s.events, "processed"), N as u64, "{s:?}");
    assert_eq!(Stats::count(&s.orders, "paid"), N as u64, "{s:?}");
    assert_eq!(Stats::count(&s.outbox, "order.paid"), N as u64, "{s:?}");
    for i in [0, N / 2, N - 1] {
        assert_eq!(order_view(&*store, &format!("ord_{i}")).await.status, OrderStatus::Paid);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_records_every_one_of_200_concurrent_payments() {
    concurrent_payments_are_all_recorded(512).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_commit_per_job_records_every_one_of_200_concurrent_payments() {
    concurrent_payments_are_all_recorded(1).await;
}

/// Polls `future` once: `Some` when it is already settled.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *future).poll(cx) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        })
    })
    .await
}

type Job<'a> = Pin<Box<dyn Future<Output = Result<Recorded, StoreError>> + Send + 'a>>;

/// A store whose writer runs one job at a time with a queue of one.
fn tiny_queue_store() -> Arc<TempStore> {
    Arc::new(TempStore::open_with(|o| {
        o.batch_max = 1;
        o.queue_depth = 1;
        o.retry = test_policy();
    }))
}

/// Gets the writer of a [`tiny_queue_store`] stuck behind a side connection's write lock with one job in hand and
/// one queued: its queue is full. Returns the lock holder and the two accepted jobs.
async fn jam(store: &TempStore) -> (rusqlite::Connection, Vec<Job<'_>>) {
    let side = side_connection(store.path());
    side.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let first: Job<'_> = Box::pin(store.ingest(pay("evt_1", "ord_1", 100, T0)));
    // Once a second job is accepted, the writer has taken the first one and is blocked on the lock.
    let second = loop {
        let mut job: Job<'_> = Box::pin(store.ingest(pay("evt_2", "ord_2", 100, T0)));
        match poll_once(&mut job).await {
            None => break job,
            Some(Err(StoreError::Overloaded)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Some(other) => panic!("unexpected {other:?}"),
        }
    };
    (side, vec![first, second])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_sheds_load_and_accepted_jobs_still_commit() {
    let store = tiny_queue_store();
    let (side, accepted) = jam(&store).await;
    let shed = store.ingest(pay("evt_3", "ord_3", 100, T0)).await;
    assert!(matches!(shed, Err(StoreError::Overloaded)), "{shed:?}");

    side.execute_batch("ROLLBACK").expect("release the write lock");
    for job in accepted {
        assert_eq!(job.await.expect("accepted jobs commit").outcome, Outcome::Deferred);
    }
    assert_eq!(event_view(&*store, "evt_1").await.status, Outcome::Deferred);
    let shed_id = EventId::parse("evt_3").unwrap();
    assert_eq!(store.event(&source(), &shed_id).await.expect("event"), None, "a shed job writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_full_queue_finishes_the_accepted_jobs_and_returns() {
    let store = tiny_queue_store();
    let (side, accepted) = jam(&store).await;

    // Release the lock a little after the shutdown has started, while the queue is still full.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        side.execute_batch("ROLLBACK").expect("release the write lock");
    });
    let stopping = Arc::clone(&store);
    tokio::time::timeout(Duration::from_secs(20), async move { stopping.sqlite().shutdown().await })
        .await
        .expect("shutdown did not return with a full queue");
    releaser.join().expect("releaser");

    for job in accepted {
        assert_eq!(job.await.expect("accepted jobs finish before shutdown").outcome, Outcome::Deferred);
    }
    let late = store.ingest(pay("evt_4", "ord_4", 100, T0)).await;
    assert!(matches!(late, Err(StoreError::ShuttingDown)), "{late:?}");
}

/// Dropping a store never blocks the thread it is dropped on (usually an async runtime's, here the only one): the
/// writer is told to stop and finishes on its own once the lock it waits for is released.
#[tokio::test(flavor = "current_thread")]
async fn dropping_a_store_whose_writer_is_stuck_returns_at_once() {
    let store = tiny_queue_store();
    let (side, accepted) = jam(&store).await;
    drop(accepted);
    // A drop that joined the writer would wait for this release.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        side.execute_batch("ROLLBACK").expect("release the write lock");
    });
    let started = std::time::Instant::now();
    drop(store);
    let took = started.elapsed();
    releaser.join().expect("releaser");
    assert!(took < Duration::from_secs(1), "dropping the store blocked for {took:?}");
}

/// The writer's metrics report its page cache's bound, `storage.writer_cache_bytes` (the writer's connection is
/// bounded by it: `writer::tests::the_writers_page_cache_is_bounded_by_its_setting`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_reports_its_page_cache_bound() {
    for limit in [1u64 << 20, 16 << 20] {
        let store = TempStore::open_with(|o| o.writer_cache_bytes = limit);
        let cache = store.sqlite().writer_metrics().page_cache.expect("sqlite reports its writer's cache");
        assert_eq!(cache.limit_bytes, limit);
    }
}
