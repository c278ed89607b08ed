//! Listings: one page of rows newest first, and where the next page begins.

use crate::{EventFilter, OutboxFilter, Outcome};
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
            kind: on(0).then(|| "payment_receipt".to_owned()),
            sink: on(1).then(|| "receipts".to_owned()),
            order_id: on(2).then(|| "ord_1".to_owned()),
            before: on(3).then_some(i64::MAX),
            limit: 50,
        };
        out.push(base.clone());
        out.extend(
            ["pending", "delivered", "dead", "unrouted"]
                .iter()
                .map(|s| OutboxFilter { status: Some((*s).to_owned()), ..base.clone() }),
        );
    }
    out
}
