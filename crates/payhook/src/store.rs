//! The configured database opened for a piece of work and closed after it, whichever backend it is: what the
//! commands that work on the database directly (the admin commands, `payhook-bench prefill`) share.

use crate::config::{Config, StorageConfig};
use anyhow::{Context, Result};
use payhook_postgres::PgStore;
use payhook_sqlite::SqliteStore;
use payhook_store::Store;

/// Work on an open store, the same for every backend.
pub trait StoreTask {
    type Output;

    /// Does the work on `store`, the database `cfg` configures.
    fn run<S: Store>(self, store: &S, cfg: &Config) -> impl Future<Output = Result<Self::Output>>;
}

/// Opens the configured database, runs `task` on it, and closes it once everything written has committed.
pub async fn with_store<T: StoreTask>(cfg: &Config, task: T) -> Result<T::Output> {
    // The storage options carry the server's routing, so that what is written gets the outbox rows a live
    // delivery would.
    match cfg.storage.clone() {
        StorageConfig::Sqlite(options) => {
            let path = options.path.display().to_string();
            let store = SqliteStore::open(options).with_context(|| format!("cannot open {path}"))?;
            let result = task.run(&store, cfg).await;
            store.shutdown().await;
            result
        }
        StorageConfig::Postgres(options) => {
            let target = options.target();
            let store = PgStore::open(options).await.with_context(|| format!("cannot open {target}"))?;
            let result = task.run(&store, cfg).await;
            // Everything it wrote has committed; close the pool.
            store.shutdown().await;
            result
        }
    }
}
