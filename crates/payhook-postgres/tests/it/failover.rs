//! What a failover looks like from one store: a multi-host URL whose first host is gone, a server that turns
//! read-only under the store's open connections (a demoted or fenced primary), and the reconnect backoff while no
//! host takes connections. The full failover, with a primary
//! killed and its synchronous standby promoted, is the binary's `failover` test.

use crate::{Proxy, RoleSchema, TempSchema, connect, eventually, server_addr, test_url};
use payhook_postgres::{PgOptions, PgStore};
use payhook_store::contract::{T0, event_view, ingest, new_order, pay, processed, register_new, test_policy};
use payhook_store::{Outcome, Store, StoreError};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A local port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_host_url_skips_a_host_that_is_gone_and_finds_the_primary() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let mut options = schema.options(test_policy());
    let search_path = options.config.get_options().expect("search_path").to_owned();
    let app = options.config.get_application_name().expect("application_name").to_owned();
    let base: tokio_postgres::Config = url.parse().expect("the test URL parses");
    let user = base.get_user().unwrap_or("postgres");
    let db = base.get_dbname().unwrap_or("postgres");
    let port = base.get_ports().first().copied().unwrap_or(5432);
    let multi =
        format!("postgres://{user}@127.0.0.1:{},127.0.0.1:{port}/{db}?target_session_attrs=read-write", closed_port());
    options.config = PgOptions::new(&multi).expect("the multi-host URL parses").config;
    options.config.options(&search_path);
    options.config.application_name(&app);
    assert_eq!(options.config.get_hosts().len(), 2, "{}", options.target());
    let store = PgStore::open(options).await.expect("open on the second host");
    register_new(&store, new_order("ord_m", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_m", "ord_m", 100, T0 + 1)).await, processed());
    store.ping().await.expect("ping");
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_to_a_server_that_turned_read_only_are_dropped_and_writes_resume_without_a_restart() {
    let Some(url) = test_url() else { return };
    // A role of the test's own, so that making its sessions read-only touches no other test.
    let owner = RoleSchema::create(&url, "payhook_ro").await;
    let role = owner.role();
    let admin = connect(&url).await;
    let mut options = owner.options(test_policy());
    options.connect_timeout_ms = 1_000;
    options.pool_wait_ms = 1_000;
    let store = PgStore::open(options).await.expect("open as the test's role");
    register_new(&store, new_order("ord_r", 100, T0)).await;
    register_new(&store, new_order("ord_s", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_r", "ord_r", 100, T0 + 1)).await, processed());

    // The server turns read-only for this role: its sessions are cut, and every new one refuses writes (as a
    // demoted primary, or one fenced with default_transaction_read_only, does).
    admin.batch_execute(&format!("ALTER ROLE {role} SET default_transaction_read_only = on")).await.expect("fence");
    admin
        .query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", &[&role])
        .await
        .expect("terminate the role's sessions");
    for _ in 0..3 {
        let refused = store.ingest(pay("evt_s", "ord_s", 100, T0 + 2)).await;
        assert!(matches!(refused, Err(StoreError::Unavailable(_))), "a write to a read-only server: {refused:?}");
    }

    // Writable again, without cutting a single session: the store must not have kept the read-only ones.
    admin.batch_execute(&format!("ALTER ROLE {role} RESET default_transaction_read_only")).await.expect("unfence");
    eventually("writes go through again", Duration::from_secs(15), async || {
        store.ingest(pay("evt_s", "ord_s", 100, T0 + 2)).await.is_ok()
    })
    .await;
    assert_eq!(event_view(&store, "evt_s").await.status, Outcome::Processed);
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_no_host_takes_connections_the_store_tries_a_few_times_a_second_not_once_per_request() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let mut proxy = Proxy::start(server_addr(&url)).await;
    let mut options = schema.options_through(&proxy, test_policy());
    options.reconnect_backoff_max_ms = 1_000;
    let store = Arc::new(PgStore::open(options).await.expect("open through the proxy"));
    register_new(&*store, new_order("ord_b", 100, T0)).await;

    // The host is up but takes no session (it closes every connection at once): each attempt to open one costs
    // the server a connection, as a standby refusing read-write sessions does.
    proxy.stop().await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", proxy.port())).await.expect("take the proxy's port");
    let attempts = Arc::new(AtomicUsize::new(0));
    let counting = tokio::spawn({
        let attempts = Arc::clone(&attempts);
        async move {
            while let Ok((stream, _)) = listener.accept().await {
                attempts.fetch_add(1, Ordering::Relaxed);
                drop(stream);
            }
        }
    });
    let until = Instant::now() + Duration::from_secs(1);
    let mut requests = tokio::task::JoinSet::new();
    for k in 0..8 {
        let store = Arc::clone(&store);
        requests.spawn(async move {
            let mut refused = 0;
            while Instant::now() < until {
                let answer = store.ingest(pay(&format!("evt_b{k}"), "ord_b", 100, T0 + 1)).await;
                assert!(matches!(answer, Err(StoreError::Unavailable(_))), "{answer:?}");
                refused += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            refused
        });
    }
    let mut refused = 0;
    while let Some(n) = requests.join_next().await {
        refused += n.expect("request task");
    }
    let tried = attempts.load(Ordering::Relaxed);
    eprintln!("{refused} requests refused in a second, {tried} connection attempts");
    assert!(refused > 200, "the requests were answered slowly: {refused} in a second");
    assert!(tried <= 15, "{tried} connection attempts for {refused} requests in a second: no backoff");

    counting.abort();
    let _ = counting.await;
    proxy.restart().await;
    eventually("writes go through again", Duration::from_secs(10), async || {
        store.ingest(pay("evt_b0", "ord_b", 100, T0 + 1)).await.is_ok()
    })
    .await;
    store.shutdown().await;
}
