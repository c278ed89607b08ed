//! The admin API under `/v1`: events and dead letters (list, show, replay, bulk replay), the outbox (list,
//! re-queue) and stats, over real HTTP on a real SQLite file; and the shared `admin` functions where a test needs
//! settings other than the running app's.

use crate::helpers::{API_TOKEN, Reply, TestApp, event, now_secs, read_json};
use base64::Engine;
use payhook_core::event::OrderAction::Pay;
use payhook_core::event::{EventId, SourceName};
use payhook_core::format::Format;
use payhook_core::retry::RetryPolicy;
use payhook_server::admin::{self, AdminError};
use payhook_server::now_ms;
use payhook_server::settings::SinkSettings;
use payhook_store::{Claim, Delivery, Dispatched, Outcome, Parsed, ReceivedHeaders, Store};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Every admin route, with a method and a path that would succeed with the token.
const ADMIN_ROUTES: [(&str, &str); 8] = [
    ("GET", "/v1/events"),
    ("GET", "/v1/events/payments/evt_dead"),
    ("POST", "/v1/events/payments/evt_dead/replay"),
    ("GET", "/v1/dead-letters"),
    ("POST", "/v1/dead-letters/replay"),
    ("GET", "/v1/outbox"),
    ("POST", "/v1/outbox/1/retry"),
    ("GET", "/v1/stats"),
];

/// Calls the API with `auth` as the whole `Authorization` header (or none).
async fn call(app: &TestApp, method: &str, path: &str, auth: Option<&str>, body: Option<Value>) -> Reply {
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = app.client.request(method, app.url(path));
    if let Some(auth) = auth {
        req = req.header("authorization", auth);
    }
    if let Some(body) = body {
        req = req.header("content-type", "application/json").body(body.to_string());
    }
    read_json(req.send().await.expect("admin request")).await
}

async fn get(app: &TestApp, path: &str) -> Reply {
    app.api_get(path).await
}

async fn post(app: &TestApp, path: &str, body: Value) -> Reply {
    app.api_post(path, body.to_string()).await
}

/// A store whose retry budget is two attempts, and the early arrival it turns into a dead letter.
async fn spawn_with_short_budget(configure: impl FnOnce(&mut payhook_server::Settings)) -> TestApp {
    TestApp::spawn_with(|settings, options| {
        options.retry = RetryPolicy { base_ms: 1, factor: 1, cap_ms: 1, jitter: 0.0, max_attempts: 2 };
        configure(settings);
    })
    .await
}

/// Delivers a payment for an order that does not exist and runs the worker until the budget is spent.
async fn dead_letter_for_missing_order(app: &TestApp, event_id: &str, order_id: &str) {
    let (status, body) = app.deliver("payments", &event(event_id, Pay, order_id, 1999)).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("deferred")), "{body}");
    app.running.worker.run_until_idle(app.clock.advance(60_000)).await.unwrap();
    let stored = app.event("payments", event_id).await.unwrap();
    assert_eq!(stored.status, Outcome::DeadLettered, "{stored:?}");
}

/// A verified body the generic format cannot read: dead-lettered on arrival under `sha256:…`.
async fn unparseable(app: &TestApp, n: usize) -> String {
    let (status, body) = app.deliver_bytes("payments", format!("not json #{n}").into_bytes()).await;
    assert_eq!((status, &body["status"]), (StatusCode::OK, &json!("dead_lettered")), "{body}");
    body["event_id"].as_str().unwrap().to_owned()
}

fn ids(events: &Value) -> Vec<String> {
    events.as_array().unwrap().iter().map(|e| e["event_id"].as_str().unwrap().to_owned()).collect()
}

async fn status_of(app: &TestApp, event_id: &str) -> Outcome {
    app.event("payments", event_id).await.unwrap().status
}

#[tokio::test]
async fn every_admin_route_refuses_a_missing_or_wrong_token_with_401_and_changes_nothing() {
    // Far more failures than the throttle lets one address make: this test is about the answers, not the throttle.
    let app = TestApp::spawn_with(|settings, _| settings.auth.failure_burst = 1_000).await;
    let dead_id = unparseable(&app, 1).await;
    let routes = ADMIN_ROUTES.map(|(method, path)| (method, path.replace("evt_dead", &dead_id)));

    let wrong = format!("Bearer {API_TOKEN}x");
    let basic = format!("Basic {API_TOKEN}");
    for (method, path) in &routes {
        for auth in [None, Some("Bearer "), Some("Bearer wrong-token"), Some(wrong.as_str()), Some(basic.as_str())] {
            let reply = call(&app, method, path, auth, Some(json!({}))).await;
            assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{method} {path} with {auth:?}: {}", reply.json);
            assert_eq!(reply.json["error"], "missing_token", "{method} {path}");
        }
    }
    let stored = app.event("payments", &dead_id).await.unwrap();
    assert_eq!((stored.status, stored.attempts), (Outcome::DeadLettered, 1), "a refused replay changed the event");

    // The same requests with the token reach a handler: every route exists, behind the layer.
    for (method, path) in &routes {
        let reply =
            call(&app, method, path, Some(&format!("Bearer {API_TOKEN}")), Some(json!({ "dry_run": true }))).await;
        assert_ne!(reply.status, StatusCode::UNAUTHORIZED, "{method} {path}: {}", reply.json);
        assert_ne!(reply.json["message"], "no such route", "{method} {path}");
    }
}

#[tokio::test]
async fn events_are_listed_newest_first_filtered_and_paged_with_a_cursor() {
    let app = TestApp::spawn().await;
    app.register_order("ord_a", 1999, "usd").await;
    assert_eq!(app.deliver("payments", &event("evt_1", Pay, "ord_a", 1999)).await.1["status"], "processed");
    assert_eq!(app.deliver("payments", &event("evt_2", Pay, "ord_missing", 1999)).await.1["status"], "deferred");
    assert_eq!(app.deliver("stripe", &event("evt_s1", Pay, "ord_b", 500)).await.1["status"], "deferred");
    let dead = unparseable(&app, 1).await;
    let other = json!({ "id": "evt_ign", "type": "customer.created", "created": now_secs() });
    assert_eq!(app.deliver_bytes("payments", other.to_string().into_bytes()).await.1["status"], "ignored");

    let all = get(&app, "/v1/events").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.json);
    assert_eq!(ids(&all.json["events"]), ["evt_ign", dead.as_str(), "evt_s1", "evt_2", "evt_1"]);
    assert_eq!(all.json["next_cursor"], Value::Null);
    let first = &all.json["events"][4];
    assert_eq!(
        (&first["source"], &first["status"], &first["attempts"]),
        (&json!("payments"), &json!("processed"), &json!(1))
    );
    assert_eq!(first["event_type"], "payment.succeeded");

    let only = |q: &str| {
        let app = &app;
        let q = q.to_owned();
        async move {
            let reply = get(app, &format!("/v1/events?{q}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{q}: {}", reply.json);
            ids(&reply.json["events"])
        }
    };
    assert_eq!(only("source=stripe").await, ["evt_s1"]);
    assert_eq!(only("status=deferred").await, ["evt_s1", "evt_2"]);
    assert_eq!(only("source=payments&status=deferred").await, ["evt_2"]);
    assert_eq!(only("type=payment.succeeded").await, ["evt_2", "evt_1"]);
    assert_eq!(only("status=dead_lettered&reason=not%20valid%20JSON").await, std::slice::from_ref(&dead));
    // Time bounds: `since` is inclusive, `until` exclusive, on the reception time.
    let received: Vec<i64> =
        all.json["events"].as_array().unwrap().iter().map(|e| e["received_at_ms"].as_i64().unwrap()).collect();
    let all_ids = ids(&all.json["events"]);
    let pivot = received[2];
    let expected = |keep: &dyn Fn(i64) -> bool| -> Vec<String> {
        all_ids.iter().zip(&received).filter(|(_, r)| keep(**r)).map(|(id, _)| id.clone()).collect()
    };
    assert_eq!(only(&format!("since={pivot}")).await, expected(&|r| r >= pivot));
    assert_eq!(only(&format!("until={pivot}")).await, expected(&|r| r < pivot));
    assert!(only(&format!("since={}", now_ms() + 60_000)).await.is_empty());

    // Pages of two, following the cursor, give every event once, in order; the last page has no cursor.
    let mut paged = Vec::new();
    let mut path = "/v1/events?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page = get(&app, &path).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.json);
        pages += 1;
        paged.extend(ids(&page.json["events"]));
        match page.json["next_cursor"].as_i64() {
            Some(cursor) => path = format!("/v1/events?limit=2&before={cursor}"),
            None => break,
        }
        assert!(pages < 10, "the cursor does not advance");
    }
    assert_eq!((paged, pages), (all_ids, 3));
    // A limit above the maximum is lowered, not refused.
    assert_eq!(only("limit=100000").await.len(), 5);

    for bad in ["status=exploded", "limit=0", "limit=many", "since=yesterday", "colour=red", "source=Not%20A%20Source"]
    {
        let reply = get(&app, &format!("/v1/events?{bad}")).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {}", reply.json);
        assert_eq!(reply.json["error"], "invalid_request", "{bad}");
    }

    // Dead letters are the same listing with the status fixed.
    let dlq = get(&app, "/v1/dead-letters").await;
    assert_eq!(ids(&dlq.json["events"]), std::slice::from_ref(&dead));
    assert!(get(&app, "/v1/dead-letters?source=stripe").await.json["events"].as_array().unwrap().is_empty());
    assert_eq!(get(&app, "/v1/dead-letters?status=processed").await.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn an_event_shows_its_raw_body_headers_attempts_changes_and_outbox_rows() {
    let app = TestApp::spawn().await;
    let paid = event("evt_d", Pay, "ord_d", 1999);
    let sent = app.encode("payments", &paid);
    assert_eq!(app.deliver("payments", &paid).await.1["status"], "deferred");
    app.register_order("ord_d", 1999, "usd").await;
    assert_eq!(app.running.worker.run_until_idle(now_ms()).await.unwrap().retried, 1);

    let reply = get(&app, "/v1/events/payments/evt_d").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    let d = &reply.json;
    assert_eq!(
        (&d["source"], &d["event_id"], &d["status"]),
        (&json!("payments"), &json!("evt_d"), &json!("processed"))
    );
    assert_eq!((&d["event_type"], &d["attempts"]), (&json!("payment.succeeded"), &json!(2)));
    assert_eq!(d["body"], String::from_utf8(sent).unwrap());
    assert_eq!((&d["body_base64"], &d["body_encoding"]), (&Value::Null, &json!("utf8")), "{d}");
    assert_eq!(d["headers"]["x-webhook-signature"].as_array().map(Vec::len), Some(1), "{d}");
    assert!(d["verification"].as_str().unwrap().starts_with("hmac"), "{d}");
    assert_eq!(d["effect"]["order_id"], "ord_d");
    let log = d["attempt_log"].as_array().unwrap();
    assert_eq!((&log[0]["attempt"], &log[0]["outcome"]), (&json!(1), &json!("deferred")), "{d}");
    let changes = d["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{d}");
    assert_eq!((&changes[0]["from"], &changes[0]["to"]), (&json!("pending"), &json!("paid")));
    let outbox = d["outbox"].as_array().unwrap();
    assert_eq!(outbox.len(), 1, "{d}");
    assert_eq!((&outbox[0]["kind"], &outbox[0]["order_id"]), (&json!("order.paid"), &json!("ord_d")));

    // Bytes that are not UTF-8 are shown in base64, in a field that says so.
    let bytes = vec![0xff, 0xfe, b'{', 0x00, 0x80];
    let (_, answer) = app.deliver_bytes("payments", bytes.clone()).await;
    let id = answer["event_id"].as_str().unwrap();
    let d = get(&app, &format!("/v1/events/payments/{id}")).await.json;
    assert_eq!((&d["status"], &d["body_encoding"]), (&json!("dead_lettered"), &json!("base64")), "{d}");
    assert_eq!(d["body"], Value::Null, "{d}");
    let decoded = base64::engine::general_purpose::STANDARD.decode(d["body_base64"].as_str().unwrap()).unwrap();
    assert_eq!(decoded, bytes);
    assert!(d["reason"].as_str().unwrap().contains("not valid JSON"), "{d}");

    let missing = get(&app, "/v1/events/payments/evt_nope").await;
    assert_eq!((missing.status, &missing.json["error"]), (StatusCode::NOT_FOUND, &json!("not_found")));
}

#[tokio::test]
async fn a_dead_letter_whose_order_never_appeared_is_processed_once_when_replayed_after_the_order_exists() {
    let app = spawn_with_short_budget(|_| {}).await;
    dead_letter_for_missing_order(&app, "evt_late", "ord_late").await;
    let replay = "/v1/events/payments/evt_late/replay";

    // Replayed while the order still does not exist: still a dead letter, with the attempt recorded.
    let reply = post(&app, replay, json!({})).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("dead_lettered")), "{}", reply.json);
    assert_eq!(app.event("payments", "evt_late").await.unwrap().attempts, 3);

    assert_eq!(app.register_order("ord_late", 1999, "usd").await.0, StatusCode::CREATED);
    // Registering the order does not revive a dead letter by itself.
    assert_eq!(app.running.worker.run_until_idle(app.clock.advance(60_000)).await.unwrap().retried, 0);
    assert_eq!(status_of(&app, "evt_late").await, Outcome::DeadLettered);

    let reply = post(&app, replay, json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    assert_eq!(
        reply.json,
        json!({ "source": "payments", "event_id": "evt_late", "status": "processed",
                                   "detail": null, "replayed_as": null })
    );
    assert_eq!(app.order("ord_late").await["status"], "paid");
    assert_eq!(app.receipts("ord_late").await, 1);

    // A second replay is refused and changes nothing; so does the provider redelivering it.
    let again = post(&app, replay, json!({})).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.json);
    assert_eq!((&again.json["error"], &again.json["status"]), (&json!("not_dead_letter"), &json!("processed")));
    assert_eq!(app.deliver("payments", &event("evt_late", Pay, "ord_late", 1999)).await.1["status"], "duplicate");
    assert_eq!(app.receipts("ord_late").await, 1);
    let stored = app.event("payments", "evt_late").await.unwrap();
    assert_eq!((stored.status, stored.attempts, stored.changes.len()), (Outcome::Processed, 4, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replays_of_one_dead_letter_at_once_apply_it_once() {
    let app = spawn_with_short_budget(|_| {}).await;
    dead_letter_for_missing_order(&app, "evt_race", "ord_race").await;
    app.register_order("ord_race", 1999, "usd").await;
    let path = "/v1/events/payments/evt_race/replay";
    let (a, b) = tokio::join!(post(&app, path, json!({})), post(&app, path, json!({})));
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "{} / {}", a.json, b.json);
    assert_eq!(app.receipts("ord_race").await, 1);
}

#[tokio::test]
async fn replaying_an_event_that_is_not_a_dead_letter_is_409_and_changes_nothing() {
    let app = TestApp::spawn().await;
    app.register_order("ord_p", 1999, "usd").await;
    assert_eq!(app.deliver("payments", &event("evt_p", Pay, "ord_p", 1999)).await.1["status"], "processed");
    assert_eq!(app.deliver("payments", &event("evt_q", Pay, "ord_q", 1999)).await.1["status"], "deferred");

    for (id, status) in [("evt_p", "processed"), ("evt_q", "deferred")] {
        let reply = post(&app, &format!("/v1/events/payments/{id}/replay"), json!({})).await;
        assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.json);
        assert_eq!((&reply.json["error"], &reply.json["status"]), (&json!("not_dead_letter"), &json!(status)));
        assert_eq!(app.event("payments", id).await.unwrap().attempts, 1);
    }
    assert_eq!(app.receipts("ord_p").await, 1);
    let missing = post(&app, "/v1/events/payments/evt_none/replay", json!({})).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.json);
}

#[tokio::test]
async fn an_unparseable_dead_letter_is_reparsed_from_its_stored_bytes_with_the_sources_current_format() {
    let app = TestApp::spawn().await;
    // The generic format needs `data.order_id` for a payment; the Stripe format reads the envelope and
    // `data.object`, and ignores this type.
    let body = json!({ "id": "evt_fmt", "type": "payment.succeeded", "created": now_secs(),
                       "data": { "object": { "id": "pi_1" } } });
    let (_, answer) = app.deliver_bytes("payments", body.to_string().into_bytes()).await;
    assert_eq!(answer["status"], "dead_lettered", "{answer}");
    let stored_id = answer["event_id"].as_str().unwrap().to_owned();
    assert!(stored_id.starts_with("sha256:"), "{stored_id}");

    // With the same format the bytes still do not parse: still dead, the attempt logged.
    let reply = post(&app, &format!("/v1/events/payments/{stored_id}/replay"), json!({})).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("dead_lettered")), "{}", reply.json);
    assert!(reply.json["detail"].as_str().unwrap().contains("data/order_id"), "{}", reply.json);
    let stored = app.event("payments", &stored_id).await.unwrap();
    assert_eq!((stored.attempts, stored.attempt_log.len()), (2, 2), "{stored:?}");

    // The source's format is changed; the same stored bytes now read as an event with its own id.
    let mut settings = app.settings.clone();
    settings.sources.iter_mut().find(|s| s.name.as_str() == "payments").unwrap().format = Format::Stripe;
    let report =
        admin::replay_event(&*app.store, &settings, "payments", &stored_id, now_ms(), &payhook_server::Actor::cli())
            .await
            .unwrap();
    assert_eq!((report.status, report.replayed_as.as_deref()), (Outcome::Ignored, Some("evt_fmt")), "{report:?}");
    assert_eq!(status_of(&app, "evt_fmt").await, Outcome::Ignored);
    assert_eq!(status_of(&app, &stored_id).await, Outcome::Duplicate);
    let again =
        admin::replay_event(&*app.store, &settings, "payments", &stored_id, now_ms(), &payhook_server::Actor::cli())
            .await;
    assert!(matches!(again, Err(AdminError::NotDeadLetter { status: Outcome::Duplicate, .. })), "{again:?}");
}

#[tokio::test]
async fn a_dead_letter_of_a_source_no_longer_configured_is_refused_with_422() {
    let app = TestApp::spawn().await;
    let legacy = SourceName::parse("legacy").unwrap();
    let delivery = Delivery::unverified_for_tests(payhook_store::DeliveryParts {
        source: legacy,
        received_at_ms: now_ms(),
        parsed: Parsed::Unparseable { event_id: EventId::parse("evt_old").unwrap(), reason: "format bug".into() },
        raw_body: b"{}".to_vec(),
        headers: ReceivedHeaders::new(),
        verification: "hmac (secret #0)".into(),
    });
    assert_eq!(app.store.ingest(delivery).await.unwrap().outcome, Outcome::DeadLettered);

    let reply = post(&app, "/v1/events/legacy/evt_old/replay", json!({})).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.json);
    assert_eq!(reply.json["error"], "source_not_configured");
    assert!(reply.json["message"].as_str().unwrap().contains("\"legacy\""), "{}", reply.json);
    let bulk = post(&app, "/v1/dead-letters/replay", json!({ "filter": { "source": "legacy" } })).await;
    assert_eq!((bulk.status, &bulk.json["error"]), (StatusCode::CONFLICT, &json!("source_not_configured")));
    // Without a source filter it is left alone and counted, and the others are replayed.
    let report = post(&app, "/v1/dead-letters/replay", json!({})).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.json);
    assert_eq!((&report.json["matched"], &report.json["outcomes"]["source_not_configured"]), (&json!(1), &json!(1)));
    let stored = crate::helpers::stored_event(&app.store, "legacy", "evt_old").await.unwrap();
    assert_eq!((stored.status, stored.attempts), (Outcome::DeadLettered, 1));
}

#[tokio::test]
async fn a_bulk_dry_run_reports_what_matches_and_changes_nothing() {
    let app = spawn_with_short_budget(|_| {}).await;
    for i in 0..12 {
        unparseable(&app, i).await;
    }
    dead_letter_for_missing_order(&app, "evt_m1", "ord_m1").await;
    app.register_order("ord_m1", 1999, "usd").await;
    let stats_before = app.stats().await;

    let dry = post(&app, "/v1/dead-letters/replay", json!({ "dry_run": true })).await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.json);
    assert_eq!(
        (&dry.json["dry_run"], &dry.json["matched"], &dry.json["more"]),
        (&json!(true), &json!(13), &json!(false))
    );
    let sample = dry.json["sample"].as_array().unwrap();
    assert_eq!(sample.len(), 10);
    assert_eq!(sample[0]["event_id"], "evt_m1", "newest first");

    let by_reason = json!({ "dry_run": true, "filter": { "reason": "not valid JSON" } });
    assert_eq!(post(&app, "/v1/dead-letters/replay", by_reason).await.json["matched"], 12);
    let by_type = json!({ "dry_run": true, "filter": { "type": "payment.succeeded", "source": "payments" } });
    assert_eq!(post(&app, "/v1/dead-letters/replay", by_type).await.json["matched"], 1);
    let capped = post(&app, "/v1/dead-letters/replay", json!({ "dry_run": true, "max": 5 })).await.json;
    assert_eq!((&capped["matched"], &capped["more"], &capped["max"]), (&json!(5), &json!(true), &json!(5)));
    let later = json!({ "dry_run": true, "filter": { "since": now_ms() + 60_000 } });
    assert_eq!(post(&app, "/v1/dead-letters/replay", later).await.json["matched"], 0);

    assert_eq!(app.stats().await, stats_before);
    assert_eq!(status_of(&app, "evt_m1").await, Outcome::DeadLettered);
    assert_eq!(app.receipts("ord_m1").await, 0);
    for bad in [json!({ "max": 0 }), json!({ "dry_run": "yes" }), json!({ "filter": { "colour": "red" } })] {
        let reply = post(&app, "/v1/dead-letters/replay", bad.clone()).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {}", reply.json);
    }
}

#[tokio::test]
async fn a_bulk_replay_processes_the_matching_dead_letters_within_max_and_the_configured_cap() {
    let app = spawn_with_short_budget(|settings| settings.replay.max_per_call = 2).await;
    for n in 1..=3 {
        dead_letter_for_missing_order(&app, &format!("evt_b{n}"), &format!("ord_b{n}")).await;
        app.register_order(&format!("ord_b{n}"), 1999, "usd").await;
    }
    let unreadable = unparseable(&app, 0).await;
    let filter = json!({ "source": "payments", "type": "payment.succeeded" });

    let first = post(&app, "/v1/dead-letters/replay", json!({ "filter": filter, "max": 1 })).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.json);
    assert_eq!(
        (&first.json["dry_run"], &first.json["matched"], &first.json["more"]),
        (&json!(false), &json!(1), &json!(true))
    );
    assert_eq!(
        (&first.json["outcomes"]["processed"], &first.json["outcomes"]["dead_lettered"]),
        (&json!(1), &json!(0))
    );
    // The oldest of the selection goes first; the selection is the newest matching dead letters.
    assert_eq!(status_of(&app, "evt_b3").await, Outcome::Processed);

    // Asking for 10 is lowered to the configured cap of 2.
    let second = post(&app, "/v1/dead-letters/replay", json!({ "filter": filter, "max": 10 })).await.json;
    assert_eq!(
        (&second["matched"], &second["max"], &second["more"]),
        (&json!(2), &json!(2), &json!(false)),
        "{second}"
    );
    assert_eq!(second["outcomes"]["processed"], 2);
    for n in 1..=3 {
        assert_eq!(status_of(&app, &format!("evt_b{n}")).await, Outcome::Processed);
        assert_eq!(app.receipts(&format!("ord_b{n}")).await, 1);
    }
    assert_eq!(status_of(&app, &unreadable).await, Outcome::DeadLettered, "outside the filter");

    let third = post(&app, "/v1/dead-letters/replay", json!({ "filter": filter })).await.json;
    assert_eq!(third["matched"], 0, "{third}");
    for n in 1..=3 {
        assert_eq!(app.receipts(&format!("ord_b{n}")).await, 1);
    }
}

#[tokio::test]
async fn a_bulk_replay_is_paced_to_the_configured_rate() {
    let app = TestApp::spawn_with(|settings, _| settings.replay.per_second = 20).await;
    for i in 0..5 {
        unparseable(&app, i).await;
    }
    let started = Instant::now();
    let report = post(&app, "/v1/dead-letters/replay", json!({})).await.json;
    let elapsed = started.elapsed();
    // Five replays at 20 per second: the last one starts four intervals of 50 ms after the first.
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert_eq!((&report["matched"], &report["outcomes"]["dead_lettered"]), (&json!(5), &json!(5)), "{report}");
}

fn shop_sink() -> SinkSettings {
    SinkSettings {
        name: "shop".into(),
        url: payhook_server::SecretUrl::parse("http://127.0.0.1:9/receipts").unwrap(),
        kinds: vec!["order.paid".into()],
        signer: None,
        timeout_ms: 1_000,
        max_in_flight: 1,
        transport: payhook_server::SinkTransport::Http,
        order: payhook_store::KeyOrder::default(),
        rate: None,
        filter: Default::default(),
    }
}

#[tokio::test]
async fn the_outbox_is_listed_with_filters_and_a_dead_row_is_requeued_once_with_a_fresh_budget() {
    let app = TestApp::spawn_with(|settings, _| settings.sinks = vec![shop_sink()]).await;
    for order in ["ord_o1", "ord_o2"] {
        app.register_order(order, 1999, "usd").await;
        let (_, body) = app.deliver("payments", &event(&format!("evt_{order}"), Pay, order, 1999)).await;
        assert_eq!(body["status"], "processed", "{body}");
    }
    let listed = get(&app, "/v1/outbox").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.json);
    let rows = listed.json["outbox"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 2, "{}", listed.json);
    assert_eq!(
        (&rows[0]["order_id"], &rows[0]["sink"], &rows[0]["status"]),
        (&json!("ord_o2"), &json!("shop"), &json!("pending"))
    );
    let id_of = |order: &str| rows.iter().find(|r| r["order_id"] == order).unwrap()["id"].as_i64().unwrap();
    let (dead_id, delivered_id) = (id_of("ord_o1"), id_of("ord_o2"));

    let count = |q: &'static str| {
        let app = &app;
        async move { get(app, &format!("/v1/outbox?{q}")).await.json["outbox"].as_array().unwrap().len() }
    };
    assert_eq!(count("order_id=ord_o1").await, 1);
    assert_eq!(count("kind=order.paid&sink=shop&status=pending").await, 2);
    assert_eq!(count("kind=order.refunded").await, 0);
    let page = get(&app, "/v1/outbox?limit=1").await.json;
    assert_eq!(page["next_cursor"], json!(delivered_id), "{page}");
    assert_eq!(get(&app, &format!("/v1/outbox?before={delivered_id}")).await.json["outbox"][0]["id"], json!(dead_id));
    assert_eq!(get(&app, "/v1/outbox?status=lost").await.status, StatusCode::UNPROCESSABLE_ENTITY);

    // One row dies at the sink, the other is delivered.
    let claim = Claim { now_ms: now_ms(), lease_ms: 60_000, limit: 10, owner: "test".into() };
    let jobs = app.store.claim_outbox("shop", claim.clone()).await.unwrap();
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        let outcome = if job.id == dead_id {
            Dispatched::Dead { status: Some(500), error: "the sink answered 500".into() }
        } else {
            Dispatched::Delivered { status: 200 }
        };
        assert!(app.store.finish_outbox(job, outcome, now_ms()).await.unwrap());
    }
    let dead = get(&app, "/v1/outbox?status=dead").await.json;
    assert_eq!(dead["outbox"][0]["id"], json!(dead_id), "{dead}");
    assert_eq!(dead["outbox"][0]["attempts"], 1);

    let retried = post(&app, &format!("/v1/outbox/{dead_id}/retry"), json!({})).await;
    assert_eq!(retried.status, StatusCode::OK, "{}", retried.json);
    assert_eq!(
        (&retried.json["id"], &retried.json["status"], &retried.json["attempts"]),
        (&json!(dead_id), &json!("pending"), &json!(0))
    );

    for (id, status) in [(dead_id, "pending"), (delivered_id, "delivered")] {
        let reply = post(&app, &format!("/v1/outbox/{id}/retry"), json!({})).await;
        assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.json);
        assert_eq!((&reply.json["error"], &reply.json["status"]), (&json!("not_dead"), &json!(status)));
    }
    let unknown = post(&app, "/v1/outbox/987654/retry", json!({})).await;
    assert_eq!((unknown.status, &unknown.json["error"]), (StatusCode::NOT_FOUND, &json!("not_found")));
    assert_eq!(post(&app, "/v1/outbox/abc/retry", json!({})).await.status, StatusCode::UNPROCESSABLE_ENTITY);

    // The re-queued row is due again; the delivered one is not sent twice.
    let again = app.store.claim_outbox("shop", Claim { now_ms: now_ms(), ..claim }).await.unwrap();
    assert_eq!(again.iter().map(|j| (j.id, j.attempts)).collect::<Vec<_>>(), [(dead_id, 0)]);
}

#[tokio::test]
async fn stats_count_events_orders_and_outbox_rows_by_status_and_age_the_oldest_waiting_work() {
    let app = TestApp::spawn().await;
    app.register_order("ord_s1", 1999, "usd").await;
    app.register_order("ord_s2", 1999, "usd").await;
    app.deliver("payments", &event("evt_s1", Pay, "ord_s1", 1999)).await;
    app.deliver("payments", &event("evt_s1", Pay, "ord_s1", 1999)).await;
    app.deliver("payments", &event("evt_s9", Pay, "ord_s9", 1999)).await;
    unparseable(&app, 1).await;

    let reply = get(&app, "/v1/stats").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    let s = &reply.json;
    assert_eq!(
        s["events"],
        json!({ "processed": 1, "duplicate": 0, "deferred": 1, "ignored": 0, "dead_lettered": 1 }),
        "a duplicate by event id is not a row of its own"
    );
    assert_eq!(s["orders"], json!({ "pending": 1, "paid": 1, "failed": 0, "refunded": 0, "disputed": 0 }));
    assert_eq!(s["outbox"]["by_kind"], json!({ "order.paid": 1 }));
    assert_eq!(s["outbox"]["by_status"], json!({ "pending": 0, "delivered": 0, "dead": 0, "unrouted": 1 }));
    assert_eq!(s["oldest_pending_outbox_age_secs"], Value::Null);
    let age = s["oldest_deferred_event_age_secs"].as_i64().unwrap();
    assert!((0..60).contains(&age), "{s}");
}

/// Replaying every dead letter takes `{}`, said on purpose: an empty body (a client that forgot it) is refused and
/// replays nothing.
#[tokio::test]
async fn a_bulk_replay_without_a_body_is_refused_and_replays_nothing() {
    let app = spawn_with_short_budget(|_| {}).await;
    dead_letter_for_missing_order(&app, "evt_nb", "ord_nb").await;
    for body in ["", "  \n"] {
        let reply = app.api_post("/v1/dead-letters/replay", body.to_owned()).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", reply.json);
        assert!(reply.json["message"].as_str().unwrap().contains("a JSON body is required"), "{}", reply.json);
    }
    let stored = crate::helpers::stored_event(&app.store, "payments", "evt_nb").await.unwrap();
    assert_eq!((stored.status, stored.attempts), (Outcome::DeadLettered, 2), "left as it was");
    let dry = post(&app, "/v1/dead-letters/replay", json!({ "dry_run": true, "max": 10.0 })).await;
    assert_eq!((dry.status, &dry.json["matched"]), (StatusCode::OK, &json!(1)), "{}", dry.json);
}

/// `GET /v1/dead-letters` documents `status` as `dead_lettered` only; any other status is refused.
#[tokio::test]
async fn the_dead_letter_listing_takes_only_the_dead_lettered_status() {
    let app = TestApp::spawn().await;
    assert_eq!(get(&app, "/v1/dead-letters?status=dead_lettered").await.status, StatusCode::OK);
    assert_eq!(get(&app, "/v1/dead-letters?status=processed").await.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(get(&app, "/v1/dead-letters?limit=0").await.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn every_json_route_refuses_a_body_that_is_not_one_object_of_its_fields_with_422_and_does_nothing() {
    let app = TestApp::spawn_with(|settings, _| settings.sinks = vec![shop_sink()]).await;
    // A dead letter, and a dead outbox row: what the replay and retry routes would change.
    let dead_letter = unparseable(&app, 1).await;
    app.register_order("ord_j1", 1999, "usd").await;
    let (_, body) = app.deliver("payments", &event("evt_j1", Pay, "ord_j1", 1999)).await;
    assert_eq!(body["status"], "processed", "{body}");
    let claim = Claim { now_ms: now_ms(), lease_ms: 60_000, limit: 10, owner: "test".into() };
    let jobs = app.store.claim_outbox("shop", claim).await.unwrap();
    let dead = Dispatched::Dead { status: Some(500), error: "the sink answered 500".into() };
    assert!(app.store.finish_outbox(&jobs[0], dead, now_ms()).await.unwrap());
    let outbox_id = jobs[0].id;

    let routes = [
        "/v1/orders".to_owned(),
        "/v1/dead-letters/replay".to_owned(),
        format!("/v1/events/payments/{dead_letter}/replay"),
        format!("/v1/outbox/{outbox_id}/retry"),
        "/v1/reload".to_owned(),
    ];
    let refused = [
        ("[]", "not an array"),
        ("\"x\"", "not a string"),
        ("null", "not null"),
        ("{\"unknown\": 1}", "unknown field `unknown`"),
    ];
    for route in &routes {
        for (body, says) in refused {
            let reply = app.api_post(route, body.to_owned()).await;
            assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{route} {body}: {}", reply.json);
            assert_eq!(reply.json["error"], "invalid_request", "{route} {body}: {}", reply.json);
            let message = reply.json["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{route} {body}: {message:?} does not say {says:?}");
        }
    }
    // What serde would read from an array of fields, or a filter of the wrong type, is refused as well.
    for (route, body) in [
        ("/v1/orders", r#"["ord_j2", 1999, "usd"]"#),
        ("/v1/orders", r#"{"id": "ord_j2", "amount": 1999, "currency": "usd", "note": "x"}"#),
        ("/v1/dead-letters/replay", r#"{"filter": []}"#),
        ("/v1/dead-letters/replay", r#"{"filter": {"source": "payments", "unknown": 1}}"#),
        ("/v1/dead-letters/replay", r#"{"dry_run": "yes"}"#),
    ] {
        let reply = app.api_post(route, body.to_owned()).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{route} {body}: {}", reply.json);
    }

    // Nothing happened: the dead letter and the outbox row are still dead, no order was registered.
    assert_eq!(status_of(&app, &dead_letter).await, Outcome::DeadLettered);
    let row = get(&app, "/v1/outbox?status=dead&order_id=ord_j1").await.json;
    assert_eq!(row["outbox"][0]["id"], json!(outbox_id), "{row}");
    assert_eq!(get(&app, "/v1/orders/ord_j2").await.status, StatusCode::NOT_FOUND);
    assert_eq!(app.stats().await.orders.iter().map(|(_, n)| n).sum::<u64>(), 1);

    // The routes without a body take none, or `{}`, as before.
    let reply = app.client.post(app.url(&format!("/v1/outbox/{outbox_id}/retry"))).bearer_auth(API_TOKEN).send();
    assert_eq!(read_json(reply.await.unwrap()).await.status, StatusCode::OK);
    let reply = post(&app, &format!("/v1/events/payments/{dead_letter}/replay"), json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    let reply = post(&app, "/v1/reload", json!({})).await;
    assert_eq!((reply.status, &reply.json["error"]), (StatusCode::CONFLICT, &json!("reload_unavailable")));
}
