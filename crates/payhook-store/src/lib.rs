//! payhook-store: the storage boundary.
//!
//! The [`Store`] trait is a set of intent-level, atomic operations: "record this verified delivery and apply its
//! effect", "claim the due deferred events", "register this order". Each backend crate (`payhook-sqlite`,
//! `payhook-postgres`) owns its SQL, its migrations and its group commit; nothing above this crate speaks SQL.
//!
//! - [`model`]: what goes in and what comes out (`Delivery`, `Recorded`, `OrderView`, …).
//! - [`audit`]: the operator audit trail ([`AuditEntry`], [`AuditRecord`], [`AuditFilter`]) and the outcome words the
//!   store writes for the actions it records in their own transaction.
//! - `counts`: the row counters' keys ([`CounterKey`]), the [`Stats`] read from them and a recount's [`Recounted`].
//! - `delivery`: [`Delivery`], a verified delivery to record: made only from payhook-core's `Verified` (or, for
//!   tests, with the `contract` feature).
//! - `headers`: [`ReceivedHeaders`], a delivery's headers with every value of a repeated one, and their stored
//!   JSON form (read in its older form too).
//! - [`metrics`]: the writer's queue and batch sizes, the read connections' use, read by the server's `/metrics`
//!   and `/readyz`.
//! - [`replication`]: [`Replication`], the database's replication as payhook sees it (PostgreSQL), and whether a
//!   2xx is acknowledged on a standby.
//! - [`tracing_flag`]: whether OpenTelemetry spans are made at all (off unless an exporter is configured).
//! - [`StoreError`]: the one error type every backend maps its failures to.
//! - [`checker`] (feature `contract`): payhook's promise checked on a final store, for every end-to-end test.
//! - [`contract`] (feature `contract`): the behaviour every backend must show, as a test suite they all run.

use std::future::Future;

pub mod audit;
#[cfg(feature = "contract")]
pub mod checker;
#[cfg(feature = "contract")]
pub mod contract;
mod counts;
mod current;
mod delivery;
pub mod filter;
mod headers;
pub mod listing;
pub mod metrics;
pub mod model;
pub mod payload;
pub mod replication;
pub mod tracing_flag;
mod write_ctx;

pub use audit::{AuditAction, AuditEntry, AuditFilter, AuditRecord, UnknownAuditAction};
pub use current::Current;
pub use filter::{Condition, SinkFilter};
pub use listing::Listing;
pub use model::*;
pub use replication::Replication;
pub use write_ctx::{LiveWriteCtx, WriteCtx};

/// A boxed error cause, kept as the `source()` of a [`StoreError`].
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a store operation failed. An error never means "done": the caller answers non-2xx and the provider retries.
/// Mostly nothing was recorded, but not always: after a commit whose durability could not be confirmed (a failed
/// `fdatasync` of the WAL, a connection lost while `COMMIT` was on its way) the call fails with
/// [`StoreError::Unavailable`] although the work may be stored. Every operation is idempotent, so the retry then
/// finds it (a delivery is answered `duplicate`) and nothing is applied twice.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or refused the write (locked, IO error, disk full). Transient.
    #[error("storage is unavailable")]
    Unavailable(#[source] Cause),
    /// The write queue is full: shed load, the caller retries later.
    #[error("the write queue is full")]
    Overloaded,
    /// The store is shutting down and accepts no new work.
    #[error("the store is shutting down")]
    ShuttingDown,
    /// A stored value could not be read back, or stored state breaks an invariant (corruption or a bug): never
    /// retried blindly. Made with [`StoreError::corrupt`] (with the error that said so) or
    /// [`StoreError::inconsistent`].
    #[error("stored data is inconsistent: {what}")]
    Corrupt {
        /// What could not be read, or what is out of step.
        what: String,
        /// The error reading it, when there is one.
        #[source]
        source: Option<Cause>,
    },
    /// A read ran longer than the store's read time limit and was stopped. Transient: the caller retries later,
    /// or asks for less.
    #[error("the read took longer than its limit of {timeout_ms} ms and was stopped")]
    ReadTimeout {
        /// The limit, in milliseconds.
        timeout_ms: u64,
    },
    /// Every read connection stayed busy for the read time limit, so the read never started. Transient.
    #[error("no read connection came free within {timeout_ms} ms")]
    ReadersBusy {
        /// How long the read waited, in milliseconds.
        timeout_ms: u64,
    },
}

impl StoreError {
    /// A stored value that does not decode (`what` names it), with the error that said so as the `source`.
    pub fn corrupt(what: impl Into<String>, source: impl Into<Cause>) -> Self {
        StoreError::Corrupt { what: what.into(), source: Some(source.into()) }
    }

    /// Stored state that breaks an invariant, with no error beneath it (`what` says how).
    pub fn inconsistent(what: impl Into<String>) -> Self {
        StoreError::Corrupt { what: what.into(), source: None }
    }
}

/// Storage operations. Every method is atomic: it commits completely or not at all, and it returns only after
/// its commit is durable.
pub trait Store: Send + Sync + 'static {
    /// Records a verified delivery and, unless it is a duplicate, applies its effect, all in one transaction:
    /// inbox row (dedup on source + event id), business key (dedup on the business fact), guarded ledger
    /// update, outbox rows. Returns only after the commit.
    fn ingest(&self, delivery: Delivery) -> impl Future<Output = Result<Recorded, StoreError>> + Send;

    /// Registers an order. Deferred events waiting for it become due at once.
    fn register_order(&self, order: NewOrder) -> impl Future<Output = Result<Registered, StoreError>> + Send {
        self.register_order_audited(order, None)
    }

    /// [`Store::register_order`], with `audit` (when given) appended in the registration's own transaction, its
    /// `outcome` written from the result ([`audit::registration_outcome`]: `created`, `already_exists`,
    /// `conflict`). A registration that fails with an error writes no entry. Where a backend runs a transaction again
    /// after the answer to its `COMMIT` was lost (PostgreSQL's batches), the entry of a registration that did commit
    /// may be written a second time, with the outcome of the second run (`already_exists`).
    fn register_order_audited(
        &self,
        order: NewOrder,
        audit: Option<AuditEntry>,
    ) -> impl Future<Output = Result<Registered, StoreError>> + Send;

    /// An order with its audit history and outbox rows.
    fn order(
        &self,
        id: &payhook_core::event::OrderId,
    ) -> impl Future<Output = Result<Option<OrderView>, StoreError>> + Send;

    /// One recorded delivery.
    fn event(
        &self,
        source: &payhook_core::event::SourceName,
        event_id: &payhook_core::event::EventId,
    ) -> impl Future<Output = Result<Option<EventView>, StoreError>> + Send;

    /// Leases up to `limit` deferred events whose next attempt is due at `now_ms` (or whose lease expired).
    fn claim_due(&self, claim: Claim) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + Send;

    /// Re-applies a claimed event: processed, deferred again (per the retry policy) or dead-lettered when the
    /// budget is spent. A lease that was lost meanwhile changes nothing.
    fn retry(&self, claimed: Claimed, now_ms: i64) -> impl Future<Output = Result<Retried, StoreError>> + Send;

    /// Row counts by status, read from counters kept in the transaction of every change (a few rows, whatever
    /// the history), and the oldest waiting work, read through partial indexes.
    fn stats(&self) -> impl Future<Output = Result<Stats, StoreError>> + Send;

    /// Recomputes the row counters behind [`Store::stats`] from a full count and corrects those that drifted,
    /// in steps (each table, on SQLite each source of the inbox, read in a snapshot of its own; only the corrections
    /// are written) so that no step holds the writer for long. Returns the full count and what was corrected.
    fn recount(&self) -> impl Future<Output = Result<Recounted, StoreError>> + Send;

    /// When the earliest deferred event can next be claimed (its `next_attempt_at`, or its lease's end when it is
    /// leased), so the worker knows how long it may sleep.
    fn next_due_ms(&self) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// Leases up to `claim.limit` due pending outbox rows of `sink` (or rows whose lease expired), in per-key order
    /// with dead rows holding their keys ([`KeyOrder::Hold`]).
    fn claim_outbox(
        &self,
        sink: &str,
        claim: Claim,
    ) -> impl Future<Output = Result<Vec<OutboxJob>, StoreError>> + Send {
        self.claim_outbox_ordered(sink, claim, KeyOrder::Hold)
    }

    /// Leases up to `claim.limit` due pending outbox rows of `sink` (or rows whose lease expired). Unless `order`
    /// is [`KeyOrder::Unordered`], a row is claimed only when no earlier row (lower id) of its key for `sink` is
    /// pending, leased or not, nor, with [`KeyOrder::Hold`], dead; the condition is part of the claiming statement,
    /// so it holds for any number of dispatchers claiming at once. A claim therefore takes at most one row per key.
    fn claim_outbox_ordered(
        &self,
        sink: &str,
        claim: Claim,
        order: KeyOrder,
    ) -> impl Future<Output = Result<Vec<OutboxJob>, StoreError>> + Send;

    /// How many pending rows of `sink` wait behind an earlier row of their key under `order` (pending, or dead
    /// with [`KeyOrder::Hold`]), and when the oldest of them was written (unix milliseconds), for `/metrics`.
    /// Reads at most `scan_rows` pending rows of the sink, in due order: beyond them it counts nothing (a lower
    /// bound).
    fn held_outbox(
        &self,
        sink: &str,
        order: KeyOrder,
        scan_rows: u32,
    ) -> impl Future<Output = Result<Held, StoreError>> + Send;

    /// Records the outcome of a delivery attempt of a leased row. A dead row raises an alert in the same
    /// transaction. Returns `false`, changing nothing, when the lease was lost to another dispatcher.
    fn finish_outbox(
        &self,
        job: &OutboxJob,
        outcome: Dispatched,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Re-queues a dead outbox row with a fresh budget. Returns `false` when the row is not dead.
    fn retry_outbox(&self, id: i64, now_ms: i64) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.retry_outbox_audited(id, now_ms, None)
    }

    /// [`Store::retry_outbox`], with `audit` (when given) appended in the re-queue's own transaction, its
    /// `outcome` written from the result ([`audit::retry_outbox_outcome`]: `requeued`, or `not_dead` for a row
    /// that is not dead or does not exist). A re-queue that fails with an error writes no entry.
    fn retry_outbox_audited(
        &self,
        id: i64,
        now_ms: i64,
        audit: Option<AuditEntry>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// When the earliest pending outbox row of `sink` can next be claimed.
    fn next_outbox_due_ms(&self, sink: &str) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// Outbox rows, newest first, read down an index matching the filter; a filter no index serves whole examines
    /// at most the scan bound of rows and says where it stopped ([`Listing`]).
    fn list_outbox(&self, filter: OutboxFilter)
    -> impl Future<Output = Result<Listing<OutboxView>, StoreError>> + Send;

    /// One outbox row by id, as it is now: read where the latest writes are (never on a standby that may lag), so
    /// that it shows a re-queue just made. By default the newest row below `id + 1` through
    /// [`Store::list_outbox`], if it is that row.
    fn outbox_row(&self, id: i64) -> impl Future<Output = Result<Option<OutboxView>, StoreError>> + Send {
        async move {
            let Some(before) = id.checked_add(1) else { return Ok(None) };
            let filter = OutboxFilter { before: Some(before), limit: 1, ..OutboxFilter::default() };
            Ok(self.list_outbox(filter).await?.rows.into_iter().next().filter(|row| row.id == id))
        }
    }

    /// Recorded deliveries, newest first, read down an index matching the filter; a filter no index serves whole
    /// examines at most the scan bound of rows and says where it stopped ([`Listing`]).
    fn list_events(
        &self,
        filter: EventFilter,
    ) -> impl Future<Output = Result<Listing<EventSummary>, StoreError>> + Send;

    /// Replays a dead-lettered event: `parsed` is the current format's reading of its stored bytes, and it goes
    /// through the same dedup and ledger path as a new delivery, so replaying twice, or replaying an event whose
    /// effect was applied meanwhile, changes nothing.
    fn replay(
        &self,
        source: &payhook_core::event::SourceName,
        event_id: &payhook_core::event::EventId,
        parsed: Parsed,
        now_ms: i64,
    ) -> impl Future<Output = Result<Replayed, StoreError>> + Send {
        self.replay_audited(source, event_id, parsed, now_ms, None)
    }

    /// [`Store::replay`], with `audit` (when given) appended in the replay's own transaction, its `outcome`
    /// written from the result ([`audit::replay_outcome`]: what the event came to, `processed`, `duplicate`,
    /// `deferred`, `ignored` or `dead_lettered`, or `not_dead_letter`). A replay of an event that does not exist
    /// ([`Replayed::NotFound`]) writes no entry, nor does a replay that fails with an error.
    fn replay_audited(
        &self,
        source: &payhook_core::event::SourceName,
        event_id: &payhook_core::event::EventId,
        parsed: Parsed,
        now_ms: i64,
        audit: Option<AuditEntry>,
    ) -> impl Future<Output = Result<Replayed, StoreError>> + Send;

    /// Appends operator actions to the audit trail, all in one transaction, each with the `outcome` it carries:
    /// what is not recorded with its action (a refusal, a login, a reload, an action that failed). The caller
    /// bounds how many one call appends.
    fn audit(&self, entries: Vec<AuditEntry>) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Audit entries, newest first (by id), narrowed by `filter` (its fields combine with AND) and paged with its
    /// `before` cursor; read down an index matching the filter, and a filter no index serves whole examines at
    /// most the scan bound of entries and says where it stopped ([`Listing`]), as [`Store::list_events`] does.
    fn list_audit(&self, filter: AuditFilter) -> impl Future<Output = Result<Listing<AuditRecord>, StoreError>> + Send;

    /// Deletes at most `limit` audit entries made before `before_ms`, oldest first, in one transaction; returns how
    /// many it deleted. Entries made since are never touched; the caller repeats the step until it deletes fewer
    /// than `limit`.
    fn prune_audit(&self, before_ms: i64, limit: u32) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Raises an alert: a durable outbox row for the alerts sink, collapsed with the alerts of the same key within
    /// the suppression window. Does nothing when no alerts sink is configured.
    fn raise_alert(&self, alert: Alert) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A subscription with its history and the entitlements of its invoices.
    fn subscription(
        &self,
        id: &payhook_core::event::SubscriptionId,
    ) -> impl Future<Output = Result<Option<SubscriptionView>, StoreError>> + Send;

    /// A customer's entitlements with their history, oldest first.
    fn entitlements(
        &self,
        customer: &payhook_core::event::CustomerId,
    ) -> impl Future<Output = Result<Vec<EntitlementView>, StoreError>> + Send;

    /// Claims a signature nonce, durably, pruning nonces whose window has passed.
    fn claim_nonce(&self, claim: NonceClaim) -> impl Future<Output = Result<NonceClaimed, StoreError>> + Send;

    /// One bounded pruning step of the retention policy. A dedup key (an event's row, its business key) younger
    /// than `keys_before_ms` is never removed, nor an order that is not final, changed after `orders_before_ms`,
    /// has an outbox row pending or dead, or has an event deferred on it.
    fn prune(&self, request: PruneRequest) -> impl Future<Output = Result<Pruned, StoreError>> + Send;

    /// Checks that the database answers, on a connection of its own where the backend has one: a readiness probe
    /// must not wait behind slow reads.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The database's replication as seen from the primary (synchronous standbys, `synchronous_commit`), read on
    /// the same connection of its own as [`Store::ping`] and as quickly bounded. `None` from a backend without
    /// replication (SQLite).
    fn replication(&self) -> impl Future<Output = Result<Option<Replication>, StoreError>> + Send {
        std::future::ready(Ok(None))
    }

    /// Whether the configuration requires a synchronous standby (`storage.require_sync_standby`): then a
    /// [`Store::replication`] that is not [`Replication::ready`], or that cannot be read, makes `/readyz` not
    /// ready. Known without the database, so that a failed read is judged by it too.
    fn requires_sync_standby(&self) -> bool {
        false
    }

    /// The writer's state: running, queue depth, committed batch sizes. Cheap (atomics), never waits.
    fn writer_metrics(&self) -> metrics::WriterMetrics;

    /// Replaces the routing of outbox rows, forwards, implicit orders and alerts (a configuration reload). Each
    /// write transaction runs under the routing current when it starts, never a mix of two.
    fn set_routing(&self, routing: Routing);

    /// The read connections' state: in use, reads waiting for one, reads stopped by the time limit. Cheap
    /// (atomics), never waits. A backend without a reader pool of its own reports [`metrics::ReadMetrics::default`].
    fn read_metrics(&self) -> metrics::ReadMetrics {
        metrics::ReadMetrics::default()
    }
}

#[cfg(test)]
mod tests {
    use super::StoreError;
    use std::error::Error as _;

    #[test]
    fn a_corrupt_value_keeps_the_error_that_said_so_as_its_source() {
        let cause = serde_json::from_str::<i64>("{").unwrap_err();
        let e = StoreError::corrupt("a stored effect", cause);
        assert_eq!(e.to_string(), "stored data is inconsistent: a stored effect");
        let source = e.source().expect("the decoding error is kept");
        assert!(source.to_string().contains("expected i64"), "{source}");
        assert!(StoreError::inconsistent("an order vanished").source().is_none());
    }
}
