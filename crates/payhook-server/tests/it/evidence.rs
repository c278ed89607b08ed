//! A delivery as evidence: the API returns its body byte for byte and every value of a repeated header in
//! order; the dashboard shows the raw bytes escaped (and re-indented on request) and every header value, except a
//! header that carries the source's secret itself, which is never stored; rows stored with the older header form
//! (an object of strings) read and replay the same way.

use crate::helpers::{TestApp, event, now_secs};
use crate::ui::login;
use base64::Engine;
use payhook_core::event::OrderAction::Pay;
use payhook_core::event::SourceName;
use payhook_core::format::Format;
use payhook_core::retry::RetryPolicy;
use payhook_core::signature::{DeclaredScheme, Scheme, Secret, SignatureSpec, Verifier};
use payhook_server::SourceSettings;
use payhook_server::now_ms;
use payhook_server::settings::Orders;
use payhook_store::Outcome;
use reqwest::StatusCode;
use reqwest::header::COOKIE;
use serde_json::{Value, json};
use std::sync::Arc;

/// A body with unusual whitespace (tabs, a CRLF, trailing spaces), its keys out of the usual order and a key
/// sent twice, as a Stripe event payhook ignores (`customer.created`).
const ODD_BODY: &str = "{\r\n  \"type\" :\"customer.created\",\t\"id\":\"evt_odd\",   \"created\": 1700000000,\n\
     \"livemode\":false,\"livemode\":true,\n\"data\":{\"object\":{\"id\":\"cus_1\",\"note\":\"first\",\"note\":\"second\"}} }  \n";

/// What maud makes of text: `&`, `<`, `>` and `"` escaped, everything else as it is.
fn maud_escaped(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A dashboard page, fetched with a session cookie.
async fn page(app: &TestApp, cookie: &str, path: &str) -> String {
    let resp = app.client.get(app.url(path)).header(COOKIE, cookie).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    let csp = resp.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
    resp.text().await.unwrap()
}

/// Posts `body` to `source` with `headers` (after the source's own signature headers) and returns the event id.
async fn post(app: &TestApp, source: &str, body: &[u8], extra: &[(&str, &str)]) -> String {
    let mut headers = app.sign(source, body, now_secs());
    headers.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let reply = app.post_raw(source, &headers, body.to_vec()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    reply.json["event_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_delivery_is_shown_byte_for_byte_with_every_value_of_a_repeated_header_in_order() {
    let app = TestApp::spawn().await;
    // Two Stripe-Signature lines: the first is the real one, the second a stale leftover a proxy might add.
    let signed = app.sign("stripe", ODD_BODY.as_bytes(), now_secs());
    let first = signed[0].1.clone();
    let second = "t=1,v1=0000000000000000000000000000000000000000000000000000000000000000";
    let headers = vec![
        ("Stripe-Signature".to_owned(), first.clone()),
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Stripe-Signature".to_owned(), second.to_owned()),
    ];
    let reply = app.post_raw("stripe", &headers, ODD_BODY).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("ignored")), "{}", reply.json);

    // The API: the exact bytes, both signature values in arrival order.
    let d = app.api_get("/v1/events/stripe/evt_odd").await.json;
    assert_eq!(d["body"].as_str().map(str::as_bytes), Some(ODD_BODY.as_bytes()), "{d}");
    assert_eq!((&d["body_base64"], &d["body_encoding"]), (&Value::Null, &json!("utf8")), "{d}");
    assert_eq!(d["headers"]["stripe-signature"], json!([first, second]), "{d}");
    assert_eq!(d["headers"]["content-type"], json!(["application/json"]), "{d}");
    assert!(d["verification"].as_str().unwrap().starts_with("stripe (secret #0)"), "{d}");

    // The dashboard: the raw text escaped and spaced as sent, both header values in order.
    let session = login(&app).await;
    let raw_page = page(&app, &session.cookie, "/ui/events/stripe/evt_odd").await;
    // The carriage return is shown as a byte; everything else exactly as sent.
    let shown = maud_escaped(ODD_BODY).replace('\r', "<span class=\"byte\" title=\"a control character\">\\x0d</span>");
    assert!(raw_page.contains(&format!("<pre id=\"raw-body\">{shown}</pre>")), "{raw_page}");
    assert!(raw_page.contains("&quot;note&quot;:&quot;first&quot;,&quot;note&quot;:&quot;second&quot;"), "{raw_page}");
    let at = |needle: &str| raw_page.find(needle).unwrap_or_else(|| panic!("{needle:?} not shown:\n{raw_page}"));
    assert!(at(&first) < at(second), "the signatures are shown in arrival order");
    assert!(raw_page.contains("stripe-signature<span class=\"muted\"> (1 of 2)</span>"), "{raw_page}");
    assert!(raw_page.contains("stripe-signature<span class=\"muted\"> (2 of 2)</span>"), "{raw_page}");

    // The pretty view re-indents, keeping the key order and both duplicates.
    let pretty_page = page(&app, &session.cookie, "/ui/events/stripe/evt_odd?view=pretty").await;
    assert!(!pretty_page.contains("id=\"raw-body\""), "{pretty_page}");
    let pretty = "{\n  &quot;type&quot;: &quot;customer.created&quot;,\n  &quot;id&quot;: &quot;evt_odd&quot;,\n  \
                  &quot;created&quot;: 1700000000,\n  &quot;livemode&quot;: false,\n  &quot;livemode&quot;: true,\n  \
                  &quot;data&quot;: {\n    &quot;object&quot;: {\n      &quot;id&quot;: &quot;cus_1&quot;,\n      \
                  &quot;note&quot;: &quot;first&quot;,\n      &quot;note&quot;: &quot;second&quot;\n    }\n  }\n}";
    assert!(pretty_page.contains(&format!("<pre id=\"pretty-body\">{pretty}</pre>")), "{pretty_page}");
    assert!(pretty_page.contains("href=\"/ui/events/stripe/evt_odd\" id=\"body-raw\""), "{pretty_page}");
    assert!(raw_page.contains("href=\"/ui/events/stripe/evt_odd?view=pretty\" id=\"body-pretty\""), "{raw_page}");
    let refused = app.client.get(app.url("/ui/events/stripe/evt_odd?view=fancy")).header(COOKIE, &session.cookie);
    assert_eq!(refused.send().await.unwrap().status(), StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn markup_in_a_body_or_a_header_is_shown_as_text_and_never_runs() {
    let app = TestApp::spawn().await;
    let body = br#"{"id":"evt_xss","type":"note</pre><script>alert(1)</script>","created":1,"data":{"object":{}}}"#;
    let evil = "<img src=x onerror=alert(2)>";
    post(&app, "stripe", body, &[("x-note", evil)]).await;
    let session = login(&app).await;
    for path in ["/ui/events/stripe/evt_xss", "/ui/events/stripe/evt_xss?view=pretty"] {
        let html = page(&app, &session.cookie, path).await;
        assert!(
            !html.contains("<script") && !html.contains("<img"),
            "{path} carries markup from the delivery:\n{html}"
        );
        assert!(html.contains("&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), "{path}:\n{html}");
        assert!(html.contains("&lt;img src=x onerror=alert(2)&gt;"), "{path}:\n{html}");
    }
}

/// A source that authenticates its deliveries by sending `secret` itself in `verif-hash` (Flutterwave's legacy
/// rule), declared as a `shared-secret` `[signature]` table.
fn shared_secret_source(name: &str, secret: &str) -> SourceSettings {
    let spec: SignatureSpec =
        serde_json::from_value(json!({ "header": "verif-hash", "algorithm": "shared-secret" })).expect("a rule");
    let scheme = DeclaredScheme::new("declared", spec, None).expect("a usable rule");
    SourceSettings {
        name: SourceName::parse(name).unwrap(),
        verifier: Verifier::new(Scheme::Declared(Arc::new(scheme)), &[Secret::new(secret)], 300).unwrap(),
        format: Format::Generic,
        forward: Vec::new(),
        orders: Orders::Registered,
        confirm: None,
    }
}

/// A `shared-secret` header is the source's secret itself, enough to forge any delivery: it is dropped before the
/// delivery is stored, so neither the API nor the dashboard can show it; the delivery's other headers are kept.
#[tokio::test]
async fn a_shared_secret_header_is_neither_stored_nor_shown() {
    const SHARED: &str = "legacy-secret-hash-PLANTED-4711";
    let app = TestApp::spawn_with(|s, _| s.sources.push(shared_secret_source("legacy", SHARED))).await;
    let body = app.encode("legacy", &event("evt_shared", Pay, "ord_shared", 100));
    let headers = [("Verif-Hash".to_owned(), SHARED.to_owned()), ("X-Note".to_owned(), "kept".to_owned())];
    let reply = app.post_raw("legacy", &headers, body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    let id = reply.json["event_id"].as_str().unwrap().to_owned();

    let (status, api) = app.get_text_authorized(&format!("/v1/events/legacy/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{api}");
    assert!(!api.contains(SHARED) && !api.contains("verif-hash"), "the API shows the secret: {api}");
    assert!(api.contains("x-note"), "{api}");

    let session = login(&app).await;
    let html = page(&app, &session.cookie, &format!("/ui/events/legacy/{id}")).await;
    assert!(!html.contains(SHARED) && !html.contains("verif-hash"), "the dashboard shows the secret:\n{html}");
    assert!(html.contains("x-note"), "{html}");
}

#[tokio::test]
async fn a_body_that_is_not_utf8_is_returned_in_base64_and_shown_with_its_bytes_escaped() {
    let app = TestApp::spawn().await;
    let body: &[u8] = b"{\"id\":\"caf\xe9\"}\xff\x00 <b>";
    let id = post(&app, "payments", body, &[]).await;

    let d = app.api_get(&format!("/v1/events/payments/{id}")).await.json;
    assert_eq!(
        (&d["status"], &d["body"], &d["body_encoding"]),
        (&json!("dead_lettered"), &Value::Null, &json!("base64"))
    );
    let decoded = base64::engine::general_purpose::STANDARD.decode(d["body_base64"].as_str().unwrap()).unwrap();
    assert_eq!(decoded, body);

    let session = login(&app).await;
    let html = page(&app, &session.cookie, &format!("/ui/events/payments/{id}")).await;
    let byte = |b: &str, why: &str| format!("<span class=\"byte\" title=\"{why}\">\\x{b}</span>");
    let shown = format!(
        "{{&quot;id&quot;:&quot;caf{}&quot;}}{}{} &lt;b&gt;",
        byte("e9", "not UTF-8"),
        byte("ff", "not UTF-8"),
        byte("00", "a control character")
    );
    assert!(html.contains(&format!("<pre id=\"raw-body\">{shown}</pre>")), "{html}");
    assert!(html.contains("19 bytes, not UTF-8"), "{html}");
    let pretty = page(&app, &session.cookie, &format!("/ui/events/payments/{id}?view=pretty")).await;
    assert!(pretty.contains("Not JSON, so shown as received.") && pretty.contains(&shown), "{pretty}");
}

/// Writes an inbox row the way a payhook that stored headers as an object of strings did, straight into the
/// database file.
fn insert_old_row(app: &TestApp, source: &str, event_id: &str, status: &str, headers: &str, body: &[u8]) {
    let conn = rusqlite::Connection::open(&app.db_path).expect("open the database file");
    conn.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let now = now_ms();
    conn.execute(
        "INSERT INTO inbox (source, event_id, status, reason, received_at, updated_at, verification, headers, body)
         VALUES (?1, ?2, ?3, 'written by an older payhook', ?4, ?4, 'hmac (secret #0)', ?5, ?6)",
        rusqlite::params![source, event_id, status, now, headers, body],
    )
    .expect("insert an old-format row");
}

#[tokio::test]
async fn a_row_stored_with_headers_as_an_object_of_strings_reads_as_lists_through_the_api_and_the_dashboard() {
    let app = TestApp::spawn().await;
    // A repeated header was written as a duplicate key; a JSON map would keep only the last.
    let old = r#"{"x-webhook-signature":"aa11","content-type":"application/json","x-webhook-signature":"bb22"}"#;
    insert_old_row(&app, "payments", "evt_old", "ignored", old, b"{\"id\": \"evt_old\"}");

    let d = app.api_get("/v1/events/payments/evt_old").await.json;
    assert_eq!(d["headers"], json!({"x-webhook-signature": ["aa11", "bb22"], "content-type": ["application/json"]}));
    assert_eq!(d["body"], "{\"id\": \"evt_old\"}");

    let session = login(&app).await;
    let html = page(&app, &session.cookie, "/ui/events/payments/evt_old").await;
    let (a, b) = (html.find("aa11").expect("first value shown"), html.find("bb22").expect("second value shown"));
    assert!(a < b, "{html}");
}

/// A Shopify `orders/paid` for an order that is registered only after it was dead-lettered.
const SHOPIFY_ORDER: &str = "820982911946154508";
const SHOPIFY_PAID: &str = r#"{"id":820982911946154508,"financial_status":"paid","total_price":"598.00","currency":"USD","updated_at":"2024-01-01T10:05:00-05:00"}"#;

/// Replays `event_id` through the API once its order exists; the order must end paid with one receipt.
async fn register_and_replay(app: &TestApp, event_id: &str) {
    assert_eq!(app.register_order(SHOPIFY_ORDER, 59_800, "usd").await.0, StatusCode::CREATED);
    let reply = app.api_post(&format!("/v1/events/shopify/{event_id}/replay"), String::new()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(
        (&reply.json["status"], &reply.json["replayed_as"]),
        (&json!("processed"), &Value::Null),
        "{}",
        reply.json
    );
    let order = app.order(SHOPIFY_ORDER).await;
    assert_eq!(order["status"], "paid", "{order}");
    assert_eq!(app.receipts(SHOPIFY_ORDER).await, 1);
}

#[tokio::test]
async fn a_shopify_dead_letter_replays_from_its_stored_headers_taking_the_first_of_a_repeated_topic() {
    let app = TestApp::spawn_with(|_, options| {
        options.retry = RetryPolicy { base_ms: 1, factor: 1, cap_ms: 1, jitter: 0.0, max_attempts: 2 };
    })
    .await;
    let event_id = "98880550-7158-44d4-b7cd-2c97c8a091b5";
    // The topic is sent twice; like the verifier, the format reads the first.
    let extra =
        [("X-Shopify-Topic", "orders/paid"), ("X-Shopify-Event-Id", event_id), ("X-Shopify-Topic", "refunds/create")];
    assert_eq!(post(&app, "shopify", SHOPIFY_PAID.as_bytes(), &extra).await, event_id);
    app.running.worker.run_until_idle(app.clock.advance(60_000)).await.unwrap();
    let stored = app.event("shopify", event_id).await.unwrap();
    assert_eq!((stored.status, stored.event_type.as_deref()), (Outcome::DeadLettered, Some("orders/paid")));
    assert_eq!(stored.headers.get_all("x-shopify-topic"), ["orders/paid", "refunds/create"]);

    register_and_replay(&app, event_id).await;
}

#[tokio::test]
async fn a_shopify_dead_letter_stored_with_headers_as_an_object_of_strings_replays_the_same_way() {
    let app = TestApp::spawn().await;
    let event_id = "0f3e8c2a-1b2c-4d5e-8f90-a1b2c3d4e5f6";
    // The older form: strings, a repeated topic as a duplicate key (a JSON map would read the last, a refund).
    let old = format!(
        r#"{{"x-shopify-topic":"orders/paid","x-shopify-event-id":"{event_id}","content-type":"application/json","x-shopify-topic":"refunds/create"}}"#
    );
    insert_old_row(&app, "shopify", event_id, "dead_lettered", &old, SHOPIFY_PAID.as_bytes());

    register_and_replay(&app, event_id).await;
    let stored = app.event("shopify", event_id).await.unwrap();
    assert_eq!((stored.status, stored.event_type.as_deref()), (Outcome::Processed, Some("orders/paid")));
}
