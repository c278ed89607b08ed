//! Integration tests of the SQLite backend, compiled as one binary so the crate is linked once.
//!
//! * `contract`: the store contract every backend must pass (`payhook_store::contract`).
//! * `faults`: a failing write rolls back only its own event, in and out of a shared batch.
//! * `restart`: everything survives a reopen; migrations run once.
//! * `writer`: group commit under load, load shedding and shutdown.

mod contract;
mod faults;
mod restart;
mod writer;

use payhook_core::event::{EventId, OrderId, SourceName};
use payhook_core::retry::RetryPolicy;
use payhook_sqlite::{SqliteOptions, SqliteStore};
use payhook_store::{
    Alert, Claim, Claimed, Delivery, Dispatched, EventFilter, EventSummary, EventView, NewOrder, OrderView,
    OutboxFilter, OutboxJob, OutboxView, Parsed, Recorded, Registered, Replayed, Retried, Stats, Store, StoreError,
};
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

impl Store for TempStore {
    fn ingest(&self, delivery: Delivery) -> impl Future<Output = Result<Recorded, StoreError>> + Send {
        self.store.ingest(delivery)
    }

    fn register_order(&self, order: NewOrder) -> impl Future<Output = Result<Registered, StoreError>> + Send {
        self.store.register_order(order)
    }

    fn order(&self, id: &OrderId) -> impl Future<Output = Result<Option<OrderView>, StoreError>> + Send {
        self.store.order(id)
    }

    fn event(
        &self,
        source: &SourceName,
        event_id: &EventId,
    ) -> impl Future<Output = Result<Option<EventView>, StoreError>> + Send {
        self.store.event(source, event_id)
    }

    fn claim_due(&self, claim: Claim) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + Send {
        self.store.claim_due(claim)
    }

    fn retry(&self, claimed: Claimed, now_ms: i64) -> impl Future<Output = Result<Retried, StoreError>> + Send {
        self.store.retry(claimed, now_ms)
    }

    fn stats(&self) -> impl Future<Output = Result<Stats, StoreError>> + Send {
        self.store.stats()
    }

    fn next_due_ms(&self) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send {
        self.store.next_due_ms()
    }

    fn claim_outbox(
        &self,
        sink: &str,
        claim: Claim,
    ) -> impl Future<Output = Result<Vec<OutboxJob>, StoreError>> + Send {
        self.store.claim_outbox(sink, claim)
    }

    fn finish_outbox(
        &self,
        job: &OutboxJob,
        outcome: Dispatched,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.store.finish_outbox(job, outcome, now_ms)
    }

    fn retry_outbox(&self, id: i64, now_ms: i64) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.store.retry_outbox(id, now_ms)
    }

    fn next_outbox_due_ms(&self, sink: &str) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send {
        self.store.next_outbox_due_ms(sink)
    }

    fn list_outbox(&self, filter: OutboxFilter) -> impl Future<Output = Result<Vec<OutboxView>, StoreError>> + Send {
        self.store.list_outbox(filter)
    }

    fn list_events(&self, filter: EventFilter) -> impl Future<Output = Result<Vec<EventSummary>, StoreError>> + Send {
        self.store.list_events(filter)
    }

    fn replay(
        &self,
        source: &SourceName,
        event_id: &EventId,
        parsed: Parsed,
        now_ms: i64,
    ) -> impl Future<Output = Result<Replayed, StoreError>> + Send {
        self.store.replay(source, event_id, parsed, now_ms)
    }

    fn raise_alert(&self, alert: Alert) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.store.raise_alert(alert)
    }

    fn subscription(
        &self,
        id: &payhook_core::event::SubscriptionId,
    ) -> impl Future<Output = Result<Option<payhook_store::SubscriptionView>, StoreError>> + Send {
        self.store.subscription(id)
    }

    fn entitlements(
        &self,
        customer: &payhook_core::event::CustomerId,
    ) -> impl Future<Output = Result<Vec<payhook_store::EntitlementView>, StoreError>> + Send {
        self.store.entitlements(customer)
    }

    fn claim_nonce(
        &self,
        claim: payhook_store::NonceClaim,
    ) -> impl Future<Output = Result<payhook_store::NonceClaimed, StoreError>> + Send {
        self.store.claim_nonce(claim)
    }

    fn prune(
        &self,
        request: payhook_store::PruneRequest,
    ) -> impl Future<Output = Result<payhook_store::Pruned, StoreError>> + Send {
        self.store.prune(request)
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.store.ping()
    }

    fn writer_metrics(&self) -> payhook_store::metrics::WriterMetrics {
        self.store.writer_metrics()
    }
}

/// A second, independent connection to the store's file, as another process (or an operator) would open it.
pub fn side_connection(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("open a side connection");
    conn.busy_timeout(std::time::Duration::from_secs(10)).expect("busy timeout");
    conn
}
