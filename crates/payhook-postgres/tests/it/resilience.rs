//! The database going away under load and coming back: only errors that mean "not recorded" are answered, nothing
//! acknowledged is lost, and the store recovers by itself (new connections, no broken one reused).

use crate::{Proxy, TempSchema, TempStore, eventually, server_addr, test_url, waiting_for_locks};
use payhook_postgres::PgStore;
use payhook_store::contract::{T0, event_view, ingest, new_order, pay, processed, register_new, test_policy};
use payhook_store::{Outcome, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// Pays `n` orders with `concurrency` ingests in flight; returns each event id with its answer.
async fn load<S: Store>(store: Arc<S>, n: usize, concurrency: usize) -> Vec<(String, Result<Outcome, String>)> {
    let room = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let permit = Arc::clone(&room).acquire_owned().await.expect("semaphore");
        let store = Arc::clone(&store);
        tasks.spawn(async move {
            let id = format!("evt_l{i}");
            let answer = match store.ingest(pay(&id, &format!("ord_l{i}"), 100, T0 + 1)).await {
                Ok(r) => Ok(r.outcome),
                Err(StoreError::Unavailable(cause)) => Err(format!("{cause:?}")),
                Err(other) => panic!("{id}: only Unavailable may be answered, got {other:?}"),
            };
            drop(permit);
            (id, answer)
        });
    }
    let mut answers = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        answers.push(joined.expect("load task"));
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_fail_only_work_in_flight_and_the_store_reconnects_by_itself() {
    let Some(url) = test_url() else { return };
    const N: usize = 1500;
    let store = Arc::new(TempStore::open(&url, test_policy()).await);
    for i in 0..N {
        register_new(&*store, new_order(&format!("ord_l{i}"), 100, T0)).await;
    }
    let name = store.schema().name().to_owned();
    let killer = store.schema().side().await;
    let running = tokio::spawn(load(Arc::clone(&store), N, 32));
    // Kill every session of the store again and again while the load runs. Between two rounds the store must
    // reconnect and commit a batch: on a slow or busy machine a new session's first batch (planning the batch
    // function's statements) can take longer than any fixed interval, and a round on a clock would then starve it.
    let (mut killed, mut rounds) = (0, 0);
    while !running.is_finished() {
        let committed = store.pg().batch_stats().committed_jobs;
        let rows = killer
            .query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", &[&name])
            .await
            .expect("terminate the store's sessions");
        killed += rows.len();
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(25)).await;
        while !running.is_finished() && store.pg().batch_stats().committed_jobs == committed {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let answers = running.await.expect("load");
    assert!(killed > 0 && rounds >= 10, "{killed} sessions terminated in {rounds} rounds");

    let mut acked = 0;
    for (id, answer) in &answers {
        if let Ok(outcome) = answer {
            // Acknowledged means recorded: it survived the terminations. A batch whose COMMIT was cut off is run
            // again, and what had committed answers duplicate.
            assert!(matches!(outcome, Outcome::Processed | Outcome::Duplicate), "{id}: {outcome:?}");
            assert_eq!(event_view(&*store, id).await.status, Outcome::Processed, "{id} was acknowledged");
            acked += 1;
        }
    }
    let failed = N - acked;
    eprintln!(
        "{killed} sessions terminated in {rounds} rounds: {acked} acknowledged, {failed} answered Unavailable; {:?}",
        store.pg().batch_stats()
    );
    assert!(acked > 0, "the load made no progress");

    // Recovered, without reopening the store: everything not acknowledged goes through on its retry.
    store.ping().await.expect("ping after the terminations");
    for (id, _) in answers.into_iter().filter(|(_, a)| a.is_err()) {
        let order = id.replace("evt_", "ord_");
        let outcome = ingest(&*store, pay(&id, &order, 100, T0 + 1)).await.outcome;
        assert!(matches!(outcome, Outcome::Processed | Outcome::Duplicate), "{id}: {outcome:?}");
    }
    assert_eq!(payhook_store::contract::paid_rows(&*store).await, N as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_server_is_unreachable_ping_and_writes_fail_fast_and_the_store_recovers_when_it_returns() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let mut proxy = Proxy::start(server_addr(&url)).await;
    let store = PgStore::open(schema.options_through(&proxy, test_policy())).await.expect("open through the proxy");
    register_new(&store, new_order("ord_u", 100, T0)).await;

    proxy.stop().await;
    let started = std::time::Instant::now();
    assert!(matches!(store.ping().await, Err(StoreError::Unavailable(_))), "ping while unreachable");
    let down = store.ingest(pay("evt_u", "ord_u", 100, T0 + 1)).await;
    assert!(matches!(down, Err(StoreError::Unavailable(_))), "{down:?}");
    assert!(matches!(store.register_order(new_order("ord_v", 1, T0)).await, Err(StoreError::Unavailable(_))));
    assert!(started.elapsed() < Duration::from_secs(10), "failures must come quickly: {:?}", started.elapsed());

    proxy.restart().await;
    eventually("the store answers again", Duration::from_secs(15), async || store.ping().await.is_ok()).await;
    assert_eq!(ingest(&store, pay("evt_u", "ord_u", 100, T0 + 1)).await, processed(), "the provider's retry");
    assert_eq!(event_view(&store, "evt_u").await.status, Outcome::Processed);
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_stuck_on_a_lock_never_take_the_connections_the_batches_need() {
    let Some(url) = test_url() else { return };
    let store = Arc::new(
        TempStore::open_with(&url, test_policy(), |o| {
            (o.pool_size, o.writers, o.pool_wait_ms) = (3, 1, 5_000);
        })
        .await,
    );
    register_new(&*store, new_order("ord_q", 100, T0)).await;
    let side = store.schema().side().await;
    side.batch_execute("BEGIN; LOCK TABLE order_audit IN ACCESS EXCLUSIVE MODE").await.expect("lock the audit");
    // More readers than the pool has connections, all stuck behind the lock.
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.order(&payhook_store::contract::order_id("ord_q")).await })
        })
        .collect();
    // The batch below must not wait behind the readers: it runs only once they are stuck, a session of theirs
    // waiting for the lock (the others wait for a connection).
    eventually("the readers wait for the lock", Duration::from_secs(10), async || {
        waiting_for_locks(&side, store.schema().name()).await >= 1
    })
    .await;

    let started = std::time::Instant::now();
    let recorded = ingest(&*store, payhook_store::contract::ignored("evt_q", "customer.created", T0)).await;
    assert_eq!(recorded.outcome, Outcome::Ignored);
    assert!(started.elapsed() < Duration::from_secs(2), "the batch waited {:?} for a connection", started.elapsed());

    side.batch_execute("ROLLBACK").await.expect("unlock");
    for reader in readers {
        assert!(reader.await.expect("reader").expect("order").is_some());
    }
}
