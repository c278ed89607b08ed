//! The write operations: what each call sends to the SQL functions of the schema, and the decisions taken in Rust
//! with payhook-core's rules (why a guard matched nothing, when to retry). One module per concern: `ingest` (a
//! delivery through the batch), `rows` (the composite rows the batch functions take), `settle` (settlements and
//! their follow-ups), `connection` (running on a pooled connection, again after a deadlock), `worker` (the retry
//! of deferred rows) and `replay`.
//!
//! Invariant: dedup is decided by `INSERT … ON CONFLICT DO NOTHING` on a unique key, never by a SELECT before an
//! INSERT; every state change is a guarded `UPDATE … WHERE status IN (legal predecessors)` (in `payhook_apply`).
//! The ledger's rules live in `payhook_core::ledger` only: SQL applies a plan and reports a miss, Rust explains it.
//!
//! Routing (which sinks get an effect's outbox rows, which sources are forwarded, where alerts go) is this
//! instance's configuration: it travels with each call into the SQL functions, in the effect's transaction.

mod connection;
mod ingest;
mod replay;
mod rows;
mod settle;
mod worker;

pub(crate) use connection::{Failure, on_connection, rerun_on_conflict};
pub(crate) use ingest::{INGEST_SQL, IngestCall, Landed};
pub(crate) use replay::replay;
pub(crate) use rows::{IngestColumns, REGISTER_SQL, RegisterColumns, SETTLE_SQL, SettleColumns, register_lock_key};
pub(crate) use settle::{FollowUps, RegisterLanded, Settle, money, parse_status, registered, settle_billing};
pub(crate) use worker::{claim_due, retry};

use crate::billing;
use crate::error::PgError;
use crate::pipeline::send;
use crate::pool;
use crate::pool::{Object, Pool};
use payhook_core::event::{Currency, Effect, Event, EventId, Money, SourceName};
use payhook_core::ledger::{self, OrderSnapshot, OrderStatus, Plan, Unapplied};
use payhook_core::retry::{Next, RetryPolicy};
use payhook_store::payload;
use payhook_store::{
    ALERT_KIND, AuditEntry, Claim, Claimed, Delivery, FORWARD_KIND, NewOrder, Outcome, Parsed, Recorded, Registered,
    Replayed, Retried, Routing, StoreError,
};
use postgres_types::ToSql;
use tokio_postgres::Row;

const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock($1)";

/// What the write operations need besides their arguments, shared with the other backends
/// (`payhook_store::WriteCtx`).
pub(crate) use payhook_store::{LiveWriteCtx as LiveCtx, WriteCtx as Ctx};

/// The advisory lock that guards an order: FNV-1a (64 bit) of its id.
///
/// Invariant: this function never changes. Every instance sharing a database must compute the same lock for the
/// same order, including two versions of payhook during a rolling upgrade (a unit test pins its values).
pub(crate) fn order_lock(order_id: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in order_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// The sinks that receive `document` of `kind`, in configuration order; `[""]` (recorded once, unrouted) when none
/// does.
pub(crate) fn sinks_of<'a>(routing: &'a Routing, kind: &str, document: &str) -> Vec<&'a str> {
    let mut sinks = routing.sinks_for(kind, document);
    if sinks.is_empty() {
        sinks.push("");
    }
    sinks
}

/// A planned order change, in the shape `payhook_apply` takes it.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) plan: Plan,
    pub(crate) lock: i64,
    /// The guard's one or two states; the second repeats the first when there is one.
    pub(crate) from: (&'static str, &'static str),
    /// The outbox document for each previous status the guard allows (one per distinct state of `from`), as
    /// `payhook_apply` takes them.
    pub(crate) payloads: Vec<String>,
}

impl Change {
    /// The change `plan` makes for `event` of `source`.
    pub(crate) fn new(plan: Plan, source: &str, event: &Event) -> Self {
        let first = plan.from.first().map_or("", |s| s.as_str());
        let from = (first, plan.from.get(1).map_or(first, |s| s.as_str()));
        let render = |previous: &str| payload::order_changed(&plan, previous, source, event);
        let mut payloads = vec![render(from.0)];
        if from.1 != from.0 {
            payloads.push(render(from.1));
        }
        Self { lock: order_lock(plan.order_id.as_str()), from, payloads, plan }
    }

    /// The document a sink's filter reads: the first rendering (the renderings differ only in the previous status,
    /// which no filter reads).
    pub(crate) fn document(&self) -> &str {
        self.payloads.first().map_or("", String::as_str)
    }

    pub(crate) fn amount(&self) -> Option<i64> {
        self.plan.expect_money.as_ref().map(|m| m.amount_minor)
    }

    pub(crate) fn currency(&self) -> Option<&str> {
        self.plan.expect_money.as_ref().map(|m| m.currency.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_locks_are_fnv1a_and_never_change() {
        // Pinned: instances of different versions on one database must agree on every order's lock.
        assert_eq!(order_lock(""), i64::from_ne_bytes(0xcbf2_9ce4_8422_2325_u64.to_ne_bytes()));
        assert_eq!(order_lock("a"), i64::from_ne_bytes(0xaf63_dc4c_8601_ec8c_u64.to_ne_bytes()));
        assert_eq!(order_lock("ord_1"), order_lock("ord_1"));
        assert_ne!(order_lock("ord_1"), order_lock("ord_2"));
    }
}
