//! End to end, per provider: realistic payloads signed with the provider's own scheme, delivered twice and out of
//! order, end in the right ledger state with one outbox row per real change.

use crate::helpers::{API_TOKEN, Reply, TestApp, now_secs, read_json, verifier};
use payhook_core::signature::RequestParts;
use payhook_store::{OutboxFilter, Store};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The outbox rows of `kind` in the whole store.
async fn outbox_count(app: &TestApp, kind: &str) -> usize {
    let filter = OutboxFilter {
        kind: Some(payhook_store::OutboxKind::parse(kind).expect("a kind")),
        limit: 1_000,
        ..OutboxFilter::default()
    };
    app.store.list_outbox(filter).await.expect("list outbox").rows.len()
}

/// Signs `body` as `source`'s provider does (Adyen inside the body, the others in headers), adds `extra` headers
/// and posts it.
async fn deliver(app: &TestApp, source: &str, body: &Value, extra: &[(&str, &str)]) -> (StatusCode, String) {
    let mut bytes = body.to_string().into_bytes();
    if source == "adyen" {
        bytes = verifier("adyen", crate::helpers::ADYEN_SECRET).adyen_sign_body(&bytes).expect("sign adyen body");
    }
    let mut headers = app.sign(source, &bytes, now_secs());
    headers.push(("content-type".into(), "application/json".into()));
    headers.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let resp = app.post_raw_response(source, &headers, bytes).await.expect("POST webhook");
    let status = resp.status();
    (status, resp.text().await.expect("answer body"))
}

/// Delivers every payload twice, in the order given, and checks every answer is 2xx.
async fn deliver_all_twice(app: &TestApp, source: &str, payloads: &[(Value, Vec<(&str, &str)>)], order: &[usize]) {
    for round in 0..2 {
        for &i in order {
            let (body, extra) = &payloads[i];
            let (status, text) = deliver(app, source, body, extra).await;
            assert!(status.is_success(), "{source} payload {i} round {round}: {status} {text}");
        }
    }
}

async fn api_get(app: &TestApp, path: &str) -> Reply {
    let resp = app.client.get(app.url(path)).bearer_auth(API_TOKEN).send().await.expect("GET");
    read_json(resp).await
}

/// Stripe: a subscription created, updated and deleted, its invoice paid (Stripe sends both `invoice.paid` and
/// `invoice.payment_succeeded`), and a second invoice refunded — all twice, newest first.
#[tokio::test]
async fn stripe_subscription_and_invoices_end_in_the_right_state_whatever_the_order() {
    let app = TestApp::spawn().await;
    let sub = |id: &str, ty: &str, status: &str, created: i64| {
        json!({"id": id, "object": "event", "type": ty, "created": created, "api_version": "2024-06-20",
               "data": {"object": {"id": "sub_1MowQVLkdIwHu7ixeRlqHVzs", "object": "subscription",
                                   "customer": "cus_NffrFeUfNV2Hib", "status": status,
                                   "current_period_end": 1_680_000_000 + created,
                                   "items": {"object": "list", "data": []}}}})
    };
    let invoice = |id: &str, ty: &str, invoice_id: &str, created: i64| {
        json!({"id": id, "object": "event", "type": ty, "created": created,
               "data": {"object": {"id": invoice_id, "object": "invoice", "customer": "cus_NffrFeUfNV2Hib",
                                   "subscription": "sub_1MowQVLkdIwHu7ixeRlqHVzs", "amount_paid": 2000,
                                   "currency": "usd", "status": "paid"}}})
    };
    let refund = json!({"id": "evt_refund", "object": "event", "type": "charge.refunded", "created": 1_700_000_050,
        "data": {"object": {"id": "ch_3", "object": "charge", "amount_refunded": 2000, "currency": "usd",
                            "customer": "cus_NffrFeUfNV2Hib", "invoice": "in_second", "metadata": {}}}});
    let payloads = vec![
        (sub("evt_created", "customer.subscription.created", "active", 1_700_000_000), vec![]),
        (invoice("evt_paid", "invoice.paid", "in_first", 1_700_000_010), vec![]),
        (invoice("evt_succeeded", "invoice.payment_succeeded", "in_first", 1_700_000_011), vec![]),
        (invoice("evt_paid_2", "invoice.paid", "in_second", 1_700_000_040), vec![]),
        (refund, vec![]),
        (sub("evt_updated", "customer.subscription.updated", "past_due", 1_700_000_060), vec![]),
        (sub("evt_deleted", "customer.subscription.deleted", "canceled", 1_700_000_100), vec![]),
    ];
    deliver_all_twice(&app, "stripe", &payloads, &[6, 5, 4, 3, 2, 1, 0]).await;

    let reply = api_get(&app, "/v1/subscriptions/sub_1MowQVLkdIwHu7ixeRlqHVzs").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(reply.json["status"], "canceled", "{}", reply.json);
    assert_eq!(reply.json["event_id"], "evt_deleted");
    assert_eq!(reply.json["customer_id"], "cus_NffrFeUfNV2Hib");
    let ents = api_get(&app, "/v1/customers/cus_NffrFeUfNV2Hib/entitlements").await;
    let list = ents.json["entitlements"].as_array().expect("entitlements");
    assert_eq!(list.len(), 2, "{}", ents.json);
    assert!(list.iter().all(|e| e["status"] == "revoked"), "{}", ents.json);
    assert_eq!(ents.json["granted"], 0);

    // Arriving newest first, the deletion came before everything: no grant was ever live, nothing to announce.
    assert_eq!(outbox_count(&app, "subscription.updated").await, 1, "only the deletion changed the subscription");
    assert_eq!(outbox_count(&app, "entitlement.granted").await, 0);
    assert_eq!(outbox_count(&app, "entitlement.revoked").await, 0);
    // Seven events recorded once each; the second invoice.paid-like event is a business-key duplicate.
    let stats = app.stats().await;
    let count = |s: &str| payhook_store::Stats::count(&stats.events, s);
    assert_eq!((count("processed"), count("duplicate")), (6, 1), "{stats:?}");
}

/// The incident of two event ids for one invoice, over HTTP and at once: one grant, the other a business-key
/// duplicate answered 2xx.
#[tokio::test]
async fn two_invoice_paid_deliveries_for_one_invoice_sent_together_grant_once() {
    let app = TestApp::spawn().await;
    let paid = |id: &str| {
        json!({"id": id, "type": "invoice.paid", "created": now_secs(),
               "data": {"invoice_id": "in_seat", "customer_id": "cus_team", "amount": 1200, "currency": "usd"}})
    };
    let (first, second) = (paid("evt_seat_a"), paid("evt_seat_b"));
    let (a, b) = tokio::join!(deliver(&app, "payments", &first, &[]), deliver(&app, "payments", &second, &[]));
    let answers: Vec<Value> = [a, b]
        .into_iter()
        .map(|(status, text)| {
            assert_eq!(status, StatusCode::OK, "{text}");
            serde_json::from_str(&text).expect("JSON answer")
        })
        .collect();
    let mut statuses: Vec<&str> = answers.iter().map(|a| a["status"].as_str().expect("status")).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, ["duplicate", "processed"], "{answers:?}");
    let dup = answers.iter().find(|a| a["status"] == "duplicate").expect("duplicate");
    assert!(dup["detail"].as_str().is_some_and(|d| d.contains("invoice.paid:in_seat")), "{dup}");

    let ents = api_get(&app, "/v1/customers/cus_team/entitlements").await;
    assert_eq!(ents.json["granted"], 1, "{}", ents.json);
    assert_eq!(outbox_count(&app, "entitlement.granted").await, 1);

    // The operator sees which event granted it, and that the other changed nothing.
    let applied = answers.iter().find(|a| a["status"] == "processed").expect("processed")["event_id"].clone();
    let detail = api_get(&app, &format!("/v1/events/payments/{}", applied.as_str().expect("event id"))).await;
    assert_eq!(
        detail.json["billing_changes"],
        json!([{"object": "entitlement", "object_id": "in_seat", "from": null, "to": "granted",
                "at_ms": detail.json["billing_changes"][0]["at_ms"]}]),
        "{}",
        detail.json
    );
    let other = dup["event_id"].as_str().expect("event id");
    let detail = api_get(&app, &format!("/v1/events/payments/{other}")).await;
    assert_eq!(detail.json["billing_changes"], json!([]), "{}", detail.json);
}

/// Paystack: a refund that arrives before its charge refunds the order and the charge then changes nothing; a
/// subscription is created, its invoice paid, then disabled.
#[tokio::test]
async fn paystack_charge_refund_and_subscription_end_in_the_right_state() {
    let app = TestApp::spawn().await;
    app.register_order("T685312322670591", 20_000, "ngn").await;
    let charge = json!({"event": "charge.success", "data": {
        "id": 302961, "domain": "live", "status": "success", "reference": "T685312322670591",
        "amount": 20000, "currency": "NGN", "paid_at": "2024-08-22T09:15:02.000Z",
        "created_at": "2024-08-22T09:14:24.000Z", "channel": "card",
        "customer": {"id": 68324, "customer_code": "CUS_qo38as2hpsgk2r0", "email": "ada@example.com"}}});
    let refund = json!({"event": "refund.processed", "data": {
        "id": 1234567, "status": "processed", "transaction_reference": "T685312322670591",
        "refund_reference": "RF_abc", "amount": 20000, "currency": "NGN",
        "createdAt": "2024-08-22T10:00:00.000Z", "updatedAt": "2024-08-22T10:05:00.000Z",
        "customer": {"email": "ada@example.com"}}});
    let sub_create = json!({"event": "subscription.create", "data": {
        "id": 55, "domain": "test", "status": "active", "subscription_code": "SUB_vsyqdmlzble3uii",
        "amount": 50000, "createdAt": "2024-08-01T00:00:00.000Z", "next_payment_date": "2024-09-01T00:00:00.000Z",
        "customer": {"customer_code": "CUS_xnxdt6s1zg1f4nx", "email": "bo@example.com"},
        "plan": {"plan_code": "PLN_gx2wn530m0i3w3m", "interval": "monthly"}}});
    let invoice = json!({"event": "invoice.update", "data": {
        "id": 4567, "domain": "test", "invoice_code": "INV_thy2vkmirn2urwv", "amount": 50000, "paid": true,
        "status": "success", "paid_at": "2024-08-01T00:00:05.000Z", "created_at": "2024-08-01T00:00:00.000Z",
        "period_start": "2024-08-01T00:00:00.000Z", "period_end": "2024-09-01T00:00:00.000Z",
        "subscription": {"status": "active", "subscription_code": "SUB_vsyqdmlzble3uii"},
        "customer": {"customer_code": "CUS_xnxdt6s1zg1f4nx"},
        "transaction": {"reference": "ref_inv_1", "status": "success", "amount": 50000, "currency": "NGN"}}});
    let disable = json!({"event": "subscription.disable", "data": {
        "id": 55, "domain": "test", "status": "complete", "subscription_code": "SUB_vsyqdmlzble3uii",
        "createdAt": "2024-08-01T00:00:00.000Z", "updatedAt": "2024-08-20T00:00:00.000Z",
        "customer": {"customer_code": "CUS_xnxdt6s1zg1f4nx"}}});
    let payloads = vec![(charge, vec![]), (refund, vec![]), (sub_create, vec![]), (invoice, vec![]), (disable, vec![])];
    deliver_all_twice(&app, "paystack", &payloads, &[1, 0, 2, 3, 4]).await;

    let order = app.order("T685312322670591").await;
    assert_eq!(order["status"], "refunded", "{order}");
    assert_eq!(outbox_count(&app, "order.paid").await, 0, "a refunded order gets no receipt");
    assert_eq!(outbox_count(&app, "order.refunded").await, 1);

    let sub = api_get(&app, "/v1/subscriptions/SUB_vsyqdmlzble3uii").await;
    assert_eq!(sub.json["status"], "complete", "{}", sub.json);
    let ents = api_get(&app, "/v1/customers/CUS_xnxdt6s1zg1f4nx/entitlements").await;
    let list = ents.json["entitlements"].as_array().expect("entitlements");
    assert_eq!(list.len(), 1, "{}", ents.json);
    assert_eq!(
        (list[0]["invoice_id"].as_str(), list[0]["status"].as_str()),
        (Some("INV_thy2vkmirn2urwv"), Some("revoked"))
    );
    assert_eq!(outbox_count(&app, "entitlement.granted").await, 1);
    assert_eq!(outbox_count(&app, "entitlement.revoked").await, 1);
    assert_eq!(outbox_count(&app, "subscription.updated").await, 2);
}

/// Shopify: the refund arrives before the payment; topic and event id travel in headers.
#[tokio::test]
async fn shopify_paid_and_refund_out_of_order_end_refunded_without_a_receipt() {
    let app = TestApp::spawn().await;
    app.register_order("820982911946154508", 59_800, "usd").await;
    let paid = json!({"id": 820982911946154508_u64, "email": "jon@example.com", "name": "#9999",
        "financial_status": "paid", "total_price": "598.00", "current_total_price": "598.00", "currency": "USD",
        "created_at": "2024-01-01T10:00:00-05:00", "updated_at": "2024-01-01T10:05:00-05:00"});
    let refund = json!({"id": 929361462, "order_id": 820982911946154508_u64, "created_at": "2024-01-02T10:00:00-05:00",
        "note": "damaged", "transactions": [{"id": 1, "amount": "598.00", "currency": "USD", "kind": "refund",
                                            "status": "success"}]});
    let payloads = vec![
        (
            paid,
            vec![
                ("X-Shopify-Topic", "orders/paid"),
                ("X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5"),
                ("X-Shopify-Triggered-At", "2024-01-01T15:05:00.000Z"),
            ],
        ),
        (
            refund,
            vec![
                ("X-Shopify-Topic", "refunds/create"),
                ("X-Shopify-Event-Id", "0f3e8c2a-1b2c-4d5e-8f90-a1b2c3d4e5f6"),
                ("X-Shopify-Triggered-At", "2024-01-02T15:00:00.000Z"),
            ],
        ),
    ];
    deliver_all_twice(&app, "shopify", &payloads, &[1, 0]).await;
    let order = app.order("820982911946154508").await;
    assert_eq!(order["status"], "refunded", "{order}");
    assert_eq!(outbox_count(&app, "order.paid").await, 0);
    assert_eq!(outbox_count(&app, "order.refunded").await, 1);
}

/// Adyen: one notification carries two items; the answer is `[accepted]`; the refund notification arrives first.
#[tokio::test]
async fn adyen_batches_are_accepted_and_each_item_is_applied_once() {
    let app = TestApp::spawn().await;
    app.register_order("TestPayment-1407325143704", 1_130, "eur").await;
    app.register_order("TestPayment-1407325143705", 500, "eur").await;
    let item = |code: &str, psp: &str, original: &str, reference: &str, value: i64, success: &str| {
        json!({"NotificationRequestItem": {
            "additionalData": {"authCode": "58747"}, "amount": {"currency": "EUR", "value": value},
            "eventCode": code, "eventDate": "2024-06-28T18:03:50+01:00", "merchantAccountCode": "TestMerchant",
            "merchantReference": reference, "originalReference": original, "paymentMethod": "mc",
            "pspReference": psp, "reason": "", "success": success}})
    };
    let auth = json!({"live": "false", "notificationItems": [
        item("AUTHORISATION", "7914073381342284", "", "TestPayment-1407325143704", 1130, "true"),
        item("AUTHORISATION", "7914073381342285", "", "TestPayment-1407325143705", 500, "false"),
    ]});
    let refund = json!({"live": "false", "notificationItems": [
        item("REFUND", "8814073381342290", "7914073381342284", "TestPayment-1407325143704", 1130, "true"),
    ]});
    for body in [&refund, &auth, &refund, &auth] {
        let (status, text) = deliver(&app, "adyen", body, &[]).await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "[accepted]"));
    }
    assert_eq!(app.order("TestPayment-1407325143704").await["status"], "refunded");
    assert_eq!(app.order("TestPayment-1407325143705").await["status"], "failed");
    assert_eq!(outbox_count(&app, "order.paid").await, 0);
    assert_eq!(outbox_count(&app, "order.refunded").await, 1);
    assert_eq!(outbox_count(&app, "order.failed").await, 1);

    // A notification whose item was signed with another key is refused as a whole.
    let forged = verifier("adyen", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
        .adyen_sign_body(auth.to_string().as_bytes())
        .expect("sign");
    let reply = app.post_raw("adyen", &[], forged).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.json);
}

/// Braintree: a form whose `bt_payload` (base64 XML) is signed in `bt_signature`. A notification signed by
/// Braintree's own SDK pays its registered order, and again is a duplicate; a dispute that arrives before its
/// payment waits for it and then disputes the order; another private key or another public key is refused.
#[tokio::test]
async fn braintree_notifications_pay_and_dispute_orders_and_other_keys_are_refused() {
    use crate::helpers::{BRAINTREE_SECRET, event};
    use payhook_core::event::OrderAction::{Dispute, Pay};
    let app = TestApp::spawn().await;
    let form = [("content-type".to_owned(), "application/x-www-form-urlencoded".to_owned())];
    let answer = |reply: Reply| (reply.status, reply.json["status"].as_str().map(str::to_owned), reply.json);

    // Signed by the braintree npm SDK with the test key pair; it settles 19.99 EUR for ord_1042.
    let payload = include_str!("../../../payhook-verify/tests/data/braintree/transaction_settled.payload");
    let settled = format!(
        "bt_signature=payhook_public_key%7C183e7777ded8c8a877940354962b4e837881e541&bt_payload={}",
        payload.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D").replace('\n', "%0A")
    );
    app.register_order("ord_1042", 1_999, "eur").await;
    let (status, outcome, json) = answer(app.post_raw("braintree", &form, settled.clone()).await);
    assert_eq!((status, outcome.as_deref()), (StatusCode::OK, Some("processed")), "{json}");
    assert_eq!(json["event_id"], "transaction_settled:txn_8m3:1796378400");
    let (status, outcome, json) = answer(app.post_raw("braintree", &form, settled).await);
    assert_eq!((status, outcome.as_deref()), (StatusCode::OK, Some("duplicate")), "{json}");
    assert_eq!(app.order("ord_1042").await["status"], "paid");
    assert_eq!(app.receipts("ord_1042").await, 1);

    // The dispute first: it waits for the payment, which the worker's next pass lets it follow.
    let signer = verifier("braintree", BRAINTREE_SECRET);
    let signed = |e| signer.braintree_sign_body(&app.encode("braintree", &e)).expect("sign");
    app.register_order("ord_bt_2", 2_500, "usd").await;
    let dispute = signed(event("dsp_7", Dispute, "ord_bt_2", 2_500));
    let (status, outcome, json) = answer(app.post_raw("braintree", &form, dispute).await);
    assert_eq!((status, outcome.as_deref()), (StatusCode::OK, Some("deferred")), "{json}");
    let (status, outcome, json) =
        answer(app.post_raw("braintree", &form, signed(event("txn_7", Pay, "ord_bt_2", 2_500))).await);
    assert_eq!((status, outcome.as_deref()), (StatusCode::OK, Some("processed")), "{json}");
    app.running.worker.run_until_idle(app.clock.now_ms() + 3_600_000).await.expect("worker pass");
    assert_eq!(app.order("ord_bt_2").await["status"], "disputed");
    assert_eq!(outbox_count(&app, "order.disputed").await, 1);

    // Another private key under the configured public key, or a public key payhook does not know.
    for keys in ["payhook_public_key:not_the_private_key", "other_public_key:payhook_private_key"] {
        let forged = verifier("braintree", keys)
            .braintree_sign_body(&app.encode("braintree", &event("txn_8", Pay, "ord_bt_3", 100)))
            .expect("sign");
        let reply = app.post_raw("braintree", &form, forged).await;
        assert_eq!(
            (reply.status, reply.json["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("mismatch")),
            "{keys}"
        );
    }
}

/// GitHub's scheme (`X-Hub-Signature-256: sha256=…`) verifies; the wrong secret does not.
#[tokio::test]
async fn github_signed_deliveries_verify_and_forgeries_do_not() {
    let app = TestApp::spawn().await;
    let body = json!({"id": "evt_gh", "type": "ping", "created": now_secs(), "data": {}});
    let (status, text) = deliver(&app, "github", &body, &[]).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let bytes = body.to_string().into_bytes();
    let forged = verifier("github", "not-the-secret").sign(&bytes, now_secs(), "d1");
    let reply = app.post_raw("github", &forged, bytes).await;
    assert_eq!((reply.status, reply.json["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("mismatch")));
}

/// RFC 9421: a signed request verifies (method, authority, path and Content-Digest covered); the same request
/// again is a redelivery; the same signature and nonce on another body is refused as a replay.
#[tokio::test]
async fn http_message_signatures_verify_and_a_reused_nonce_is_refused() {
    let app = TestApp::spawn().await;
    let authority = app.addr.to_string();
    let sign = |body: &[u8], nonce: &str| {
        let parts = RequestParts {
            method: "POST",
            scheme: "http",
            authority: &authority,
            path: "/webhooks/signed",
            query: None,
            headers: &[("content-type", "application/json")],
        };
        let mut headers =
            verifier("signed", crate::helpers::SIGNED_SECRET).sign_request(&parts, body, now_secs(), Some(nonce));
        headers.push(("content-type".into(), "application/json".into()));
        headers
    };
    let body = json!({"id": "evt_sig", "type": "ping", "created": now_secs(), "data": {}}).to_string().into_bytes();
    let headers = sign(&body, "nonce-1");
    let first = app.post_raw("signed", &headers, body.clone()).await;
    assert_eq!((first.status, first.json["status"].as_str()), (StatusCode::OK, Some("ignored")), "{}", first.json);
    let again = app.post_raw("signed", &headers, body.clone()).await;
    assert_eq!((again.status, again.json["status"].as_str()), (StatusCode::OK, Some("duplicate")), "{}", again.json);

    // Another body under the same signature fails its Content-Digest; a fresh signature reusing the nonce is a
    // replay.
    let other = json!({"id": "evt_sig2", "type": "ping", "created": now_secs(), "data": {}}).to_string().into_bytes();
    let tampered = app.post_raw("signed", &headers, other.clone()).await;
    assert_eq!(tampered.status, StatusCode::UNAUTHORIZED, "{}", tampered.json);
    let replayed = app.post_raw("signed", &sign(&other, "nonce-1"), other.clone()).await;
    assert_eq!((replayed.status, replayed.json["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("replayed")));
    assert!(app.event("signed", "evt_sig2").await.is_none(), "a replay stores nothing");
    let fresh = app.post_raw("signed", &sign(&other, "nonce-2"), other).await;
    assert_eq!(fresh.status, StatusCode::OK, "{}", fresh.json);
}

/// RFC 9421: a valid signature that covers only `Content-Digest` is not tied to this endpoint, so the default
/// required components refuse it: 401 `insufficient_coverage`, counted under that reason, nothing stored; the same
/// request signed over the defaults is accepted.
#[tokio::test]
async fn an_http_message_signature_covering_only_the_body_is_refused_as_insufficient_coverage() {
    use payhook_core::signature::{Encoding, HmacAlgorithm, Scheme, Secret, Verifier};
    use payhook_core::signature::{content_digest, parse_signature_input, signature_base};
    let app = TestApp::spawn().await;
    let authority = app.addr.to_string();
    let body = json!({"id": "evt_cov", "type": "ping", "created": now_secs(), "data": {}}).to_string().into_bytes();
    let digest = content_digest(&body);
    let input_header = format!("sig1=(\"content-digest\");created={};keyid=\"payhook-test\"", now_secs());
    let headers = [("content-type", "application/json"), ("content-digest", digest.as_str())];
    let parts = RequestParts {
        method: "POST",
        scheme: "http",
        authority: &authority,
        path: "/webhooks/signed",
        query: None,
        headers: &headers,
    };
    let input = parse_signature_input(&input_header).unwrap().remove(0);
    let base = signature_base(&input, &parts).unwrap();
    // HMAC-SHA256 of the signature base under the source's key (SIGNED_SECRET's base64 decodes to this text).
    let mac = Scheme::Hmac {
        header: "x-mac".into(),
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Base64,
        prefix: None,
    };
    let mac = Verifier::new(mac, &[Secret::new("secret-key-of-the-provider-0123456789")], 300).unwrap();
    let signature = mac.sign(base.as_bytes(), 0, "").remove(0).1;
    let mut sent: Vec<(String, String)> = headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    sent.push(("signature-input".into(), input_header));
    sent.push(("signature".into(), format!("sig1=:{signature}:")));
    let lax = verifier("signed", crate::helpers::SIGNED_SECRET).with_required_components(["content-digest"]).unwrap();
    assert!(lax.verify(&RequestParts { headers: &headers_of(&sent), ..parts }, &body, now_secs()).is_ok(), "valid");

    let refused = app.post_raw("signed", &sent, body.clone()).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.json);
    assert_eq!(refused.json["error"], "insufficient_coverage", "{}", refused.json);
    assert!(
        refused.json["message"].as_str().is_some_and(|m| m.contains("@method @authority @path")),
        "{}",
        refused.json
    );
    assert!(app.event("signed", "evt_cov").await.is_none(), "nothing is stored");
    let (_, metrics) = app.get_text_authorized("/metrics").await;
    let line = r#"payhook_verification_failures_total{source="signed",reason="insufficient_coverage"} 1"#;
    assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");

    let parts = RequestParts { headers: &[("content-type", "application/json")], ..parts };
    let mut signed = verifier("signed", crate::helpers::SIGNED_SECRET).sign_request(&parts, &body, now_secs(), None);
    signed.push(("content-type".into(), "application/json".into()));
    let accepted = app.post_raw("signed", &signed, body).await;
    assert_eq!(
        (accepted.status, accepted.json["status"].as_str()),
        (StatusCode::OK, Some("ignored")),
        "{}",
        accepted.json
    );
}

fn headers_of(owned: &[(String, String)]) -> Vec<(&str, &str)> {
    owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}
