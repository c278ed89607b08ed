//! Hostile bodies that verify: each is either applied, ignored or kept as a dead letter with its reason, and
//! answered with a JSON status. Nothing panics, nothing verified is dropped. And hostile senders of bodies: a body
//! that stops half way on any route that reads one is answered 408 and its connection closed at its deadline, a
//! body that would pass the process's body buffer is answered 503 at once, and a request past its own deadline is
//! stopped.

use crate::helpers::{API_TOKEN, TestApp, event, fresh_metrics, metric, now_secs, slow_body};
use payhook_core::event::OrderAction::Pay;
use payhook_server::ROUTES;
use reqwest::StatusCode;
use std::net::Ipv4Addr;
use std::time::Duration;

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

/// Every route that reads a body, with what it takes to be read (the token, a dashboard session): every POST the
/// router lists (the webhook route and `/v1`), the dashboard's login and its forms.
async fn routes_that_read_a_body(app: &TestApp) -> Vec<(String, Vec<(String, String)>)> {
    let session = crate::ui::login(app).await;
    let bearer = vec![("Authorization".to_owned(), format!("Bearer {API_TOKEN}"))];
    let form = |cookie: Option<&str>| {
        let mut headers = vec![("Content-Type".to_owned(), "application/x-www-form-urlencoded".to_owned())];
        headers.extend(cookie.map(|c| ("Cookie".to_owned(), c.to_owned())));
        headers
    };
    let routes: Vec<(String, Vec<(String, String)>)> = ROUTES
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| {
            let path = r.path.replace("{source}", "payments").replace("{event_id}", "evt_none").replace("{id}", "1");
            let headers = match path.as_str() {
                "/ui/login" => form(None),
                p if p.starts_with("/ui/") => form(Some(&session.cookie)),
                p if p.starts_with("/v1/") => bearer.clone(),
                _ => Vec::new(),
            };
            (format!("POST {path}"), headers)
        })
        .collect();
    routes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_on_every_route_that_reads_one_is_answered_408_and_closed_within_its_deadline() {
    const BODY_TIMEOUT_MS: u64 = 1_000;
    let app = TestApp::spawn_with(|settings, _| settings.listener.body_timeout_ms = BODY_TIMEOUT_MS).await;
    let routes = routes_that_read_a_body(&app).await;
    assert!(routes.len() >= 11, "{routes:?}");
    let mut slow = tokio::task::JoinSet::new();
    for (route, headers) in routes {
        let addr = app.addr;
        slow.spawn(async move {
            // Ten of a hundred declared bytes, and then nothing, on a keep-alive connection.
            let (took, reply) = slow_body(addr, Ipv4Addr::LOCALHOST, &route, &headers, 100, b"csrf=abcde").await;
            (route, took, reply)
        });
    }
    while let Some(joined) = slow.join_next().await {
        let (route, took, reply) = joined.unwrap();
        assert_eq!(reply.status, 408, "{route}: {}\n{}", reply.head, reply.body);
        assert_eq!(reply.json()["error"], "body_timeout", "{route}: {}", reply.body);
        assert_eq!(reply.header("connection"), Some("close"), "{route}: {}", reply.head);
        // Answered and closed at the deadline: not before it, and not much after.
        assert!(took >= Duration::from_millis(BODY_TIMEOUT_MS - 50), "{route}: closed after {took:?}");
        assert!(took <= Duration::from_millis(BODY_TIMEOUT_MS + 1_500), "{route}: closed only after {took:?}");
    }
    assert_eq!(app.inbox_rows().await, 0, "nothing half-sent was stored");
    let text = fresh_metrics(&app).await;
    assert!(metric(&text, "payhook_requests_timed_out_total{deadline=\"body\"}") >= 11.0, "{text}");
    assert_eq!(metric(&text, "payhook_requests_timed_out_total{deadline=\"request\"}"), 0.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_would_pass_the_body_buffer_bound_is_answered_503_with_retry_after_and_nothing_waits() {
    const LIMIT: usize = 64 * 1024;
    let app = TestApp::spawn_with(|settings, _| {
        settings.body_limit_bytes = LIMIT;
        settings.listener.body_buffer_bytes = LIMIT as u64;
        settings.listener.body_timeout_ms = 3_000;
    })
    .await;
    // A body of nearly the limit that stops one byte short holds nearly the whole buffer until its deadline.
    let held = vec![b' '; LIMIT - 2_000];
    let addr = app.addr;
    let holder = tokio::spawn(async move {
        slow_body(addr, Ipv4Addr::LOCALHOST, "POST /webhooks/payments", &[], LIMIT - 1_999, &held).await
    });
    let started = std::time::Instant::now();
    loop {
        let text = fresh_metrics(&app).await;
        if metric(&text, "payhook_body_buffer_bytes") >= (LIMIT - 2_000) as f64 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(2), "the held body never showed in the gauge:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A signed delivery of 8 KiB does not fit: refused at once, with Retry-After, and not stored.
    let mut body = app.encode("payments", &event("evt_buffer", Pay, "ord_buffer", 100));
    body.resize(8 * 1024, b' ');
    let headers = app.sign("payments", &body, now_secs());
    let asked = std::time::Instant::now();
    let reply = app.post_raw("payments", &headers, body.clone()).await;
    assert!(asked.elapsed() < Duration::from_secs(1), "a refusal does not wait: {:?}", asked.elapsed());
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{}", reply.json);
    assert_eq!(reply.json["error"], "body_buffer_full", "{}", reply.json);
    assert_eq!(reply.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(app.inbox_rows().await, 0);

    // The held body meets its deadline; its bytes come back and the provider's retry is taken.
    let (_, held_reply) = holder.await.unwrap();
    assert_eq!(held_reply.status, 408, "{}", held_reply.body);
    let reply = app.post_raw("payments", &headers, body).await;
    assert_eq!((reply.status, reply.json["status"].as_str()), (StatusCode::OK, Some("deferred")), "{}", reply.json);
    let text = fresh_metrics(&app).await;
    assert_eq!(metric(&text, "payhook_body_buffer_bytes"), 0.0, "{text}");
    assert_eq!(metric(&text, "payhook_body_buffer_bytes_max"), LIMIT as f64, "{text}");
    assert_eq!(metric(&text, "payhook_body_buffer_refused_total"), 1.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_deadline_is_answered_503_and_its_connection_closed() {
    let app = TestApp::spawn_with(|settings, _| {
        settings.listener.request_timeout_ms = 1_000;
        settings.listener.body_timeout_ms = 1_000;
        settings.replay.per_second = 1;
    })
    .await;
    // Three dead letters: a bulk replay paced at one a second takes two seconds at least.
    for i in 0..3 {
        let (status, answer) = app.deliver_bytes("payments", format!("not json {i}").into_bytes()).await;
        assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("dead_lettered")), "{answer}");
    }
    let started = std::time::Instant::now();
    let resp = app
        .client
        .post(app.url("/v1/dead-letters/replay"))
        .bearer_auth(API_TOKEN)
        .body("{}")
        .send()
        .await
        .expect("an answer");
    let took = started.elapsed();
    let closes = resp.headers().get("connection").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let retry_after = resp.headers().get("retry-after").is_some();
    let reply = crate::helpers::read_json(resp).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{}", reply.json);
    assert_eq!(reply.json["error"], "request_timeout", "{}", reply.json);
    assert!(retry_after && closes.as_deref() == Some("close"), "{:?}", reply.headers);
    assert!(took >= Duration::from_millis(950) && took < Duration::from_millis(2_500), "answered after {took:?}");
    let text = fresh_metrics(&app).await;
    assert_eq!(metric(&text, "payhook_requests_timed_out_total{deadline=\"request\"}"), 1.0, "{text}");
    // The bulk replay's lock went with it: the next one runs.
    let reply = app.api_post("/v1/dead-letters/replay", r#"{"dry_run": true}"#.to_owned()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
}
