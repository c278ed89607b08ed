//! The retry worker's side: leasing due deferred rows and re-applying one under its locks.

use super::settle::{decide, snapshot};
use super::*;

pub(super) const STORED_SQL: &str = "SELECT event_type, occurred_at, business_key, effect FROM inbox
     WHERE source = $1 AND event_id = $2 AND id = $3";

pub(super) const LEASED_SQL: &str = "SELECT 1 FROM inbox
     WHERE source = $1 AND event_id = $2 AND id = $3 AND status = 'deferred' AND lease_owner = $4 FOR UPDATE";
pub(super) const REAPPLY_SQL: &str = "SELECT outcome, detail, order_status, order_amount, order_currency
     FROM payhook_reapply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";
/// Leases due deferred rows (`FOR UPDATE SKIP LOCKED`), each updated by its bucket and id: a join of the
/// partitioned inbox with the chosen rows would be planned over every partition.
pub(super) const CLAIM_SQL: &str =
    "SELECT id, source, event_id, attempts, next_attempt_at FROM payhook_claim_due($1, $2, $3, $4)";

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
pub(super) async fn reapply(
    client: &Object,
    ctx: &Ctx,
    source: &str,
    event: &Event,
    change: &Change,
    target: Settle,
) -> Result<(Recorded, Settle), Failure> {
    let reapply = client.prepare_cached(REAPPLY_SQL).await?;
    let sinks = sinks_of(&ctx.routing, change.plan.outbox_kind, change.document());
    let row = client
        .query_one(
            &reapply,
            &[
                &source,
                &event.event_id.as_str(),
                &event.event_type,
                &change.payloads,
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
pub(super) async fn settle_and_commit(
    client: &Object,
    ctx: &Ctx,
    settles: &[Settle],
    mut follow: FollowUps,
    audit: Option<(&AuditEntry, &str)>,
) -> Result<(), Failure> {
    let settle = client.prepare_cached(SETTLE_SQL).await?;
    let mut columns = SettleColumns::default();
    for s in settles {
        columns.push(s);
    }
    columns.follow(&mut follow, &ctx.routing);
    let params = columns.params();
    let settled = send(client.query_one(&settle, &params)).await;
    // Sends the audit entry's insert (if any) and the COMMIT when first polled, once the insert is prepared on this
    // connection: in the common case with the settlement, before any answer is read.
    let committed = send(crate::audit::commit_with(client, audit)).await;
    // A failed settlement aborted the transaction, and the COMMIT after it rolled back: report the settlement.
    settled.answer().await?;
    committed.answer().await?;
    Ok(())
}

pub(super) async fn retry_on(client: &Object, c: &Claimed, now_ms: i64, ctx: &Ctx) -> Result<Retried, Failure> {
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
    let event = Event::new(c.event_id.clone(), event_type, occurred_at, business_key, effect);
    // An order event takes its order's lock; a billing event the locks of its subscription or invoice.
    let change = ledger::plan(&event.effect).map(|plan| Change::new(plan, c.source.as_str(), &event));
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
    settle_and_commit(client, ctx, &[settlement], follow, None).await?;
    Ok(Retried::Done(recorded))
}
