//! Contract cases for subscriptions, entitlements and signature nonces.

use super::{T0, claim, claim_due, count, event_id, event_view, ingest, ingest_concurrently, processed, retry, source};
use crate::{
    Delivery, EntitlementView, NonceClaim, NonceClaimed, OutboxFilter, Outcome, Parsed, PruneRequest, Retried, Store,
    SubscriptionView,
};
use payhook_core::billing::{
    EntitlementStatus, InvoiceAction, InvoiceChange, SubscriptionAction, SubscriptionChange, SubscriptionStatus,
};
use payhook_core::event::{CustomerId, Effect, Event, InvoiceId, SubscriptionId};
use std::sync::Arc;

/// A delivery of an already-normalized event, as any payload format would produce it.
pub fn event_delivery(id: &str, event_type: &str, occurred_at: i64, business_key: String, effect: Effect) -> Delivery {
    Delivery::unverified_for_tests(crate::DeliveryParts {
        source: source(),
        received_at_ms: T0 + occurred_at,
        parsed: Parsed::Event(Event::new(event_id(id), event_type.to_owned(), occurred_at, business_key, effect)),
        raw_body: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        headers: super::headers(),
        verification: super::VERIFICATION.to_owned(),
    })
}

/// A subscription event for `sub` (customer `cus_1`) with `status`, at `occurred_at` unix seconds; `full_object`
/// says whether it carries the whole subscription.
pub fn subscription_event(
    id: &str,
    sub: &str,
    action: SubscriptionAction,
    status: &str,
    occurred_at: i64,
    full_object: bool,
) -> Delivery {
    let event_type = match action {
        SubscriptionAction::Created => "subscription.created",
        SubscriptionAction::Updated => "subscription.updated",
        SubscriptionAction::Deleted => "subscription.deleted",
    };
    let change = SubscriptionChange {
        subscription_id: SubscriptionId::parse(sub).expect("valid subscription id"),
        customer_id: full_object.then(|| CustomerId::parse("cus_1").expect("valid customer id")),
        action,
        status: SubscriptionStatus::parse(status).expect("valid status"),
        current_period_end: Some(occurred_at + 30 * 86_400),
        full_object,
    };
    let key = format!("{event_type}:{sub}:{occurred_at}");
    event_delivery(id, event_type, occurred_at, key, Effect::Subscription(change))
}

/// An invoice event for `invoice` of customer `cus_1`, billing `sub` when given.
pub fn invoice_event(id: &str, invoice: &str, sub: Option<&str>, action: InvoiceAction, occurred_at: i64) -> Delivery {
    let (event_type, key) = match action {
        InvoiceAction::Paid => ("invoice.paid", format!("invoice.paid:{invoice}")),
        InvoiceAction::PaymentFailed => ("invoice.payment_failed", format!("invoice.payment_failed:{id}")),
        InvoiceAction::Refunded => ("invoice.refunded", format!("invoice.refunded:{invoice}")),
    };
    let change = InvoiceChange {
        invoice_id: InvoiceId::parse(invoice).expect("valid invoice id"),
        customer_id: Some(CustomerId::parse("cus_1").expect("valid customer id")),
        subscription_id: sub.map(|s| SubscriptionId::parse(s).expect("valid subscription id")),
        action,
        money: Some(super::usd(1_500)),
    };
    event_delivery(id, event_type, occurred_at, key, Effect::Invoice(change))
}

/// The subscription `id`, which must exist.
pub async fn subscription_view<S: Store>(store: &S, id: &str) -> SubscriptionView {
    let id = SubscriptionId::parse(id).expect("valid subscription id");
    store.subscription(&id).await.expect("subscription").unwrap_or_else(|| panic!("subscription {id} does not exist"))
}

/// The entitlements of customer `cus_1`.
pub async fn entitlements_of<S: Store>(store: &S) -> Vec<EntitlementView> {
    store.entitlements(&CustomerId::parse("cus_1").expect("valid customer id")).await.expect("entitlements")
}

/// The number of outbox rows of `kind` in the whole store.
pub async fn outbox_count<S: Store>(store: &S, kind: &str) -> usize {
    let filter = OutboxFilter {
        kind: Some(crate::OutboxKind::parse(kind).expect("a kind")),
        limit: 1_000,
        ..OutboxFilter::default()
    };
    store.list_outbox(filter).await.expect("list_outbox").rows.len()
}

/// Created, updated and deleted delivered in each of the six orders end in the same state: the newest event wins
/// and an ended subscription stays ended.
pub async fn subscription_events_in_every_order_end_in_the_same_state<S: Store>(store: S) {
    use SubscriptionAction::*;
    let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    for (n, order) in orders.iter().enumerate() {
        let sub = format!("sub_perm_{n}");
        let events = [
            subscription_event(&format!("evt_{n}_c"), &sub, Created, "active", 100, true),
            subscription_event(&format!("evt_{n}_u"), &sub, Updated, "past_due", 200, true),
            subscription_event(&format!("evt_{n}_d"), &sub, Deleted, "canceled", 300, true),
        ];
        for &i in order {
            let recorded = ingest(&store, events[i].clone()).await;
            assert_eq!(recorded.outcome, Outcome::Processed, "order {order:?}, event {i}: {recorded:?}");
        }
        let view = subscription_view(&store, &sub).await;
        assert_eq!(
            (view.status.as_str(), view.occurred_at, view.event_id.as_str(), view.customer_id.as_deref()),
            ("canceled", 300, format!("evt_{n}_d").as_str(), Some("cus_1")),
            "order {order:?}"
        );
        let last = view.history.last().expect("history");
        assert_eq!(last.to, "canceled", "order {order:?}: {:?}", view.history);
        // Every row of the history is a real change, newest last.
        assert!(view.history.iter().all(|h| h.from.as_deref() != Some(h.to.as_str())), "{:?}", view.history);
    }
}

/// A partial update for a subscription not yet created waits; once the creation arrives, the retry applies it
/// because it is newer.
pub async fn a_partial_update_before_its_subscription_is_deferred_then_applied<S: Store>(store: S) {
    use SubscriptionAction::*;
    let early = ingest(&store, subscription_event("evt_pu", "sub_pu", Updated, "past_due", 200, false)).await;
    assert_eq!(early.outcome, Outcome::Deferred, "{early:?}");
    assert!(store.subscription(&SubscriptionId::parse("sub_pu").expect("id")).await.expect("read").is_none());

    assert_eq!(ingest(&store, subscription_event("evt_pc", "sub_pu", Created, "active", 100, true)).await, processed());
    let due = claim_due(&store, claim("w", T0 + 10_000_000, 30_000)).await;
    assert_eq!(due.len(), 1, "{due:?}");
    match retry(&store, due.into_iter().next().expect("one"), T0 + 10_000_001).await {
        Retried::Done(r) => assert_eq!(r, processed()),
        other => panic!("{other:?}"),
    }
    let view = subscription_view(&store, "sub_pu").await;
    assert_eq!((view.status.as_str(), view.occurred_at, view.customer_id.as_deref()), ("past_due", 200, Some("cus_1")));
    let changes: Vec<(Option<&str>, &str)> = view.history.iter().map(|h| (h.from.as_deref(), h.to.as_str())).collect();
    assert_eq!(changes, [(None, "active"), (Some("active"), "past_due")]);
}

/// The incident: two `invoice.paid` events with different ids for one invoice, at once → one grant; the other is
/// a business-key duplicate. A third event with yet another key for the same invoice changes nothing either.
pub async fn two_events_for_one_paid_invoice_grant_one_entitlement<S: Store>(store: S) {
    let store = Arc::new(store);
    let deliveries =
        (0..16).map(|i| invoice_event(&format!("evt_inv_{i}"), "in_1", None, InvoiceAction::Paid, 100)).collect();
    let results = ingest_concurrently(&store, deliveries).await;
    assert_eq!(count(&results, Outcome::Processed), 1, "{results:?}");
    assert_eq!(count(&results, Outcome::Duplicate), 15, "{results:?}");

    let mut other_key = invoice_event("evt_inv_x", "in_1", None, InvoiceAction::Paid, 101);
    if let Parsed::Event(e) = &mut other_key.parts_mut().parsed {
        e.business_key = "invoice.payment_succeeded:in_1".into();
    }
    let again = ingest(&*store, other_key).await;
    assert_eq!(again.outcome, Outcome::Processed, "{again:?}");
    assert!(again.detail.as_deref().is_some_and(|d| d.contains("already granted")), "{again:?}");

    let ents = entitlements_of(&*store).await;
    assert_eq!(ents.len(), 1, "{ents:?}");
    assert_eq!((ents[0].invoice_id.as_str(), ents[0].status), ("in_1", EntitlementStatus::Granted));
    assert_eq!(ents[0].amount_minor, Some(1_500));
    assert_eq!(ents[0].history.len(), 1, "{:?}", ents[0].history);
    assert_eq!(outbox_count(&*store, "entitlement.granted").await, 1);
}

/// A refund revokes a granted entitlement once; a refund that arrives before its payment leaves nothing to grant.
pub async fn a_refund_revokes_and_a_refund_before_payment_grants_nothing<S: Store>(store: S) {
    assert_eq!(ingest(&store, invoice_event("evt_p1", "in_a", None, InvoiceAction::Paid, 100)).await, processed());
    assert_eq!(ingest(&store, invoice_event("evt_r1", "in_a", None, InvoiceAction::Refunded, 200)).await, processed());

    let early = ingest(&store, invoice_event("evt_r2", "in_b", None, InvoiceAction::Refunded, 200)).await;
    assert_eq!(early.outcome, Outcome::Processed, "{early:?}");
    let late = ingest(&store, invoice_event("evt_p2", "in_b", None, InvoiceAction::Paid, 100)).await;
    assert_eq!(late.outcome, Outcome::Processed, "{late:?}");
    assert!(late.detail.is_some(), "the late payment explains why it granted nothing: {late:?}");

    let ents = entitlements_of(&store).await;
    let states: Vec<(&str, EntitlementStatus)> = ents.iter().map(|e| (e.invoice_id.as_str(), e.status)).collect();
    assert_eq!(states.len(), 2);
    assert!(
        states.contains(&("in_a", EntitlementStatus::Revoked))
            && states.contains(&("in_b", EntitlementStatus::Revoked))
    );
    assert_eq!(outbox_count(&store, "entitlement.granted").await, 1);
    assert_eq!(outbox_count(&store, "entitlement.revoked").await, 1);
}

/// The end of a subscription revokes the entitlements of its invoices, and a failed payment is reported without
/// changing anything.
pub async fn the_end_of_a_subscription_revokes_its_entitlements<S: Store>(store: S) {
    use SubscriptionAction::*;
    assert_eq!(ingest(&store, subscription_event("evt_sc", "sub_e", Created, "active", 100, true)).await, processed());
    assert_eq!(
        ingest(&store, invoice_event("evt_ip", "in_e", Some("sub_e"), InvoiceAction::Paid, 110)).await,
        processed()
    );
    let failed = invoice_event("evt_if", "in_f", Some("sub_e"), InvoiceAction::PaymentFailed, 120);
    assert_eq!(ingest(&store, failed).await, processed());
    assert_eq!(
        ingest(&store, subscription_event("evt_sd", "sub_e", Deleted, "canceled", 300, true)).await,
        processed()
    );

    let view = subscription_view(&store, "sub_e").await;
    assert_eq!(view.status, "canceled");
    assert_eq!(view.entitlements.len(), 1, "only the paid invoice has an entitlement: {:?}", view.entitlements);
    let ent = &view.entitlements[0];
    assert_eq!((ent.invoice_id.as_str(), ent.status), ("in_e", EntitlementStatus::Revoked));
    assert!(ent.reason.as_deref().is_some_and(|r| r.contains("sub_e")), "{ent:?}");
    let changes: Vec<(Option<&str>, &str, &str)> =
        ent.history.iter().map(|h| (h.from.as_deref(), h.to.as_str(), h.event_id.as_str())).collect();
    assert_eq!(changes, [(None, "granted", "evt_ip"), (Some("granted"), "revoked", "evt_sd")]);
    // Each event's detail lists the billing changes it made.
    let made = async |id: &str| -> Vec<(String, String, Option<String>, String)> {
        event_view(&store, id)
            .await
            .billing_changes
            .into_iter()
            .map(|c| (c.object.as_str().to_owned(), c.object_id, c.from, c.to))
            .collect()
    };
    let change = |object: &str, id: &str, from: Option<&str>, to: &str| {
        (object.to_owned(), id.to_owned(), from.map(str::to_owned), to.to_owned())
    };
    assert_eq!(made("evt_ip").await, [change("entitlement", "in_e", None, "granted")]);
    assert_eq!(
        made("evt_sd").await,
        [
            change("entitlement", "in_e", Some("granted"), "revoked"),
            change("subscription", "sub_e", Some("active"), "canceled")
        ]
    );
    assert!(made("evt_if").await.is_empty(), "a failed payment changes nothing");
    assert_eq!(outbox_count(&store, "entitlement.revoked").await, 1);
    assert_eq!(outbox_count(&store, "invoice.payment_failed").await, 1);
    assert_eq!(outbox_count(&store, "subscription.updated").await, 2);

    // A late update never brings it back, and an invoice paid before the end, delivered after it, is not granted.
    let late = ingest(&store, subscription_event("evt_su", "sub_e", Updated, "active", 400, true)).await;
    assert_eq!(late.outcome, Outcome::Processed, "{late:?}");
    assert_eq!(subscription_view(&store, "sub_e").await.status, "canceled");
    let late_paid = ingest(&store, invoice_event("evt_ip2", "in_g", Some("sub_e"), InvoiceAction::Paid, 250)).await;
    assert_eq!(late_paid.outcome, Outcome::Processed, "{late_paid:?}");
    assert!(entitlements_of(&store).await.iter().all(|e| e.status == EntitlementStatus::Revoked));
    assert_eq!(outbox_count(&store, "entitlement.granted").await, 1);
}

/// A nonce is new once; the same request again is a redelivery, another body under it a replay; an expired nonce
/// is forgotten.
pub async fn a_signature_nonce_is_claimed_once_and_forgotten_after_its_window<S: Store>(store: S) {
    let nonce = |n: &str, body: &str, expires_at: i64, now: i64| NonceClaim {
        keyid: "k1".into(),
        nonce: n.into(),
        body_sha256: body.into(),
        expires_at,
        now,
    };
    let claim = |c: NonceClaim| store.claim_nonce(c);
    assert_eq!(claim(nonce("n1", "aa", 1_000, 700)).await.expect("claim"), NonceClaimed::New);
    assert_eq!(claim(nonce("n1", "aa", 1_000, 701)).await.expect("claim"), NonceClaimed::Redelivery);
    assert_eq!(claim(nonce("n1", "bb", 1_000, 702)).await.expect("claim"), NonceClaimed::Replayed);
    // After its window the nonce is pruned: the signature itself is refused as stale by then, so nothing is lost.
    assert_eq!(claim(nonce("n2", "cc", 3_000, 2_000)).await.expect("claim"), NonceClaimed::New);
    assert_eq!(claim(nonce("n1", "bb", 3_000, 2_001)).await.expect("claim"), NonceClaimed::New);
}

fn pruned_nothing() -> crate::Pruned {
    crate::Pruned::default()
}

/// Retention: settled events older than the key retention go with their keys; younger ones keep theirs; payloads
/// in the payload window are cleared; dead letters keep everything; a step never exceeds its limit.
pub async fn pruning_removes_only_settled_events_older_than_the_retention<S: Store>(store: S) {
    use super::{new_order, pay, register_new, unparseable};
    const DAY: i64 = 86_400_000;
    for (i, at) in [T0, T0 + DAY, T0 + 20 * DAY, T0 + 40 * DAY].into_iter().enumerate() {
        register_new(&store, new_order(&format!("ord_r{i}"), 100, at)).await;
        assert_eq!(ingest(&store, pay(&format!("evt_r{i}"), &format!("ord_r{i}"), 100, at + 1)).await, processed());
    }
    let dead = ingest(&store, unparseable("evt_dead", b"{not json", "not JSON", T0 + 2)).await;
    assert_eq!(dead.outcome, Outcome::DeadLettered);

    // Keys kept 30 days, payloads 7, as of day 41; one event of each kind per step.
    let now = T0 + 41 * DAY;
    let step = |payloads_from_ms| PruneRequest {
        keys_before_ms: now - 30 * DAY,
        payloads_from_ms,
        payloads_before_ms: now - 7 * DAY,
        orders_before_ms: 0,
        limit: 1,
        now_ms: now,
    };
    let first = store.prune(step(0)).await.expect("prune");
    assert_eq!((first.events_deleted, first.business_keys_deleted), (1, 1), "{first:?}");
    assert!(first.more(1));
    let second = store.prune(step(0)).await.expect("prune");
    assert_eq!(second.events_deleted, 1, "{second:?}");
    for _ in 0..10 {
        let next = store.prune(step(0)).await.expect("prune");
        assert_eq!(next.events_deleted, 0, "only two events are older than 30 days: {next:?}");
        if !next.more(1) {
            break;
        }
    }
    // A later step starting where this one's payload window ended finds nothing left to clear.
    let later = store.prune(PruneRequest { payloads_from_ms: now - 7 * DAY, ..step(0) }).await.expect("prune");
    assert_eq!(later, pruned_nothing(), "{later:?}");

    for gone in ["evt_r0", "evt_r1"] {
        assert!(store.event(&source(), &event_id(gone)).await.expect("event").is_none(), "{gone} is pruned");
    }
    let day10 = super::event_view(&store, "evt_r2").await;
    assert!(day10.raw_body.is_empty(), "the payload of a 21-day-old event is cleared");
    let day40 = super::event_view(&store, "evt_r3").await;
    assert!(!day40.raw_body.is_empty(), "a day-old event keeps its payload");
    let dead = super::event_view(&store, "evt_dead").await;
    assert_eq!((dead.status, dead.raw_body.as_slice()), (Outcome::DeadLettered, &b"{not json"[..]));

    // The young event's key still deduplicates; the pruned one's redelivery is recorded anew, and the order's own
    // state keeps it from paying twice.
    let young = ingest(&store, pay("evt_r3", "ord_r3", 100, now)).await;
    assert_eq!(young.outcome, Outcome::Duplicate, "{young:?}");
    let old = ingest(&store, pay("evt_r0", "ord_r0", 100, now)).await;
    assert_eq!(old.outcome, Outcome::Processed, "{old:?}");
    assert!(old.detail.is_some(), "a no-op: the order is already paid: {old:?}");
    assert_eq!(super::paid_rows(&store).await, 4);
}
