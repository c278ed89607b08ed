//! Replaying a dead letter: re-parsed bytes applied in the row's own transaction, under its event id or, when
//! the bytes now name their own, under that one.

use super::worker::{reapply, settle_and_commit};
use super::*;

pub(super) const REPLAY_ROW_SQL: &str =
    "SELECT id, status, attempts FROM inbox WHERE source = $1 AND event_id = $2 FOR UPDATE";
pub(super) const REPLAY_REPARSED_SQL: &str =
    "UPDATE inbox SET event_type = $3, occurred_at = $4, business_key = $5, effect = $6
     WHERE source = $1 AND event_id = $2";
/// Claims the replayed event's own key, then copies the derived row under it into the held partition (it keeps
/// the original `received_at`, so it is pruned row by row like the other rows held there).
pub(super) const REPLAY_RECORD_SQL: &str = "WITH claimed AS (
         INSERT INTO inbox_keys (source, event_id) VALUES ($1, $3) ON CONFLICT DO NOTHING RETURNING 1)
     INSERT INTO inbox (source, event_id, event_type, occurred_at, business_key, effect,
                        status, attempts, received_at, updated_at, verification, headers, body, bucket)
     SELECT source, $3, $4, $5, $6, $7, 'processed', $8, received_at, $9, verification, headers, body, 0
     FROM inbox WHERE source = $1 AND event_id = $2 AND EXISTS (SELECT 1 FROM claimed)
     RETURNING id";

/// Replays a dead-lettered event in its own transaction, with `audit` (when given) appended in it with the
/// outcome (see [`payhook_store::Store::replay_audited`]).
///
/// Locks as every transaction does: the order (or the billing objects) of the re-parsed event first, then its inbox row (`FOR UPDATE`, so
/// that concurrent replays of one event queue up and the later one finds it no longer dead), then the keys it
/// writes.
pub(crate) async fn replay(
    pool: &Pool,
    ctx: &Ctx,
    (source, event_id): (&SourceName, &EventId),
    parsed: &Parsed,
    now_ms: i64,
    audit: Option<&AuditEntry>,
) -> Result<Replayed, StoreError> {
    rerun_on_conflict(pool, "replay", || {
        async |client: &Object| {
            replay_on(client, ctx, (source.as_str(), event_id.as_str()), parsed, now_ms, audit).await
        }
    })
    .await
}

pub(super) async fn replay_on(
    client: &Object,
    ctx: &Ctx,
    (source, event_id): (&str, &str),
    parsed: &Parsed,
    now_ms: i64,
    audit: Option<&AuditEntry>,
) -> Result<Replayed, Failure> {
    // The entry and the outcome it is appended with, for a replay that ended with `replayed`.
    let entry = |replayed: &Replayed| audit.zip(payhook_store::audit::replay_outcome(replayed));
    let event = match parsed {
        Parsed::Event(e) => Some(e),
        Parsed::Unparseable { .. } => None,
    };
    let change = event.and_then(|e| Some(Change::new(ledger::plan(&e.effect)?, source, e)));
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
        let replayed = Replayed::NotDeadLetter(status);
        crate::audit::commit_with(client, entry(&replayed)).await?;
        return Ok(replayed);
    }
    // The attempt count goes on: an event whose order still does not exist is dead-lettered again rather than
    // retried for another three days.
    let attempt = u32::try_from(attempts).map_err(|e| StoreError::corrupt("attempts", e))? + 1;

    let event = match parsed {
        Parsed::Event(event) => event,
        Parsed::Unparseable { reason, .. } => {
            let recorded = Recorded { outcome: Outcome::DeadLettered, detail: Some(reason.clone()) };
            let settle = Settle::recorded(source, event_id, row_id, attempt, now_ms, &recorded);
            let replayed = Replayed::Done(recorded);
            settle_and_commit(client, ctx, &[settle], FollowUps::default(), entry(&replayed)).await?;
            return Ok(replayed);
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
            let replayed = Replayed::Done(Recorded {
                outcome: Outcome::Duplicate,
                detail: Some(format!("event {} was already recorded", event.event_id)),
            });
            settle_and_commit(client, ctx, &settles, FollowUps::default(), entry(&replayed)).await?;
            return Ok(replayed);
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
    let replayed = Replayed::Done(recorded);
    settle_and_commit(client, ctx, &settles, follow, entry(&replayed)).await?;
    Ok(replayed)
}
