//! The API token under attack, over real sockets: failures are throttled per client address (the peer, or the
//! `X-Forwarded-For` a trusted proxy wrote), on `/v1` and the dashboard's login alike, other addresses go on
//! unhindered, and every failure is logged with the client's address and never with what was submitted.
//!
//! Clients bind their socket to a chosen loopback address (`127.0.0.1`, `127.0.0.2`) before connecting: Linux
//! routes all of 127/8 to the loopback interface, so payhook, listening on 127.0.0.1, sees two peers.

use crate::helpers::{API_TOKEN, TestApp};
use payhook_server::IpRange;
use reqwest::StatusCode;
use reqwest::header::{RETRY_AFTER, SET_COOKIE, WWW_AUTHENTICATE};
use serde_json::Value;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A client whose connections come from `local`, showing redirects instead of following them.
fn client_from(local: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(local))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// The log lines of `payhook_server::runtime::auth` (DEBUG and up) written on this thread while it lives, as JSON objects.
/// A `#[tokio::test]` runs on one thread, the server's tasks included, so they are all here.
///
/// Captures are taken one at a time, and the callsites' interest is rebuilt once the subscriber is in place: a
/// callsite whose interest another thread is computing at that moment could otherwise miss this subscriber.
struct Logs {
    buf: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static CAPTURING: Mutex<()> = Mutex::new(());

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> Self {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(Arc::clone(&buf));
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("payhook_server::runtime::auth=debug"))
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(move || sink.clone())
            .finish();
        let one_at_a_time = CAPTURING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        Self { buf, _guard: guard, _one_at_a_time: one_at_a_time }
    }

    fn text(&self) -> String {
        String::from_utf8(self.buf.lock().unwrap().clone()).expect("UTF-8 logs")
    }

    fn lines(&self) -> Vec<Value> {
        self.text().lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
    }

    /// The lines about `client` at `level` with `reason`.
    fn count(&self, client: &str, level: &str, reason: &str) -> usize {
        self.lines().iter().filter(|l| l["client"] == client && l["level"] == level && l["reason"] == reason).count()
    }
}

/// A metric's sample value in `/metrics`, read with the token from an address of its own (127.0.0.3), which no
/// test throttles.
async fn metric(app: &TestApp, series: &str) -> u64 {
    let operator =
        reqwest::Client::builder().local_address("127.0.0.3".parse::<std::net::IpAddr>().unwrap()).build().unwrap();
    let resp = operator.get(app.url("/metrics")).bearer_auth(API_TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::OK, "GET /metrics");
    let text = resp.text().await.unwrap();
    let line = text.lines().find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')));
    let value = line.unwrap_or_else(|| panic!("no {series} in\n{text}")).rsplit(' ').next().unwrap();
    value.parse().unwrap_or_else(|_| panic!("{series}: {value}"))
}

async fn json(resp: reqwest::Response) -> Value {
    resp.json().await.expect("a JSON body")
}

/// Checks a 429 of `/v1`: `Retry-After` within one refill (6 s at 10 a minute) and the JSON error.
async fn assert_throttled(resp: reqwest::Response) {
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = resp.headers()[RETRY_AFTER].to_str().unwrap().parse().unwrap();
    assert!((1..=6).contains(&retry_after), "Retry-After {retry_after}");
    let body = json(resp).await;
    assert_eq!(body["error"], "too_many_auth_failures", "{body}");
    assert!(body["message"].as_str().unwrap().contains(&format!("retry in {retry_after} s")), "{body}");
}

#[tokio::test]
async fn wrong_tokens_from_one_address_are_throttled_while_another_address_is_not() {
    let logs = Logs::capture();
    let app = TestApp::spawn().await;
    let (attacker, other) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    let url = app.url("/v1/stats");

    let started = Instant::now();
    let mut statuses = Vec::new();
    for i in 0..100 {
        let resp = attacker.get(&url).bearer_auth(format!("guess-{i:03}-0123456789abcdefghij")).send().await.unwrap();
        statuses.push(resp.status());
        if resp.status() == StatusCode::UNAUTHORIZED {
            assert_eq!(resp.headers()[WWW_AUTHENTICATE], "Bearer");
            assert_eq!(json(resp).await["error"], "missing_token");
        } else {
            assert_throttled(resp).await;
        }
    }
    // Ten in a row are answered 401; then 429, but for the one failure regained every 6 s of the run.
    let refilled = (started.elapsed().as_millis() / 6_000) as usize;
    let failed = statuses.iter().filter(|s| **s == StatusCode::UNAUTHORIZED).count();
    assert!(statuses[..10].iter().all(|s| *s == StatusCode::UNAUTHORIZED), "{statuses:?}");
    assert!(failed <= 10 + refilled, "{failed} failures answered 401 in {:?}: {statuses:?}", started.elapsed());
    // The right token from the throttled address waits too; from another address it works at once.
    assert_throttled(attacker.get(&url).bearer_auth(API_TOKEN).send().await.unwrap()).await;
    assert_eq!(other.get(&url).bearer_auth(API_TOKEN).send().await.unwrap().status(), StatusCode::OK);
    let resp = other.get(&url).send().await.unwrap();
    assert_eq!(
        (resp.status(), &resp.headers()[WWW_AUTHENTICATE]),
        (StatusCode::UNAUTHORIZED, &"Bearer".parse().unwrap())
    );

    // Every attempt of the attacker is logged with its address: failures at WARN, the first throttled one at WARN,
    // the rest (counted all the same) at DEBUG, so a client hammering away cannot flood the log.
    let throttled = 101 - failed;
    assert_eq!(logs.count("127.0.0.1", "WARN", "wrong"), failed, "{}", logs.text());
    let announced = logs.count("127.0.0.1", "WARN", "throttled");
    assert!((1..=1 + refilled).contains(&announced), "{announced} throttled WARN lines: {}", logs.text());
    assert_eq!(announced + logs.count("127.0.0.1", "DEBUG", "throttled"), throttled);
    assert_eq!(logs.count("127.0.0.2", "WARN", "missing"), 1, "{}", logs.text());
    let lines = logs.lines();
    assert!(lines.iter().all(|l| l["surface"] == "api" && l.get("peer").is_none()), "{}", logs.text());
    let text = logs.text();
    assert!(!text.contains("guess-") && !text.contains(API_TOKEN), "a submitted token is in the log: {text}");

    assert_eq!(metric(&app, "payhook_auth_failures_total{surface=\"api\"}").await, failed as u64 + 1);
    assert_eq!(metric(&app, "payhook_auth_throttled_total{surface=\"api\"}").await, throttled as u64);
    assert_eq!(metric(&app, "payhook_auth_failures_total{surface=\"ui\"}").await, 0);
    assert_eq!(metric(&app, "payhook_auth_throttle_addresses").await, 2);
}

#[tokio::test]
async fn wrong_dashboard_logins_are_throttled_while_another_address_still_logs_in() {
    let logs = Logs::capture();
    let app = TestApp::spawn().await;
    let (attacker, other) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    let login = app.url("/ui/login");
    for i in 0..10 {
        let resp = attacker.post(&login).form(&[("token", format!("guess-{i}"))]).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "login {i}");
    }
    let resp = attacker.post(&login).form(&[("token", API_TOKEN)]).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(resp.headers().get(SET_COOKIE).is_none(), "a throttled login opened a session");
    let retry_after: u64 = resp.headers()[RETRY_AFTER].to_str().unwrap().parse().unwrap();
    let page = resp.text().await.unwrap();
    assert!(
        page.contains(&format!(
            "Too many failed attempts at the API token from this address; retry in {retry_after} s."
        )),
        "{page}"
    );
    // One allowance per address: the dashboard's failures close /v1 to it as well.
    assert_throttled(attacker.get(app.url("/v1/stats")).bearer_auth(API_TOKEN).send().await.unwrap()).await;

    let resp = other.post(&login).form(&[("token", API_TOKEN)]).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert!(resp.headers()[SET_COOKIE].to_str().unwrap().starts_with("payhook_session="));

    assert_eq!(logs.count("127.0.0.1", "WARN", "wrong"), 10, "{}", logs.text());
    assert!(logs.lines().iter().filter(|l| l["reason"] == "wrong").all(|l| l["surface"] == "ui"), "{}", logs.text());
    assert_eq!(metric(&app, "payhook_auth_failures_total{surface=\"ui\"}").await, 10);
    assert_eq!(metric(&app, "payhook_auth_throttled_total{surface=\"ui\"}").await, 1);
}

#[tokio::test]
async fn behind_a_trusted_proxy_x_forwarded_for_decides_which_address_is_throttled() {
    let logs = Logs::capture();
    let app = TestApp::spawn_with(|settings, _| {
        settings.auth.trusted_proxies = vec![IpRange::parse("127.0.0.1").unwrap()];
    })
    .await;
    let proxy = client_from([127, 0, 0, 1]);
    let get = |forwarded: Option<&str>, token: &str| {
        let req = proxy.get(app.url("/v1/stats")).bearer_auth(token);
        match forwarded {
            Some(f) => req.header("x-forwarded-for", f),
            None => req,
        }
    };
    for _ in 0..10 {
        let resp = get(Some("203.0.113.7"), "wrong").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    assert_throttled(get(Some("203.0.113.7"), API_TOKEN).send().await.unwrap()).await;
    // A forged left-most entry changes nothing: the proxy appended the address it saw.
    assert_throttled(get(Some("198.51.100.1, 203.0.113.7"), API_TOKEN).send().await.unwrap()).await;
    // Another client behind the same proxy, and the proxy itself, are not throttled.
    assert_eq!(get(Some("203.0.113.8"), API_TOKEN).send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(get(None, API_TOKEN).send().await.unwrap().status(), StatusCode::OK);

    let lines = logs.lines();
    let wrong: Vec<&Value> = lines.iter().filter(|l| l["reason"] == "wrong").collect();
    assert_eq!(wrong.len(), 10, "{}", logs.text());
    assert!(wrong.iter().all(|l| l["client"] == "203.0.113.7" && l["peer"] == "127.0.0.1"), "{}", logs.text());
}

#[tokio::test]
async fn a_forged_x_forwarded_for_from_an_untrusted_peer_does_not_escape_the_throttle() {
    let app = TestApp::spawn_with(|settings, _| {
        settings.auth.trusted_proxies = vec![IpRange::parse("10.0.0.0/8").unwrap()];
    })
    .await;
    let (attacker, other) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    let url = app.url("/v1/stats");
    for i in 0..10 {
        let forged = format!("203.0.113.{i}");
        let resp = attacker.get(&url).bearer_auth("wrong").header("x-forwarded-for", forged).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    let resp = attacker.get(&url).bearer_auth(API_TOKEN).header("x-forwarded-for", "203.0.113.99").send().await;
    assert_throttled(resp.unwrap()).await;
    assert_eq!(other.get(&url).bearer_auth(API_TOKEN).send().await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn a_malformed_forwarded_entry_spends_the_unknown_clients_allowance_never_the_proxys() {
    let logs = Logs::capture();
    let app = TestApp::spawn_with(|settings, _| {
        settings.auth.trusted_proxies = vec![IpRange::parse("127.0.0.1").unwrap()];
    })
    .await;
    let proxy = client_from([127, 0, 0, 1]);
    let get = |forwarded: Option<&str>, token: &str| {
        let req = proxy.get(app.url("/v1/stats")).bearer_auth(token);
        match forwarded {
            Some(f) => req.header("x-forwarded-for", f),
            None => req,
        }
    };
    // A client writes garbage left of the address the proxy appended: it is that address that fails.
    for _ in 0..10 {
        assert_eq!(get(Some("unknown, 203.0.113.7"), "wrong").send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
    assert_throttled(get(Some("203.0.113.7"), API_TOKEN).send().await.unwrap()).await;
    assert_eq!(get(None, API_TOKEN).send().await.unwrap().status(), StatusCode::OK, "the proxy's own allowance");
    // The proxy itself could not name its client (`unknown`): that unknown client fails, and only it is throttled.
    for _ in 0..10 {
        assert_eq!(get(Some("unknown"), "wrong").send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    }
    assert_throttled(get(Some("not-an-address"), API_TOKEN).send().await.unwrap()).await;
    assert_eq!(get(None, API_TOKEN).send().await.unwrap().status(), StatusCode::OK, "the proxy is not throttled");
    assert_eq!(get(Some("203.0.113.8"), API_TOKEN).send().await.unwrap().status(), StatusCode::OK);

    let lines = logs.lines();
    let clients: std::collections::BTreeSet<&str> =
        lines.iter().filter(|l| l["reason"] == "wrong").filter_map(|l| l["client"].as_str()).collect();
    assert_eq!(clients, ["203.0.113.7", "unknown (behind 127.0.0.1)"].into(), "{}", logs.text());
}

#[tokio::test]
async fn readyz_tells_anyone_only_whether_it_is_ready_and_its_parts_only_with_the_token() {
    let app = TestApp::spawn().await;
    let (anyone, operator) = (client_from([127, 0, 0, 2]), client_from([127, 0, 0, 1]));
    let resp = anyone.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await, serde_json::json!({ "status": "ready" }));
    let resp = operator.get(app.url("/readyz")).bearer_auth(API_TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let detail = json(resp).await;
    assert_eq!(detail["status"], "ready", "{detail}");
    for part in ["database", "writer"] {
        assert_eq!(detail[part], "ok", "{detail}");
    }
    assert_eq!((&detail["worker"], &detail["dispatcher"]), (&"disabled".into(), &"disabled".into()), "{detail}");
    assert!(detail.get("replication").is_some_and(Value::is_null), "{detail}");

    // A wrong token goes through the gate like /v1's: 401, then 429 for that address, probe or not.
    for _ in 0..10 {
        let resp = anyone.get(app.url("/readyz")).bearer_auth("wrong-token").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(json(resp).await["error"], "missing_token");
    }
    assert_throttled(anyone.get(app.url("/readyz")).bearer_auth(API_TOKEN).send().await.unwrap()).await;
    assert_eq!(metric(&app, "payhook_auth_failures_total{surface=\"api\"}").await, 10);
    // Without a token the probe still gets its answer.
    assert_eq!(anyone.get(app.url("/readyz")).send().await.unwrap().status(), StatusCode::OK);

    // Not ready: anyone learns only that; the operator learns which part.
    app.store.shutdown().await;
    let resp = anyone.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(json(resp).await, serde_json::json!({ "status": "not_ready" }));
    let resp = operator.get(app.url("/readyz")).bearer_auth(API_TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let detail = json(resp).await;
    assert_eq!((&detail["status"], &detail["writer"]), (&"not_ready".into(), &"stopped".into()), "{detail}");
}
