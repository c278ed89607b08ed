//! What crosses the storage boundary.

use payhook_core::event::{Effect, Event, EventId, Money, OrderId, SourceName};
use payhook_core::ledger::OrderStatus;
use serde::Serialize;

/// A delivery whose signature verified, ready to be recorded. Constructing one is the proof that verification
/// happened: the pipeline builds it only from a `Verified` result.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The source it arrived on.
    pub source: SourceName,
    /// When payhook received it, unix milliseconds.
    pub received_at_ms: i64,
    /// What the payload format made of the body.
    pub parsed: Parsed,
    /// The exact bytes that were verified.
    pub raw_body: Vec<u8>,
    /// The headers that matter (signature, ids, content type) as a JSON object.
    pub headers_json: String,
    /// How the delivery verified (scheme and which secret), for the audit trail.
    pub verification: String,
}

/// The payload format's verdict on a verified body.
#[derive(Debug, Clone)]
pub enum Parsed {
    /// A well-formed event.
    Event(Event),
    /// A verified body that cannot be understood: kept as a dead letter under a derived id (the scheme's delivery
    /// id, or a hash of the body) so that its redeliveries deduplicate.
    Unparseable {
        /// The id the dead letter is stored under.
        event_id: EventId,
        /// Why it could not be parsed.
        reason: String,
    },
}

impl Parsed {
    /// The id the delivery is recorded under.
    pub fn event_id(&self) -> &EventId {
        match self {
            Parsed::Event(e) => &e.event_id,
            Parsed::Unparseable { event_id, .. } => event_id,
        }
    }
}

/// What became of a delivery. `Processed` covers both a real transition and an event the order had already moved
/// past (reordering): in both cases the event is fully handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Applied (or had nothing left to change).
    Processed,
    /// Seen before: by event id, or its business fact was already applied by another event.
    Duplicate,
    /// Kept and retried by payhook's worker: its order does not exist yet or an earlier event is missing.
    Deferred,
    /// A type payhook does not act on.
    Ignored,
    /// Can never be applied; kept with its reason for an operator.
    DeadLettered,
}

impl Outcome {
    /// The name stored in the database and sent in answers.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Duplicate => "duplicate",
            Self::Deferred => "deferred",
            Self::Ignored => "ignored",
            Self::DeadLettered => "dead_lettered",
        }
    }

    /// The inverse of [`Outcome::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Processed, Self::Duplicate, Self::Deferred, Self::Ignored, Self::DeadLettered]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// The answer to an ingest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// What happened.
    pub outcome: Outcome,
    /// Why, for deferred, dead-lettered, duplicate-by-key and no-op events.
    pub detail: Option<String>,
}

/// An order as the merchant registers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    /// The merchant's id.
    pub id: OrderId,
    /// What the customer must pay.
    pub money: Money,
    /// Registration time, unix milliseconds.
    pub now_ms: i64,
}

/// The result of registering an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// A new order.
    Created,
    /// The same order was registered before with the same amount and currency: nothing changed.
    AlreadyExists,
    /// An order with this id exists with another amount or currency; nothing changed.
    Conflict {
        /// What the existing order says.
        existing: Money,
    },
}

/// One change in an order's audit history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditEntry {
    /// The source of the event that made the change.
    pub source: String,
    /// The event that made the change.
    pub event_id: String,
    /// Its provider type.
    pub event_type: String,
    /// State before.
    pub from: OrderStatus,
    /// State after.
    pub to: OrderStatus,
    /// When, unix milliseconds.
    pub at_ms: i64,
}

/// A side effect waiting in (or gone from) the outbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutboxView {
    /// Stable id, used as the idempotency key when it is delivered.
    pub id: i64,
    /// `order.paid`, `order.refunded`, …
    pub kind: String,
    /// `pending` until a dispatcher delivers it.
    pub status: String,
    /// The JSON document that will be sent.
    pub payload: serde_json::Value,
    /// When it was written, unix milliseconds.
    pub created_at_ms: i64,
}

/// An order with its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderView {
    /// The merchant's id.
    pub id: OrderId,
    /// Current state.
    pub status: OrderStatus,
    /// Registered amount.
    pub money: Money,
    /// Registration time, unix milliseconds.
    pub created_at_ms: i64,
    /// Last change, unix milliseconds.
    pub updated_at_ms: i64,
    /// Every transition, oldest first.
    pub history: Vec<AuditEntry>,
    /// Its outbox rows, oldest first.
    pub outbox: Vec<OutboxView>,
}

/// A recorded delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct EventView {
    /// Its source.
    pub source: SourceName,
    /// Its id.
    pub event_id: EventId,
    /// Its provider type, when it parsed.
    pub event_type: Option<String>,
    /// Its business key, when it parsed.
    pub business_key: Option<String>,
    /// Its effect, when it parsed.
    pub effect: Option<Effect>,
    /// Current state.
    pub status: Outcome,
    /// Why it is in that state.
    pub reason: Option<String>,
    /// Application attempts so far.
    pub attempts: u32,
    /// For deferred events, when the worker tries next (unix milliseconds).
    pub next_attempt_at_ms: Option<i64>,
    /// When it was received, unix milliseconds.
    pub received_at_ms: i64,
    /// How it verified.
    pub verification: String,
    /// The headers that matter, as JSON.
    pub headers_json: String,
    /// The exact bytes received.
    pub raw_body: Vec<u8>,
}

/// A request to lease due deferred events.
#[derive(Debug, Clone)]
pub struct Claim {
    /// Now, unix milliseconds.
    pub now_ms: i64,
    /// How long the lease lasts; a worker that dies holding it loses the rows after this.
    pub lease_ms: i64,
    /// At most this many rows.
    pub limit: u32,
    /// Identifies the claiming worker, so only its lease can complete the rows.
    pub owner: String,
}

/// A leased deferred event.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// Backend row id.
    pub row_id: i64,
    /// Its source.
    pub source: SourceName,
    /// Its id.
    pub event_id: EventId,
    /// Attempts made before this one.
    pub attempts: u32,
    /// The lease owner.
    pub owner: String,
}

/// The result of re-applying a claimed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retried {
    /// It ended in this state (processed, duplicate, deferred again, dead-lettered).
    Done(Recorded),
    /// Its lease had expired and another worker owns it now: nothing changed.
    LeaseLost,
}

/// Row counts by status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Inbox rows by outcome.
    pub events: Vec<(String, u64)>,
    /// Orders by status.
    pub orders: Vec<(String, u64)>,
    /// Outbox rows by kind.
    pub outbox: Vec<(String, u64)>,
}

impl Stats {
    /// The count under `key` in one of the lists (0 when absent).
    pub fn count(list: &[(String, u64)], key: &str) -> u64 {
        list.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n)
    }
}
