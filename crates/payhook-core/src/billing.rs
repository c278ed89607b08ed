//! Subscriptions and entitlements: the rules that keep reordered and doubled billing events from granting twice or
//! bringing a cancelled subscription back.
//!
//! Subscriptions follow the provider: the stored row holds the provider's status, the current period end and the
//! `occurred_at` of the event that set them. A change applies only when it is newer than what is stored; at the same
//! second it applies only when the transition is legal (a creation never overrides a same-second update). An ended
//! subscription (`canceled`, `incomplete_expired`, Paystack's `complete`, …) is final: no later event revives it, so
//! a late `subscription.updated` never overwrites a `deleted`.
//!
//! Entitlements are one per invoice, keyed on the invoice id (never the event id: two event ids for one invoice are
//! one grant). `invoice.paid` grants, a refund or the end of the subscription revokes:
//!
//! ```text
//! (none) --paid--> granted --refund / subscription ended--> revoked
//! (none) --refund--> revoked          (a refund before its payment: the later payment grants nothing)
//! ```

//!
//! The billing events themselves ([`SubscriptionChange`], [`InvoiceChange`] and their parts) are part of the normalized
//! event, defined in `payhook_verify::event` and re-exported here; this module holds the decisions about them.

pub use crate::event::{InvoiceAction, InvoiceChange, SubscriptionAction, SubscriptionChange, SubscriptionStatus};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Outbox kind of a grant.
pub const ENTITLEMENT_GRANTED: &str = "entitlement.granted";
/// Outbox kind of a revocation.
pub const ENTITLEMENT_REVOKED: &str = "entitlement.revoked";
/// Outbox kind of a failed invoice payment (for dunning).
pub const INVOICE_PAYMENT_FAILED: &str = "invoice.payment_failed";
/// Outbox kind of a real subscription change.
pub const SUBSCRIPTION_UPDATED: &str = "subscription.updated";

/// A stored subscription, as the rules need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSnapshot {
    /// Its status.
    pub status: SubscriptionStatus,
    /// `occurred_at` of the event that set it, unix seconds.
    pub occurred_at: i64,
}

/// What to do with a subscription event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriptionDecision {
    /// No row yet and the event carries the whole subscription: create it.
    Insert,
    /// A newer (or legal same-second) change: overwrite the row.
    Update,
    /// Older than what is stored, or the subscription already ended: recorded, nothing changes.
    Stale(String),
    /// No row yet and the event carries only part of the subscription: wait for its creation (transient).
    Defer(String),
}

/// Decides a subscription event that `occurred_at` (unix seconds) against the stored row, if any.
pub fn decide_subscription(
    current: Option<&SubscriptionSnapshot>,
    change: &SubscriptionChange,
    occurred_at: i64,
) -> SubscriptionDecision {
    let id = &change.subscription_id;
    let Some(current) = current else {
        return if change.full_object || change.action == SubscriptionAction::Created {
            SubscriptionDecision::Insert
        } else {
            SubscriptionDecision::Defer(format!("subscription {id} is not known yet"))
        };
    };
    if current.status.is_ended() {
        return SubscriptionDecision::Stale(format!("subscription {id} already ended ({})", current.status));
    }
    if occurred_at > current.occurred_at {
        return SubscriptionDecision::Update;
    }
    if occurred_at < current.occurred_at {
        return SubscriptionDecision::Stale(format!(
            "subscription {id} was changed by a newer event (at {}, this one at {occurred_at})",
            current.occurred_at
        ));
    }
    // Same second: the provider gives no order. A creation never overrides what a same-second change set, and a
    // change that leaves the status as it is has nothing to do.
    if change.action == SubscriptionAction::Created || change.status == current.status {
        SubscriptionDecision::Stale(format!("subscription {id} is already {} at this time", current.status))
    } else {
        SubscriptionDecision::Update
    }
}

/// The states of an entitlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntitlementStatus {
    /// The customer has what the invoice paid for.
    Granted,
    /// Taken back (refund, subscription ended), or never granted because the refund came first.
    Revoked,
}

impl EntitlementStatus {
    /// The name stored in the database and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Granted => "granted",
            Self::Revoked => "revoked",
        }
    }

    /// The inverse of [`EntitlementStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Granted, Self::Revoked].into_iter().find(|st| st.as_str() == s)
    }
}

impl fmt::Display for EntitlementStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do with an invoice event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvoiceDecision {
    /// Create the entitlement as granted and write `entitlement.granted`.
    Grant,
    /// The invoice's subscription had already ended when the invoice was paid: record the entitlement as revoked,
    /// with no grant to announce.
    GrantEnded(String),
    /// Move the entitlement from granted to revoked and write `entitlement.revoked`.
    Revoke,
    /// A refund before its payment: record the entitlement as revoked so that the payment grants nothing.
    Tombstone(String),
    /// A failed payment: write `invoice.payment_failed`, change nothing.
    Report,
    /// Nothing to change (already granted, already revoked).
    NoOp(String),
}

/// Decides an invoice event that `occurred_at` (unix seconds), given the invoice's entitlement and its
/// subscription as stored.
pub fn decide_invoice(
    entitlement: Option<EntitlementStatus>,
    change: &InvoiceChange,
    subscription: Option<&SubscriptionSnapshot>,
    occurred_at: i64,
) -> InvoiceDecision {
    let id = &change.invoice_id;
    match (change.action, entitlement) {
        (InvoiceAction::PaymentFailed, _) => InvoiceDecision::Report,
        (InvoiceAction::Paid, None) => match subscription {
            Some(sub) if sub.status.is_ended() && sub.occurred_at >= occurred_at => InvoiceDecision::GrantEnded(
                format!("the subscription of invoice {id} had already ended ({}) when it was paid", sub.status),
            ),
            _ => InvoiceDecision::Grant,
        },
        (InvoiceAction::Paid, Some(status)) => {
            InvoiceDecision::NoOp(format!("the entitlement of invoice {id} is already {status}"))
        }
        (InvoiceAction::Refunded, None) => {
            InvoiceDecision::Tombstone(format!("invoice {id} was refunded before its payment arrived"))
        }
        (InvoiceAction::Refunded, Some(EntitlementStatus::Granted)) => InvoiceDecision::Revoke,
        (InvoiceAction::Refunded, Some(EntitlementStatus::Revoked)) => {
            InvoiceDecision::NoOp(format!("the entitlement of invoice {id} is already revoked"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{InvoiceId, SubscriptionId};

    fn status(s: &str) -> SubscriptionStatus {
        SubscriptionStatus::parse(s).unwrap()
    }

    fn change(action: SubscriptionAction, st: &str, full_object: bool) -> SubscriptionChange {
        SubscriptionChange {
            subscription_id: SubscriptionId::parse("sub_1").unwrap(),
            customer_id: None,
            action,
            status: status(st),
            current_period_end: None,
            full_object,
        }
    }

    fn snap(st: &str, at: i64) -> SubscriptionSnapshot {
        SubscriptionSnapshot { status: status(st), occurred_at: at }
    }

    /// Applies events to one in-memory subscription with the rules, the way the store does.
    fn replay(events: &[(SubscriptionChange, i64)]) -> Option<SubscriptionSnapshot> {
        let mut row: Option<SubscriptionSnapshot> = None;
        for (c, at) in events {
            match decide_subscription(row.as_ref(), c, *at) {
                SubscriptionDecision::Insert | SubscriptionDecision::Update => row = Some(snap(c.status.as_str(), *at)),
                SubscriptionDecision::Stale(_) | SubscriptionDecision::Defer(_) => {}
            }
        }
        row
    }

    #[test]
    fn created_updated_deleted_in_every_order_end_deleted() {
        use SubscriptionAction::*;
        let events = [
            (change(Created, "active", true), 10),
            (change(Updated, "past_due", true), 20),
            (change(Deleted, "canceled", true), 30),
        ];
        for order in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            let seq: Vec<_> = order.iter().map(|&i| events[i].clone()).collect();
            assert_eq!(replay(&seq), Some(snap("canceled", 30)), "order {order:?}");
        }
    }

    #[test]
    fn a_late_update_never_revives_an_ended_subscription() {
        let d =
            decide_subscription(Some(&snap("canceled", 10)), &change(SubscriptionAction::Updated, "active", true), 99);
        assert!(matches!(d, SubscriptionDecision::Stale(_)));
    }

    #[test]
    fn a_partial_update_for_an_unknown_subscription_waits() {
        let d = decide_subscription(None, &change(SubscriptionAction::Updated, "active", false), 1);
        assert!(matches!(d, SubscriptionDecision::Defer(_)));
        let d = decide_subscription(None, &change(SubscriptionAction::Updated, "active", true), 1);
        assert_eq!(d, SubscriptionDecision::Insert);
    }

    #[test]
    fn at_the_same_second_a_creation_never_overrides_a_change() {
        let c = change(SubscriptionAction::Created, "incomplete", true);
        assert!(matches!(decide_subscription(Some(&snap("active", 5)), &c, 5), SubscriptionDecision::Stale(_)));
        let u = change(SubscriptionAction::Updated, "active", true);
        assert_eq!(decide_subscription(Some(&snap("incomplete", 5)), &u, 5), SubscriptionDecision::Update);
    }

    #[test]
    fn ended_statuses_are_final_and_others_are_not() {
        for s in ["canceled", "CANCELLED", "incomplete_expired", "complete"] {
            assert!(status(s).is_ended(), "{s}");
        }
        for s in ["active", "trialing", "past_due", "non-renewing", "attention"] {
            assert!(!status(s).is_ended(), "{s}");
        }
        assert!(SubscriptionStatus::parse("").is_err());
        assert!(SubscriptionStatus::parse("has space").is_err());
    }

    fn invoice(action: InvoiceAction) -> InvoiceChange {
        InvoiceChange {
            invoice_id: InvoiceId::parse("in_1").unwrap(),
            customer_id: None,
            subscription_id: None,
            action,
            money: None,
        }
    }

    #[test]
    fn one_grant_per_invoice_and_a_refund_revokes_it() {
        use EntitlementStatus::*;
        assert_eq!(decide_invoice(None, &invoice(InvoiceAction::Paid), None, 1), InvoiceDecision::Grant);
        assert!(matches!(
            decide_invoice(Some(Granted), &invoice(InvoiceAction::Paid), None, 1),
            InvoiceDecision::NoOp(_)
        ));
        assert_eq!(decide_invoice(Some(Granted), &invoice(InvoiceAction::Refunded), None, 1), InvoiceDecision::Revoke);
        assert!(matches!(
            decide_invoice(Some(Revoked), &invoice(InvoiceAction::Refunded), None, 1),
            InvoiceDecision::NoOp(_)
        ));
    }

    #[test]
    fn a_refund_before_its_payment_leaves_nothing_to_grant() {
        let d = decide_invoice(None, &invoice(InvoiceAction::Refunded), None, 1);
        assert!(matches!(d, InvoiceDecision::Tombstone(_)));
        let d = decide_invoice(Some(EntitlementStatus::Revoked), &invoice(InvoiceAction::Paid), None, 2);
        assert!(matches!(d, InvoiceDecision::NoOp(_)));
    }

    #[test]
    fn an_invoice_paid_before_its_subscription_ended_is_granted_and_after_it_is_not() {
        let ended = snap("canceled", 50);
        assert_eq!(decide_invoice(None, &invoice(InvoiceAction::Paid), Some(&ended), 60), InvoiceDecision::Grant);
        let d = decide_invoice(None, &invoice(InvoiceAction::Paid), Some(&ended), 40);
        assert!(matches!(d, InvoiceDecision::GrantEnded(_)));
        let live = snap("active", 50);
        assert_eq!(decide_invoice(None, &invoice(InvoiceAction::Paid), Some(&live), 40), InvoiceDecision::Grant);
    }

    #[test]
    fn a_failed_payment_is_reported_whatever_the_state() {
        for e in [None, Some(EntitlementStatus::Granted), Some(EntitlementStatus::Revoked)] {
            assert_eq!(decide_invoice(e, &invoice(InvoiceAction::PaymentFailed), None, 1), InvoiceDecision::Report);
        }
    }
}
