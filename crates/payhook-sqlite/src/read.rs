//! Read-only queries, served by the read connections (`pool`) so they never wait for the writer (WAL lets readers
//! and the writer proceed together).

use crate::writer::unavailable;
use payhook_core::event::{Currency, EventId, Money, OrderId, SourceName};
use payhook_core::ledger::OrderStatus;
use payhook_store::{
    AttemptEntry, BillingChange, BillingObject, EventView, Held, KeyOrder, OrderChange, OrderView, OutboxStatus,
    OutboxView, Outcome, ReceivedHeaders, Stats, StoreError,
};
use rusqlite::{Connection, OptionalExtension, ToSql, params};

type Result<T> = std::result::Result<T, StoreError>;

/// Runs `read` in one read transaction, so that all its statements see one snapshot. `BEGIN` and `COMMIT` come
/// from the statement cache: `Connection::unchecked_transaction` parses both anew on every call, which was about a
/// sixth of the instructions of reading one order (BENCHMARKS.md's history, *Instructions per delivery*). A failed read
/// rolls back here, and the pool rolls back any connection given back inside a transaction as well.
pub(crate) fn in_snapshot<T>(conn: &Connection, read: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    conn.prepare_cached("BEGIN").and_then(|mut begin| begin.execute([])).map_err(unavailable)?;
    let result = read(conn);
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    let ended = conn.prepare_cached(end).and_then(|mut end| end.execute([]));
    let value = result?;
    ended.map_err(unavailable)?;
    Ok(value)
}

pub(crate) fn money(amount: i64, currency: &str) -> Result<Money> {
    let currency = Currency::parse(currency).map_err(|e| StoreError::corrupt("stored currency", e))?;
    Money::new(amount, currency).map_err(|e| StoreError::corrupt("stored amount", e))
}

pub(crate) fn source(s: String) -> Result<SourceName> {
    SourceName::parse(s).map_err(|e| StoreError::corrupt("stored source", e))
}

pub(crate) fn event_id(s: String) -> Result<EventId> {
    EventId::parse(s).map_err(|e| StoreError::corrupt("stored event id", e))
}

fn status(s: &str) -> Result<OrderStatus> {
    OrderStatus::parse(s).ok_or_else(|| StoreError::inconsistent(format!("stored order status {s:?}")))
}

/// The order, its history and its outbox rows, read in one transaction so they come from one snapshot.
pub(crate) fn order(conn: &Connection, id: &OrderId) -> Result<Option<OrderView>> {
    in_snapshot(conn, |conn| order_in(conn, id))
}

fn order_in(conn: &Connection, id: &OrderId) -> Result<Option<OrderView>> {
    type Row = (String, i64, String, i64, i64, String, String);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT status, amount, currency, created_at, updated_at, history, outbox_ids FROM orders WHERE id = ?1",
        )
        .map_err(unavailable)?
        .query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)))
        .optional()
        .map_err(unavailable)?;
    let Some((st, amount, currency, created_at_ms, updated_at_ms, history, outbox_ids)) = row else {
        return Ok(None);
    };
    let history = history_entries(&history)?;
    // The order lists its outbox rows (see migration 0006). They are joined to the list, not selected `IN` it: for
    // `IN (SELECT … json_each …)` SQLite builds an ephemeral table and a zero-filled 10 KB Bloom filter on every
    // read (BENCHMARKS.md's history, *Instructions per delivery*).
    let outbox = outbox_rows(
        conn,
        &format!(
            "SELECT {OUTBOX_COLUMNS} FROM (SELECT value AS listed FROM json_each(?1)) JOIN outbox ON outbox.id = listed
             ORDER BY outbox.id"
        ),
        &[&outbox_ids],
    )?;

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

/// The columns [`outbox_rows`] reads, in its order.
pub(crate) const OUTBOX_COLUMNS: &str = "id, kind, sink, status, payload, order_id, source, event_id, attempts, next_attempt_at, \
                              last_error, last_status, delivered_at, created_at";

pub(crate) fn outbox_rows(conn: &Connection, sql: &str, args: &[&dyn ToSql]) -> Result<Vec<OutboxView>> {
    let mut stmt = conn.prepare_cached(sql).map_err(unavailable)?;
    let raw = stmt
        .query_map(args, |r| {
            Ok((
                OutboxView {
                    id: r.get(0)?,
                    kind: crate::context::outbox_kind(r, 1)?,
                    // Stored as '' for a row no sink takes.
                    sink: Some(r.get::<_, String>(2)?).filter(|s| !s.is_empty()),
                    status: {
                        let s: String = r.get(3)?;
                        OutboxStatus::parse(&s).ok_or_else(|| {
                            rusqlite::Error::FromSqlConversionFailure(
                                3,
                                rusqlite::types::Type::Text,
                                format!("outbox status {s:?}").into(),
                            )
                        })?
                    },
                    payload: serde_json::Value::Null,
                    order_id: r.get(5)?,
                    source: r.get(6)?,
                    event_id: r.get(7)?,
                    attempts: r.get(8)?,
                    next_attempt_at_ms: r.get(9)?,
                    last_error: r.get(10)?,
                    last_status: r.get(11)?,
                    delivered_at_ms: r.get(12)?,
                    created_at_ms: r.get(13)?,
                },
                r.get::<_, String>(4)?,
            ))
        })
        .map_err(unavailable)?;
    let mut rows = Vec::new();
    for row in raw {
        let (mut view, payload) = row.map_err(unavailable)?;
        view.payload = serde_json::from_str(&payload).map_err(|e| StoreError::corrupt("outbox payload", e))?;
        rows.push(view);
    }
    Ok(rows)
}

/// An order's history as stored in its row: `[[source, event_id, event_type, from, to, at_ms], …]`, oldest first.
fn history_entries(json: &str) -> Result<Vec<OrderChange>> {
    type Entry = (String, String, String, String, String, i64);
    let entries: Vec<Entry> = serde_json::from_str(json).map_err(|e| StoreError::corrupt("stored order history", e))?;
    entries
        .into_iter()
        .map(|(source, event_id, event_type, from, to, at_ms)| {
            Ok(OrderChange { source, event_id, event_type, from: status(&from)?, to: status(&to)?, at_ms })
        })
        .collect()
}

pub(crate) fn outcome(s: &str) -> Result<Outcome> {
    Outcome::parse(s).ok_or_else(|| StoreError::inconsistent(format!("stored event status {s:?}")))
}

/// An event with its attempts, its changes and the outbox rows it caused, read in one snapshot.
pub(crate) fn event(conn: &Connection, src: &SourceName, id: &EventId) -> Result<Option<EventView>> {
    in_snapshot(conn, |conn| event_in(conn, src, id))
}

fn event_in(conn: &Connection, src: &SourceName, id: &EventId) -> Result<Option<EventView>> {
    type Row = (
        i64,
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
            // The payload is in `inbox_payloads`, or in the row itself when it was stored before that table
            // existed (or by an older process on the same file); cleared, it is in neither.
            "SELECT i.id, i.event_type, i.business_key, i.effect, i.status, i.reason, i.attempts,
                    i.next_attempt_at, i.received_at, i.verification,
                    coalesce(p.headers, i.headers), coalesce(p.body, i.body)
             FROM inbox i LEFT JOIN inbox_payloads p ON p.inbox_id = i.id
             WHERE i.source = ?1 AND i.event_id = ?2",
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
                r.get(11)?,
            ))
        })
        .optional()
        .map_err(unavailable)?;
    let Some((
        row_id,
        event_type,
        business_key,
        effect,
        st,
        reason,
        attempts,
        next,
        received,
        verification,
        headers,
        body,
    )) = row
    else {
        return Ok(None);
    };
    let effect: Option<payhook_core::event::Effect> =
        effect.map(|e| serde_json::from_str(&e)).transpose().map_err(|e| StoreError::corrupt("stored effect", e))?;

    let mut stmt = conn
        .prepare_cached("SELECT attempt, at, outcome, detail FROM inbox_attempts WHERE inbox_id = ?1 ORDER BY attempt")
        .map_err(unavailable)?;
    let raw = stmt
        .query_map([row_id], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, String>(2)?, r.get(3)?)))
        .map_err(unavailable)?;
    let mut attempt_log = Vec::new();
    for row in raw {
        let (attempt, at_ms, o, detail) = row.map_err(unavailable)?;
        attempt_log.push(AttemptEntry { attempt, at_ms, outcome: outcome(&o)?, detail });
    }

    // Its changes and outbox rows: those of its order (found through the clustered keys), and its orderless rows.
    let (mut changes, mut outbox) = (Vec::new(), Vec::new());
    if let Some(payhook_core::event::Effect::Order { order_id, .. }) = &effect {
        let row: Option<(String, String)> = conn
            .prepare_cached("SELECT history, outbox_ids FROM orders WHERE id = ?1")
            .map_err(unavailable)?
            .query_row([order_id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(unavailable)?;
        if let Some((history, outbox_ids)) = row {
            changes = history_entries(&history)?
                .into_iter()
                .filter(|h| h.source == src.as_str() && h.event_id == id.as_str())
                .collect();
            let args: [&dyn ToSql; 3] = [&outbox_ids, &src.as_str(), &id.as_str()];
            outbox = outbox_rows(
                conn,
                &format!(
                    "SELECT {OUTBOX_COLUMNS} FROM (SELECT value AS listed FROM json_each(?1))
                     JOIN outbox ON outbox.id = listed WHERE source = ?2 AND event_id = ?3 ORDER BY outbox.id"
                ),
                &args,
            )?;
        }
    }
    outbox.extend(outbox_rows(
        conn,
        &format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE order_id IS NULL AND source = ?1 AND event_id = ?2 ORDER BY id"
        ),
        &[&src.as_str(), &id.as_str()],
    )?);
    let billing_changes = conn
        .prepare_cached(
            "SELECT object, object_id, from_status, to_status, at FROM billing_audit
             WHERE source = ?1 AND event_id = ?2 ORDER BY at, object, object_id",
        )
        .map_err(unavailable)?
        .query_map([src.as_str(), id.as_str()], |r| {
            Ok(BillingChange {
                object: {
                    let o: String = r.get(0)?;
                    BillingObject::parse(&o).ok_or_else(|| {
                        let what = format!("billing change of {o:?}");
                        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, what.into())
                    })?
                },
                object_id: r.get(1)?,
                from: r.get(2)?,
                to: r.get(3)?,
                at_ms: r.get(4)?,
            })
        })
        .map_err(unavailable)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(unavailable)?;
    Ok(Some(EventView {
        source: src.clone(),
        event_id: id.clone(),
        event_type,
        business_key,
        effect,
        status: Outcome::parse(&st).ok_or_else(|| StoreError::inconsistent(format!("stored event status {st:?}")))?,
        reason,
        attempts,
        next_attempt_at_ms: next,
        received_at_ms: received,
        verification,
        headers: ReceivedHeaders::from_json(&headers).map_err(|e| StoreError::corrupt("stored headers", e))?,
        raw_body: body,
        attempt_log,
        changes,
        billing_changes,
        outbox,
    }))
}

/// When the earliest pending row of `sink` can next be claimed.
pub(crate) fn next_outbox_due(conn: &Connection, sink: &str) -> Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT min(max(next_attempt_at, coalesce(lease_until, 0))) FROM outbox INDEXED BY outbox_due
         WHERE sink = ?1 AND status = 'pending'",
    )
    .map_err(unavailable)?
    .query_row([sink], |r| r.get(0))
    .map_err(unavailable)
}

/// How many of the first `scan_rows` pending rows of `sink`, in due order, wait behind an earlier row of their key,
/// and when the oldest of them was written.
pub(crate) fn held_outbox(conn: &Connection, sink: &str, order: KeyOrder, scan_rows: u32) -> Result<Held> {
    let statement = match order {
        KeyOrder::Unordered => return Ok(Held::default()),
        KeyOrder::Hold => HELD_HOLD,
        KeyOrder::Skip => HELD_SKIP,
    };
    conn.prepare_cached(statement)
        .map_err(unavailable)?
        .query_row(params![sink, scan_rows], |r| {
            Ok(Held { rows: r.get::<_, i64>(0)?.try_into().unwrap_or(0), oldest_created_at_ms: r.get(1)? })
        })
        .map_err(unavailable)
}

macro_rules! held_statement {
    ($statuses:literal) => {
        concat!(
            "SELECT count(*), min(p.created_at)
             FROM (SELECT id, order_key, created_at FROM outbox INDEXED BY outbox_due
                   WHERE sink = ?1 AND status = 'pending' ORDER BY next_attempt_at LIMIT ?2) p
             WHERE EXISTS (SELECT 1 FROM outbox e INDEXED BY outbox_key_open
                           WHERE e.sink = ?1 AND e.order_key = p.order_key AND e.id < p.id
                             AND e.status IN ('pending', 'dead')",
            $statuses,
            ")"
        )
    };
}

const HELD_HOLD: &str = held_statement!("");
const HELD_SKIP: &str = held_statement!(" AND e.status = 'pending'");

/// Every statement [`stats`] runs, in its order: the counters (a few rows, kept by the triggers of migration
/// 0008), then the oldest pending outbox row and the oldest deferred event, each one step down a partial index
/// (named: the listings' `(status)` indexes of migration 0011 would look as good to the planner, and walk a status's
/// rows in id order instead).
/// Public so that tests check the query plan of each: none may scan `inbox`, `orders` or `outbox`.
pub const STATS_STATEMENTS: [&str; 3] = [
    "SELECT tbl, grp, kind, status, n FROM counters",
    "SELECT min(created_at) FROM outbox INDEXED BY outbox_pending_created WHERE status = 'pending'",
    "SELECT min(received_at) FROM inbox INDEXED BY inbox_deferred_received WHERE status = 'deferred'",
];

/// Row counts from the counters and the oldest waiting work, read in one snapshot.
pub(crate) fn stats(conn: &Connection) -> Result<Stats> {
    in_snapshot(conn, |tx| {
        let [counters_sql, oldest_outbox_sql, oldest_deferred_sql] = STATS_STATEMENTS;
        let counts = crate::counters::read_counts(tx, counters_sql, [])?;
        let oldest = |sql: &str| -> Result<Option<i64>> {
            tx.prepare_cached(sql).map_err(unavailable)?.query_row([], |r| r.get(0)).map_err(unavailable)
        };
        Stats::from_counts(&counts, oldest(oldest_outbox_sql)?, oldest(oldest_deferred_sql)?)
    })
}

pub(crate) fn next_due(conn: &Connection) -> Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT min(max(next_attempt_at, coalesce(lease_until, 0))) FROM inbox INDEXED BY inbox_due
         WHERE status = 'deferred'",
    )
    .map_err(unavailable)?
    .query_row([], |r| r.get(0))
    .map_err(unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(conn: &Connection) -> Result<i64> {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).map_err(unavailable)
    }

    #[test]
    fn a_snapshot_holds_across_its_statements_and_ends_with_the_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("snapshot.db");
        let writer = Connection::open(&path).expect("open");
        writer.pragma_update(None, "journal_mode", "WAL").expect("wal");
        writer.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);").expect("table");
        let reader = Connection::open(&path).expect("open");

        let (before, after) = in_snapshot(&reader, |conn| {
            let before = count(conn)?;
            writer.execute("INSERT INTO t VALUES (2)", []).expect("a commit during the read");
            Ok((before, count(conn)?))
        })
        .expect("read");
        assert_eq!((before, after), (1, 1), "the second statement saw a commit made after the first");
        assert!(reader.is_autocommit(), "the read left its transaction open");
        assert_eq!(count(&reader).expect("count"), 2, "the next read did not see the commit");

        let failed = in_snapshot(&reader, |conn| {
            count(conn)?;
            Err::<(), _>(StoreError::inconsistent("a read that fails inside its snapshot"))
        });
        assert!(failed.is_err());
        assert!(reader.is_autocommit(), "a failed read left its transaction (and snapshot) open");
    }
}
