//! The WAL stays bounded: overlapping readers cannot make it grow past its limit, and a long reader cannot make
//! the checkpointer hold the writer up for longer than its wait.

use crate::{TempStore, side_connection};
use payhook_store::Store;
use payhook_store::contract::{T0, ignored};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const LIMIT_BYTES: u64 = 1 << 20;

fn wal_path(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

fn wal_bytes(db: &Path) -> u64 {
    std::fs::metadata(wal_path(db)).map(|m| m.len()).unwrap_or(0)
}

/// Samples the WAL file's size every 10 ms until `stop`, returning the largest.
fn largest_wal(db: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut largest = 0;
        while !stop.load(Ordering::Relaxed) {
            largest = largest.max(wal_bytes(&db));
            std::thread::sleep(Duration::from_millis(10));
        }
        largest
    })
}

/// Ingests `count` ignored events with 4 KiB bodies one after the other, at most one per `every`, returning the
/// slowest commit.
async fn write_load(store: &TempStore, prefix: &str, count: usize, every: Duration) -> Duration {
    let mut slowest = Duration::ZERO;
    let mut tick = tokio::time::interval(every.max(Duration::from_micros(1)));
    // After a stall (a loaded machine), the load resumes at its pace rather than catching up in a burst.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..count {
        tick.tick().await;
        let mut d = ignored(&format!("{prefix}_{i}"), "customer.updated", T0 + i as i64);
        d.parts_mut().raw_body = vec![b'x'; 4096];
        let started = Instant::now();
        store.ingest(d).await.expect("ingest");
        slowest = slowest.max(started.elapsed());
    }
    slowest
}

/// A reader that opens a read transaction, reads, holds it for `hold`, and ends it, over and over until `stop`.
fn reader(path: PathBuf, hold: Duration, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let conn = side_connection(&path);
        let mut reads = 0;
        while !stop.load(Ordering::Relaxed) {
            conn.execute_batch("BEGIN").expect("begin");
            let _: i64 = conn.query_row("SELECT count(*) FROM inbox", [], |r| r.get(0)).expect("read");
            std::thread::sleep(hold);
            conn.execute_batch("COMMIT").expect("end the read");
            reads += 1;
        }
        reads
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_stays_under_its_limit_while_overlapping_readers_never_let_it_rest() {
    let store = TempStore::open_with(|o| {
        o.wal_limit_bytes = LIMIT_BYTES;
        o.wal_checkpoint_wait_ms = 100;
    });
    let stop = Arc::new(AtomicBool::new(false));
    // Two readers offset by half a hold: at every moment at least one read transaction is open.
    let first = reader(store.path().to_owned(), Duration::from_millis(20), Arc::clone(&stop));
    std::thread::sleep(Duration::from_millis(10));
    let second = reader(store.path().to_owned(), Duration::from_millis(20), Arc::clone(&stop));
    let sampler = largest_wal(store.path().to_owned(), Arc::clone(&stop));
    // A steady 40 writes per second for 5 s: about 25 KiB of WAL each (the body's pages and the index pages), so
    // an unbounded WAL would end about five times over the limit.
    write_load(&store, "evt_wal", 200, Duration::from_millis(25)).await;
    // The checkpointer's next intervals take the last writes (polled: a loaded machine may delay them).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut settled = wal_bytes(store.path());
    while settled > LIMIT_BYTES && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        settled = wal_bytes(store.path());
    }
    stop.store(true, Ordering::Relaxed);
    let reads = first.join().expect("reader") + second.join().expect("reader");
    let largest = sampler.join().expect("sampler");
    let wal = store.sqlite().writer_metrics().wal.expect("sqlite reports its WAL");
    assert!(reads > 20, "the readers kept reading: {reads}");
    // Between two checkpoints (250 ms) the WAL grows by what is written meanwhile, more when a loaded machine delays
    // a checkpoint; it never runs away (unbounded, it would pass 5 MB).
    assert!(largest <= 3 * LIMIT_BYTES, "the WAL reached {largest} bytes with a limit of {LIMIT_BYTES}: {wal:?}");
    assert!(settled <= LIMIT_BYTES, "the WAL settles under its limit: {settled} bytes, {wal:?}");
    assert!(wal.truncate > 0, "the checkpointer had to reset the WAL: {wal:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reader_never_holds_the_writer_up_longer_than_the_checkpoint_wait() {
    let store = TempStore::open_with(|o| {
        o.wal_limit_bytes = LIMIT_BYTES;
        o.wal_checkpoint_wait_ms = 100;
    });
    write_load(&store, "evt_before", 10, Duration::ZERO).await;
    // A snapshot held for 5 s: no checkpoint can reset the WAL before it ends.
    let path = store.path().to_owned();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let long_reader = std::thread::spawn(move || {
        let conn = side_connection(&path);
        conn.execute_batch("BEGIN").expect("begin");
        let _: i64 = conn.query_row("SELECT count(*) FROM inbox", [], |r| r.get(0)).expect("read");
        opened_tx.send(()).expect("signal");
        std::thread::sleep(Duration::from_secs(5));
        conn.execute_batch("COMMIT").expect("end the read");
    });
    opened_rx.recv().expect("the reader opened its snapshot");
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut batches = 0;
    while started.elapsed() < Duration::from_millis(4_500) {
        slowest = slowest.max(write_load(&store, &format!("evt_{batches}"), 50, Duration::ZERO).await);
        batches += 1;
    }
    long_reader.join().expect("reader");
    let wal = store.sqlite().writer_metrics().wal.expect("sqlite reports its WAL");
    // The bound is 100 ms of waiting, plus the writer's own polling for the lock, plus room for a loaded machine; a
    // checkpointer waiting for the reader would stall it for the rest of the reader's 5 s.
    assert!(slowest < Duration::from_millis(2_000), "a commit took {slowest:?} ({wal:?})");
    assert!(wal.truncate_busy > 0, "the checkpointer tried to reset the WAL and gave up in time: {wal:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_steady_stream_of_commits_the_writer_resets_the_log() {
    // The default limit: a tick's worth of log is usually under half of it, so that the log reaches half the limit
    // between two ticks and the checkpointer asks the writer to reset it.
    const LIMIT: u64 = 64 << 20;
    let store = Arc::new(TempStore::open_with(|o| o.wal_limit_bytes = LIMIT));
    let sampling = Arc::new(AtomicBool::new(false));
    let sampler = largest_wal(store.path().to_owned(), Arc::clone(&sampling));
    // Sixteen clients writing back to back: the writer always has its next batch queued, so no transaction of its
    // starts on a log that is all copied (SQLite's own moment to restart it). They write until the writer has
    // reset the log twice (at most 60 s: a slow machine takes longer to write half the limit).
    let deadline = Instant::now() + Duration::from_secs(60);
    let resets = |store: &TempStore| store.sqlite().writer_metrics().wal.map_or(0, |w| w.writer);
    let clients: Vec<_> = (0..16)
        .map(|c| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut round = 0;
                while resets(&store) < 2 && Instant::now() < deadline {
                    write_load(&store, &format!("evt_steady_{c}_{round}"), 20, Duration::ZERO).await;
                    round += 1;
                }
            })
        })
        .collect();
    for client in clients {
        client.await.expect("client");
    }
    sampling.store(true, Ordering::Relaxed);
    let largest = sampler.join().expect("sampler");
    let wal = store.sqlite().writer_metrics().wal.expect("sqlite reports its WAL");
    assert!(wal.writer >= 2, "the checkpointer asked the writer to reset the log, and it did: {wal:?}");
    // Between two ticks the log grows by what is written meanwhile (a burst on a fast machine can pass the limit,
    // and then the checkpointer truncates it); it never runs away.
    assert!(largest <= 3 * LIMIT, "the WAL reached {largest} bytes with a limit of {LIMIT}: {wal:?}");
}
