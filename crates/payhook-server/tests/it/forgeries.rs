//! The attacks on effect-driving fields, replayed from outside with nothing but what a provider sends and what an
//! operator can see: no unsigned byte decides which order is paid, refunded or failed.
//!
//! Mercado Pago signs the resource id, a request id and the time, not the body, so its source reads each order from
//! Mercado Pago's API (`confirm = "api"`), here a local server that speaks the documented request and answer of
//! `GET /v1/orders/{id}`. Shopify signs the body but not the topic header, which its body must confirm.

use crate::helpers::{TestApp, now_secs, read_json};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use payhook_core::event::{OrderAction, SourceName};
use payhook_core::format::Outgoing;
use payhook_core::preset::{Preset, test_secret};
use payhook_core::signature::{Secret, Verifier};
use payhook_server::SourceSettings;
use payhook_server::settings::{ConfirmSettings, Orders};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const ACCESS_TOKEN: &str = "APP_USR-1234567890-test-access-token";

/// Mercado Pago's Orders API as far as payhook asks it: `GET /v1/orders/{id}` with the access token.
#[derive(Clone, Default)]
struct OrdersApi {
    orders: Arc<Mutex<HashMap<String, Value>>>,
    /// Answer this status instead (the API failing).
    failing: Arc<Mutex<Option<u16>>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl OrdersApi {
    async fn start() -> (Self, String) {
        let api = Self::default();
        let app = axum::Router::new().route("/v1/orders/{id}", axum::routing::get(get_order)).with_state(api.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (api, base)
    }

    /// The order `id` as the API answers it: Mercado Pago's documented shape.
    fn set(&self, id: &str, external_reference: &str, status: &str, updated: &str) {
        let order = json!({
            "id": id, "processing_mode": "automatic", "external_reference": external_reference,
            "total_amount": "19.99", "user_id": "12345", "created_date": "2026-12-01T10:00:00.000Z",
            "last_updated_date": updated, "country_code": "AR", "type": "online", "status": status,
            "status_detail": "accredited", "capture_mode": "automatic_async", "total_paid_amount": "19.99",
            "transactions": {"payments": [{"id": "PAY01J67CQQH5904WDBVZEM4JMEP3", "amount": "19.99",
                "paid_amount": "19.99", "status": status, "status_detail": "accredited"}]},
        });
        self.orders.lock().expect("lock").insert(id.to_owned(), order);
    }
}

async fn get_order(State(api): State<OrdersApi>, Path(id): Path<String>, headers: HeaderMap) -> (AxumStatus, String) {
    api.asked.lock().expect("lock").push(id.clone());
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {ACCESS_TOKEN}")) {
        return (AxumStatus::UNAUTHORIZED, json!({"error": "unauthorized"}).to_string());
    }
    if let Some(status) = *api.failing.lock().expect("lock") {
        return (AxumStatus::from_u16(status).expect("a status"), json!({"error": "internal_error"}).to_string());
    }
    match api.orders.lock().expect("lock").get(&id) {
        Some(order) => (AxumStatus::OK, order.to_string()),
        None => (AxumStatus::NOT_FOUND, json!({"error": "order_not_found"}).to_string()),
    }
}

fn mercado_pago_source(base_url: &str) -> SourceSettings {
    let preset = Preset::get("mercado-pago").expect("a preset").expect("parses");
    let scheme = preset.scheme(None).expect("compiles").expect("a rule");
    let secret = test_secret(preset.signature.as_ref().expect("a rule"));
    SourceSettings {
        name: SourceName::parse("mercado-pago").expect("a name"),
        verifier: Verifier::new(scheme, &[Secret::new(secret)], 300).expect("the test key"),
        format: preset.format().expect("compiles").expect("a format"),
        forward: Vec::new(),
        orders: Orders::Registered,
        confirm: Some(ConfirmSettings {
            confirm: Arc::new(preset.confirm().expect("compiles").expect("a [confirm]")),
            base_url: base_url.to_owned(),
            token: Secret::new(ACCESS_TOKEN),
            timeout_ms: 2_000,
            max_in_flight: 4,
        }),
    }
}

/// A Mercado Pago order notification as Mercado Pago sends it: `?data.id=…&type=order`, `x-request-id`, and the
/// `x-signature` over the manifest; the body names the order and what happened, unsigned.
fn notification(app: &TestApp, id: &str, action: &str, external_reference: &str, request_id: &str) -> Notification {
    let body = json!({
        "action": action, "api_version": "v1", "application_id": "7361890473820947",
        "data": {"external_reference": external_reference, "id": id, "status": "processed",
                 "status_detail": "accredited", "total_paid_amount": "19.99", "type": "online", "version": 2},
        "date_created": "2026-12-01T10:00:00Z", "live_mode": false, "type": "order", "user_id": "3209222310",
    })
    .to_string()
    .into_bytes();
    let source = app.settings.sources.iter().find(|s| s.name.as_str() == "mercado-pago").expect("the source");
    let mut url = reqwest::Url::parse(&app.url("/webhooks/mercado-pago")).expect("a URL");
    url.set_query(Some(&format!("data.id={id}&type=order")));
    let headers = vec![("x-request-id".to_owned(), request_id.to_owned())];
    let signed = source.sign_request(url, body, headers, now_secs(), request_id).expect("signs");
    Notification { url: signed.url, headers: signed.headers, body: signed.body }
}

#[derive(Clone)]
struct Notification {
    url: reqwest::Url,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn post(app: &TestApp, n: &Notification) -> (StatusCode, Value) {
    let reply = post_reply(app, n).await;
    (reply.status, reply.json)
}

async fn post_reply(app: &TestApp, n: &Notification) -> crate::helpers::Reply {
    let mut req = app.client.post(n.url.clone()).body(n.body.clone());
    for (name, value) in &n.headers {
        req = req.header(name.as_str(), value.as_str());
    }
    read_json(req.send().await.expect("POST")).await
}

/// `headers` with `name`'s value replaced.
fn replaced(headers: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    headers.iter().map(|(k, v)| (k.clone(), if k == name { value.to_owned() } else { v.clone() })).collect()
}

/// A paid Shopify order's delivery, delivered: its headers (signed) and body.
async fn shopify_paid(app: &TestApp, event_id: &str, order: &str) -> (Vec<(String, String)>, Vec<u8>) {
    app.register_order(order, 1999, "usd").await;
    let paid: Outgoing<'_> = crate::helpers::event(event_id, OrderAction::Pay, order, 1999);
    let body = app.encode("shopify", &paid);
    let mut headers = payhook_core::format::Format::Shopify.encode_headers(&paid);
    headers.extend(app.sign("shopify", &body, now_secs()));
    (headers, body)
}

/// The body of `n` with its JSON changed by `edit`, the headers (and so the signature) kept.
fn with_body(n: &Notification, edit: impl FnOnce(&mut Value)) -> Notification {
    let mut body: Value = serde_json::from_slice(&n.body).expect("JSON");
    edit(&mut body);
    Notification { body: body.to_string().into_bytes(), ..n.clone() }
}

async fn mercado_pago_app() -> (TestApp, OrdersApi) {
    let (api, base) = OrdersApi::start().await;
    let app = TestApp::spawn_with(|settings, _| settings.sources.push(mercado_pago_source(&base))).await;
    for order in ["ord_mp_1", "ord_mp_2"] {
        let (status, answer) = app.register_order(order, 1999, "ars").await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    (app, api)
}

#[tokio::test]
async fn a_captured_mercado_pago_signature_pays_no_other_order() {
    let (app, api) = mercado_pago_app().await;
    api.set("ORD01JQ4S4KY8HWQ6NA5PXB65B3D3", "ord_mp_1", "processed", "2026-12-01T10:00:05.000Z");
    let real = notification(&app, "ORD01JQ4S4KY8HWQ6NA5PXB65B3D3", "order.processed", "ord_mp_1", "req-1");
    let (status, answer) = post(&app, &real).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("processed")), "{answer}");
    assert_eq!(app.order("ord_mp_1").await["status"], "paid");
    assert_eq!(api.asked.lock().expect("lock").as_slice(), ["ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"]);

    // The attack: the real delivery's headers, the body pointed at another registered order.
    let other_order = with_body(&real, |b| b["data"]["external_reference"] = json!("ord_mp_2"));
    let (status, answer) = post(&app, &other_order).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("replayed")), "{answer}");
    // The body's data.id changed too: it no longer repeats the signed one.
    let other_id = with_body(&other_order, |b| b["data"]["id"] = json!("ORD01OTHER"));
    let (status, answer) = post(&app, &other_id).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("body_mismatch")), "{answer}");
    // A fresh, validly signed notification about the same order whose unsigned body says another order and a
    // refund: the effect is what the API says about the signed id (paid, ord_mp_1), a duplicate of the first.
    let lying = notification(&app, "ORD01JQ4S4KY8HWQ6NA5PXB65B3D3", "order.refunded", "ord_mp_2", "req-2");
    let (status, answer) = post(&app, &lying).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("duplicate")), "{answer}");
    assert_eq!(app.order("ord_mp_1").await["status"], "paid");
    assert_eq!(app.order("ord_mp_2").await["status"], "pending", "no unsigned byte paid another order");

    // When Mercado Pago says the order was refunded, it is refunded: the provider's word, not the body's.
    api.set("ORD01JQ4S4KY8HWQ6NA5PXB65B3D3", "ord_mp_1", "refunded", "2026-12-01T11:00:00.000Z");
    let refund = notification(&app, "ORD01JQ4S4KY8HWQ6NA5PXB65B3D3", "order.processed", "ord_mp_2", "req-3");
    let (status, answer) = post(&app, &refund).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("processed")), "{answer}");
    assert_eq!(app.order("ord_mp_1").await["status"], "refunded");
    assert_eq!(app.order("ord_mp_2").await["status"], "pending");

    // What is stored is the API's answer, and the event says where it came from.
    let events = app.api_get("/v1/events?source=mercado-pago").await.json;
    let first = &events["events"].as_array().expect("events")[0];
    let shown = app.api_get(&format!("/v1/events/mercado-pago/{}", first["event_id"].as_str().expect("id"))).await;
    let shown = shown.json.to_string();
    assert!(shown.contains("confirmed by GET"), "{shown}");
}

#[tokio::test]
async fn a_mercado_pago_delivery_the_api_cannot_confirm_is_retried_by_the_provider_and_an_unknown_one_kept() {
    let (app, api) = mercado_pago_app().await;
    api.set("ORD01FAILING0000000000000000", "ord_mp_1", "processed", "2026-12-01T10:00:05.000Z");
    *api.failing.lock().expect("lock") = Some(500);
    let n = notification(&app, "ORD01FAILING0000000000000000", "order.processed", "ord_mp_1", "req-10");
    let inbox = app.inbox_rows().await;
    let reply = post_reply(&app, &n).await;
    assert_eq!((reply.status, reply.json["error"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("unconfirmed")));
    assert_eq!(reply.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(app.inbox_rows().await, inbox, "nothing is recorded before the provider's answer");
    // The provider's retry, once the API answers, is applied.
    *api.failing.lock().expect("lock") = None;
    let (status, answer) = post(&app, &n).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("processed")), "{answer}");
    assert_eq!(app.order("ord_mp_1").await["status"], "paid");

    // An order the API does not know is kept as a dead letter (verified: payhook owns it), with no effect.
    let unknown = notification(&app, "ORD01UNKNOWN0000000000000000", "order.processed", "ord_mp_2", "req-11");
    let (status, answer) = post(&app, &unknown).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("dead_lettered")), "{answer}");
    assert_eq!(app.order("ord_mp_2").await["status"], "pending");
    let metrics = app.get_text_authorized("/metrics").await.1;
    for line in [
        "payhook_confirmations_total{source=\"mercado-pago\",outcome=\"answered\"} 1",
        "payhook_confirmations_total{source=\"mercado-pago\",outcome=\"unavailable\"} 1",
        "payhook_confirmations_total{source=\"mercado-pago\",outcome=\"unreadable\"} 1",
        "payhook_confirmations_in_flight{source=\"mercado-pago\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

#[tokio::test]
async fn a_paid_shopify_order_resent_as_cancelled_under_a_new_event_id_is_not_refunded() {
    let app = TestApp::spawn().await;
    let (headers, body) = shopify_paid(&app, "evt_shop_1", "4400112233").await;
    let reply = app.post_raw("shopify", &headers, body.clone()).await;
    assert_eq!((reply.status, reply.json["status"].as_str()), (StatusCode::OK, Some("processed")), "{}", reply.json);
    assert_eq!(app.order("4400112233").await["status"], "paid");

    // The attack: the same signed body, the topic header changed and a new event id.
    let forged = replaced(&replaced(&headers, "x-shopify-topic", "orders/cancelled"), "x-shopify-event-id", "evt_x");
    let reply = app.post_raw("shopify", &forged, body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(reply.json["status"], "dead_lettered", "{}", reply.json);
    assert_eq!(app.order("4400112233").await["status"], "paid", "an unsigned header refunded nothing");
    assert_ne!(reply.json["event_id"], "evt_x", "kept under an id of its bytes, not the header's");
}

/// A forger holding a body before its real delivery sends it first under the real event id with a topic the body
/// does not confirm: the real delivery is still applied.
#[tokio::test]
async fn a_shopify_copy_sent_first_under_another_topic_does_not_make_the_real_delivery_a_duplicate() {
    let app = TestApp::spawn().await;
    let (headers, body) = shopify_paid(&app, "evt_shop_2", "4400112234").await;
    let forged = replaced(&headers, "x-shopify-topic", "orders/cancelled");
    let reply = app.post_raw("shopify", &forged, body.clone()).await;
    assert_eq!(reply.json["status"], "dead_lettered", "{}", reply.json);
    let reply = app.post_raw("shopify", &headers, body).await;
    assert_eq!(reply.json["status"], "processed", "{}", reply.json);
    assert_eq!(app.order("4400112234").await["status"], "paid");
}
