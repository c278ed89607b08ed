//! The write operations: what each call sends to the SQL functions of the schema, and the decisions taken in Rust
//! with payhook-core's rules (why a guard matched nothing, when to retry).
//!
//! Why one file of about 1,100 lines: it holds every write operation's SQL call and the Rust decisions around
//! it, which share the batch pipeline and the retry-on-conflict helpers; splitting it by concern (SQL constants,
//! array building, connection retry, worker, replay) is the next step of the code-structure work.
//!
//! Invariant: dedup is decided by `INSERT … ON CONFLICT DO NOTHING` on a unique key, never by a SELECT before an
//! INSERT; every state change is a guarded `UPDATE … WHERE status IN (legal predecessors)` (in `payhook_apply`).
//! The ledger's rules live in `payhook_core::ledger` only: SQL applies a plan and reports a miss, Rust explains it.
//!
//! Routing (which sinks get an effect's outbox rows, which sources are forwarded, where alerts go) is this
//! instance's configuration: it travels with each call into the SQL functions, in the effect's transaction.

use crate::billing;
use crate::error::PgError;
use crate::pipeline::send;
use crate::pool;
use crate::pool::{Object, Pool};
use payhook_core::event::{Currency, Effect, Event, EventId, Money, SourceName};
use payhook_core::ledger::{self, OrderSnapshot, OrderStatus, Plan, Unapplied};
use payhook_core::retry::{Next, RetryPolicy};
use payhook_store::{
    ALERT_KIND, Claim, Claimed, Delivery, FORWARD_KIND, NewOrder, Outcome, Parsed, Recorded, Registered, Replayed,
    Retried, Routing, StoreError,
};
use postgres_types::ToSql;
use tokio_postgres::Row;

pub(crate) const INGEST_SQL: &str =
    "SELECT outcome, detail, row_id, order_status, order_amount, order_currency FROM payhook_ingest_batch($1, $2)";
pub(crate) const REGISTER_SQL: &str =
    "SELECT outcome, detail, stored_amount, stored_currency FROM payhook_register_batch($1, $2, $3, $4, $5)";
pub(crate) const SETTLE_SQL: &str = "SELECT payhook_settle_batch($1, $2, $3, $4, $5, $6, $7, $8)";
const STORED_SQL: &str = "SELECT event_type, occurred_at, business_key, effect FROM inbox
     WHERE source = $1 AND event_id = $2 AND id = $3";
const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock($1)";
const LEASED_SQL: &str = "SELECT 1 FROM inbox
     WHERE source = $1 AND event_id = $2 AND id = $3 AND status = 'deferred' AND lease_owner = $4 FOR UPDATE";
const REAPPLY_SQL: &str = "SELECT outcome, detail, order_status, order_amount, order_currency
     FROM payhook_reapply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";
/// Leases due deferred rows (`FOR UPDATE SKIP LOCKED`), each updated by its bucket and id: a join of the
/// partitioned inbox with the chosen rows would be planned over every partition.
const CLAIM_SQL: &str = "SELECT id, source, event_id, attempts, next_attempt_at FROM payhook_claim_due($1, $2, $3, $4)";
const REPLAY_ROW_SQL: &str = "SELECT id, status, attempts FROM inbox WHERE source = $1 AND event_id = $2 FOR UPDATE";
const REPLAY_REPARSED_SQL: &str = "UPDATE inbox SET event_type = $3, occurred_at = $4, business_key = $5, effect = $6
     WHERE source = $1 AND event_id = $2";
/// Claims the replayed event's own key, then copies the derived row under it into the held partition (it keeps
/// the original `received_at`, so it is pruned row by row like the other rows held there).
const REPLAY_RECORD_SQL: &str = "WITH claimed AS (
         INSERT INTO inbox_keys (source, event_id) VALUES ($1, $3) ON CONFLICT DO NOTHING RETURNING 1)
     INSERT INTO inbox (source, event_id, event_type, occurred_at, business_key, effect,
                        status, attempts, received_at, updated_at, verification, headers, body, bucket)
     SELECT source, $3, $4, $5, $6, $7, 'processed', $8, received_at, $9, verification, headers, body, 0
     FROM inbox WHERE source = $1 AND event_id = $2 AND EXISTS (SELECT 1 FROM claimed)
     RETURNING id";

/// The status that asks `payhook_ingest_batch` to record a billing delivery without applying it (its outcome).
const BILLING: &str = "billing";
const DELETE_INBOX_SQL: &str = "DELETE FROM inbox WHERE source = $1 AND event_id = $2 AND id = $3";

/// What the write operations need besides their arguments: the retry policy of deferred events and the routing.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) retry: RetryPolicy,
    pub(crate) routing: Routing,
}

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

/// The sinks that receive `kind`, in configuration order; `[""]` (recorded once, unrouted) when none does.
pub(crate) fn sinks_of<'a>(routing: &'a Routing, kind: &str) -> Vec<&'a str> {
    let mut sinks = routing.sinks_for(kind);
    if sinks.is_empty() {
        sinks.push("");
    }
    sinks
}

/// A planned order change, in the shape `payhook_apply` takes it.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) plan: Plan,
    lock: i64,
    /// The guard's one or two states; the second repeats the first when there is one.
    from: (&'static str, &'static str),
}

impl Change {
    fn new(plan: Plan) -> Self {
        let first = plan.from.first().map_or("", |s| s.as_str());
        let from = (first, plan.from.get(1).map_or(first, |s| s.as_str()));
        Self { lock: order_lock(plan.order_id.as_str()), from, plan }
    }

    fn amount(&self) -> Option<i64> {
        self.plan.expect_money.as_ref().map(|m| m.amount_minor)
    }

    fn currency(&self) -> Option<&str> {
        self.plan.expect_money.as_ref().map(|m| m.currency.as_str())
    }
}

/// An `event.received` row per forwarding sink of a source, drafted by the caller's task; the outcome is added
/// once the batch knows it.
#[derive(Debug)]
struct ForwardDraft {
    sinks: Vec<String>,
    /// payhook's normalized JSON of the event, without `outcome` and `detail`.
    payload: serde_json::Map<String, serde_json::Value>,
}

/// An ingest, prepared from its [`Delivery`] by the caller's task, so that serialization stays off the batcher.
#[derive(Debug)]
pub(crate) struct IngestCall {
    source: String,
    event_id: String,
    event_type: Option<String>,
    occurred_at: Option<i64>,
    business_key: Option<String>,
    effect: Option<String>,
    status: &'static str,
    reason: Option<String>,
    received_at_ms: i64,
    verification: String,
    headers: String,
    body: Vec<u8>,
    change: Option<Change>,
    /// A subscription or invoice event: applied after the batch function recorded it (see `crate::billing`).
    billing: Option<Box<Event>>,
    forward: Option<Box<ForwardDraft>>,
}

impl IngestCall {
    /// Mirrors the SQLite backend: an ignored type is recorded `ignored`, an unparseable body `dead_lettered`
    /// with its reason, an order event `processed` unless applying its effect says otherwise; a billing event is
    /// recorded by the batch function and applied after it, in the same transaction.
    pub(crate) fn new(d: Delivery, routing: &Routing) -> Result<Self, StoreError> {
        let forward = routing.forwards.get(d.source.as_str()).filter(|sinks| !sinks.is_empty()).map(|sinks| {
            let event = match &d.parsed {
                Parsed::Event(e) => Some(e),
                Parsed::Unparseable { .. } => None,
            };
            let payload = serde_json::json!({
                "kind": FORWARD_KIND,
                "source": d.source.as_str(),
                "event_id": d.parsed.event_id().as_str(),
                "event_type": event.map(|e| e.event_type.as_str()),
                "occurred_at": event.map(|e| e.occurred_at),
                "business_key": event.map(|e| e.business_key.as_str()),
                "effect": event.map(|e| &e.effect),
                "received_at_ms": d.received_at_ms,
            });
            let serde_json::Value::Object(payload) = payload else { unreachable!("a JSON object literal") };
            Box::new(ForwardDraft { sinks: sinks.clone(), payload })
        });
        let mut call = Self {
            source: d.source.as_str().to_owned(),
            event_id: d.parsed.event_id().as_str().to_owned(),
            event_type: None,
            occurred_at: None,
            business_key: None,
            effect: None,
            status: Outcome::DeadLettered.as_str(),
            reason: None,
            received_at_ms: d.received_at_ms,
            verification: d.verification,
            headers: d.headers.to_json(),
            body: d.raw_body,
            change: None,
            billing: None,
            forward,
        };
        match d.parsed {
            Parsed::Unparseable { reason, .. } => call.reason = Some(reason),
            Parsed::Event(event) => {
                call.status = match event.effect {
                    Effect::Ignored => Outcome::Ignored.as_str(),
                    Effect::Order { .. } => Outcome::Processed.as_str(),
                    Effect::Subscription(_) | Effect::Invoice(_) => BILLING,
                };
                if event.effect != Effect::Ignored {
                    let json = serde_json::to_string(&event.effect)
                        .map_err(|e| StoreError::corrupt("an effect that does not encode", e))?;
                    call.effect = Some(json);
                }
                call.change = ledger::plan(&event.effect).map(Change::new);
                call.event_type = Some(event.event_type.clone());
                call.occurred_at = Some(event.occurred_at);
                call.business_key = Some(event.business_key.clone());
                if billing::is_billing(&event.effect) {
                    call.billing = Some(Box::new(event));
                }
            }
        }
        Ok(call)
    }

    /// The key a batch sorts its deliveries by, so that concurrent batches take their locks in one global order:
    /// deliveries without an order first (they lock only their inbox key), then by order lock (taken before any
    /// other key of that order), then by order and event.
    pub(crate) fn lock_key(&self) -> (bool, i64, &str, &str, &str) {
        match &self.change {
            Some(c) => (true, c.lock, c.plan.order_id.as_str(), &self.source, &self.event_id),
            None => (false, 0, "", &self.source, &self.event_id),
        }
    }

    /// What `payhook_ingest_batch` answered for this delivery, and the settlement it still needs (a guard miss).
    pub(crate) fn landed(&self, row: &Row, policy: &RetryPolicy) -> Result<Landed, StoreError> {
        let outcome: String = row.try_get(0).map_err(|e| StoreError::corrupt("payhook_ingest_batch outcome", e))?;
        let detail: Option<String> =
            row.try_get(1).map_err(|e| StoreError::corrupt("payhook_ingest_batch detail", e))?;
        let row_id: Option<i64> = row.try_get(2).map_err(|e| StoreError::corrupt("payhook_ingest_batch row id", e))?;
        match outcome.as_str() {
            "failed" => Ok(Landed::Failed(detail.unwrap_or_default())),
            "billing" => match (&self.billing, row_id) {
                (Some(_), Some(row_id)) => Ok(Landed::Billing { row_id }),
                _ => Err(StoreError::inconsistent(
                    "payhook_ingest_batch: a billing outcome without a billing event or a row",
                )),
            },
            "unapplied" => {
                let change = self
                    .change
                    .as_ref()
                    .ok_or_else(|| StoreError::inconsistent("payhook_ingest_batch: a miss without a plan"))?;
                let row_id =
                    row_id.ok_or_else(|| StoreError::inconsistent("payhook_ingest_batch: a miss without a row"))?;
                let snapshot = snapshot(row, 3)?;
                let target = Settle::new(&self.source, &self.event_id, row_id, 1, self.received_at_ms);
                let (recorded, settle) = decide(&change.plan, snapshot.as_ref(), target, policy);
                Ok(Landed::Settle(recorded, settle))
            }
            other => match Outcome::parse(other) {
                Some(outcome) => {
                    Ok(Landed::Done { recorded: Recorded { outcome, detail }, inserted: row_id.is_some() })
                }
                None => Err(StoreError::inconsistent(format!("payhook_ingest_batch outcome {other:?}"))),
            },
        }
    }

    /// Applies a billing delivery that landed as [`Landed::Billing`] (row `row_id`), in a savepoint of its own; the
    /// caller holds its billing locks (see `crate::billing`). A failure other than a deadlock, a serialization
    /// failure or a broken connection rolls back the savepoint and deletes the delivery's inbox row, so that
    /// nothing of it is stored, as when the batch function's own savepoint fails; its batch-mates go on.
    pub(crate) async fn apply_billing(&self, client: &Object, ctx: &Ctx, row_id: i64) -> Result<Landed, Failure> {
        let event =
            self.billing.as_deref().ok_or_else(|| StoreError::inconsistent("billing delivery: no billing event"))?;
        match billing::apply(client, ctx, &self.source, event, self.received_at_ms, true).await {
            Ok(raw) if raw.outcome == Outcome::Processed && raw.detail.is_none() => {
                // The row was recorded as processed: the common path costs no second write.
                Ok(Landed::Done { recorded: raw, inserted: true })
            }
            Ok(raw) => {
                let target = Settle::new(&self.source, &self.event_id, row_id, 1, self.received_at_ms);
                let (recorded, settle) = settle_billing(raw, target, &ctx.retry);
                Ok(Landed::Settle(recorded, settle))
            }
            Err(Failure::Pg(e)) if !e.is_conflict() && !e.breaks_connection() => {
                let detail = match &e {
                    PgError::Db(db) => match db.as_db_error() {
                        Some(d) => format!("{}: {}", d.code().code(), d.message()),
                        None => db.to_string(),
                    },
                    other => other.to_string(),
                };
                client.batch_execute("ROLLBACK TO SAVEPOINT billing; RELEASE SAVEPOINT billing").await?;
                let delete = client.prepare_cached(DELETE_INBOX_SQL).await?;
                client.execute(&delete, &[&self.source, &self.event_id, &row_id]).await?;
                Ok(Landed::Failed(detail))
            }
            Err(e) => Err(e),
        }
    }

    /// The billing locks of this delivery (none for anything but a billing event).
    pub(crate) fn billing_locks(&self) -> Vec<i64> {
        self.billing.as_ref().map(|e| billing::locks(&e.effect)).unwrap_or_default()
    }

    /// What a delivery that landed still writes in its batch's second statement: its forwarded copies (a new
    /// delivery of a forwarded source) and the alert of a dead letter.
    pub(crate) fn follow_ups(&self, landed: &Landed, routing: &Routing, out: &mut FollowUps) {
        let recorded = match landed {
            Landed::Done { recorded, inserted: true } | Landed::Settle(recorded, _) => recorded,
            Landed::Done { inserted: false, .. } | Landed::Failed(_) | Landed::Billing { .. } => return,
        };
        if let Some(draft) = &self.forward {
            let mut payload = draft.payload.clone();
            payload.insert("outcome".into(), recorded.outcome.as_str().into());
            payload.insert("detail".into(), recorded.detail.clone().into());
            let payload = serde_json::Value::Object(payload).to_string();
            for sink in &draft.sinks {
                out.forwards.push(Forward {
                    sink: sink.clone(),
                    source: self.source.clone(),
                    event_id: self.event_id.clone(),
                    payload: payload.clone(),
                    now_ms: self.received_at_ms,
                });
            }
        }
        out.dead_letter(routing, &self.source, &self.event_id, recorded, self.received_at_ms);
    }
}

/// One element of `payhook_ingest_batch`'s array (the composite type `payhook_delivery`, migration 0010): the
/// fields are matched by name.
#[derive(Debug, ToSql)]
#[postgres(name = "payhook_delivery")]
struct DeliveryRow<'a> {
    source: &'a str,
    event_id: &'a str,
    event_type: Option<&'a str>,
    occurred_at: Option<i64>,
    business_key: Option<&'a str>,
    effect: Option<&'a str>,
    status: &'a str,
    reason: Option<&'a str>,
    received_at: i64,
    verification: &'a str,
    headers: &'a str,
    body: &'a [u8],
    lock: Option<i64>,
    order_id: Option<&'a str>,
    from1: Option<&'a str>,
    from2: Option<&'a str>,
    to_status: Option<&'a str>,
    amount: Option<i64>,
    currency: Option<&'a str>,
    outbox_kind: Option<&'a str>,
    route_lo: Option<i32>,
    route_hi: Option<i32>,
}

/// The arguments of `payhook_ingest_batch`: one row per delivery, and the batch's routing table (the sinks of
/// each outbox kind in the batch, one slice after another).
#[derive(Debug, Default)]
pub(crate) struct IngestColumns<'a> {
    deliveries: Vec<DeliveryRow<'a>>,
    route_sinks: Vec<&'a str>,
    /// Which slice of `route_sinks` each kind has (1-based, inclusive, as SQL arrays are).
    routes: Vec<(&'static str, i32, i32)>,
}

impl<'a> IngestColumns<'a> {
    pub(crate) fn push(&mut self, call: &'a IngestCall, routing: &'a Routing) {
        let c = call.change.as_ref();
        let route = c.map(|c| self.route(routing, c.plan.outbox_kind));
        self.deliveries.push(DeliveryRow {
            source: &call.source,
            event_id: &call.event_id,
            event_type: call.event_type.as_deref(),
            occurred_at: call.occurred_at,
            business_key: call.business_key.as_deref(),
            effect: call.effect.as_deref(),
            status: call.status,
            reason: call.reason.as_deref(),
            received_at: call.received_at_ms,
            verification: &call.verification,
            headers: &call.headers,
            body: &call.body,
            lock: c.map(|c| c.lock),
            order_id: c.map(|c| c.plan.order_id.as_str()),
            from1: c.map(|c| c.from.0),
            from2: c.map(|c| c.from.1),
            to_status: c.map(|c| c.plan.to.as_str()),
            amount: c.and_then(Change::amount),
            currency: c.and_then(Change::currency),
            outbox_kind: c.map(|c| c.plan.outbox_kind),
            route_lo: route.map(|r| r.0),
            route_hi: route.map(|r| r.1),
        });
    }

    /// The slice of `route_sinks` that holds the sinks of `kind`, added on first use.
    fn route(&mut self, routing: &'a Routing, kind: &'static str) -> (i32, i32) {
        if let Some(&(_, lo, hi)) = self.routes.iter().find(|(k, ..)| *k == kind) {
            return (lo, hi);
        }
        let lo = self.route_sinks.len() + 1;
        self.route_sinks.extend(sinks_of(routing, kind));
        let (lo, hi) =
            (i32::try_from(lo).unwrap_or(i32::MAX), i32::try_from(self.route_sinks.len()).unwrap_or(i32::MAX));
        self.routes.push((kind, lo, hi));
        (lo, hi)
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 2] {
        [&self.deliveries, &self.route_sinks]
    }
}

/// The arguments of `payhook_register_batch`.
#[derive(Debug, Default)]
pub(crate) struct RegisterColumns<'a> {
    lock: Vec<i64>,
    id: Vec<&'a str>,
    amount: Vec<i64>,
    currency: Vec<&'a str>,
    now: Vec<i64>,
}

impl<'a> RegisterColumns<'a> {
    pub(crate) fn push(&mut self, order: &'a NewOrder) {
        self.lock.push(order_lock(order.id.as_str()));
        self.id.push(order.id.as_str());
        self.amount.push(order.money.amount_minor);
        self.currency.push(order.money.currency.as_str());
        self.now.push(order.now_ms);
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [&self.lock, &self.id, &self.amount, &self.currency, &self.now]
    }
}

/// The sort key of a registration: its order's lock, as for ingests.
pub(crate) fn register_lock_key(order: &NewOrder) -> (bool, i64, &str, &str, &str) {
    (true, order_lock(order.id.as_str()), order.id.as_str(), "", "")
}

/// The first answer to an ingest.
#[derive(Debug)]
pub(crate) enum Landed {
    /// Final as it is; `inserted` is false for a delivery whose event id was seen before (nothing was written).
    Done { recorded: Recorded, inserted: bool },
    /// Final once the settlement is written in the same transaction.
    Settle(Recorded, Settle),
    /// The delivery's savepoint rolled back; nothing of it is stored.
    Failed(String),
    /// A billing event recorded as row `row_id` and not applied yet: [`IngestCall::apply_billing`] turns it into
    /// one of the others before the batch settles anything.
    Billing { row_id: i64 },
}

/// The final state of an attempt that was not simply applied: one element of `payhook_settle_batch`.
#[derive(Debug)]
pub(crate) struct Settle {
    source: String,
    event_id: String,
    row_id: i64,
    status: &'static str,
    reason: Option<String>,
    attempts: i32,
    next_attempt_at: Option<i64>,
    waiting_order: Option<String>,
    now_ms: i64,
    release_key: bool,
}

impl Settle {
    /// Settles row `row_id` as processed after `attempts` attempts, keeping its business key; [`decide`] and the
    /// retry path adjust it.
    fn new(source: &str, event_id: &str, row_id: i64, attempts: u32, now_ms: i64) -> Self {
        Self {
            source: source.to_owned(),
            event_id: event_id.to_owned(),
            row_id,
            status: Outcome::Processed.as_str(),
            reason: None,
            attempts: i32::try_from(attempts).unwrap_or(i32::MAX),
            next_attempt_at: None,
            waiting_order: None,
            now_ms,
            release_key: false,
        }
    }

    /// Settles row `row_id` as `recorded` says, keeping its business key.
    fn recorded(source: &str, event_id: &str, row_id: i64, attempts: u32, now_ms: i64, recorded: &Recorded) -> Self {
        Self {
            status: recorded.outcome.as_str(),
            reason: recorded.detail.clone(),
            ..Self::new(source, event_id, row_id, attempts, now_ms)
        }
    }
}

/// An `event.received` row for a forwarding sink.
#[derive(Debug)]
pub(crate) struct Forward {
    sink: String,
    source: String,
    event_id: String,
    payload: String,
    now_ms: i64,
}

/// An alert raised by a write, in the same transaction.
#[derive(Debug)]
pub(crate) struct AlertCall {
    key: String,
    text: String,
    now_ms: i64,
}

/// What a transaction writes after its deliveries' own work: forwarded events and alerts.
#[derive(Debug, Default)]
pub(crate) struct FollowUps {
    forwards: Vec<Forward>,
    alerts: Vec<AlertCall>,
}

impl FollowUps {
    /// A dead-lettered event raises an alert, collapsed per source (when alerts are on).
    pub(crate) fn dead_letter(&mut self, routing: &Routing, source: &str, event_id: &str, r: &Recorded, now_ms: i64) {
        if r.outcome != Outcome::DeadLettered || routing.alerts.is_none() {
            return;
        }
        let text = format!(
            "payhook: event {event_id} from source {source} was dead-lettered: {}",
            r.detail.as_deref().unwrap_or("no reason recorded")
        );
        self.alerts.push(AlertCall { key: format!("{source}:dead_letter"), text, now_ms });
    }
}

/// One element of `payhook_settle_batch`'s settlements (composite `payhook_settlement`, migration 0010).
#[derive(Debug, ToSql)]
#[postgres(name = "payhook_settlement")]
struct SettlementRow<'a> {
    source: &'a str,
    event_id: &'a str,
    row_id: i64,
    status: &'a str,
    reason: Option<&'a str>,
    attempts: i32,
    next_attempt_at: Option<i64>,
    waiting_order: Option<&'a str>,
    now: i64,
    release_key: bool,
}

/// One `event.received` row of `payhook_settle_batch` (composite `payhook_forward`).
#[derive(Debug, ToSql)]
#[postgres(name = "payhook_forward")]
struct ForwardRow<'a> {
    sink: &'a str,
    source: &'a str,
    event_id: &'a str,
    payload: &'a str,
    now: i64,
}

/// One alert of `payhook_settle_batch` (composite `payhook_alert`).
#[derive(Debug, ToSql)]
#[postgres(name = "payhook_alert")]
struct AlertRow<'a> {
    key: &'a str,
    text: &'a str,
    now: i64,
}

/// The arguments of `payhook_settle_batch`: settlements, forwarded events, and alerts sorted by key (the locking
/// protocol: alert windows are taken last, in key order).
#[derive(Debug, Default)]
pub(crate) struct SettleColumns<'a> {
    settlements: Vec<SettlementRow<'a>>,
    forwards: Vec<ForwardRow<'a>>,
    alert_sink: Option<&'a str>,
    alert_window: Option<i64>,
    alert_gather: Option<i64>,
    alerts: Vec<AlertRow<'a>>,
}

impl<'a> SettleColumns<'a> {
    pub(crate) fn push(&mut self, s: &'a Settle) {
        self.settlements.push(SettlementRow {
            source: &s.source,
            event_id: &s.event_id,
            row_id: s.row_id,
            status: s.status,
            reason: s.reason.as_deref(),
            attempts: s.attempts,
            next_attempt_at: s.next_attempt_at,
            waiting_order: s.waiting_order.as_deref(),
            now: s.now_ms,
            release_key: s.release_key,
        });
    }

    /// Adds the forwarded events and the alerts (sorted by key here; `follow` is sorted in place).
    pub(crate) fn follow(&mut self, follow: &'a mut FollowUps, routing: &'a Routing) {
        follow.alerts.sort_by(|a, b| a.key.cmp(&b.key));
        let follow: &'a FollowUps = follow;
        for f in &follow.forwards {
            self.forwards.push(ForwardRow {
                sink: &f.sink,
                source: &f.source,
                event_id: &f.event_id,
                payload: &f.payload,
                now: f.now_ms,
            });
        }
        if let Some(a) = routing.alerts.as_ref().filter(|_| !follow.alerts.is_empty()) {
            (self.alert_sink, self.alert_window, self.alert_gather) =
                (Some(a.sink.as_str()), Some(a.window_ms), Some(a.gather_ms));
            for alert in &follow.alerts {
                self.alerts.push(AlertRow { key: &alert.key, text: &alert.text, now: alert.now_ms });
            }
        }
    }

    /// Nothing to write: the second statement can be left out.
    pub(crate) fn is_empty(&self) -> bool {
        self.settlements.is_empty() && self.forwards.is_empty() && self.alerts.is_empty()
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 8] {
        [
            &self.settlements,
            &FORWARD_KIND,
            &self.forwards,
            &ALERT_KIND,
            &self.alert_sink,
            &self.alert_window,
            &self.alert_gather,
            &self.alerts,
        ]
    }
}

/// The order as the SQL functions read it (columns `at`, `at + 1`, `at + 2`), `None` if missing.
fn snapshot(row: &Row, at: usize) -> Result<Option<OrderSnapshot>, StoreError> {
    let status: Option<String> = row.try_get(at).map_err(|e| StoreError::corrupt("order status", e))?;
    let Some(status) = status else { return Ok(None) };
    let amount: i64 = row.try_get(at + 1).map_err(|e| StoreError::corrupt("order amount", e))?;
    let currency: String = row.try_get(at + 2).map_err(|e| StoreError::corrupt("order currency", e))?;
    Ok(Some(OrderSnapshot { status: parse_status(&status)?, money: money(amount, &currency)? }))
}

pub(crate) fn parse_status(s: &str) -> Result<OrderStatus, StoreError> {
    OrderStatus::parse(s).ok_or_else(|| StoreError::inconsistent(format!("stored order status {s:?}")))
}

pub(crate) fn money(amount: i64, currency: &str) -> Result<Money, StoreError> {
    let currency = Currency::parse(currency).map_err(|e| StoreError::corrupt("stored currency", e))?;
    Money::new(amount, currency).map_err(|e| StoreError::corrupt("stored amount", e))
}

/// Why a plan's guard matched nothing, per payhook-core, and the settlement that follows: a no-op keeps the
/// business key (the fact is handled); a deferral (or, past the retry budget, a dead letter) and a rejection
/// release it for an event that can use it. `settle` says which row, after how many attempts, and when.
fn decide(plan: &Plan, order: Option<&OrderSnapshot>, mut settle: Settle, policy: &RetryPolicy) -> (Recorded, Settle) {
    let attempts = u32::try_from(settle.attempts).unwrap_or(u32::MAX);
    settle.release_key = true;
    let recorded = match ledger::explain(plan, order) {
        Unapplied::NoOp(why) => {
            settle.release_key = false;
            Recorded { outcome: Outcome::Processed, detail: Some(why) }
        }
        Unapplied::Reject(why) => Recorded { outcome: Outcome::DeadLettered, detail: Some(why) },
        Unapplied::Defer(why) => match policy.next(attempts, settle.now_ms, fastrand::f64()) {
            Next::RetryAt(at) => {
                settle.next_attempt_at = Some(at);
                settle.waiting_order = Some(plan.order_id.as_str().to_owned());
                Recorded { outcome: Outcome::Deferred, detail: Some(why) }
            }
            Next::DeadLetter => Recorded {
                outcome: Outcome::DeadLettered,
                detail: Some(format!("retry budget spent after {attempts} attempts: {why}")),
            },
        },
    };
    settle.status = recorded.outcome.as_str();
    settle.reason.clone_from(&recorded.detail);
    (recorded, settle)
}

/// The settlement of a billing event's attempt from what applying it came to (see `crate::billing::apply`): a
/// no-op keeps its business key, a duplicate has none of its own; a deferral releases the key and is retried per
/// `policy`, or dead-lettered once the budget is spent.
pub(crate) fn settle_billing(raw: Recorded, mut settle: Settle, policy: &RetryPolicy) -> (Recorded, Settle) {
    let attempts = u32::try_from(settle.attempts).unwrap_or(u32::MAX);
    let recorded = if raw.outcome == Outcome::Deferred {
        settle.release_key = true;
        let why = raw.detail.unwrap_or_else(|| "deferred".to_owned());
        match policy.next(attempts, settle.now_ms, fastrand::f64()) {
            Next::RetryAt(at) => {
                settle.next_attempt_at = Some(at);
                Recorded { outcome: Outcome::Deferred, detail: Some(why) }
            }
            Next::DeadLetter => Recorded {
                outcome: Outcome::DeadLettered,
                detail: Some(format!("retry budget spent after {attempts} attempts: {why}")),
            },
        }
    } else {
        raw
    };
    settle.status = recorded.outcome.as_str();
    settle.reason.clone_from(&recorded.detail);
    (recorded, settle)
}

/// What `payhook_register_batch` answered for one order: its registration, or why its savepoint failed.
pub(crate) fn registered(order: &NewOrder, row: &Row) -> Result<Result<Registered, String>, StoreError> {
    let outcome: String = row.try_get(0).map_err(|e| StoreError::corrupt("payhook_register_batch outcome", e))?;
    match outcome.as_str() {
        "created" => Ok(Ok(Registered::Created)),
        "exists" => {
            let amount: i64 = row.try_get(2).map_err(|e| StoreError::corrupt("order amount", e))?;
            let currency: String = row.try_get(3).map_err(|e| StoreError::corrupt("order currency", e))?;
            let existing = money(amount, &currency)?;
            Ok(Ok(if existing == order.money { Registered::AlreadyExists } else { Registered::Conflict { existing } }))
        }
        "failed" => Ok(Err(row.try_get::<_, Option<String>>(1).ok().flatten().unwrap_or_default())),
        other => Err(StoreError::inconsistent(format!("payhook_register_batch outcome {other:?}"))),
    }
}

/// Why an operation on one connection failed: the database (the connection may be in doubt) or a stored value.
#[derive(Debug)]
pub(crate) enum Failure {
    Pg(PgError),
    Corrupt(StoreError),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(PgError::Db(e))
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Corrupt(e)
    }
}

/// Runs `op` on a pooled connection; after a failure, the connection is rolled back or discarded.
pub(crate) async fn on_connection<T, F>(pool: &Pool, op: F) -> Result<T, StoreError>
where
    F: AsyncFnOnce(&Object) -> Result<T, Failure>,
{
    let client = pool::get(pool).await?;
    match op(&client).await {
        Ok(value) => Ok(value),
        Err(Failure::Pg(e)) => {
            pool::release_after(client, e.breaks_connection()).await;
            Err(e.into())
        }
        Err(Failure::Corrupt(e)) => {
            pool::release_after(client, false).await;
            Err(e)
        }
    }
}

/// Runs the transaction `op()` makes on a pooled connection, again (up to three times in all) when the server
/// rolled it back for a deadlock or a serialization failure; any other failure is returned as it is.
///
/// `op` makes a fresh `AsyncFnOnce` per attempt: an `AsyncFn` called by reference would be simpler, but its future
/// cannot be shown to be `Send` (a known limitation of async closures), and the store's futures must be.
pub(crate) async fn rerun_on_conflict<T, F, G>(pool: &Pool, what: &str, op: F) -> Result<T, StoreError>
where
    F: Fn() -> G,
    G: AsyncFnOnce(&Object) -> Result<T, Failure>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        let client = pool::get(pool).await?;
        let error = match op()(&client).await {
            Ok(value) => return Ok(value),
            Err(Failure::Corrupt(e)) => {
                pool::release_after(client, false).await;
                return Err(e);
            }
            Err(Failure::Pg(e)) => {
                pool::release_after(client, e.breaks_connection()).await;
                e
            }
        };
        if attempt >= 3 || !error.is_conflict() {
            return Err(error.into());
        }
        tracing::debug!(what, attempt, "a transaction hit a deadlock; running it again");
    }
}

/// Leases due deferred rows, skipping rows another instance is claiming right now (see
/// [`payhook_store::Store::claim_due`]).
pub(crate) async fn claim_due(pool: &Pool, claim: &Claim) -> Result<Vec<Claimed>, StoreError> {
    on_connection(pool, async |client: &Object| {
        let stmt = client.prepare_cached(CLAIM_SQL).await?;
        let limit = i64::from(claim.limit);
        let rows = client.query(&stmt, &[&claim.owner, &claim.now_ms, &claim.lease_ms, &limit]).await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            let attempts: i32 = row.try_get(3).map_err(|e| StoreError::corrupt("attempts", e))?;
            let due: i64 = row.try_get(4).map_err(|e| StoreError::corrupt("next attempt", e))?;
            let c = Claimed {
                row_id: row.try_get(0).map_err(|e| StoreError::corrupt("inbox id", e))?,
                source: SourceName::parse(row.try_get::<_, String>(1).map_err(|e| StoreError::corrupt("source", e))?)
                    .map_err(|e| StoreError::corrupt("stored source", e))?,
                event_id: EventId::parse(row.try_get::<_, String>(2).map_err(|e| StoreError::corrupt("event id", e))?)
                    .map_err(|e| StoreError::corrupt("stored event id", e))?,
                attempts: u32::try_from(attempts).map_err(|e| StoreError::corrupt("attempts", e))?,
                owner: claim.owner.clone(),
            };
            claimed.push((due, c));
        }
        // RETURNING has no order of its own: earliest due first, as the claim chose them.
        claimed.sort_by_key(|(due, c)| (*due, c.row_id));
        Ok(claimed.into_iter().map(|(_, c)| c).collect())
    })
    .await
}

/// Re-applies a leased deferred row in its own transaction (see [`payhook_store::Store::retry`]). A deadlock is
/// retried here a few times; any other failure leaves the row leased, and it is claimed again once the lease ends.
pub(crate) async fn retry(pool: &Pool, c: &Claimed, now_ms: i64, ctx: &Ctx) -> Result<Retried, StoreError> {
    rerun_on_conflict(pool, "retry of a deferred event", || {
        async |client: &Object| retry_on(client, c, now_ms, ctx).await
    })
    .await
}

/// `payhook_reapply` for `event` under `change`, and what it came to: the recorded outcome and the settlement of
/// `target` (the caller's row, after `attempts` attempts).
async fn reapply(
    client: &Object,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    change: &Change,
    target: Settle,
) -> Result<(Recorded, Settle), Failure> {
    let reapply = client.prepare_cached(REAPPLY_SQL).await?;
    let sinks = sinks_of(&ctx.routing, change.plan.outbox_kind);
    let row = client
        .query_one(
            &reapply,
            &[
                &source,
                &event.event_id.as_str(),
                &event.event_type,
                &event.occurred_at,
                &event.business_key,
                &change.plan.order_id.as_str(),
                &change.from.0,
                &change.from.1,
                &change.plan.to.as_str(),
                &change.amount(),
                &change.currency(),
                &change.plan.outbox_kind,
                &sinks,
                &target.now_ms,
            ],
        )
        .await?;
    let outcome: String = row.try_get(0).map_err(|e| StoreError::corrupt("payhook_reapply outcome", e))?;
    let detail: Option<String> = row.try_get(1).map_err(|e| StoreError::corrupt("payhook_reapply detail", e))?;
    Ok(match outcome.as_str() {
        "processed" => (Recorded { outcome: Outcome::Processed, detail: None }, target),
        "duplicate" => (
            Recorded { outcome: Outcome::Duplicate, detail: detail.clone() },
            Settle { status: Outcome::Duplicate.as_str(), reason: detail, ..target },
        ),
        "unapplied" => decide(&change.plan, snapshot(&row, 2)?.as_ref(), target, &ctx.retry),
        other => return Err(StoreError::inconsistent(format!("payhook_reapply outcome {other:?}")).into()),
    })
}

/// Sends the settlements, the forwarded events and alerts of `follow`, and `COMMIT`, pipelined.
async fn settle_and_commit(
    client: &Object,
    ctx: &Ctx,
    settles: &[Settle],
    mut follow: FollowUps,
) -> Result<(), Failure> {
    let settle = client.prepare_cached(SETTLE_SQL).await?;
    let mut columns = SettleColumns::default();
    for s in settles {
        columns.push(s);
    }
    columns.follow(&mut follow, &ctx.routing);
    let params = columns.params();
    let settled = send(client.query_one(&settle, &params)).await;
    let committed = send(client.batch_execute("COMMIT")).await;
    // A failed settlement aborted the transaction, and the COMMIT after it rolled back: report the settlement.
    settled.answer().await?;
    committed.answer().await?;
    Ok(())
}

async fn retry_on(client: &Object, c: &Claimed, now_ms: i64, ctx: &Ctx) -> Result<Retried, Failure> {
    let stored = client.prepare_cached(STORED_SQL).await?;
    let lock = client.prepare_cached(LOCK_SQL).await?;
    let leased = client.prepare_cached(LEASED_SQL).await?;
    let key: [&(dyn ToSql + Sync); 3] = [&c.source.as_str(), &c.event_id.as_str(), &c.row_id];

    // The stored event names its order (or its billing objects), whose lock comes before the inbox row's (see the
    // schema's locking protocol), so it is read first, without a lock: a row's event never changes while it is
    // deferred.
    let Some(row) = client.query_opt(&stored, &key).await? else {
        return Ok(Retried::LeaseLost);
    };
    let event_type: String = row.try_get(0).map_err(|e| StoreError::corrupt("event type", e))?;
    let occurred_at: i64 = row.try_get(1).map_err(|e| StoreError::corrupt("occurred at", e))?;
    let business_key: String = row.try_get(2).map_err(|e| StoreError::corrupt("business key", e))?;
    let effect: Option<String> = row.try_get(3).map_err(|e| StoreError::corrupt("effect", e))?;
    let effect: Effect = serde_json::from_str(effect.as_deref().unwrap_or("null"))
        .map_err(|e| StoreError::corrupt("stored effect", e))?;
    let event = Event { event_id: c.event_id.clone(), event_type, occurred_at, business_key, effect };
    // An order event takes its order's lock; a billing event the locks of its subscription or invoice.
    let change = ledger::plan(&event.effect).map(Change::new);
    let billing_locks = billing::locks(&event.effect);
    let lock_all = client.prepare_cached(billing::LOCK_ALL_SQL).await?;
    let (lock, lock_param): (_, &(dyn ToSql + Sync)) = match &change {
        Some(change) => (&lock, &change.lock),
        None if !billing_locks.is_empty() => (&lock_all, &billing_locks),
        None => return Err(StoreError::inconsistent("stored effect: a deferred event without an order change").into()),
    };

    let lease: [&(dyn ToSql + Sync); 4] = [&c.source.as_str(), &c.event_id.as_str(), &c.row_id, &c.owner];
    let begun = send(client.batch_execute("BEGIN")).await;
    let lock_params = [lock_param];
    let locked = send(client.query_opt(lock, &lock_params)).await;
    let still_leased = send(client.query_opt(&leased, &lease)).await;
    begun.answer().await?;
    locked.answer().await?;
    let still_leased = still_leased.answer().await?;
    if still_leased.is_none() {
        client.batch_execute("ROLLBACK").await?;
        return Ok(Retried::LeaseLost);
    }

    let target = Settle::new(c.source.as_str(), c.event_id.as_str(), c.row_id, c.attempts + 1, now_ms);
    let (recorded, settlement) = match &change {
        Some(change) => reapply(client, ctx, c.source.as_str(), &event, change, target).await?,
        None => {
            let raw = billing::apply(client, ctx, c.source.as_str(), &event, now_ms, false).await?;
            settle_billing(raw, target, &ctx.retry)
        }
    };
    let mut follow = FollowUps::default();
    follow.dead_letter(&ctx.routing, c.source.as_str(), c.event_id.as_str(), &recorded, now_ms);
    settle_and_commit(client, ctx, &[settlement], follow).await?;
    Ok(Retried::Done(recorded))
}

/// Replays a dead-lettered event in its own transaction (see [`payhook_store::Store::replay`]).
///
/// Locks as every transaction does: the order (or the billing objects) of the re-parsed event first, then its inbox row (`FOR UPDATE`, so
/// that concurrent replays of one event queue up and the later one finds it no longer dead), then the keys it
/// writes.
pub(crate) async fn replay(
    pool: &Pool,
    ctx: &Ctx,
    source: &SourceName,
    event_id: &EventId,
    parsed: &Parsed,
    now_ms: i64,
) -> Result<Replayed, StoreError> {
    rerun_on_conflict(pool, "replay", || {
        async |client: &Object| replay_on(client, ctx, source.as_str(), event_id.as_str(), parsed, now_ms).await
    })
    .await
}

async fn replay_on(
    client: &Object,
    ctx: &Ctx,
    source: &str,
    event_id: &str,
    parsed: &Parsed,
    now_ms: i64,
) -> Result<Replayed, Failure> {
    let event = match parsed {
        Parsed::Event(e) => Some(e),
        Parsed::Unparseable { .. } => None,
    };
    let change = event.and_then(|e| ledger::plan(&e.effect)).map(Change::new);
    let billing_locks = event.map(|e| billing::locks(&e.effect)).unwrap_or_default();
    let lock = client.prepare_cached(LOCK_SQL).await?;
    let lock_all = client.prepare_cached(billing::LOCK_ALL_SQL).await?;
    let row = client.prepare_cached(REPLAY_ROW_SQL).await?;
    let lock_key = change.as_ref().map(|c| c.lock);
    let lock_params: [&(dyn ToSql + Sync); 1] = [&lock_key];
    let billing_params: [&(dyn ToSql + Sync); 1] = [&billing_locks];
    let key: [&(dyn ToSql + Sync); 2] = [&source, &event_id];
    let begun = send(client.batch_execute("BEGIN")).await;
    let locked = if lock_key.is_some() {
        Some(send(client.query_opt(&lock, &lock_params)).await)
    } else if !billing_locks.is_empty() {
        Some(send(client.query_opt(&lock_all, &billing_params)).await)
    } else {
        None
    };
    let stored = send(client.query_opt(&row, &key)).await;
    begun.answer().await?;
    if let Some(locked) = locked {
        locked.answer().await?;
    }
    let stored = stored.answer().await?;
    let Some(stored) = stored else {
        client.batch_execute("COMMIT").await?;
        return Ok(Replayed::NotFound);
    };
    let row_id: i64 = stored.try_get(0).map_err(|e| StoreError::corrupt("inbox id", e))?;
    let status: String = stored.try_get(1).map_err(|e| StoreError::corrupt("event status", e))?;
    let attempts: i32 = stored.try_get(2).map_err(|e| StoreError::corrupt("attempts", e))?;
    let status =
        Outcome::parse(&status).ok_or_else(|| StoreError::inconsistent(format!("stored event status {status:?}")))?;
    if status != Outcome::DeadLettered {
        client.batch_execute("COMMIT").await?;
        return Ok(Replayed::NotDeadLetter(status));
    }
    // The attempt count goes on: an event whose order still does not exist is dead-lettered again rather than
    // retried for another three days.
    let attempt = u32::try_from(attempts).map_err(|e| StoreError::corrupt("attempts", e))? + 1;

    let event = match parsed {
        Parsed::Event(event) => event,
        Parsed::Unparseable { reason, .. } => {
            let recorded = Recorded { outcome: Outcome::DeadLettered, detail: Some(reason.clone()) };
            let settle = Settle::recorded(source, event_id, row_id, attempt, now_ms, &recorded);
            settle_and_commit(client, ctx, &[settle], FollowUps::default()).await?;
            return Ok(Replayed::Done(recorded));
        }
    };
    let effect_json = match &event.effect {
        Effect::Ignored => None,
        effect => {
            Some(serde_json::to_string(effect).map_err(|e| StoreError::corrupt("an effect that does not encode", e))?)
        }
    };
    let mut settles = Vec::with_capacity(2);
    let target_row = if event.event_id.as_str() == event_id {
        let reparsed = client.prepare_cached(REPLAY_REPARSED_SQL).await?;
        client
            .execute(
                &reparsed,
                &[&source, &event_id, &event.event_type, &event.occurred_at, &event.business_key, &effect_json],
            )
            .await?;
        row_id
    } else {
        // The bytes now parse to an event with its own id (they were stored under a derived one): record it under
        // that id, through the event-id dedup, and retire the derived row.
        let record = client.prepare_cached(REPLAY_RECORD_SQL).await?;
        let attempts = i32::try_from(attempt).unwrap_or(i32::MAX);
        let inserted = client
            .query_opt(
                &record,
                &[
                    &source,
                    &event_id,
                    &event.event_id.as_str(),
                    &event.event_type,
                    &event.occurred_at,
                    &event.business_key,
                    &effect_json,
                    &attempts,
                    &now_ms,
                ],
            )
            .await?;
        let retired =
            Recorded { outcome: Outcome::Duplicate, detail: Some(format!("replayed as event {}", event.event_id)) };
        settles.push(Settle::recorded(source, event_id, row_id, attempt, now_ms, &retired));
        let Some(inserted) = inserted else {
            settle_and_commit(client, ctx, &settles, FollowUps::default()).await?;
            return Ok(Replayed::Done(Recorded {
                outcome: Outcome::Duplicate,
                detail: Some(format!("event {} was already recorded", event.event_id)),
            }));
        };
        inserted.try_get(0).map_err(|e| StoreError::corrupt("inbox id", e))?
    };
    let target = Settle::new(source, event.event_id.as_str(), target_row, attempt, now_ms);
    let (recorded, settle) = match &change {
        Some(change) => reapply(client, ctx, source, event, change, target).await?,
        None if billing::is_billing(&event.effect) => {
            let raw = billing::apply(client, ctx, source, event, now_ms, false).await?;
            settle_billing(raw, target, &ctx.retry)
        }
        None => {
            let ignored = Recorded { outcome: Outcome::Ignored, detail: None };
            let settle = Settle { status: ignored.outcome.as_str(), ..target };
            (ignored, settle)
        }
    };
    settles.push(settle);
    let mut follow = FollowUps::default();
    follow.dead_letter(&ctx.routing, source, event.event_id.as_str(), &recorded, now_ms);
    settle_and_commit(client, ctx, &settles, follow).await?;
    Ok(Replayed::Done(recorded))
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
