//! What is refused before anything is stored: bad signatures, unknown sources, oversized bodies.

use crate::helpers::{
    OTHER_STANDARD_SECRET, Reply, STRIPE_SECRET, TestApp, chunked, event, now_secs, raw_http, read_raw_reply,
    request_head, verifier,
};
use payhook_core::event::OrderAction::Pay;
use reqwest::StatusCode;
use serde_json::json;

/// (expected error code, source, headers, body)
type Case = (&'static str, &'static str, Vec<(String, String)>, Vec<u8>);

fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn assert_refused(reply: &Reply, status: StatusCode, code: &str, case: &str) {
    assert_eq!(reply.status, status, "{case}: {}", reply.json);
    assert_eq!(reply.json["error"], code, "{case}: {}", reply.json);
    assert!(reply.json["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}: {}", reply.json);
}

#[tokio::test]
async fn forged_stale_missing_or_malformed_signatures_get_401_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    app.register_order("ord_v", 100, "usd").await;
    let now = now_secs();
    let stale = now - 301;
    let mut cases: Vec<Case> = Vec::new();
    for source in ["payments", "stripe", "standard"] {
        let body = app.encode(source, &event("evt_v", Pay, "ord_v", 100));
        let forger = if source == "standard" { OTHER_STANDARD_SECRET } else { "whsec_not_the_secret" };
        cases.push(("mismatch", source, verifier(source, forger).sign(&body, now, "msg_v"), body.clone()));
        cases.push(("missing_header", source, Vec::new(), body.clone()));
        if source != "payments" {
            cases.push(("stale", source, app.sign(source, &body, stale), body.clone()));
            cases.push(("stale", source, app.sign(source, &body, now + 301), body.clone()));
        }
        // Signed correctly, but for other bytes.
        let signed = app.sign(source, &body, now);
        let mut tampered = body.clone();
        tampered.extend_from_slice(b"\n");
        cases.push(("mismatch", source, signed, tampered));
    }
    let body = app.encode("payments", &event("evt_v", Pay, "ord_v", 100));
    cases.push(("mismatch", "payments", h(&[("x-webhook-signature", "not-hex")]), body.clone()));
    // Truncated: the first half of the right signature.
    let mut truncated = app.sign("payments", &body, now);
    truncated.iter_mut().for_each(|(_, v)| v.truncate(v.len() / 2));
    cases.push(("mismatch", "payments", truncated, body.clone()));
    // Signed with another configured source's secret.
    cases.push(("mismatch", "payments", verifier("payments", STRIPE_SECRET).sign(&body, now, "msg_v"), body.clone()));
    let body = app.encode("stripe", &event("evt_v", Pay, "ord_v", 100));
    cases.push(("malformed", "stripe", h(&[("Stripe-Signature", "v1=abcdef")]), body.clone()));
    cases.push(("malformed", "stripe", h(&[("Stripe-Signature", &format!("t={now}"))]), body.clone()));
    cases.push(("malformed", "stripe", h(&[("Stripe-Signature", &format!("t=-{now},v1=ab"))]), body));
    let body = app.encode("standard", &event("evt_v", Pay, "ord_v", 100));
    let mut bad_ts = app.sign("standard", &body, now);
    bad_ts.iter_mut().filter(|(k, _)| k == "webhook-timestamp").for_each(|(_, v)| *v = "soon".into());
    cases.push(("malformed", "standard", bad_ts, body.clone()));
    let mut no_id = app.sign("standard", &body, now);
    no_id.retain(|(k, _)| k != "webhook-id");
    cases.push(("missing_header", "standard", no_id, body));

    for (code, source, headers, body) in cases {
        let reply = app.post_raw(source, &headers, body).await;
        assert_refused(&reply, StatusCode::UNAUTHORIZED, code, &format!("{source} {headers:?}"));
        let message = reply.json["message"].as_str().unwrap();
        assert!(message.starts_with("signature verification failed"), "{message}");
    }

    assert_eq!(app.inbox_rows().await, 0, "{:?}", app.stats().await);
    assert_eq!(app.outbox_total().await, 0);
    assert_eq!(app.order("ord_v").await["status"], "pending");
    // The genuine delivery still goes through afterwards.
    assert_eq!(app.deliver("stripe", &event("evt_v", Pay, "ord_v", 100)).await.1["status"], "processed");
}

#[tokio::test]
async fn a_delivery_to_an_unknown_source_gets_a_404_json_answer() {
    let app = TestApp::spawn().await;
    let body = app.encode("payments", &event("evt_u", Pay, "ord_u", 1));
    let headers = app.sign("payments", &body, now_secs());
    let reply = app.post_raw("paypal", &headers, body).await;
    assert_refused(&reply, StatusCode::NOT_FOUND, "not_found", "unknown source");
    assert_eq!(app.inbox_rows().await, 0);
}

const SMALL_LIMIT: usize = 1024;

async fn small_limit_app() -> TestApp {
    TestApp::spawn_with(|settings, _| settings.body_limit_bytes = SMALL_LIMIT).await
}

/// A validly signed generic delivery padded with trailing whitespace to exactly `len` bytes.
fn padded_body(app: &TestApp, len: usize) -> Vec<u8> {
    let mut body = app.encode("payments", &event("evt_big", Pay, "ord_big", 1));
    assert!(body.len() <= len);
    body.resize(len, b' ');
    body
}

#[tokio::test]
async fn a_body_over_the_limit_with_an_honest_content_length_gets_413() {
    let app = small_limit_app().await;
    let body = padded_body(&app, SMALL_LIMIT + 1);
    let headers = app.sign("payments", &body, now_secs());
    let reply = app.post_raw("payments", &headers, body).await;
    assert_refused(&reply, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", "content-length");
    assert_eq!(app.inbox_rows().await, 0);

    // Exactly at the limit is accepted.
    let (status, answer) = app.deliver_bytes("payments", padded_body(&app, SMALL_LIMIT)).await;
    assert_eq!((status, &answer["status"]), (StatusCode::OK, &json!("deferred")), "{answer}");
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_gets_413_while_streaming() {
    let app = small_limit_app().await;
    let body = padded_body(&app, SMALL_LIMIT + 1);
    let headers = app.sign("payments", &body, now_secs());
    let head = request_head(app.addr, "payments", &headers, "Transfer-Encoding: chunked");
    let reply = raw_http(app.addr, &[head.as_bytes(), &chunked(&body, 100)]).await;
    assert_eq!(reply.status, 413, "{}\n{}", reply.head, reply.body);
    assert!(reply.header("content-type").is_some_and(|v| v.starts_with("application/json")), "{}", reply.head);
    assert_eq!(reply.json()["error"], "body_too_large");
    assert_eq!(app.inbox_rows().await, 0);

    // The same framing under the limit is read and recorded.
    let body = padded_body(&app, SMALL_LIMIT);
    let headers = app.sign("payments", &body, now_secs());
    let head = request_head(app.addr, "payments", &headers, "Transfer-Encoding: chunked");
    let reply = raw_http(app.addr, &[head.as_bytes(), &chunked(&body, 100)]).await;
    assert_eq!(reply.status, 200, "{}\n{}", reply.head, reply.body);
    assert_eq!(reply.json()["status"], "deferred");
}

#[tokio::test]
async fn a_body_over_the_default_one_mebibyte_limit_gets_413() {
    let app = TestApp::spawn().await;
    let body = padded_body(&app, 1024 * 1024 + 1);
    let headers = app.sign("payments", &body, now_secs());
    let reply = app.post_raw("payments", &headers, body).await;
    assert_refused(&reply, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", "1 MiB + 1");
    assert_eq!(app.inbox_rows().await, 0);
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408_and_nothing_is_stored() {
    let app = TestApp::spawn_with(|settings, _| settings.listener.body_timeout_ms = 200).await;
    let body = app.encode("payments", &event("evt_slow", Pay, "ord_slow", 1));
    let headers = app.sign("payments", &body, now_secs());
    let head = request_head(app.addr, "payments", &headers, &format!("Content-Length: {}", body.len()));

    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes()).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, &body[..10]).await.unwrap();
    // The rest never comes: the server gives up on its own clock.
    let reply = read_raw_reply(&mut stream).await;
    assert_eq!(reply.status, 408, "{}\n{}", reply.head, reply.body);
    assert_eq!(reply.json()["error"], "body_timeout");
    assert_eq!(app.inbox_rows().await, 0);
}

#[tokio::test]
async fn credentials_sent_along_with_a_delivery_are_not_stored_with_it() {
    let app = TestApp::spawn().await;
    let body = app.encode("payments", &event("evt_cred", Pay, "ord_cred", 1));
    let mut headers = app.sign("payments", &body, now_secs());
    headers.push(("Authorization".into(), "Bearer provider-credential".into()));
    headers.push(("Cookie".into(), "session=provider-cookie".into()));
    headers.push(("X-Request-Id".into(), "req-42".into()));
    let reply = app.post_raw("payments", &headers, body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);

    let stored = app.event("payments", "evt_cred").await.unwrap();
    assert_eq!(stored.headers.get_all("x-request-id"), ["req-42"], "{:?}", stored.headers);
    assert_eq!(stored.headers.get_all("x-webhook-signature").len(), 1, "{:?}", stored.headers);
    let stored_json = stored.headers.to_json();
    assert!(stored.headers.get_all("authorization").is_empty() && stored.headers.get_all("cookie").is_empty());
    for secret in ["provider-credential", "provider-cookie"] {
        assert!(!stored_json.contains(secret), "{stored_json}");
    }
}
