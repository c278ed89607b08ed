//! The documents sent to sinks, defined once: both backends render them with these types, and a row read back
//! from the outbox is parsed with them and rendered again ([`canonical`]), so that a sink gets the same bytes for
//! the same effect whichever backend recorded it (PostgreSQL stores `jsonb`, which keeps its own key order and
//! spacing; a few of its billing documents are completed in SQL from rows only the transaction sees).
//!
//! Fields are declared in the order they are sent. Absent values are sent as `null`, never left out: a sink's
//! schema can rely on every key being there.

use crate::OutboxKind;
use payhook_core::billing::SubscriptionChange;
use payhook_core::event::{Effect, Event, Money};
use payhook_core::ledger::Plan;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// `order.paid`, `order.refunded`, `order.failed`, `order.disputed`: an order's transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderChanged<'a> {
    /// The outbox kind.
    pub kind: Cow<'a, str>,
    /// The order.
    pub order_id: Cow<'a, str>,
    /// Its status after the event.
    pub status: Cow<'a, str>,
    /// Its status before.
    pub previous_status: Cow<'a, str>,
    /// The event's source.
    pub source: Cow<'a, str>,
    /// The event.
    pub event_id: Cow<'a, str>,
    /// The provider's type of the event.
    pub event_type: Cow<'a, str>,
    /// When the provider says it happened, unix seconds.
    pub occurred_at: i64,
}

/// `subscription.updated`: a subscription created, changed or ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionChanged<'a> {
    /// The outbox kind.
    pub kind: Cow<'a, str>,
    /// The subscription.
    pub subscription_id: Cow<'a, str>,
    /// Its customer, when known.
    pub customer_id: Option<Cow<'a, str>>,
    /// Its status after the event.
    pub status: Cow<'a, str>,
    /// Its status before, `null` for a new subscription.
    pub previous_status: Option<Cow<'a, str>>,
    /// The end of the paid period, unix seconds, when the provider sent it.
    pub current_period_end: Option<i64>,
    /// The event's source.
    pub source: Cow<'a, str>,
    /// The event.
    pub event_id: Cow<'a, str>,
    /// The provider's type of the event.
    pub event_type: Cow<'a, str>,
    /// When the provider says it happened, unix seconds.
    pub occurred_at: i64,
}

/// `entitlement.granted`, `entitlement.revoked`, `invoice.payment_failed`: what one invoice gives or takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitlementChanged<'a> {
    /// The outbox kind.
    pub kind: Cow<'a, str>,
    /// The invoice.
    pub invoice_id: Cow<'a, str>,
    /// Its customer, when known.
    pub customer_id: Option<Cow<'a, str>>,
    /// Its subscription, when it has one.
    pub subscription_id: Option<Cow<'a, str>>,
    /// The amount paid, in minor units, when known.
    pub amount: Option<i64>,
    /// Its currency.
    pub currency: Option<Cow<'a, str>>,
    /// Why an entitlement was revoked; `null` otherwise.
    pub reason: Option<Cow<'a, str>>,
    /// The event's source.
    pub source: Cow<'a, str>,
    /// The event.
    pub event_id: Cow<'a, str>,
    /// The provider's type of the event.
    pub event_type: Cow<'a, str>,
    /// When the provider says it happened, unix seconds.
    pub occurred_at: i64,
}

/// `event.received`: a delivery of a forwarded source, in payhook's normalized form, with what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventReceived<'a> {
    /// The outbox kind.
    pub kind: Cow<'a, str>,
    /// The source it came to.
    pub source: Cow<'a, str>,
    /// Its event id.
    pub event_id: Cow<'a, str>,
    /// The provider's type of the event; `null` for a body that did not parse.
    pub event_type: Option<Cow<'a, str>>,
    /// When the provider says it happened, unix seconds.
    pub occurred_at: Option<i64>,
    /// What it was deduplicated by.
    pub business_key: Option<Cow<'a, str>>,
    /// What payhook made of it.
    pub effect: Option<Cow<'a, Effect>>,
    /// `processed`, `ignored`, `deferred`, `dead_lettered`, `duplicate`.
    pub outcome: Cow<'a, str>,
    /// Why, for anything but a plain `processed`.
    pub detail: Option<Cow<'a, str>>,
    /// When payhook received it, unix milliseconds.
    pub received_at_ms: i64,
}

/// The `OrderChanged` document of `plan` applied by `event` of `source`, the order's status having been `previous`.
pub fn order_changed(plan: &Plan, previous: &str, source: &str, event: &Event) -> String {
    render(&OrderChanged {
        kind: plan.outbox_kind.into(),
        order_id: plan.order_id.as_str().into(),
        status: plan.to.as_str().into(),
        previous_status: previous.into(),
        source: source.into(),
        event_id: event.event_id.as_str().into(),
        event_type: event.event_type.as_str().into(),
        occurred_at: event.occurred_at,
    })
}

/// The `SubscriptionChanged` document of `change` applied by `event` of `source`; `previous` is the status the
/// subscription had, `None` for a new one.
pub fn subscription_changed(
    change: &SubscriptionChange,
    previous: Option<&str>,
    source: &str,
    event: &Event,
) -> String {
    render(&SubscriptionChanged {
        kind: payhook_core::billing::SUBSCRIPTION_UPDATED.into(),
        subscription_id: change.subscription_id.as_str().into(),
        customer_id: change.customer_id.as_ref().map(|c| Cow::Borrowed(c.as_str())),
        status: change.status.as_str().into(),
        previous_status: previous.map(Cow::Borrowed),
        current_period_end: change.current_period_end,
        source: source.into(),
        event_id: event.event_id.as_str().into(),
        event_type: event.event_type.as_str().into(),
        occurred_at: event.occurred_at,
    })
}

/// The `EntitlementChanged` document of `kind` for `invoice_id`, caused by `event` of `source`.
#[allow(clippy::too_many_arguments)]
pub fn entitlement_changed(
    kind: &str,
    invoice_id: &str,
    customer_id: Option<&str>,
    subscription_id: Option<&str>,
    money: Option<&Money>,
    reason: Option<&str>,
    source: &str,
    event: &Event,
) -> String {
    render(&EntitlementChanged {
        kind: kind.into(),
        invoice_id: invoice_id.into(),
        customer_id: customer_id.map(Cow::Borrowed),
        subscription_id: subscription_id.map(Cow::Borrowed),
        amount: money.map(|m| m.amount_minor),
        currency: money.map(|m| Cow::Borrowed(m.currency.as_str())),
        reason: reason.map(Cow::Borrowed),
        source: source.into(),
        event_id: event.event_id.as_str().into(),
        event_type: event.event_type.as_str().into(),
        occurred_at: event.occurred_at,
    })
}

/// Renders a document as it is sent and stored: compact JSON. Only a type that cannot be encoded fails, and
/// these cannot.
pub fn render<T: Serialize>(document: &T) -> String {
    serde_json::to_string(document).unwrap_or_default()
}

/// The document of an outbox row of `kind` as sinks get it: parsed with its type and rendered again. `None` when
/// the kind has no type here (alerts: their count is gathered in the row, and they are rendered for a person by
/// the dispatcher) or when the stored text does not match its type (rows written by an older payhook, with
/// fewer fields); those are sent as stored.
pub fn canonical(kind: OutboxKind, stored: &str) -> Option<String> {
    fn again<'a, T: Deserialize<'a> + Serialize>(stored: &'a str) -> Option<String> {
        serde_json::from_str::<T>(stored).ok().map(|document| render(&document))
    }
    match kind {
        OutboxKind::OrderPaid | OutboxKind::OrderFailed | OutboxKind::OrderRefunded | OutboxKind::OrderDisputed => {
            again::<OrderChanged>(stored)
        }
        OutboxKind::SubscriptionUpdated => again::<SubscriptionChanged>(stored),
        OutboxKind::EntitlementGranted | OutboxKind::EntitlementRevoked | OutboxKind::InvoicePaymentFailed => {
            again::<EntitlementChanged>(stored)
        }
        OutboxKind::EventReceived => again::<EventReceived>(stored),
        OutboxKind::Alert => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_in_another_key_order_and_spacing_is_rendered_as_payhook_renders_it() {
        let ours = render(&OrderChanged {
            kind: "order.paid".into(),
            order_id: "ord_1".into(),
            status: "paid".into(),
            previous_status: "pending".into(),
            source: "shop".into(),
            event_id: "evt_1".into(),
            event_type: "payment.succeeded".into(),
            occurred_at: 1_700_000_000,
        });
        assert_eq!(
            ours,
            r#"{"kind":"order.paid","order_id":"ord_1","status":"paid","previous_status":"pending","source":"shop","event_id":"evt_1","event_type":"payment.succeeded","occurred_at":1700000000}"#
        );
        // As PostgreSQL's jsonb prints it: keys by length, then bytes; a space after each colon and comma.
        let jsonb = r#"{"kind": "order.paid", "source": "shop", "status": "paid", "order_id": "ord_1", "event_id": "evt_1", "event_type": "payment.succeeded", "occurred_at": 1700000000, "previous_status": "pending"}"#;
        assert_eq!(canonical(OutboxKind::OrderPaid, jsonb).as_deref(), Some(ours.as_str()));
        assert_eq!(canonical(OutboxKind::OrderPaid, &ours).as_deref(), Some(ours.as_str()));
    }

    /// docs/sinks.md lists each document's keys in the order they are sent; the list must be what is rendered.
    #[test]
    fn docs_sinks_lists_every_document_s_keys_in_the_order_they_are_sent() {
        use payhook_core::billing::{SubscriptionAction, SubscriptionStatus};
        use payhook_core::event::{Currency, InvoiceId, OrderId, SubscriptionId};
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/sinks.md"))
            .expect("docs/sinks.md");
        let listed = |kind: &str| -> Vec<String> {
            let row = doc
                .lines()
                .find(|l| {
                    l.starts_with("| `") && l.split(" | ").next().is_some_and(|k| k.contains(&format!("`{kind}`")))
                })
                .unwrap_or_else(|| panic!("docs/sinks.md lists no row for {kind}"));
            let keys = row.trim_end_matches(" |").rsplit(" | ").next().expect("a keys column");
            keys.split(", ").map(|k| k.trim_matches('`').to_owned()).collect()
        };
        let keys = |document: String| -> Vec<String> {
            let mut out = Vec::new();
            let mut de = serde_json::Deserializer::from_str(&document);
            let map: serde_json::Map<String, serde_json::Value> =
                serde::Deserialize::deserialize(&mut de).expect("an object");
            // serde_json's Map is ordered by key: read the order from the text instead.
            for key in map.keys() {
                out.push((document.find(&format!("\"{key}\":")).expect("the key"), key.clone()));
            }
            out.sort();
            out.into_iter().map(|(_, k)| k).collect()
        };
        let event = Event::new(
            payhook_core::event::EventId::parse("evt_1").unwrap(),
            "t".into(),
            1,
            "k".into(),
            Effect::Ignored,
        );
        let plan = payhook_core::ledger::plan(&Effect::Order {
            order_id: OrderId::parse("ord_1").unwrap(),
            action: payhook_core::event::OrderAction::Pay,
            money: None,
        })
        .expect("a plan");
        // Sink filters' table of fields places every field of every document but an alert's, once.
        for (kind, readable, stored) in crate::filter::FIELDS {
            let mut placed: Vec<String> = readable.iter().chain(stored.iter()).map(|f| (*f).to_owned()).collect();
            let mut documented = listed(kind.as_str());
            placed.sort();
            documented.sort();
            assert_eq!(placed, documented, "{kind}");
        }
        assert_eq!(crate::filter::FIELDS.len(), crate::OutboxKind::ALL.len() - 1, "every kind but alert");
        assert_eq!(keys(order_changed(&plan, "pending", "s", &event)), listed("order.paid"));
        let change = SubscriptionChange {
            subscription_id: SubscriptionId::parse("sub_1").unwrap(),
            customer_id: None,
            action: SubscriptionAction::Created,
            status: SubscriptionStatus::parse("active").unwrap(),
            current_period_end: None,
            full_object: true,
        };
        assert_eq!(keys(subscription_changed(&change, None, "s", &event)), listed("subscription.updated"));
        let money = Money::new(100, Currency::parse("usd").unwrap()).unwrap();
        let invoice = InvoiceId::parse("in_1").unwrap();
        let entitlement = entitlement_changed("x", invoice.as_str(), None, None, Some(&money), None, "s", &event);
        assert_eq!(keys(entitlement), listed("entitlement.granted"));
        let received = render(&EventReceived {
            kind: "event.received".into(),
            source: "s".into(),
            event_id: "e".into(),
            event_type: None,
            occurred_at: None,
            business_key: None,
            effect: None,
            outcome: "ignored".into(),
            detail: None,
            received_at_ms: 1,
        });
        assert_eq!(keys(received), listed("event.received"));
    }

    #[test]
    fn rows_without_a_type_or_of_an_older_shape_are_sent_as_stored() {
        assert_eq!(canonical(OutboxKind::Alert, r#"{"kind": "alert", "count": 2}"#), None);
        assert_eq!(canonical(OutboxKind::OrderPaid, r#"{"kind": "order.paid", "order_id": "ord_v1"}"#), None);
        assert_eq!(canonical(OutboxKind::OrderPaid, r#"{"kind": "order.paid", "extra": 1}"#), None);
    }
}
