//! Space comes back: pruning releases free pages in files created in `auto_vacuum = INCREMENTAL` mode, and
//! `compact` converts an older file.

use crate::{TempStore, side_connection};
use payhook_sqlite::{SqliteOptions, SqliteStore};
use payhook_store::contract::{T0, generic_delivery};
use payhook_store::{Delivery, Outcome, PruneRequest, Pruned, Store};
use std::path::Path;
use std::sync::Arc;

const EVENTS: i64 = 4_000;
const BODY_BYTES: i64 = 4_096;

/// `EVENTS` settled events with 4 KiB bodies, received a millisecond apart from `T0`, written as an older build
/// (or a long history) left them.
fn old_events(path: &Path) {
    let mut conn = side_connection(path);
    let tx = conn.transaction().expect("tx");
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO inbox (source, event_id, status, received_at, updated_at, verification, headers, body)
                 VALUES ('shop', ?1, 'processed', ?2, ?2, 'hmac', '{}', zeroblob(?3))",
            )
            .expect("prepare");
        for i in 0..EVENTS {
            insert.execute(rusqlite::params![format!("evt_old_{i}"), T0 + i, BODY_BYTES]).expect("insert");
        }
    }
    tx.commit().expect("commit");
}

/// The database file's size once every WAL frame is in it (the file shrinks at a checkpoint, not at a commit).
fn checkpointed_bytes(path: &Path) -> u64 {
    let conn = side_connection(path);
    for _ in 0..100 {
        let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).expect("checkpoint");
        if busy == 0 {
            return std::fs::metadata(path).expect("stat").len();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("the WAL could not be checkpointed");
}

fn auto_vacuum(path: &Path) -> i64 {
    side_connection(path).query_row("PRAGMA auto_vacuum", [], |r| r.get(0)).expect("auto_vacuum")
}

/// Prunes with steps of 500 until nothing is left: payloads of everything before `payloads_before_ms`, events
/// before `keys_before_ms`.
async fn prune_all<S: Store>(store: &S, payloads_before_ms: i64, keys_before_ms: i64) -> Pruned {
    let request = PruneRequest {
        keys_before_ms,
        payloads_from_ms: 0,
        payloads_before_ms,
        orders_before_ms: 0,
        limit: 500,
        now_ms: T0 + 100 * 86_400_000,
    };
    let mut total = Pruned::default();
    loop {
        let step = store.prune(request).await.expect("prune");
        total.add(&step);
        if !step.more(request.limit) {
            return total;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_gives_the_space_of_cleared_payloads_and_deleted_events_back_to_the_file_system() {
    let store = TempStore::open_with(|_| {});
    assert_eq!(auto_vacuum(store.path()), 2, "a new file is created in incremental auto-vacuum mode");
    old_events(store.path());
    let full = checkpointed_bytes(store.path());
    let bodies = (EVENTS * BODY_BYTES) as u64;
    assert!(full > bodies, "{full} bytes hold {bodies} bytes of bodies");

    let cleared = prune_all(&store, T0 + EVENTS, T0).await;
    assert_eq!(cleared.payloads_cleared, EVENTS as u64, "{cleared:?}");
    assert!(cleared.pages_released > 0 && cleared.pages_free == 0, "{cleared:?}");
    let after_payloads = checkpointed_bytes(store.path());
    assert!(
        full - after_payloads >= bodies * 9 / 10,
        "clearing {bodies} bytes of bodies shrank the file from {full} to {after_payloads} bytes"
    );

    let deleted = prune_all(&store, T0 + EVENTS, T0 + EVENTS).await;
    assert_eq!(deleted.events_deleted, EVENTS as u64, "{deleted:?}");
    let empty = checkpointed_bytes(store.path());
    assert!(empty < after_payloads, "deleting the rows shrank the file again: {after_payloads} -> {empty}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_file_keeps_its_size_until_compact_converts_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("old.db");
    {
        // As an older build created it: tables first, so auto_vacuum stays NONE.
        let conn = rusqlite::Connection::open(&path).expect("open");
        conn.execute_batch(include_str!("../../migrations/0001_init.sql")).expect("old schema");
        conn.pragma_update(None, "user_version", 1).expect("version");
    }
    let store = SqliteStore::open(SqliteOptions::new(&path)).expect("open");
    assert_eq!(auto_vacuum(&path), 0, "migrations cannot change the mode of a file that has tables");
    old_events(&path);
    let full = checkpointed_bytes(&path);
    let cleared = prune_all(&store, T0 + EVENTS, T0).await;
    assert_eq!((cleared.payloads_cleared, cleared.pages_released), (EVENTS as u64, 0), "{cleared:?}");
    assert!(checkpointed_bytes(&path) >= full, "the freed pages stay in the file, on its free list");
    store.shutdown().await;

    let done = payhook_sqlite::compact(&path, 5_000).expect("compact");
    assert_eq!(done.auto_vacuum_before, 0);
    let bodies = (EVENTS * BODY_BYTES) as u64;
    assert!(done.bytes_before - done.bytes_after >= bodies * 9 / 10, "{done:?}");
    assert_eq!(auto_vacuum(&path), 2, "the file is in incremental auto-vacuum mode from now on");
    let kept: i64 = side_connection(&path)
        .query_row("SELECT count(*) FROM inbox WHERE length(body) = 0", [], |r| r.get(0))
        .expect("count");
    assert_eq!(kept, EVENTS, "the data is intact");
}

/// Deliveries smaller than a page, as most webhooks are.
const SMALL_EVENTS: i64 = 4_000;
const SMALL_PAD: usize = 900;

/// A settled (ignored) delivery of about 1 KiB.
fn small_delivery(i: i64) -> Delivery {
    let body = serde_json::json!({
        "id": format!("evt_small_{i}"), "type": "customer.updated", "created": (T0 + i) / 1000,
        "data": { "customer": "cus_1", "note": "n".repeat(SMALL_PAD) },
    });
    generic_delivery(body.to_string().into_bytes(), T0 + i)
}

/// Clearing the payloads of deliveries smaller than a page gives back about their size: each lives in a row of
/// `inbox_payloads`, and a run of them deleted empties whole pages. The same payloads kept in the inbox rows (as
/// stored before migration 0010) give back almost nothing: every page keeps its rows, only emptier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_the_payloads_of_small_deliveries_gives_back_about_their_size() {
    let store = Arc::new(TempStore::open_with(|_| {}));
    let mut payload_bytes = 0u64;
    for wave in 0..SMALL_EVENTS / 200 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in wave * 200..(wave + 1) * 200 {
            let delivery = small_delivery(i);
            payload_bytes += (delivery.raw_body().len() + delivery.headers().to_json().len()) as u64;
            let store = Arc::clone(&store);
            tasks.spawn(async move { store.ingest(delivery).await.expect("ingest").outcome });
        }
        while let Some(outcome) = tasks.join_next().await {
            assert_eq!(outcome.expect("ingest task"), Outcome::Ignored);
        }
    }
    let path = store.path().to_owned();
    let full = checkpointed_bytes(&path);
    let cleared = prune_all(&*store, T0 + SMALL_EVENTS, T0).await;
    assert_eq!(cleared.payloads_cleared, SMALL_EVENTS as u64, "{cleared:?}");
    let after = checkpointed_bytes(&path);
    let freed = full.saturating_sub(after);
    eprintln!(
        "{SMALL_EVENTS} payloads of {payload_bytes} bytes in inbox_payloads: {full} -> {after} bytes ({freed} fewer, \
         {:.0} %)",
        100.0 * freed as f64 / payload_bytes as f64
    );
    assert!(
        freed >= payload_bytes * 8 / 10,
        "clearing {payload_bytes} bytes of payloads shrank the file from {full} to {after} bytes only"
    );

    // The same payloads in the inbox rows themselves, on a fresh file.
    let old = TempStore::open_with(|_| {});
    {
        let mut conn = side_connection(old.path());
        let tx = conn.transaction().expect("tx");
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO inbox (source, event_id, status, received_at, updated_at, verification, headers, body)
                     VALUES ('shop', ?1, 'ignored', ?2, ?2, 'hmac', ?3, ?4)",
                )
                .expect("prepare");
            for i in 0..SMALL_EVENTS {
                let d = small_delivery(i);
                let args = rusqlite::params![format!("evt_small_{i}"), T0 + i, d.headers().to_json(), d.raw_body()];
                insert.execute(args).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
    let old_full = checkpointed_bytes(old.path());
    prune_all(&old, T0 + SMALL_EVENTS, T0).await;
    let old_after = checkpointed_bytes(old.path());
    let old_freed = old_full.saturating_sub(old_after);
    eprintln!("the same payloads in the inbox rows: {old_full} -> {old_after} bytes");
    assert!(old_freed < payload_bytes / 10, "{old_full} -> {old_after}");
}
