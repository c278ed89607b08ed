//! The invariant checker: payhook's promise, "nothing lost, nothing applied twice", checked on a final store
//! against what a test recorded while it ran (the deliveries answered 2xx, and what a sink received).
//!
//! It reads through the [`Store`] trait only, so the same checker runs on SQLite and PostgreSQL, from the server's
//! tests and from the binary's (crash, shutdown, overload):
//!
//! - every acknowledged delivery is recorded, once;
//! - every order is in a state its set of applied events implies, whatever order they arrived in (computed with
//!   `payhook_core::ledger`'s own rules over every arrival order);
//! - every real transition has its outbox rows, at most one per kind and sink: a paid order has exactly one
//!   `order.paid` row per sink, and no order has two;
//! - when a sink was used: every row ends delivered or dead, every delivered row reached the sink, and the sink never
//!   saw two different payloads under one idempotency key.
//!
//! [`check`] returns every violation it finds, not just the first, so a failing test says what went wrong.

use crate::{EventFilter, OrderView, OutboxFilter, OutboxKind, OutboxStatus, Outcome, Store};
use payhook_core::event::{Effect, EventId, Money, OrderAction, OrderId, SourceName};
use payhook_core::ledger::{self, OrderSnapshot, OrderStatus, Transitions as _, Unapplied};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// A delivery the test saw answered 2xx.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acked {
    /// The source it was sent to.
    pub source: String,
    /// The event id it carried (or the id payhook answered with).
    pub event_id: String,
}

impl Acked {
    /// An acknowledged delivery of `event_id` on `source`.
    pub fn new(source: impl Into<String>, event_id: impl Into<String>) -> Self {
        Self { source: source.into(), event_id: event_id.into() }
    }
}

/// One request a test's sink received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkReceipt {
    /// Its `Idempotency-Key` header.
    pub idempotency_key: String,
    /// Its body.
    pub payload: Vec<u8>,
}

/// One broken promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A delivery was answered 2xx and is not in the store.
    Lost(Acked),
    /// The store lists one delivery more than once.
    RecordedTwice(Acked),
    /// Processed events name an order that does not exist.
    MissingOrder(String),
    /// An order is in a state its applied events do not imply.
    WrongState {
        /// The order.
        order: String,
        /// Its state in the store.
        actual: OrderStatus,
        /// The states its applied events lead to, over every arrival order.
        expected: Vec<OrderStatus>,
        /// The actions of its applied events.
        applied: Vec<OrderAction>,
    },
    /// More than one outbox row of one kind for one order and sink.
    DoubleEffect {
        /// The order.
        order: String,
        /// The outbox kind (`order.paid`).
        kind: OutboxKind,
        /// The sink (empty: unrouted).
        sink: String,
        /// How many rows.
        rows: usize,
    },
    /// A transition without its outbox row, or an outbox row without its transition.
    EffectMismatch {
        /// The order.
        order: String,
        /// The kinds the audit history implies.
        transitions: Vec<String>,
        /// The kinds of its outbox rows.
        outbox: Vec<String>,
    },
    /// An outbox row for a sink that did not end delivered or dead.
    Unsettled {
        /// The row.
        id: i64,
        /// Its status.
        status: OutboxStatus,
    },
    /// A row is marked delivered but the sink never received it.
    DeliveredUnseen(i64),
    /// The sink received two different payloads under one idempotency key.
    KeyReused(String),
    /// The store could not be read.
    Store(String),
}

/// Everything the checker found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violations(pub Vec<Violation>);

impl Violations {
    /// The acknowledged deliveries the store lost.
    pub fn lost(&self) -> Vec<&Acked> {
        self.0.iter().filter_map(|v| if let Violation::Lost(a) = v { Some(a) } else { None }).collect()
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} invariant violations:", self.0.len())?;
        for v in self.0.iter().take(50) {
            writeln!(f, "  {v:?}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}

/// What a clean check looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checked {
    /// Recorded deliveries.
    pub events: usize,
    /// Orders named by applied events.
    pub orders: usize,
    /// Outbox rows (when a sink was checked).
    pub outbox: usize,
}

/// What the test recorded while it ran.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// Every delivery answered 2xx (repeats allowed).
    pub acked: Vec<Acked>,
    /// What the sink received, when the test ran a sink and drove the dispatcher to the end.
    pub sink: Option<Vec<SinkReceipt>>,
}

/// Checks `store` against `evidence`; see the module doc for the invariants.
pub async fn check<S: Store>(store: &S, evidence: &Evidence) -> Result<Checked, Violations> {
    let mut found = Vec::new();
    let mut checked = Checked::default();
    let store_error = |e: crate::StoreError| Violation::Store(e.to_string());

    let acked: BTreeSet<&Acked> = evidence.acked.iter().collect();
    for a in acked {
        let (Ok(source), Ok(event_id)) = (SourceName::parse(&a.source), EventId::parse(&a.event_id)) else {
            found.push(Violation::Lost(a.clone()));
            continue;
        };
        match store.event(&source, &event_id).await {
            Ok(Some(_)) => {}
            Ok(None) => found.push(Violation::Lost(a.clone())),
            Err(e) => found.push(store_error(e)),
        }
    }

    // Every recorded delivery, once each; the applied order actions by order.
    let mut seen: BTreeSet<Acked> = BTreeSet::new();
    let mut applied: BTreeMap<String, BTreeSet<OrderAction>> = BTreeMap::new();
    let mut before = None;
    loop {
        let page = match store.list_events(EventFilter { before, limit: 500, ..EventFilter::default() }).await {
            Ok(page) => page,
            Err(e) => {
                found.push(store_error(e));
                break;
            }
        };
        for e in &page.rows {
            checked.events += 1;
            let key = Acked::new(e.source.clone(), e.event_id.clone());
            if !seen.insert(key.clone()) {
                found.push(Violation::RecordedTwice(key.clone()));
            }
            if e.status != Outcome::Processed {
                continue;
            }
            let (Ok(source), Ok(event_id)) = (SourceName::parse(&e.source), EventId::parse(&e.event_id)) else {
                continue;
            };
            match store.event(&source, &event_id).await {
                Ok(Some(view)) => {
                    if let Some(Effect::Order { order_id, action, .. }) = view.effect {
                        applied.entry(order_id.as_str().to_owned()).or_default().insert(action);
                    }
                }
                Ok(None) => found.push(Violation::Lost(key)),
                Err(e) => found.push(store_error(e)),
            }
        }
        before = page.next_before(500, |e| e.row_id);
        if before.is_none() {
            break;
        }
    }

    for (order, actions) in &applied {
        checked.orders += 1;
        let Ok(id) = OrderId::parse(order) else { continue };
        let view = match store.order(&id).await {
            Ok(Some(view)) => view,
            Ok(None) => {
                found.push(Violation::MissingOrder(order.clone()));
                continue;
            }
            Err(e) => {
                found.push(store_error(e));
                continue;
            }
        };
        let expected = final_states(&id, &view.money, actions);
        if !expected.contains(&view.status) {
            found.push(Violation::WrongState {
                order: order.clone(),
                actual: view.status,
                expected: expected.into_iter().collect(),
                applied: actions.iter().copied().collect(),
            });
        }
        check_effects(&view, &mut found);
    }

    if let Some(received) = &evidence.sink {
        let mut payloads: HashMap<&str, BTreeSet<&[u8]>> = HashMap::new();
        for r in received {
            payloads.entry(r.idempotency_key.as_str()).or_default().insert(r.payload.as_slice());
        }
        let mut reused: Vec<&str> = payloads.iter().filter(|(_, p)| p.len() > 1).map(|(k, _)| *k).collect();
        reused.sort_unstable();
        found.extend(reused.into_iter().map(|k| Violation::KeyReused(k.to_owned())));
        let mut before = None;
        loop {
            let filter = OutboxFilter { before, limit: 500, ..OutboxFilter::default() };
            let page = match store.list_outbox(filter).await {
                Ok(page) => page,
                Err(e) => {
                    found.push(store_error(e));
                    break;
                }
            };
            for row in &page.rows {
                checked.outbox += 1;
                match row.status {
                    OutboxStatus::Delivered if !payloads.contains_key(row.id.to_string().as_str()) => {
                        found.push(Violation::DeliveredUnseen(row.id));
                    }
                    OutboxStatus::Delivered | OutboxStatus::Dead | OutboxStatus::Unrouted => {}
                    OutboxStatus::Pending => found.push(Violation::Unsettled { id: row.id, status: row.status }),
                }
            }
            before = page.next_before(500, |r| r.id);
            if before.is_none() {
                break;
            }
        }
    }

    if found.is_empty() { Ok(checked) } else { Err(Violations(found)) }
}

/// One outbox row per real transition, at most one per kind and sink.
fn check_effects(view: &OrderView, found: &mut Vec<Violation>) {
    let order = view.id.as_str().to_owned();
    let transitions: BTreeSet<String> = view
        .history
        .iter()
        .filter_map(|t| OrderAction::ALL.into_iter().find(|a| a.target() == t.to).map(|a| a.outbox_kind().to_owned()))
        .collect();
    let mut rows: BTreeMap<(OutboxKind, &str), usize> = BTreeMap::new();
    for row in view.outbox.iter().filter(|r| r.kind.as_str().starts_with("order.")) {
        *rows.entry((row.kind, row.sink.as_deref().unwrap_or(""))).or_default() += 1;
    }
    for ((kind, sink), n) in &rows {
        if *n > 1 {
            found.push(Violation::DoubleEffect { order: order.clone(), kind: *kind, sink: (*sink).into(), rows: *n });
        }
    }
    let outbox: BTreeSet<String> = rows.keys().map(|(kind, _)| kind.as_str().to_owned()).collect();
    let paid_without_receipt = view.status == OrderStatus::Paid && !outbox.contains("order.paid");
    if transitions != outbox || paid_without_receipt || view.history.len() != transitions.len() {
        found.push(Violation::EffectMismatch {
            order,
            transitions: view.history.iter().map(|t| format!("{}→{}", t.from, t.to)).collect(),
            outbox: outbox.into_iter().collect(),
        });
    }
}

/// The states an order registered for `money` can end in once every action of `actions` was applied, over every
/// arrival order, by the ledger's own rules: a guard that matches applies, a `Defer` waits for the next transition,
/// a `NoOp` changes nothing. Orders that would leave an action waiting forever are not possible outcomes of a set
/// of *applied* events, and are skipped.
pub fn final_states(order: &OrderId, money: &Money, actions: &BTreeSet<OrderAction>) -> BTreeSet<OrderStatus> {
    let actions: Vec<OrderAction> = actions.iter().copied().collect();
    let mut finals = BTreeSet::new();
    for arrival in permutations(&actions) {
        let mut status = OrderStatus::Pending;
        let mut waiting: Vec<OrderAction> = Vec::new();
        for action in arrival {
            waiting.push(action);
            // Apply whatever can be applied now, until nothing changes (a transition may free a waiting event).
            loop {
                let mut progressed = false;
                let mut still = Vec::new();
                for a in waiting.drain(..) {
                    let effect = Effect::Order { order_id: order.clone(), action: a, money: None };
                    let Some(plan) = ledger::plan(&effect) else { continue };
                    if plan.from.contains(&status) {
                        status = plan.to;
                        progressed = true;
                    } else {
                        match ledger::explain(&plan, Some(&OrderSnapshot { status, money: money.clone() })) {
                            Unapplied::Defer(_) => still.push(a),
                            Unapplied::NoOp(_) | Unapplied::Reject(_) => {}
                        }
                    }
                }
                waiting = still;
                if !progressed {
                    break;
                }
            }
        }
        if waiting.is_empty() {
            finals.insert(status);
        }
    }
    finals
}

fn permutations(items: &[OrderAction]) -> Vec<Vec<OrderAction>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first);
            all.push(tail);
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use payhook_core::event::Currency;

    fn finals(actions: &[OrderAction]) -> Vec<OrderStatus> {
        let money = Money::new(100, Currency::parse("usd").unwrap()).unwrap();
        final_states(&OrderId::parse("o").unwrap(), &money, &actions.iter().copied().collect()).into_iter().collect()
    }

    #[test]
    fn the_expected_state_follows_from_the_set_of_applied_events() {
        use OrderAction::*;
        use OrderStatus::*;
        assert_eq!(finals(&[]), [Pending]);
        assert_eq!(finals(&[Pay]), [Paid]);
        assert_eq!(finals(&[Pay, Refund]), [Refunded]);
        assert_eq!(finals(&[Refund]), [Refunded]);
        assert_eq!(finals(&[Pay, Dispute]), [Disputed]);
        assert_eq!(finals(&[Fail, Pay]), [Paid]);
        // A refund and a dispute race: whichever comes second after the payment finds the order past it.
        let mut both = finals(&[Pay, Refund, Dispute]);
        both.sort_by_key(|s| s.as_str());
        assert_eq!(both, [Disputed, Refunded]);
    }
}
