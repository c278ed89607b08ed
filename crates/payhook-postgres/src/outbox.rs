//! The dispatchers' operations on the outbox, and alerts: claims under a lease with `FOR UPDATE SKIP LOCKED`,
//! outcomes recorded only by the lease holder, re-queueing dead rows, and raising alerts through the schema's
//! `payhook_raise_alert`, whose window row lock makes them race-free across instances.
//!
//! Each is one statement (autocommit: atomic on its own), or, for a re-queue with its audit entry, one transaction
//! of two, run again when the server rolled it back for a deadlock.

use crate::ops::{Ctx, Failure, rerun_on_conflict};
use crate::pipeline::send;
use crate::pool::{Object, Pool};
use payhook_store::audit::retry_outbox_outcome;
use payhook_store::{ALERT_KIND, Alert, AuditEntry, Claim, Dispatched, Held, KeyOrder, OutboxJob, StoreError};
use tokio_postgres::types::ToSql;

/// The claim's condition on a candidate row `o` under per-key order: no earlier row of its sink and key is pending
/// (leased or not) or, when dead rows hold their key, dead. A row without a key (an alert) has none. It is part of
/// the claiming statement: a row of a key whose earlier row another instance has leased, or is sending, is never
/// a candidate, and the rows of one key are written under one advisory lock, so a later row is never visible
/// before an earlier one. `outbox_key_open` answers it.
macro_rules! no_earlier_open_row {
    ($statuses:literal) => {
        concat!(
            " AND NOT EXISTS (SELECT 1 FROM outbox e
                              WHERE e.sink = o.sink AND e.order_key = o.order_key AND e.id < o.id
                                AND e.status IN ('pending', 'dead')",
            $statuses,
            ")"
        )
    };
}

macro_rules! claim_sql {
    ($condition:expr) => {
        concat!(
            "WITH due AS (
                 SELECT o.id FROM outbox o
                 WHERE o.sink = $5 AND o.status = 'pending' AND o.next_attempt_at <= $2
                   AND (o.lease_until IS NULL OR o.lease_until <= $2)",
            $condition,
            "
                 ORDER BY o.next_attempt_at, o.id
                 LIMIT $4
                 FOR UPDATE OF o SKIP LOCKED)
             UPDATE outbox o SET lease_owner = $1, lease_until = $2 + $3
             FROM due WHERE o.id = due.id
             RETURNING o.id, o.sink, o.kind, o.payload::text, o.attempts, o.created_at, o.order_key"
        )
    };
}

const CLAIM_HOLD_SQL: &str = claim_sql!(no_earlier_open_row!(""));
const CLAIM_SKIP_SQL: &str = claim_sql!(no_earlier_open_row!(" AND e.status = 'pending'"));
const CLAIM_UNORDERED_SQL: &str = claim_sql!("");

macro_rules! held_sql {
    ($statuses:literal) => {
        concat!(
            "SELECT count(*), min(p.created_at)
             FROM (SELECT id, order_key, created_at FROM outbox
                   WHERE sink = $1 AND status = 'pending' ORDER BY next_attempt_at LIMIT $2) p
             WHERE EXISTS (SELECT 1 FROM outbox e
                           WHERE e.sink = $1 AND e.order_key = p.order_key AND e.id < p.id
                             AND e.status IN ('pending', 'dead')",
            $statuses,
            ")"
        )
    };
}

const HELD_HOLD_SQL: &str = held_sql!("");
const HELD_SKIP_SQL: &str = held_sql!(" AND e.status = 'pending'");
const FINISH_SQL: &str = "SELECT payhook_finish_outbox($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";
const REQUEUE_SQL: &str = "UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = $2,
                                             lease_owner = NULL, lease_until = NULL
     WHERE id = $1 AND status = 'dead'";
const RAISE_SQL: &str = "SELECT payhook_raise_alert($1, $2, $3, $4, $5, $6, $7)";

/// Leases due pending rows of `sink`, skipping rows another dispatcher is claiming right now (see
/// [`payhook_store::Store::claim_outbox`]). Oldest row id first.
pub(crate) async fn claim(
    pool: &Pool,
    sink: &str,
    claim: &Claim,
    order: KeyOrder,
) -> Result<Vec<OutboxJob>, StoreError> {
    let sql = match order {
        KeyOrder::Hold => CLAIM_HOLD_SQL,
        KeyOrder::Skip => CLAIM_SKIP_SQL,
        KeyOrder::Unordered => CLAIM_UNORDERED_SQL,
    };
    rerun_on_conflict(pool, "outbox claim", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(sql).await?;
            let limit = i64::from(claim.limit);
            let rows = client.query(&stmt, &[&claim.owner, &claim.now_ms, &claim.lease_ms, &limit, &sink]).await?;
            let mut jobs = Vec::with_capacity(rows.len());
            for row in rows {
                let attempts: i32 = row.try_get(4).map_err(|e| StoreError::corrupt("outbox attempts", e))?;
                let kind: &str = row.try_get(2).map_err(|e| StoreError::corrupt("outbox kind", e))?;
                let kind = crate::read::outbox_kind(kind)?;
                let stored: String = row.try_get(3).map_err(|e| StoreError::corrupt("outbox payload", e))?;
                // jsonb keeps its own key order and spacing: sinks get payhook's rendering of the document.
                let payload = payhook_store::payload::canonical(kind, &stored).unwrap_or(stored);
                jobs.push(OutboxJob {
                    id: row.try_get(0).map_err(|e| StoreError::corrupt("outbox id", e))?,
                    sink: row.try_get(1).map_err(|e| StoreError::corrupt("outbox sink", e))?,
                    kind,
                    payload,
                    attempts: u32::try_from(attempts).map_err(|e| StoreError::corrupt("outbox attempts", e))?,
                    created_at_ms: row.try_get(5).map_err(|e| StoreError::corrupt("outbox created at", e))?,
                    owner: claim.owner.clone(),
                    key: row.try_get(6).map_err(|e| StoreError::corrupt("outbox order key", e))?,
                    order,
                });
            }
            jobs.sort_by_key(|j| j.id);
            Ok(jobs)
        }
    })
    .await
}

/// How many of the first `scan_rows` pending rows of `sink`, in due order, wait behind an earlier row of their
/// key, and when the oldest of them was written (see [`payhook_store::Store::held_outbox`]).
pub(crate) async fn held(pool: &Pool, sink: &str, order: KeyOrder, scan_rows: u32) -> Result<Held, StoreError> {
    let sql = match order {
        KeyOrder::Unordered => return Ok(Held::default()),
        KeyOrder::Hold => HELD_HOLD_SQL,
        KeyOrder::Skip => HELD_SKIP_SQL,
    };
    let scan_rows = i64::from(scan_rows);
    rerun_on_conflict(pool, "held outbox rows", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(sql).await?;
            let row = client.query_one(&stmt, &[&sink, &scan_rows]).await?;
            let rows: i64 = row.try_get(0).map_err(|e| Failure::Corrupt(StoreError::corrupt("held rows", e)))?;
            let oldest: Option<i64> =
                row.try_get(1).map_err(|e| Failure::Corrupt(StoreError::corrupt("oldest held row", e)))?;
            Ok(Held { rows: u64::try_from(rows).unwrap_or(0), oldest_created_at_ms: oldest })
        }
    })
    .await
}

/// Records a delivery attempt of a leased row; a row that died raises an alert for its sink in the same statement,
/// unless it is an alert itself (see [`payhook_store::Store::finish_outbox`]).
pub(crate) async fn finish(
    pool: &Pool,
    ctx: &Ctx,
    job: &OutboxJob,
    outcome: &Dispatched,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let (status, next, last_status, error, delivered_at) = match outcome {
        Dispatched::Delivered { status } => ("delivered", None, Some(*status), None, Some(now_ms)),
        Dispatched::Retry { at_ms, status, error } => ("pending", Some(*at_ms), *status, Some(error.as_str()), None),
        Dispatched::Dead { status, error } => ("dead", None, *status, Some(error.as_str()), None),
    };
    let last_status = last_status.map(i32::from);
    let alerts = ctx.routing.alerts.as_ref();
    // Alerts never alert: a dead row of the alerts sink raises nothing, so there is no loop.
    let alert = match (outcome, alerts) {
        (Dispatched::Dead { error, .. }, Some(a)) if a.sink != job.sink => {
            Some((format!("sink:{}:dead", job.sink), payhook_store::dead_row_alert_text(job, error)))
        }
        _ => None,
    };
    let (alert_key, alert_text) = (alert.as_ref().map(|a| a.0.as_str()), alert.as_ref().map(|a| a.1.as_str()));
    let (alert_sink, window, gather) =
        (alerts.map(|a| a.sink.as_str()), alerts.map(|a| a.window_ms), alerts.map(|a| a.gather_ms));
    rerun_on_conflict(pool, "outbox outcome", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(FINISH_SQL).await?;
            let row = client
                .query_one(
                    &stmt,
                    &[
                        &job.id,
                        &job.owner,
                        &status,
                        &next,
                        &last_status,
                        &error,
                        &delivered_at,
                        &alert_key,
                        &alert_text,
                        &now_ms,
                        &ALERT_KIND,
                        &alert_sink,
                        &window,
                        &gather,
                    ],
                )
                .await?;
            row.try_get(0).map_err(|e| Failure::Corrupt(StoreError::corrupt("payhook_finish_outbox", e)))
        }
    })
    .await
}

/// Re-queues a dead row with a fresh budget, and appends `audit` (when given) in its transaction with the
/// outcome (see [`payhook_store::Store::retry_outbox_audited`]).
pub(crate) async fn requeue(pool: &Pool, id: i64, now_ms: i64, audit: Option<&AuditEntry>) -> Result<bool, StoreError> {
    rerun_on_conflict(pool, "outbox re-queue", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(REQUEUE_SQL).await?;
            let params: [&(dyn ToSql + Sync); 2] = [&id, &now_ms];
            let Some(entry) = audit else {
                return Ok(client.execute(&stmt, &params).await? == 1);
            };
            let begun = send(client.batch_execute("BEGIN")).await;
            let requeued = send(client.execute(&stmt, &params)).await;
            begun.answer().await?;
            let requeued = requeued.answer().await? == 1;
            crate::audit::commit_with(client, Some((entry, retry_outbox_outcome(requeued)))).await?;
            Ok(requeued)
        }
    })
    .await
}

/// Raises an alert (see [`payhook_store::Store::raise_alert`]); nothing when alerts are off.
pub(crate) async fn raise(pool: &Pool, ctx: &Ctx, alert: &Alert) -> Result<(), StoreError> {
    let Some(routing) = &ctx.routing.alerts else {
        return Ok(());
    };
    rerun_on_conflict(pool, "alert", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(RAISE_SQL).await?;
            client
                .execute(
                    &stmt,
                    &[
                        &alert.key,
                        &alert.text,
                        &alert.now_ms,
                        &ALERT_KIND,
                        &routing.sink,
                        &routing.window_ms,
                        &routing.gather_ms,
                    ],
                )
                .await?;
            Ok(())
        }
    })
    .await
}
