//! The `/v1` orders API.

use crate::helpers::{API_TOKEN, TestApp, read_json};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn the_api_refuses_requests_without_the_right_bearer_token() {
    let app = TestApp::spawn().await;
    let url = app.url("/v1/orders/ord_1");
    let attempts = [
        app.client.get(&url),
        app.client.get(&url).bearer_auth("wrong-token"),
        app.client.get(&url).header("authorization", API_TOKEN),
        app.client.post(app.url("/v1/orders")).body(r#"{"id":"o","amount":1,"currency":"usd"}"#),
    ];
    for req in attempts {
        let reply = read_json(req.send().await.unwrap()).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.json);
        assert_eq!(reply.json["error"], "missing_token");
        assert_eq!(reply.headers["www-authenticate"], "Bearer");
        let message = reply.json["message"].as_str().unwrap();
        assert!(message.contains("token") && !message.contains("signature"), "{message}");
    }
    assert_eq!(app.stats().await.orders, vec![]);
}

#[tokio::test]
async fn registering_an_order_is_idempotent_and_conflicts_are_reported_with_the_existing_order() {
    let app = TestApp::spawn().await;

    let (status, body) = app.register_order("ord_1", 1999, "USD").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!((&body["id"], &body["status"]), (&json!("ord_1"), &json!("pending")));
    assert_eq!((&body["amount"], &body["currency"]), (&json!(1999), &json!("usd")));

    let (status, again) = app.register_order("ord_1", 1999, "usd").await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["created_at_ms"], body["created_at_ms"]);

    let (status, conflict) = app.register_order("ord_1", 2000, "usd").await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert_eq!(conflict["error"], "conflict");
    assert_eq!(conflict["existing"], json!({"amount": 1999, "currency": "usd"}));
    let (status, conflict) = app.register_order("ord_1", 1999, "eur").await;
    assert_eq!((status, &conflict["existing"]["currency"]), (StatusCode::CONFLICT, &json!("usd")));

    let order = app.order("ord_1").await;
    assert_eq!((&order["amount"], &order["currency"]), (&json!(1999), &json!("usd")));
}

#[tokio::test]
async fn invalid_orders_get_422_and_are_not_stored() {
    let app = TestApp::spawn().await;
    let bodies = [
        json!({"id": "ord_x", "amount": 100, "currency": "dollars"}).to_string(),
        json!({"id": "ord_x", "amount": 100, "currency": "us"}).to_string(),
        json!({"id": "ord_x", "amount": -1, "currency": "usd"}).to_string(),
        json!({"id": "", "amount": 100, "currency": "usd"}).to_string(),
        json!({"id": "ord_x", "amount": 100}).to_string(),
        json!({"id": "ord_x", "amount": 100, "currency": "usd", "extra": true}).to_string(),
        json!({"id": "ord_x", "amount": "100", "currency": "usd"}).to_string(),
        r#"{"id": "ord_x", "amount": 100,"#.to_owned(),
        String::new(),
    ];
    for body in bodies {
        let reply = app.api_post("/v1/orders", body.clone()).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {}", reply.json);
        assert_eq!(reply.json["error"], "invalid_request", "{body}");
        assert!(reply.json["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    assert_eq!(app.stats().await.orders, vec![]);
}

#[tokio::test]
async fn an_unknown_order_is_a_404() {
    let app = TestApp::spawn().await;
    let reply = app.api_get("/v1/orders/ord_nope").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.json);
    assert_eq!(reply.json["error"], "not_found");
}

#[tokio::test]
async fn without_a_configured_token_the_api_is_closed_to_everyone() {
    for token in [None, Some("")] {
        let app = TestApp::spawn_with(|settings, _| {
            settings.api_token = token.map(payhook_core::signature::Secret::new);
        })
        .await;
        let requests = [
            app.client.get(app.url("/v1/orders/ord_1")),
            app.client.get(app.url("/v1/orders/ord_1")).header("authorization", "Bearer "),
            app.client.post(app.url("/v1/orders")).body(r#"{"id":"o","amount":1,"currency":"usd"}"#),
        ];
        for req in requests {
            let reply = read_json(req.send().await.unwrap()).await;
            assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "token {token:?}: {}", reply.json);
            assert_eq!(reply.json["error"], "api_disabled", "token {token:?}");
            assert_eq!(reply.headers["www-authenticate"], "Bearer");
        }
        assert_eq!(app.stats().await.orders, vec![]);
    }
}

/// JSON has one number type: `1999.0` is the integer 1999, as the OpenAPI document's `integer` says. A fraction is
/// refused, and so is an amount beyond 2^53 - 1, which a JavaScript reader of the sinks' payloads could not hold.
#[tokio::test]
async fn an_amount_is_an_integer_however_it_is_written_and_at_most_2_to_the_53_minus_1() {
    let app = TestApp::spawn().await;
    let register = |body: serde_json::Value| app.api_post("/v1/orders", body.to_string());
    assert_eq!(
        register(json!({ "id": "ord_f", "amount": 1999.0, "currency": "usd" })).await.status,
        StatusCode::CREATED
    );
    assert_eq!(app.order("ord_f").await["amount"], 1999);
    let largest = 9_007_199_254_740_991_i64;
    assert_eq!(
        register(json!({ "id": "ord_max", "amount": largest, "currency": "usd" })).await.status,
        StatusCode::CREATED
    );
    for (amount, says) in [(json!(19.99), "not an integer"), (json!(largest + 1), "out of range")] {
        let reply = register(json!({ "id": "ord_bad", "amount": amount, "currency": "usd" })).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", reply.json);
        assert!(reply.json["message"].as_str().unwrap().contains(says), "{}", reply.json);
    }
    assert_eq!(app.api_get("/v1/orders/ord_bad").await.status, StatusCode::NOT_FOUND);
}

/// An id's limit is 255 characters, as the document's `maxLength` counts them, whatever their UTF-8 length.
#[tokio::test]
async fn an_order_id_may_have_255_characters_of_any_kind_and_no_more() {
    let app = TestApp::spawn().await;
    let register =
        |id: String| app.api_post("/v1/orders", json!({ "id": id, "amount": 1, "currency": "eur" }).to_string());
    assert_eq!(register("é".repeat(255)).await.status, StatusCode::CREATED, "510 bytes, 255 characters");
    let reply = register("é".repeat(256)).await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", reply.json);
    assert!(reply.json["message"].as_str().unwrap().contains("at most 255 characters"), "{}", reply.json);
}
