//! Order retention: settled orders (refunded, disputed) older than the cut go with their history and outbox rows;
//! nothing that something still waits on goes.

use super::{T0, claim, claim_due, dispute, ingest, new_order, order_id, pay, refund, register_new, retry, stats};
use crate::{Dispatched, OutboxJob, Outcome, PruneRequest, Pruned, Retried, Routing, Stats, Store};

const DAY: i64 = 86_400_000;

/// The only sink of [`retention_routing`].
const SINK: &str = "crm";

/// Every order receipt goes to one sink, `crm`; nothing else is routed, no alerts.
pub fn retention_routing() -> Routing {
    let mut routing = Routing::default();
    for kind in ["order.paid", "order.refunded", "order.disputed"] {
        routing.by_kind.insert(kind.into(), vec![SINK.into()]);
    }
    routing
}

/// Settles the pending `crm` rows of `order` as `outcome` (every due row is claimed; the others' leases are left
/// to expire).
async fn settle_rows<S: Store>(store: &S, order: &str, outcome: &Dispatched, now_ms: i64) {
    let jobs: Vec<OutboxJob> = store.claim_outbox(SINK, claim("d", now_ms, 1)).await.expect("claim_outbox");
    let mut settled = 0;
    for job in jobs {
        let payload: serde_json::Value = serde_json::from_str(&job.payload).expect("payload is JSON");
        if payload["order_id"] == order {
            assert!(store.finish_outbox(&job, outcome.clone(), now_ms).await.expect("finish_outbox"));
            settled += 1;
        }
    }
    assert!(settled > 0, "order {order} had no pending row to settle");
}

async fn exists<S: Store>(store: &S, id: &str) -> bool {
    store.order(&order_id(id)).await.expect("order").is_some()
}

/// Prunes orders only (no event is old enough to go) until a step has nothing more to do.
async fn prune_orders<S: Store>(store: &S, orders_before_ms: i64, now_ms: i64) -> Pruned {
    let request = PruneRequest {
        keys_before_ms: 0,
        payloads_from_ms: 0,
        payloads_before_ms: 0,
        orders_before_ms,
        limit: 2,
        now_ms,
    };
    let mut total = Pruned::default();
    for _ in 0..50 {
        let step = store.prune(request).await.expect("prune");
        total.add(&step);
        if !step.more(request.limit) {
            return total;
        }
    }
    panic!("order retention makes no progress: {total:?}");
}

/// Orders refunded or disputed before the cut are deleted with their history and outbox rows; an order with an
/// outbox row still pending or dead, one with an event deferred on it, one that is not final (paid) and one that
/// changed after the cut are kept. The pending row and the deferred event hold the cursor: once they settle, their
/// orders go too. The counters equal a full count throughout.
pub async fn settled_orders_are_pruned_with_their_outbox_rows_unless_something_still_waits_on_them<S: Store>(store: S) {
    let delivered = Dispatched::Delivered { status: 204 };
    // Outbox ids follow this order: refunded, disputed, dead, paid, pending, deferred, young.
    for (i, id) in ["ord_refunded", "ord_disputed", "ord_dead", "ord_paid", "ord_pending", "ord_deferred", "ord_young"]
        .into_iter()
        .enumerate()
    {
        register_new(&store, new_order(id, 100, T0 + i as i64)).await;
    }
    let mut t = T0 + 10;
    let mut next = || {
        t += 1;
        t
    };
    for id in ["ord_refunded", "ord_dead", "ord_paid", "ord_pending"] {
        assert_eq!(ingest(&store, pay(&format!("evt_pay_{id}"), id, 100, next())).await.outcome, Outcome::Processed);
    }
    assert_eq!(ingest(&store, pay("evt_pay_disputed", "ord_disputed", 100, next())).await.outcome, Outcome::Processed);
    for id in ["ord_refunded", "ord_dead", "ord_paid", "ord_pending", "ord_disputed"] {
        settle_rows(&store, id, &delivered, next()).await;
    }
    assert_eq!(ingest(&store, refund("evt_ref_1", "ord_refunded", 100, next())).await.outcome, Outcome::Processed);
    assert_eq!(ingest(&store, dispute("evt_dis_2", "ord_disputed", 100, next())).await.outcome, Outcome::Processed);
    assert_eq!(ingest(&store, refund("evt_ref_3", "ord_dead", 100, next())).await.outcome, Outcome::Processed);
    assert_eq!(ingest(&store, refund("evt_ref_5", "ord_pending", 100, next())).await.outcome, Outcome::Processed);
    // A dispute for a pending order waits for its payment; the order is refunded meanwhile, and final.
    assert_eq!(ingest(&store, dispute("evt_dis_6", "ord_deferred", 100, next())).await.outcome, Outcome::Deferred);
    assert_eq!(ingest(&store, refund("evt_ref_6", "ord_deferred", 100, next())).await.outcome, Outcome::Processed);
    // Refunded after the cut.
    let cut = T0 + 5 * DAY;
    assert_eq!(ingest(&store, refund("evt_ref_7", "ord_young", 100, cut + 1)).await.outcome, Outcome::Processed);

    // Each claim leases every due row for 1 ms: the next one, a millisecond later, finds them due again.
    let now = cut + 10;
    for (i, id) in ["ord_refunded", "ord_disputed", "ord_deferred", "ord_young"].into_iter().enumerate() {
        settle_rows(&store, id, &delivered, cut + 2 + i as i64).await;
    }
    settle_rows(&store, "ord_dead", &Dispatched::Dead { status: Some(400), error: "400".into() }, now).await;
    // ord_pending's refund row stays pending.
    let before = stats(&store).await;

    let first = prune_orders(&store, cut, now).await;
    assert_eq!((first.orders_deleted, first.outbox_deleted), (2, 4), "{first:?}");
    assert!(!exists(&store, "ord_refunded").await && !exists(&store, "ord_disputed").await, "pruned");
    for (id, why) in [
        ("ord_dead", "its refund row is dead"),
        ("ord_paid", "a paid order is not final"),
        ("ord_pending", "its refund row is pending"),
        ("ord_deferred", "an event is deferred on it"),
        ("ord_young", "it changed after the cut"),
    ] {
        assert!(exists(&store, id).await, "{id} is kept: {why}");
    }
    let after = stats(&store).await;
    assert_eq!(Stats::count(&after.orders, "refunded") + 1, Stats::count(&before.orders, "refunded"));
    assert_eq!(Stats::count(&after.orders, "disputed") + 1, Stats::count(&before.orders, "disputed"));
    assert_eq!(Stats::count(&after.outbox, "order.paid") + 2, Stats::count(&before.outbox, "order.paid"));
    assert_eq!(prune_orders(&store, cut, now).await.orders_deleted, 0, "nothing more goes while the row is pending");

    // The pending row is delivered: its order goes. The deferred event still holds its order.
    settle_rows(&store, "ord_pending", &delivered, now + 1).await;
    let second = prune_orders(&store, cut, now + 1).await;
    assert_eq!((second.orders_deleted, second.outbox_deleted), (1, 2), "{second:?}");
    assert!(!exists(&store, "ord_pending").await);
    assert!(exists(&store, "ord_deferred").await);

    // The deferred dispute is retried: a no-op for a refunded order. Nothing waits on it any more.
    let due = claim_due(&store, claim("w", now + DAY, 30_000)).await;
    assert_eq!(due.len(), 1, "{due:?}");
    for c in due {
        assert!(matches!(retry(&store, c, now + DAY).await, Retried::Done(r) if r.outcome == Outcome::Processed));
    }
    let third = prune_orders(&store, cut, now + DAY).await;
    assert_eq!((third.orders_deleted, third.outbox_deleted), (1, 1), "{third:?}");
    assert!(!exists(&store, "ord_deferred").await);

    // Once the cut passes it, the young order goes; the dead row's order and the paid one stay.
    let later = prune_orders(&store, cut + DAY, cut + DAY).await;
    assert_eq!((later.orders_deleted, later.outbox_deleted), (1, 1), "{later:?}");
    assert!(exists(&store, "ord_dead").await && exists(&store, "ord_paid").await);
    let s = stats(&store).await;
    assert_eq!(Stats::count(&s.orders, "refunded"), 1, "ord_dead: {s:?}");
    assert_eq!(Stats::count(&s.orders, "paid"), 1, "ord_paid: {s:?}");

    let recounted = store.recount().await.expect("recount");
    assert_eq!(recounted.drift, [], "the counters were out of step with the rows");
    let full = recounted.stats().expect("full count");
    assert_eq!(
        (&s.events, &s.orders, &s.outbox, &s.outbox_by_status),
        (&full.events, &full.orders, &full.outbox, &full.outbox_by_status),
        "stats differ from a full count"
    );
}
