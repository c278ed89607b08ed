//! Listings of events, outbox rows and audit entries, newest first by row id, each read down an index that matches
//! its filter.
//!
//! A listing walks one ordered path: the index of one of its equality filters (migration 0011: `inbox (status)`,
//! which migration 0013 narrows to the statuses other than `processed`, `inbox (source)`, `inbox (event_type)`,
//! `outbox (status)`, narrowed to `pending` and `dead`, `outbox (sink)`; migration 0014: `audit (actor)`,
//! `audit (action)`, `audit (target)`; SQLite appends the row id to every index entry, so each is ordered by id
//! within its value), or the table itself in row id order, or, for an order's outbox rows, the ids the order lists
//! (`orders.outbox_ids`). The path is named in the statement (`INDEXED BY`, `NOT INDEXED`), so the plan does not
//! depend on statistics. A time range becomes a row id range through `inbox_received` (`audit_at` for the audit
//! trail): the first row received at or after `since` is the lowest id, the first received at or after `until`
//! the highest (exclusive); ids grow with arrival, and the exact time conditions stay on each row.
//!
//! The conditions the path does not serve (a reason substring, a second equality filter, the exact time) are
//! checked on each row the path yields, and then a page examines at most `list_scan_rows` rows: a first statement
//! finds the id that many rows down the path (`LIMIT 1 OFFSET n - 1`), and the page reads no lower. A page that
//! stops there with fewer rows than asked says where it stopped ([`Listing::scan_stopped_before`]).

use crate::read::{OUTBOX_COLUMNS, in_snapshot, outbox_rows, outcome};
use crate::writer::unavailable;
use payhook_store::listing::{Check, Column, Path, Route, audit_route, event_route, outbox_route};
use payhook_store::{
    AuditAction, AuditEntry, AuditFilter, AuditRecord, EventFilter, EventSummary, Listing, OutboxFilter, OutboxView,
    StoreError,
};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, ToSql};

type Result<T> = std::result::Result<T, StoreError>;

/// The first row received at or after a time: how `since` and `until` become row ids.
pub const RECEIVED_SQL: &str =
    "SELECT id FROM inbox INDEXED BY inbox_received WHERE received_at >= ?1 ORDER BY received_at, id LIMIT 1";

/// The first audit entry made at or after a time: how an audit listing's `since` and `until` become row ids.
pub const AUDIT_AT_SQL: &str = "SELECT id FROM audit INDEXED BY audit_at WHERE at_ms >= ?1 ORDER BY at_ms, id LIMIT 1";

const AUDIT_COLUMNS: &str = "id, at_ms, actor, address, action, target, outcome, detail";

const EVENT_COLUMNS: &str = "id, source, event_id, event_type, status, reason, attempts, next_attempt_at, received_at";

/// The ordered path a listing walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// The index of one of its filters, whose entries are in row id order within each value.
    Index(&'static str),
    /// The table itself, in row id order.
    RowId,
    /// The rows an order lists (`orders.outbox_ids`): a handful, whatever the history.
    OrderList,
}

/// The statements one listing runs, in their order, for tests to check their plans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingSql {
    /// [`RECEIVED_SQL`] ([`AUDIT_AT_SQL`] for the audit trail), once for `since` and once for `until`, when the
    /// filter has them.
    pub time_bounds: Vec<&'static str>,
    /// Where the scan bound falls; `None` when the path serves the whole filter (every row it yields matches).
    pub boundary: Option<String>,
    /// The page itself.
    pub page: String,
    /// The path the boundary and the page walk.
    pub walk: Walk,
}

/// How one listing reads, with the values of its conditions.
struct Plan {
    sql: ListingSql,
    /// Values of the path's own conditions, in placeholder order.
    path_values: Vec<Value>,
    /// Values of the conditions checked per row, in placeholder order.
    residual_values: Vec<Value>,
}

/// Builds the statements of a listing of `table` that walks `walk` with `path` conditions (served by the walk) and
/// checks `residual` ones on each row.
fn plan(table: &str, columns: &str, walk: Walk, path: Vec<(String, Value)>, residual: Vec<(&str, Value)>) -> Plan {
    let access = match walk {
        Walk::Index(name) => format!("INDEXED BY {name}"),
        Walk::RowId | Walk::OrderList => "NOT INDEXED".to_owned(),
    };
    let mut path_sql: Vec<&str> = path.iter().map(|(sql, _)| sql.as_str()).collect();
    path_sql.extend(["id < ?", "id >= ?"]);
    let path_where = path_sql.join(" AND ");
    // An order's rows are few whatever the history: they need no scan bound.
    let boundary = (!residual.is_empty() && walk != Walk::OrderList)
        .then(|| format!("SELECT id FROM {table} {access} WHERE {path_where} ORDER BY id DESC LIMIT 1 OFFSET ?"));
    let mut page_where = path_where;
    for (sql, _) in &residual {
        page_where.push_str(" AND ");
        page_where.push_str(sql);
    }
    let page = format!("SELECT {columns} FROM {table} {access} WHERE {page_where} ORDER BY id DESC LIMIT ?");
    Plan {
        sql: ListingSql { time_bounds: Vec::new(), boundary, page, walk },
        path_values: path.into_iter().map(|(_, v)| v).collect(),
        residual_values: residual.into_iter().map(|(_, v)| v).collect(),
    }
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

/// How SQLite spells a condition, with its value.
fn check_sql(check: &Check<'_>) -> (&'static str, Value) {
    match *check {
        Check::Equals(column, v) => (
            match column {
                Column::Status => "status = ?",
                Column::EventType => "event_type = ?",
                Column::Source => "source = ?",
                Column::Kind => "kind = ?",
                Column::Sink => "sink = ?",
                Column::OrderId => "id IN (SELECT value FROM orders, json_each(orders.outbox_ids) WHERE orders.id = ?)",
                Column::Actor => "actor = ?",
                Column::Action => "action = ?",
                Column::Target => "target = ?",
            },
            text(v),
        ),
        Check::ReasonContains(r) => ("instr(reason, ?) > 0", text(r)),
        Check::ReceivedFrom(t) => ("received_at >= ?", Value::Integer(t)),
        Check::ReceivedBefore(t) => ("received_at < ?", Value::Integer(t)),
        Check::AtFrom(t) => ("at_ms >= ?", Value::Integer(t)),
        Check::AtBefore(t) => ("at_ms < ?", Value::Integer(t)),
    }
}

/// The statements of `route` over `table`: its path named (`INDEXED BY`), its checks per row.
fn route_plan(table: &str, columns: &str, route: &Route<'_>) -> Plan {
    let (walk, path) = match route.path {
        Path::Newest => (Walk::RowId, Vec::new()),
        Path::Value(column, v) => {
            let walk = match (table, column) {
                (_, Column::OrderId) => Walk::OrderList,
                ("inbox", Column::Status) => Walk::Index("inbox_by_status"),
                (_, Column::Status) => Walk::Index("outbox_by_status"),
                (_, Column::EventType) => Walk::Index("inbox_by_type"),
                (_, Column::Source) => Walk::Index("inbox_by_source"),
                (_, Column::Sink) => Walk::Index("outbox_by_sink"),
                (_, Column::Actor) => Walk::Index("audit_by_actor"),
                (_, Column::Action) => Walk::Index("audit_by_action"),
                (_, Column::Target) => Walk::Index("audit_by_target"),
                // No listing walks the outbox by kind (`outbox_route` never chooses it): read every row.
                (_, Column::Kind) => Walk::RowId,
            };
            let (sql, value) = check_sql(&Check::Equals(column, v));
            let sql = match route.index_predicate {
                Some(predicate) => format!("{sql} AND {predicate}"),
                None => sql.to_owned(),
            };
            (walk, vec![(sql, value)])
        }
    };
    plan(table, columns, walk, path, route.checks.iter().map(check_sql).collect())
}

fn event_plan(f: &EventFilter) -> Plan {
    let mut plan = route_plan("inbox", EVENT_COLUMNS, &event_route(f));
    plan.sql.time_bounds = [f.since_ms, f.until_ms].iter().flatten().map(|_| RECEIVED_SQL).collect();
    plan
}

fn outbox_plan(f: &OutboxFilter) -> Plan {
    route_plan("outbox", OUTBOX_COLUMNS, &outbox_route(f))
}

fn audit_plan(f: &AuditFilter) -> Plan {
    let mut plan = route_plan("audit", AUDIT_COLUMNS, &audit_route(f));
    plan.sql.time_bounds = [f.since_ms, f.until_ms].iter().flatten().map(|_| AUDIT_AT_SQL).collect();
    plan
}

/// The statements [`list_events`] runs for `f`.
pub fn event_listing_sql(f: &EventFilter) -> ListingSql {
    event_plan(f).sql
}

/// The statements [`list_outbox`] runs for `f`.
pub fn outbox_listing_sql(f: &OutboxFilter) -> ListingSql {
    outbox_plan(f).sql
}

/// The statements [`list_audit`] runs for `f`.
pub fn audit_listing_sql(f: &AuditFilter) -> ListingSql {
    audit_plan(f).sql
}

/// The id range a page may read, and where the scan bound put its floor.
struct Range {
    below: i64,
    from: i64,
    stopped_at: Option<i64>,
}

/// Finds the range of ids the page reads: below the cursor (and the first row received at or after `until`), at or
/// above the first row received at or after `since` (each found by `first_at`, the table's statement for it), and
/// no lower than `scan_rows` rows down the path. `None` when the range is empty.
fn range(
    conn: &Connection,
    p: &Plan,
    before: Option<i64>,
    (first_at, times): (&str, [Option<i64>; 2]),
    scan_rows: u32,
) -> Result<Option<Range>> {
    let first_received = |at: i64| -> Result<Option<i64>> {
        conn.prepare_cached(first_at)
            .map_err(unavailable)?
            .query_row([at], |r| r.get(0))
            .optional()
            .map_err(unavailable)
    };
    let [since, until] = times;
    let mut from = i64::MIN;
    if let Some(since) = since {
        match first_received(since)? {
            Some(id) => from = id,
            // Nothing was received since then.
            None => return Ok(None),
        }
    }
    let mut below = before.unwrap_or(i64::MAX);
    if let Some(until) = until
        && let Some(id) = first_received(until)?
    {
        below = below.min(id);
    }
    if from >= below {
        return Ok(None);
    }
    let mut stopped_at = None;
    if let Some(sql) = &p.sql.boundary {
        let mut values = p.path_values.clone();
        values.extend([Value::Integer(below), Value::Integer(from), Value::Integer(i64::from(scan_rows.max(1)) - 1)]);
        let floor: Option<i64> = conn
            .prepare_cached(sql)
            .map_err(unavailable)?
            .query_row(rusqlite::params_from_iter(values), |r| r.get(0))
            .optional()
            .map_err(unavailable)?;
        if let Some(floor) = floor {
            from = from.max(floor);
            stopped_at = Some(floor);
        }
    }
    Ok(Some(Range { below, from, stopped_at }))
}

/// The page's placeholder values: path, range, per-row conditions, limit.
fn page_values(p: Plan, r: &Range, limit: u32) -> Vec<Value> {
    let mut values = p.path_values;
    values.extend([Value::Integer(r.below), Value::Integer(r.from)]);
    values.extend(p.residual_values);
    values.push(Value::Integer(i64::from(limit)));
    values
}

/// A page of rows and, when the scan bound stopped it short, where it stopped.
fn listing<T>(rows: Vec<T>, limit: u32, r: &Range) -> Listing<T> {
    let short = rows.len() < limit as usize;
    Listing { rows, scan_stopped_before: r.stopped_at.filter(|_| short) }
}

/// A page of `plan` below `before` (within the times `at` turns into ids), each row read by `read`.
fn page<T>(
    conn: &Connection,
    p: Plan,
    before: Option<i64>,
    at: (&str, [Option<i64>; 2]),
    scan_rows: u32,
    limit: u32,
    read: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<Result<T>>,
) -> Result<Listing<T>> {
    let Some(r) = range(conn, &p, before, at, scan_rows)? else {
        return Ok(Listing::complete(Vec::new()));
    };
    let sql = p.sql.page.clone();
    let mut stmt = conn.prepare_cached(&sql).map_err(unavailable)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(page_values(p, &r, limit))).map_err(unavailable)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(unavailable)? {
        out.push(read(row).map_err(unavailable)??);
    }
    Ok(listing(out, limit, &r))
}

/// Events, newest first, narrowed by `f`; at most `scan_rows` rows examined when the path does not serve the whole
/// filter. Reads in one snapshot. Public (with [`list_outbox`]) so that tests count the work a listing does on a
/// connection of their own; the store runs it on its read connections.
pub fn list_events(conn: &Connection, f: &EventFilter, scan_rows: u32) -> Result<Listing<EventSummary>> {
    in_snapshot(conn, |tx| {
        let at = (RECEIVED_SQL, [f.since_ms, f.until_ms]);
        page(tx, event_plan(f), f.before, at, scan_rows, f.limit, |r| {
            let (row_id, source, event_id, event_type) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let (status, reason, attempts): (String, _, _) = (r.get(4)?, r.get(5)?, r.get(6)?);
            let (next_attempt_at_ms, received_at_ms) = (r.get(7)?, r.get(8)?);
            Ok(outcome(&status).map(|status| EventSummary {
                row_id,
                source,
                event_id,
                event_type,
                status,
                reason,
                attempts,
                next_attempt_at_ms,
                received_at_ms,
            }))
        })
    })
}

/// Outbox rows, newest first, narrowed by `f`; at most `scan_rows` rows examined when the path does not serve the
/// whole filter. Reads in one snapshot.
pub fn list_outbox(conn: &Connection, f: &OutboxFilter, scan_rows: u32) -> Result<Listing<OutboxView>> {
    in_snapshot(conn, |tx| {
        let p = outbox_plan(f);
        let Some(r) = range(tx, &p, f.before, (RECEIVED_SQL, [None, None]), scan_rows)? else {
            return Ok(Listing::complete(Vec::new()));
        };
        let sql = p.sql.page.clone();
        let values = page_values(p, &r, f.limit);
        let args: Vec<&dyn ToSql> = values.iter().map(|v| v as &dyn ToSql).collect();
        let rows = outbox_rows(tx, &sql, &args)?;
        Ok(listing(rows, f.limit, &r))
    })
}

/// Audit entries, newest first, narrowed by `f`; at most `scan_rows` rows examined when the path does not serve the
/// whole filter. Reads in one snapshot.
pub fn list_audit(conn: &Connection, f: &AuditFilter, scan_rows: u32) -> Result<Listing<AuditRecord>> {
    in_snapshot(conn, |tx| {
        let at = (AUDIT_AT_SQL, [f.since_ms, f.until_ms]);
        page(tx, audit_plan(f), f.before, at, scan_rows, f.limit, |r| {
            let (action, detail): (String, Option<String>) = (r.get(4)?, r.get(7)?);
            let (at_ms, actor, address, target, outcome) = (r.get(1)?, r.get(2)?, r.get(3)?, r.get(5)?, r.get(6)?);
            let id = r.get(0)?;
            Ok((|| {
                let action: AuditAction = action.parse().map_err(|e| StoreError::corrupt("stored audit action", e))?;
                let detail = match detail {
                    Some(json) => {
                        serde_json::from_str(&json).map_err(|e| StoreError::corrupt("stored audit detail", e))?
                    }
                    None => serde_json::Value::Null,
                };
                Ok(AuditRecord { id, entry: AuditEntry { at_ms, actor, address, action, target, outcome, detail } })
            })())
        })
    })
}
