//! The write operations: what each call sends to the SQL functions of the schema, and the decisions taken in Rust
//! with payhook-core's rules (why a guard matched nothing, when to retry).
//!
//! Invariant: dedup is decided by `INSERT … ON CONFLICT DO NOTHING` on a unique key, never by a SELECT before an
//! INSERT; every state change is a guarded `UPDATE … WHERE status IN (legal predecessors)` (in `payhook_apply`).
//! The ledger's rules live in `payhook_core::ledger` only: SQL applies a plan and reports a miss, Rust explains it.

use crate::error::{PgError, corrupt};
use crate::pipeline::{none, pipeline};
use crate::pool;
use deadpool_postgres::{Object, Pool};
use payhook_core::event::{Currency, Effect, Event, EventId, Money, SourceName};
use payhook_core::ledger::{self, OrderSnapshot, OrderStatus, Plan, Unapplied};
use payhook_core::retry::{Next, RetryPolicy};
use payhook_store::{Claim, Claimed, Delivery, NewOrder, Outcome, Parsed, Recorded, Registered, Retried, StoreError};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

pub(crate) const INGEST_SQL: &str = "SELECT outcome, detail, row_id, order_status, order_amount, order_currency
     FROM payhook_ingest_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
                               $20)";
pub(crate) const REGISTER_SQL: &str =
    "SELECT outcome, detail, stored_amount, stored_currency FROM payhook_register_batch($1, $2, $3, $4, $5)";
pub(crate) const SETTLE_SQL: &str = "SELECT payhook_settle_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
const STORED_SQL: &str = "SELECT event_type, occurred_at, business_key, effect FROM inbox
     WHERE source = $1 AND event_id = $2 AND id = $3";
const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock($1)";
const LEASED_SQL: &str = "SELECT 1 FROM inbox
     WHERE source = $1 AND event_id = $2 AND id = $3 AND status = 'deferred' AND lease_owner = $4 FOR UPDATE";
const REAPPLY_SQL: &str = "SELECT outcome, detail, order_status, order_amount, order_currency
     FROM payhook_reapply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";
const CLAIM_SQL: &str = "WITH due AS (
         SELECT source, event_id FROM inbox
         WHERE status = 'deferred' AND next_attempt_at <= $2 AND (lease_until IS NULL OR lease_until <= $2)
         ORDER BY next_attempt_at, id
         LIMIT $4
         FOR UPDATE SKIP LOCKED)
     UPDATE inbox i SET lease_owner = $1, lease_until = $2 + $3
     FROM due WHERE i.source = due.source AND i.event_id = due.event_id
     RETURNING i.id, i.source, i.event_id, i.attempts, i.next_attempt_at";

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
}

impl IngestCall {
    /// Mirrors the SQLite backend: an ignored type is recorded `ignored`, an unparseable body `dead_lettered`
    /// with its reason, an order event `processed` unless applying its effect says otherwise.
    pub(crate) fn new(d: Delivery) -> Result<Self, StoreError> {
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
            headers: d.headers_json,
            body: d.raw_body,
            change: None,
        };
        match d.parsed {
            Parsed::Unparseable { reason, .. } => call.reason = Some(reason),
            Parsed::Event(event) => {
                call.status = match event.effect {
                    Effect::Ignored => Outcome::Ignored.as_str(),
                    Effect::Order { .. } => Outcome::Processed.as_str(),
                };
                if let effect @ Effect::Order { .. } = &event.effect {
                    call.effect = Some(serde_json::to_string(effect).map_err(|e| StoreError::Corrupt(e.to_string()))?);
                }
                call.change = ledger::plan(&event.effect).map(Change::new);
                call.event_type = Some(event.event_type);
                call.occurred_at = Some(event.occurred_at);
                call.business_key = Some(event.business_key);
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
        let outcome: String = row.try_get(0).map_err(|e| corrupt("payhook_ingest_batch outcome", e))?;
        let detail: Option<String> = row.try_get(1).map_err(|e| corrupt("payhook_ingest_batch detail", e))?;
        match outcome.as_str() {
            "failed" => Ok(Landed::Failed(detail.unwrap_or_default())),
            "unapplied" => {
                let change =
                    self.change.as_ref().ok_or_else(|| corrupt("payhook_ingest_batch", "a miss without a plan"))?;
                let row_id: i64 = row.try_get(2).map_err(|e| corrupt("payhook_ingest_batch row id", e))?;
                let snapshot = snapshot(row, 3)?;
                let target = Settle::new(&self.source, &self.event_id, row_id, 1, self.received_at_ms);
                let (recorded, settle) = decide(&change.plan, snapshot.as_ref(), target, policy);
                Ok(Landed::Settle(recorded, settle))
            }
            other => match Outcome::parse(other) {
                Some(outcome) => Ok(Landed::Done(Recorded { outcome, detail })),
                None => Err(corrupt("payhook_ingest_batch outcome", other)),
            },
        }
    }
}

/// The arguments of `payhook_ingest_batch`: one array per column, one element per delivery.
#[derive(Debug, Default)]
pub(crate) struct IngestColumns<'a> {
    source: Vec<&'a str>,
    event_id: Vec<&'a str>,
    event_type: Vec<Option<&'a str>>,
    occurred_at: Vec<Option<i64>>,
    business_key: Vec<Option<&'a str>>,
    effect: Vec<Option<&'a str>>,
    status: Vec<&'a str>,
    reason: Vec<Option<&'a str>>,
    received_at: Vec<i64>,
    verification: Vec<&'a str>,
    headers: Vec<&'a str>,
    body: Vec<&'a [u8]>,
    lock: Vec<Option<i64>>,
    order_id: Vec<Option<&'a str>>,
    from1: Vec<Option<&'a str>>,
    from2: Vec<Option<&'a str>>,
    to: Vec<Option<&'a str>>,
    amount: Vec<Option<i64>>,
    currency: Vec<Option<&'a str>>,
    outbox_kind: Vec<Option<&'a str>>,
}

impl<'a> IngestColumns<'a> {
    pub(crate) fn push(&mut self, call: &'a IngestCall) {
        let c = call.change.as_ref();
        self.source.push(&call.source);
        self.event_id.push(&call.event_id);
        self.event_type.push(call.event_type.as_deref());
        self.occurred_at.push(call.occurred_at);
        self.business_key.push(call.business_key.as_deref());
        self.effect.push(call.effect.as_deref());
        self.status.push(call.status);
        self.reason.push(call.reason.as_deref());
        self.received_at.push(call.received_at_ms);
        self.verification.push(&call.verification);
        self.headers.push(&call.headers);
        self.body.push(&call.body);
        self.lock.push(c.map(|c| c.lock));
        self.order_id.push(c.map(|c| c.plan.order_id.as_str()));
        self.from1.push(c.map(|c| c.from.0));
        self.from2.push(c.map(|c| c.from.1));
        self.to.push(c.map(|c| c.plan.to.as_str()));
        self.amount.push(c.and_then(Change::amount));
        self.currency.push(c.and_then(Change::currency));
        self.outbox_kind.push(c.map(|c| c.plan.outbox_kind));
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 20] {
        [
            &self.source,
            &self.event_id,
            &self.event_type,
            &self.occurred_at,
            &self.business_key,
            &self.effect,
            &self.status,
            &self.reason,
            &self.received_at,
            &self.verification,
            &self.headers,
            &self.body,
            &self.lock,
            &self.order_id,
            &self.from1,
            &self.from2,
            &self.to,
            &self.amount,
            &self.currency,
            &self.outbox_kind,
        ]
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
    /// Final as it is.
    Done(Recorded),
    /// Final once the settlement is written in the same transaction.
    Settle(Recorded, Settle),
    /// The delivery's savepoint rolled back; nothing of it is stored.
    Failed(String),
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
}

/// The arguments of `payhook_settle_batch`.
#[derive(Debug, Default)]
pub(crate) struct SettleColumns<'a> {
    source: Vec<&'a str>,
    event_id: Vec<&'a str>,
    row_id: Vec<i64>,
    status: Vec<&'a str>,
    reason: Vec<Option<&'a str>>,
    attempts: Vec<i32>,
    next_attempt_at: Vec<Option<i64>>,
    waiting_order: Vec<Option<&'a str>>,
    now: Vec<i64>,
    release_key: Vec<bool>,
}

impl<'a> SettleColumns<'a> {
    pub(crate) fn push(&mut self, s: &'a Settle) {
        self.source.push(&s.source);
        self.event_id.push(&s.event_id);
        self.row_id.push(s.row_id);
        self.status.push(s.status);
        self.reason.push(s.reason.as_deref());
        self.attempts.push(s.attempts);
        self.next_attempt_at.push(s.next_attempt_at);
        self.waiting_order.push(s.waiting_order.as_deref());
        self.now.push(s.now_ms);
        self.release_key.push(s.release_key);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.row_id.is_empty()
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.source,
            &self.event_id,
            &self.row_id,
            &self.status,
            &self.reason,
            &self.attempts,
            &self.next_attempt_at,
            &self.waiting_order,
            &self.now,
            &self.release_key,
        ]
    }
}

/// The order as the SQL functions read it (columns `at`, `at + 1`, `at + 2`), `None` if missing.
fn snapshot(row: &Row, at: usize) -> Result<Option<OrderSnapshot>, StoreError> {
    let status: Option<String> = row.try_get(at).map_err(|e| corrupt("order status", e))?;
    let Some(status) = status else { return Ok(None) };
    let amount: i64 = row.try_get(at + 1).map_err(|e| corrupt("order amount", e))?;
    let currency: String = row.try_get(at + 2).map_err(|e| corrupt("order currency", e))?;
    Ok(Some(OrderSnapshot { status: parse_status(&status)?, money: money(amount, &currency)? }))
}

pub(crate) fn parse_status(s: &str) -> Result<OrderStatus, StoreError> {
    OrderStatus::parse(s).ok_or_else(|| corrupt("stored order status", s))
}

pub(crate) fn money(amount: i64, currency: &str) -> Result<Money, StoreError> {
    let currency = Currency::parse(currency).map_err(|e| corrupt("stored currency", e))?;
    Money::new(amount, currency).map_err(|e| corrupt("stored amount", e))
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

/// What `payhook_register_batch` answered for one order: its registration, or why its savepoint failed.
pub(crate) fn registered(order: &NewOrder, row: &Row) -> Result<Result<Registered, String>, StoreError> {
    let outcome: String = row.try_get(0).map_err(|e| corrupt("payhook_register_batch outcome", e))?;
    match outcome.as_str() {
        "created" => Ok(Ok(Registered::Created)),
        "exists" => {
            let amount: i64 = row.try_get(2).map_err(|e| corrupt("order amount", e))?;
            let currency: String = row.try_get(3).map_err(|e| corrupt("order currency", e))?;
            let existing = money(amount, &currency)?;
            Ok(Ok(if existing == order.money { Registered::AlreadyExists } else { Registered::Conflict { existing } }))
        }
        "failed" => Ok(Err(row.try_get::<_, Option<String>>(1).ok().flatten().unwrap_or_default())),
        other => Err(corrupt("payhook_register_batch outcome", other)),
    }
}

/// Why an operation on one connection failed: the database (the connection may be in doubt) or a stored value.
#[derive(Debug)]
enum Failure {
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
async fn on_connection<T, F>(pool: &Pool, op: F) -> Result<T, StoreError>
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

/// Leases due deferred rows, skipping rows another instance is claiming right now (see
/// [`payhook_store::Store::claim_due`]).
pub(crate) async fn claim_due(pool: &Pool, claim: &Claim) -> Result<Vec<Claimed>, StoreError> {
    on_connection(pool, async |client: &Object| {
        let stmt = client.prepare_cached(CLAIM_SQL).await?;
        let limit = i64::from(claim.limit);
        let rows = client.query(&stmt, &[&claim.owner, &claim.now_ms, &claim.lease_ms, &limit]).await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            let attempts: i32 = row.try_get(3).map_err(|e| corrupt("attempts", e))?;
            let due: i64 = row.try_get(4).map_err(|e| corrupt("next attempt", e))?;
            let c = Claimed {
                row_id: row.try_get(0).map_err(|e| corrupt("inbox id", e))?,
                source: SourceName::parse(row.try_get::<_, String>(1).map_err(|e| corrupt("source", e))?)
                    .map_err(|e| corrupt("stored source", e))?,
                event_id: EventId::parse(row.try_get::<_, String>(2).map_err(|e| corrupt("event id", e))?)
                    .map_err(|e| corrupt("stored event id", e))?,
                attempts: u32::try_from(attempts).map_err(|e| corrupt("attempts", e))?,
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
pub(crate) async fn retry(pool: &Pool, c: &Claimed, now_ms: i64, policy: &RetryPolicy) -> Result<Retried, StoreError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match on_connection(pool, async |client: &Object| retry_on(client, c, now_ms, policy).await).await {
            Err(StoreError::Unavailable(cause))
                if attempt < 3 && cause.downcast_ref::<PgError>().is_some_and(PgError::is_conflict) =>
            {
                tracing::debug!(row = c.row_id, "retry of a deferred event hit a deadlock; running it again");
            }
            other => return other,
        }
    }
}

async fn retry_on(client: &Object, c: &Claimed, now_ms: i64, policy: &RetryPolicy) -> Result<Retried, Failure> {
    let stored = client.prepare_cached(STORED_SQL).await?;
    let lock = client.prepare_cached(LOCK_SQL).await?;
    let leased = client.prepare_cached(LEASED_SQL).await?;
    let reapply = client.prepare_cached(REAPPLY_SQL).await?;
    let settle = client.prepare_cached(SETTLE_SQL).await?;
    let key: [&(dyn ToSql + Sync); 3] = [&c.source.as_str(), &c.event_id.as_str(), &c.row_id];

    // The stored event names its order, whose lock comes before the inbox row's (see the schema's locking
    // protocol), so it is read first, without a lock: a row's event never changes.
    let Some(row) = client.query_opt(&stored, &key).await? else {
        return Ok(Retried::LeaseLost);
    };
    let event_type: String = row.try_get(0).map_err(|e| corrupt("event type", e))?;
    let occurred_at: i64 = row.try_get(1).map_err(|e| corrupt("occurred at", e))?;
    let business_key: String = row.try_get(2).map_err(|e| corrupt("business key", e))?;
    let effect: Option<String> = row.try_get(3).map_err(|e| corrupt("effect", e))?;
    let effect: Effect =
        serde_json::from_str(effect.as_deref().unwrap_or("null")).map_err(|e| corrupt("stored effect", e))?;
    let event = Event { event_id: c.event_id.clone(), event_type, occurred_at, business_key, effect };
    let Some(change) = ledger::plan(&event.effect).map(Change::new) else {
        return Err(corrupt("stored effect", "a deferred event without an order change").into());
    };

    let lease: [&(dyn ToSql + Sync); 4] = [&c.source.as_str(), &c.event_id.as_str(), &c.row_id, &c.owner];
    let (begun, mut rows, _) = pipeline(
        Some(client.batch_execute("BEGIN")),
        vec![client.query_opt(&lock, &[&change.lock]), client.query_opt(&leased, &lease)],
        none(),
    )
    .await;
    begun.expect("first was given")?;
    let still_leased = rows.pop().expect("two queries were sent")?;
    rows.pop().expect("two queries were sent")?;
    if still_leased.is_none() {
        client.batch_execute("ROLLBACK").await?;
        return Ok(Retried::LeaseLost);
    }

    let row = client
        .query_one(
            &reapply,
            &[
                &c.source.as_str(),
                &c.event_id.as_str(),
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
                &now_ms,
            ],
        )
        .await?;
    let outcome: String = row.try_get(0).map_err(|e| corrupt("payhook_reapply outcome", e))?;
    let detail: Option<String> = row.try_get(1).map_err(|e| corrupt("payhook_reapply detail", e))?;
    let base = Settle::new(c.source.as_str(), c.event_id.as_str(), c.row_id, c.attempts + 1, now_ms);
    let (recorded, settlement) = match outcome.as_str() {
        "processed" => (Recorded { outcome: Outcome::Processed, detail: None }, base),
        "duplicate" => (
            Recorded { outcome: Outcome::Duplicate, detail: detail.clone() },
            Settle { status: Outcome::Duplicate.as_str(), reason: detail, ..base },
        ),
        "unapplied" => decide(&change.plan, snapshot(&row, 2)?.as_ref(), base, policy),
        other => return Err(corrupt("payhook_reapply outcome", other).into()),
    };
    let mut columns = SettleColumns::default();
    columns.push(&settlement);
    let params = columns.params();
    let (_, settled, committed) =
        pipeline(none(), vec![client.query_one(&settle, &params)], Some(client.batch_execute("COMMIT"))).await;
    for s in settled {
        s?;
    }
    committed.expect("last was given")?;
    Ok(Retried::Done(recorded))
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
