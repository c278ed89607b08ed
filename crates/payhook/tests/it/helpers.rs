//! The real `payhook` binary as child processes, on SQLite files in temp dirs.
//!
//! - [`TestDir`]: a temp dir holding the configs, the database (`payhook.db`, a relative `sqlite://` url resolved
//!   against the dir, which is every child's working directory) and the servers' logs.
//! - [`Server`]: `payhook --config FILE serve` on a free port; killed on drop, [`Server::stop`] for SIGTERM.
//! - [`Recorder`]: a local HTTP endpoint that keeps what it received (a sink, an alert receiver).
//! - Signing with `payhook_core` for the configured secret, exactly as `payhook send` does.

use payhook_core::event::OrderAction;
use payhook_core::format::{Format, Outgoing};
use payhook_core::signature::{Encoding, HmacAlgorithm, Scheme, Secret, Verifier};
use payhook_sqlite::{SqliteOptions, SqliteStore};
use payhook_store::checker::{self, Acked, Checked, Evidence, SinkReceipt, Violations};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const API_TOKEN: &str = "it-api-token-0123456789abcdef";
pub const SECRET: &str = "whsec_test";
pub const SOURCE: &str = "payments";
pub const AMOUNT: i64 = 1999;
pub const CURRENCY: &str = "usd";
/// The database file, relative to the test dir (the children's working directory).
pub const DB_FILE: &str = "payhook.db";

const BIN: &str = env!("CARGO_BIN_EXE_payhook");

/// The binary the tests run: this build's, or `$PAYHOOK_TEST_BINARY` (a release build, to replay the suite's attacks
/// against what ships).
fn binary() -> String {
    std::env::var("PAYHOOK_TEST_BINARY").ok().filter(|b| !b.is_empty()).unwrap_or_else(|| BIN.to_owned())
}

/// A temp dir for one test: configs, the database and logs.
#[derive(Debug)]
pub struct TestDir {
    dir: TempDir,
}

impl TestDir {
    pub fn new() -> Self {
        Self { dir: tempfile::Builder::new().prefix("payhook-it-").tempdir().expect("temp dir") }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The database every config in this dir points to.
    pub fn db_path(&self) -> PathBuf {
        self.path().join(DB_FILE)
    }

    /// Writes `text` to `name` in the dir.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        std::fs::write(&path, text).expect("write test file");
        path
    }

    /// A `payhook` command with the dir as its working directory.
    pub fn payhook(&self) -> Command {
        let mut cmd = Command::new(binary());
        cmd.current_dir(self.path()).env_remove("PAYHOOK_CONFIG").env_remove("PAYHOOK_API_TOKEN");
        cmd
    }

    /// Runs `payhook ARGS` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.payhook().args(args).stdin(Stdio::null()).output().expect("run payhook")
    }

    /// Opens the database file directly (for checks after the servers stopped).
    pub fn open_db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.db_path()).expect("open the database file")
    }
}

/// The standard test configuration: one hmac source "payments", the API token, `sqlite://payhook.db`.
pub fn config_toml(port: u16) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:{port}"
api_token = "{API_TOKEN}"

[storage]
url = "sqlite://{DB_FILE}"

[[sources]]
name = "{SOURCE}"
scheme = "hmac"
header = "X-Webhook-Signature"
algorithm = "sha256"
encoding = "hex"
format = "generic"
secrets = ["{SECRET}"]
"#
    )
}

/// A port nobody listens on right now: bind port 0, read it, let it go.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// Output as text, for assertions and messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `payhook serve` running as a child process. Killed on drop.
#[derive(Debug)]
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub config: PathBuf,
    log: PathBuf,
    pub client: reqwest::Client,
}

impl Server {
    /// Starts a server in `dir` on a free port and waits until `GET /healthz` answers.
    pub async fn start(dir: &TestDir) -> Self {
        Self::start_with(dir, "").await
    }

    /// Like [`Server::start`], with `extra` TOML appended to the standard test configuration.
    pub async fn start_with(dir: &TestDir, extra: &str) -> Self {
        Self::start_edited(dir, |config| format!("{config}{extra}")).await
    }

    /// Like [`Server::start`], with the standard test configuration passed through `edit`.
    pub async fn start_edited(dir: &TestDir, edit: impl Fn(String) -> String) -> Self {
        Self::start_edited_with_env(dir, edit, &[]).await
    }

    /// Like [`Server::start_edited`], with `env` added to the child's environment.
    pub async fn start_edited_with_env(dir: &TestDir, edit: impl Fn(String) -> String, env: &[(&str, &str)]) -> Self {
        // Another process may grab the port between our probe and the server's bind: try a few ports.
        for _ in 0..3 {
            let mut server = Self::launch(dir, &edit, env);
            match server.wait_healthy(Duration::from_secs(10)).await {
                Ok(()) => return server,
                Err(log) if log.contains("cannot listen") => continue,
                Err(log) => panic!("payhook serve on port {} did not become healthy:\n{log}", server.port),
            }
        }
        panic!("payhook serve could not find a free port in 3 attempts");
    }

    /// Spawns `payhook serve` on a free port and returns at once, without waiting for it to be ready (a test that
    /// kills a server while it starts up).
    pub fn launch(dir: &TestDir, edit: impl Fn(String) -> String, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let config = dir.write(&format!("payhook-{port}.toml"), &edit(config_toml(port)));
        let log = dir.path().join(format!("serve-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("create log");
        let child = dir
            .payhook()
            .arg("--config")
            .arg(&config)
            .arg("serve")
            // Every delivery's own line too (debug), so tests can read what was recorded.
            .env("PAYHOOK_LOG", "info,payhook_server::http::ingest=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone log handle"))
            .stderr(log_file)
            .spawn()
            .expect("spawn payhook serve");
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
        Server { child: Some(child), port, config, log, client }
    }

    /// Waits until the child says it listens and `/healthz` answers. Its own log line matters: whoever took the
    /// port when the child could not bind it would answer `/healthz` just as well.
    async fn wait_healthy(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let url = self.url("/healthz");
        loop {
            if self.log().contains("payhook is listening")
                && let Ok(r) = self.client.get(&url).timeout(Duration::from_millis(500)).send().await
                && r.status() == StatusCode::OK
            {
                return Ok(());
            }
            let child = self.child.as_mut().expect("child");
            if let Some(status) = child.try_wait().expect("try_wait") {
                return Err(format!("exited with {status}:\n{}", self.log()));
            }
            if Instant::now() > deadline {
                return Err(format!("no answer within {within:?}:\n{}", self.log()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    pub fn webhook_url(&self) -> String {
        self.url(&format!("/webhooks/{SOURCE}"))
    }

    /// What the server wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// The process's peak resident set size so far (`VmHWM`), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("read /proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status")
    }

    /// Sends SIGTERM (graceful shutdown) and returns at once.
    pub fn terminate(&self) {
        let status = Command::new("kill").arg("-TERM").arg(self.pid().to_string()).status().expect("run kill");
        assert!(status.success(), "kill -TERM {} failed: {status}", self.pid());
    }

    /// Waits for the process to exit (at most `within`; then it is killed and the test fails).
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().expect("child");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.child = None;
                panic!("payhook serve did not exit within {within:?} after SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, wait, and insist on a clean exit (status 0).
    pub fn stop(mut self) {
        self.terminate();
        let status = self.wait_exit(Duration::from_secs(15));
        assert!(status.success(), "payhook serve exited with {status} after SIGTERM:\n{}", self.log());
    }

    /// [`Server::stop`], returning everything the server logged, its shutdown included.
    pub fn stop_keeping_log(mut self) -> String {
        self.terminate();
        let status = self.wait_exit(Duration::from_secs(15));
        let log = self.log();
        assert!(status.success(), "payhook serve exited with {status} after SIGTERM:\n{log}");
        log
    }

    /// `POST /v1/orders` with the test amount and currency; returns the status and the answer.
    pub async fn register_order(&self, id: &str, amount: i64) -> (StatusCode, Value) {
        let resp = self
            .client
            .post(self.url("/v1/orders"))
            .bearer_auth(API_TOKEN)
            .json(&json!({ "id": id, "amount": amount, "currency": CURRENCY }))
            .send()
            .await
            .expect("POST /v1/orders");
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// `GET /v1/orders/{id}`.
    pub async fn order(&self, id: &str) -> (StatusCode, Value) {
        let resp = self
            .client
            .get(self.url(&format!("/v1/orders/{id}")))
            .bearer_auth(API_TOKEN)
            .send()
            .await
            .expect("GET /v1/orders/{id}");
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The verifier of the configured source, used here to sign.
pub fn signer() -> Verifier {
    let scheme = Scheme::Hmac {
        header: "x-webhook-signature".into(),
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: None,
    };
    Verifier::new(scheme, &[Secret::new(SECRET)], 300).expect("test secret")
}

pub fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64
}

/// A signed delivery: the body and its signature headers.
#[derive(Debug, Clone)]
pub struct Signed {
    pub event_id: String,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

/// A `payment.succeeded` event for `order_id`, in the generic format, signed like the provider would.
pub fn payment(event_id: &str, order_id: &str) -> Signed {
    let body = Format::Generic.encode(&Outgoing {
        event_id,
        action: OrderAction::Pay,
        order_id,
        amount_minor: AMOUNT,
        currency: CURRENCY,
        created: now_secs(),
    });
    let headers = signer().sign(&body, now_secs(), event_id);
    Signed { event_id: event_id.to_owned(), body, headers }
}

/// POSTs a signed delivery once.
pub async fn post(client: &reqwest::Client, url: &str, d: &Signed) -> reqwest::Result<(StatusCode, Value)> {
    let mut req = client.post(url).header("content-type", "application/json").body(d.body.clone());
    for (name, value) in &d.headers {
        req = req.header(name, value);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let body = resp.json().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// The `status` field of a webhook answer.
pub fn outcome(answer: &Value) -> &str {
    answer["status"].as_str().unwrap_or("")
}

/// `order.paid` rows in an order's JSON view.
pub fn paid_receipts(order: &Value) -> usize {
    order["outbox"].as_array().map_or(0, |rows| rows.iter().filter(|r| r["kind"] == "order.paid").count())
}

/// `SELECT COUNT(*) …` on the database file.
pub fn count(db: &rusqlite::Connection, sql: &str) -> i64 {
    db.query_row(sql, [], |r| r.get(0)).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Runs the invariant checker (`payhook_store::checker`) on the database the stopped servers left, with the event
/// ids of every delivery answered 2xx on the payments source; fails the test with every violation found.
pub async fn check_store(dir: &TestDir, acked: impl IntoIterator<Item = impl AsRef<str>>) -> Checked {
    check_db(&dir.db_path(), acked).await.unwrap_or_else(|v| panic!("{v}"))
}

/// The invariant checker on the database file at `path`, returning the violations it finds.
pub async fn check_db(path: &Path, acked: impl IntoIterator<Item = impl AsRef<str>>) -> Result<Checked, Violations> {
    let store = SqliteStore::open(SqliteOptions::new(path)).expect("open the database as a store");
    let acked = acked.into_iter().map(|id| Acked::new(SOURCE, id.as_ref())).collect();
    checker::check(&store, &Evidence { acked, sink: None }).await
}

/// A local HTTP endpoint (a sink, an alert receiver) that answers every request with one status and keeps what it
/// received: each request's `Idempotency-Key` and body.
pub struct Recorder {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    received: Arc<Mutex<Vec<SinkReceipt>>>,
}

impl Recorder {
    pub async fn start(status: u16) -> Self {
        Self::answering(move |_| (status, 0)).await
    }

    /// A recorder whose answer to each body is `answer(body)`: the status, and how many milliseconds to wait
    /// before giving it.
    pub async fn answering(answer: impl Fn(&[u8]) -> (u16, u64) + Send + Sync + 'static) -> Self {
        let answer = Arc::new(answer);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind recorder");
        let addr = listener.local_addr().expect("addr").to_string();
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&received);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (kept, answer) = (Arc::clone(&kept), Arc::clone(&answer));
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // The head, then as much body as Content-Length says.
                    let (head_end, length, key) = loop {
                        let Ok(n) = stream.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                            let length = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            let key = head
                                .lines()
                                .find_map(|l| l.strip_prefix("idempotency-key:"))
                                .map(|v| v.trim().to_owned())
                                .unwrap_or_default();
                            break (end + 4, length, key);
                        }
                    };
                    while buf.len() < head_end + length {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let payload = buf[head_end..head_end + length].to_vec();
                    let (status, delay_ms) = answer(&payload);
                    tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
                    kept.lock().expect("recorder lock").push(SinkReceipt { idempotency_key: key, payload });
                    let answer =
                        format!("HTTP/1.1 {status} Scripted\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        Self { addr, received }
    }

    /// The bodies received so far, as text.
    pub fn bodies(&self) -> Vec<String> {
        self.receipts().iter().map(|r| String::from_utf8_lossy(&r.payload).into_owned()).collect()
    }

    /// Everything received so far, for the invariant checker.
    pub fn receipts(&self) -> Vec<SinkReceipt> {
        self.received.lock().expect("recorder lock").clone()
    }
}
