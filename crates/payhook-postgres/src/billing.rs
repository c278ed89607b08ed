//! Subscriptions, entitlements and signature nonces: applying billing effects, the reads behind
//! `GET /v1/subscriptions/{id}` and `GET /v1/customers/{id}/entitlements`, and nonce claims.
//!
//! # How a billing effect is applied
//!
//! The rules are payhook-core's ([`payhook_core::billing`]): they need the stored subscription and entitlement,
//! so a billing effect cannot be applied blindly inside `payhook_ingest_batch` the way an order plan is. Instead:
//!
//! 1. The batch function records the delivery (inbox row, event-id dedup) and answers `billing` without claiming
//!    its business key.
//! 2. In the same transaction, after every delivery of the batch took its order locks and event keys, the batch
//!    takes the billing locks of all its billing deliveries at once, ascending ([`locks`]: `subscription:ID`, and
//!    for an invoice `invoice:ID` plus its subscription's, so that a subscription's end and a payment of one of its
//!    invoices never interleave).
//! 3. Then each billing delivery, in batch order, in a savepoint of its own: the rows are read under those locks,
//!    payhook-core decides, and `payhook_apply_subscription` / `payhook_apply_invoice` claim the business key and
//!    apply the decision with writes guarded on the state it was decided from (audit rows, outbox rows per sink).
//!    Anything but a plain success is settled with the batch's other settlements (`payhook_settle_batch`: a
//!    deferral is retried by the worker, and releases the key).
//!
//! The worker and replay take the same billing locks first, then the inbox row, then apply the same way. The locks
//! serialize every change of one subscription or invoice across instances, so 16 `invoice.paid` events of one
//! invoice in any batches of any instances grant once: the first claims its key and grants; the others find the
//! key taken (a duplicate) or, under another key, the entitlement already granted (a no-op).

use crate::ops::{Ctx, Failure, order_lock, sinks_of};
use crate::pipeline::{self, answers, send_all};
use crate::pool::{Object, Pool};
use payhook_core::billing::{
    self, ENTITLEMENT_GRANTED, ENTITLEMENT_REVOKED, EntitlementStatus, INVOICE_PAYMENT_FAILED, InvoiceChange,
    InvoiceDecision, SUBSCRIPTION_UPDATED, SubscriptionChange, SubscriptionDecision, SubscriptionSnapshot,
    SubscriptionStatus,
};
use payhook_core::event::{CustomerId, Effect, Event, SubscriptionId};
use payhook_store::payload;
use payhook_store::{
    BillingAuditEntry, EntitlementView, NonceClaim, NonceClaimed, Outcome, Recorded, StoreError, SubscriptionView,
};
use std::collections::HashMap;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

pub(crate) const LOCK_ALL_SQL: &str = "SELECT payhook_lock_all($1)";
const STATE_SQL: &str =
    "SELECT subscription_status, subscription_at, entitlement_status FROM payhook_billing_state($1, $2)";
const SUBSCRIPTION_SQL: &str = "SELECT outcome, detail FROM payhook_apply_subscription($1, $2, $3, $4, $5, $6, $7,
     $8, $9, $10, $11, $12, $13, $14, $15, ($16::text)::jsonb, $17, $18)";
const INVOICE_SQL: &str = "SELECT outcome, detail FROM payhook_apply_invoice($1, $2, $3, $4, $5, $6, $7, $8, $9,
     $10, $11, $12, $13, $14, $15, ($16::text)::jsonb)";
const NONCE_SQL: &str = "SELECT payhook_claim_nonce($1, $2, $3, $4, $5)";
const SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
const SUBSCRIPTION_VIEW_SQL: &str = "SELECT customer_id, status, current_period_end, occurred_at, source, event_id,
            created_at, updated_at
     FROM subscriptions WHERE id = $1";
const SUBSCRIPTION_AUDIT_SQL: &str = "SELECT object_id, source, event_id, event_type, from_status, to_status, at
     FROM billing_audit WHERE object = 'subscription' AND object_id = $1 ORDER BY seq";
const ENTITLEMENT_COLUMNS: &str = "invoice_id, customer_id, subscription_id, status, amount, currency, reason, \
                                   granted_at, revoked_at";
const ENTITLEMENT_AUDIT_COLUMNS: &str =
    "a.object_id, a.source, a.event_id, a.event_type, a.from_status, a.to_status, a.at";

/// The advisory lock of a billing object (`kind` is `subscription` or `invoice`): [`order_lock`] of `kind:id`.
///
/// Invariant: never changes, like [`order_lock`] (instances of two versions must agree; a unit test pins it).
pub(crate) fn object_lock(kind: &str, id: &str) -> i64 {
    order_lock(&format!("{kind}:{id}"))
}

/// The billing locks of an effect, ascending and without repeats; none for an effect that is not a billing one.
pub(crate) fn locks(effect: &Effect) -> Vec<i64> {
    let mut locks = match effect {
        Effect::Subscription(c) => vec![object_lock("subscription", c.subscription_id.as_str())],
        Effect::Invoice(c) => {
            let mut locks = vec![object_lock("invoice", c.invoice_id.as_str())];
            locks.extend(c.subscription_id.as_ref().map(|s| object_lock("subscription", s.as_str())));
            locks
        }
        Effect::Order { .. } | Effect::Ignored => Vec::new(),
    };
    locks.sort_unstable();
    locks.dedup();
    locks
}

/// True for the effects applied by this module.
pub(crate) fn is_billing(effect: &Effect) -> bool {
    matches!(effect, Effect::Subscription(_) | Effect::Invoice(_))
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize, what: &str) -> Result<T, StoreError> {
    row.try_get(i).map_err(|e| StoreError::corrupt(what, e))
}

/// The stored state a billing effect is decided from.
struct State {
    subscription: Option<SubscriptionSnapshot>,
    entitlement: Option<EntitlementStatus>,
}

fn state(row: &Row) -> Result<State, StoreError> {
    let status: Option<String> = get(row, 0, "stored subscription status")?;
    let at: Option<i64> = get(row, 1, "stored subscription time")?;
    let subscription = match (status, at) {
        (Some(status), Some(occurred_at)) => Some(SubscriptionSnapshot {
            status: SubscriptionStatus::parse(&status)
                .map_err(|e| StoreError::corrupt("stored subscription status", e))?,
            occurred_at,
        }),
        _ => None,
    };
    let entitlement: Option<String> = get(row, 2, "stored entitlement status")?;
    let entitlement = entitlement
        .map(|s| {
            EntitlementStatus::parse(&s)
                .ok_or_else(|| StoreError::inconsistent(format!("stored entitlement status {s:?}")))
        })
        .transpose()?;
    Ok(State { subscription, entitlement })
}

/// Applies a billing event: reads the rows it is decided from, asks payhook-core, and applies the decision. The
/// caller holds the effect's [`locks`] and settles the inbox row. With `savepoint`, the work runs in
/// `SAVEPOINT billing`, released on success; on an error the caller rolls back to it (the transaction goes on).
///
/// Returns the outcome before the retry policy: processed (with a detail when nothing changed), duplicate (the
/// business key is another event's) or deferred (the key is to be released).
pub(crate) async fn apply(
    client: &Object,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    now_ms: i64,
    savepoint: bool,
) -> Result<Recorded, Failure> {
    let (subscription_id, invoice_id) = match &event.effect {
        Effect::Subscription(c) => (Some(c.subscription_id.as_str()), None),
        Effect::Invoice(c) => (c.subscription_id.as_ref().map(SubscriptionId::as_str), Some(c.invoice_id.as_str())),
        Effect::Order { .. } | Effect::Ignored => {
            return Err(StoreError::inconsistent("billing effect: not a subscription or invoice effect").into());
        }
    };
    let read = client.prepare_cached(STATE_SQL).await?;
    let params: [&(dyn ToSql + Sync); 2] = [&subscription_id, &invoice_id];
    let begun = if savepoint { Some(pipeline::send(client.batch_execute("SAVEPOINT billing")).await) } else { None };
    let read = pipeline::send(client.query_one(&read, &params)).await;
    if let Some(begun) = begun {
        begun.answer().await?;
    }
    let state = state(&read.answer().await?)?;

    let row = match &event.effect {
        Effect::Subscription(change) => {
            apply_subscription(client, ctx, source, event, change, &state, now_ms, savepoint).await?
        }
        Effect::Invoice(change) => apply_invoice(client, ctx, source, event, change, &state, now_ms, savepoint).await?,
        Effect::Order { .. } | Effect::Ignored => {
            return Err(
                StoreError::inconsistent("billing effect: an order or ignored event reached the billing path").into()
            );
        }
    };
    let outcome: String = get(&row, 0, "billing outcome")?;
    let detail: Option<String> = get(&row, 1, "billing detail")?;
    let outcome = match outcome.as_str() {
        "processed" => Outcome::Processed,
        "duplicate" => Outcome::Duplicate,
        "deferred" => Outcome::Deferred,
        other => return Err(StoreError::inconsistent(format!("billing outcome {other:?}")).into()),
    };
    Ok(Recorded { outcome, detail })
}

/// Sends the apply statement and, with `savepoint`, the release of the savepoint after it; the statement's error
/// comes first.
async fn run_apply(
    client: &Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    savepoint: bool,
) -> Result<Row, Failure> {
    let stmt = client.prepare_cached(sql).await?;
    let applied = pipeline::send(client.query_one(&stmt, params)).await;
    let released =
        if savepoint { Some(pipeline::send(client.batch_execute("RELEASE SAVEPOINT billing")).await) } else { None };
    let row = applied.answer().await?;
    if let Some(released) = released {
        released.answer().await?;
    }
    Ok(row)
}

#[allow(clippy::too_many_arguments)]
async fn apply_subscription(
    client: &Object,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    change: &SubscriptionChange,
    state: &State,
    now_ms: i64,
    savepoint: bool,
) -> Result<Row, Failure> {
    let id = change.subscription_id.as_str();
    let seen = state.subscription.as_ref();
    let (decision, why) = match billing::decide_subscription(seen, change, event.occurred_at) {
        SubscriptionDecision::Insert => ("insert", None),
        SubscriptionDecision::Update => ("update", None),
        SubscriptionDecision::Stale(why) => ("stale", Some(why)),
        SubscriptionDecision::Defer(why) => ("defer", Some(why)),
    };
    let customer = change.customer_id.as_ref().map(CustomerId::as_str);
    let from = seen.map(|s| s.status.as_str());
    let payload = payload::subscription_changed(change, from, source, event);
    let revoke_reason =
        change.status.is_ended().then(|| format!("subscription {} ended ({})", change.subscription_id, change.status));
    let sinks = sinks_of(&ctx.routing, SUBSCRIPTION_UPDATED, &payload);
    // The revocations' documents are completed in SQL with the invoice and customer each entitlement holds; a
    // filter reads none of those (`payhook_store::filter`), so it is given the fields this event decides.
    let revoked = match ctx.routing.filters.is_empty() {
        true => String::new(),
        false => {
            let reason = revoke_reason.as_deref();
            payload::entitlement_changed(ENTITLEMENT_REVOKED, "", None, Some(id), None, reason, source, event)
        }
    };
    let revoke_sinks = sinks_of(&ctx.routing, ENTITLEMENT_REVOKED, &revoked);
    let seen_at = seen.map(|s| s.occurred_at);
    run_apply(
        client,
        SUBSCRIPTION_SQL,
        &[
            &source,
            &event.event_id.as_str(),
            &event.event_type,
            &event.occurred_at,
            &event.business_key,
            &now_ms,
            &decision,
            &why,
            &id,
            &customer,
            &change.status.as_str(),
            &change.current_period_end,
            &from,
            &seen_at,
            &sinks,
            &payload,
            &revoke_reason,
            &revoke_sinks,
        ],
        savepoint,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn apply_invoice(
    client: &Object,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    change: &InvoiceChange,
    state: &State,
    now_ms: i64,
    savepoint: bool,
) -> Result<Row, Failure> {
    let invoice = change.invoice_id.as_str();
    let customer = change.customer_id.as_ref().map(CustomerId::as_str);
    let subscription = change.subscription_id.as_ref().map(SubscriptionId::as_str);
    let money = change.money.as_ref();
    let decided = billing::decide_invoice(state.entitlement, change, state.subscription.as_ref(), event.occurred_at);
    let (decision, why, kind) = match decided {
        InvoiceDecision::NoOp(why) => ("noop", Some(why), None),
        InvoiceDecision::Grant => ("grant", None, Some(ENTITLEMENT_GRANTED)),
        InvoiceDecision::GrantEnded(why) => ("grant_ended", Some(why), None),
        InvoiceDecision::Tombstone(why) => ("tombstone", Some(why), None),
        InvoiceDecision::Revoke => {
            ("revoke", Some(format!("invoice {invoice} was refunded")), Some(ENTITLEMENT_REVOKED))
        }
        InvoiceDecision::Report => ("report", None, Some(INVOICE_PAYMENT_FAILED)),
    };
    let payload = kind.map(|kind| {
        let reason = if kind == ENTITLEMENT_REVOKED { why.as_deref() } else { None };
        payload::entitlement_changed(kind, invoice, customer, subscription, money, reason, source, event)
    });
    let sinks = kind.zip(payload.as_deref()).map(|(kind, document)| sinks_of(&ctx.routing, kind, document));
    run_apply(
        client,
        INVOICE_SQL,
        &[
            &source,
            &event.event_id.as_str(),
            &event.event_type,
            &event.occurred_at,
            &event.business_key,
            &now_ms,
            &decision,
            &why,
            &invoice,
            &customer,
            &subscription,
            &money.map(|m| m.amount_minor),
            &money.map(|m| m.currency.as_str()),
            &kind,
            &sinks,
            &payload,
        ],
        savepoint,
    )
    .await
}

/// Claims a signature nonce (see [`payhook_store::Store::claim_nonce`]): one statement, its own transaction.
pub(crate) async fn claim_nonce(pool: &Pool, claim: &NonceClaim) -> Result<NonceClaimed, StoreError> {
    crate::ops::rerun_on_conflict(pool, "nonce claim", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(NONCE_SQL).await?;
            let row = client
                .query_one(&stmt, &[&claim.keyid, &claim.nonce, &claim.body_sha256, &claim.expires_at, &claim.now])
                .await?;
            let claimed: String = get(&row, 0, "nonce claim")?;
            Ok(match claimed.as_str() {
                "new" => NonceClaimed::New,
                "redelivery" => NonceClaimed::Redelivery,
                "replayed" => NonceClaimed::Replayed,
                other => return Err(StoreError::inconsistent(format!("nonce claim {other:?}")).into()),
            })
        }
    })
    .await
}

fn audit_entry(r: &Row) -> Result<(String, BillingAuditEntry), StoreError> {
    Ok((
        get(r, 0, "audit object")?,
        BillingAuditEntry {
            source: get(r, 1, "audit source")?,
            event_id: get(r, 2, "audit event id")?,
            event_type: get(r, 3, "audit event type")?,
            from: get(r, 4, "audit from")?,
            to: get(r, 5, "audit to")?,
            at_ms: get(r, 6, "audit time")?,
        },
    ))
}

/// Entitlement rows with their audit rows (oldest first, each entitlement's from `audits`).
fn entitlement_views(rows: &[Row], audits: &[Row]) -> Result<Vec<EntitlementView>, StoreError> {
    let mut history: HashMap<String, Vec<BillingAuditEntry>> = HashMap::new();
    for a in audits {
        let (object, entry) = audit_entry(a)?;
        history.entry(object).or_default().push(entry);
    }
    rows.iter()
        .map(|r| {
            let invoice_id: String = get(r, 0, "entitlement invoice")?;
            let status: String = get(r, 3, "entitlement status")?;
            Ok(EntitlementView {
                status: EntitlementStatus::parse(&status)
                    .ok_or_else(|| StoreError::inconsistent(format!("stored entitlement status {status:?}")))?,
                customer_id: get(r, 1, "entitlement customer")?,
                subscription_id: get(r, 2, "entitlement subscription")?,
                amount_minor: get(r, 4, "entitlement amount")?,
                currency: get(r, 5, "entitlement currency")?,
                reason: get(r, 6, "entitlement reason")?,
                granted_at_ms: get(r, 7, "entitlement granted at")?,
                revoked_at_ms: get(r, 8, "entitlement revoked at")?,
                history: history.remove(&invoice_id).unwrap_or_default(),
                invoice_id,
            })
        })
        .collect()
}

/// The entitlements `filter` selects (`customer_id` or `subscription_id` = $1) and their audit rows.
fn entitlement_sql(filter: &str) -> (String, String) {
    // COLLATE "C": byte order, whatever the database's collation, as the SQLite backend sorts.
    let rows = format!(
        "SELECT {ENTITLEMENT_COLUMNS} FROM entitlements WHERE {filter} = $1
         ORDER BY updated_at, invoice_id COLLATE \"C\""
    );
    let audits = format!(
        "SELECT {ENTITLEMENT_AUDIT_COLUMNS} FROM entitlements e
         JOIN billing_audit a ON a.object = 'entitlement' AND a.object_id = e.invoice_id
         WHERE e.{filter} = $1 ORDER BY a.seq"
    );
    (rows, audits)
}

/// Runs `queries` (each with the one parameter `key`) in one REPEATABLE READ snapshot, in one round trip.
async fn snapshot(pool: &Pool, queries: &[&str], key: &str) -> Result<Vec<Vec<Row>>, StoreError> {
    crate::ops::on_connection(pool, async |client: &Object| {
        let mut statements = Vec::with_capacity(queries.len());
        for sql in queries {
            statements.push(client.prepare_cached(sql).await?);
        }
        let params: [&(dyn ToSql + Sync); 1] = [&key];
        let begun = pipeline::send(client.batch_execute(SNAPSHOT)).await;
        let reads = send_all(statements.iter().map(|s| client.query(s, &params)).collect()).await;
        let ended = pipeline::send(client.batch_execute("COMMIT")).await;
        begun.answer().await?;
        let rows = answers(reads).await.into_iter().collect::<Result<Vec<_>, _>>()?;
        ended.answer().await?;
        Ok(rows)
    })
    .await
}

/// A subscription with its history and entitlements, from one snapshot.
pub(crate) async fn subscription(pool: &Pool, id: &SubscriptionId) -> Result<Option<SubscriptionView>, StoreError> {
    let (entitlements, audits) = entitlement_sql("subscription_id");
    let lists =
        snapshot(pool, &[SUBSCRIPTION_VIEW_SQL, SUBSCRIPTION_AUDIT_SQL, &entitlements, &audits], id.as_str()).await?;
    let [row, history, entitlements, audits] = lists.as_slice() else {
        return Err(StoreError::inconsistent("subscription: four answers to four queries"));
    };
    let Some(r) = row.first() else { return Ok(None) };
    Ok(Some(SubscriptionView {
        id: id.as_str().to_owned(),
        customer_id: get(r, 0, "subscription customer")?,
        status: get(r, 1, "subscription status")?,
        current_period_end: get(r, 2, "subscription period end")?,
        occurred_at: get(r, 3, "subscription time")?,
        source: get(r, 4, "subscription source")?,
        event_id: get(r, 5, "subscription event")?,
        created_at_ms: get(r, 6, "subscription created")?,
        updated_at_ms: get(r, 7, "subscription updated")?,
        history: history.iter().map(|a| audit_entry(a).map(|(_, e)| e)).collect::<Result<_, _>>()?,
        entitlements: entitlement_views(entitlements, audits)?,
    }))
}

/// A customer's entitlements, from one snapshot.
pub(crate) async fn entitlements(pool: &Pool, customer: &CustomerId) -> Result<Vec<EntitlementView>, StoreError> {
    let (entitlements, audits) = entitlement_sql("customer_id");
    let lists = snapshot(pool, &[&entitlements, &audits], customer.as_str()).await?;
    let [rows, audits] = lists.as_slice() else {
        return Err(StoreError::inconsistent("entitlements: two answers to two queries"));
    };
    entitlement_views(rows, audits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_locks_are_namespaced_and_never_change() {
        // Pinned: instances of different versions on one database must agree on every object's lock.
        assert_eq!(object_lock("subscription", "sub_1"), order_lock("subscription:sub_1"));
        assert_ne!(object_lock("subscription", "x"), object_lock("invoice", "x"));
        assert_ne!(object_lock("invoice", "x"), order_lock("x"));
    }
}
