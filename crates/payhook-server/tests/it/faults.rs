//! Storage failures: a 2xx only after a commit, a 503 with Retry-After and nothing stored otherwise.

use crate::helpers::{Reply, TestApp, event, now_secs};
use payhook_core::event::OrderAction::Pay;
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;

fn sql(app: &TestApp, statement: &str) {
    let conn = rusqlite::Connection::open(&app.db_path).expect("open the test database");
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch(statement).expect(statement);
}

fn assert_retry_later(reply: &Reply) {
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{}", reply.json);
    let retry_after = reply.headers.get("retry-after").and_then(|v| v.to_str().ok());
    assert!(retry_after.is_some_and(|v| v.parse::<u64>().is_ok()), "Retry-After: {retry_after:?}");
    assert!(reply.json["error"].is_string() && reply.json["message"].is_string(), "{}", reply.json);
}

#[tokio::test]
async fn a_failure_between_the_effect_and_the_commit_answers_503_and_stores_nothing_of_the_event() {
    let app = TestApp::spawn().await;
    app.register_order("ord_f", 300, "usd").await;
    let body = app.encode("payments", &event("evt_f", Pay, "ord_f", 300));
    let headers = app.sign("payments", &body, now_secs());

    // An index whose expression overflows for every outbox row: the insert fails inside SQLite. (payhook's writer
    // fires no triggers, so a trigger would not stop it.)
    sql(&app, "CREATE INDEX fail_outbox ON outbox (abs(-9223372036854775807 - 1 + 0 * length(kind)));");
    let reply = app.post_raw("payments", &headers, body.clone()).await;
    assert_retry_later(&reply);
    assert_eq!(reply.json["error"], "storage_unavailable");
    assert!(!reply.json.to_string().contains("overflow"), "internal causes are not sent: {}", reply.json);

    let order = app.order("ord_f").await;
    assert_eq!((&order["status"], &order["history"], &order["outbox"]), (&json!("pending"), &json!([]), &json!([])));
    assert!(app.event("payments", "evt_f").await.is_none());
    assert_eq!(app.inbox_rows().await, 0);

    sql(&app, "DROP INDEX fail_outbox;");
    let reply = app.post_raw("payments", &headers, body).await;
    assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("processed")), "{}", reply.json);
    assert_eq!(app.order("ord_f").await["status"], "paid");
    assert_eq!(app.receipts("ord_f").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_write_queue_is_full_deliveries_get_503_and_every_200_is_durable() {
    let app = TestApp::spawn_with(|_, storage| {
        storage.queue_depth = 1;
        storage.batch_max = 1;
    })
    .await;
    let ids: Vec<String> = (0..200).map(|i| format!("evt_load_{i}")).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for id in &ids {
        let body = app.encode("payments", &event(id, Pay, &format!("ord_{id}"), 100));
        let headers = app.sign("payments", &body, now_secs());
        let (client, url, id) = (app.client.clone(), app.url("/webhooks/payments"), id.clone());
        tasks.spawn(async move {
            let mut req = client.post(url).body(body.clone());
            for (k, v) in &headers {
                req = req.header(k.as_str(), v.as_str());
            }
            (id, body, headers, crate::helpers::read_json(req.send().await.expect("POST")).await)
        });
    }
    let mut refused = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (id, body, headers, reply) = joined.unwrap();
        if reply.status == StatusCode::OK {
            assert_eq!(reply.json["status"], "deferred", "{}", reply.json);
            assert!(app.event("payments", &id).await.is_some(), "{id} was answered 200 but is not stored");
        } else {
            assert_retry_later(&reply);
            assert_eq!(reply.json["error"], "overloaded");
            assert!(app.event("payments", &id).await.is_none(), "{id} was answered 503 but is stored");
            refused.push((id, body, headers));
        }
    }
    eprintln!("{} of 200 deliveries were shed", refused.len());

    // The provider retries what was refused; one at a time, each gets through.
    for (id, body, headers) in refused {
        let reply = app.post_raw("payments", &headers, body).await;
        assert_eq!((reply.status, &reply.json["status"]), (StatusCode::OK, &json!("deferred")), "{id}");
    }
    assert_eq!(app.inbox_rows().await, 200);
}
