//! The writer's connection as its jobs see it: the connection itself (through `Deref`), and the statements of the
//! writer's common path, prepared once and kept for the connection's life.
//!
//! rusqlite's statement cache finds a statement by its text. Every use copies the text into a new key, hashes it
//! twice and moves the statement out of and back into the cache's LRU list: about a thousand instructions under
//! callgrind, and a delivery's common path runs seven statements (its savepoint and release, three inserts, the
//! order's guarded update, the outbox row): keeping them cut the writer's instructions on its jobs to 0.92×
//! (decision 34, docs/decisions/0034-prepared-statements.md). [`WriterConn::kept`] finds a statement by the address of its text instead, a string constant of
//! the code: a comparison of two pointers (of the texts, should the compiler have copied a literal).
//!
//! Bounded by construction: one statement per string constant passed to `kept`, which are a fixed set written in
//! the code, and at most [`MOST_KEPT`] of them in case a future caller passed texts built at run time (a
//! `&'static str` can be leaked); past that, statements are prepared for their use and finalized after it.

use rusqlite::{Connection, PrepFlags, Statement};
use std::cell::RefCell;

/// The most statements a writer keeps; the common path uses about a dozen.
const MOST_KEPT: usize = 64;

/// The writer's connection and the statements it keeps prepared, made once by the writer thread (`writer::run`) and
/// dropped before the connection it borrows, finalizing its statements.
pub(crate) struct WriterConn<'c> {
    conn: &'c Connection,
    kept: RefCell<Vec<Kept<'c>>>,
}

/// A kept statement: `None` while a caller holds it (a nested use of the same text prepares another).
struct Kept<'c> {
    sql: &'static str,
    stmt: Option<Statement<'c>>,
}

impl<'c> WriterConn<'c> {
    pub(crate) fn new(conn: &'c Connection) -> Self {
        WriterConn { conn, kept: RefCell::new(Vec::new()) }
    }

    /// Runs `run` on the statement of `sql`, prepared on its first use and kept after it. rusqlite resets a
    /// statement after each execution and each query's rows, and every use binds all of its parameters, so what
    /// one use leaves behind never reaches the next.
    pub(crate) fn kept<T>(
        &self,
        sql: &'static str,
        run: impl FnOnce(&mut Statement<'c>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let held = {
            let mut kept = self.kept.borrow_mut();
            let slot = slot_of(&kept, sql);
            slot.and_then(|i| kept[i].stmt.take())
        };
        let mut stmt = match held {
            Some(stmt) => stmt,
            // Persistent, as rusqlite's cache prepares them: SQLite then allocates the statement outside the
            // connection's lookaside memory, which stays free for what each execution allocates and frees.
            None => self.conn.prepare_with_flags(sql, PrepFlags::SQLITE_PREPARE_PERSISTENT)?,
        };
        let result = run(&mut stmt);
        let mut kept = self.kept.borrow_mut();
        match slot_of(&kept, sql) {
            // Unless a nested use of the same text put its own back first: the outer use's is then finalized.
            Some(i) => {
                kept[i].stmt.get_or_insert(stmt);
            }
            None if kept.len() < MOST_KEPT => kept.push(Kept { sql, stmt: Some(stmt) }),
            None => {}
        }
        result
    }

    /// How many statements are kept, for the tests of the bound.
    #[cfg(test)]
    fn kept_len(&self) -> usize {
        self.kept.borrow().len()
    }
}

/// Where `sql` is kept: found by the address of its text, and else by the text itself (a literal is not promised one
/// address: the compiler may place copies of it in several places).
fn slot_of(kept: &[Kept<'_>], sql: &'static str) -> Option<usize> {
    kept.iter().position(|k| std::ptr::eq(k.sql, sql)).or_else(|| kept.iter().position(|k| k.sql == sql))
}

impl std::ops::Deref for WriterConn<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        let conn = Connection::open_in_memory().expect("an in-memory database");
        conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)").expect("the table");
        conn
    }

    #[test]
    fn a_kept_statement_is_prepared_once_and_rebinds_every_use() {
        let conn = conn();
        let w = WriterConn::new(&conn);
        const INSERT: &str = "INSERT INTO t (k, v) VALUES (?1, ?2)";
        for k in 0..3 {
            w.kept(INSERT, |s| s.execute(rusqlite::params![k, format!("v{k}")])).expect("the insert");
        }
        assert_eq!(w.kept_len(), 1);
        let rows: Vec<(i64, String)> = w
            .kept("SELECT k, v FROM t ORDER BY k", |s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<rusqlite::Result<_>>()
            })
            .expect("the rows");
        assert_eq!(rows, vec![(0, "v0".into()), (1, "v1".into()), (2, "v2".into())]);
        assert_eq!(w.kept_len(), 2);
    }

    #[test]
    fn a_failed_use_leaves_the_statement_usable() {
        let conn = conn();
        let w = WriterConn::new(&conn);
        const INSERT: &str = "INSERT INTO t (k, v) VALUES (?1, ?2)";
        w.kept(INSERT, |s| s.execute(rusqlite::params![1, "a"])).expect("the first insert");
        assert!(w.kept(INSERT, |s| s.execute(rusqlite::params![1, "b"])).is_err(), "the key is taken");
        w.kept(INSERT, |s| s.execute(rusqlite::params![2, "c"])).expect("the statement still works");
        let n: i64 = w.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).expect("the count");
        assert_eq!(n, 2);
    }

    #[test]
    fn a_nested_use_of_the_same_text_gets_its_own_statement() {
        let conn = conn();
        let w = WriterConn::new(&conn);
        const COUNT: &str = "SELECT count(*) FROM t WHERE k >= ?1";
        let (outer, inner): (i64, i64) = w
            .kept(COUNT, |outer| {
                let inner = w.kept(COUNT, |inner| inner.query_row([0], |r| r.get(0)))?;
                Ok((outer.query_row([0], |r| r.get(0))?, inner))
            })
            .expect("both counts");
        assert_eq!((outer, inner), (0, 0));
        assert_eq!(w.kept_len(), 1);
    }

    #[test]
    fn no_more_than_the_bound_are_kept() {
        let conn = conn();
        let w = WriterConn::new(&conn);
        for i in 0..MOST_KEPT + 10 {
            let sql: &'static str = Box::leak(format!("SELECT {i}").into_boxed_str());
            let got: usize = w.kept(sql, |s| s.query_row([], |r| r.get(0))).expect("the select");
            assert_eq!(got, i);
        }
        assert_eq!(w.kept_len(), MOST_KEPT);
    }
}
