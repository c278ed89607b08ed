//! Listings of events, outbox rows and audit entries, newest first by row id, each read down an index that matches
//! its filter.
//!
//! A listing walks one ordered path: an index `(value, id)` of one of its equality filters (the baseline:
//! `inbox (status, id)`, `(source, id)`, `(event_type, id)`, `outbox (status, id)`, `(sink, id)`; migration 0012:
//! `audit (actor, id)`, `(action, id)`, `(target, id)`), or the id index (`inbox_newest`, the outbox's and the
//! audit trail's primary keys), or, for an order's outbox rows, `UNIQUE (order_id, kind, sink)` (an order has a
//! handful). A time range becomes a row id range through `inbox_received` (`audit_at` for the audit trail): the
//! first row received at or after `since` is the lowest id, the first received at or after `until` the highest
//! (exclusive); ids grow with arrival, and the exact time conditions stay on each row.
//!
//! The conditions the path does not serve (a reason substring, a second equality filter, the exact time) are
//! checked on each row the path yields, and then a page examines at most `list_scan_rows` rows: a first statement
//! finds the id that many rows down the path (`LIMIT 1 OFFSET n - 1`), and the page reads no lower. A page that
//! stops there with fewer rows than asked says where it stopped ([`Listing::scan_stopped_before`]). The statements
//! of one page run in one snapshot.

use crate::error::PgError;
use crate::pool;
use crate::pool::{Object, Pool};
use payhook_store::listing::{Check, Column, Path, Route, audit_route, event_route, outbox_route};
use payhook_store::{
    AuditAction, AuditEntry, AuditFilter, AuditRecord, EventFilter, EventSummary, Listing, OutboxFilter, OutboxView,
    Outcome, StoreError,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

type Result<T> = std::result::Result<T, StoreError>;
type Value = Box<dyn ToSql + Sync + Send>;

/// The first row received at or after a time (the lowest id among rows of that millisecond): how `since` and
/// `until` become row ids. The `OFFSET 0` keeps the planner from answering `min(id)` by walking the id index (of
/// every partition) and checking each row's time: the rows of one millisecond come from `inbox_received`.
pub const RECEIVED_SQL: &str = "SELECT min(id) FROM (SELECT id FROM inbox
     WHERE received_at = (SELECT min(received_at) FROM inbox WHERE received_at >= $1) OFFSET 0) AS first_ms";

/// The first audit entry made at or after a time (`NULL` when there is none), down `audit_at`: how an audit
/// listing's `since` and `until` become row ids.
pub const AUDIT_AT_SQL: &str = "SELECT (SELECT id FROM audit WHERE at_ms >= $1 ORDER BY at_ms, id LIMIT 1)";

const AUDIT_COLUMNS: &str = "id, at_ms, actor, address, action, target, outcome, detail::text";

const EVENT_COLUMNS: &str = "id, source, event_id, event_type, status, reason, attempts, next_attempt_at, received_at";
const SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// The ordered path a listing walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// An index `(value, id)` of one of its filters, or the id index: in row id order within each value.
    Index(&'static str),
    /// An order's outbox rows, down `UNIQUE (order_id, kind, sink)`: a handful, whatever the history, sorted.
    OrderRows,
}

impl Walk {
    /// The index it walks.
    pub fn index(self) -> &'static str {
        match self {
            Walk::Index(name) => name,
            Walk::OrderRows => "outbox_order_id_kind_sink_key",
        }
    }
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

/// Numbers the `$` of each condition from `first` on, joined with `AND`.
fn numbered(conditions: &[&str], first: usize) -> String {
    conditions
        .iter()
        .enumerate()
        .map(|(i, c)| c.replace('$', &format!("${}", first + i)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// Builds the statements of a listing of `table` that walks `walk` with `path` conditions (served by its index)
/// and checks `residual` ones on each row.
fn plan(table: &str, columns: &str, walk: Walk, path: Vec<(String, Value)>, residual: Vec<(&str, Value)>) -> Plan {
    let by_order = walk == Walk::OrderRows;
    let mut path_sql: Vec<&str> = path.iter().map(|(sql, _)| sql.as_str()).collect();
    path_sql.extend(["id < $", "id >= $"]);
    let n = path_sql.len();
    let path_where = numbered(&path_sql, 1);
    // An order's rows are few whatever the history: they need no scan bound.
    let boundary = (!residual.is_empty() && !by_order)
        .then(|| format!("SELECT id FROM {table} WHERE {path_where} ORDER BY id DESC LIMIT 1 OFFSET ${}", n + 1));
    let residual_sql: Vec<&str> = residual.iter().map(|(sql, _)| *sql).collect();
    let limit = n + residual_sql.len() + 1;
    let page = if by_order {
        // The order's rows first (a handful, down its index), then the range and the checks, sorted.
        let order: Vec<&str> = path.iter().map(|(sql, _)| sql.as_str()).collect();
        let mut checks = vec!["id < $", "id >= $"];
        checks.extend(&residual_sql);
        format!(
            "SELECT {columns} FROM (SELECT {columns} FROM {table} WHERE {} OFFSET 0) path
             WHERE {} ORDER BY id DESC LIMIT ${limit}",
            numbered(&order, 1),
            numbered(&checks, order.len() + 1)
        )
    } else if residual_sql.is_empty() {
        format!("SELECT {columns} FROM {table} WHERE {path_where} ORDER BY id DESC LIMIT ${limit}")
    } else {
        // The per-row conditions stay outside the path's subquery (`OFFSET 0` keeps the planner from pushing them
        // in), so that the planner walks the path's index, which the bound counts, and not another filter's index
        // over the same id range, which could hold any number of rows.
        let checks = numbered(&residual_sql, n + 1);
        format!(
            "SELECT {columns} FROM (SELECT {columns} FROM {table} WHERE {path_where} ORDER BY id DESC OFFSET 0) path
             WHERE {checks} ORDER BY id DESC LIMIT ${limit}"
        )
    };
    Plan {
        sql: ListingSql { time_bounds: Vec::new(), boundary, page, walk },
        path_values: path.into_iter().map(|(_, v)| v).collect(),
        residual_values: residual.into_iter().map(|(_, v)| v).collect(),
    }
}

fn text(s: &str) -> Value {
    Box::new(s.to_owned())
}

/// How PostgreSQL spells a condition, with its value.
fn check_sql(check: &Check<'_>) -> (&'static str, Value) {
    match *check {
        Check::Equals(column, v) => (
            match column {
                Column::Status => "status = $",
                Column::EventType => "event_type = $",
                Column::Source => "source = $",
                Column::Kind => "kind = $",
                Column::Sink => "sink = $",
                Column::OrderId => "order_id = $",
                Column::Actor => "actor = $",
                Column::Action => "action = $",
                Column::Target => "target = $",
            },
            text(v),
        ),
        Check::ReasonContains(r) => ("strpos(reason, $) > 0", text(r)),
        Check::ReceivedFrom(t) => ("received_at >= $", Box::new(t)),
        Check::ReceivedBefore(t) => ("received_at < $", Box::new(t)),
        Check::AtFrom(t) => ("at_ms >= $", Box::new(t)),
        Check::AtBefore(t) => ("at_ms < $", Box::new(t)),
    }
}

/// The statements of `route` over `table`, which walk its path's index.
fn route_plan(table: &str, columns: &str, route: &Route<'_>) -> Plan {
    let (walk, path) = match route.path {
        Path::Newest if table == "inbox" => (Walk::Index("inbox_newest"), Vec::new()),
        Path::Newest if table == "audit" => (Walk::Index("audit_pkey"), Vec::new()),
        Path::Newest => (Walk::Index("outbox_pkey"), Vec::new()),
        Path::Value(column, v) => {
            let walk = match (table, column) {
                (_, Column::OrderId) => Walk::OrderRows,
                ("inbox", Column::Status) => Walk::Index("inbox_by_status"),
                (_, Column::Status) => Walk::Index("outbox_by_status"),
                (_, Column::EventType) => Walk::Index("inbox_by_type"),
                (_, Column::Source) => Walk::Index("inbox_by_source"),
                (_, Column::Sink) => Walk::Index("outbox_by_sink"),
                (_, Column::Actor) => Walk::Index("audit_by_actor"),
                (_, Column::Action) => Walk::Index("audit_by_action"),
                (_, Column::Target) => Walk::Index("audit_by_target"),
                // No listing walks the outbox by kind (`outbox_route` never chooses it): its primary key.
                (_, Column::Kind) => Walk::Index("outbox_pkey"),
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
    route_plan("outbox", crate::read::OUTBOX_COLUMNS, &outbox_route(f))
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

fn refs(values: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| v.as_ref() as &(dyn ToSql + Sync)).collect()
}

/// A listing's time range, and the statement that finds the first row id at or after a time of it.
type Times = (&'static str, [Option<i64>; 2]);

/// The rows of one page and where the scan bound stopped it, read in one snapshot.
async fn read_page(
    client: &Object,
    p: Plan,
    before: Option<i64>,
    (first_at, times): Times,
    limit: u32,
    scan_rows: u32,
) -> std::result::Result<(Vec<Row>, Option<i64>), tokio_postgres::Error> {
    client.batch_execute(SNAPSHOT).await?;
    let first_received = async |at: i64| -> std::result::Result<Option<i64>, tokio_postgres::Error> {
        let stmt = client.prepare_cached(first_at).await?;
        client.query_one(&stmt, &[&at]).await?.try_get(0)
    };
    let [since, until] = times;
    let mut from = i64::MIN;
    let mut below = before.unwrap_or(i64::MAX);
    let mut empty = false;
    if let Some(since) = since {
        match first_received(since).await? {
            Some(id) => from = id,
            // Nothing was received since then.
            None => empty = true,
        }
    }
    if let Some(until) = until
        && let Some(id) = first_received(until).await?
    {
        below = below.min(id);
    }
    let mut stopped_at = None;
    let mut rows = Vec::new();
    if !empty && from < below {
        if let Some(sql) = &p.sql.boundary {
            let mut values = refs(&p.path_values);
            let offset = i64::from(scan_rows.max(1)) - 1;
            values.extend([&below as &(dyn ToSql + Sync), &from, &offset]);
            let stmt = client.prepare_cached(sql).await?;
            if let Some(row) = client.query_opt(&stmt, &values).await? {
                let floor: i64 = row.try_get(0)?;
                from = from.max(floor);
                stopped_at = Some(floor);
            }
        }
        let mut values = refs(&p.path_values);
        values.extend([&below as &(dyn ToSql + Sync), &from]);
        values.extend(refs(&p.residual_values));
        let limit = i64::from(limit);
        values.push(&limit);
        let stmt = client.prepare_cached(&p.sql.page).await?;
        rows = client.query(&stmt, &values).await?;
    }
    client.batch_execute("COMMIT").await?;
    let short = rows.len() < limit as usize;
    Ok((rows, stopped_at.filter(|_| short)))
}

async fn page(
    pool: &Pool,
    p: Plan,
    before: Option<i64>,
    times: Times,
    limit: u32,
    scan_rows: u32,
) -> Result<(Vec<Row>, Option<i64>)> {
    let client = pool::get(pool).await?;
    match read_page(&client, p, before, times, limit, scan_rows).await {
        Ok(found) => Ok(found),
        Err(e) => {
            let e = PgError::Db(e);
            pool::release_after(client, e.breaks_connection()).await;
            Err(e.into())
        }
    }
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize, what: &str) -> Result<T> {
    row.try_get(i).map_err(|e| StoreError::corrupt(what, e))
}

/// Events, newest first, narrowed by `f`; at most `scan_rows` rows examined when the path does not serve the whole
/// filter.
pub(crate) async fn list_events(pool: &Pool, f: &EventFilter, scan_rows: u32) -> Result<Listing<EventSummary>> {
    let (rows, scan_stopped_before) =
        page(pool, event_plan(f), f.before, (RECEIVED_SQL, [f.since_ms, f.until_ms]), f.limit, scan_rows).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let attempts: i32 = get(r, 6, "attempts")?;
        let status: &str = get(r, 4, "event status")?;
        out.push(EventSummary {
            row_id: get(r, 0, "inbox id")?,
            source: get(r, 1, "source")?,
            event_id: get(r, 2, "event id")?,
            event_type: get(r, 3, "event type")?,
            status: Outcome::parse(status)
                .ok_or_else(|| StoreError::inconsistent(format!("stored event status {status:?}")))?,
            reason: get(r, 5, "reason")?,
            attempts: u32::try_from(attempts).map_err(|e| StoreError::corrupt("attempts", e))?,
            next_attempt_at_ms: get(r, 7, "next attempt")?,
            received_at_ms: get(r, 8, "received at")?,
        });
    }
    Ok(Listing { rows: out, scan_stopped_before })
}

/// Outbox rows, newest first, narrowed by `f`; at most `scan_rows` rows examined when the path does not serve the
/// whole filter.
pub(crate) async fn list_outbox(pool: &Pool, f: &OutboxFilter, scan_rows: u32) -> Result<Listing<OutboxView>> {
    let times = (RECEIVED_SQL, [None, None]);
    let (rows, scan_stopped_before) = page(pool, outbox_plan(f), f.before, times, f.limit, scan_rows).await?;
    Ok(Listing { rows: crate::read::outbox_views(&rows)?, scan_stopped_before })
}

/// Audit entries, newest first, narrowed by `f`; at most `scan_rows` rows examined when the path does not serve the
/// whole filter.
pub(crate) async fn list_audit(pool: &Pool, f: &AuditFilter, scan_rows: u32) -> Result<Listing<AuditRecord>> {
    let times = (AUDIT_AT_SQL, [f.since_ms, f.until_ms]);
    let (rows, scan_stopped_before) = page(pool, audit_plan(f), f.before, times, f.limit, scan_rows).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let action: &str = get(r, 4, "audit action")?;
        let action: AuditAction = action.parse().map_err(|e| StoreError::corrupt("stored audit action", e))?;
        let detail: Option<&str> = get(r, 7, "audit detail")?;
        let detail = match detail {
            Some(json) => serde_json::from_str(json).map_err(|e| StoreError::corrupt("stored audit detail", e))?,
            None => serde_json::Value::Null,
        };
        let entry = AuditEntry {
            at_ms: get(r, 1, "audit time")?,
            actor: get(r, 2, "audit actor")?,
            address: get(r, 3, "audit address")?,
            action,
            target: get(r, 5, "audit target")?,
            outcome: get(r, 6, "audit outcome")?,
            detail,
        };
        out.push(AuditRecord { id: get(r, 0, "audit id")?, entry });
    }
    Ok(Listing { rows: out, scan_stopped_before })
}
