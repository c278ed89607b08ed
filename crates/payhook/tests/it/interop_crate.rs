//! payhook-verify, the crate, against the providers' own SDKs (`interop/`, run with Node), as `interop.rs` holds
//! the server to them:
//!
//! - What the crate signs (`Webhook::example`, every example event of every provider whose SDK verifies), the
//!   provider's SDK accepts, and refuses once one signed byte changed or with another secret.
//! - What the provider's SDK signs, `Webhook::verify` accepts, and refuses when the SDK signed with another secret.
//! - The example service (`examples/axum-receiver`) records each Stripe and Standard Webhooks delivery the SDKs sign
//!   once, answers its retry `duplicate`, and refuses one signed with another secret.
//!
//! Skipped, or failed under `PAYHOOK_TEST_INTEROP=1`, like the rest of the interop suite.

use crate::interop::{
    ORDER, Provider, SIGNED_BY_SDK, Script, VERIFIED_BY_SDK, change_one_digit, events, interop_dir, provider,
    verify_question, with_sdk_signature,
};
use payhook_verify::{SignedRequest, Webhook};
use reqwest::StatusCode;
use serde_json::{Map, Value, json};

/// The crate's webhook for a provider of the interop table, with `secret`.
fn webhook(p: &Provider, secret: &str) -> Webhook {
    let mut builder = Webhook::builder(p.sdk).unwrap_or_else(|e| panic!("{}: {e}", p.sdk)).secret(secret);
    if let Some(url) = p.notification_url {
        builder = builder.notification_url(url);
    }
    builder.build().unwrap_or_else(|e| panic!("{}: {e}", p.sdk))
}

fn url(p: &Provider) -> String {
    format!("https://shop.example.com/webhooks/{}", p.source)
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs() as i64
}

/// A signed request as the JSON `verify.mjs` and `with_sdk_signature` read: `{"url", "headers", "body"}`.
fn as_json(sent: &SignedRequest) -> Value {
    let headers: Map<String, Value> = sent.headers.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
    json!({
        "url": format!("https://shop.example.com{}", sent.target),
        "headers": headers,
        "body": String::from_utf8(sent.body.clone()).expect("a UTF-8 body"),
    })
}

/// The request re-signed by the provider's SDK with `secret`: its headers, and its body (Braintree's carries the
/// signature).
fn signed_by_sdk(
    sign: &mut Script,
    p: &Provider,
    sent: &SignedRequest,
    secret: &str,
) -> (Vec<(String, String)>, String) {
    let delivery = as_json(sent);
    let body = delivery["body"].as_str().expect("body").to_owned();
    let signed = sign.ask(&json!({ "provider": p.sdk, "secret": secret, "body": body }));
    let sent_body = signed["body"].as_str().map_or(body, str::to_owned);
    (with_sdk_signature(&delivery, &signed), sent_body)
}

#[test]
fn what_payhook_verify_signs_the_providers_sdks_accept_and_a_changed_byte_they_refuse() {
    let Some(interop) = interop_dir() else { return };
    let mut verify = Script::start(&interop, "verify.mjs");
    let mut failures = Vec::new();
    let mut checked = 0;
    for p in &VERIFIED_BY_SDK {
        let webhook = webhook(p, p.secret);
        for event in events(p) {
            let context = format!("{} {event}", p.sdk);
            let Some(sent) = webhook.example(&event, ORDER, &url(p), now()) else {
                failures.push(format!("{context}: Webhook::example made nothing"));
                continue;
            };
            let delivery = as_json(&sent);
            let answer = verify.ask(&verify_question(p, &delivery, p.secret));
            if answer["valid"] != true {
                failures.push(format!("{context}: the SDK refused the crate's signature: {answer}\n  {delivery}"));
                continue;
            }
            let mut tampered = delivery.clone();
            if p.sdk == "mercado-pago" {
                let url = delivery["url"].as_str().expect("url");
                tampered["url"] = change_one_digit(url, url.find("data.id=").expect("data.id")).into();
            } else {
                tampered["body"] = change_one_digit(delivery["body"].as_str().expect("body"), 0).into();
            }
            if verify.ask(&verify_question(p, &tampered, p.secret))["valid"] != false {
                failures.push(format!("{context}: the SDK accepted a changed byte"));
            }
            if verify.ask(&verify_question(p, &delivery, p.other_secret))["valid"] != false {
                failures.push(format!("{context}: the SDK accepted the signature with another secret"));
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{} of {checked} deliveries disagree:\n{}", failures.len(), failures.join("\n"));
    println!("{checked} deliveries signed by payhook-verify, verified by the providers' SDKs");
}

#[test]
fn what_the_providers_sdks_sign_payhook_verify_accepts_and_another_secret_it_refuses() {
    let Some(interop) = interop_dir() else { return };
    let mut sign = Script::start(&interop, "sign.mjs");
    let mut failures = Vec::new();
    let mut checked = 0;
    for sdk in SIGNED_BY_SDK {
        let p = provider(sdk);
        let webhook = webhook(p, p.secret);
        for event in events(p) {
            let context = format!("{sdk} {event}");
            let sent = webhook.example(&event, ORDER, &url(p), now()).expect("an example");
            let (headers, body) = signed_by_sdk(&mut sign, p, &sent, p.secret);
            match webhook.verify("POST", &sent.target, &headers, body.as_bytes()) {
                Ok(delivery) if delivery.event().event_id.as_str().is_empty() => {
                    failures.push(format!("{context}: an event without an id"));
                }
                Ok(_) => {}
                Err(e) => failures.push(format!("{context}: refused what the SDK signed: {e}\n  {headers:?}")),
            }
            let (headers, body) = signed_by_sdk(&mut sign, p, &sent, p.other_secret);
            match webhook.verify("POST", &sent.target, &headers, body.as_bytes()) {
                Err(e) if e.status() == 401 => {}
                other => failures.push(format!("{context}: signed with another secret: {other:?}")),
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{} of {checked} deliveries disagree:\n{}", failures.len(), failures.join("\n"));
    println!("{checked} deliveries signed by the providers' SDKs, verified by payhook-verify");
}

#[tokio::test]
async fn the_example_service_records_what_the_sdks_sign_once_and_refuses_another_secret() {
    let Some(interop) = interop_dir() else { return };
    let (stripe, standard) = (provider("stripe"), provider("standard-webhooks"));
    let db = axum_receiver::Db::open(":memory:").expect("a database");
    let app = axum_receiver::app(webhook(stripe, stripe.secret), webhook(standard, standard.secret), db.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let base = format!("http://{}", listener.local_addr().expect("an address"));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let mut sign = Script::start(&interop, "sign.mjs");
    let post = async |path: &str, headers: &[(String, String)], body: String| {
        let mut request = client.post(format!("{base}{path}")).body(body);
        for (name, value) in headers.iter().filter(|(name, _)| !name.eq_ignore_ascii_case("host")) {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("an answer");
        (response.status(), response.json::<Value>().await.unwrap_or(Value::Null))
    };
    for (p, path, table) in
        [(stripe, "/webhooks/stripe", "stripe"), (standard, "/webhooks/standard", "standard-webhooks")]
    {
        let events = events(p);
        for event in &events {
            let context = format!("{} {event}", p.sdk);
            let sent = webhook(p, p.secret).example(event, ORDER, &url(p), now()).expect("an example");
            let (headers, body) = signed_by_sdk(&mut sign, p, &sent, p.secret);
            let (status, first) = post(path, &headers, body.clone()).await;
            assert_eq!((status, first["status"].as_str()), (StatusCode::OK, Some("processed")), "{context}: {first}");
            let (status, again) = post(path, &headers, body).await;
            assert_eq!((status, again["status"].as_str()), (StatusCode::OK, Some("duplicate")), "{context}: {again}");
            let (headers, body) = signed_by_sdk(&mut sign, p, &sent, p.other_secret);
            let (status, refused) = post(path, &headers, body).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{context}: {refused}");
        }
        assert_eq!(db.count(table).expect("a count"), events.len() as i64, "{}", p.sdk);
    }
    server.abort();
}
