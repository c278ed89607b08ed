//! Sink and alert URLs carry secrets (a Slack webhook's path, `?token=…`, `user:password@`). With a token planted
//! in every such URL and every endpoint failing, the token appears nowhere an operator or a log collector can read
//! it: text and JSON logs, `config check`, the API, the dashboard and the alerts themselves; the redacted form
//! (scheme, host, port, first path segment) does, so the checks cannot pass by showing nothing.

use crate::helpers::{AMOUNT, API_TOKEN, Recorder, SOURCE, Server, TestDir, free_port, payment, post, text};
use serde_json::Value;
use std::time::{Duration, Instant};

const PLANTED: &str = "s3cr3t-PLANTED-token";

/// `GET` on the API with the token, as text.
async fn api(server: &Server, path: &str) -> String {
    let resp = server.client.get(server.url(path)).bearer_auth(API_TOKEN).send().await.expect("GET /v1");
    assert_eq!(resp.status().as_u16(), 200, "GET {path}");
    resp.text().await.expect("body")
}

/// The outbox as the API lists it.
async fn outbox(server: &Server) -> Vec<Value> {
    let page: Value = serde_json::from_str(&api(server, "/v1/outbox?limit=500").await).expect("JSON");
    page["outbox"].as_array().expect("outbox rows").clone()
}

/// Waits until `done` holds for the outbox (at most 20 s).
async fn until_outbox(server: &Server, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = outbox(server).await;
        if done(&rows) {
            return rows;
        }
        assert!(Instant::now() < deadline, "{what}: never happened; outbox {rows:?}\nlog:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rows_of<'a>(rows: &'a [Value], sink: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    rows.iter().filter(move |r| r["sink"] == sink)
}

/// Registers `order` and delivers its payment.
async fn pay(server: &Server, order: &str) -> String {
    let (status, answer) = server.register_order(order, AMOUNT).await;
    assert_eq!(status.as_u16(), 201, "{answer}");
    let event_id = format!("evt_{order}");
    let (status, answer) = post(&server.client, &server.webhook_url(), &payment(&event_id, order)).await.unwrap();
    assert_eq!((status.as_u16(), answer["status"].as_str()), (200, Some("processed")), "{answer}");
    event_id
}

/// What the API and the dashboard show of the outbox, the event and the order, as one text.
async fn shown_to_the_operator(server: &Server, event_id: &str, order: &str) -> String {
    let mut shown = String::new();
    for path in
        ["/v1/outbox?limit=500".to_owned(), format!("/v1/events/{SOURCE}/{event_id}"), format!("/v1/orders/{order}")]
    {
        shown.push_str(&api(server, &path).await);
    }
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let login = client.post(server.url("/ui/login")).form(&[("token", API_TOKEN)]).send().await.expect("log in");
    assert_eq!(login.status().as_u16(), 303, "logging in to the dashboard");
    let cookie = login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    for path in ["/ui/outbox".to_owned(), format!("/ui/events/{SOURCE}/{event_id}"), format!("/ui/orders?id={order}")] {
        let page = client.get(server.url(&path)).header("cookie", &cookie).send().await.expect("GET /ui");
        assert_eq!(page.status().as_u16(), 200, "GET {path}");
        shown.push_str(&page.text().await.expect("page"));
    }
    shown
}

fn never_shown(place: &str, text: &str) {
    assert!(!text.contains(PLANTED), "the planted secret is in {place}:\n{text}");
}

fn shown(place: &str, text: &str, redacted: &str) {
    assert!(text.contains(redacted), "{redacted} is not in {place}:\n{text}");
}

#[tokio::test]
async fn secrets_in_failing_sink_urls_stay_out_of_text_logs_config_check_answers_pages_and_alerts() {
    let dir = TestDir::new();
    let failing = Recorder::start(500).await;
    let alerts = Recorder::start(200).await;
    let refused = free_port();
    let extra = format!(
        r#"
[dispatcher]
poll_interval_ms = 20

[dispatcher.retry]
max_attempts = 1

[alerts]
url = "http://alerter:{PLANTED}@{alerts}/services/T0/B0/{PLANTED}"
gather_secs = 0
timeout_ms = 2000

[[sinks]]
name = "failing"
url = "http://user:{PLANTED}@{failing}/hooks/{PLANTED}?token={PLANTED}"
kinds = ["order.paid"]
timeout_ms = 2000

[[sinks]]
name = "refused"
url = "http://127.0.0.1:{refused}/hooks/{PLANTED}?token={PLANTED}#{PLANTED}"
kinds = ["order.paid"]
timeout_ms = 2000

[[sinks]]
name = "unresolvable"
url = "https://payhook-test.invalid/{PLANTED}/in?token={PLANTED}"
kinds = ["order.paid"]
timeout_ms = 2000
"#,
        alerts = alerts.addr,
        failing = failing.addr,
    );
    let server = Server::start_with(&dir, &extra).await;

    let check = dir.run(&["--config", server.config.to_str().unwrap(), "config", "check"]);
    let output = format!("{}{}", text(&check.stdout), text(&check.stderr));
    assert!(check.status.success(), "{output}");
    never_shown("config check", &output);
    shown("config check", &output, &format!("http://{}/hooks/…", failing.addr));
    shown("config check", &output, &format!("http://{}/services/…", alerts.addr));

    let event_id = pay(&server, "ord_secret").await;
    let rows = until_outbox(&server, "three dead rows and their three alerts delivered", |rows| {
        ["failing", "refused", "unresolvable"].iter().all(|s| rows_of(rows, s).any(|r| r["status"] == "dead"))
            && rows_of(rows, "_alerts").filter(|r| r["status"] == "delivered").count() == 3
    })
    .await;
    for (sink, start) in [
        ("failing", format!("500 Internal Server Error from http://{}/hooks/…", failing.addr)),
        ("refused", format!("request to http://127.0.0.1:{refused}/hooks/… failed: ")),
        ("unresolvable", "request to https://payhook-test.invalid/… failed: ".to_owned()),
    ] {
        let error = rows_of(&rows, sink).next().unwrap()["last_error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains(&start), "{sink}: {error:?} does not say {start:?}");
    }

    let received = alerts.bodies().join("\n");
    never_shown("the alerts", &received);
    shown("the alerts", &received, &format!("http://{}/hooks/…", failing.addr));
    shown("the alerts", &received, "https://payhook-test.invalid/…");
    shown("the alerts", &received, &format!("http://127.0.0.1:{refused}/hooks/…"));

    let operator = shown_to_the_operator(&server, &event_id, "ord_secret").await;
    never_shown("the API and the dashboard", &operator);
    shown("the API and the dashboard", &operator, &format!("http://{}/hooks/…", failing.addr));
    shown("the API and the dashboard", &operator, "https://payhook-test.invalid/…");

    let log = server.log();
    never_shown("the log", &log);
    shown("the log", &log, &format!("http://127.0.0.1:{refused}/hooks/…"));
    shown("the log", &log, "https://payhook-test.invalid/…");
    server.stop();
}

#[tokio::test]
async fn a_secret_in_a_failing_alert_url_stays_out_of_json_logs_and_answers() {
    let dir = TestDir::new();
    let sink = Recorder::start(400).await;
    let refused = free_port();
    let extra = format!(
        r#"
[log]
format = "json"

[dispatcher]
poll_interval_ms = 20

[alerts]
url = "http://alerter:{PLANTED}@127.0.0.1:{refused}/services/T0/B0/{PLANTED}?token={PLANTED}"
gather_secs = 0
timeout_ms = 2000

[[sinks]]
name = "shop"
url = "http://{sink}/hooks/{PLANTED}?token={PLANTED}"
kinds = ["order.paid"]
timeout_ms = 2000
"#,
        sink = sink.addr,
    );
    let server = Server::start_with(&dir, &extra).await;
    let event_id = pay(&server, "ord_alert").await;
    let rows = until_outbox(&server, "the alert tried and failed", |rows| {
        rows_of(rows, "_alerts").any(|r| r["last_error"].is_string())
    })
    .await;
    let error = rows_of(&rows, "_alerts").next().unwrap()["last_error"].as_str().unwrap().to_owned();
    assert!(error.starts_with(&format!("request to http://127.0.0.1:{refused}/services/… failed: ")), "{error}");
    never_shown("the alert's error", &error);

    let operator = shown_to_the_operator(&server, &event_id, "ord_alert").await;
    never_shown("the API and the dashboard", &operator);
    shown("the API and the dashboard", &operator, &format!("http://127.0.0.1:{refused}/services/…"));

    let log = server.log();
    for line in log.lines().filter(|l| l.starts_with('{')) {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
    }
    never_shown("the JSON log", &log);
    shown("the JSON log", &log, &format!("http://127.0.0.1:{refused}/services/…"));
    shown("the JSON log", &log, &format!("http://{}/hooks/…", sink.addr));
    server.stop();
}
