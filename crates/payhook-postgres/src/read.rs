//! Queries. Each runs on a pooled connection; an order and its history are read in one snapshot.

use crate::error::{PgError, corrupt};
use crate::ops::{money, parse_status};
use crate::pipeline::pipeline;
use crate::pool;
use deadpool_postgres::{Object, Pool};
use payhook_core::event::{EventId, OrderId, SourceName};
use payhook_store::{AuditEntry, EventView, OrderView, OutboxView, Outcome, Stats, StoreError};
use std::time::Duration;
use tokio_postgres::Row;

type Result<T> = std::result::Result<T, StoreError>;

const ORDER_SQL: &str = "SELECT status, amount, currency, created_at, updated_at FROM orders WHERE id = $1";
const AUDIT_SQL: &str = "SELECT source, event_id, event_type, from_status, to_status, at FROM order_audit
     WHERE order_id = $1 ORDER BY seq";
const OUTBOX_SQL: &str =
    "SELECT id, kind, status, payload::text, created_at FROM outbox WHERE order_id = $1 ORDER BY id";
const EVENT_SQL: &str = "SELECT event_type, business_key, effect, status, reason, attempts, next_attempt_at,
            received_at, verification, headers, body
     FROM inbox WHERE source = $1 AND event_id = $2";
// COLLATE "C": byte order, whatever the database's collation, as the SQLite backend sorts.
const STATS_EVENTS_SQL: &str = "SELECT status, count(*) FROM inbox GROUP BY status ORDER BY status COLLATE \"C\"";
const STATS_ORDERS_SQL: &str = "SELECT status, count(*) FROM orders GROUP BY status ORDER BY status COLLATE \"C\"";
const STATS_OUTBOX_SQL: &str = "SELECT kind, count(*) FROM outbox GROUP BY kind ORDER BY kind COLLATE \"C\"";
const NEXT_DUE_SQL: &str =
    "SELECT min(greatest(next_attempt_at, coalesce(lease_until, 0))) FROM inbox WHERE status = 'deferred'";

/// Runs `query` on a pooled connection; a connection that failed is rolled back or discarded, never reused as is.
async fn with_connection<T>(
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
    row.try_get(i).map_err(|e| corrupt(what, e))
}

/// The order, its history and its outbox rows, read in one REPEATABLE READ transaction so they come from one
/// snapshot.
pub(crate) async fn order(pool: &Pool, id: &OrderId) -> Result<Option<OrderView>> {
    let (order, audit, outbox) = with_connection(pool, async |client: &Object| {
        let order = client.prepare_cached(ORDER_SQL).await?;
        let audit = client.prepare_cached(AUDIT_SQL).await?;
        let outbox = client.prepare_cached(OUTBOX_SQL).await?;
        let key: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id.as_str()];
        let reads = vec![client.query(&order, &key), client.query(&audit, &key), client.query(&outbox, &key)];
        let (begun, rows, ended) = pipeline(
            Some(client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")),
            reads,
            Some(client.batch_execute("COMMIT")),
        )
        .await;
        begun.expect("first was given")?;
        ended.expect("last was given")?;
        let mut rows = rows.into_iter();
        let mut next = || rows.next().expect("three queries were sent");
        Ok((next()?, next()?, next()?))
    })
    .await?;
    let Some(row) = order.first() else { return Ok(None) };
    let mut history = Vec::with_capacity(audit.len());
    for r in &audit {
        history.push(AuditEntry {
            source: get(r, 0, "audit source")?,
            event_id: get(r, 1, "audit event id")?,
            event_type: get(r, 2, "audit event type")?,
            from: parse_status(get(r, 3, "audit from")?)?,
            to: parse_status(get(r, 4, "audit to")?)?,
            at_ms: get(r, 5, "audit time")?,
        });
    }
    let mut rows = Vec::with_capacity(outbox.len());
    for r in &outbox {
        let payload: &str = get(r, 3, "outbox payload")?;
        rows.push(OutboxView {
            id: get(r, 0, "outbox id")?,
            kind: get(r, 1, "outbox kind")?,
            status: get(r, 2, "outbox status")?,
            payload: serde_json::from_str(payload).map_err(|e| corrupt("outbox payload", e))?,
            created_at_ms: get(r, 4, "outbox time")?,
        });
    }
    Ok(Some(OrderView {
        id: id.clone(),
        status: parse_status(get(row, 0, "order status")?)?,
        money: money(get(row, 1, "order amount")?, get(row, 2, "order currency")?)?,
        created_at_ms: get(row, 3, "order created")?,
        updated_at_ms: get(row, 4, "order updated")?,
        history,
        outbox: rows,
    }))
}

/// One recorded delivery.
pub(crate) async fn event(pool: &Pool, source: &SourceName, id: &EventId) -> Result<Option<EventView>> {
    let row = with_connection(pool, async |client: &Object| {
        let stmt = client.prepare_cached(EVENT_SQL).await?;
        client.query_opt(&stmt, &[&source.as_str(), &id.as_str()]).await
    })
    .await?;
    let Some(r) = row else { return Ok(None) };
    let effect: Option<String> = get(&r, 2, "effect")?;
    let status: String = get(&r, 3, "event status")?;
    let attempts: i32 = get(&r, 5, "attempts")?;
    Ok(Some(EventView {
        source: source.clone(),
        event_id: id.clone(),
        event_type: get(&r, 0, "event type")?,
        business_key: get(&r, 1, "business key")?,
        effect: effect.map(|e| serde_json::from_str(&e)).transpose().map_err(|e| corrupt("stored effect", e))?,
        status: Outcome::parse(&status).ok_or_else(|| corrupt("stored event status", &status))?,
        reason: get(&r, 4, "reason")?,
        attempts: u32::try_from(attempts).map_err(|e| corrupt("attempts", e))?,
        next_attempt_at_ms: get(&r, 6, "next attempt")?,
        received_at_ms: get(&r, 7, "received at")?,
        verification: get(&r, 8, "verification")?,
        headers_json: get(&r, 9, "headers")?,
        raw_body: get(&r, 10, "body")?,
    }))
}

/// Row counts by status.
pub(crate) async fn stats(pool: &Pool) -> Result<Stats> {
    let lists = with_connection(pool, async |client: &Object| {
        let mut reads = Vec::new();
        for sql in [STATS_EVENTS_SQL, STATS_ORDERS_SQL, STATS_OUTBOX_SQL] {
            let stmt = client.prepare_cached(sql).await?;
            reads.push(async move { client.query(&stmt, &[]).await });
        }
        let (_, rows, _) = pipeline(crate::pipeline::none(), reads, crate::pipeline::none()).await;
        rows.into_iter().collect::<std::result::Result<Vec<_>, _>>()
    })
    .await?;
    let mut counts = Vec::with_capacity(3);
    for rows in lists {
        let mut list = Vec::with_capacity(rows.len());
        for r in &rows {
            let n: i64 = get(r, 1, "count")?;
            list.push((get(r, 0, "status")?, u64::try_from(n).map_err(|e| corrupt("count", e))?));
        }
        counts.push(list);
    }
    let mut counts = counts.into_iter();
    let mut next = || counts.next().unwrap_or_default();
    Ok(Stats { events: next(), orders: next(), outbox: next() })
}

/// When the earliest deferred event can next be claimed.
pub(crate) async fn next_due(pool: &Pool) -> Result<Option<i64>> {
    let row = with_connection(pool, async |client: &Object| {
        let stmt = client.prepare_cached(NEXT_DUE_SQL).await?;
        client.query_one(&stmt, &[]).await
    })
    .await?;
    get(&row, 0, "next due")
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
