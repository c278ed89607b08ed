//! Contract cases for sinks' filters (`when`): a document a sink's filter does not take never becomes a row of that
//! sink, on arrival, on a worker's retry, for billing documents PostgreSQL completes in SQL, and for forwarded
//! events.

use super::{SOURCE, T0, claim, claim_due, ingest, new_order, outbox_of, pay, processed, register_new, retry};
use super::{ignored, subscription_event};
use crate::filter::{Condition, SinkFilter};
use crate::{OutboxFilter, OutboxKind, OutboxStatus, Outcome, Retried, Routing, Store};
use payhook_core::billing::{InvoiceAction, SubscriptionAction};
use payhook_core::event::SourceName;

/// A source other than the contract's, forwarded to `lake`.
const OTHER: &str = "fwd";

fn when(pointer: &str, accepted: &[&str]) -> SinkFilter {
    let accepted = accepted.iter().map(|a| (*a).to_owned()).collect();
    SinkFilter { conditions: vec![Condition { pointer: pointer.into(), accepted }] }
}

/// Receipts go to `everyone` and to `shop_only` (the contract's source only); canceled subscriptions to
/// `cancellations`; revocations to `revocations` (any with a reason) and to `nobody` (a source that never sends);
/// source `fwd` is forwarded to `lake`, which takes processed events only.
pub fn filter_routing() -> Routing {
    let mut routing = Routing::default();
    routing.by_kind.insert("order.paid".into(), vec!["shop_only".into(), "everyone".into()]);
    routing.by_kind.insert("subscription.updated".into(), vec!["cancellations".into()]);
    routing.by_kind.insert("entitlement.revoked".into(), vec!["revocations".into(), "nobody".into()]);
    routing.forwards.insert(OTHER.into(), vec!["lake".into()]);
    routing.filters.insert("shop_only".into(), when("/source", &[SOURCE]));
    routing.filters.insert("cancellations".into(), when("/status", &["canceled", "unpaid"]));
    routing.filters.insert("revocations".into(), when("/reason", &["*"]));
    routing.filters.insert("nobody".into(), when("/source", &["elsewhere"]));
    routing.filters.insert("lake".into(), when("/outcome", &["processed"]));
    routing
}

async fn rows_of<S: Store>(store: &S, sink: &str) -> Vec<String> {
    let rows = outbox_of(store, OutboxFilter { sink: Some(sink.into()), ..OutboxFilter::default() }).await;
    let mut ids: Vec<String> = rows.into_iter().map(|r| r.event_id.unwrap_or_default()).collect();
    ids.sort();
    ids
}

/// A receipt becomes a row of each sink whose filter takes it, on arrival and on a worker's retry alike; a
/// forwarded event only when its filter takes its outcome.
pub async fn a_sinks_filter_decides_which_documents_become_its_rows<S: Store>(store: S) {
    register_new(&store, new_order("ord_a", 100, T0)).await;
    register_new(&store, new_order("ord_b", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_a", "ord_a", 100, T0)).await, processed());
    let mut other = pay("evt_b", "ord_b", 100, T0);
    other.parts_mut().source = SourceName::parse(OTHER).expect("source");
    assert_eq!(ingest(&store, other).await, processed());
    let mut other_ignored = ignored("evt_i", "customer.created", T0);
    other_ignored.parts_mut().source = SourceName::parse(OTHER).expect("source");
    assert_eq!(ingest(&store, other_ignored).await.outcome, Outcome::Ignored);

    // A payment before its order: deferred, then applied by the worker's retry, which routes it the same way.
    assert_eq!(ingest(&store, pay("evt_c", "ord_c", 100, T0)).await.outcome, Outcome::Deferred);
    register_new(&store, new_order("ord_c", 100, T0 + 20)).await;
    let c = claim_due(&store, claim("w", T0 + 20, 30_000)).await.pop().expect("due");
    assert_eq!(retry(&store, c, T0 + 21).await, Retried::Done(processed()));

    assert_eq!(rows_of(&store, "shop_only").await, ["evt_a", "evt_c"]);
    assert_eq!(rows_of(&store, "everyone").await, ["evt_a", "evt_b", "evt_c"]);
    assert_eq!(rows_of(&store, "lake").await, ["evt_b"], "the ignored event's outcome is not taken");
    let other = SourceName::parse(OTHER).expect("source");
    let view = store.event(&other, &super::event_id("evt_b")).await.expect("event").expect("stored");
    let sinks: Vec<Option<&str>> = view.outbox.iter().map(|r| r.sink.as_deref()).collect();
    assert_eq!(sinks, [Some("everyone"), Some("lake")], "its receipt, not to shop_only, and its forwarded copy");
}

/// Billing documents are filtered too, the revocations PostgreSQL completes in SQL included; an effect no sink's
/// filter takes is still recorded once, unrouted.
pub async fn billing_documents_are_filtered_and_an_effect_no_filter_takes_is_recorded_unrouted<S: Store>(store: S) {
    use SubscriptionAction::*;
    let created = subscription_event("evt_sc", "sub_f", Created, "active", 100, true);
    assert_eq!(ingest(&store, created).await, processed());
    let paid = super::invoice_event("evt_ip", "in_f", Some("sub_f"), InvoiceAction::Paid, 110);
    assert_eq!(ingest(&store, paid).await, processed());
    let deleted = subscription_event("evt_sd", "sub_f", Deleted, "canceled", 300, true);
    assert_eq!(ingest(&store, deleted).await, processed());

    assert_eq!(rows_of(&store, "cancellations").await, ["evt_sd"], "the active subscription is not taken");
    assert_eq!(rows_of(&store, "revocations").await, ["evt_sd"]);
    assert!(rows_of(&store, "nobody").await.is_empty());
    let unrouted = OutboxFilter { status: Some(OutboxStatus::Unrouted), ..OutboxFilter::default() };
    let kinds: Vec<(OutboxKind, Option<String>)> =
        outbox_of(&store, unrouted).await.into_iter().map(|r| (r.kind, r.event_id)).collect();
    assert!(kinds.contains(&(OutboxKind::SubscriptionUpdated, Some("evt_sc".into()))), "{kinds:?}");
    assert!(!kinds.iter().any(|(k, _)| *k == OutboxKind::EntitlementRevoked), "{kinds:?}");
}
