//! Integration tests of the SQLite backend, compiled as one binary so the crate is linked once.
//!
//! * `contract`: the store contract every backend must pass (`payhook_store::contract`).
//! * `counters`: the counters behind `stats` are kept whoever writes, read without a scan, corrected by a recount.
//! * `files`: the database and its `-wal` and `-shm` files are created readable by their owner only.
//! * `faults`: a failing write rolls back only its own event, in and out of a shared batch.
//! * `listings`: every listing walks an index matching its filter or is a bounded scan, whatever the table's size.
//! * `restart`: everything survives a reopen; migrations run once.
//! * `writer`: group commit under load, load shedding and shutdown.
//! * `wal`: the WAL stays under its limit, and bounding it never stalls the writer for long.
//! * `space`: pruning gives pages back to the file system; `compact` converts an older file.

mod contract;
mod counters;
mod faults;
mod files;
mod listings;
mod restart;
mod space;
mod wal;
mod writer;

use payhook_core::retry::RetryPolicy;
use payhook_sqlite::{SqliteOptions, SqliteStore};
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// A SQLite store on a file in its own temporary directory, removed when the store is dropped.
#[derive(Debug)]
pub struct TempStore {
    // Declared first so that it is dropped (and its writer stopped) before the directory is removed.
    store: SqliteStore,
    dir: TempDir,
}

impl TempStore {
    /// A fresh store with default options and `policy`.
    pub fn open(policy: RetryPolicy) -> Self {
        Self::open_with(|options| options.retry = policy)
    }

    /// A fresh store with default options adjusted by `adjust`.
    pub fn open_with(adjust: impl FnOnce(&mut SqliteOptions)) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut options = SqliteOptions::new(dir.path().join("payhook.db"));
        adjust(&mut options);
        let store = SqliteStore::open(options).expect("open the sqlite store");
        Self { store, dir }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    /// The store itself, for SQLite-specific calls.
    pub fn sqlite(&self) -> &SqliteStore {
        &self.store
    }

    /// Stops the store and hands back its directory, so that the file can be reopened.
    pub fn close(self) -> (TempDir, PathBuf) {
        let path = self.store.path().to_owned();
        drop(self.store);
        (self.dir, path)
    }
}

payhook_store::delegate_store!(TempStore => store);

/// A second, independent connection to the store's file, as another process (or an operator) would open it.
pub fn side_connection(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("open a side connection");
    conn.busy_timeout(std::time::Duration::from_secs(10)).expect("busy timeout");
    conn
}
