//! Pruning shares the writer with live deliveries: run by the server's task or by `payhook prune` as a second
//! process on the same file, it leaves ingest at least 90 % of its rate, counting deliveries answered in time.
//!
//! A test binary of its own (cargo runs test binaries one after another): a rate measured while a hundred other
//! tests run beside it measures them.

use payhook_server::now_ms;
use payhook_server::retention::prune_all;
use payhook_server::settings::RetentionSettings;
use payhook_sqlite::{SqliteOptions, SqliteStore};
use payhook_store::Store;
use payhook_store::contract::ignored;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DAY_MS: i64 = 86_400_000;
/// Rows of each history: enough that pruning, pausing as long as each step took, outlasts both measurements on a
/// quiet machine (40,000 did not; 120,000 only just did once a step's sub-journal stayed in memory instead of going
/// through a temporary file).
const HISTORY: i64 = 240_000;
/// How long each ingest rate is measured, and at what pace deliveries arrive (open loop: 200 per second).
const WINDOW: Duration = Duration::from_millis(1_500);
const EVERY: Duration = Duration::from_millis(5);
/// A delivery counts when answered 2xx within this: later, a provider's client may already have given up.
const ANSWER_WITHIN: Duration = Duration::from_millis(300);

/// `rows` settled events received `days_ago`, as a long history leaves them (due for both retention phases when
/// older than 30 days), named after `tag`.
fn history(path: &Path, tag: &str, days_ago: i64, rows: i64) {
    let mut conn = rusqlite::Connection::open(path).expect("open");
    conn.busy_timeout(Duration::from_secs(10)).expect("busy timeout");
    let tx = conn.transaction().expect("tx");
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO inbox (source, event_id, business_key, status, received_at, updated_at, verification,
                                    headers, body)
                 VALUES ('shop', ?1, ?1, 'processed', ?2, ?2, 'hmac', '{}', zeroblob(512))",
            )
            .expect("prepare");
        let old = now_ms() - days_ago * DAY_MS;
        for i in 0..rows {
            insert.execute(rusqlite::params![format!("evt_{tag}_{i}"), old + i]).expect("insert");
        }
    }
    tx.commit().expect("commit");
}

/// Deliveries offered at a steady pace for `WINDOW`; returns those answered successfully within `ANSWER_WITHIN`
/// of being sent, per second of window.
async fn ingest_rate(store: &Arc<SqliteStore>, tag: &str) -> f64 {
    let started = Instant::now();
    let mut tick = tokio::time::interval(EVERY);
    let mut sent = Vec::new();
    let mut i = 0;
    while started.elapsed() < WINDOW {
        tick.tick().await;
        let store = Arc::clone(store);
        let delivery = ignored(&format!("evt_{tag}_{i}"), "customer.updated", now_ms());
        sent.push(tokio::spawn(async move {
            let sent_at = Instant::now();
            store.ingest(delivery).await.is_ok() && sent_at.elapsed() <= ANSWER_WITHIN
        }));
        i += 1;
    }
    let mut answered = 0;
    for task in sent {
        if task.await.expect("ingest task") {
            answered += 1;
        }
    }
    f64::from(answered) / WINDOW.as_secs_f64()
}

fn settings() -> RetentionSettings {
    RetentionSettings { batch: 500, ..RetentionSettings::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_keeps_its_rate_while_pruning_runs_in_the_server_or_as_a_second_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("payhook.db");
    let server = Arc::new(SqliteStore::open(SqliteOptions::new(&path)).expect("open"));
    history(&path, "first", 40, HISTORY);
    let alone = ingest_rate(&server, "alone").await;
    assert!(alone > 150.0, "the baseline takes what is offered: {alone:.0}/s");

    // The server's own task: steps through its writer, pausing as long as each step took.
    let store = Arc::clone(&server);
    let pruning = tokio::spawn(async move { prune_all(&*store, &settings(), now_ms(), 0, Duration::ZERO).await });
    let in_server = ingest_rate(&server, "in_server").await;
    let in_server_lasted = !pruning.is_finished();
    if in_server_lasted {
        pruning.abort();
    } else if let Err(e) = pruning.await.expect("the pruning task") {
        panic!("the server's pruning failed: {e:?}");
    }

    // `payhook prune` in another process: its own writer and connections, competing for the file's lock, over a
    // history of its own (after where the server's pruning stopped).
    history(&path, "second", 35, HISTORY);
    let other = Arc::new(SqliteStore::open(SqliteOptions::new(&path)).expect("open a second store"));
    let cli = Arc::clone(&other);
    let min_pause = Duration::from_millis(settings().cli_min_pause_ms);
    let pruning = tokio::spawn(async move { prune_all(&*cli, &settings(), now_ms(), 0, min_pause).await });
    let beside_cli = ingest_rate(&server, "beside_cli").await;
    let beside_cli_lasted = !pruning.is_finished();
    if beside_cli_lasted {
        pruning.abort();
    } else if let Err(e) = pruning.await.expect("the pruning task") {
        panic!("`payhook prune` failed: {e:?}");
    }

    assert!(in_server >= 0.9 * alone, "with the server's pruning: {in_server:.0}/s against {alone:.0}/s alone");
    assert!(beside_cli >= 0.9 * alone, "beside `payhook prune`: {beside_cli:.0}/s against {alone:.0}/s alone");
    assert!(
        in_server_lasted && beside_cli_lasted,
        "pruning went on through both measurements: in the server {in_server_lasted}, \
         beside the CLI {beside_cli_lasted}"
    );
}
