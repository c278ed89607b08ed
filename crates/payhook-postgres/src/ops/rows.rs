//! The composite rows the batch functions take (the baseline's types, `#[derive(ToSql)]`, fields matched by
//! name) and the statements that call them: one array of rows per batch instead of one array per column.

use super::*;

pub(crate) const REGISTER_SQL: &str =
    "SELECT outcome, detail, stored_amount, stored_currency FROM payhook_register_batch($1, $2, $3, $4, $5)";
pub(crate) const SETTLE_SQL: &str = "SELECT payhook_settle_batch($1, $2, $3, $4, $5, $6, $7, $8)";

/// One element of `payhook_ingest_batch`'s array (the baseline's composite type `payhook_delivery`): the
/// fields are matched by name.
#[derive(Debug, ToSql)]
#[postgres(name = "payhook_delivery")]
pub(super) struct DeliveryRow<'a> {
    pub(super) source: &'a str,
    pub(super) event_id: &'a str,
    pub(super) event_type: Option<&'a str>,
    pub(super) occurred_at: Option<i64>,
    pub(super) business_key: Option<&'a str>,
    pub(super) effect: Option<&'a str>,
    pub(super) status: &'a str,
    pub(super) reason: Option<&'a str>,
    pub(super) received_at: i64,
    pub(super) verification: &'a str,
    pub(super) headers: &'a str,
    pub(super) body: &'a [u8],
    pub(super) lock: Option<i64>,
    pub(super) order_id: Option<&'a str>,
    pub(super) from1: Option<&'a str>,
    pub(super) from2: Option<&'a str>,
    pub(super) to_status: Option<&'a str>,
    pub(super) amount: Option<i64>,
    pub(super) currency: Option<&'a str>,
    pub(super) outbox_kind: Option<&'a str>,
    pub(super) payloads: Option<&'a [String]>,
    pub(super) create_order: bool,
    pub(super) route_lo: Option<i32>,
    pub(super) route_hi: Option<i32>,
}

/// The arguments of `payhook_ingest_batch`: one row per delivery, and the batch's routing table (each distinct list
/// of sinks the batch's documents go to, one slice after another).
#[derive(Debug, Default)]
pub(crate) struct IngestColumns<'a> {
    pub(super) deliveries: Vec<DeliveryRow<'a>>,
    pub(super) route_sinks: Vec<&'a str>,
    /// The slices of `route_sinks` (1-based, inclusive, as SQL arrays are), one per distinct list, with the kind
    /// that first used each (without filters, a kind's documents all go to one list).
    pub(super) routes: Vec<(&'static str, usize, usize)>,
}

impl<'a> IngestColumns<'a> {
    pub(crate) fn push(&mut self, call: &'a IngestCall, routing: &'a Routing) {
        let c = call.change.as_ref();
        let route = c.map(|c| self.route(routing, c.plan.outbox_kind, c.document()));
        self.deliveries.push(DeliveryRow {
            source: &call.source,
            event_id: &call.event_id,
            event_type: call.event_type.as_deref(),
            occurred_at: call.occurred_at,
            business_key: call.business_key.as_deref(),
            effect: call.effect.as_deref(),
            status: call.status,
            reason: call.reason.as_deref(),
            received_at: call.received_at_ms,
            verification: &call.verification,
            headers: &call.headers,
            body: &call.body,
            lock: c.map(|c| c.lock),
            order_id: c.map(|c| c.plan.order_id.as_str()),
            from1: c.map(|c| c.from.0),
            from2: c.map(|c| c.from.1),
            to_status: c.map(|c| c.plan.to.as_str()),
            amount: c.and_then(Change::amount),
            currency: c.and_then(Change::currency),
            outbox_kind: c.map(|c| c.plan.outbox_kind),
            payloads: c.map(|c| c.payloads.as_slice()),
            create_order: call.create_order,
            route_lo: route.map(|r| r.0),
            route_hi: route.map(|r| r.1),
        });
    }

    /// The slice of `route_sinks` that holds the sinks of `document` of `kind` (their filters applied), added when
    /// no earlier document of the batch went to the same list.
    pub(super) fn route(&mut self, routing: &'a Routing, kind: &'static str, document: &str) -> (i32, i32) {
        let by_kind = routing.filters.is_empty().then(|| self.routes.iter().find(|(k, ..)| *k == kind)).flatten();
        let (lo, hi) = match by_kind {
            Some(&(_, lo, hi)) => (lo, hi),
            None => {
                let sinks = sinks_of(routing, kind, document);
                let same = self.routes.iter().find(|&&(_, lo, hi)| self.route_sinks[lo - 1..hi] == sinks[..]);
                match same {
                    Some(&(_, lo, hi)) => (lo, hi),
                    None => {
                        let lo = self.route_sinks.len() + 1;
                        self.route_sinks.extend(sinks);
                        self.routes.push((kind, lo, self.route_sinks.len()));
                        (lo, self.route_sinks.len())
                    }
                }
            }
        };
        (i32::try_from(lo).unwrap_or(i32::MAX), i32::try_from(hi).unwrap_or(i32::MAX))
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 2] {
        [&self.deliveries, &self.route_sinks]
    }
}

/// The arguments of `payhook_register_batch`.
#[derive(Debug, Default)]
pub(crate) struct RegisterColumns<'a> {
    pub(super) lock: Vec<i64>,
    pub(super) id: Vec<&'a str>,
    pub(super) amount: Vec<i64>,
    pub(super) currency: Vec<&'a str>,
    pub(super) now: Vec<i64>,
}

impl<'a> RegisterColumns<'a> {
    pub(crate) fn push(&mut self, order: &'a NewOrder) {
        self.lock.push(order_lock(order.id.as_str()));
        self.id.push(order.id.as_str());
        self.amount.push(order.money.amount_minor);
        self.currency.push(order.money.currency.as_str());
        self.now.push(order.now_ms);
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [&self.lock, &self.id, &self.amount, &self.currency, &self.now]
    }
}

/// The sort key of a registration: its order's lock, as for ingests.
pub(crate) fn register_lock_key(order: &NewOrder) -> (bool, i64, &str, &str, &str) {
    (true, order_lock(order.id.as_str()), order.id.as_str(), "", "")
}

/// One element of `payhook_settle_batch`'s settlements (the baseline's composite `payhook_settlement`).
#[derive(Debug, ToSql)]
#[postgres(name = "payhook_settlement")]
pub(super) struct SettlementRow<'a> {
    pub(super) source: &'a str,
    pub(super) event_id: &'a str,
    pub(super) row_id: i64,
    pub(super) status: &'a str,
    pub(super) reason: Option<&'a str>,
    pub(super) attempts: i32,
    pub(super) next_attempt_at: Option<i64>,
    pub(super) waiting_order: Option<&'a str>,
    pub(super) now: i64,
    pub(super) release_key: bool,
}

/// One `event.received` row of `payhook_settle_batch` (composite `payhook_forward`).
#[derive(Debug, ToSql)]
#[postgres(name = "payhook_forward")]
pub(super) struct ForwardRow<'a> {
    pub(super) sink: &'a str,
    pub(super) source: &'a str,
    pub(super) event_id: &'a str,
    pub(super) payload: &'a str,
    pub(super) now: i64,
}

/// One alert of `payhook_settle_batch` (composite `payhook_alert`).
#[derive(Debug, ToSql)]
#[postgres(name = "payhook_alert")]
pub(super) struct AlertRow<'a> {
    pub(super) key: &'a str,
    pub(super) text: &'a str,
    pub(super) now: i64,
}

/// The arguments of `payhook_settle_batch`: settlements, forwarded events, and alerts sorted by key (the locking
/// protocol: alert windows are taken last, in key order).
#[derive(Debug, Default)]
pub(crate) struct SettleColumns<'a> {
    pub(super) settlements: Vec<SettlementRow<'a>>,
    pub(super) forwards: Vec<ForwardRow<'a>>,
    pub(super) alert_sink: Option<&'a str>,
    pub(super) alert_window: Option<i64>,
    pub(super) alert_gather: Option<i64>,
    pub(super) alerts: Vec<AlertRow<'a>>,
}

impl<'a> SettleColumns<'a> {
    pub(crate) fn push(&mut self, s: &'a Settle) {
        self.settlements.push(SettlementRow {
            source: &s.source,
            event_id: &s.event_id,
            row_id: s.row_id,
            status: s.status,
            reason: s.reason.as_deref(),
            attempts: s.attempts,
            next_attempt_at: s.next_attempt_at,
            waiting_order: s.waiting_order.as_deref(),
            now: s.now_ms,
            release_key: s.release_key,
        });
    }

    /// Adds the forwarded events and the alerts (sorted by key here; `follow` is sorted in place).
    pub(crate) fn follow(&mut self, follow: &'a mut FollowUps, routing: &'a Routing) {
        follow.alerts.sort_by(|a, b| a.key.cmp(&b.key));
        let follow: &'a FollowUps = follow;
        for f in &follow.forwards {
            self.forwards.push(ForwardRow {
                sink: &f.sink,
                source: &f.source,
                event_id: &f.event_id,
                payload: &f.payload,
                now: f.now_ms,
            });
        }
        if let Some(a) = routing.alerts.as_ref().filter(|_| !follow.alerts.is_empty()) {
            (self.alert_sink, self.alert_window, self.alert_gather) =
                (Some(a.sink.as_str()), Some(a.window_ms), Some(a.gather_ms));
            for alert in &follow.alerts {
                self.alerts.push(AlertRow { key: &alert.key, text: &alert.text, now: alert.now_ms });
            }
        }
    }

    /// Nothing to write: the second statement can be left out.
    pub(crate) fn is_empty(&self) -> bool {
        self.settlements.is_empty() && self.forwards.is_empty() && self.alerts.is_empty()
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 8] {
        [
            &self.settlements,
            &FORWARD_KIND,
            &self.forwards,
            &ALERT_KIND,
            &self.alert_sink,
            &self.alert_window,
            &self.alert_gather,
            &self.alerts,
        ]
    }
}
