//! The VFS under every connection of the process: `csrc/wal_vfs.c`, compiled and linked by `build.rs`, registered
//! as SQLite's default VFS by a constructor when the program starts, so no connection names it.
//!
//! It is the platform's default VFS with one change: SQLite writes each WAL frame as two calls, its 24-byte header
//! and then its page at the next offset, and this VFS holds the header back and writes both with one call. On the
//! writer, whose commits write three or four frames per delivery, that is half its `pwrite`s (ARCHITECTURE.md,
//! *Decisions*; BENCHMARKS.md). A held header lives only until the next call on its file: any call other than the
//! page's write writes it alone first, so every call, and every sync, sees the file as SQLite asked for it.
//!
//! The C side counts what it did; `payhook_wal_frame_writes('combined')` and `('alone')` read the counts (frames
//! written with one call, headers written on their own) on any connection.

#[cfg(test)]
mod tests {
    use rusqlite::Connection;
    use std::path::Path;

    fn frame_writes(conn: &Connection, which: &str) -> u64 {
        conn.query_row("SELECT payhook_wal_frame_writes(?1)", [which], |r| r.get(0)).unwrap()
    }

    fn open(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        // The frames stay in the log: nothing copies them into the database file.
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn
    }

    /// Every frame of a commit goes out as one write, and SQLite recovers the log from a copy of the files made
    /// while the connection still held it (a crash): the headers are where SQLite put them, checksums and all.
    #[test]
    fn each_wal_frame_is_written_with_one_call_and_recovers_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("live.db"));
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB NOT NULL)").unwrap();
        let (combined, alone) = (frame_writes(&conn, "combined"), frame_writes(&conn, "alone"));
        for batch in 0..20 {
            let tx = conn.unchecked_transaction().unwrap();
            for i in 0..50 {
                tx.execute("INSERT INTO t (id, body) VALUES (?1, randomblob(700))", [batch * 50 + i]).unwrap();
            }
            tx.commit().unwrap();
        }
        // 1,000 rows of 700 bytes fill about 200 pages, each written at least once.
        let frames = frame_writes(&conn, "combined") - combined;
        assert!(frames >= 200, "frames written with one call: {frames}");
        // Other tests of this process may write WAL frames meanwhile, but none leaves a header alone.
        assert_eq!(frame_writes(&conn, "alone"), alone, "a frame header was written apart from its page");

        let wal = std::fs::metadata(dir.path().join("live.db-wal")).unwrap().len();
        assert!(wal > 200 * 4096, "the frames are in the log, not yet in the database: {wal} bytes");
        for suffix in ["", "-wal"] {
            std::fs::copy(dir.path().join(format!("live.db{suffix}")), dir.path().join(format!("copy.db{suffix}")))
                .unwrap();
        }
        let copy = Connection::open(dir.path().join("copy.db")).unwrap();
        let rows: i64 = copy.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 1000, "the copy's log was recovered to the last commit");
        let check: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
    }

    /// The function that reads the counters refuses what it does not know, rather than answering 0.
    #[test]
    fn the_counters_are_named() {
        let conn = Connection::open_in_memory().unwrap();
        let error = conn.query_row("SELECT payhook_wal_frame_writes('all')", [], |r| r.get::<_, i64>(0)).unwrap_err();
        assert!(error.to_string().contains("'combined' or 'alone'"), "{error}");
    }
}
