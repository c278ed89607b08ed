//! The example service end to end in-process: deliveries made with `Webhook::example` (signed as the providers
//! sign) are recorded once, retries are answered `duplicate`, forgeries 401. The same service against deliveries
//! signed by the providers' own SDKs is in the interop suite (`crates/payhook/tests/it/interop_crate.rs`).

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use axum_receiver::{Db, app};
use payhook_verify::{SignedRequest, Webhook};
use tower::ServiceExt as _;

const STRIPE_SECRET: &str = "whsec_receiver_test";
const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn webhooks() -> (Webhook, Webhook) {
    let stripe = Webhook::preset("stripe", [STRIPE_SECRET]).expect("valid");
    let standard = Webhook::preset("standard-webhooks", [STANDARD_SECRET]).expect("valid");
    (stripe, standard)
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs() as i64
}

async fn post(app: &axum::Router, sent: &SignedRequest, body: &[u8]) -> (StatusCode, serde_json::Value) {
    let mut request = Request::post(&sent.target);
    for (name, value) in &sent.headers {
        request = request.header(name, value);
    }
    let response = app.clone().oneshot(request.body(Body::from(body.to_vec())).expect("a request")).await;
    let response = response.expect("infallible");
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX).await.expect("a body");
    (status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
}

#[tokio::test]
async fn each_providers_delivery_is_processed_once_and_its_retry_is_a_duplicate() {
    let (stripe, standard) = webhooks();
    let db = Db::open(":memory:").expect("a database");
    let app = app(stripe.clone(), standard.clone(), db.clone());
    for (provider, webhook, path) in
        [("stripe", &stripe, "/webhooks/stripe"), ("standard-webhooks", &standard, "/webhooks/standard")]
    {
        let url = format!("https://receiver.example{path}");
        let sent = webhook.example("pay", "ord_1", &url, now()).expect("an example");
        let (status, first) = post(&app, &sent, &sent.body).await;
        assert_eq!((status, first["status"].as_str()), (StatusCode::OK, Some("processed")), "{provider}: {first}");
        let (status, again) = post(&app, &sent, &sent.body).await;
        assert_eq!((status, again["status"].as_str()), (StatusCode::OK, Some("duplicate")), "{provider}: {again}");
        assert_eq!(again["event_id"], first["event_id"]);
        assert_eq!(db.count(provider).expect("a count"), 1);
    }
}

#[tokio::test]
async fn a_forged_delivery_is_answered_401_and_recorded_nowhere() {
    let (stripe, standard) = webhooks();
    let db = Db::open(":memory:").expect("a database");
    let app = app(stripe.clone(), standard, db.clone());
    let sent = stripe.example("pay", "ord_1", "https://receiver.example/webhooks/stripe", now()).expect("an example");
    let forged = String::from_utf8_lossy(&sent.body).replace("1999", "1");
    let (status, answer) = post(&app, &sent, forged.as_bytes()).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("mismatch")), "{answer}");
    // Stripe's signature on the Standard Webhooks route: another provider's scheme, refused too.
    let mut elsewhere = sent.clone();
    elsewhere.target = "/webhooks/standard".to_owned();
    let (status, answer) = post(&app, &elsewhere, &sent.body).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("missing_header")), "{answer}");
    assert_eq!(db.count("stripe").expect("a count") + db.count("standard-webhooks").expect("a count"), 0);
}
