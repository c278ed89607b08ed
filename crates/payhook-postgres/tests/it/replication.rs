//! What the store reports of the primary's replication (`Store::replication`), against the shared test server,
//! which has no standby: 0 synchronous standbys for a role that may see them, nothing known for one that may not,
//! the session's own `synchronous_commit`, and the answer on the probe's connection while the pool is full.

use crate::{FullPool, RoleSchema, TempStore, connect, test_url};
use payhook_postgres::PgStore;
use payhook_store::contract::test_policy;
use payhook_store::{Replication, Store};
use std::time::{Duration, Instant};

/// The store's replication, which a PostgreSQL store always has.
async fn replication(store: &impl Store) -> Replication {
    store.replication().await.expect("read the replication").expect("postgres reports its replication")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_standby_no_2xx_is_on_a_standby_and_only_a_required_one_makes_the_store_not_ready() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open(&url, test_policy()).await;
    assert!(!store.requires_sync_standby());
    let r = replication(&store).await;
    // The test server's postgres is superuser: it sees pg_stat_replication, and there is nothing in it.
    assert_eq!((r.sync_standbys, r.streaming_standbys, r.in_recovery), (Some(0), Some(0), false), "{r:?}");
    assert_eq!(r.synchronous_commit, "on", "the server's default");
    assert!(!r.required && !r.acknowledged_on_standby() && r.ready(), "{r:?}");

    let store = TempStore::open_with(&url, test_policy(), |o| o.require_sync_standby = true).await;
    assert!(store.requires_sync_standby());
    let r = replication(&store).await;
    assert_eq!(r.sync_standbys, Some(0), "{r:?}");
    assert!(r.required && !r.ready(), "{r:?}");
    let problem = r.problem().expect("a problem");
    assert!(problem.starts_with("no synchronous standby is connected"), "{problem}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_synchronous_commit_reported_is_the_one_of_the_stores_own_sessions() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open_with(&url, test_policy(), |o| {
        let options = o.config.get_options().unwrap_or_default().to_owned();
        o.config.options(format!("{options} -c synchronous_commit=local"));
        o.require_sync_standby = true;
    })
    .await;
    let r = replication(&store).await;
    assert_eq!(r.synchronous_commit, "local");
    let problem = r.problem().expect("a problem");
    assert!(problem.starts_with("synchronous_commit is \"local\": COMMIT does not wait for a standby"), "{problem}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_pg_monitor_is_told_it_cannot_see_the_standbys_rather_than_shown_none() {
    let Some(url) = test_url() else { return };
    // A role of the test's own, neither superuser nor a member of pg_read_all_stats.
    let owner = RoleSchema::create(&url, "payhook_nomon").await;
    let role = owner.role();
    let admin = connect(&url).await;
    let mut options = owner.options(test_policy());
    options.require_sync_standby = true;
    let store = PgStore::open(options).await.expect("open as the test's role");
    let r = replication(&store).await;
    // Not a 0, which would be a guess: the server shows this role NULL for every detail.
    assert_eq!((r.sync_standbys, r.streaming_standbys), (None, None), "{r:?}");
    assert!(!r.ready());
    let with_names = Replication { synchronous_standby_names: "FIRST 1 (standby1)".to_owned(), ..r };
    assert_eq!(
        with_names.problem().as_deref(),
        Some("payhook's role cannot see pg_stat_replication: grant pg_monitor")
    );

    admin.batch_execute(&format!("GRANT pg_monitor TO {role}")).await.expect("grant pg_monitor");
    let r = replication(&store).await;
    assert_eq!((r.sync_standbys, r.streaming_standbys), (Some(0), Some(0)), "pg_monitor sees them: {r:?}");
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replication_is_read_on_the_probes_connection_while_a_query_and_a_batch_hold_every_pooled_one() {
    let Some(url) = test_url() else { return };
    let store = FullPool::store(&url).await;
    let full = FullPool::hold(&store).await;

    let start = Instant::now();
    let r = replication(&*store).await;
    let took = start.elapsed();
    assert!(took < Duration::from_millis(500), "the replication took {took:?} while the pool was full");
    assert_eq!(r.sync_standbys, Some(0));
    full.release().await;
}
