//! Hostile bodies that verify: each is either applied, ignored or kept as a dead letter with its reason, and
//! answered with a JSON status. Nothing panics, nothing verified is dropped.

use crate::helpers::{TestApp, event, now_secs};
use payhook_core::event::OrderAction::Pay;
use reqwest::StatusCode;

/// (case, body, expected `status` of the answer)
fn hostile_bodies() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes();
    let created = now_secs();
    vec![
        ("empty body", Vec::new(), "dead_lettered"),
        ("invalid UTF-8", vec![0xff, 0xfe, 0x7b, 0x80], "dead_lettered"),
        ("JSON nested 100,000 deep", deep, "dead_lettered"),
        ("a JSON array instead of an object", b"[1,2,3]".to_vec(), "dead_lettered"),
        (
            "an amount out of i64 range",
            format!(
                r#"{{"id":"evt_big","type":"payment.succeeded","created":{created},
                    "data":{{"order_id":"ord_h","amount":99999999999999999999999,"currency":"usd"}}}}"#
            )
            .into_bytes(),
            "dead_lettered",
        ),
        (
            "a fractional amount",
            format!(
                r#"{{"id":"evt_frac","type":"payment.succeeded","created":{created},
                    "data":{{"order_id":"ord_h","amount":19.99,"currency":"usd"}}}}"#
            )
            .into_bytes(),
            "dead_lettered",
        ),
        (
            "an event id of control characters",
            format!(r#"{{"id":"evt\u0000x","type":"payment.succeeded","created":{created},"data":{{}}}}"#).into_bytes(),
            "dead_lettered",
        ),
        (
            "an order id of 10,000 characters",
            format!(
                r#"{{"id":"evt_long","type":"payment.succeeded","created":{created},
                    "data":{{"order_id":"{}","amount":1,"currency":"usd"}}}}"#,
                "o".repeat(10_000)
            )
            .into_bytes(),
            "dead_lettered",
        ),
        (
            // serde_json keeps the last of duplicate keys; the signature covers the bytes, so this is the sender's.
            "duplicate JSON keys, the last one counting",
            format!(
                r#"{{"id":"evt_dupkey","type":"payment.succeeded","type":"customer.created","created":{created},
                    "data":{{"order_id":"ord_h","amount":100,"currency":"usd"}}}}"#
            )
            .into_bytes(),
            "ignored",
        ),
        (
            "an unknown type with any data",
            format!(r#"{{"id":"evt_unk","type":"customer.created","created":{created},"data":[null]}}"#).into_bytes(),
            "ignored",
        ),
    ]
}

#[tokio::test]
async fn hostile_bodies_that_verify_are_kept_as_dead_letters_and_answered_200() {
    let app = TestApp::spawn().await;
    app.register_order("ord_h", 100, "usd").await;
    for (case, body, expected) in hostile_bodies() {
        let before = app.inbox_rows().await;
        let (status, answer) = app.deliver_bytes("payments", body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{case}: {answer}");
        assert_eq!(answer["status"], expected, "{case}: {answer}");
        let event_id = answer["event_id"].as_str().unwrap_or_else(|| panic!("{case}: no event id in {answer}"));
        assert_eq!(app.inbox_rows().await, before + 1, "{case}: exactly one row is stored");
        let stored = app.event("payments", event_id).await.unwrap_or_else(|| panic!("{case}: not stored"));
        assert_eq!(stored.raw_body, body, "{case}: the raw bytes are kept");
        if expected == "dead_lettered" {
            assert!(stored.reason.as_deref().is_some_and(|r| !r.is_empty()), "{case}: a dead letter has a reason");
        }
        // The same bytes again are recognised, whatever they are.
        let (status, again) = app.deliver_bytes("payments", body).await;
        assert_eq!((status, again["status"].as_str()), (StatusCode::OK, Some("duplicate")), "{case}: {again}");
    }
    assert_eq!(app.order("ord_h").await["status"], "pending", "no hostile body changed the order");
}

#[tokio::test]
async fn the_content_type_does_not_matter_only_the_signed_bytes_do() {
    let app = TestApp::spawn().await;
    app.register_order("ord_ct", 100, "usd").await;
    let body = app.encode("payments", &event("evt_ct", Pay, "ord_ct", 100));
    let mut headers = app.sign("payments", &body, now_secs());
    headers.push(("content-type".into(), "text/plain; charset=latin1".into()));
    let reply = app.post_raw("payments", &headers, body).await;
    assert_eq!((reply.status, reply.json["status"].as_str()), (StatusCode::OK, Some("processed")), "{}", reply.json);
}

#[tokio::test]
async fn a_second_signature_header_is_not_consulted_and_an_oversized_header_is_refused() {
    let app = TestApp::spawn().await;
    let body = app.encode("payments", &event("evt_dup_hdr", Pay, "ord_x", 100));
    let good = app.sign("payments", &body, now_secs());
    // A forged first value with the real one second: payhook reads one value and refuses.
    let mut headers = vec![("x-webhook-signature".to_owned(), "00".repeat(32))];
    headers.extend(good);
    let reply = app.post_raw("payments", &headers, body.clone()).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.json);

    let huge = vec![("x-webhook-signature".to_owned(), "a".repeat(1024 * 1024))];
    let answered = app.post_raw_response("payments", &huge, body).await;
    if let Ok(resp) = answered {
        assert!(resp.status().is_client_error(), "an oversized header is refused, got {}", resp.status());
    }
    assert_eq!(app.inbox_rows().await, 0, "nothing is stored");
}
