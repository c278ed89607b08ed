//! The VFS under every connection of the process: `csrc/wal_vfs.c`, compiled and linked by `build.rs`, registered
//! as SQLite's default VFS by a constructor when the program starts, so no connection names it.
//!
//! It is the platform's default VFS with one change: SQLite writes a transaction's WAL frames at consecutive offsets,
//! each as two calls (its 24-byte header, then its page), and this VFS gathers them in a buffer and writes the run
//! with one call. On the writer, whose commits write three or four frames per delivery, that is nearly all of its
//! `pwrite`s (ARCHITECTURE.md, *Decisions*; BENCHMARKS.md). It holds back only what it can see is not the end of a
//! commit (a frame header whose commit field is zero, and the page right after it) and writes what it holds before
//! any other call on the file, so when a commit's last write returns the whole commit is in the file: the other
//! connections may read it as soon as SQLite publishes it, and the syncer's `fdatasync` covers it.
//!
//! Sub-journals (the pages a savepoint may have to restore; the writer runs every job in one) are files of memory
//! there: 64 KiB pieces kept for the transaction instead of SQLite's 1 KiB ones, allocated at each page and freed at
//! each savepoint's release, or its temporary file.
//!
//! Every connection's page cache is SQLite's own, wrapped (`csrc/page_cache.c`, installed by the same constructor):
//! at the end of each transaction the pager asks its cache to drop the pages past the end of the file, and SQLite's
//! cache walked every page it held to find none whenever a page split had sorted its leaves through the spare key
//! past 1 GiB, on every commit of a file smaller than that. The wrapper keeps its own bound on the keys the cache
//! holds and skips a truncation that cannot drop anything.
//!
//! The C side counts what it did; `payhook_wal_writes('frames')` and `('calls')` read, on a connection, the frames
//! its own log file was written and the write calls that carried them, `payhook_sub_journal_writes()` the writes
//! the calling thread made to sub-journals in memory, `payhook_page_cache_truncations('skipped' | 'passed')` the
//! truncations the calling thread's page caches skipped and passed on.

#[cfg(test)]
mod tests {
    use rusqlite::Connection;
    use std::path::Path;

    fn wal_writes(conn: &Connection, which: &str) -> u64 {
        conn.query_row("SELECT payhook_wal_writes(?1)", [which], |r| r.get(0)).unwrap()
    }

    fn open(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        // The frames stay in the log: nothing copies them into the database file.
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn
    }

    /// A commit's frames go out in a few calls, and a copy of the files made right after each commit returns (a
    /// crash, or the syncer's `fdatasync`, sees no more than that) recovers that commit: nothing of it waited in
    /// the buffer, and the headers are where SQLite put them, checksums and all.
    #[test]
    fn a_commit_is_written_with_few_calls_and_is_in_the_file_when_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("live.db"));
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB NOT NULL)").unwrap();
        let (frames, calls) = (wal_writes(&conn, "frames"), wal_writes(&conn, "calls"));
        for batch in 0..20 {
            let tx = conn.unchecked_transaction().unwrap();
            for i in 0..50 {
                tx.execute("INSERT INTO t (id, body) VALUES (?1, randomblob(700))", [batch * 50 + i]).unwrap();
            }
            tx.commit().unwrap();
            let rows: i64 = crash_copy(dir.path()).query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
            assert_eq!(rows, (batch + 1) * 50, "the copy made after commit {batch} lost rows");
        }
        // 1,000 rows of 700 bytes fill about 200 pages, each written at least once; a commit of ten frames or more
        // takes two calls (its frames before its commit frame, with that frame's header, then its page).
        let (frames, calls) = (wal_writes(&conn, "frames") - frames, wal_writes(&conn, "calls") - calls);
        assert!(frames >= 200, "frames written: {frames}");
        assert!(calls <= 2 * 20 + 2, "{calls} write calls for {frames} frames in 20 commits");

        let wal = std::fs::metadata(dir.path().join("live.db-wal")).unwrap().len();
        assert!(wal > 200 * 4096, "the frames are in the log, not yet in the database: {wal} bytes");
        let check: String = crash_copy(dir.path()).query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
    }

    /// Copies the database and its log as they are in the file system now (what a crash would leave) and opens
    /// the copy, which recovers the log.
    fn crash_copy(dir: &Path) -> Connection {
        let _ = std::fs::remove_file(dir.join("copy.db-shm"));
        for suffix in ["", "-wal"] {
            std::fs::copy(dir.join(format!("live.db{suffix}")), dir.join(format!("copy.db{suffix}"))).unwrap();
        }
        Connection::open(dir.join("copy.db")).unwrap()
    }

    /// A transaction larger than the page cache writes pages to the log before its commit (a spill), and when it
    /// changes such a page again SQLite overwrites that frame in place and, at the commit, rewrites the checksums of
    /// every frame from there on: the last write of that commit is the commit frame's header alone. When the
    /// commit returns, all of it must be in the file, or the syncer's `fdatasync` (on a descriptor of its own)
    /// makes durable a log whose last commit does not check out, and recovery drops it.
    #[test]
    fn a_commit_that_rewrites_checksums_is_in_the_file_when_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("live.db"));
        // As on the writer: no sync in the commit (the syncer syncs), so nothing but the VFS writes what it holds.
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn.pragma_update(None, "cache_size", 10).unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, body BLOB NOT NULL)").unwrap();
        for round in 1..=3i64 {
            let tx = conn.unchecked_transaction().unwrap();
            for i in 0..300 {
                tx.execute("INSERT INTO t (id, n, body) VALUES (?1, 0, randomblob(700))", [round * 1000 + i]).unwrap();
            }
            // Every page again, after most of them went to the log.
            tx.execute("UPDATE t SET n = n + 1", []).unwrap();
            tx.commit().unwrap();
            let copy = crash_copy(dir.path());
            let (rows, sum): (i64, i64) = copy
                .query_row("SELECT count(*), coalesce(sum(n), 0) FROM t", [], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap();
            let expected_sum: i64 = (1..=round).map(|r| 300 * (round - r + 1)).sum();
            assert_eq!((rows, sum), (300 * round, expected_sum), "round {round}: the copy lost the last commit");
        }
    }

    /// A savepoint rolled back restores the pages it changed from the sub-journal in memory, nested savepoints
    /// included, and the transaction around it commits what was before them.
    #[test]
    fn a_savepoint_rolls_back_from_a_sub_journal_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("live.db"));
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, body BLOB NOT NULL);
             WITH RECURSIVE s(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM s WHERE v < 2000)
             INSERT INTO t (id, n, body) SELECT v, v, randomblob(500) FROM s;",
        )
        .unwrap();
        let sums = |conn: &Connection| -> (i64, i64) {
            conn.query_row("SELECT count(*), sum(n) FROM t", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap()
        };
        let before = sums(&conn);
        let writes = |conn: &Connection| -> u64 {
            conn.query_row("SELECT payhook_sub_journal_writes()", [], |r| r.get(0)).unwrap()
        };
        let journaled = writes(&conn);
        conn.execute_batch(
            "BEGIN;
             UPDATE t SET n = n + 1 WHERE id <= 10;
             SAVEPOINT outer;
             UPDATE t SET n = n * 1000, body = randomblob(600);
             SAVEPOINT inner;
             DELETE FROM t WHERE id % 3 = 0;
             ROLLBACK TO inner;
             RELEASE inner;
             WITH RECURSIVE s(v) AS (SELECT 5000 UNION ALL SELECT v + 1 FROM s WHERE v < 5999)
             INSERT INTO t (id, n, body) SELECT v, 0, randomblob(900) FROM s;
             ROLLBACK TO outer;
             RELEASE outer;
             COMMIT;",
        )
        .unwrap();
        // About 300 pages of rows, each journaled by the outer savepoint, many again by the inner one.
        assert!(writes(&conn) - journaled >= 300, "{} sub-journal writes", writes(&conn) - journaled);
        assert_eq!(sums(&conn), (before.0, before.1 + 10), "the rollbacks did not restore the pages");
        let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
    }

    /// The function that reads the counters refuses what it does not know, rather than answering 0.
    #[test]
    fn the_counters_are_named() {
        let conn = Connection::open_in_memory().unwrap();
        let error = conn.query_row("SELECT payhook_wal_writes('all')", [], |r| r.get::<_, i64>(0)).unwrap_err();
        assert!(error.to_string().contains("'frames' or 'calls'"), "{error}");
        let error =
            conn.query_row("SELECT payhook_page_cache_truncations('all')", [], |r| r.get::<_, i64>(0)).unwrap_err();
        assert!(error.to_string().contains("'skipped' or 'passed'"), "{error}");
    }

    fn truncations(conn: &Connection, which: &str) -> i64 {
        conn.query_row("SELECT payhook_page_cache_truncations(?1)", [which], |r| r.get(0)).unwrap()
    }

    /// Commits that split leaves of an index on random keys (which sorts the new leaves' page numbers through the
    /// spare key past 1 GiB) do not make the end of every later transaction walk the page cache: those
    /// truncations cannot drop a page and are skipped. One that can (a rolled-back transaction had grown the file)
    /// is passed on, and the pages past the end are gone: the file grows again over them and stays whole.
    #[test]
    fn a_truncation_that_cannot_drop_a_page_skips_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("cache.db"));
        conn.execute_batch("CREATE TABLE t (k BLOB NOT NULL UNIQUE, body BLOB NOT NULL)").unwrap();
        let (skipped, passed) = (truncations(&conn, "skipped"), truncations(&conn, "passed"));
        for _ in 0..50 {
            let tx = conn.unchecked_transaction().unwrap();
            tx.execute_batch(
                "WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100)
                 INSERT INTO t (k, body) SELECT randomblob(32), randomblob(200) FROM n",
            )
            .unwrap();
            tx.commit().unwrap();
        }
        let (skipped, passed) = (truncations(&conn, "skipped") - skipped, truncations(&conn, "passed") - passed);
        assert!(skipped >= 45, "{skipped} of the 50 commits' truncations skipped, {passed} passed on");

        let pages = |conn: &Connection| conn.query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0)).unwrap();
        let before = pages(&conn);
        let passed = truncations(&conn, "passed");
        let tx = conn.unchecked_transaction().unwrap();
        tx.execute_batch("INSERT INTO t (k, body) SELECT randomblob(32), randomblob(3000) FROM t LIMIT 200").unwrap();
        assert!(pages(&tx) > before + 100, "the rolled-back transaction grows the file");
        tx.rollback().unwrap();
        assert_eq!(pages(&conn), before);
        assert!(truncations(&conn, "passed") > passed, "the rollback's truncation was skipped");
        conn.execute_batch("INSERT INTO t (k, body) SELECT randomblob(32), zeroblob(3000) FROM t LIMIT 200").unwrap();
        let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
        assert_eq!(conn.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0)).unwrap(), 5_200);
    }
}
