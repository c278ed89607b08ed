//! `POST /webhooks/{source}` end to end: outcomes, dedup, formats and schemes.

use crate::helpers::{TestApp, event, now_secs};
use payhook_core::event::OrderAction::{Pay, Refund};
use payhook_store::Outcome;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn the_same_delivery_twice_is_processed_once_and_answered_duplicate_the_second_time() {
    let app = TestApp::spawn().await;
    assert_eq!(app.register_order("ord_1", 1999, "usd").await.0, StatusCode::CREATED);
    let paid = event("evt_1", Pay, "ord_1", 1999);

    let (status, body) = app.deliver("payments", &paid).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"event_id": "evt_1", "status": "processed"})));
    let (status, body) = app.deliver("payments", &paid).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"event_id": "evt_1", "status": "duplicate"})));

    let order = app.order("ord_1").await;
    assert_eq!(order["status"], "paid");
    let outbox = order["outbox"].as_array().unwrap();
    assert_eq!(outbox.len(), 1, "{order}");
    assert_eq!(outbox[0]["kind"], "order.paid");
    assert_eq!(outbox[0]["payload"]["event_id"], "evt_1");
    let history = order["history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{order}");
    assert_eq!((&history[0]["from"], &history[0]["to"]), (&json!("pending"), &json!("paid")));
    assert_eq!((&history[0]["source"], &history[0]["event_id"]), (&json!("payments"), &json!("evt_1")));
    assert_eq!(app.inbox_rows().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_delivery_sixteen_times_at_once_is_processed_exactly_once() {
    let app = TestApp::spawn().await;
    app.register_order("ord_c", 500, "usd").await;
    let body = app.encode("payments", &event("evt_c", Pay, "ord_c", 500));
    let headers = app.sign("payments", &body, now_secs());

    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (client, url, headers, body) =
            (app.client.clone(), app.url("/webhooks/payments"), headers.clone(), body.clone());
        tasks.spawn(async move {
            let mut req = client.post(url).body(body);
            for (k, v) in &headers {
                req = req.header(k.as_str(), v.as_str());
            }
            crate::helpers::read_json(req.send().await.expect("POST")).await
        });
    }
    let mut statuses = Vec::new();
    while let Some(reply) = tasks.join_next().await {
        let reply = reply.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
        statuses.push(reply.json["status"].as_str().unwrap().to_owned());
    }
    assert_eq!(statuses.iter().filter(|s| *s == "processed").count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| *s == "duplicate").count(), 15, "{statuses:?}");
    assert_eq!(app.receipts("ord_c").await, 1);
    assert_eq!(app.inbox_rows().await, 1);
}

#[tokio::test]
async fn a_refund_before_the_payment_refunds_the_order_and_writes_no_receipt() {
    let app = TestApp::spawn().await;
    app.register_order("ord_r", 700, "usd").await;

    let (status, body) = app.deliver("payments", &event("evt_refund", Refund, "ord_r", 700)).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("processed")), "{body}");
    // The payment arrives late: the order has moved past it.
    let (status, body) = app.deliver("payments", &event("evt_pay", Pay, "ord_r", 700)).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let order = app.order("ord_r").await;
    assert_eq!(order["status"], "refunded", "{order}");
    assert_eq!(app.receipts("ord_r").await, 0, "{order}");
    assert_eq!(app.outbox_rows("ord_r", "order.refunded").await.len(), 1, "{order}");
}

#[tokio::test]
async fn a_payment_whose_amount_does_not_match_the_order_is_dead_lettered_and_changes_nothing() {
    let app = TestApp::spawn().await;
    app.register_order("ord_m", 1000, "usd").await;

    let (status, body) = app.deliver("payments", &event("evt_m", Pay, "ord_m", 999)).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("dead_lettered")), "{body}");
    assert!(body["detail"].as_str().is_some_and(|d| d.contains("does not match")), "{body}");

    let order = app.order("ord_m").await;
    assert_eq!(order["status"], "pending");
    assert_eq!(order["outbox"], json!([]));
    assert_eq!(order["history"], json!([]));
    assert_eq!(app.outbox_total().await, 0);
    assert_eq!(app.event("payments", "evt_m").await.unwrap().status, Outcome::DeadLettered);
}

#[tokio::test]
async fn a_verified_body_that_is_not_json_is_kept_as_a_dead_letter_with_its_raw_bytes() {
    let app = TestApp::spawn().await;
    let raw = b"{not json".to_vec();

    let (status, body) = app.deliver_bytes("payments", raw.clone()).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("dead_lettered")), "{body}");
    let event_id = body["event_id"].as_str().expect("an event id").to_owned();
    assert!(event_id.starts_with("sha256:"), "{event_id}");

    let stored = app.event("payments", &event_id).await.expect("stored");
    assert_eq!(stored.status, Outcome::DeadLettered);
    assert_eq!(stored.raw_body, raw);
    assert!(stored.reason.as_deref().is_some_and(|r| r.contains("JSON")), "{:?}", stored.reason);

    let (status, body) = app.deliver_bytes("payments", raw).await;
    assert_eq!((status, &body["status"], &body["event_id"]), (StatusCode::OK, &json!("duplicate"), &json!(event_id)));
    assert_eq!(app.inbox_rows().await, 1);
}

#[tokio::test]
async fn an_event_type_payhook_does_not_act_on_is_answered_ignored() {
    let app = TestApp::spawn().await;
    let body = json!({"id": "evt_cust", "type": "customer.created", "created": now_secs(), "data": {}});

    let (status, answer) = app.deliver_bytes("payments", body.to_string().into_bytes()).await;
    assert_eq!((status, &answer["status"]), (StatusCode::OK, &json!("ignored")), "{answer}");
    assert_eq!(app.event("payments", "evt_cust").await.unwrap().status, Outcome::Ignored);
    assert_eq!(app.outbox_total().await, 0);
}

#[tokio::test]
async fn stripe_events_pay_an_order_once_whichever_event_reports_the_payment() {
    let app = TestApp::spawn().await;
    app.register_order("ord_s", 2500, "usd").await;

    let intent = event("evt_pi", Pay, "ord_s", 2500);
    let (status, body) = app.deliver("stripe", &intent).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("processed")), "{body}");
    assert_eq!(app.order("ord_s").await["status"], "paid");

    let session = json!({
        "id": "evt_cs", "object": "event", "type": "checkout.session.completed", "created": now_secs(),
        "data": {"object": {"id": "cs_1", "object": "checkout.session", "client_reference_id": "ord_s",
                            "amount_total": 2500, "currency": "usd", "payment_status": "paid"}},
    });
    let (status, body) = app.deliver_bytes("stripe", session.to_string().into_bytes()).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("processed")), "{body}");

    let order = app.order("ord_s").await;
    assert_eq!(order["status"], "paid");
    assert_eq!(app.receipts("ord_s").await, 1, "{order}");
    assert_eq!(order["history"].as_array().unwrap().len(), 1, "{order}");
    let stored = app.event("stripe", "evt_pi").await.unwrap();
    assert_eq!(stored.event_type.as_deref(), Some("payment_intent.succeeded"));
    assert!(stored.verification.starts_with("stripe"), "{}", stored.verification);
    assert_eq!(app.deliver("stripe", &intent).await.1["status"], "duplicate");
}

#[tokio::test]
async fn standard_webhooks_deliveries_verify_with_webhook_and_svix_header_names() {
    let app = TestApp::spawn().await;
    app.register_order("ord_w", 1200, "usd").await;

    let (status, body) = app.deliver("standard", &event("evt_w_pay", Pay, "ord_w", 1200)).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("processed")), "{body}");
    assert_eq!(app.order("ord_w").await["status"], "paid");
    let stored = app.event("standard", "evt_w_pay").await.unwrap();
    assert!(stored.verification.starts_with("standard-webhooks"), "{}", stored.verification);
    assert_eq!(stored.headers.get_all("webhook-id").len(), 1, "{:?}", stored.headers);

    // The same scheme as Svix sends it: svix-id, svix-timestamp, svix-signature.
    let refund = app.encode("standard", &event("evt_w_refund", Refund, "ord_w", 1200));
    let svix: Vec<(String, String)> = app
        .sign("standard", &refund, now_secs())
        .into_iter()
        .map(|(k, v)| (k.replace("webhook-", "svix-"), v))
        .collect();
    assert!(svix.iter().all(|(k, _)| k.starts_with("svix-")), "{svix:?}");
    let reply = app.post_raw("standard", &svix, refund.clone()).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("processed")), "{}", reply.json);
    assert_eq!(app.order("ord_w").await["status"], "refunded");
    assert_eq!(app.outbox_rows("ord_w", "order.refunded").await.len(), 1);

    // svix- headers are checked, not just accepted: a tampered body under them fails.
    let mut tampered = refund;
    tampered.push(b' ');
    let reply = app.post_raw("standard", &svix, tampered).await;
    assert_eq!((reply.status, &reply.json["error"]), (StatusCode::UNAUTHORIZED, &json!("mismatch")), "{}", reply.json);
}

/// A payload shaped like the Standard Webhooks specification's example (`{type, timestamp, data}`, no id) is
/// recorded under its `webhook-id`, and a redelivery is a duplicate; a payment in that shape pays its order.
#[tokio::test]
async fn a_standard_webhooks_payload_without_an_id_is_recorded_under_its_webhook_id() {
    let app = TestApp::spawn().await;
    let example = br#"{"type":"contact.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{"id":"1f81eb52-5198-4599-803e-771906343485","type":"contact"}}"#.to_vec();
    let headers = app.sign("standard", &example, now_secs());
    let msg_id = headers.iter().find(|(k, _)| k == "webhook-id").unwrap().1.clone();
    let reply = app.post_raw("standard", &headers, example.clone()).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("ignored")), "{}", reply.json);
    assert_eq!(reply.json["event_id"], msg_id);
    let stored = app.event("standard", &msg_id).await.expect("stored under its webhook-id");
    assert_eq!((stored.event_type.as_deref(), stored.status.as_str()), (Some("contact.created"), "ignored"));
    let again = app.post_raw("standard", &app.sign("standard", &example, now_secs()), example).await;
    assert_eq!(again.json["status"], "duplicate", "{}", again.json);

    app.register_order("ord_sw", 700, "usd").await;
    let pay = br#"{"type":"payment.succeeded","timestamp":"2026-12-02T10:00:00Z","data":{"order_id":"ord_sw","amount":700,"currency":"usd"}}"#.to_vec();
    let reply = app.post_raw("standard", &app.sign("standard", &pay, now_secs()), pay).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("processed")), "{}", reply.json);
    assert_eq!(app.order("ord_sw").await["status"], "paid");
}

#[tokio::test]
async fn an_unparseable_standard_webhooks_body_is_kept_under_its_webhook_id() {
    let app = TestApp::spawn().await;
    let raw = b"\xff\xfenot json".to_vec();
    let headers = app.sign("standard", &raw, now_secs());
    let msg_id = headers.iter().find(|(k, _)| k == "webhook-id").unwrap().1.clone();

    let reply = app.post_raw("standard", &headers, raw.clone()).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("dead_lettered")), "{}", reply.json);
    assert_eq!(reply.json["event_id"], msg_id);
    assert_eq!(app.event("standard", &msg_id).await.unwrap().raw_body, raw);
    let reply = app.post_raw("standard", &app.sign("standard", &raw, now_secs()), raw).await;
    assert_eq!(reply.json["status"], "duplicate", "{}", reply.json);
}

/// `orders = "implicit"`: a Stripe payment for an order nobody registered pays it, created from the payment's
/// amount and currency, through the whole server; the same source with registered orders defers it.
#[tokio::test]
async fn a_source_with_implicit_orders_is_paid_without_registering_the_order() {
    let app = TestApp::spawn_with(|s, _| {
        let stripe = s.sources.iter_mut().find(|src| src.name.as_str() == "stripe").expect("stripe source");
        stripe.orders = payhook_server::settings::Orders::Implicit;
    })
    .await;
    let (status, body) = app.deliver("stripe", &event("evt_impl", Pay, "ord_impl", 4_200)).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("processed")), "{body}");
    let order = app.order("ord_impl").await;
    assert_eq!(
        (&order["status"], &order["amount"], &order["currency"]),
        (&json!("paid"), &json!(4_200), &json!("usd"))
    );
    assert_eq!(app.deliver("stripe", &event("evt_impl", Pay, "ord_impl", 4_200)).await.1["status"], "duplicate");

    let registered = TestApp::spawn().await;
    let (_, body) = registered.deliver("stripe", &event("evt_reg", Pay, "ord_reg", 4_200)).await;
    assert_eq!(body["status"], "deferred", "{body}");
}
