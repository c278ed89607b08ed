//! The write operations on events and orders, each run by the writer inside its own savepoint: ingest, the order
//! ledger, settlements, the retry of deferred events, registration and replay. Outbox rows are written through
//! `crate::outbox`, subscription and invoice effects applied by `crate::billing`.
//!
//! Invariant: dedup is decided by `INSERT … ON CONFLICT DO NOTHING` on a unique key, never by a SELECT before an
//! INSERT; every state change is a guarded `UPDATE … WHERE status IN (…)`.

use crate::context::{Ctx, Result, SqlResult};
use crate::failpoint::{fires_on, injected};
use crate::kept::WriterConn;
use crate::outbox::{insert_outbox, raise_alert, route_outbox};
use crate::tally::{self, Table};
use crate::writer::{exec, rollback_to};
use payhook_core::event::{Effect, Event, OrderId};
use payhook_core::ledger::{self, OrderSnapshot, OrderStatus, Plan, Unapplied};
use payhook_core::retry::Next;
use payhook_store::payload;
use payhook_store::{
    Alert, Claim, Claimed, Delivery, DeliveryParts, FORWARD_KIND, NewOrder, Outcome, Parsed, Recorded, Registered,
    Replayed, Retried, Routing, StoreError,
};
use rusqlite::{OptionalExtension, params};
use std::borrow::Cow;

/// What [`ingest`] stores in the delivery's encoded form: its headers and its effect as JSON. The caller encodes
/// them on its own task, so that the writer thread, the one every delivery waits for, does not.
pub(crate) struct Encoded {
    headers_json: String,
    effect_json: std::result::Result<Option<String>, serde_json::Error>,
}

impl Encoded {
    pub(crate) fn of(d: &Delivery) -> Encoded {
        let d = d.parts();
        let effect_json = match &d.parsed {
            Parsed::Event(e) if e.effect != Effect::Ignored => serde_json::to_string(&e.effect).map(Some),
            _ => Ok(None),
        };
        Encoded { headers_json: d.headers.to_json(), effect_json }
    }
}

/// Records a verified delivery and applies its effect (see [`payhook_store::Store::ingest`]).
pub(crate) fn ingest(conn: &WriterConn<'_>, d: &Delivery, encoded: Encoded, ctx: &Ctx) -> Result<Recorded> {
    let d = d.parts();
    let (event, initial, reason) = match &d.parsed {
        Parsed::Event(e) if e.effect == Effect::Ignored => (Some(e), Outcome::Ignored, None),
        Parsed::Event(e) => (Some(e), Outcome::Processed, None),
        Parsed::Unparseable { reason, .. } => (None, Outcome::DeadLettered, Some(reason.as_str())),
    };
    let Encoded { headers_json, effect_json } = encoded;
    let effect_json = effect_json.map_err(|e| StoreError::corrupt("an effect that does not encode", e))?;
    // The payload goes into `inbox_payloads` (below); the inbox row holds its cleared form.
    let inserted = conn
        .kept(
            "INSERT INTO inbox (source, event_id, event_type, occurred_at, business_key, effect, status, reason,
                                received_at, updated_at, verification, headers, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10, '{}', x'')
             ON CONFLICT (source, event_id) DO NOTHING",
            |s| {
                s.execute(params![
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
                ])
            },
        )
        .db()?;
    if inserted == 0 {
        return Ok(Recorded { outcome: Outcome::Duplicate, detail: None });
    }
    tally::count(Table::Inbox, d.source.as_str(), "", initial.as_str(), 1);
    let row_id = conn.last_insert_rowid();
    conn.kept("INSERT INTO inbox_payloads (inbox_id, headers, body) VALUES (?1, ?2, ?3)", |s| {
        s.execute(params![row_id, headers_json, d.raw_body])
    })
    .db()?;
    if fires_on("sqlite::after_inbox_insert", conn) {
        return Err(injected("sqlite::after_inbox_insert"));
    }
    let now_ms = d.received_at_ms;
    let source = d.source.as_str();
    let event_id = d.parsed.event_id().as_str();
    let recorded = match event.filter(|_| initial == Outcome::Processed) {
        None => {
            let recorded = Recorded { outcome: initial, detail: reason.map(str::to_owned) };
            if initial == Outcome::DeadLettered {
                log_attempt(conn, row_id, 1, now_ms, &recorded)?;
                dead_letter_alert(conn, ctx, source, event_id, &recorded, now_ms)?;
            }
            recorded
        }
        Some(event) => {
            let recorded = apply(conn, ctx, source, event, now_ms, true)?;
            if recorded.outcome == Outcome::Processed && recorded.detail.is_none() {
                // The row was inserted as processed: the common path costs no second write.
                recorded
            } else {
                settle(conn, ctx, row_id, initial, recorded, 1, now_ms, source, event)?
            }
        }
    };
    if ctx.routing.forwards.contains_key(source) {
        forward(conn, &ctx.routing, d, event, &recorded)?;
    }
    Ok(recorded)
}

/// Writes one `event.received` row per forwarding sink: the event in payhook's normalized JSON.
fn forward(
    conn: &WriterConn<'_>,
    routing: &Routing,
    d: &DeliveryParts,
    event: Option<&Event>,
    recorded: &Recorded,
) -> Result<()> {
    let payload = payload::render(&payload::EventReceived {
        kind: FORWARD_KIND.into(),
        source: d.source.as_str().into(),
        event_id: d.parsed.event_id().as_str().into(),
        event_type: event.map(|e| e.event_type.as_str().into()),
        occurred_at: event.map(|e| e.occurred_at),
        business_key: event.map(|e| e.business_key.as_str().into()),
        effect: event.map(|e| Cow::Borrowed(&e.effect)),
        outcome: recorded.outcome.as_str().into(),
        detail: recorded.detail.as_deref().map(Cow::Borrowed),
        received_at_ms: d.received_at_ms,
    });
    for sink in routing.forwards_for(d.source.as_str(), &payload) {
        insert_outbox(
            conn,
            None,
            false,
            FORWARD_KIND,
            sink,
            None,
            Some(d.source.as_str()),
            Some(d.parsed.event_id().as_str()),
            &payload,
            d.received_at_ms,
        )?;
    }
    Ok(())
}

/// Keeps a record of an attempt that did not simply succeed on arrival.
fn log_attempt(conn: &WriterConn<'_>, row_id: i64, attempt: u32, now_ms: i64, recorded: &Recorded) -> Result<()> {
    conn.kept(
        "INSERT OR REPLACE INTO inbox_attempts (inbox_id, attempt, at, outcome, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        |s| s.execute(params![row_id, attempt, now_ms, recorded.outcome.as_str(), recorded.detail]),
    )
    .db()?;
    Ok(())
}

/// A dead-lettered event raises an alert (collapsed per source).
fn dead_letter_alert(
    conn: &WriterConn<'_>,
    ctx: &Ctx,
    source: &str,
    event_id: &str,
    recorded: &Recorded,
    now_ms: i64,
) -> Result<()> {
    if recorded.outcome != Outcome::DeadLettered {
        return Ok(());
    }
    let text = format!(
        "payhook: event {event_id} from source {source} was dead-lettered: {}",
        recorded.detail.as_deref().unwrap_or("no reason recorded")
    );
    raise_alert(conn, ctx, &Alert { key: format!("{source}:dead_letter"), text, now_ms })
}

/// Applies `event`'s effect: business-key claim, then the order ledger or the billing rules (guarded update, audit,
/// outbox). When the effect is not applied (duplicate business key, deferred, rejected) its own writes are undone,
/// so the key stays free for an event that can use it. `arriving` is true for a delivery's first attempt: only then
/// may a payment of a source with implicit orders create its order (a retry or a replay does not, as on
/// PostgreSQL, whose retries and replays go through `payhook_reapply`).
///
/// An order effect that creates no order writes nothing before its guarded update but its business key, and
/// nothing at all when the update matches nothing: undoing it is deleting that key, so it runs without a savepoint
/// of its own (a `SAVEPOINT` and a `RELEASE` per payment, and the pages the job had already journaled journaled
/// again). Every other effect runs in `SAVEPOINT effect`. An error undoes the whole job either way (its caller's
/// savepoint).
fn apply(
    conn: &WriterConn<'_>,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    now_ms: i64,
    arriving: bool,
) -> Result<Recorded> {
    if event.effect == Effect::Ignored {
        return Ok(Recorded { outcome: Outcome::Ignored, detail: None });
    }
    let implicit = ctx.routing.implicit_order(source, &event.effect, now_ms).filter(|_| arriving);
    if matches!(event.effect, Effect::Order { .. }) && implicit.is_none() {
        if let Some(duplicate) = claim_business_key(conn, source, event, now_ms)? {
            return Ok(duplicate);
        }
        let recorded = match ledger::plan(&event.effect) {
            Some(plan) => apply_order(conn, &ctx.routing, source, event, &plan, now_ms, None)?,
            None => Recorded { outcome: Outcome::Ignored, detail: None },
        };
        if recorded.outcome != Outcome::Processed {
            release_business_key(conn, source, event)?;
        }
        return Ok(recorded);
    }
    let mark = tally::mark();
    exec(conn, "SAVEPOINT effect").db()?;
    let result = match claim_business_key(conn, source, event, now_ms) {
        Ok(Some(duplicate)) => Ok(duplicate),
        Ok(None) => match &event.effect {
            Effect::Order { .. } => match ledger::plan(&event.effect) {
                Some(plan) => apply_order(conn, &ctx.routing, source, event, &plan, now_ms, implicit.as_ref()),
                None => Ok(Recorded { outcome: Outcome::Ignored, detail: None }),
            },
            Effect::Subscription(change) => {
                crate::billing::apply_subscription(conn, ctx, source, event, change, now_ms)
            }
            Effect::Invoice(change) => crate::billing::apply_invoice(conn, ctx, source, event, change, now_ms),
            Effect::Ignored => Ok(Recorded { outcome: Outcome::Ignored, detail: None }),
        },
        Err(e) => Err(e),
    };
    if matches!(&result, Ok(r) if r.outcome == Outcome::Processed) {
        exec(conn, "RELEASE effect").db()?;
    } else {
        tally::undo(mark);
        rollback_to(conn, "ROLLBACK TO effect", "RELEASE effect").db()?;
    }
    result
}

/// Frees the business key `event` just claimed, for an effect that was not applied.
fn release_business_key(conn: &WriterConn<'_>, source: &str, event: &Event) -> Result<()> {
    conn.kept("DELETE FROM business_keys WHERE source = ?1 AND key = ?2 AND event_id = ?3", |s| {
        s.execute(params![source, event.business_key, event.event_id.as_str()])
    })
    .db()?;
    Ok(())
}

/// Claims the event's business key; `Some` is the answer for an event whose business fact another event already
/// applied.
fn claim_business_key(conn: &WriterConn<'_>, source: &str, event: &Event, now_ms: i64) -> Result<Option<Recorded>> {
    let claimed = conn
        .kept(
            "INSERT INTO business_keys (source, key, event_id, created_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (source, key) DO NOTHING",
            |s| s.execute(params![source, event.business_key, event.event_id.as_str(), now_ms]),
        )
        .db()?;
    if claimed == 1 {
        return Ok(None);
    }
    let holder: Option<String> = conn
        .kept("SELECT event_id FROM business_keys WHERE source = ?1 AND key = ?2", |s| {
            s.query_row(params![source, event.business_key], |r| r.get(0))
        })
        .optional()
        .db()?;
    let detail = format!(
        "business key {} was already applied by event {}",
        event.business_key,
        holder.as_deref().unwrap_or("?")
    );
    Ok(Some(Recorded { outcome: Outcome::Duplicate, detail: Some(detail) }))
}

/// The order ledger's part of an order effect; `implicit` is the order a payment creates when it does not exist
/// (`orders = "implicit"`), registered first, with the registration's own statement (which also makes the order's
/// deferred events due), inside the effect's savepoint.
fn apply_order(
    conn: &WriterConn<'_>,
    routing: &Routing,
    source: &str,
    event: &Event,
    plan: &Plan,
    now_ms: i64,
    implicit: Option<&NewOrder>,
) -> Result<Recorded> {
    if let Some(order) = implicit {
        register_order(conn, order)?;
    }
    // On the writer's connection the order lists its first outbox row in the guarded update itself (`tally`): the
    // order's row is written once. Elsewhere trigger `outbox_listed_by_order` lists every row.
    let Some((from, listed)) = guarded_update(conn, plan, source, event, now_ms, tally::active())? else {
        let snapshot = order_snapshot(conn, &plan.order_id)?;
        let (outcome, why) = match ledger::explain(plan, snapshot.as_ref()) {
            Unapplied::NoOp(why) => (Outcome::Processed, why),
            Unapplied::Reject(why) => (Outcome::DeadLettered, why),
            Unapplied::Defer(why) => (Outcome::Deferred, why),
        };
        return Ok(Recorded { outcome, detail: Some(why) });
    };
    if fires_on("sqlite::after_ledger_update", conn) {
        return Err(injected("sqlite::after_ledger_update"));
    }
    let payload = payload::order_changed(plan, from.as_str(), source, event);
    // The order lists the rows in its own `outbox_ids` (migration 0006): its page is already dirty from the guarded
    // update, where an index on `outbox.order_id` would dirty one more page at a random place.
    let order_id = Some(plan.order_id.as_str());
    route_outbox(conn, routing, plan.outbox_kind, order_id, listed, source, event, &payload, now_ms)?;
    Ok(Recorded { outcome: Outcome::Processed, detail: None })
}

/// The plan's guarded `UPDATE`, which also appends the transition to the order's history (the audit lives in the
/// order's row: no other page is written) and, with `list`, the id the next outbox row will have to the order's
/// `outbox_ids`: one past the largest (SQLite never gives a row a smaller one). Returns the status the order had and
/// the id it listed, or `None` when the guard matched nothing.
///
/// Both are read back from the row by a second statement, not by `RETURNING`: SQLite runs a `RETURNING` clause
/// through a table of its own, created and dropped at every execution, which cost the writer about 10,000
/// instructions per payment more than the lookup of a row whose page the update has just written (callgrind;
/// BENCHMARKS.md's history, *Statements kept by the writer*). The writer is alone in its transaction: nothing comes between.
fn guarded_update(
    conn: &WriterConn<'_>,
    plan: &Plan,
    source: &str,
    event: &Event,
    now_ms: i64,
    list: bool,
) -> Result<Option<(OrderStatus, Option<i64>)>> {
    // `from` has one or two states; both are bound, the second repeating the first when there is one.
    let from1 = plan.from[0].as_str();
    let from2 = plan.from.get(1).map_or(from1, |s| s.as_str());
    let (amount, currency) = match &plan.expect_money {
        Some(m) => (Some(m.amount_minor), Some(m.currency.as_str())),
        None => (None, None),
    };
    let changed = conn
        .kept(
            "UPDATE orders SET prev_status = status, status = ?1, updated_at = ?2,
                    history = json_insert(history, '$[#]', json_array(?8, ?9, ?10, status, ?1, ?2)),
                    outbox_ids = iif(?11, json_insert(outbox_ids, '$[#]', (SELECT coalesce(max(id), 0) + 1 FROM outbox)),
                                     outbox_ids)
             WHERE id = ?3 AND status IN (?4, ?5)
               AND (?6 IS NULL OR (amount = ?6 AND currency = ?7))",
            |s| {
                s.execute(params![
                    plan.to.as_str(),
                    now_ms,
                    plan.order_id.as_str(),
                    from1,
                    from2,
                    amount,
                    currency,
                    source,
                    event.event_id.as_str(),
                    event.event_type,
                    list
                ])
            },
        )
        .db()?;
    if changed == 0 {
        return Ok(None);
    }
    let (prev, listed): (String, Option<i64>) = conn
        .kept("SELECT prev_status, iif(?2, outbox_ids ->> '$[#-1]', NULL) FROM orders WHERE id = ?1", |s| {
            s.query_row(params![plan.order_id.as_str(), list], |r| Ok((r.get(0)?, r.get(1)?)))
        })
        .db()?;
    tally::moved(Table::Orders, "", "", &prev, plan.to.as_str());
    Ok(Some((parse_status(&prev)?, listed)))
}

fn parse_status(s: &str) -> Result<OrderStatus> {
    OrderStatus::parse(s).ok_or_else(|| StoreError::inconsistent(format!("unknown order status {s:?}")))
}

fn order_snapshot(conn: &WriterConn<'_>, id: &OrderId) -> Result<Option<OrderSnapshot>> {
    let row: Option<(String, i64, String)> = conn
        .kept("SELECT status, amount, currency FROM orders WHERE id = ?1", |s| {
            s.query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        })
        .optional()
        .db()?;
    row.map(|(status, amount, currency)| {
        Ok(OrderSnapshot { status: parse_status(&status)?, money: crate::read::money(amount, &currency)? })
    })
    .transpose()
}

/// Writes the final state of an attempt to the inbox row, whose status is `from`. A deferral past the retry budget
/// becomes a dead letter.
#[allow(clippy::too_many_arguments)]
fn settle(
    conn: &WriterConn<'_>,
    ctx: &Ctx,
    row_id: i64,
    from: Outcome,
    mut recorded: Recorded,
    attempts: u32,
    now_ms: i64,
    source: &str,
    event: &Event,
) -> Result<Recorded> {
    let mut next_attempt_at = None;
    let mut waiting_order = None;
    if recorded.outcome == Outcome::Deferred {
        match ctx.retry.next(attempts, now_ms, fastrand::f64()) {
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
    let changed = conn
        .kept(
            "UPDATE inbox SET status = ?2, reason = ?3, attempts = ?4, next_attempt_at = ?5, order_id = ?6,
                              lease_owner = NULL, lease_until = NULL, updated_at = ?7
             WHERE id = ?1 AND status = ?8",
            |s| {
                s.execute(params![
                    row_id,
                    recorded.outcome.as_str(),
                    recorded.detail,
                    attempts,
                    next_attempt_at,
                    waiting_order,
                    now_ms,
                    from.as_str()
                ])
            },
        )
        .db()?;
    if changed != 1 {
        return Err(StoreError::inconsistent(format!("inbox row {row_id} is no longer {}", from.as_str())));
    }
    tally::moved(Table::Inbox, source, "", from.as_str(), recorded.outcome.as_str());
    log_attempt(conn, row_id, attempts, now_ms, &recorded)?;
    dead_letter_alert(conn, ctx, source, event.event_id.as_str(), &recorded, now_ms)?;
    Ok(recorded)
}

/// Leases due deferred rows (see [`payhook_store::Store::claim_due`]).
pub(crate) fn claim_due(conn: &WriterConn<'_>, claim: &Claim) -> Result<Vec<Claimed>> {
    // Most passes find nothing due: the worker is woken by every order registered. A probe of the partial index,
    // with the claim's own conditions, answers that without the claim's UPDATE, whose `IN (SELECT … LIMIT)` makes
    // SQLite build a zero-filled 10 KB Bloom filter and ephemeral tables on every execution (BENCHMARKS.md's
    // history, *Instructions per delivery*).
    let due: bool = conn
        .kept(
            "SELECT EXISTS (SELECT 1 FROM inbox INDEXED BY inbox_due
                            WHERE status = 'deferred' AND next_attempt_at <= ?1
                              AND (lease_until IS NULL OR lease_until <= ?1))",
            |s| s.query_row([claim.now_ms], |r| r.get(0)),
        )
        .db()?;
    if !due {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare_cached(
            "UPDATE inbox SET lease_owner = ?1, lease_until = ?2 + ?3
             WHERE id IN (SELECT id FROM inbox INDEXED BY inbox_due
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
pub(crate) fn retry(conn: &WriterConn<'_>, c: &Claimed, now_ms: i64, ctx: &Ctx) -> Result<Retried> {
    let row: Option<(String, i64, String, String)> = conn
        .kept(
            "SELECT event_type, occurred_at, business_key, effect FROM inbox
             WHERE id = ?1 AND status = 'deferred' AND lease_owner = ?2",
            |s| s.query_row(params![c.row_id, c.owner], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))),
        )
        .optional()
        .db()?;
    let Some((event_type, occurred_at, business_key, effect)) = row else {
        return Ok(Retried::LeaseLost);
    };
    let effect: Effect = serde_json::from_str(&effect).map_err(|e| StoreError::corrupt("a stored effect", e))?;
    let event = Event::new(c.event_id.clone(), event_type, occurred_at, business_key, effect);
    let recorded = apply(conn, ctx, c.source.as_str(), &event, now_ms, false)?;
    let recorded =
        settle(conn, ctx, c.row_id, Outcome::Deferred, recorded, c.attempts + 1, now_ms, c.source.as_str(), &event)?;
    Ok(Retried::Done(recorded))
}

/// Registers an order (see [`payhook_store::Store::register_order`]).
pub(crate) fn register_order(conn: &WriterConn<'_>, o: &NewOrder) -> Result<Registered> {
    let created = conn
        .kept(
            "INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, 'pending', ?4, ?4)
             ON CONFLICT (id) DO NOTHING",
            |s| s.execute(params![o.id.as_str(), o.money.amount_minor, o.money.currency.as_str(), o.now_ms]),
        )
        .db()?;
    if created == 1 {
        tally::count(Table::Orders, "", "", OrderStatus::Pending.as_str(), 1);
        // Events that arrived before their order are due now rather than at their next backoff step.
        conn.kept(
            "UPDATE inbox INDEXED BY inbox_waiting_order SET next_attempt_at = ?2
             WHERE status = 'deferred' AND order_id = ?1 AND next_attempt_at > ?2",
            |s| s.execute(params![o.id.as_str(), o.now_ms]),
        )
        .db()?;
        return Ok(Registered::Created);
    }
    let existing = order_snapshot(conn, &o.id)?
        .ok_or_else(|| StoreError::inconsistent(format!("order {} vanished during registration", o.id)))?;
    if existing.money == o.money {
        Ok(Registered::AlreadyExists)
    } else {
        Ok(Registered::Conflict { existing: existing.money })
    }
}

/// Replays a dead-lettered event (see [`payhook_store::Store::replay`]).
pub(crate) fn replay(
    conn: &WriterConn<'_>,
    ctx: &Ctx,
    source: &str,
    event_id: &str,
    parsed: &Parsed,
    now_ms: i64,
) -> Result<Replayed> {
    let row: Option<(i64, String, u32)> = conn
        .kept("SELECT id, status, attempts FROM inbox WHERE source = ?1 AND event_id = ?2", |s| {
            s.query_row(params![source, event_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        })
        .optional()
        .db()?;
    let Some((row_id, status, attempts)) = row else {
        return Ok(Replayed::NotFound);
    };
    let status = Outcome::parse(&status).ok_or_else(|| StoreError::inconsistent(format!("inbox status {status:?}")))?;
    if status != Outcome::DeadLettered {
        return Ok(Replayed::NotDeadLetter(status));
    }
    let attempt = attempts + 1;
    let event = match parsed {
        Parsed::Unparseable { reason, .. } => {
            let recorded = Recorded { outcome: Outcome::DeadLettered, detail: Some(reason.clone()) };
            conn.kept("UPDATE inbox SET reason = ?2, attempts = ?3, updated_at = ?4 WHERE id = ?1", |s| {
                s.execute(params![row_id, reason, attempt, now_ms])
            })
            .db()?;
            log_attempt(conn, row_id, attempt, now_ms, &recorded)?;
            return Ok(Replayed::Done(recorded));
        }
        Parsed::Event(e) => e,
    };
    let effect_json = match &event.effect {
        Effect::Ignored => None,
        effect => {
            Some(serde_json::to_string(effect).map_err(|e| StoreError::corrupt("an effect that does not encode", e))?)
        }
    };
    let (target_row, target_status) = if event.event_id.as_str() == event_id {
        conn.kept(
            "UPDATE inbox SET event_type = ?2, occurred_at = ?3, business_key = ?4, effect = ?5 WHERE id = ?1",
            |s| s.execute(params![row_id, event.event_type, event.occurred_at, event.business_key, effect_json]),
        )
        .db()?;
        (row_id, Outcome::DeadLettered)
    } else {
        // The bytes now parse to an event with its own id (they were stored under a derived one): record it under
        // that id, through the event-id dedup, and retire the derived row.
        let inserted = conn
            .kept(
                "INSERT INTO inbox (source, event_id, event_type, occurred_at, business_key, effect, status,
                                    attempts, received_at, updated_at, verification, headers, body)
                 SELECT source, ?2, ?3, ?4, ?5, ?6, 'processed', ?7, received_at, ?8, verification, headers, body
                 FROM inbox WHERE id = ?1
                 ON CONFLICT (source, event_id) DO NOTHING",
                |s| {
                    s.execute(params![
                        row_id,
                        event.event_id.as_str(),
                        event.event_type,
                        event.occurred_at,
                        event.business_key,
                        effect_json,
                        attempt,
                        now_ms
                    ])
                },
            )
            .db()?;
        let new_row = conn.last_insert_rowid();
        if inserted > 0 {
            tally::count(Table::Inbox, source, "", Outcome::Processed.as_str(), 1);
            // The payload goes with it (a row stored before `inbox_payloads` has none there: its own columns
            // were copied above).
            conn.kept(
                "INSERT INTO inbox_payloads (inbox_id, headers, body)
                 SELECT ?1, headers, body FROM inbox_payloads WHERE inbox_id = ?2",
                |s| s.execute(params![new_row, row_id]),
            )
            .db()?;
        }
        let retired =
            Recorded { outcome: Outcome::Duplicate, detail: Some(format!("replayed as event {}", event.event_id)) };
        conn.kept(
            "UPDATE inbox SET status = 'duplicate', reason = ?2, attempts = ?3, updated_at = ?4 WHERE id = ?1",
            |s| s.execute(params![row_id, retired.detail, attempt, now_ms]),
        )
        .db()?;
        tally::moved(Table::Inbox, source, "", Outcome::DeadLettered.as_str(), Outcome::Duplicate.as_str());
        log_attempt(conn, row_id, attempt, now_ms, &retired)?;
        if inserted == 0 {
            return Ok(Replayed::Done(Recorded {
                outcome: Outcome::Duplicate,
                detail: Some(format!("event {} was already recorded", event.event_id)),
            }));
        }
        (new_row, Outcome::Processed)
    };
    let recorded = if event.effect == Effect::Ignored {
        Recorded { outcome: Outcome::Ignored, detail: None }
    } else {
        apply(conn, ctx, source, event, now_ms, false)?
    };
    // The attempt count goes on: an event whose order still does not exist is dead-lettered again rather than
    // retried for another three days.
    let recorded = settle(conn, ctx, target_row, target_status, recorded, attempt, now_ms, source, event)?;
    Ok(Replayed::Done(recorded))
}
