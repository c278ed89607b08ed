//! Queries. Each runs on a pooled connection; an order and its history, an event and what it caused, and the
//! counts of `stats` are each read in one snapshot.

use crate::error::PgError;
use crate::ops::{money, parse_status};
use crate::pipeline::{answers, send, send_all};
use crate::pool;
use crate::pool::{Object, Pool};
use payhook_core::event::{Effect, EventId, OrderId, SourceName};
use payhook_store::{
    AttemptEntry, BillingChange, BillingObject, EventView, OrderChange, OrderView, OutboxKind, OutboxStatus,
    OutboxView, Outcome, ReceivedHeaders, Stats, StoreError,
};
use std::time::Duration;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

type Result<T> = std::result::Result<T, StoreError>;

/// The columns [`outbox_view`] reads, in its order.
pub(crate) const OUTBOX_COLUMNS: &str = "id, kind, sink, status, payload::text, order_id, source, event_id, attempts, \
                              next_attempt_at, last_error, last_status, delivered_at, created_at";
const ORDER_SQL: &str = "SELECT status, amount, currency, created_at, updated_at FROM orders WHERE id = $1";
const AUDIT_SQL: &str = "SELECT source, event_id, event_type, from_status, to_status, at FROM order_audit
     WHERE order_id = $1 ORDER BY seq";
const EVENT_SQL: &str = "SELECT event_type, business_key, effect, status, reason, attempts, next_attempt_at,
            received_at, verification, headers, body
     FROM inbox WHERE source = $1 AND event_id = $2";
const ATTEMPTS_SQL: &str = "SELECT a.attempt, a.at, a.outcome, a.detail
     FROM inbox i JOIN inbox_attempts a ON a.inbox_id = i.id
     WHERE i.source = $1 AND i.event_id = $2 ORDER BY a.attempt";
const EVENT_AUDIT_SQL: &str = "SELECT source, event_id, event_type, from_status, to_status, at FROM order_audit
     WHERE order_id = $1 AND source = $2 AND event_id = $3 ORDER BY seq";
// COLLATE "C": byte order, whatever the database's collation, as the SQLite backend sorts.
const EVENT_BILLING_SQL: &str = "SELECT object, object_id, from_status, to_status, at FROM billing_audit
     WHERE source = $1 AND event_id = $2 ORDER BY at, object COLLATE \"C\", object_id COLLATE \"C\"";
/// Every statement [`stats`] runs in its snapshot, in its order: the counters (totals plus unfolded deltas, a few
/// rows), then the oldest pending outbox row and the oldest deferred event, each one step
/// down a partial index. Public so that tests check the plan of each: none may scan `inbox`, `orders` or `outbox`.
pub const STATS_STATEMENTS: [&str; 3] = [
    crate::counters::KEPT_SQL,
    "SELECT min(created_at) FROM outbox WHERE status = 'pending'",
    "SELECT min(received_at) FROM inbox WHERE status = 'deferred'",
];
const NEXT_DUE_SQL: &str =
    "SELECT min(greatest(next_attempt_at, coalesce(lease_until, 0))) FROM inbox WHERE status = 'deferred'";
const NEXT_OUTBOX_DUE_SQL: &str = "SELECT min(greatest(next_attempt_at, coalesce(lease_until, 0))) FROM outbox
     WHERE sink = $1 AND status = 'pending'";
const SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

fn order_outbox_sql() -> String {
    format!("SELECT {OUTBOX_COLUMNS} FROM outbox WHERE order_id = $1 ORDER BY id")
}

fn event_outbox_sql() -> String {
    format!("SELECT {OUTBOX_COLUMNS} FROM outbox WHERE order_id = $1 AND source = $2 AND event_id = $3 ORDER BY id")
}

fn orderless_outbox_sql() -> String {
    format!("SELECT {OUTBOX_COLUMNS} FROM outbox WHERE order_id IS NULL AND source = $1 AND event_id = $2 ORDER BY id")
}

/// Runs `query` on a pooled connection; a connection that failed is rolled back or discarded, never reused as is.
pub(crate) async fn with_connection<T>(
    pool: &Pool,
    query: impl AsyncFnOnce(&Object) -> std::result::Result<T, tokio_postgres::Error>,
) -> std::result::Result<T, PgError> {
    let client = pool::get(pool).await?;
    match query(&client).await {
        Ok(value) => Ok(value),
        Err(e) => {
            let e = PgError::Db(e);
            pool::release_after(client, e.breaks_connection()).await;
            Err(e)
        }
    }
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize, what: &str) -> Result<T> {
    row.try_get(i).map_err(|e| StoreError::corrupt(what, e))
}

/// A stored outbox kind.
pub(crate) fn outbox_kind(s: &str) -> Result<OutboxKind> {
    OutboxKind::parse(s).ok_or_else(|| StoreError::inconsistent(format!("outbox kind {s:?}")))
}

fn outbox_view(r: &Row) -> Result<OutboxView> {
    let payload: &str = get(r, 4, "outbox payload")?;
    let status: &str = get(r, 3, "outbox status")?;
    let attempts: i32 = get(r, 8, "outbox attempts")?;
    let last_status: Option<i32> = get(r, 11, "outbox last status")?;
    Ok(OutboxView {
        id: get(r, 0, "outbox id")?,
        kind: outbox_kind(get(r, 1, "outbox kind")?)?,
        // Stored as '' for a row no sink takes.
        sink: Some(get::<String>(r, 2, "outbox sink")?).filter(|s| !s.is_empty()),
        status: OutboxStatus::parse(status)
            .ok_or_else(|| StoreError::inconsistent(format!("outbox status {status:?}")))?,
        payload: serde_json::from_str(payload).map_err(|e| StoreError::corrupt("outbox payload", e))?,
        order_id: get(r, 5, "outbox order")?,
        source: get(r, 6, "outbox source")?,
        event_id: get(r, 7, "outbox event")?,
        attempts: u32::try_from(attempts).map_err(|e| StoreError::corrupt("outbox attempts", e))?,
        next_attempt_at_ms: get(r, 9, "outbox next attempt")?,
        last_error: get(r, 10, "outbox last error")?,
        last_status: last_status
            .map(u16::try_from)
            .transpose()
            .map_err(|e| StoreError::corrupt("outbox last status", e))?,
        delivered_at_ms: get(r, 12, "outbox delivered at")?,
        created_at_ms: get(r, 13, "outbox time")?,
    })
}

pub(crate) fn outbox_views(rows: &[Row]) -> Result<Vec<OutboxView>> {
    rows.iter().map(outbox_view).collect()
}

fn audit_entries(rows: &[Row]) -> Result<Vec<OrderChange>> {
    let mut history = Vec::with_capacity(rows.len());
    for r in rows {
        history.push(OrderChange {
            source: get(r, 0, "audit source")?,
            event_id: get(r, 1, "audit event id")?,
            event_type: get(r, 2, "audit event type")?,
            from: parse_status(get(r, 3, "audit from")?)?,
            to: parse_status(get(r, 4, "audit to")?)?,
            at_ms: get(r, 5, "audit time")?,
        });
    }
    Ok(history)
}

fn outcome(s: &str) -> Result<Outcome> {
    Outcome::parse(s).ok_or_else(|| StoreError::inconsistent(format!("stored event status {s:?}")))
}

/// The order, its history and its outbox rows, read in one REPEATABLE READ transaction so they come from one
/// snapshot.
pub(crate) async fn order(pool: &Pool, id: &OrderId) -> Result<Option<OrderView>> {
    let (order, audit, outbox) = with_connection(pool, async |client: &Object| {
        let order = client.prepare_cached(ORDER_SQL).await?;
        let audit = client.prepare_cached(AUDIT_SQL).await?;
        let outbox = client.prepare_cached(&order_outbox_sql()).await?;
        let key: [&(dyn ToSql + Sync); 1] = [&id.as_str()];
        let begun = send(client.batch_execute(SNAPSHOT)).await;
        let order = send(client.query(&order, &key)).await;
        let audit = send(client.query(&audit, &key)).await;
        let outbox = send(client.query(&outbox, &key)).await;
        let ended = send(client.batch_execute("COMMIT")).await;
        begun.answer().await?;
        let rows = (order.answer().await?, audit.answer().await?, outbox.answer().await?);
        ended.answer().await?;
        Ok(rows)
    })
    .await?;
    let Some(row) = order.first() else { return Ok(None) };
    Ok(Some(OrderView {
        id: id.clone(),
        status: parse_status(get(row, 0, "order status")?)?,
        money: money(get(row, 1, "order amount")?, get(row, 2, "order currency")?)?,
        created_at_ms: get(row, 3, "order created")?,
        updated_at_ms: get(row, 4, "order updated")?,
        history: audit_entries(&audit)?,
        outbox: outbox_views(&outbox)?,
    }))
}

/// One recorded delivery with its attempts, the changes it made and the outbox rows it caused, in one snapshot:
/// the row, its attempts and its orderless outbox rows in a first round trip, then (its order being named by its
/// effect) its changes and its order's outbox rows.
pub(crate) async fn event(pool: &Pool, source: &SourceName, id: &EventId) -> Result<Option<EventView>> {
    let (row, attempts, orderless, billing, order_id, by_order) = with_connection(pool, async |client: &Object| {
        let event = client.prepare_cached(EVENT_SQL).await?;
        let attempts = client.prepare_cached(ATTEMPTS_SQL).await?;
        let orderless = client.prepare_cached(&orderless_outbox_sql()).await?;
        let billing = client.prepare_cached(EVENT_BILLING_SQL).await?;
        let key: [&(dyn ToSql + Sync); 2] = [&source.as_str(), &id.as_str()];
        let begun = send(client.batch_execute(SNAPSHOT)).await;
        let event = send(client.query(&event, &key)).await;
        let attempts = send(client.query(&attempts, &key)).await;
        let orderless = send(client.query(&orderless, &key)).await;
        let billing = send(client.query(&billing, &key)).await;
        begun.answer().await?;
        let row = event.answer().await?.into_iter().next();
        let (attempts, orderless, billing) =
            (attempts.answer().await?, orderless.answer().await?, billing.answer().await?);
        // The order an event concerns is in its stored effect; a body that does not decode is reported below.
        let effect = row.as_ref().and_then(|r| r.try_get::<_, Option<String>>(2).ok().flatten());
        let order_id = match effect.and_then(|e| serde_json::from_str::<Effect>(&e).ok()) {
            Some(Effect::Order { order_id, .. }) => Some(order_id),
            _ => None,
        };
        let audit = client.prepare_cached(EVENT_AUDIT_SQL).await?;
        let outbox = client.prepare_cached(&event_outbox_sql()).await?;
        let order_key = order_id.as_ref().map(|o| o.as_str());
        let (src, eid) = (source.as_str(), id.as_str());
        let by_order: [&(dyn ToSql + Sync); 3] = [&order_key, &src, &eid];
        let mut reads = Vec::new();
        if order_key.is_some() {
            reads.push(client.query(&audit, &by_order));
            reads.push(client.query(&outbox, &by_order));
        }
        let reads = send_all(reads).await;
        let ended = send(client.batch_execute("COMMIT")).await;
        let by_order = answers(reads).await.into_iter().collect::<std::result::Result<Vec<_>, _>>()?;
        ended.answer().await?;
        Ok((row, attempts, orderless, billing, order_id, by_order))
    })
    .await?;
    let Some(r) = row else { return Ok(None) };
    let effect: Option<String> = get(&r, 2, "effect")?;
    let status: String = get(&r, 3, "event status")?;
    let tries: i32 = get(&r, 5, "attempts")?;
    let mut attempt_log = Vec::with_capacity(attempts.len());
    for a in &attempts {
        let attempt: i32 = get(a, 0, "attempt")?;
        attempt_log.push(AttemptEntry {
            attempt: u32::try_from(attempt).map_err(|e| StoreError::corrupt("attempt", e))?,
            at_ms: get(a, 1, "attempt time")?,
            outcome: outcome(get(a, 2, "attempt outcome")?)?,
            detail: get(a, 3, "attempt detail")?,
        });
    }
    let (changes, mut outbox) = match (&order_id, by_order.as_slice()) {
        (Some(_), [audit, outbox]) => (audit_entries(audit)?, outbox_views(outbox)?),
        _ => (Vec::new(), Vec::new()),
    };
    outbox.extend(outbox_views(&orderless)?);
    let mut billing_changes = Vec::with_capacity(billing.len());
    for b in &billing {
        billing_changes.push(BillingChange {
            object: {
                let o: String = get(b, 0, "changed object")?;
                BillingObject::parse(&o).ok_or_else(|| StoreError::inconsistent(format!("billing change of {o:?}")))?
            },
            object_id: get(b, 1, "changed object id")?,
            from: get(b, 2, "billing change from")?,
            to: get(b, 3, "billing change to")?,
            at_ms: get(b, 4, "billing change time")?,
        });
    }
    Ok(Some(EventView {
        source: source.clone(),
        event_id: id.clone(),
        event_type: get(&r, 0, "event type")?,
        business_key: get(&r, 1, "business key")?,
        effect: effect
            .map(|e| serde_json::from_str(&e))
            .transpose()
            .map_err(|e| StoreError::corrupt("stored effect", e))?,
        status: outcome(&status)?,
        reason: get(&r, 4, "reason")?,
        attempts: u32::try_from(tries).map_err(|e| StoreError::corrupt("attempts", e))?,
        next_attempt_at_ms: get(&r, 6, "next attempt")?,
        received_at_ms: get(&r, 7, "received at")?,
        verification: get(&r, 8, "verification")?,
        headers: ReceivedHeaders::from_json(get(&r, 9, "headers")?)
            .map_err(|e| StoreError::corrupt("stored headers", e))?,
        raw_body: get(&r, 10, "body")?,
        attempt_log,
        changes,
        billing_changes,
        outbox,
    }))
}

async fn query_rows(pool: &Pool, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
    Ok(with_connection(pool, async |client: &Object| {
        let stmt = client.prepare_cached(sql).await?;
        client.query(&stmt, params).await
    })
    .await?)
}

/// Row counts from the counters and the oldest waiting work, from one snapshot. Read-only, so it may run on a
/// standby; the caller folds the deltas on the primary first (the counts are right without that too: the totals
/// are summed with the deltas not folded yet).
pub(crate) async fn stats(pool: &Pool) -> Result<Stats> {
    let lists = with_connection(pool, async |client: &Object| {
        let mut reads = Vec::new();
        for sql in STATS_STATEMENTS {
            let stmt = client.prepare_cached(sql).await?;
            reads.push(async move { client.query(&stmt, &[]).await });
        }
        let begun = send(client.batch_execute(SNAPSHOT)).await;
        let reads = send_all(reads).await;
        let ended = send(client.batch_execute("COMMIT")).await;
        begun.answer().await?;
        let rows = answers(reads).await.into_iter().collect::<std::result::Result<Vec<_>, _>>()?;
        ended.answer().await?;
        Ok(rows)
    })
    .await?;
    let [counters, oldest_outbox, oldest_deferred] = lists.as_slice() else {
        return Err(StoreError::inconsistent("stats: three answers to three queries"));
    };
    let min = |rows: &[Row], what: &str| -> Result<Option<i64>> { rows.first().map_or(Ok(None), |r| get(r, 0, what)) };
    Stats::from_counts(
        &crate::counters::counts(counters)?,
        min(oldest_outbox, "oldest pending outbox row")?,
        min(oldest_deferred, "oldest deferred event")?,
    )
}

/// When the earliest deferred event can next be claimed.
pub(crate) async fn next_due(pool: &Pool) -> Result<Option<i64>> {
    let rows = query_rows(pool, NEXT_DUE_SQL, &[]).await?;
    rows.first().map_or(Ok(None), |r| get(r, 0, "next due"))
}

/// When the earliest pending outbox row of `sink` can next be claimed.
pub(crate) async fn next_outbox_due(pool: &Pool, sink: &str) -> Result<Option<i64>> {
    let rows = query_rows(pool, NEXT_OUTBOX_DUE_SQL, &[&sink]).await?;
    rows.first().map_or(Ok(None), |r| get(r, 0, "next outbox due"))
}

/// The replication state, in one statement (simple protocol: one round trip, nothing prepared). Who may see
/// `pg_stat_replication`'s details is checked the way the server does it (superuser, or the privileges of
/// `pg_read_all_stats`, which `pg_monitor` includes): to anyone else `sync_state` and `state` read NULL, and
/// counting them would say "no standby" when there may be several.
const REPLICATION_SQL: &str = "SELECT current_setting('synchronous_commit'),
       current_setting('synchronous_standby_names'),
       pg_is_in_recovery(),
       current_setting('is_superuser') = 'on' OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
       (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')),
       (SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming')";

/// The primary's replication as this store's sessions see it, within `within` (the ping's bound). Read on the
/// probe pool: the sessions of the main pool are made with the same options, so their `synchronous_commit` is the
/// same.
pub(crate) async fn replication(pool: &Pool, within: Duration, required: bool) -> Result<payhook_store::Replication> {
    let answered = tokio::time::timeout(
        within,
        with_connection(pool, async |client: &Object| client.simple_query(REPLICATION_SQL).await),
    )
    .await;
    let messages = match answered {
        Ok(result) => result?,
        Err(_) => return Err(PgError::Timeout(within).into()),
    };
    let row = messages
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .ok_or_else(|| StoreError::inconsistent("replication: no row"))?;
    let text = |i: usize| -> Result<&str> {
        row.try_get(i)
            .map_err(|e| StoreError::corrupt("replication", e))?
            .ok_or_else(|| StoreError::inconsistent("replication: NULL"))
    };
    let flag = |i: usize| -> Result<bool> { Ok(text(i)? == "t") };
    let count = |i: usize| -> Result<u32> { text(i)?.parse().map_err(|e| StoreError::corrupt("replication count", e)) };
    let visible = flag(3)?;
    Ok(payhook_store::Replication {
        synchronous_commit: text(0)?.to_owned(),
        synchronous_standby_names: text(1)?.to_owned(),
        in_recovery: flag(2)?,
        sync_standbys: if visible { Some(count(4)?) } else { None },
        streaming_standbys: if visible { Some(count(5)?) } else { None },
        required,
    })
}

/// Checks that a connection can be had and answers, within `within`.
pub(crate) async fn ping(pool: &Pool, within: Duration) -> Result<()> {
    let answered = tokio::time::timeout(
        within,
        with_connection(pool, async |client: &Object| client.simple_query("SELECT 1").await.map(drop)),
    )
    .await;
    match answered {
        Ok(result) => Ok(result?),
        Err(_) => Err(PgError::Timeout(within).into()),
    }
}
