//! Read-only queries, served by a separate connection so they never wait for the writer (WAL lets readers and
//! the writer proceed together).

use crate::writer::unavailable;
use payhook_core::event::{Currency, EventId, Money, OrderId, SourceName};
use payhook_core::ledger::OrderStatus;
use payhook_store::{AuditEntry, EventView, OrderView, OutboxView, Outcome, Stats, StoreError};
use rusqlite::{Connection, OptionalExtension, params};

type Result<T> = std::result::Result<T, StoreError>;

fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

pub(crate) fn money(amount: i64, currency: &str) -> Result<Money> {
    let currency = Currency::parse(currency).map_err(|e| corrupt("stored currency", e))?;
    Money::new(amount, currency).map_err(|e| corrupt("stored amount", e))
}

pub(crate) fn source(s: String) -> Result<SourceName> {
    SourceName::parse(s).map_err(|e| corrupt("stored source", e))
}

pub(crate) fn event_id(s: String) -> Result<EventId> {
    EventId::parse(s).map_err(|e| corrupt("stored event id", e))
}

fn status(s: &str) -> Result<OrderStatus> {
    OrderStatus::parse(s).ok_or_else(|| corrupt("stored order status", s))
}

/// The order, its history and its outbox rows, read in one transaction so they come from one snapshot.
pub(crate) fn order(conn: &Connection, id: &OrderId) -> Result<Option<OrderView>> {
    let tx = conn.unchecked_transaction().map_err(unavailable)?;
    let view = order_in(&tx, id);
    tx.finish().map_err(unavailable)?;
    view
}

fn order_in(conn: &Connection, id: &OrderId) -> Result<Option<OrderView>> {
    let row: Option<(String, i64, String, i64, i64)> = conn
        .prepare_cached("SELECT status, amount, currency, created_at, updated_at FROM orders WHERE id = ?1")
        .map_err(unavailable)?
        .query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .optional()
        .map_err(unavailable)?;
    let Some((st, amount, currency, created_at_ms, updated_at_ms)) = row else {
        return Ok(None);
    };

    let mut stmt = conn
        .prepare_cached(
            "SELECT source, event_id, event_type, from_status, to_status, at FROM order_audit
             WHERE order_id = ?1 ORDER BY at, event_id",
        )
        .map_err(unavailable)?;
    let raw = stmt
        .query_map([id.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, String>(3)?, r.get::<_, String>(4)?, r.get(5)?))
        })
        .map_err(unavailable)?;
    let mut history = Vec::new();
    for row in raw {
        let (source, event_id, event_type, from, to, at_ms) = row.map_err(unavailable)?;
        history.push(AuditEntry { source, event_id, event_type, from: status(&from)?, to: status(&to)?, at_ms });
    }

    let mut stmt = conn
        .prepare_cached("SELECT id, kind, status, payload, created_at FROM outbox WHERE order_id = ?1 ORDER BY id")
        .map_err(unavailable)?;
    let raw = stmt
        .query_map([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, String>(3)?, r.get(4)?)))
        .map_err(unavailable)?;
    let mut outbox = Vec::new();
    for row in raw {
        let (oid, kind, st, payload, created_at_ms) = row.map_err(unavailable)?;
        let payload = serde_json::from_str(&payload).map_err(|e| corrupt("outbox payload", e))?;
        outbox.push(OutboxView { id: oid, kind, status: st, payload, created_at_ms });
    }

    Ok(Some(OrderView {
        id: id.clone(),
        status: status(&st)?,
        money: money(amount, &currency)?,
        created_at_ms,
        updated_at_ms,
        history,
        outbox,
    }))
}

pub(crate) fn event(conn: &Connection, src: &SourceName, id: &EventId) -> Result<Option<EventView>> {
    type Row = (
        Option<String>,
        Option<String>,
        Option<String>,
        String,
        Option<String>,
        u32,
        Option<i64>,
        i64,
        String,
        String,
        Vec<u8>,
    );
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT event_type, business_key, effect, status, reason, attempts, next_attempt_at, received_at,
                    verification, headers, body
             FROM inbox WHERE source = ?1 AND event_id = ?2",
        )
        .map_err(unavailable)?
        .query_row(params![src.as_str(), id.as_str()], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
            ))
        })
        .optional()
        .map_err(unavailable)?;
    let Some((event_type, business_key, effect, st, reason, attempts, next, received, verification, headers, body)) =
        row
    else {
        return Ok(None);
    };
    let effect = effect.map(|e| serde_json::from_str(&e)).transpose().map_err(|e| corrupt("stored effect", e))?;
    Ok(Some(EventView {
        source: src.clone(),
        event_id: id.clone(),
        event_type,
        business_key,
        effect,
        status: Outcome::parse(&st).ok_or_else(|| corrupt("stored event status", &st))?,
        reason,
        attempts,
        next_attempt_at_ms: next,
        received_at_ms: received,
        verification,
        headers_json: headers,
        raw_body: body,
    }))
}

fn counts(conn: &Connection, sql: &str) -> Result<Vec<(String, u64)>> {
    let mut stmt = conn.prepare_cached(sql).map_err(unavailable)?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(unavailable)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(unavailable)
}

pub(crate) fn stats(conn: &Connection) -> Result<Stats> {
    Ok(Stats {
        events: counts(conn, "SELECT status, count(*) FROM inbox GROUP BY status ORDER BY status")?,
        orders: counts(conn, "SELECT status, count(*) FROM orders GROUP BY status ORDER BY status")?,
        outbox: counts(conn, "SELECT kind, count(*) FROM outbox GROUP BY kind ORDER BY kind")?,
    })
}

pub(crate) fn next_due(conn: &Connection) -> Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT min(max(next_attempt_at, coalesce(lease_until, 0))) FROM inbox WHERE status = 'deferred'",
    )
    .map_err(unavailable)?
    .query_row([], |r| r.get(0))
    .map_err(unavailable)
}
