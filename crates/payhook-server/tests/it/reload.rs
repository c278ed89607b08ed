//! Reloading the configuration in process (`AppState::apply`): a request runs under the configuration it started
//! with, new requests under the new one, and counters survive.

use crate::helpers::{TestApp, event, now_secs, read_raw_reply, request_head, verifier};
use payhook_core::event::OrderAction::Pay;
use payhook_core::signature::{Secret, Verifier};
use payhook_server::{Reloaded, Settings};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

const NEW_SECRET: &str = "payments-rotated-secret";

fn reloaded(settings: Settings, changed_sources: &[&str]) -> Reloaded {
    Reloaded {
        settings,
        changed_sources: changed_sources.iter().map(|s| (*s).to_owned()).collect(),
        changed_sinks: Vec::new(),
        alerts_changed: false,
    }
}

/// `payments` keyed with `NEW_SECRET` alone, and `stripe` removed.
fn rotated(app: &TestApp) -> Settings {
    let mut settings = app.settings.clone();
    settings.sources.retain(|s| s.name.as_str() != "stripe");
    let payments = settings.sources.iter_mut().find(|s| s.name.as_str() == "payments").unwrap();
    payments.verifier = Verifier::new(payments.verifier.scheme().clone(), &[Secret::new(NEW_SECRET)], 300).unwrap();
    settings
}

#[tokio::test]
async fn a_request_in_flight_during_a_reload_finishes_under_the_configuration_it_started_with() {
    let app = TestApp::spawn().await;
    let body = app.encode("payments", &event("evt_inflight", Pay, "ord_inflight", 100));
    let headers = app.sign("payments", &body, now_secs());
    // The head and half of the body, then the reload, then the rest: the handler took its configuration when the
    // head arrived, so the old secret still verifies this request.
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head = request_head(app.addr, "payments", &headers, &format!("Content-Length: {}", body.len()));
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..body.len() / 2]).await.unwrap();
    // Time for the server to read the head (half a second: room for a loaded machine).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = app.running.state.apply(reloaded(rotated(&app), &["payments"]));
    assert_eq!((report.generation, report.sources_changed.clone()), (1, vec!["payments".to_owned()]));
    assert_eq!(report.sources_removed, ["stripe"]);
    stream.write_all(&body[body.len() / 2..]).await.unwrap();
    let reply = read_raw_reply(&mut stream).await;
    assert_eq!(reply.status, 200, "{}", reply.body);

    // New requests run under the new configuration: the old secret is refused, the new one accepted, the removed
    // source is gone.
    let body = app.encode("payments", &event("evt_after", Pay, "ord_after", 100));
    let old = app.post_raw("payments", &app.sign("payments", &body, now_secs()), body.clone()).await;
    assert_eq!((old.status.as_u16(), old.json["error"].as_str()), (401, Some("mismatch")), "{}", old.json);
    let signed = verifier("payments", NEW_SECRET).sign(&body, now_secs(), "msg_after");
    let new = app.post_raw("payments", &signed, body).await;
    assert_eq!(new.status.as_u16(), 200, "{}", new.json);
    let (status, answer) = app.deliver("stripe", &event("evt_gone", Pay, "ord_gone", 100)).await;
    assert_eq!((status.as_u16(), answer["error"].as_str()), (404, Some("not_found")), "{answer}");

    // The counters of the source that stayed went on; the new generation is on /metrics.
    let payments = app.running.state.source("payments").unwrap();
    assert_eq!(payments.metrics.verification_failures(), 1);
    assert_eq!(payments.metrics.outcome_count(payhook_store::Outcome::Deferred), 2);
    let (_, metrics) = app.get_text_authorized("/metrics").await;
    assert!(metrics.contains("payhook_config_generation 1\n"), "{metrics}");
    assert!(metrics.contains("payhook_config_reloads_total{outcome=\"ok\"} 1\n"), "{metrics}");
    assert!(!metrics.contains("source=\"stripe\""), "a removed source's counters are not rendered");
}

#[tokio::test]
async fn without_a_configuration_file_a_reload_is_answered_409_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let reply = app.api_post("/v1/reload", String::new()).await;
    assert_eq!((reply.status.as_u16(), reply.json["error"].as_str()), (409, Some("reload_unavailable")));
    let (_, metrics) = app.get_text_authorized("/metrics").await;
    assert!(metrics.contains("payhook_config_generation 0\n"), "{metrics}");
}
