//! Contract cases for a source whose orders are implicit (`orders = "implicit"`): its first payment creates the
//! order, with every guard, dedup key and outbox row of a registered one.

use super::{
    SOURCE, T0, claim, claim_due, ingest, new_order, order_view, pay, processed, refund, register, register_new, retry,
    test_routing, transitions,
};
use crate::{Outcome, Registered, Retried, Routing, Store};
use payhook_core::event::SourceName;
use payhook_core::ledger::OrderStatus;

/// [`test_routing`], with the contract's source's orders implicit.
pub fn implicit_routing() -> Routing {
    let mut routing = test_routing();
    routing.implicit_orders.insert(SOURCE.to_owned());
    routing
}

/// A payment for an order nobody registered creates it from its amount and currency and pays it; redeliveries
/// and second payment events are duplicates; a refund that came first waits for the payment and is due as soon
/// as the payment created the order; an order registered with another amount still refuses the payment; another
/// source's payments still wait for a registration.
pub async fn orders_of_an_implicit_source_are_created_by_their_first_payment<S: Store>(store: S) {
    assert_eq!(ingest(&store, pay("evt_i1", "ord_i1", 1_250, T0 + 1)).await, processed());
    let order = order_view(&store, "ord_i1").await;
    assert_eq!(
        (order.status, order.money.amount_minor, order.money.currency.as_str()),
        (OrderStatus::Paid, 1_250, "usd")
    );
    assert_eq!(transitions(&order), [(OrderStatus::Pending, OrderStatus::Paid, "evt_i1")]);
    let receipts = order.outbox.iter().filter(|r| r.kind == crate::OutboxKind::OrderPaid).count();
    assert_eq!(receipts, 3, "one per sink, as for a registered order: {:?}", order.outbox);
    assert_eq!(ingest(&store, pay("evt_i1", "ord_i1", 1_250, T0 + 2)).await.outcome, Outcome::Duplicate);
    assert_eq!(ingest(&store, pay("evt_i1b", "ord_i1", 1_250, T0 + 2)).await.outcome, Outcome::Duplicate);
    assert_eq!(register(&store, new_order("ord_i1", 1_250, T0 + 3)).await, Registered::AlreadyExists);

    let early = ingest(&store, refund("evt_i2r", "ord_i2", 500, T0 + 3)).await;
    assert_eq!(early.outcome, Outcome::Deferred, "{early:?}");
    assert_eq!(ingest(&store, pay("evt_i2p", "ord_i2", 500, T0 + 4)).await, processed());
    let due = claim_due(&store, claim("worker", T0 + 5, 60_000)).await;
    assert_eq!(due.len(), 1, "the refund is due once the payment created its order: {due:?}");
    let retried = retry(&store, due.into_iter().next().expect("one"), T0 + 5).await;
    assert!(matches!(&retried, Retried::Done(r) if r.outcome == Outcome::Processed), "{retried:?}");
    assert_eq!(order_view(&store, "ord_i2").await.status, OrderStatus::Refunded);

    register_new(&store, new_order("ord_i3", 900, T0)).await;
    let wrong = ingest(&store, pay("evt_i3", "ord_i3", 100, T0 + 6)).await;
    assert_eq!(wrong.outcome, Outcome::DeadLettered, "{wrong:?}");
    assert_eq!(order_view(&store, "ord_i3").await.status, OrderStatus::Pending);

    let mut elsewhere = pay("evt_i4", "ord_i4", 300, T0 + 7);
    elsewhere.parts_mut().source = SourceName::parse("fwd").expect("valid source");
    assert_eq!(ingest(&store, elsewhere).await.outcome, Outcome::Deferred, "fwd's orders are registered");
    assert!(store.order(&super::order_id("ord_i4")).await.expect("read").is_none());
}
