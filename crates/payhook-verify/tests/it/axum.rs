//! The `axum` feature: the extractor and the layer answer a refused delivery themselves, with its status and JSON
//! body, and hand a verified one to the handler.

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Extension, Router};
use payhook_verify::axum::{Verified, VerifyLayer};
use payhook_verify::{Delivery, SignedRequest, Webhook};
use tower::ServiceExt as _;

fn stripe() -> Webhook {
    Webhook::preset("stripe", ["whsec_test_secret"]).expect("a valid secret")
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs() as i64
}

fn signed(webhook: &Webhook) -> SignedRequest {
    webhook.example("pay", "ord_1", "https://shop.example/webhooks/stripe", now()).expect("stripe has a payment")
}

fn request(sent: &SignedRequest, body: Vec<u8>) -> Request<Body> {
    let mut request = Request::post(&sent.target);
    for (name, value) in &sent.headers {
        request = request.header(name, value);
    }
    request.body(Body::from(body)).expect("a request")
}

async fn answer(app: Router, request: Request<Body>) -> (StatusCode, String) {
    let response = app.oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX).await.expect("a body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn handler(Verified(delivery): Verified) -> String {
    delivery.event().event_id.to_string()
}

#[tokio::test]
async fn the_extractor_hands_a_verified_delivery_to_the_handler() {
    let stripe = stripe();
    let sent = signed(&stripe);
    let app = Router::new().route("/webhooks/stripe", post(handler)).with_state(stripe);
    let (status, body) = answer(app, request(&sent, sent.body.clone())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.starts_with("evt_"), "{body}");
}

#[tokio::test]
async fn the_extractor_answers_a_forged_delivery_401_with_a_json_body_before_the_handler_runs() {
    let stripe = stripe();
    let sent = signed(&stripe);
    let app = Router::new().route("/webhooks/stripe", post(handler)).with_state(stripe);
    let (status, body) = answer(app, request(&sent, b"{\"id\":\"evt_forged\"}".to_vec())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(json["error"], "mismatch", "{json}");
}

#[tokio::test]
async fn the_layer_verifies_every_route_under_it_and_keeps_the_body_as_received() {
    let stripe = stripe();
    let sent = signed(&stripe);
    async fn raw(Extension(delivery): Extension<Delivery>, body: String) -> String {
        format!("{} {}", delivery.event().event_type, body.len())
    }
    let app = Router::new().route("/webhooks/stripe", post(raw)).layer(VerifyLayer::new(stripe));
    let (status, body) = answer(app.clone(), request(&sent, sent.body.clone())).await;
    assert_eq!((status, body), (StatusCode::OK, format!("payment_intent.succeeded {}", sent.body.len())));
    let (status, body) = answer(app, request(&sent, b"{}".to_vec())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}

#[tokio::test]
async fn the_layer_answers_a_body_over_its_limit_413() {
    let stripe = stripe();
    let sent = signed(&stripe);
    let app = Router::new()
        .route("/webhooks/stripe", post(handler))
        .layer(VerifyLayer::new(stripe.clone()).body_limit_bytes(16))
        .with_state(stripe);
    let (status, body) = answer(app, request(&sent, sent.body.clone())).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body.contains("body_too_large"), "{body}");
}
