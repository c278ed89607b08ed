//! Billing effects on PostgreSQL beyond the contract: payments of one subscription's invoices and the
//! subscription's end racing on several instances (at random, and held up at the point that matters), and a
//! billing dead letter replayed.

use crate::{TempSchema, TempStore, eventually, test_url, waiting_for_locks};
use payhook_core::billing::{EntitlementStatus, InvoiceAction, SubscriptionAction};
use payhook_postgres::PgStore;
use payhook_store::contract::{
    T0, claim, claim_due, entitlements_of, ingest, invoice_event, outbox_count, processed, retry, source,
    subscription_event, subscription_view, test_policy, two_attempt_policy,
};
use payhook_store::{Outcome, Parsed, Replayed, Retried, Store};
use std::sync::Arc;
use std::time::Duration;

/// Six `invoice.paid` events for each of eight invoices of one subscription (half of them under keys of their
/// own, so that only the entitlement's lock and key keep them apart) and the subscription's end, all at once on
/// three instances: one entitlement per invoice, every grant revoked exactly once by the end, none after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_racing_a_subscriptions_end_on_three_instances_grant_once_and_are_all_revoked() {
    let Some(url) = test_url() else { return };
    const INVOICES: usize = 8;
    let schema = TempSchema::create(&url).await;
    let opened = futures_util::future::join_all((0..3).map(|_| PgStore::open(schema.options(test_policy())))).await;
    let stores: Vec<Arc<PgStore>> = opened.into_iter().map(|s| Arc::new(s.expect("open an instance"))).collect();
    let created = subscription_event("evt_mc", "sub_m", SubscriptionAction::Created, "active", 100, true);
    assert_eq!(ingest(&*stores[0], created).await, processed());

    let mut deliveries = Vec::new();
    for k in 0..INVOICES {
        for j in 0..6 {
            let mut paid =
                invoice_event(&format!("evt_m{k}_{j}"), &format!("in_m{k}"), Some("sub_m"), InvoiceAction::Paid, 150);
            if j % 2 == 1
                && let Parsed::Event(e) = &mut paid.parts_mut().parsed
            {
                e.business_key = format!("invoice.paid:in_m{k}:{j}");
            }
            deliveries.push(paid);
        }
        if k == INVOICES / 2 {
            deliveries.push(subscription_event("evt_md", "sub_m", SubscriptionAction::Deleted, "canceled", 300, true));
        }
    }
    let answers = futures_util::future::join_all(
        deliveries.into_iter().enumerate().map(|(i, d)| stores[i % stores.len()].ingest(d)),
    )
    .await;
    for answer in &answers {
        let recorded = answer.as_ref().expect("every delivery is recorded");
        assert!(matches!(recorded.outcome, Outcome::Processed | Outcome::Duplicate), "{recorded:?}");
    }

    let store = &*stores[0];
    assert_eq!(subscription_view(store, "sub_m").await.status, "canceled");
    let ents = entitlements_of(store).await;
    assert_eq!(ents.len(), INVOICES, "{ents:?}");
    for e in &ents {
        assert_eq!(e.status, EntitlementStatus::Revoked, "{e:?}");
        let changes: Vec<(Option<&str>, &str)> = e.history.iter().map(|h| (h.from.as_deref(), h.to.as_str())).collect();
        match changes.as_slice() {
            [(None, "granted"), (Some("granted"), "revoked")] => {
                assert_eq!(e.history[1].event_id, "evt_md", "{e:?}");
            }
            [(None, "revoked")] => assert!(e.reason.as_deref().is_some_and(|r| r.contains("already ended")), "{e:?}"),
            other => panic!("unexpected history {other:?} of {e:?}"),
        }
    }
    let granted = outbox_count(store, "entitlement.granted").await;
    assert_eq!(granted, outbox_count(store, "entitlement.revoked").await, "each grant is revoked exactly once");
    assert_eq!(granted, ents.iter().filter(|e| e.history.len() == 2).count());
    for s in &stores {
        assert_eq!(s.batch_stats().failed_batches, 0, "{:?}", s.batch_stats());
        s.shutdown().await;
    }
}

/// A partial update that waited for its subscription past its retry budget is a dead letter; once the
/// subscription exists, replaying it applies it, and replaying it again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_billing_dead_letter_is_replayed_under_its_lock_once_its_subscription_exists() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open(&url, two_attempt_policy()).await;
    let update = subscription_event("evt_ru", "sub_r", SubscriptionAction::Updated, "past_due", 200, false);
    assert_eq!(ingest(&store, update.clone()).await.outcome, Outcome::Deferred);
    let due = claim_due(&store, claim("w", T0 + 10_000_000, 30_000)).await;
    assert_eq!(due.len(), 1, "{due:?}");
    match retry(&store, due.into_iter().next().expect("one"), T0 + 10_000_001).await {
        Retried::Done(r) => assert_eq!(r.outcome, Outcome::DeadLettered, "{r:?}"),
        other => panic!("{other:?}"),
    }
    let created = subscription_event("evt_rc", "sub_r", SubscriptionAction::Created, "active", 100, true);
    assert_eq!(ingest(&store, created).await, processed());

    let id = update.parsed().event_id().clone();
    let replayed = store.replay(&source(), &id, update.parsed().clone(), T0 + 10_000_002).await.expect("replay");
    assert_eq!(replayed, Replayed::Done(processed()));
    let view = subscription_view(&store, "sub_r").await;
    assert_eq!((view.status.as_str(), view.event_id.as_str()), ("past_due", "evt_ru"));
    assert_eq!(view.history.len(), 2, "{:?}", view.history);
    let again = store.replay(&source(), &id, update.parsed().clone(), T0 + 10_000_003).await.expect("replay");
    assert_eq!(again, Replayed::NotDeadLetter(Outcome::Processed));
    assert_eq!(outbox_count(&store, "subscription.updated").await, 2);
}

/// The race the subscription lock of an invoice closes: a payment of an invoice of a subscription, held up after
/// it read the subscription (still active) and before it commits its grant, and the subscription's end on another
/// instance meanwhile. The end waits for the payment's locks, then finds the grant and revokes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriptions_end_waits_for_a_payment_in_flight_on_another_instance_and_revokes_its_grant() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let (a, b) = (
        Arc::new(PgStore::open(schema.options(test_policy())).await.expect("instance a")),
        Arc::new(PgStore::open(schema.options(test_policy())).await.expect("instance b")),
    );
    let created = subscription_event("evt_hc", "sub_h", SubscriptionAction::Created, "active", 100, true);
    assert_eq!(ingest(&*a, created).await, processed());
    // The payment's grant waits inside its transaction for an advisory lock this session holds.
    let side = schema.side().await;
    side.batch_execute(
        "CREATE FUNCTION hold_grant() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NEW; END $$;
         CREATE TRIGGER hold_grant BEFORE INSERT ON entitlements FOR EACH ROW EXECUTE FUNCTION hold_grant();
         BEGIN; SELECT pg_advisory_xact_lock(4242);",
    )
    .await
    .expect("hold the grant");
    let paid = tokio::spawn({
        let a = Arc::clone(&a);
        async move { a.ingest(invoice_event("evt_hp", "in_h", Some("sub_h"), InvoiceAction::Paid, 150)).await }
    });
    eventually("the payment waits in its grant", Duration::from_secs(10), async || {
        waiting_for_locks(&side, schema.name()).await >= 1
    })
    .await;
    let ended = tokio::spawn({
        let b = Arc::clone(&b);
        let end = subscription_event("evt_hd", "sub_h", SubscriptionAction::Deleted, "canceled", 300, true);
        async move { b.ingest(end).await }
    });
    // The end must be blocked behind the payment's locks (were it not made to wait, it would run ahead of the
    // payment and find no grant to revoke), so a second lock wait shows in pg_locks before the grant goes on.
    eventually("the end waits for the payment's locks", Duration::from_secs(10), async || {
        waiting_for_locks(&side, schema.name()).await >= 2
    })
    .await;
    side.batch_execute("COMMIT").await.expect("let the grant go");
    assert_eq!(paid.await.expect("task").expect("the payment"), processed());
    assert_eq!(ended.await.expect("task").expect("the end"), processed());

    let ents = entitlements_of(&*a).await;
    assert_eq!(ents.len(), 1, "{ents:?}");
    assert_eq!(ents[0].status, EntitlementStatus::Revoked, "{ents:?}");
    let changes: Vec<(Option<&str>, &str, &str)> =
        ents[0].history.iter().map(|h| (h.from.as_deref(), h.to.as_str(), h.event_id.as_str())).collect();
    assert_eq!(changes, [(None, "granted", "evt_hp"), (Some("granted"), "revoked", "evt_hd")]);
    assert_eq!(outbox_count(&*a, "entitlement.revoked").await, 1);
    a.shutdown().await;
    b.shutdown().await;
}
