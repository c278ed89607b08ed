//! Subscriptions, entitlements and signature nonces: the writes run by the writer inside an event's savepoint, and
//! the reads behind `GET /v1/subscriptions/{id}` and `GET /v1/customers/{id}/entitlements`.
//!
//! The rules are payhook-core's ([`payhook_core::billing`]); this module reads the stored row, asks the rules, and
//! writes the change with its audit row and outbox rows. Every update is guarded on the state it was decided from,
//! so a change can never be applied on top of a state the rules did not see.

use crate::context::{Ctx, Result, SqlResult};
use crate::kept::WriterConn;
use crate::outbox::route_outbox;
use crate::read::in_snapshot;
use crate::writer::unavailable;
use payhook_core::billing::{
    self, ENTITLEMENT_GRANTED, ENTITLEMENT_REVOKED, EntitlementStatus, INVOICE_PAYMENT_FAILED, InvoiceChange,
    InvoiceDecision, SUBSCRIPTION_UPDATED, SubscriptionChange, SubscriptionDecision, SubscriptionSnapshot,
    SubscriptionStatus,
};
use payhook_core::event::{CustomerId, Event, SubscriptionId};
use payhook_store::payload;
use payhook_store::{
    BillingAuditEntry, EntitlementView, NonceClaim, NonceClaimed, Outcome, Recorded, StoreError, SubscriptionView,
};
use rusqlite::{Connection, OptionalExtension, params};

fn processed(detail: Option<String>) -> Recorded {
    Recorded { outcome: Outcome::Processed, detail }
}

fn subscription_snapshot(conn: &WriterConn<'_>, id: &str) -> Result<Option<SubscriptionSnapshot>> {
    let row: Option<(String, i64)> = conn
        .prepare_cached("SELECT status, occurred_at FROM subscriptions WHERE id = ?1")
        .db()?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .db()?;
    row.map(|(status, occurred_at)| {
        let status =
            SubscriptionStatus::parse(&status).map_err(|e| StoreError::corrupt("stored subscription status", e))?;
        Ok(SubscriptionSnapshot { status, occurred_at })
    })
    .transpose()
}

#[allow(clippy::too_many_arguments)]
fn audit(
    conn: &WriterConn<'_>,
    object: &str,
    object_id: &str,
    source: &str,
    event: &Event,
    from: Option<&str>,
    to: &str,
    now_ms: i64,
) -> Result<()> {
    // An event changes an object at most once, except that a subscription's end may revoke an entitlement the same
    // event could not have granted: the key can never collide within one object.
    conn.prepare_cached(
        "INSERT INTO billing_audit (object, object_id, source, event_id, event_type, from_status, to_status, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .db()?
    .execute(params![object, object_id, source, event.event_id.as_str(), event.event_type, from, to, now_ms])
    .db()?;
    Ok(())
}

/// Applies a subscription event (inside the caller's savepoint, after its business key was claimed).
pub(crate) fn apply_subscription(
    conn: &WriterConn<'_>,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    change: &SubscriptionChange,
    now_ms: i64,
) -> Result<Recorded> {
    let id = change.subscription_id.as_str();
    let current = subscription_snapshot(conn, id)?;
    let customer = change.customer_id.as_ref().map(CustomerId::as_str);
    let written = match billing::decide_subscription(current.as_ref(), change, event.occurred_at) {
        SubscriptionDecision::Stale(why) => return Ok(processed(Some(why))),
        SubscriptionDecision::Defer(why) => return Ok(Recorded { outcome: Outcome::Deferred, detail: Some(why) }),
        SubscriptionDecision::Insert => conn
            .prepare_cached(
                "INSERT INTO subscriptions (id, customer_id, status, current_period_end, occurred_at, source,
                                            event_id, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)
                 ON CONFLICT (id) DO NOTHING",
            )
            .db()?
            .execute(params![
                id,
                customer,
                change.status.as_str(),
                change.current_period_end,
                event.occurred_at,
                source,
                event.event_id.as_str(),
                now_ms
            ])
            .db()?,
        SubscriptionDecision::Update => {
            let seen =
                current.as_ref().ok_or_else(|| StoreError::inconsistent("subscription update: no stored row"))?;
            conn.prepare_cached(
                "UPDATE subscriptions SET customer_id = coalesce(?2, customer_id), status = ?3,
                        current_period_end = coalesce(?4, current_period_end), occurred_at = ?5, source = ?6,
                        event_id = ?7, updated_at = ?8
                 WHERE id = ?1 AND status = ?9 AND occurred_at = ?10",
            )
            .db()?
            .execute(params![
                id,
                customer,
                change.status.as_str(),
                change.current_period_end,
                event.occurred_at,
                source,
                event.event_id.as_str(),
                now_ms,
                seen.status.as_str(),
                seen.occurred_at
            ])
            .db()?
        }
    };
    if written == 0 {
        // Only a writer that does not hold the database's write lock could get here; retrying is safe.
        return Ok(Recorded {
            outcome: Outcome::Deferred,
            detail: Some(format!("subscription {id} changed concurrently")),
        });
    }
    let from = current.as_ref().map(|c| c.status.as_str());
    audit(conn, "subscription", id, source, event, from, change.status.as_str(), now_ms)?;
    let payload = payload::subscription_changed(change, from, source, event);
    route_outbox(conn, &ctx.routing, SUBSCRIPTION_UPDATED, None, None, source, event, &payload, now_ms)?;
    if change.status.is_ended() {
        revoke_for_subscription(conn, ctx, source, event, &change.subscription_id, &change.status, now_ms)?;
    }
    Ok(processed(None))
}

/// The end of a subscription revokes every entitlement its invoices granted.
fn revoke_for_subscription(
    conn: &WriterConn<'_>,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    subscription: &SubscriptionId,
    status: &SubscriptionStatus,
    now_ms: i64,
) -> Result<()> {
    let reason = format!("subscription {subscription} ended ({status})");
    let revoked: Vec<(String, Option<String>)> = conn
        .prepare_cached(
            "UPDATE entitlements SET status = 'revoked', reason = ?2, revoked_at = ?3, updated_at = ?3
             WHERE subscription_id = ?1 AND status = 'granted'
             RETURNING invoice_id, customer_id",
        )
        .db()?
        .query_map(params![subscription.as_str(), reason, now_ms], |r| Ok((r.get(0)?, r.get(1)?)))
        .db()?
        .collect::<rusqlite::Result<_>>()
        .db()?;
    for (invoice_id, customer_id) in revoked {
        audit(conn, "entitlement", &invoice_id, source, event, Some("granted"), "revoked", now_ms)?;
        let payload = payload::entitlement_changed(
            ENTITLEMENT_REVOKED,
            &invoice_id,
            customer_id.as_deref(),
            Some(subscription.as_str()),
            None,
            Some(&reason),
            source,
            event,
        );
        route_outbox(conn, &ctx.routing, ENTITLEMENT_REVOKED, None, None, source, event, &payload, now_ms)?;
    }
    Ok(())
}

/// Applies an invoice event (inside the caller's savepoint, after its business key was claimed).
pub(crate) fn apply_invoice(
    conn: &WriterConn<'_>,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    change: &InvoiceChange,
    now_ms: i64,
) -> Result<Recorded> {
    let invoice = change.invoice_id.as_str();
    let customer = change.customer_id.as_ref().map(CustomerId::as_str);
    let subscription_id = change.subscription_id.as_ref().map(SubscriptionId::as_str);
    let current: Option<String> = conn
        .prepare_cached("SELECT status FROM entitlements WHERE invoice_id = ?1")
        .db()?
        .query_row([invoice], |r| r.get(0))
        .optional()
        .db()?;
    let current = current
        .map(|s| {
            EntitlementStatus::parse(&s)
                .ok_or_else(|| StoreError::inconsistent(format!("stored entitlement status {s:?}")))
        })
        .transpose()?;
    let subscription = match subscription_id {
        Some(id) => subscription_snapshot(conn, id)?,
        None => None,
    };
    let money = change.money.as_ref();
    let insert = |status: EntitlementStatus, reason: Option<&str>| -> Result<()> {
        let (granted_at, revoked_at) = match status {
            EntitlementStatus::Granted => (Some(now_ms), None),
            EntitlementStatus::Revoked => (None, Some(now_ms)),
        };
        conn.prepare_cached(
            "INSERT INTO entitlements (invoice_id, customer_id, subscription_id, status, amount, currency, reason,
                                       granted_at, revoked_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .db()?
        .execute(params![
            invoice,
            customer,
            subscription_id,
            status.as_str(),
            money.map(|m| m.amount_minor),
            money.map(|m| m.currency.as_str()),
            reason,
            granted_at,
            revoked_at,
            now_ms
        ])
        .db()?;
        audit(conn, "entitlement", invoice, source, event, None, status.as_str(), now_ms)
    };
    match billing::decide_invoice(current, change, subscription.as_ref(), event.occurred_at) {
        InvoiceDecision::NoOp(why) => Ok(processed(Some(why))),
        InvoiceDecision::Grant => {
            insert(EntitlementStatus::Granted, None)?;
            let payload = payload::entitlement_changed(
                ENTITLEMENT_GRANTED,
                invoice,
                customer,
                subscription_id,
                money,
                None,
                source,
                event,
            );
            route_outbox(conn, &ctx.routing, ENTITLEMENT_GRANTED, None, None, source, event, &payload, now_ms)?;
            Ok(processed(None))
        }
        InvoiceDecision::GrantEnded(why) | InvoiceDecision::Tombstone(why) => {
            insert(EntitlementStatus::Revoked, Some(&why))?;
            Ok(processed(Some(why)))
        }
        InvoiceDecision::Revoke => {
            let reason = format!("invoice {invoice} was refunded");
            let row: Option<(Option<String>, Option<String>)> = conn
                .prepare_cached(
                    "UPDATE entitlements SET status = 'revoked', reason = ?2, revoked_at = ?3, updated_at = ?3
                     WHERE invoice_id = ?1 AND status = 'granted'
                     RETURNING customer_id, subscription_id",
                )
                .db()?
                .query_row(params![invoice, reason, now_ms], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
                .db()?;
            let Some((stored_customer, stored_subscription)) = row else {
                return Ok(Recorded {
                    outcome: Outcome::Deferred,
                    detail: Some(format!("entitlement of invoice {invoice} changed concurrently")),
                });
            };
            audit(conn, "entitlement", invoice, source, event, Some("granted"), "revoked", now_ms)?;
            let payload = payload::entitlement_changed(
                ENTITLEMENT_REVOKED,
                invoice,
                customer.or(stored_customer.as_deref()),
                subscription_id.or(stored_subscription.as_deref()),
                money,
                Some(&reason),
                source,
                event,
            );
            route_outbox(conn, &ctx.routing, ENTITLEMENT_REVOKED, None, None, source, event, &payload, now_ms)?;
            Ok(processed(None))
        }
        InvoiceDecision::Report => {
            let payload = payload::entitlement_changed(
                INVOICE_PAYMENT_FAILED,
                invoice,
                customer,
                subscription_id,
                money,
                None,
                source,
                event,
            );
            route_outbox(conn, &ctx.routing, INVOICE_PAYMENT_FAILED, None, None, source, event, &payload, now_ms)?;
            Ok(processed(None))
        }
    }
}

/// Claims a signature nonce (see [`payhook_store::Store::claim_nonce`]).
pub(crate) fn claim_nonce(conn: &WriterConn<'_>, claim: &NonceClaim) -> Result<NonceClaimed> {
    // Pruning a bounded slice per claim keeps the table at about the window's worth of nonces without a sweeper.
    conn.prepare_cached(
        "DELETE FROM signature_nonces WHERE (keyid, nonce) IN (
             SELECT keyid, nonce FROM signature_nonces WHERE expires_at < ?1 ORDER BY expires_at LIMIT 64)",
    )
    .db()?
    .execute([claim.now])
    .db()?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO signature_nonces (keyid, nonce, body_sha256, expires_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (keyid, nonce) DO UPDATE SET body_sha256 = excluded.body_sha256,
                                                      expires_at = excluded.expires_at
             WHERE signature_nonces.expires_at < ?5",
        )
        .db()?
        .execute(params![claim.keyid, claim.nonce, claim.body_sha256, claim.expires_at, claim.now])
        .db()?;
    // A row that expired before now is taken over: its window has passed.
    if inserted == 1 {
        return Ok(NonceClaimed::New);
    }
    let seen: String = conn
        .prepare_cached("SELECT body_sha256 FROM signature_nonces WHERE keyid = ?1 AND nonce = ?2")
        .db()?
        .query_row(params![claim.keyid, claim.nonce], |r| r.get(0))
        .db()?;
    Ok(if seen == claim.body_sha256 { NonceClaimed::Redelivery } else { NonceClaimed::Replayed })
}

fn audit_rows(conn: &Connection, object: &str, id: &str) -> Result<Vec<BillingAuditEntry>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT source, event_id, event_type, from_status, to_status, at FROM billing_audit
             WHERE object = ?1 AND object_id = ?2 ORDER BY at, event_id",
        )
        .map_err(unavailable)?;
    let rows = stmt
        .query_map(params![object, id], |r| {
            Ok(BillingAuditEntry {
                source: r.get(0)?,
                event_id: r.get(1)?,
                event_type: r.get(2)?,
                from: r.get(3)?,
                to: r.get(4)?,
                at_ms: r.get(5)?,
            })
        })
        .map_err(unavailable)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(unavailable)
}

const ENTITLEMENT_COLUMNS: &str = "invoice_id, customer_id, subscription_id, status, amount, currency, reason, \
                                   granted_at, revoked_at";

fn entitlement_rows(conn: &Connection, filter: &str, key: &str) -> Result<Vec<EntitlementView>> {
    let sql =
        format!("SELECT {ENTITLEMENT_COLUMNS} FROM entitlements WHERE {filter} = ?1 ORDER BY updated_at, invoice_id");
    let mut stmt = conn.prepare_cached(&sql).map_err(unavailable)?;
    let rows = stmt
        .query_map([key], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<i64>>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, Option<String>>(6)?,
                r.get::<_, Option<i64>>(7)?,
                r.get::<_, Option<i64>>(8)?,
            ))
        })
        .map_err(unavailable)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(unavailable)?;
    rows.into_iter()
        .map(|(invoice_id, customer_id, subscription_id, status, amount, currency, reason, granted, revoked)| {
            let status = EntitlementStatus::parse(&status)
                .ok_or_else(|| StoreError::inconsistent(format!("stored entitlement status {status:?}")))?;
            let history = audit_rows(conn, "entitlement", &invoice_id)?;
            Ok(EntitlementView {
                invoice_id,
                customer_id,
                subscription_id,
                status,
                amount_minor: amount,
                currency,
                reason,
                granted_at_ms: granted,
                revoked_at_ms: revoked,
                history,
            })
        })
        .collect()
}

/// A subscription with its history and entitlements, from one snapshot.
pub(crate) fn subscription(conn: &Connection, id: &SubscriptionId) -> Result<Option<SubscriptionView>> {
    in_snapshot(conn, |tx| {
        let view = tx
            .prepare_cached(
                "SELECT customer_id, status, current_period_end, occurred_at, source, event_id, created_at, updated_at
                 FROM subscriptions WHERE id = ?1",
            )
            .map_err(unavailable)?
            .query_row([id.as_str()], |r| {
                Ok(SubscriptionView {
                    id: id.as_str().to_owned(),
                    customer_id: r.get(0)?,
                    status: r.get(1)?,
                    current_period_end: r.get(2)?,
                    occurred_at: r.get(3)?,
                    source: r.get(4)?,
                    event_id: r.get(5)?,
                    created_at_ms: r.get(6)?,
                    updated_at_ms: r.get(7)?,
                    history: Vec::new(),
                    entitlements: Vec::new(),
                })
            })
            .optional()
            .map_err(unavailable)?;
        let view = match view {
            None => None,
            Some(mut view) => {
                view.history = audit_rows(tx, "subscription", id.as_str())?;
                view.entitlements = entitlement_rows(tx, "subscription_id", id.as_str())?;
                Some(view)
            }
        };
        Ok(view)
    })
}

/// A customer's entitlements, from one snapshot.
pub(crate) fn entitlements(conn: &Connection, customer: &CustomerId) -> Result<Vec<EntitlementView>> {
    in_snapshot(conn, |tx| entitlement_rows(tx, "customer_id", customer.as_str()))
}
