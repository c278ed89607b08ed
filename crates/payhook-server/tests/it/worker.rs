//! Deferred events and the retry worker, driven by hand.

use crate::helpers::{TestApp, event};
use payhook_core::event::OrderAction::Pay;
use payhook_store::Outcome;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_payment_before_its_order_is_deferred_and_applied_once_the_order_is_registered() {
    let app = TestApp::spawn().await;
    let paid = event("evt_early", Pay, "ord_late", 4200);

    let (status, body) = app.deliver("payments", &paid).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("deferred")), "{body}");
    let stored = app.event("payments", "evt_early").await.unwrap();
    assert_eq!(stored.status, Outcome::Deferred);
    assert!(stored.next_attempt_at_ms.is_some_and(|at| at > app.clock.now_ms()), "{stored:?}");

    // Nothing is due yet: the backoff has not elapsed and the order is still missing.
    let pass = app.running.worker.run_until_idle(app.clock.now_ms()).await.unwrap();
    assert_eq!(pass.retried, 0);

    let (status, body) = app.register_order("ord_late", 4200, "usd").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let pass = app.running.worker.run_until_idle(app.clock.now_ms()).await.unwrap();
    assert_eq!((pass.retried, pass.lease_lost), (1, 0));

    let order = app.order("ord_late").await;
    assert_eq!(order["status"], "paid", "{order}");
    assert_eq!(app.receipts("ord_late").await, 1);
    let stored = app.event("payments", "evt_early").await.unwrap();
    assert_eq!((stored.status, stored.attempts), (Outcome::Processed, 2));

    let (status, body) = app.deliver("payments", &paid).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("duplicate")), "{body}");
    assert_eq!(app.running.worker.run_until_idle(app.clock.now_ms()).await.unwrap().retried, 0);
    assert_eq!(app.receipts("ord_late").await, 1);
}

#[tokio::test]
async fn a_deferred_payment_with_the_wrong_amount_is_dead_lettered_when_its_order_arrives() {
    let app = TestApp::spawn().await;
    assert_eq!(app.deliver("payments", &event("evt_x", Pay, "ord_x", 100)).await.1["status"], "deferred");
    app.register_order("ord_x", 101, "usd").await;
    assert_eq!(app.running.worker.run_until_idle(app.clock.now_ms()).await.unwrap().retried, 1);

    assert_eq!(app.event("payments", "evt_x").await.unwrap().status, Outcome::DeadLettered);
    assert_eq!(app.order("ord_x").await["status"], "pending");
    assert_eq!(app.outbox_total().await, 0);
}

#[tokio::test]
async fn a_deferred_event_is_retried_when_the_servers_clock_passes_its_backoff_and_not_before() {
    let app = TestApp::spawn().await;
    let received = app.clock.now_ms();
    assert_eq!(app.deliver("payments", &event("evt_wait", Pay, "ord_missing", 100)).await.1["status"], "deferred");
    let stored = app.event("payments", "evt_wait").await.unwrap();
    assert_eq!(stored.received_at_ms, received, "recorded at the server's clock");
    let due = stored.next_attempt_at_ms.expect("a deferred event has its next attempt");
    assert!(due > received, "{stored:?}");

    // One millisecond short of its backoff: not due. At it: retried (the order is still missing, so deferred again,
    // later).
    app.clock.set(due - 1);
    assert_eq!(app.running.worker.run_until_idle(app.clock.now_ms()).await.unwrap().retried, 0);
    app.clock.set(due);
    assert_eq!(app.running.worker.run_until_idle(app.clock.now_ms()).await.unwrap().retried, 1);
    let again = app.event("payments", "evt_wait").await.unwrap();
    assert_eq!((again.status, again.attempts), (Outcome::Deferred, 2));
    assert!(again.next_attempt_at_ms.is_some_and(|at| at > due), "{again:?}");
}
