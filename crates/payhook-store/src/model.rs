//! What crosses the storage boundary.
//!
//! Why one file of about 900 lines: these are the plain data types of the `Store` trait's signatures (what goes in,
//! what comes out, filters), nearly all documentation; split, every backend would import from many files for one
//! contract. Two have files of their own, re-exported here: the verified [`Delivery`] (`delivery`, for the rule
//! that only a verification makes one) and the row counters' [`CounterKey`] (`counts`, with its stored form).

pub use crate::counts::{COUNTED_TABLES, CountedTable, CounterKey, Counts, Drift, Recounted};
pub use crate::delivery::{Delivery, DeliveryParts};
pub use crate::headers::ReceivedHeaders;
use payhook_core::event::{Effect, Event, EventId, Money, OrderId, SourceName};
use payhook_core::ledger::OrderStatus;
use serde::{Deserialize, Serialize};

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
pub struct OrderChange {
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

/// `[T::ALL[0].as_str(), …]` at compile time, for an enum with `ALL` and a `const fn as_str`.
macro_rules! names_of {
    ($t:ty, $n:literal) => {{
        let mut names = [""; $n];
        let mut i = 0;
        while i < $n {
            names[i] = <$t>::ALL[i].as_str();
            i += 1;
        }
        names
    }};
}

/// Where an outbox row is in its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxStatus {
    /// Waiting for its next attempt.
    Pending,
    /// The sink acknowledged it.
    Delivered,
    /// It failed for good (a permanent error, or the budget is spent); an operator may re-queue it.
    Dead,
    /// No configured sink takes its kind: the effect is recorded, nothing is sent.
    Unrouted,
}

impl OutboxStatus {
    /// Every status, in the order listings and counts show them.
    pub const ALL: [OutboxStatus; 4] = [Self::Pending, Self::Delivered, Self::Dead, Self::Unrouted];

    /// Every status's name, in the order of [`OutboxStatus::ALL`].
    pub const NAMES: [&'static str; 4] = names_of!(Self, 4);

    /// The stored and displayed name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
            Self::Unrouted => "unrouted",
        }
    }

    /// The inverse of [`OutboxStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

impl std::fmt::Display for OutboxStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an outbox row carries: the document's `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OutboxKind {
    /// An order was paid (`payload::OrderChanged`).
    #[serde(rename = "order.paid")]
    OrderPaid,
    /// A payment failed.
    #[serde(rename = "order.failed")]
    OrderFailed,
    /// An order was refunded.
    #[serde(rename = "order.refunded")]
    OrderRefunded,
    /// A payment was disputed.
    #[serde(rename = "order.disputed")]
    OrderDisputed,
    /// A subscription was created, changed or ended (`payload::SubscriptionChanged`).
    #[serde(rename = "subscription.updated")]
    SubscriptionUpdated,
    /// A paid invoice granted an entitlement (`payload::EntitlementChanged`).
    #[serde(rename = "entitlement.granted")]
    EntitlementGranted,
    /// A refund or the end of a subscription revoked one.
    #[serde(rename = "entitlement.revoked")]
    EntitlementRevoked,
    /// An invoice's payment failed.
    #[serde(rename = "invoice.payment_failed")]
    InvoicePaymentFailed,
    /// A forwarded source's delivery (`payload::EventReceived`).
    #[serde(rename = "event.received")]
    EventReceived,
    /// An alert for the alerts sink.
    #[serde(rename = "alert")]
    Alert,
}

impl OutboxKind {
    /// Every kind.
    pub const ALL: [OutboxKind; 10] = [
        Self::OrderPaid,
        Self::OrderFailed,
        Self::OrderRefunded,
        Self::OrderDisputed,
        Self::SubscriptionUpdated,
        Self::EntitlementGranted,
        Self::EntitlementRevoked,
        Self::InvoicePaymentFailed,
        Self::EventReceived,
        Self::Alert,
    ];

    /// Every kind's name, in the order of [`OutboxKind::ALL`].
    pub const NAMES: [&'static str; 10] = names_of!(Self, 10);

    /// The stored and sent name (the routing's `kinds`, the documents' `kind`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::OrderPaid => "order.paid",
            Self::OrderFailed => "order.failed",
            Self::OrderRefunded => "order.refunded",
            Self::OrderDisputed => "order.disputed",
            Self::SubscriptionUpdated => payhook_core::billing::SUBSCRIPTION_UPDATED,
            Self::EntitlementGranted => payhook_core::billing::ENTITLEMENT_GRANTED,
            Self::EntitlementRevoked => payhook_core::billing::ENTITLEMENT_REVOKED,
            Self::InvoicePaymentFailed => payhook_core::billing::INVOICE_PAYMENT_FAILED,
            Self::EventReceived => FORWARD_KIND,
            Self::Alert => ALERT_KIND,
        }
    }

    /// The inverse of [`OutboxKind::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for OutboxKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A side effect in the outbox: one row per (effect, sink).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutboxView {
    /// Stable id, sent as `webhook-id` and `Idempotency-Key` on every attempt.
    pub id: i64,
    /// What it carries.
    pub kind: OutboxKind,
    /// The sink it goes to; `None` when no configured sink takes this kind (status `unrouted`: the effect is
    /// recorded, not sent).
    pub sink: Option<String>,
    /// Where it is in its delivery.
    pub status: OutboxStatus,
    /// The JSON document that is sent.
    pub payload: serde_json::Value,
    /// The order it concerns, if any.
    pub order_id: Option<String>,
    /// The event that caused it, if any.
    pub source: Option<String>,
    /// The event that caused it, if any.
    pub event_id: Option<String>,
    /// Delivery attempts so far.
    pub attempts: u32,
    /// When a pending row is tried next, unix milliseconds.
    pub next_attempt_at_ms: Option<i64>,
    /// The last failure, for rows that were retried or died.
    pub last_error: Option<String>,
    /// The sink's last HTTP status, if it answered.
    pub last_status: Option<u16>,
    /// When the sink acknowledged it, unix milliseconds.
    pub delivered_at_ms: Option<i64>,
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
    pub history: Vec<OrderChange>,
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
    /// The request's headers as stored, every value of a repeated one in arrival order.
    pub headers: ReceivedHeaders,
    /// The exact bytes received.
    pub raw_body: Vec<u8>,
    /// Attempts that did not end the event (deferrals, dead letters, replays), oldest first.
    pub attempt_log: Vec<AttemptEntry>,
    /// The order changes it made.
    pub changes: Vec<OrderChange>,
    /// The subscription and entitlement changes it made.
    pub billing_changes: Vec<BillingChange>,
    /// The outbox rows it caused.
    pub outbox: Vec<OutboxView>,
}

/// One change an event made to a subscription or an entitlement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BillingChange {
    /// What changed.
    pub object: BillingObject,
    /// The subscription's id, or the entitlement's invoice id.
    pub object_id: String,
    /// State before; `None` when the change created the row.
    pub from: Option<String>,
    /// State after.
    pub to: String,
    /// When, unix milliseconds.
    pub at_ms: i64,
}

/// What a billing change changed: stored and sent as `subscription` or `entitlement`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BillingObject {
    /// A subscription's status.
    Subscription,
    /// An invoice's entitlement.
    Entitlement,
}

impl BillingObject {
    /// The stored and displayed name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Subscription => "subscription",
            Self::Entitlement => "entitlement",
        }
    }

    /// The inverse of [`BillingObject::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Subscription, Self::Entitlement].into_iter().find(|o| o.as_str() == s)
    }
}

impl std::fmt::Display for BillingObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One recorded attempt at applying an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptEntry {
    /// Which attempt (1 = on arrival).
    pub attempt: u32,
    /// When, unix milliseconds.
    pub at_ms: i64,
    /// What it came to.
    pub outcome: Outcome,
    /// Why.
    pub detail: Option<String>,
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
    /// Outbox rows by status (`pending`, `delivered`, `dead`, `unrouted`).
    pub outbox_by_status: Vec<(String, u64)>,
    /// Creation time of the oldest pending outbox row, unix milliseconds.
    pub oldest_pending_outbox_ms: Option<i64>,
    /// Reception time of the oldest deferred event, unix milliseconds.
    pub oldest_deferred_event_ms: Option<i64>,
}

impl Stats {
    /// The count under `key` in one of the lists (0 when absent).
    pub fn count(list: &[(String, u64)], key: &str) -> u64 {
        list.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n)
    }
}

/// Which sinks receive what. Part of the store's configuration, so that outbox rows are created per matching sink
/// in the same transaction as the effect, on arrival and on replay alike.
#[derive(Debug, Clone, Default)]
pub struct Routing {
    /// Sinks by outbox kind (`order.paid` → `["shop"]`).
    pub by_kind: std::collections::HashMap<String, Vec<String>>,
    /// Sinks that take every kind (`kinds = ["*"]`).
    pub all_kinds: Vec<String>,
    /// Sinks that receive every verified, deduplicated event of a source (kind `event.received`).
    pub forwards: std::collections::HashMap<String, Vec<String>>,
    /// Sinks' filters (`when`), by sink; a sink without one takes every document of its kinds.
    pub filters: std::collections::HashMap<String, crate::SinkFilter>,
    /// Sources whose orders are implicit (`orders = "implicit"`): a payment for an order that does not exist
    /// creates it from the payment's amount and currency, in the payment's transaction.
    pub implicit_orders: std::collections::BTreeSet<String>,
    /// Where alerts go, if anywhere.
    pub alerts: Option<AlertRouting>,
}

/// Alert routing and storm suppression.
#[derive(Debug, Clone)]
pub struct AlertRouting {
    /// The sink alerts are delivered to.
    pub sink: String,
    /// Alerts with the same key (source + reason) within this window are collapsed into one, with a count.
    pub window_ms: i64,
    /// An alert waits this long before it is sent, gathering the same key's alerts into its count.
    pub gather_ms: i64,
}

/// The outbox kind of an alert.
pub const ALERT_KIND: &str = "alert";
/// The outbox kind of a forwarded event.
pub const FORWARD_KIND: &str = "event.received";

impl Routing {
    /// The order a payment `effect` of `source` creates when it does not exist yet: one for a source whose orders
    /// are implicit and a payment that names its amount, `None` otherwise (the order must be registered).
    pub fn implicit_order(&self, source: &str, effect: &Effect, now_ms: i64) -> Option<NewOrder> {
        match effect {
            Effect::Order { order_id, action: payhook_core::event::OrderAction::Pay, money: Some(money) }
                if self.implicit_orders.contains(source) =>
            {
                Some(NewOrder { id: order_id.clone(), money: money.clone(), now_ms })
            }
            _ => None,
        }
    }

    /// The sinks that take `document` of `kind`, without duplicates, in configuration order: those listening for
    /// its kind whose filter, if any, admits it. The document is parsed only when one of them has a filter.
    pub fn sinks_for(&self, kind: &str, document: &str) -> Vec<&str> {
        let mut sinks: Vec<&str> = Vec::new();
        let listed = self.by_kind.get(kind).into_iter().flatten();
        for sink in listed.chain(self.all_kinds.iter()) {
            if !sinks.contains(&sink.as_str()) {
                sinks.push(sink);
            }
        }
        self.keep_admitted(&mut sinks, document);
        sinks
    }

    /// The sinks `source` forwards `document` (an `event.received`) to, in configuration order: those whose
    /// filter, if any, admits it.
    pub fn forwards_for(&self, source: &str, document: &str) -> Vec<&str> {
        let mut sinks: Vec<&str> = self.forwards.get(source).into_iter().flatten().map(String::as_str).collect();
        self.keep_admitted(&mut sinks, document);
        sinks
    }

    fn keep_admitted(&self, sinks: &mut Vec<&str>, document: &str) {
        if self.filters.is_empty() || !sinks.iter().any(|s| self.filters.contains_key(*s)) {
            return;
        }
        let parsed: serde_json::Value = serde_json::from_str(document).unwrap_or_default();
        sinks.retain(|s| self.filters.get(*s).is_none_or(|f| f.admits(&parsed)));
    }
}

/// An alert to raise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// What is being alerted on; alerts with the same key collapse within the window (`source:reason`).
    pub key: String,
    /// A sentence for a person.
    pub text: String,
    /// Now, unix milliseconds.
    pub now_ms: i64,
}

/// A leased outbox row, ready to be sent.
#[derive(Debug, Clone)]
pub struct OutboxJob {
    /// Row id: the `webhook-id` and `Idempotency-Key`.
    pub id: i64,
    /// The sink.
    pub sink: String,
    /// What it carries.
    pub kind: OutboxKind,
    /// The JSON document to send, as stored.
    pub payload: String,
    /// Attempts before this one.
    pub attempts: u32,
    /// When the row was written, unix milliseconds.
    pub created_at_ms: i64,
    /// The lease owner.
    pub owner: String,
    /// Its ordering key (`order:ID`, `subscription:ID`, `customer:ID`, `event:SOURCE:ID`); `None` for an alert.
    pub key: Option<String>,
    /// The order its sink claimed it under: what its death does to the later rows of its key.
    pub order: KeyOrder,
}

/// How a sink's rows of one ordering key are delivered. Every outbox row but an alert has a key: the order for
/// order documents, the subscription (or, without one, the customer) for billing documents, the event for a
/// forwarded event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyOrder {
    /// In commit order: a row is claimed only when no earlier row of its key for the sink is pending (leased or
    /// not) or dead. A dead row holds its key until it is re-queued.
    #[default]
    Hold,
    /// In commit order, as `Hold`, but a dead row lets the later rows of its key pass.
    Skip,
    /// Any due row, whatever its key's earlier rows are doing.
    Unordered,
}

impl KeyOrder {
    /// The dead-row policy as the configuration writes it (`on_dead`), or `none` for an unordered sink.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyOrder::Hold => "hold",
            KeyOrder::Skip => "skip",
            KeyOrder::Unordered => "none",
        }
    }
}

/// The text of the alert a dead row raises: the row, its sink, its key and what its death does to the key's later
/// rows under the order its sink claimed it with.
pub fn dead_row_alert_text(job: &OutboxJob, error: &str) -> String {
    let key = match (&job.key, job.order) {
        (None, _) | (Some(_), KeyOrder::Unordered) => String::new(),
        (Some(key), KeyOrder::Hold) => {
            format!(" (key {key}: its later rows are held until this row is retried)")
        }
        (Some(key), KeyOrder::Skip) => {
            format!(" (key {key}: on_dead = \"skip\" lets its later rows pass, out of order)")
        }
    };
    format!(
        "payhook: {} row {} for sink {} is dead after {} attempts{key}: {error}",
        job.kind,
        job.id,
        job.sink,
        job.attempts + 1
    )
}

/// A sink's rows held back by per-key order (see [`crate::Store::held_outbox`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Pending rows with an earlier pending or dead row of their key, among those read.
    pub rows: u64,
    /// When the oldest of them was written, unix milliseconds.
    pub oldest_created_at_ms: Option<i64>,
}

/// What a delivery attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dispatched {
    /// The sink acknowledged it (2xx).
    Delivered {
        /// Its status.
        status: u16,
    },
    /// A transient failure: try again at `at_ms`.
    Retry {
        /// Next attempt, unix milliseconds.
        at_ms: i64,
        /// The sink's status, if it answered.
        status: Option<u16>,
        /// What went wrong.
        error: String,
    },
    /// A permanent failure, or the budget is spent: the row is dead (and an alert is raised).
    Dead {
        /// The sink's status, if it answered.
        status: Option<u16>,
        /// What went wrong.
        error: String,
    },
}

/// Which events to list or replay. Every field narrows the selection.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only this source.
    pub source: Option<SourceName>,
    /// Only this status.
    pub status: Option<Outcome>,
    /// Only this provider type.
    pub event_type: Option<String>,
    /// Only events whose reason contains this text.
    pub reason_contains: Option<String>,
    /// Received at or after, unix milliseconds.
    pub since_ms: Option<i64>,
    /// Received before, unix milliseconds.
    pub until_ms: Option<i64>,
    /// Cursor: only rows older than this row id (newest first).
    pub before: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
}

/// One line of an event listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventSummary {
    /// Backend row id, the listing's cursor.
    pub row_id: i64,
    /// Its source.
    pub source: String,
    /// Its id.
    pub event_id: String,
    /// Its provider type, when it parsed.
    pub event_type: Option<String>,
    /// Current state.
    pub status: Outcome,
    /// Why.
    pub reason: Option<String>,
    /// Application attempts so far.
    pub attempts: u32,
    /// For deferred events, the next attempt, unix milliseconds.
    pub next_attempt_at_ms: Option<i64>,
    /// When it arrived, unix milliseconds.
    pub received_at_ms: i64,
}

/// Which outbox rows to list.
#[derive(Debug, Clone, Default)]
pub struct OutboxFilter {
    /// Only this status.
    pub status: Option<OutboxStatus>,
    /// Only this kind.
    pub kind: Option<OutboxKind>,
    /// Only this sink.
    pub sink: Option<String>,
    /// Only this order's rows.
    pub order_id: Option<String>,
    /// Cursor: only rows older than this id (newest first).
    pub before: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
}

/// The result of replaying a dead-lettered event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    /// It went through dedup and the ledger again and ended like this.
    Done(Recorded),
    /// It is not a dead letter (processed, duplicate, …): nothing changed.
    NotDeadLetter(Outcome),
    /// No such event.
    NotFound,
}

/// One change of a subscription or an entitlement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BillingAuditEntry {
    /// The source of the event that made the change.
    pub source: String,
    /// The event that made the change.
    pub event_id: String,
    /// Its provider type.
    pub event_type: String,
    /// State before; `None` when the change created the row.
    pub from: Option<String>,
    /// State after.
    pub to: String,
    /// When, unix milliseconds.
    pub at_ms: i64,
}

/// A subscription as the provider last described it, with its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubscriptionView {
    /// The provider's id.
    pub id: String,
    /// Its customer, when known.
    pub customer_id: Option<String>,
    /// The provider's status.
    pub status: String,
    /// End of the current billing period, unix seconds, when known.
    pub current_period_end: Option<i64>,
    /// Provider time of the event that set this state, unix seconds.
    pub occurred_at: i64,
    /// The source of that event.
    pub source: String,
    /// That event.
    pub event_id: String,
    /// First seen, unix milliseconds.
    pub created_at_ms: i64,
    /// Last change, unix milliseconds.
    pub updated_at_ms: i64,
    /// Every change, oldest first.
    pub history: Vec<BillingAuditEntry>,
    /// The entitlements of its invoices.
    pub entitlements: Vec<EntitlementView>,
}

/// The entitlement an invoice grants, with its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntitlementView {
    /// The invoice: one entitlement per invoice.
    pub invoice_id: String,
    /// Whose it is, when known.
    pub customer_id: Option<String>,
    /// The subscription the invoice bills, if any.
    pub subscription_id: Option<String>,
    /// `granted` or `revoked`.
    pub status: payhook_core::billing::EntitlementStatus,
    /// The amount paid, in minor units, when known.
    pub amount_minor: Option<i64>,
    /// Its currency, when known.
    pub currency: Option<String>,
    /// Why it was revoked or never granted.
    pub reason: Option<String>,
    /// When it was granted, unix milliseconds.
    pub granted_at_ms: Option<i64>,
    /// When it was revoked, unix milliseconds.
    pub revoked_at_ms: Option<i64>,
    /// Every change, oldest first.
    pub history: Vec<BillingAuditEntry>,
}

/// A signature nonce to claim (RFC 9421 HTTP Message Signatures), so that a captured request cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonceClaim {
    /// The key that signed.
    pub keyid: String,
    /// The signer's nonce.
    pub nonce: String,
    /// SHA-256 of the body, hex: the same request delivered again (a provider's retry after a lost answer) is not
    /// a replay.
    pub body_sha256: String,
    /// Unix seconds after which the signature is no longer accepted, so the nonce can be forgotten.
    pub expires_at: i64,
    /// Now, unix seconds: nonces that expired before it are pruned.
    pub now: i64,
}

/// The result of claiming a nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceClaimed {
    /// Not seen before: recorded.
    New,
    /// Seen before with the same body: a redelivery, which the event-id dedup handles.
    Redelivery,
    /// Seen before with another body: a replayed signature, to be refused.
    Replayed,
}

/// One bounded pruning step (see [`crate::Store::prune`]). Only settled events (processed, duplicate, ignored) are
/// touched: dead letters and deferred events keep everything until an operator or the worker is done with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneRequest {
    /// Settled events received before this (unix ms) are deleted with their event-id and business keys: the key
    /// retention. Nothing received at or after it is deleted.
    pub keys_before_ms: i64,
    /// Settled events received in `[payloads_from_ms, payloads_before_ms)` lose their raw body and headers: the
    /// payload retention. The caller passes the previous cut as `payloads_from_ms` so that a step never rescans
    /// what an earlier one cleared.
    pub payloads_from_ms: i64,
    /// See `payloads_from_ms`.
    pub payloads_before_ms: i64,
    /// Orders in a final state (refunded, disputed: no transition leads out of them) whose last change is older
    /// than this (unix ms) are deleted with their history and outbox rows: the order retention. An order with an
    /// outbox row still pending or dead, or with an event deferred on it, is kept. 0 prunes no order.
    pub orders_before_ms: i64,
    /// At most this many events of each kind per step, so a step is a short transaction. A day partition dropped
    /// whole (PostgreSQL) goes in one step whatever its size; its keys are then deleted this many at a time.
    pub limit: u32,
    /// When pruning happens, unix ms (recorded on cleared rows).
    pub now_ms: i64,
}

/// What one pruning step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Events deleted, with their event-id keys (on PostgreSQL, the events of a detached day partition, whose keys
    /// later steps delete).
    pub events_deleted: u64,
    /// Business keys deleted with them.
    pub business_keys_deleted: u64,
    /// Events whose raw body and headers were cleared.
    pub payloads_cleared: u64,
    /// Orders deleted with their history.
    pub orders_deleted: u64,
    /// Outbox rows deleted with their orders.
    pub outbox_deleted: u64,
    /// Outbox rows the order step examined: it walks the outbox in id order from its cursor and looks at the rows
    /// that record a final transition (`order.refunded`, `order.disputed`); 0 from a backend that does not count.
    pub outbox_rows_visited: u64,
    /// Inbox rows the step examined, pruned or passed over (dead letters); 0 from a backend that does not count
    /// them. A step resuming where the previous one stopped visits about as many rows as it prunes.
    pub rows_visited: u64,
    /// Free pages the step returned to the file system (SQLite with `auto_vacuum = INCREMENTAL`).
    pub pages_released: u64,
    /// Free pages still in the file after the step, which later steps release.
    pub pages_free: u64,
    /// Day partitions of the inbox detached past the key retention, their rows counted in `events_deleted`
    /// (PostgreSQL).
    pub partitions_detached: u64,
    /// Detached day partitions dropped once their keys were deleted (PostgreSQL).
    pub partitions_dropped: u64,
    /// Partition creations or detaches given up because the lock on the inbox was not had in time; the next step
    /// tries again (PostgreSQL).
    pub partition_lock_timeouts: u64,
}

impl Pruned {
    /// True when the step hit its limit somewhere, released pages and left some, or detached or dropped a
    /// partition: there may be more to do.
    pub fn more(&self, limit: u32) -> bool {
        self.events_deleted >= u64::from(limit)
            || self.payloads_cleared >= u64::from(limit)
            || self.rows_visited >= u64::from(limit)
            || self.orders_deleted >= u64::from(limit)
            || self.outbox_rows_visited >= u64::from(limit)
            || (self.pages_released > 0 && self.pages_free > 0)
            || self.partitions_detached > 0
            || self.partitions_dropped > 0
    }

    /// Adds `step` to these totals (`pages_free` is a level, not a count: the latest step's is kept).
    pub fn add(&mut self, step: &Pruned) {
        self.events_deleted += step.events_deleted;
        self.business_keys_deleted += step.business_keys_deleted;
        self.payloads_cleared += step.payloads_cleared;
        self.orders_deleted += step.orders_deleted;
        self.outbox_deleted += step.outbox_deleted;
        self.outbox_rows_visited += step.outbox_rows_visited;
        self.rows_visited += step.rows_visited;
        self.pages_released += step.pages_released;
        self.pages_free = step.pages_free;
        self.partitions_detached += step.partitions_detached;
        self.partitions_dropped += step.partitions_dropped;
        self.partition_lock_timeouts += step.partition_lock_timeouts;
    }
}
