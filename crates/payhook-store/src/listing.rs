//! Listings: one page of rows newest first, and where the next page begins.

use crate::{AuditAction, AuditFilter, EventFilter, OutboxFilter, Outcome};
use payhook_core::event::SourceName;

/// One page of a listing, newest first.
///
/// A listing reads its rows down an index that matches its filter. A filter that no index serves whole (a reason
/// substring, or two fields where the index holds one) examines at most the store's scan bound of rows per call
/// (`storage.list_scan_rows`) and stops there, found or not: the page then holds what the examined rows gave and
/// says where the unexamined rows begin, so that a caller pages on instead of the store reading without end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    /// The rows found, newest first; at most the filter's `limit`.
    pub rows: Vec<T>,
    /// Set when the scan bound stopped the page before it found `limit` rows: every row from this id up to the
    /// filter's `before` was examined, and the listing continues with `before = scan_stopped_before`. `None` when
    /// the page is full or the listing reached its oldest row.
    pub scan_stopped_before: Option<i64>,
}

impl<T> Listing<T> {
    /// A page that reached the end of the listing or filled up, without a scan bound stop.
    pub fn complete(rows: Vec<T>) -> Self {
        Self { rows, scan_stopped_before: None }
    }

    /// Where the next call continues (`before`), given the `limit` this page was asked for and each row's id:
    /// below the last row of a full page, below the examined range of a page stopped by the scan bound, `None` at
    /// the end.
    pub fn next_before(&self, limit: u32, id: impl Fn(&T) -> i64) -> Option<i64> {
        match self.rows.last() {
            Some(last) if self.rows.len() >= limit as usize => Some(id(last)),
            _ => self.scan_stopped_before,
        }
    }
}

/// A listing with every shape of filter the API, the dashboard and the CLI can send: each field present or absent,
/// and each status. For tests of the plans.
pub fn every_event_filter() -> Vec<EventFilter> {
    let statuses = [Outcome::Processed, Outcome::Duplicate, Outcome::Deferred, Outcome::Ignored, Outcome::DeadLettered];
    let mut out = Vec::new();
    for bits in 0u32..64 {
        let on = |bit: u32| bits & (1 << bit) != 0;
        let base = EventFilter {
            source: on(0).then(|| SourceName::parse("shop").ok()).flatten(),
            status: None,
            event_type: on(1).then(|| "payment.succeeded".to_owned()),
            reason_contains: on(2).then(|| "amount".to_owned()),
            since_ms: on(3).then_some(1),
            until_ms: on(4).then_some(i64::MAX),
            before: on(5).then_some(i64::MAX),
            limit: 50,
        };
        out.push(base.clone());
        out.extend(statuses.iter().map(|s| EventFilter { status: Some(*s), ..base.clone() }));
    }
    out
}

/// [`every_event_filter`] for the outbox.
pub fn every_outbox_filter() -> Vec<OutboxFilter> {
    let mut out = Vec::new();
    for bits in 0u32..16 {
        let on = |bit: u32| bits & (1 << bit) != 0;
        let base = OutboxFilter {
            status: None,
            kind: on(0).then_some(crate::OutboxKind::OrderPaid),
            sink: on(1).then(|| "receipts".to_owned()),
            order_id: on(2).then(|| "ord_1".to_owned()),
            before: on(3).then_some(i64::MAX),
            limit: 50,
        };
        out.push(base.clone());
        out.extend(crate::OutboxStatus::ALL.into_iter().map(|s| OutboxFilter { status: Some(s), ..base.clone() }));
    }
    out
}

/// [`every_event_filter`] for the audit trail.
pub fn every_audit_filter() -> Vec<AuditFilter> {
    (0u32..64)
        .map(|bits| {
            let on = |bit: u32| bits & (1 << bit) != 0;
            AuditFilter {
                actor: on(0).then(|| "ops".to_owned()),
                action: on(1).then_some(AuditAction::Replay),
                target: on(2).then(|| "shop/evt_1".to_owned()),
                since_ms: on(3).then_some(1),
                until_ms: on(4).then_some(i64::MAX),
                before: on(5).then_some(i64::MAX),
                limit: 50,
            }
        })
        .collect()
}

/// A column a listing filters on by equality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// `inbox.status` or `outbox.status`.
    Status,
    /// `inbox.event_type`.
    EventType,
    /// `inbox.source`.
    Source,
    /// `outbox.kind`.
    Kind,
    /// `outbox.sink`.
    Sink,
    /// `outbox.order_id`.
    OrderId,
    /// `audit.actor`.
    Actor,
    /// `audit.action`.
    Action,
    /// `audit.target`.
    Target,
}

/// A condition of a listing's filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check<'a> {
    /// The column holds this value.
    Equals(Column, &'a str),
    /// The event's reason contains this text.
    ReasonContains(&'a str),
    /// Received at or after, unix ms.
    ReceivedFrom(i64),
    /// Received before, unix ms.
    ReceivedBefore(i64),
    /// An audit entry made at or after, unix ms.
    AtFrom(i64),
    /// An audit entry made before, unix ms.
    AtBefore(i64),
}

/// The ordered path a listing walks, newest first: the rows of one value of a column (an index on it, ordered by
/// row id within each value; for [`Column::OrderId`], the handful of rows an order has), or every row by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path<'a> {
    /// The rows whose column holds this value.
    Value(Column, &'a str),
    /// Every row.
    Newest,
}

/// How a listing reads: the path it walks and the conditions left to check on each row the path yields. One
/// decision for every backend, which only spells it in its SQL; a route with checks is bounded by the scan bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route<'a> {
    /// The path.
    pub path: Path<'a>,
    /// The predicate of the partial index the path walks (the status indexes: [`INBOX_STATUS_INDEXED`],
    /// [`OUTBOX_STATUS_INDEXED`]), which the path's statements repeat: neither engine proves it from a parameter,
    /// and neither walks a partial index for a statement that does not imply its predicate.
    pub index_predicate: Option<&'static str>,
    /// The filter's conditions the path does not serve.
    pub checks: Vec<Check<'a>>,
}

impl<'a> Route<'a> {
    /// The route with `path` that checks every one of `equalities` it does not serve.
    fn new(path: Path<'a>, equalities: &[(Column, Option<&'a str>)]) -> Self {
        let checks = equalities
            .iter()
            .filter_map(|(column, value)| value.map(|v| Check::Equals(*column, v)))
            .filter(|check| match (check, path) {
                (Check::Equals(c, _), Path::Value(served, _)) => *c != served,
                _ => true,
            })
            .collect();
        Route { path, index_predicate: None, checks }
    }

    /// This route, with `predicate` as its path's index predicate when the path is the status.
    fn on_status_index(self, predicate: &'static str) -> Self {
        let index_predicate = matches!(self.path, Path::Value(Column::Status, _)).then_some(predicate);
        Route { index_predicate, ..self }
    }
}

/// The route of an event listing: the status index for the statuses operators page through (everything but
/// `processed`, the bulk of the inbox, which the index does not hold), else the type, else the source, else every
/// row; then the rest as checks: `processed`, the reason and the time range. Nearly every row is `processed`, so a
/// listing of them alone finds its page among the first rows it examines.
pub fn event_route(f: &EventFilter) -> Route<'_> {
    let status = f.status.map(Outcome::as_str);
    let source = f.source.as_ref().map(SourceName::as_str);
    let event_type = f.event_type.as_deref();
    let path = match (status.filter(|s| *s != Outcome::Processed.as_str()), event_type, source) {
        (Some(s), ..) => Path::Value(Column::Status, s),
        (None, Some(t), _) => Path::Value(Column::EventType, t),
        (None, None, Some(s)) => Path::Value(Column::Source, s),
        (None, None, None) => Path::Newest,
    };
    let mut route =
        Route::new(path, &[(Column::Source, source), (Column::Status, status), (Column::EventType, event_type)])
            .on_status_index(INBOX_STATUS_INDEXED);
    route.checks.extend(f.reason_contains.as_deref().map(Check::ReasonContains));
    route.checks.extend(f.since_ms.map(Check::ReceivedFrom));
    route.checks.extend(f.until_ms.map(Check::ReceivedBefore));
    route
}

/// The outbox statuses the status index holds: the ones operators act on (watch what waits, re-queue the dead).
/// `delivered` and `unrouted` are the bulk of a busy outbox and stay out of it.
pub const OUTBOX_INDEXED_STATUSES: [crate::OutboxStatus; 2] = [crate::OutboxStatus::Pending, crate::OutboxStatus::Dead];

/// The predicate of the inbox's status index (SQLite migration 0013, PostgreSQL 0011), in the SQL both engines
/// read: every status but `processed`, the bulk of the inbox.
pub const INBOX_STATUS_INDEXED: &str = "status <> 'processed'";

/// The predicate of the outbox's status index (the same migrations): [`OUTBOX_INDEXED_STATUSES`].
pub const OUTBOX_STATUS_INDEXED: &str = "status IN ('pending', 'dead')";

/// The route of an outbox listing: an order's own rows, else the status index for the statuses it holds
/// ([`OUTBOX_INDEXED_STATUSES`]), else the sink, else every row; the rest as checks. A listing of `delivered` or
/// `unrouted` alone walks the newest rows, most of which match in an outbox of that bulk, and is a bounded scan
/// where they are rare.
pub fn outbox_route(f: &OutboxFilter) -> Route<'_> {
    let status = f.status.map(crate::OutboxStatus::as_str);
    let (kind, sink) = (f.kind.map(crate::OutboxKind::as_str), f.sink.as_deref());
    let indexed = f.status.filter(|s| OUTBOX_INDEXED_STATUSES.contains(s)).map(crate::OutboxStatus::as_str);
    let path = match (f.order_id.as_deref(), indexed, sink) {
        (Some(o), ..) => Path::Value(Column::OrderId, o),
        (None, Some(s), _) => Path::Value(Column::Status, s),
        (None, None, Some(s)) => Path::Value(Column::Sink, s),
        (None, None, None) => Path::Newest,
    };
    Route::new(path, &[(Column::Status, status), (Column::Kind, kind), (Column::Sink, sink)])
        .on_status_index(OUTBOX_STATUS_INDEXED)
}

/// The route of an audit listing: a target's entries (a handful), else an actor's, else an action's, else every
/// entry; the rest as checks, the time range among them.
pub fn audit_route(f: &AuditFilter) -> Route<'_> {
    let (actor, target) = (f.actor.as_deref(), f.target.as_deref());
    let action = f.action.map(AuditAction::as_str);
    let path = match (target, actor, action) {
        (Some(t), ..) => Path::Value(Column::Target, t),
        (None, Some(a), _) => Path::Value(Column::Actor, a),
        (None, None, Some(a)) => Path::Value(Column::Action, a),
        (None, None, None) => Path::Newest,
    };
    let mut route = Route::new(path, &[(Column::Target, target), (Column::Actor, actor), (Column::Action, action)]);
    route.checks.extend(f.since_ms.map(Check::AtFrom));
    route.checks.extend(f.until_ms.map(Check::AtBefore));
    route
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_walks_the_rarest_filter_and_checks_every_other_condition_once() {
        let f = EventFilter {
            status: Some(Outcome::Processed),
            event_type: Some("charge.refunded".into()),
            reason_contains: Some("amount".into()),
            since_ms: Some(5),
            limit: 50,
            ..EventFilter::default()
        };
        let route = event_route(&f);
        // `processed` is the bulk of the inbox: the type is the narrower path.
        assert_eq!(route.path, Path::Value(Column::EventType, "charge.refunded"));
        assert_eq!(
            route.checks,
            vec![Check::Equals(Column::Status, "processed"), Check::ReasonContains("amount"), Check::ReceivedFrom(5)]
        );
        let dead = EventFilter { status: Some(Outcome::DeadLettered), ..f.clone() };
        assert_eq!(event_route(&dead).path, Path::Value(Column::Status, "dead_lettered"));
        let names: Vec<String> = OUTBOX_INDEXED_STATUSES.iter().map(|s| format!("'{}'", s.as_str())).collect();
        assert_eq!(OUTBOX_STATUS_INDEXED, format!("status IN ({})", names.join(", ")));
        assert_eq!(INBOX_STATUS_INDEXED, format!("status <> '{}'", Outcome::Processed.as_str()));
        let dead = EventFilter { status: Some(Outcome::DeadLettered), ..EventFilter::default() };
        assert_eq!(event_route(&dead).index_predicate, Some(INBOX_STATUS_INDEXED));
        let pending = OutboxFilter { status: Some(crate::OutboxStatus::Pending), ..OutboxFilter::default() };
        assert_eq!(outbox_route(&pending).index_predicate, Some(OUTBOX_STATUS_INDEXED));
        let processed = EventFilter { status: Some(Outcome::Processed), ..EventFilter::default() };
        let route = event_route(&processed);
        assert_eq!(route.index_predicate, None);
        assert_eq!(route.path, Path::Newest, "the status index does not hold `processed`");
        assert_eq!(route.checks, vec![Check::Equals(Column::Status, "processed")]);
        for f in every_event_filter() {
            let route = event_route(&f);
            assert_ne!(route.path, Path::Value(Column::Status, "processed"), "{f:?}");
            if let Path::Value(served, _) = route.path {
                assert!(!route.checks.iter().any(|c| matches!(c, Check::Equals(col, _) if *col == served)), "{f:?}");
            }
        }
        for f in every_outbox_filter() {
            let route = outbox_route(&f);
            for bulk in ["delivered", "unrouted"] {
                assert_ne!(route.path, Path::Value(Column::Status, bulk), "{f:?}");
            }
            assert!(f.order_id.is_none() || matches!(route.path, Path::Value(Column::OrderId, _)), "{f:?}");
            assert!(!matches!(route.path, Path::Value(Column::Kind, _)), "no outbox index on kind: {f:?}");
        }
        for f in every_audit_filter() {
            let route = audit_route(&f);
            let served = match route.path {
                Path::Value(column, _) => Some(column),
                _ => None,
            };
            let equalities = [f.target.is_some(), f.actor.is_some(), f.action.is_some()];
            let times = usize::from(f.since_ms.is_some()) + usize::from(f.until_ms.is_some());
            let unserved = equalities.iter().filter(|on| **on).count() - usize::from(served.is_some());
            assert_eq!(route.checks.len(), unserved + times, "each condition is served or checked once: {f:?}");
            assert!(f.target.is_none() || served == Some(Column::Target), "a target's entries are few: {f:?}");
        }
    }
}
