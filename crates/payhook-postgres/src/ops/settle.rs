//! Settlements: the final state of an attempt that was not simply applied, decided in Rust with payhook-core's
//! rules (why a guard matched nothing, when to retry), and the forwarded events and alerts written with them.

use super::*;

/// The final state of an attempt that was not simply applied: one element of `payhook_settle_batch`.
#[derive(Debug)]
pub(crate) struct Settle {
    pub(super) source: String,
    pub(super) event_id: String,
    pub(super) row_id: i64,
    pub(super) status: &'static str,
    pub(super) reason: Option<String>,
    pub(super) attempts: i32,
    pub(super) next_attempt_at: Option<i64>,
    pub(super) waiting_order: Option<String>,
    pub(super) now_ms: i64,
    pub(super) release_key: bool,
}

impl Settle {
    /// Settles row `row_id` as processed after `attempts` attempts, keeping its business key; [`decide`] and the
    /// retry path adjust it.
    pub(super) fn new(source: &str, event_id: &str, row_id: i64, attempts: u32, now_ms: i64) -> Self {
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
    pub(super) fn recorded(
        source: &str,
        event_id: &str,
        row_id: i64,
        attempts: u32,
        now_ms: i64,
        recorded: &Recorded,
    ) -> Self {
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
    pub(super) sink: String,
    pub(super) source: String,
    pub(super) event_id: String,
    pub(super) payload: String,
    pub(super) now_ms: i64,
}

/// An alert raised by a write, in the same transaction.
#[derive(Debug)]
pub(crate) struct AlertCall {
    pub(super) key: String,
    pub(super) text: String,
    pub(super) now_ms: i64,
}

/// What a transaction writes after its deliveries' own work: forwarded events and alerts.
#[derive(Debug, Default)]
pub(crate) struct FollowUps {
    pub(super) forwards: Vec<Forward>,
    pub(super) alerts: Vec<AlertCall>,
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

/// The order as the SQL functions read it (columns `at`, `at + 1`, `at + 2`), `None` if missing.
pub(super) fn snapshot(row: &Row, at: usize) -> Result<Option<OrderSnapshot>, StoreError> {
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
pub(super) fn decide(
    plan: &Plan,
    order: Option<&OrderSnapshot>,
    mut settle: Settle,
    policy: &RetryPolicy,
) -> (Recorded, Settle) {
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

/// What `payhook_register_batch` answered for one order.
#[derive(Debug)]
pub(crate) enum RegisterLanded {
    /// Registered, or found already there.
    Done(Registered),
    /// Its savepoint rolled back (the database's error); nothing of it is stored.
    Failed(String),
}

/// What `payhook_register_batch` answered for `order`, in `row`.
pub(crate) fn registered(order: &NewOrder, row: &Row) -> Result<RegisterLanded, StoreError> {
    let outcome: String = row.try_get(0).map_err(|e| StoreError::corrupt("payhook_register_batch outcome", e))?;
    match outcome.as_str() {
        "created" => Ok(RegisterLanded::Done(Registered::Created)),
        "exists" => {
            let amount: i64 = row.try_get(2).map_err(|e| StoreError::corrupt("order amount", e))?;
            let currency: String = row.try_get(3).map_err(|e| StoreError::corrupt("order currency", e))?;
            let existing = money(amount, &currency)?;
            Ok(RegisterLanded::Done(if existing == order.money {
                Registered::AlreadyExists
            } else {
                Registered::Conflict { existing }
            }))
        }
        "failed" => {
            let detail: Option<String> =
                row.try_get(1).map_err(|e| StoreError::corrupt("payhook_register_batch detail", e))?;
            Ok(RegisterLanded::Failed(detail.unwrap_or_default()))
        }
        other => Err(StoreError::inconsistent(format!("payhook_register_batch outcome {other:?}"))),
    }
}
