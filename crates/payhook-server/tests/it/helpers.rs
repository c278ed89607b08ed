//! `TestApp`: payhook started exactly as production starts it (SQLite file, `start()` on a real socket), with the
//! background worker disabled so that tests drive retries themselves.

use payhook_core::event::{EventId, OrderAction, SourceName};
use payhook_core::format::{Format, Outgoing};
use payhook_core::signature::{Encoding, HmacAlgorithm, Scheme, Secret, Verifier};
use payhook_server::{Clock, Running, Settings, SourceSettings, now_ms};
use payhook_sqlite::{SqliteOptions, SqliteStore};
use payhook_store::{EventView, Stats, Store};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const API_TOKEN: &str = "test-api-token-0123456789";
pub const PAYMENTS_SECRET: &str = "payments-test-secret";
pub const STRIPE_SECRET: &str = "whsec_stripe_test_secret";
pub const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// A valid Standard Webhooks secret that is not the configured one.
pub const OTHER_STANDARD_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
pub const PAYSTACK_SECRET: &str = "sk_test_paystack_secret";
pub const SHOPIFY_SECRET: &str = "shpss_test_secret";
/// Adyen HMAC keys are hex.
pub const ADYEN_SECRET: &str = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00";
pub const GITHUB_SECRET: &str = "github-test-secret";
/// A Braintree API key pair, `PUBLIC_KEY:PRIVATE_KEY`.
pub const BRAINTREE_SECRET: &str = "payhook_public_key:payhook_private_key";
/// An HTTP Message Signatures key: `hmac-sha256:<keyid>:<base64 key>`.
pub const SIGNED_SECRET: &str = "hmac-sha256:payhook-test:c2VjcmV0LWtleS1vZi10aGUtcHJvdmlkZXItMDEyMzQ1Njc4OQ==";
/// The production signature tolerance.
pub const TOLERANCE_SECS: u64 = 300;

/// The scheme each test source uses.
pub fn scheme(source: &str) -> Scheme {
    match source {
        "payments" => Scheme::Hmac {
            header: "x-webhook-signature".into(),
            algorithm: HmacAlgorithm::Sha256,
            encoding: Encoding::Hex,
            prefix: None,
        },
        "stripe" => Scheme::Stripe,
        "standard" => Scheme::StandardWebhooks,
        "paystack" => Scheme::Paystack,
        "shopify" => Scheme::Shopify,
        "adyen" => Scheme::Adyen,
        "braintree" => Scheme::Braintree,
        "github" => Scheme::Github,
        "signed" => Scheme::HttpMessageSignatures,
        other => panic!("no test source {other:?}"),
    }
}

/// A verifier for `source`'s scheme keyed with `secret` (the configured one or a forger's).
pub fn verifier(source: &str, secret: &str) -> Verifier {
    Verifier::new(scheme(source), &[Secret::new(secret)], TOLERANCE_SECS).expect("test secret")
}

/// The configured secret of `source`.
pub fn secret(source: &str) -> &'static str {
    match source {
        "payments" => PAYMENTS_SECRET,
        "stripe" => STRIPE_SECRET,
        "standard" => STANDARD_SECRET,
        "paystack" => PAYSTACK_SECRET,
        "shopify" => SHOPIFY_SECRET,
        "adyen" => ADYEN_SECRET,
        "braintree" => BRAINTREE_SECRET,
        "github" => GITHUB_SECRET,
        "signed" => SIGNED_SECRET,
        other => panic!("no test source {other:?}"),
    }
}

fn source_settings(name: &str, format: Format) -> SourceSettings {
    SourceSettings {
        name: SourceName::parse(name).unwrap(),
        verifier: verifier(name, secret(name)),
        format,
        forward: Vec::new(),
        orders: payhook_server::settings::Orders::Registered,
        confirm: None,
    }
}

/// Now, unix seconds, on the system clock (where a test app's manual clock starts).
pub fn now_secs() -> i64 {
    now_ms() / 1000
}

/// A payment-provider event in the test currency (`usd`), created now.
pub fn event<'a>(event_id: &'a str, action: OrderAction, order_id: &'a str, amount_minor: i64) -> Outgoing<'a> {
    Outgoing { event_id, action, order_id, amount_minor, currency: "usd", created: now_secs() }
}

/// A stable message id for a body, so that a redelivery of the same bytes carries the same `webhook-id`.
fn msg_id_for(body: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in body {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("msg_{h:016x}")
}

/// A JSON answer with its status and headers.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
}

/// Reads a response that must be JSON (checked by content type and by parsing).
pub async fn read_json(resp: reqwest::Response) -> Reply {
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("response body");
    let content_type = headers.get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(content_type.starts_with("application/json"), "{status} answered {content_type:?}, not JSON: {text}");
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} answered invalid JSON ({e}): {text}"));
    Reply { status, headers, json }
}

/// A running payhook with its database.
#[derive(Debug)]
pub struct TestApp {
    pub running: Running<SqliteStore>,
    pub store: Arc<SqliteStore>,
    pub client: reqwest::Client,
    pub addr: SocketAddr,
    pub base_url: String,
    pub db_path: PathBuf,
    pub settings: Settings,
    /// The server's clock: manual, started at the time of day. A test moves it to make time pass.
    pub clock: Clock,
    _dir: TempDir,
}

impl TestApp {
    /// The standard test app.
    pub async fn spawn() -> Self {
        Self::spawn_with(|_, _| {}).await
    }

    /// A test app whose settings and storage options `configure` adjusts before anything starts.
    pub async fn spawn_with(configure: impl FnOnce(&mut Settings, &mut SqliteOptions)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let db_path = dir.path().join("payhook.db");
        let mut settings = Settings::new(vec![
            source_settings("payments", Format::Generic),
            source_settings("stripe", Format::Stripe),
            source_settings("standard", Format::Generic),
            source_settings("paystack", Format::Paystack),
            source_settings("shopify", Format::Shopify),
            source_settings("adyen", Format::Adyen),
            source_settings("braintree", Format::Braintree),
            source_settings("github", Format::Generic),
            source_settings("signed", Format::Generic),
        ]);
        settings.api_token = Some(Secret::new(API_TOKEN));
        settings.worker.enabled = false;
        settings.dispatcher.enabled = false;
        let mut options = SqliteOptions::new(&db_path);
        configure(&mut settings, &mut options);
        options.routing = settings.routing();
        let store = Arc::new(SqliteStore::open(options).expect("open the store"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let clock = Clock::manual(now_ms());
        let running = payhook_server::start_with_clock(listener, settings.clone(), Arc::clone(&store), clock.clone())
            .expect("start");
        let addr = running.addr;
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
        Self { running, store, client, addr, base_url: format!("http://{addr}"), db_path, settings, clock, _dir: dir }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    fn source(&self, name: &str) -> &SourceSettings {
        self.settings.sources.iter().find(|s| s.name.as_str() == name).unwrap_or_else(|| panic!("no source {name}"))
    }

    /// The body `source`'s format makes of `event`.
    pub fn encode(&self, source: &str, event: &Outgoing<'_>) -> Vec<u8> {
        self.source(source).format.encode(event)
    }

    /// The headers `source`'s provider sends with `body` signed at `at_unix`.
    pub fn sign(&self, source: &str, body: &[u8], at_unix: i64) -> Vec<(String, String)> {
        self.source(source).verifier.sign(body, at_unix, &msg_id_for(body))
    }

    /// Encodes `event` as `source`'s provider would, signs it now and posts it.
    pub async fn deliver(&self, source: &str, event: &Outgoing<'_>) -> (StatusCode, Value) {
        self.deliver_bytes(source, self.encode(source, event)).await
    }

    /// Signs `body` now with `source`'s secret and posts it.
    pub async fn deliver_bytes(&self, source: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let reply = self.deliver_reply(source, body).await;
        (reply.status, reply.json)
    }

    /// Like [`TestApp::deliver_bytes`], with the headers of the answer.
    pub async fn deliver_reply(&self, source: &str, body: Vec<u8>) -> Reply {
        let headers = self.sign(source, &body, self.clock.now_ms() / 1000);
        self.post_raw(source, &headers, body).await
    }

    /// Posts `body` to `source`'s endpoint with exactly these headers.
    pub async fn post_raw(&self, source: &str, headers: &[(String, String)], body: impl Into<Vec<u8>>) -> Reply {
        read_json(self.post_raw_response(source, headers, body).await.expect("POST webhook")).await
    }

    /// Posts without reading the answer; an error means the request got no HTTP answer at all.
    pub async fn post_raw_response(
        &self,
        source: &str,
        headers: &[(String, String)],
        body: impl Into<Vec<u8>>,
    ) -> reqwest::Result<reqwest::Response> {
        let mut req = self.client.post(self.url(&format!("/webhooks/{source}"))).body(body.into());
        for (name, value) in headers {
            req = req.header(name.as_str(), value.as_str());
        }
        req.send().await
    }

    /// `POST /v1/orders`.
    pub async fn register_order(&self, id: &str, amount: i64, currency: &str) -> (StatusCode, Value) {
        let body = serde_json::json!({ "id": id, "amount": amount, "currency": currency });
        let reply = self.api_post("/v1/orders", body.to_string()).await;
        (reply.status, reply.json)
    }

    /// `POST` to the API with the token and a raw body.
    pub async fn api_post(&self, path: &str, body: String) -> Reply {
        let resp = self
            .client
            .post(self.url(path))
            .bearer_auth(API_TOKEN)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("POST /v1");
        read_json(resp).await
    }

    /// `GET` on the API with the token.
    pub async fn api_get(&self, path: &str) -> Reply {
        let resp = self.client.get(self.url(path)).bearer_auth(API_TOKEN).send().await.expect("GET /v1");
        read_json(resp).await
    }

    /// `GET /v1/orders/{id}`, which must exist.
    pub async fn order(&self, id: &str) -> Value {
        let reply = self.api_get(&format!("/v1/orders/{id}")).await;
        assert_eq!(reply.status, StatusCode::OK, "GET order {id}: {}", reply.json);
        reply.json
    }

    /// The order's outbox rows of `kind`, as the API shows them.
    pub async fn outbox_rows(&self, id: &str, kind: &str) -> Vec<Value> {
        let order = self.order(id).await;
        order["outbox"].as_array().expect("outbox array").iter().filter(|r| r["kind"] == kind).cloned().collect()
    }

    /// Receipts (`order.paid` outbox rows) written for the order.
    pub async fn receipts(&self, id: &str) -> usize {
        self.outbox_rows(id, "order.paid").await.len()
    }

    /// Row counts, straight from the store.
    pub async fn stats(&self) -> Stats {
        self.store.stats().await.expect("stats")
    }

    /// Inbox rows of every status.
    pub async fn inbox_rows(&self) -> u64 {
        self.stats().await.events.iter().map(|(_, n)| n).sum()
    }

    /// Outbox rows of every kind.
    pub async fn outbox_total(&self) -> u64 {
        self.stats().await.outbox.iter().map(|(_, n)| n).sum()
    }

    /// One recorded delivery, straight from the store.
    pub async fn event(&self, source: &str, event_id: &str) -> Option<EventView> {
        stored_event(&self.store, source, event_id).await
    }

    /// `GET` a plain-text endpoint.
    pub async fn get_text(&self, path: &str) -> (StatusCode, String) {
        let resp = self.client.get(self.url(path)).send().await.expect("GET");
        let status = resp.status();
        (status, resp.text().await.expect("body"))
    }

    /// `GET path` with the API token, as text.
    pub async fn get_text_authorized(&self, path: &str) -> (StatusCode, String) {
        let resp = self.client.get(self.url(path)).bearer_auth(API_TOKEN).send().await.expect("GET");
        let status = resp.status();
        (status, resp.text().await.expect("body"))
    }
}

/// One recorded delivery, straight from `store` (usable once the app's `running` has been moved out).
pub async fn stored_event(store: &SqliteStore, source: &str, event_id: &str) -> Option<EventView> {
    let source = SourceName::parse(source).unwrap();
    let event_id = EventId::parse(event_id).unwrap();
    store.event(&source, &event_id).await.expect("read event")
}

/// An HTTP/1.1 answer read off a raw socket.
#[derive(Debug)]
pub struct RawReply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl RawReply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.head, self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Writes `parts` one after the other on a fresh connection (ignoring write errors: the server may answer and
/// close early), then reads the answer until the server closes.
pub async fn raw_http(addr: SocketAddr, parts: &[&[u8]]) -> RawReply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    for part in parts {
        if stream.write_all(part).await.is_err() {
            break;
        }
    }
    read_raw_reply(&mut stream).await
}

/// Reads one answer (the request must have said `Connection: close`).
pub async fn read_raw_reply(stream: &mut TcpStream) -> RawReply {
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    });
    read.await.expect("the server answered within 20 s");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let status =
        head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status line: {head:?}"));
    RawReply { status, head: head.to_owned(), body: body.to_owned() }
}

/// The head of a `POST /webhooks/{source}` request with these extra header lines.
pub fn request_head(addr: SocketAddr, source: &str, headers: &[(String, String)], framing: &str) -> String {
    let mut head = format!("POST /webhooks/{source} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{framing}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Encodes `body` as HTTP/1.1 chunks of at most `chunk` bytes, with the final zero-length chunk.
pub fn chunked(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// A request sent from the loopback address `from` whose head arrives whole and whose body stops after `sent` of
/// the `declared` bytes (the connection stays open, keep-alive): the answer, and how long after the head the server
/// answered and closed the connection.
pub async fn slow_body(
    addr: SocketAddr,
    from: std::net::Ipv4Addr,
    method_and_path: &str,
    headers: &[(String, String)],
    declared: usize,
    sent: &[u8],
) -> (Duration, RawReply) {
    let mut stream = connect_from(from, addr).await;
    let mut head = format!("{method_and_path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {declared}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write the head");
    let started = std::time::Instant::now();
    stream.write_all(sent).await.expect("write part of the body");
    let reply = read_raw_reply(&mut stream).await;
    (started.elapsed(), reply)
}

/// A connection to `addr` from the loopback address `from` (Linux routes all of 127.0.0.0/8 to `lo`, so 127.0.0.2
/// is another client of a server on 127.0.0.1).
pub async fn connect_from(from: std::net::Ipv4Addr, addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::from((from, 0))).expect("bind the client's address");
    socket.connect(addr).await.expect("connect")
}

/// The value of `series` (`name` or `name{labels}`) in a `/metrics` text.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in the metrics:\n{text}"))
}

/// `/metrics` on a fresh connection (a pooled one may have been closed by the bounds under test).
pub async fn fresh_metrics(app: &TestApp) -> String {
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client");
    let resp = client.get(app.url("/metrics")).bearer_auth(API_TOKEN).send().await.expect("GET /metrics");
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.expect("metrics text")
}
