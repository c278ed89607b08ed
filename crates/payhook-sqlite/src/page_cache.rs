//! The writer's page cache: its bound (`storage.writer_cache_bytes`), shown in `/metrics`.
//!
//! Every delivery lands on leaves at random places of three B-trees (the inbox's unique key, the business key, the
//! order). On a large database those leaves are rarely in a small cache, and each is read back from the file (the
//! kernel's cache at best) before it is changed; the cache's size trades memory for those reads. Readers keep
//! SQLite's default (2 MiB each): their pages are the listings' and the lookups', not the writer's.
//!
//! What the cache holds and its hits and misses are not read: SQLite counts them for its C interface
//! (`sqlite3_db_status`), which rusqlite's safe API does not offer and no pragma reports.

use rusqlite::Connection;

/// Bounds `conn`'s page cache to `limit_bytes` (whole KiB, at least one: SQLite's `cache_size` in KiB).
pub(crate) fn bound(conn: &Connection, limit_bytes: u64) -> rusqlite::Result<()> {
    conn.pragma_update(None, "cache_size", -kib(limit_bytes))
}

/// `limit_bytes` in whole KiB, at least one, as `cache_size` takes it (negated: a size, not a page count).
fn kib(limit_bytes: u64) -> i64 {
    i64::try_from(limit_bytes / 1024).unwrap_or(i64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound is the setting in KiB, read back from the connection as SQLite holds it.
    #[test]
    fn the_bound_is_the_setting_in_kib() {
        let conn = Connection::open_in_memory().unwrap();
        for (bytes, cache_size) in [(1u64 << 20, -1024i64), (8 << 20, -8192), (1536, -1), (100, -1)] {
            bound(&conn, bytes).unwrap();
            let held: i64 = conn.pragma_query_value(None, "cache_size", |r| r.get(0)).unwrap();
            assert_eq!(held, cache_size, "{bytes} bytes");
        }
    }
}
