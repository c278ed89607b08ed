//! Backend-neutral instruments a store exposes to the server's `/metrics`: a histogram of plain atomics, and the
//! snapshot of a writer's state ([`WriterMetrics`]) that [`crate::Store::writer_metrics`] returns, and of the read
//! connections' ([`ReadMetrics`], from [`crate::Store::read_metrics`]).
//!
//! Recording costs two relaxed atomic increments; nothing is locked. Reading takes a snapshot bucket by bucket,
//! which may be off by the observations made meanwhile, as any scrape is.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (inclusive) of the commit batch size histogram, in jobs.
pub const BATCH_SIZE_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/// A histogram of non-negative integer observations (jobs, microseconds) over fixed upper bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// One counter per bound, and a last one for the observations above every bound (`+Inf`).
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    /// An empty histogram over `bounds`, which must be ascending.
    pub fn new(bounds: &'static [u64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds must ascend");
        Self { bounds, buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum: AtomicU64::new(0) }
    }

    /// Counts `value` in the first bucket whose bound is at least `value`.
    pub fn observe(&self, value: u64) {
        let i = self.bounds.partition_point(|b| *b < value);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds.to_vec(),
            counts: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds (inclusive), ascending.
    pub bounds: Vec<u64>,
    /// Observations per bucket (not cumulative): one per bound, then the ones above every bound.
    pub counts: Vec<u64>,
    /// The sum of every observation.
    pub sum: u64,
}

impl HistogramSnapshot {
    /// How many observations were made.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The state of a store's writer (the SQLite writer thread, the PostgreSQL batcher), read at scrape time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterMetrics {
    /// The writer takes work. False once it stopped, by shutdown or by failure: writes are then refused.
    pub running: bool,
    /// Jobs waiting in its queue, not yet taken into a batch.
    pub queued: u64,
    /// How many jobs the queue holds before writes are refused as overloaded.
    pub queue_capacity: u64,
    /// Jobs per committed batch (one transaction, one durable commit).
    pub batch_sizes: HistogramSnapshot,
    /// The SQLite write-ahead log and its checkpoints; `None` for a store without one.
    pub wal: Option<WalMetrics>,
    /// The SQLite writer's page cache; `None` for a store without one.
    pub page_cache: Option<PageCacheMetrics>,
    /// The inbox's day partitions (PostgreSQL); `None` for a store without them.
    pub partitions: Option<PartitionMetrics>,
    /// Batch transactions run again or given up (PostgreSQL); `None` for a store that never reruns a batch.
    pub batches: Option<BatchOutcomes>,
    /// Attempts to open a database connection that failed, and requests refused while the next attempt was not
    /// due (PostgreSQL); `None` for a store that opens no connections.
    pub connects: Option<ConnectMetrics>,
}

/// Connection attempts since the store opened (PostgreSQL).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectMetrics {
    /// Attempts to open a connection that failed (no host up, or none primary).
    pub failures: u64,
    /// Requests answered 503 at once because the next attempt was not due yet (the reconnect backoff).
    pub held_back: u64,
}

/// Batch transactions that did not commit on their first attempt, since the store opened (PostgreSQL). A failover
/// shows here: connections lost, a server turned read-only, then batches that could get no connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOutcomes {
    /// Attempts run again: after a deadlock or a serialization failure, a connection lost (before or after
    /// COMMIT was sent), or a read-only server.
    pub reruns: u64,
    /// Batches given up, every job of which was answered 503.
    pub failed: u64,
    /// Batches holding a connection now (at most `storage.writers`).
    pub in_flight: u64,
    /// Of those, the batches running their statements (at most `storage.executing_writers`); the others wait for
    /// their `COMMIT`.
    pub executing: u64,
}

/// What retention did with the inbox's day partitions since the store opened (PostgreSQL).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionMetrics {
    /// Days detached past the key retention.
    pub detached: u64,
    /// Detached days dropped once their keys were deleted.
    pub dropped: u64,
    /// Creations or detaches given up because the lock on the inbox was not had within
    /// `storage.partition_lock_timeout_ms`.
    pub lock_timeouts: u64,
}

/// The SQLite write-ahead log as the checkpointer last measured it, and its checkpoints so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalMetrics {
    /// Size of the WAL file in bytes after the latest checkpoint.
    pub wal_bytes: u64,
    /// The WAL's bound (`storage.wal_limit_bytes`): past half of it the writer resets the log, past all of it the
    /// checkpointer truncates it.
    pub limit_bytes: u64,
    /// `PASSIVE` checkpoints run (one per tick, more while catching up with the writer before a reset).
    pub passive: u64,
    /// `TRUNCATE` checkpoints run (the log held more than its limit).
    pub truncate: u64,
    /// `PASSIVE` checkpoints that could not copy every frame (another checkpoint held the lock).
    pub passive_busy: u64,
    /// `TRUNCATE` checkpoints that gave up waiting for readers or the writer within their bound, to be tried again at
    /// the next tick.
    pub truncate_busy: u64,
    /// Checkpoints the writer ran after a commit, asked by the checkpointer, to reset the log (half its limit).
    pub writer: u64,
    /// Of those, the ones that could not copy every frame (another checkpoint held the lock).
    pub writer_busy: u64,
}

/// The SQLite writer's page cache (`storage.writer_cache_bytes`). Only its bound: what the cache holds and its
/// hits and misses are counters of SQLite's C interface (`sqlite3_db_status`), which neither rusqlite's safe API nor
/// SQL reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCacheMetrics {
    /// The cache's bound in bytes.
    pub limit_bytes: u64,
}

/// The state of a store's own read connections (the SQLite reader pool), read at scrape time. All zero for a
/// backend that has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadMetrics {
    /// Read connections the store keeps (`storage.read_connections`).
    pub connections: u64,
    /// Connections running a read now.
    pub in_use: u64,
    /// Reads waiting for a connection to come free.
    pub waiting: u64,
    /// Reads stopped because their query ran longer than the read time limit.
    pub timed_out: u64,
    /// Reads refused because no connection came free within the read time limit.
    pub busy: u64,
    /// Listing pages stopped by the scan bound (`storage.list_scan_rows`) before they found a full page.
    pub list_scans_stopped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_holds_it() {
        let h = Histogram::new(&[1, 4, 16]);
        for v in [0, 1, 2, 4, 5, 16, 17, 1000] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, vec![2, 2, 2, 2]);
        assert_eq!((s.count(), s.sum), (8, 1045));
    }
}
