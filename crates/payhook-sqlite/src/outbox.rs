//! The outbox: an effect's rows routed to the sinks that take its kind (used by the order ledger in `ops` and by
//! `billing`), alerts gathered into their window's row, and the dispatcher's claims and outcomes.

use crate::context::{Ctx, Result, SqlResult};
use crate::failpoint::{fires_on, injected};
use crate::kept::WriterConn;
use crate::tally::{self, Table};
use payhook_core::event::Event;
use payhook_store::{ALERT_KIND, Alert, Claim, Dispatched, KeyOrder, OutboxJob, Routing};
use rusqlite::{OptionalExtension, params};

/// Inserts an outbox row, pending for a sink or `unrouted` when `sink` is empty. `id` is the row's id when the
/// caller chose it (SQLite picks one otherwise); `listed` says that its order already lists that id.
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert_outbox(
    conn: &WriterConn<'_>,
    id: Option<i64>,
    listed: bool,
    kind: &str,
    sink: &str,
    order_id: Option<&str>,
    source: Option<&str>,
    event_id: Option<&str>,
    payload: &str,
    now_ms: i64,
) -> Result<i64> {
    if fires_on("sqlite::outbox_insert", conn) {
        return Err(injected("sqlite::outbox_insert"));
    }
    let (status, next) = if sink.is_empty() { ("unrouted", None) } else { ("pending", Some(now_ms)) };
    conn.kept(
        "INSERT INTO outbox (id, kind, sink, order_id, source, event_id, payload, status, next_attempt_at, created_at)
         VALUES (?10, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        |s| s.execute(params![kind, sink, order_id, source, event_id, payload, status, next, now_ms, id]),
    )
    .db()?;
    let id = conn.last_insert_rowid();
    tally::count(Table::Outbox, sink, kind, status, 1);
    if let Some(order_id) = order_id
        && !listed
    {
        tally::list_outbox(conn, order_id, id).db()?;
    }
    Ok(id)
}

/// Writes an effect's outbox rows: one per sink that takes `kind` and whose filter admits `payload`, or one
/// `unrouted` row when no sink does, so the effect is still recorded once. `listed` is the id its order's guarded update already listed in `outbox_ids`
/// (one past the largest): the first row takes it, the others the ids after it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn route_outbox(
    conn: &WriterConn<'_>,
    routing: &Routing,
    kind: &str,
    order_id: Option<&str>,
    listed: Option<i64>,
    source: &str,
    event: &Event,
    payload: &str,
    now_ms: i64,
) -> Result<()> {
    let sinks = routing.sinks_for(kind, payload);
    for (i, sink) in (if sinks.is_empty() { vec![""] } else { sinks }).into_iter().enumerate() {
        let id = listed.map(|first| first + i as i64);
        let event_id = Some(event.event_id.as_str());
        insert_outbox(conn, id, i == 0 && id.is_some(), kind, sink, order_id, Some(source), event_id, payload, now_ms)?;
    }
    Ok(())
}

/// Raises an alert (see [`payhook_store::Store::raise_alert`]).
///
/// The first alert of a key opens a window and writes an outbox row that waits `gather_ms` before it is sent;
/// repeats within the window are counted into that row while it waits, and counted as `suppressed` once it has
/// gone, to be reported by the first alert of the next window.
pub(crate) fn raise_alert(conn: &WriterConn<'_>, ctx: &Ctx, alert: &Alert) -> Result<()> {
    let Some(routing) = &ctx.routing.alerts else {
        return Ok(());
    };
    let window: Option<(i64, i64, i64)> = conn
        .prepare_cached("SELECT window_start, outbox_id, suppressed FROM alert_windows WHERE key = ?1")
        .db()?
        .query_row([&alert.key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .db()?;
    if let Some((start, outbox_id, _)) = window
        && alert.now_ms < start + routing.window_ms
    {
        let gathered = conn
            .prepare_cached(
                "UPDATE outbox SET payload = json_set(payload, '$.count', json_extract(payload, '$.count') + 1,
                                                     '$.last_text', ?2, '$.last_at_ms', ?3)
                 WHERE id = ?1 AND status = 'pending' AND lease_owner IS NULL",
            )
            .db()?
            .execute(params![outbox_id, alert.text, alert.now_ms])
            .db()?;
        let suppressed = i64::from(gathered == 0);
        conn.prepare_cached("UPDATE alert_windows SET count = count + 1, suppressed = suppressed + ?2 WHERE key = ?1")
            .db()?
            .execute(params![alert.key, suppressed])
            .db()?;
        return Ok(());
    }
    let carried = window.map_or(0, |(_, _, suppressed)| suppressed);
    let payload = serde_json::json!({
        "kind": ALERT_KIND,
        "key": alert.key,
        "text": alert.text,
        "count": 1,
        "first_at_ms": alert.now_ms,
        "window_ms": routing.window_ms,
        "suppressed_before": carried,
    })
    .to_string();
    conn.prepare_cached(
        "INSERT INTO outbox (kind, sink, payload, status, next_attempt_at, created_at)
         VALUES (?1, ?2, ?3, 'pending', ?4, ?5)",
    )
    .db()?
    .execute(params![ALERT_KIND, routing.sink, payload, alert.now_ms + routing.gather_ms, alert.now_ms])
    .db()?;
    tally::count(Table::Outbox, &routing.sink, ALERT_KIND, "pending", 1);
    let outbox_id = conn.last_insert_rowid();
    conn.prepare_cached(
        "INSERT INTO alert_windows (key, window_start, outbox_id, count, suppressed) VALUES (?1, ?2, ?3, 1, 0)
         ON CONFLICT (key) DO UPDATE SET window_start = ?2, outbox_id = ?3, count = 1, suppressed = 0",
    )
    .db()?
    .execute(params![alert.key, alert.now_ms, outbox_id])
    .db()?;
    Ok(())
}

/// The claim's condition on a candidate row `o` under per-key order: no earlier row of its sink and key is pending
/// (leased or not) or, when dead rows hold their key, dead. A row without a key (an alert) has none. Written to
/// match `outbox_key_open`'s partial-index condition, which `INDEXED BY` holds it to.
macro_rules! no_earlier_open_row {
    ($statuses:literal) => {
        concat!(
            " AND NOT EXISTS (SELECT 1 FROM outbox e INDEXED BY outbox_key_open
                              WHERE e.sink = o.sink AND e.order_key = o.order_key AND e.id < o.id
                                AND e.status IN ('pending', 'dead')",
            $statuses,
            ")"
        )
    };
}

/// The probe and the claim of one key order: (probe, claim).
macro_rules! claim_statements {
    ($condition:expr) => {
        (
            concat!(
                "SELECT EXISTS (SELECT 1 FROM outbox o INDEXED BY outbox_due
                                WHERE o.sink = ?2 AND o.status = 'pending' AND o.next_attempt_at <= ?1
                                  AND (o.lease_until IS NULL OR o.lease_until <= ?1)",
                $condition,
                ")"
            ),
            concat!(
                "UPDATE outbox SET lease_owner = ?1, lease_until = ?2 + ?3
                 WHERE id IN (SELECT o.id FROM outbox o INDEXED BY outbox_due
                              WHERE o.sink = ?5 AND o.status = 'pending' AND o.next_attempt_at <= ?2
                                AND (o.lease_until IS NULL OR o.lease_until <= ?2)",
                $condition,
                "             ORDER BY o.next_attempt_at, o.id LIMIT ?4)
                 RETURNING id, sink, kind, payload, attempts, created_at, order_key"
            ),
        )
    };
}

const CLAIM_HOLD: (&str, &str) = claim_statements!(no_earlier_open_row!(""));
const CLAIM_SKIP: (&str, &str) = claim_statements!(no_earlier_open_row!(" AND e.status = 'pending'"));
const CLAIM_UNORDERED: (&str, &str) = claim_statements!("");

/// Leases due outbox rows of one sink (see [`payhook_store::Store::claim_outbox_ordered`]).
pub(crate) fn claim_outbox(
    conn: &WriterConn<'_>,
    sink: &str,
    claim: &Claim,
    order: KeyOrder,
) -> Result<Vec<OutboxJob>> {
    let (probe, claiming) = match order {
        KeyOrder::Hold => CLAIM_HOLD,
        KeyOrder::Skip => CLAIM_SKIP,
        KeyOrder::Unordered => CLAIM_UNORDERED,
    };
    // As for the worker's claim (`ops::claim_due`): a probe with the claim's own conditions first, so that a pass
    // that finds nothing due costs an index seek, not the claim's Bloom filter and ephemeral tables. Rows held
    // behind an earlier row of their key cost the probe one seek each in `outbox_key_open`.
    let due: bool = conn.prepare_cached(probe).db()?.query_row(params![claim.now_ms, sink], |r| r.get(0)).db()?;
    if !due {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(claiming).db()?;
    let rows = stmt
        .query_map(params![claim.owner, claim.now_ms, claim.lease_ms, claim.limit, sink], |r| {
            Ok(OutboxJob {
                id: r.get(0)?,
                sink: r.get(1)?,
                kind: crate::context::outbox_kind(r, 2)?,
                payload: r.get(3)?,
                attempts: r.get(4)?,
                created_at_ms: r.get(5)?,
                owner: claim.owner.clone(),
                key: r.get(6)?,
                order,
            })
        })
        .db()?;
    let mut jobs = rows.collect::<rusqlite::Result<Vec<_>>>().db()?;
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

/// Records a delivery attempt (see [`payhook_store::Store::finish_outbox`]).
pub(crate) fn finish_outbox(
    conn: &WriterConn<'_>,
    ctx: &Ctx,
    job: &OutboxJob,
    outcome: &Dispatched,
    now_ms: i64,
) -> Result<bool> {
    let (status, next, last_status, error, delivered_at) = match outcome {
        Dispatched::Delivered { status } => ("delivered", None, Some(*status), None, Some(now_ms)),
        Dispatched::Retry { at_ms, status, error } => ("pending", Some(*at_ms), *status, Some(error.as_str()), None),
        Dispatched::Dead { status, error } => ("dead", None, *status, Some(error.as_str()), None),
    };
    let changed: Option<(String, String)> = conn
        .prepare_cached(
            "UPDATE outbox SET status = ?3, attempts = attempts + 1, next_attempt_at = ?4, last_status = ?5,
                               last_error = coalesce(?6, last_error), delivered_at = ?7,
                               lease_owner = NULL, lease_until = NULL
             WHERE id = ?1 AND lease_owner = ?2 AND status = 'pending'
             RETURNING sink, kind",
        )
        .db()?
        .query_row(params![job.id, job.owner, status, next, last_status, error, delivered_at], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
        .db()?;
    if let Some((sink, kind)) = &changed {
        tally::moved(Table::Outbox, sink, kind, "pending", status);
    }
    if changed.is_some()
        && let Dispatched::Dead { error, .. } = outcome
        && ctx.routing.alerts.as_ref().is_none_or(|a| a.sink != job.sink)
    {
        let text = payhook_store::dead_row_alert_text(job, error);
        raise_alert(conn, ctx, &Alert { key: format!("sink:{}:dead", job.sink), text, now_ms })?;
    }
    Ok(changed.is_some())
}

/// Re-queues a dead outbox row (see [`payhook_store::Store::retry_outbox`]).
pub(crate) fn retry_outbox(conn: &WriterConn<'_>, id: i64, now_ms: i64) -> Result<bool> {
    let changed: Option<(String, String)> = conn
        .prepare_cached(
            "UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = ?2,
                               lease_owner = NULL, lease_until = NULL
             WHERE id = ?1 AND status = 'dead'
             RETURNING sink, kind",
        )
        .db()?
        .query_row(params![id, now_ms], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .db()?;
    if let Some((sink, kind)) = &changed {
        tally::moved(Table::Outbox, sink, kind, "dead", "pending");
    }
    Ok(changed.is_some())
}
