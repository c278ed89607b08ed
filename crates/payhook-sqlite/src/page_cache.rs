//! The writer's page cache: its bound (`storage.writer_cache_bytes`), and what it holds and did, read by the writer
//! after each batch and shown in `/metrics`.
//!
//! Every delivery lands on leaves at random places of three B-trees (the inbox's unique key, the business key, the
//! order). On a large database those leaves are rarely in a small cache, and each is read back from the file (the
//! kernel's cache at best) before it is changed; the cache's size trades memory for those reads. Readers keep
//! SQLite's default (2 MiB each): their pages are the listings' and the lookups', not the writer's.

use rusqlite::Connection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The writer reads its cache at most this often: reading is a statement, which under light load (a batch of one
/// or two jobs) would add a few percent to every batch, and a scrape comes every few seconds at most.
const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// What `/metrics` reads of the writer's cache, written by the writer thread.
#[derive(Debug, Default)]
pub(crate) struct PageCacheCounters {
    limit_bytes: AtomicU64,
    used_bytes: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl PageCacheCounters {
    /// Bounds `conn`'s page cache to `limit_bytes` (whole KiB; SQLite's `cache_size` in KiB) and records the bound.
    pub(crate) fn bound(&self, conn: &Connection, limit_bytes: u64) -> rusqlite::Result<()> {
        let kib = i64::try_from(limit_bytes / 1024).unwrap_or(i64::MAX).max(1);
        conn.pragma_update(None, "cache_size", -kib)?;
        self.limit_bytes.store(limit_bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Reads `conn`'s cache after a batch, unless `last` (when it last did) is less than [`PUBLISH_EVERY`] ago: the
    /// bytes it holds, and the hits and misses since the previous reading, added to the totals. Failing to read
    /// leaves the previous figures (the metrics lag; nothing else depends on them).
    pub(crate) fn publish(&self, conn: &Connection, last: &mut Option<Instant>) {
        let now = Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < PUBLISH_EVERY) {
            return;
        }
        *last = Some(now);
        let read = conn
            .prepare_cached(
                "SELECT payhook_page_cache('used'), payhook_page_cache('hits'), payhook_page_cache('misses')",
            )
            .and_then(|mut s| s.query_row([], |r| Ok((r.get::<_, u64>(0)?, r.get::<_, u64>(1)?, r.get::<_, u64>(2)?))));
        match read {
            Ok((used, hits, misses)) => {
                self.used_bytes.store(used, Ordering::Relaxed);
                self.hits.fetch_add(hits, Ordering::Relaxed);
                self.misses.fetch_add(misses, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!(error = %e, "could not read the writer's page cache counters"),
        }
    }

    pub(crate) fn snapshot(&self) -> payhook_store::metrics::PageCacheMetrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        payhook_store::metrics::PageCacheMetrics {
            limit_bytes: get(&self.limit_bytes),
            used_bytes: get(&self.used_bytes),
            hits: get(&self.hits),
            misses: get(&self.misses),
        }
    }
}
