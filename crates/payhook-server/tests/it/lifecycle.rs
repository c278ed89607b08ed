//! Health, metrics and graceful shutdown.

use crate::helpers::{API_TOKEN, TestApp, event, now_secs, read_json, read_raw_reply, request_head, stored_event};
use payhook_core::event::OrderAction::Pay;
use reqwest::StatusCode;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[tokio::test]
async fn health_readiness_and_metrics_report_deliveries_and_verification_failures() {
    let app = TestApp::spawn().await;
    assert_eq!(app.get_text("/healthz").await.0, StatusCode::OK);
    assert_eq!(app.get_text("/readyz").await.0, StatusCode::OK);

    app.register_order("ord_1", 100, "usd").await;
    app.register_order("ord_2", 100, "usd").await;
    let first = event("evt_1", Pay, "ord_1", 100);
    app.deliver("payments", &first).await;
    app.deliver("payments", &first).await;
    app.deliver("payments", &event("evt_2", Pay, "ord_2", 100)).await;
    app.deliver("payments", &event("evt_3", Pay, "ord_3", 100)).await;
    let body = app.encode("payments", &event("evt_4", Pay, "ord_1", 100));
    app.post_raw("payments", &[("x-webhook-signature".into(), "00".repeat(32))], body.clone()).await;
    app.post_raw("payments", &[], body).await;
    let body = app.encode("stripe", &event("evt_5", Pay, "ord_1", 100));
    app.post_raw("stripe", &app.sign("stripe", &body, now_secs() - 3600), body).await;

    let (status, text) = app.get_text_authorized("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!text.contains("payhook_postgres_sync_standbys"), "SQLite has no standbys to count");
    let value = |series: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value(r#"payhook_deliveries_total{source="payments",outcome="processed"}"#), 2);
    assert_eq!(value(r#"payhook_deliveries_total{source="payments",outcome="duplicate"}"#), 1);
    assert_eq!(value(r#"payhook_deliveries_total{source="payments",outcome="deferred"}"#), 1);
    assert_eq!(value(r#"payhook_deliveries_total{source="stripe",outcome="processed"}"#), 0);
    assert_eq!(value(r#"payhook_verification_failures_total{source="payments",reason="mismatch"}"#), 1);
    assert_eq!(value(r#"payhook_verification_failures_total{source="payments",reason="missing_header"}"#), 1);
    assert_eq!(value(r#"payhook_verification_failures_total{source="stripe",reason="stale"}"#), 1);
    assert_eq!(value(r#"payhook_verification_failures_total{source="standard",reason="mismatch"}"#), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_at_shutdown_is_finished_committed_and_answered() {
    let app = TestApp::spawn().await;
    app.register_order("ord_sd", 100, "usd").await;
    let body = app.encode("payments", &event("evt_sd", Pay, "ord_sd", 100));
    let headers = app.sign("payments", &body, now_secs());
    let head = request_head(app.addr, "payments", &headers, &format!("Content-Length: {}", body.len()));
    let (first, rest) = body.split_at(body.len() / 2);

    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(first).await.unwrap();
    // Let the server parse the head and start reading the body (a second: room for a loaded machine).
    tokio::time::sleep(Duration::from_secs(1)).await;

    let TestApp { running, .. } = app;
    let shutdown = tokio::spawn(running.shutdown());
    // Once new connections are no longer served, the shutdown is under way; it must still wait for the request.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while app.client.get(format!("{}/healthz", app.base_url)).send().await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "still serving new connections 10 s after shutdown began");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!shutdown.is_finished(), "shutdown must wait for the request in flight");

    stream.write_all(rest).await.unwrap();
    let reply = read_raw_reply(&mut stream).await;
    assert_eq!(reply.status, 200, "{}\n{}", reply.head, reply.body);
    assert_eq!(reply.json()["status"], "processed");
    shutdown.await.unwrap().expect("clean shutdown");
    assert!(stored_event(&app.store, "payments", "evt_sd").await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_delivery_answered_200_around_a_shutdown_is_in_the_store() {
    let app = TestApp::spawn().await;
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..64 {
        let id = format!("evt_{i}");
        let body = app.encode("payments", &event(&id, Pay, &format!("ord_{i}"), 100));
        let headers = app.sign("payments", &body, now_secs());
        let (client, url, done) = (app.client.clone(), app.url("/webhooks/payments"), done_tx.clone());
        tokio::spawn(async move {
            let mut req = client.post(url).body(body);
            for (k, v) in &headers {
                req = req.header(k.as_str(), v.as_str());
            }
            let _ = done.send((id, req.send().await.map(|r| r.status())));
        });
    }
    drop(done_tx);
    // Shut down as soon as the first answer is back, while the others are still on their way.
    let first = done_rx.recv().await.expect("a first answer");
    let TestApp { running, .. } = app;
    running.shutdown().await.expect("clean shutdown");

    let mut results = vec![first];
    while let Some(result) = done_rx.recv().await {
        results.push(result);
    }
    assert_eq!(results.len(), 64);
    let mut answered = 0;
    for (id, result) in results {
        match result {
            Ok(StatusCode::OK) => {
                answered += 1;
                assert!(stored_event(&app.store, "payments", &id).await.is_some(), "{id} answered 200, not stored");
            }
            Ok(other) => panic!("{id} was answered {other}"),
            // Never served (the listener had stopped): the provider retries it.
            Err(_) => {}
        }
    }
    assert!(answered >= 1);
    eprintln!("{answered} of 64 deliveries were answered 200 around the shutdown");
}

#[tokio::test]
async fn readiness_names_each_part_and_fails_once_the_writer_has_stopped() {
    // No sinks: the dispatcher idles, and is running all the same.
    let app = TestApp::spawn_with(|s, _| {
        s.worker.enabled = true;
        s.dispatcher.enabled = true;
    })
    .await;
    // Each part is named to the operator (the API token); anyone else learns only whether it is ready.
    let readyz = || app.client.get(app.url("/readyz")).bearer_auth(API_TOKEN).send();
    let reply = read_json(readyz().await.unwrap()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
    // SQLite has no replication: the part is null, and never what makes it not ready.
    assert_eq!(
        reply.json,
        serde_json::json!({
            "status": "ready", "database": "ok", "writer": "ok", "worker": "ok", "dispatcher": "ok", "replication": null
        })
    );

    // The writer stops (as at the end of a shutdown, or if its thread died): writes would be refused.
    app.store.shutdown().await;
    let reply = read_json(readyz().await.unwrap()).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{}", reply.json);
    assert_eq!((&reply.json["status"], &reply.json["writer"]), (&"not_ready".into(), &"stopped".into()));
    assert_eq!(reply.json["database"], "ok");
    // The process is still up.
    assert_eq!(app.get_text("/healthz").await, (StatusCode::OK, "ok".to_owned()));
}
