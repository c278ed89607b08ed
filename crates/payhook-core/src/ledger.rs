//! The order ledger: legal transitions, and what a guard that matched nothing means.
//!
//! The store applies a [`Plan`] as one guarded statement (`UPDATE orders SET status = to WHERE id = ? AND status
//! IN (from…) [AND amount = ? AND currency = ?]`). When that statement changes no row, the store reads the order
//! and asks [`explain`] why: the order does not exist yet (defer), its money differs (dead letter), it has moved
//! past this event (nothing to do), or it has not reached the state this event needs yet (defer).
//!
//! ```text
//! pending → paid → refunded        pending → failed → paid
//! pending → refunded               paid → disputed
//! ```

use crate::event::{Effect, Money, OrderAction, OrderId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The states of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    /// Registered, not paid yet.
    Pending,
    /// Paid; a receipt is due.
    Paid,
    /// The last payment attempt failed; a later one may still succeed.
    Failed,
    /// Refunded.
    Refunded,
    /// Disputed (chargeback).
    Disputed,
}

impl OrderStatus {
    /// Every status, for exhaustive tests and stats.
    pub const ALL: [OrderStatus; 5] = [Self::Pending, Self::Paid, Self::Failed, Self::Refunded, Self::Disputed];

    /// The name stored in the database and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Paid => "paid",
            Self::Failed => "failed",
            Self::Refunded => "refunded",
            Self::Disputed => "disputed",
        }
    }

    /// The inverse of [`OrderStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether no transition leads out of this state (refunded, disputed): no later event can change the order,
    /// so the order retention may delete it once nothing else waits on it. A paid order is not final: a refund or
    /// a dispute may still arrive, for months.
    pub fn is_final(self) -> bool {
        !OrderAction::ALL.iter().any(|action| action.legal_from().contains(&self))
    }
}

impl fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The ledger's rules for each [`OrderAction`]: where it moves an order from and to, and what it writes.
///
/// A trait rather than methods of the action, because [`OrderAction`] belongs to the normalized event
/// (`payhook_verify::event`), which knows nothing of the ledger; bring it into scope with
/// `use payhook_core::ledger::Transitions as _;`.
pub trait Transitions: Sized {
    /// The state the action moves an order to.
    fn target(self) -> OrderStatus;

    /// The states the action may move an order from: the guard of its `UPDATE`.
    fn legal_from(self) -> &'static [OrderStatus];

    /// The outbox kind a real transition writes.
    fn outbox_kind(self) -> &'static str;

    /// Whether an outbox row of `kind` records a transition into a final state ([`OrderStatus::is_final`]).
    fn is_final_kind(kind: &str) -> bool;
}

impl Transitions for OrderAction {
    fn target(self) -> OrderStatus {
        match self {
            Self::Pay => OrderStatus::Paid,
            Self::Fail => OrderStatus::Failed,
            Self::Refund => OrderStatus::Refunded,
            Self::Dispute => OrderStatus::Disputed,
        }
    }

    fn legal_from(self) -> &'static [OrderStatus] {
        use OrderStatus::*;
        match self {
            Self::Pay => &[Pending, Failed],
            Self::Fail => &[Pending],
            Self::Refund => &[Pending, Paid],
            Self::Dispute => &[Paid],
        }
    }

    fn outbox_kind(self) -> &'static str {
        match self {
            Self::Pay => "order.paid",
            Self::Fail => "order.failed",
            Self::Refund => "order.refunded",
            Self::Dispute => "order.disputed",
        }
    }

    fn is_final_kind(kind: &str) -> bool {
        Self::ALL.iter().any(|action| action.outbox_kind() == kind && action.target().is_final())
    }
}

/// States from which `action` is not legal *yet*: an earlier event is still missing, so the event is deferred
/// rather than dropped (a dispute for an order whose payment has not arrived).
fn waits_in(action: OrderAction) -> &'static [OrderStatus] {
    use OrderStatus::*;
    match action {
        OrderAction::Pay | OrderAction::Fail => &[],
        OrderAction::Refund => &[Failed],
        OrderAction::Dispute => &[Pending, Failed],
    }
}

/// A guarded transition for the store to apply atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The order to change.
    pub order_id: OrderId,
    /// What the event asks.
    pub action: OrderAction,
    /// The guard: the transition applies only from these states.
    pub from: &'static [OrderStatus],
    /// The new state.
    pub to: OrderStatus,
    /// For a payment, the order's amount and currency must equal these.
    pub expect_money: Option<Money>,
    /// The outbox row a real transition writes.
    pub outbox_kind: &'static str,
}

/// Turns an effect into a plan; `None` for effects with nothing to apply.
pub fn plan(effect: &Effect) -> Option<Plan> {
    match effect {
        Effect::Ignored | Effect::Subscription(_) | Effect::Invoice(_) => None,
        Effect::Order { order_id, action, money } => Some(Plan {
            order_id: order_id.clone(),
            action: *action,
            from: action.legal_from(),
            to: action.target(),
            expect_money: if *action == OrderAction::Pay { money.clone() } else { None },
            outbox_kind: action.outbox_kind(),
        }),
    }
}

/// What the store read about an order after its guard matched nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderSnapshot {
    /// Current state.
    pub status: OrderStatus,
    /// The registered amount.
    pub money: Money,
}

/// Why a plan's guard matched nothing, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unapplied {
    /// Retry later: the order does not exist yet, or an earlier event is still missing. Transient.
    Defer(String),
    /// Never applicable (amount or currency mismatch). Permanent: dead letter.
    Reject(String),
    /// The order has already moved past this event; recording it is all there is to do.
    NoOp(String),
}

/// Explains a guard that matched nothing. `order` is `None` when the order does not exist.
pub fn explain(plan: &Plan, order: Option<&OrderSnapshot>) -> Unapplied {
    let Some(order) = order else {
        return Unapplied::Defer(format!("order {} is not registered yet", plan.order_id));
    };
    if let Some(expected) = &plan.expect_money
        && *expected != order.money
    {
        return Unapplied::Reject(format!(
            "payment of {} does not match order {} of {}",
            expected, plan.order_id, order.money
        ));
    }
    if waits_in(plan.action).contains(&order.status) {
        return Unapplied::Defer(format!(
            "order {} is {}; {} must wait for an earlier event",
            plan.order_id, order.status, plan.outbox_kind
        ));
    }
    if plan.from.contains(&order.status) {
        // The guard should have matched; the caller raced a concurrent change. Retrying is safe.
        return Unapplied::Defer(format!("order {} changed concurrently", plan.order_id));
    }
    Unapplied::NoOp(format!("order {} is already {}", plan.order_id, order.status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Currency;

    fn money(amount: i64) -> Money {
        Money::new(amount, Currency::parse("usd").unwrap()).unwrap()
    }

    fn plan_for(action: OrderAction) -> Plan {
        plan(&Effect::Order { order_id: OrderId::parse("o1").unwrap(), action, money: Some(money(100)) }).unwrap()
    }

    #[test]
    fn refunded_and_disputed_are_the_final_states_and_their_receipts_the_final_kinds() {
        let finals: Vec<OrderStatus> = OrderStatus::ALL.into_iter().filter(|s| s.is_final()).collect();
        assert_eq!(finals, [OrderStatus::Refunded, OrderStatus::Disputed]);
        let kinds: Vec<&str> =
            OrderAction::ALL.iter().map(|a| a.outbox_kind()).filter(|k| OrderAction::is_final_kind(k)).collect();
        assert_eq!(kinds, ["order.refunded", "order.disputed"]);
        assert!(!OrderAction::is_final_kind("order.paid") && !OrderAction::is_final_kind("_alert"));
    }

    #[test]
    fn legal_transitions_are_exactly_the_design_table() {
        use OrderStatus::*;
        let mut edges: Vec<(OrderStatus, OrderStatus)> = Vec::new();
        for action in OrderAction::ALL {
            for from in action.legal_from() {
                edges.push((*from, action.target()));
            }
        }
        edges.sort_by_key(|(a, b)| (a.as_str(), b.as_str()));
        let mut expected = vec![
            (Pending, Paid),
            (Paid, Refunded),
            (Pending, Failed),
            (Failed, Paid),
            (Pending, Refunded),
            (Paid, Disputed),
        ];
        expected.sort_by_key(|(a, b)| (a.as_str(), b.as_str()));
        assert_eq!(edges, expected);
    }

    /// The stores rely on this: with no cycle, an order takes each transition at most once, so a guarded update
    /// writes at most one outbox row per order and kind (SQLite keeps no unique index for it).
    #[test]
    fn no_status_can_be_reached_again_once_left() {
        let actions = OrderAction::ALL;
        // A new action does not compile here until it is considered, and listed in `OrderAction::ALL`.
        for a in actions {
            match a {
                OrderAction::Pay | OrderAction::Fail | OrderAction::Refund | OrderAction::Dispute => {}
            }
        }
        let next = |s: OrderStatus| -> Vec<OrderStatus> {
            actions.iter().filter(|a| a.legal_from().contains(&s)).map(|a| a.target()).collect()
        };
        for start in OrderStatus::ALL {
            let mut frontier = next(start);
            let mut seen = Vec::new();
            while let Some(s) = frontier.pop() {
                assert_ne!(s, start, "{} can be reached again from itself", start.as_str());
                if !seen.contains(&s) {
                    seen.push(s);
                    frontier.extend(next(s));
                }
            }
        }
    }

    /// With the test above, this makes "one outbox row per order and kind" hold: a kind names one target status.
    #[test]
    fn each_outbox_kind_belongs_to_one_target_status() {
        for a in OrderAction::ALL {
            for b in OrderAction::ALL {
                if a.outbox_kind() == b.outbox_kind() {
                    assert_eq!(a.target(), b.target(), "{} names two targets", a.outbox_kind());
                }
            }
        }
    }

    #[test]
    fn a_missing_order_is_an_early_arrival_and_is_deferred() {
        assert!(matches!(explain(&plan_for(OrderAction::Pay), None), Unapplied::Defer(_)));
    }

    #[test]
    fn a_payment_with_another_amount_is_rejected_whatever_the_state() {
        for status in OrderStatus::ALL {
            let snap = OrderSnapshot { status, money: money(99) };
            assert!(matches!(explain(&plan_for(OrderAction::Pay), Some(&snap)), Unapplied::Reject(_)));
        }
    }

    #[test]
    fn a_payment_after_a_refund_changes_nothing() {
        let snap = OrderSnapshot { status: OrderStatus::Refunded, money: money(100) };
        assert!(matches!(explain(&plan_for(OrderAction::Pay), Some(&snap)), Unapplied::NoOp(_)));
    }

    #[test]
    fn a_dispute_before_its_payment_waits_for_it() {
        let snap = OrderSnapshot { status: OrderStatus::Pending, money: money(100) };
        assert!(matches!(explain(&plan_for(OrderAction::Dispute), Some(&snap)), Unapplied::Defer(_)));
    }

    #[test]
    fn only_payments_check_the_amount() {
        assert!(plan_for(OrderAction::Pay).expect_money.is_some());
        assert!(plan_for(OrderAction::Refund).expect_money.is_none());
    }

    #[test]
    fn statuses_round_trip_through_their_names() {
        for s in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(s.as_str()), Some(s));
        }
    }
}
