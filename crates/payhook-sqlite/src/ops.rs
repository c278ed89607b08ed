//! The write operations, each run by the writer inside its own savepoint.
//!
//! Invariant: dedup is decided by `INSERT … ON CONFLICT DO NOTHING` on a unique key, never by a SELECT before an
//! INSERT; every state change is a guarded `UPDATE … WHERE status IN (…)`.

use crate::writer::{exec, rollback_to, unavailable};
use payhook_core::event::{Effect, Event, OrderId};
use payhook_core::ledger::{self, OrderSnapshot, OrderStatus, Plan, Unapplied};
use payhook_core::retry::{Next, RetryPolicy};
use payhook_store::{Claim, Claimed, Delivery, NewOrder, Outcome, Parsed, Recorded, Registered, Retried, StoreError};
use rusqlite::{Connection, OptionalExtension, params};

type Result<T> = std::result::Result<T, StoreError>;

trait SqlResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> SqlResult<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T> {
        self.map_err(unavailable)
    }
}

/// Records a verified delivery and applies its effect (see [`payhook_store::Store::ingest`]).
pub(crate) fn ingest(conn: &Connection, d: &Delivery, policy: &RetryPolicy) -> Result<Recorded> {
    let (event, initial, reason) = match &d.parsed {
        Parsed::Event(e) if e.effect == Effect::Ignored => (Some(e), Outcome::Ignored, None),
        Parsed::Event(e) => (Some(e), Outcome::Processed, None),
        Parsed::Unparseable { reason, .. } => (None, Outcome::DeadLettered, Some(reason.as_str())),
    };
    let effect_json = match event.map(|e| &e.effect) {
        Some(effect @ Effect::Order { .. }) => {
            Some(serde_json::to_string(effect).map_err(|e| StoreError::Corrupt(e.to_string()))?)
        }
        _ => None,
    };
    let inserted = conn
        .prepare_cached(
            "INSERT INTO inbox (source, event_id, event_type, occurred_at, business_key, effect, status, reason,
                                received_at, updated_at, verification, headers, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, ?11, ?12)
             ON CONFLICT (source, event_id) DO NOTHING",
        )
        .db()?
        .execute(params![
            d.source.as_str(),
            d.parsed.event_id().as_str(),
            event.map(|e| e.event_type.as_str()),
            event.map(|e| e.occurred_at),
            event.map(|e| e.business_key.as_str()),
            effect_json,
            initial.as_str(),
            reason,
            d.received_at_ms,
            d.verification,
            d.headers_json,
            d.raw_body,
        ])
        .db()?;
    if inserted == 0 {
        return Ok(Recorded { outcome: Outcome::Duplicate, detail: None });
    }
    let row_id = conn.last_insert_rowid();
    let Some(event) = event.filter(|_| initial == Outcome::Processed) else {
        return Ok(Recorded { outcome: initial, detail: reason.map(str::to_owned) });
    };
    let now_ms = d.received_at_ms;
    let recorded = apply(conn, d.source.as_str(), event, now_ms)?;
    if recorded.outcome == Outcome::Processed && recorded.detail.is_none() {
        // The row was inserted as processed: the common path costs no second write.
        return Ok(recorded);
    }
    settle(conn, row_id, recorded, 1, now_ms, policy, event)
}

/// Applies `event`'s effect: business-key claim, guarded update, audit, outbox. When the effect is not applied
/// (duplicate business key, deferred, rejected) its own writes are rolled back, so the key stays free for an
/// event that can use it.
fn apply(conn: &Connection, source: &str, event: &Event, now_ms: i64) -> Result<Recorded> {
    let Some(plan) = ledger::plan(&event.effect) else {
        return Ok(Recorded { outcome: Outcome::Ignored, detail: None });
    };
    exec(conn, "SAVEPOINT effect").db()?;
    let result = try_apply(conn, source, event, &plan, now_ms);
    if matches!(&result, Ok(r) if r.outcome == Outcome::Processed) {
        exec(conn, "RELEASE effect").db()?;
    } else {
        rollback_to(conn, "ROLLBACK TO effect", "RELEASE effect").db()?;
    }
    result
}

fn try_apply(conn: &Connection, source: &str, event: &Event, plan: &Plan, now_ms: i64) -> Result<Recorded> {
    let claimed = conn
        .prepare_cached(
            "INSERT INTO business_keys (source, key, event_id, created_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (source, key) DO NOTHING",
        )
        .db()?
        .execute(params![source, event.business_key, event.event_id.as_str(), now_ms])
        .db()?;
    if claimed == 0 {
        let holder: Option<String> = conn
            .prepare_cached("SELECT event_id FROM business_keys WHERE source = ?1 AND key = ?2")
            .db()?
            .query_row(params![source, event.business_key], |r| r.get(0))
            .optional()
            .db()?;
        let detail = format!(
            "business key {} was already applied by event {}",
            event.business_key,
            holder.as_deref().unwrap_or("?")
        );
        return Ok(Recorded { outcome: Outcome::Duplicate, detail: Some(detail) });
    }

    let Some(from) = guarded_update(conn, plan, now_ms)? else {
        let snapshot = order_snapshot(conn, &plan.order_id)?;
        let (outcome, why) = match ledger::explain(plan, snapshot.as_ref()) {
            Unapplied::NoOp(why) => (Outcome::Processed, why),
            Unapplied::Reject(why) => (Outcome::DeadLettered, why),
            Unapplied::Defer(why) => (Outcome::Deferred, why),
        };
        return Ok(Recorded { outcome, detail: Some(why) });
    };
    conn.prepare_cached(
        "INSERT INTO order_audit (order_id, source, event_id, event_type, from_status, to_status, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .db()?
    .execute(params![
        plan.order_id.as_str(),
        source,
        event.event_id.as_str(),
        event.event_type,
        from.as_str(),
        plan.to.as_str(),
        now_ms
    ])
    .db()?;
    let payload = serde_json::json!({
        "kind": plan.outbox_kind,
        "order_id": plan.order_id.as_str(),
        "status": plan.to.as_str(),
        "previous_status": from.as_str(),
        "source": source,
        "event_id": event.event_id.as_str(),
        "event_type": event.event_type,
        "occurred_at": event.occurred_at,
    });
    conn.prepare_cached(
        "INSERT INTO outbox (kind, order_id, source, event_id, payload, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .db()?
    .execute(params![
        plan.outbox_kind,
        plan.order_id.as_str(),
        source,
        event.event_id.as_str(),
        payload.to_string(),
        now_ms
    ])
    .db()?;
    Ok(Recorded { outcome: Outcome::Processed, detail: None })
}

/// The plan's guarded `UPDATE`. Returns the status the order had, or `None` when the guard matched nothing.
fn guarded_update(conn: &Connection, plan: &Plan, now_ms: i64) -> Result<Option<OrderStatus>> {
    // `from` has one or two states; both are bound, the second repeating the first when there is one.
    let from1 = plan.from[0].as_str();
    let from2 = plan.from.get(1).map_or(from1, |s| s.as_str());
    let (amount, currency) = match &plan.expect_money {
        Some(m) => (Some(m.amount_minor), Some(m.currency.as_str())),
        None => (None, None),
    };
    let prev: Option<String> = conn
        .prepare_cached(
            "UPDATE orders SET prev_status = status, status = ?1, updated_at = ?2
             WHERE id = ?3 AND status IN (?4, ?5)
               AND (?6 IS NULL OR (amount = ?6 AND currency = ?7))
             RETURNING prev_status",
        )
        .db()?
        .query_row(params![plan.to.as_str(), now_ms, plan.order_id.as_str(), from1, from2, amount, currency], |r| {
            r.get(0)
        })
        .optional()
        .db()?;
    prev.map(|s| parse_status(&s)).transpose()
}

fn parse_status(s: &str) -> Result<OrderStatus> {
    OrderStatus::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown order status {s:?}")))
}

fn order_snapshot(conn: &Connection, id: &OrderId) -> Result<Option<OrderSnapshot>> {
    let row: Option<(String, i64, String)> = conn
        .prepare_cached("SELECT status, amount, currency FROM orders WHERE id = ?1")
        .db()?
        .query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .db()?;
    row.map(|(status, amount, currency)| {
        Ok(OrderSnapshot { status: parse_status(&status)?, money: crate::read::money(amount, &currency)? })
    })
    .transpose()
}

/// Writes the final state of an attempt to the inbox row. A deferral past the retry budget becomes a dead letter.
fn settle(
    conn: &Connection,
    row_id: i64,
    mut recorded: Recorded,
    attempts: u32,
    now_ms: i64,
    policy: &RetryPolicy,
    event: &Event,
) -> Result<Recorded> {
    let mut next_attempt_at = None;
    let mut waiting_order = None;
    if recorded.outcome == Outcome::Deferred {
        match policy.next(attempts, now_ms, fastrand::f64()) {
            Next::RetryAt(at) => {
                next_attempt_at = Some(at);
                if let Effect::Order { order_id, .. } = &event.effect {
                    waiting_order = Some(order_id.as_str());
                }
            }
            Next::DeadLetter => {
                recorded = Recorded {
                    outcome: Outcome::DeadLettered,
                    detail: Some(format!(
                        "retry budget spent after {attempts} attempts: {}",
                        recorded.detail.as_deref().unwrap_or("deferred")
                    )),
                };
            }
        }
    }
    conn.prepare_cached(
        "UPDATE inbox SET status = ?2, reason = ?3, attempts = ?4, next_attempt_at = ?5, order_id = ?6,
                          lease_owner = NULL, lease_until = NULL, updated_at = ?7
         WHERE id = ?1",
    )
    .db()?
    .execute(params![
        row_id,
        recorded.outcome.as_str(),
        recorded.detail,
        attempts,
        next_attempt_at,
        waiting_order,
        now_ms
    ])
    .db()?;
    Ok(recorded)
}

/// Leases due deferred rows (see [`payhook_store::Store::claim_due`]).
pub(crate) fn claim_due(conn: &Connection, claim: &Claim) -> Result<Vec<Claimed>> {
    let mut stmt = conn
        .prepare_cached(
            "UPDATE inbox SET lease_owner = ?1, lease_until = ?2 + ?3
             WHERE id IN (SELECT id FROM inbox
                          WHERE status = 'deferred' AND next_attempt_at <= ?2
                            AND (lease_until IS NULL OR lease_until <= ?2)
                          ORDER BY next_attempt_at LIMIT ?4)
             RETURNING id, source, event_id, attempts",
        )
        .db()?;
    let rows = stmt
        .query_map(params![claim.owner, claim.now_ms, claim.lease_ms, claim.limit], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, u32>(3)?))
        })
        .db()?;
    let mut claimed = Vec::new();
    for row in rows {
        let (row_id, source, event_id, attempts) = row.db()?;
        claimed.push(Claimed {
            row_id,
            source: crate::read::source(source)?,
            event_id: crate::read::event_id(event_id)?,
            attempts,
            owner: claim.owner.clone(),
        });
    }
    Ok(claimed)
}

/// Re-applies a leased deferred row (see [`payhook_store::Store::retry`]).
pub(crate) fn retry(conn: &Connection, c: &Claimed, now_ms: i64, policy: &RetryPolicy) -> Result<Retried> {
    let row: Option<(String, i64, String, String)> = conn
        .prepare_cached(
            "SELECT event_type, occurred_at, business_key, effect FROM inbox
             WHERE id = ?1 AND status = 'deferred' AND lease_owner = ?2",
        )
        .db()?
        .query_row(params![c.row_id, c.owner], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()
        .db()?;
    let Some((event_type, occurred_at, business_key, effect)) = row else {
        return Ok(Retried::LeaseLost);
    };
    let effect: Effect =
        serde_json::from_str(&effect).map_err(|e| StoreError::Corrupt(format!("stored effect: {e}")))?;
    let event = Event { event_id: c.event_id.clone(), event_type, occurred_at, business_key, effect };
    let recorded = apply(conn, c.source.as_str(), &event, now_ms)?;
    let recorded = settle(conn, c.row_id, recorded, c.attempts + 1, now_ms, policy, &event)?;
    Ok(Retried::Done(recorded))
}

/// Registers an order (see [`payhook_store::Store::register_order`]).
pub(crate) fn register_order(conn: &Connection, o: &NewOrder) -> Result<Registered> {
    let created = conn
        .prepare_cached(
            "INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, 'pending', ?4, ?4)
             ON CONFLICT (id) DO NOTHING",
        )
        .db()?
        .execute(params![o.id.as_str(), o.money.amount_minor, o.money.currency.as_str(), o.now_ms])
        .db()?;
    if created == 1 {
        // Events that arrived before their order are due now rather than at their next backoff step.
        conn.prepare_cached(
            "UPDATE inbox SET next_attempt_at = ?2 WHERE status = 'deferred' AND order_id = ?1 AND next_attempt_at > ?2",
        )
        .db()?
        .execute(params![o.id.as_str(), o.now_ms])
        .db()?;
        return Ok(Registered::Created);
    }
    let existing = order_snapshot(conn, &o.id)?
        .ok_or_else(|| StoreError::Corrupt(format!("order {} vanished during registration", o.id)))?;
    if existing.money == o.money {
        Ok(Registered::AlreadyExists)
    } else {
        Ok(Registered::Conflict { existing: existing.money })
    }
}
