//! `payhook serve` on PostgreSQL: several real processes on one database, every session of the database killed
//! under load, the database going away and coming back, and the admin commands on a database a stopped server
//! left (with a sink that died and dead letters to replay). The server named by `PAYHOOK_TEST_POSTGRES_URL` is
//! shared with other tests, so these tests work in a schema or a database of their own and never restart it.
//! Without the variable, each test says it was skipped and passes.

use crate::helpers::*;
use payhook_core::event::OrderAction;
use payhook_core::format::{Format, Outgoing};
use reqwest::StatusCode;
use std::collections::{HashMap, HashSet};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

const URL_VAR: &str = "PAYHOOK_TEST_POSTGRES_URL";

pub(crate) fn test_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("skipped: {URL_VAR} not set");
            None
        }
    }
}

pub(crate) async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// `url` with one more query parameter.
fn with_param(url: &str, param: &str) -> String {
    format!("{url}{}{param}", if url.contains('?') { '&' } else { '?' })
}

/// Where a test's payhook instances keep their data: a schema of the test database, or a database of its own.
/// Dropped when this is dropped.
pub(crate) struct TestDb {
    /// The admin URL (the test database).
    admin: String,
    /// What the instances connect to.
    pub(crate) url: String,
    /// `DROP SCHEMA … CASCADE` or `DROP DATABASE … WITH (FORCE)`.
    drop: String,
}

impl TestDb {
    /// A fresh schema in the test database.
    pub(crate) async fn schema(admin: &str) -> Self {
        let name = format!("payhook_it_{:016x}", fastrand::u64(..));
        connect(admin).await.batch_execute(&format!("CREATE SCHEMA {name}")).await.expect("create schema");
        let url =
            with_param(&with_param(admin, &format!("options=-csearch_path%3D{name}")), "application_name=payhook-it");
        Self { admin: admin.to_owned(), url, drop: format!("DROP SCHEMA IF EXISTS {name} CASCADE") }
    }

    /// A fresh database on the test server, so that "every session of the database" means this test's only.
    async fn database(admin: &str) -> Self {
        let name = format!("payhook_it_{:016x}", fastrand::u64(..));
        connect(admin).await.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
        let mut config: tokio_postgres::Config = admin.parse().expect("the test URL parses");
        config.dbname(&name);
        let user = config.get_user().unwrap_or("postgres").to_owned();
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let url = format!("postgres://{user}@{host}:{port}/{name}");
        Self { admin: admin.to_owned(), url, drop: format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)") }
    }

    async fn client(&self) -> tokio_postgres::Client {
        let client = connect(&self.url).await;
        if let Some(options) = self.url.split("options=-csearch_path%3D").nth(1) {
            let schema = options.split('&').next().unwrap_or_default();
            client.batch_execute(&format!("SET search_path = {schema}")).await.expect("search_path");
        }
        client
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, drop) = (self.admin.clone(), self.drop.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                if let Err(e) = connect(&admin).await.batch_execute(&drop).await {
                    eprintln!("could not clean up ({drop}): {e}");
                }
            });
        });
        let _ = dropped.join();
    }
}

/// The test configuration (the source and token of [`config_toml`]) on PostgreSQL at `db_url`.
fn pg_config(port: u16, db_url: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:{port}"
api_token = "{API_TOKEN}"

[storage]
url = "{db_url}"
pool_size = 8

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

/// `payhook serve` on PostgreSQL, as a child process. Killed on drop.
pub(crate) struct PgServer {
    child: Option<Child>,
    port: u16,
    config: std::path::PathBuf,
    log: std::path::PathBuf,
    client: reqwest::Client,
}

impl PgServer {
    pub(crate) async fn start(dir: &TestDir, db_url: &str) -> Self {
        Self::start_with(dir, db_url, "").await
    }

    /// With `extra` TOML after the test configuration.
    pub(crate) async fn start_with(dir: &TestDir, db_url: &str, extra: &str) -> Self {
        Self::start_configured(dir, db_url, "", extra).await
    }

    /// With `storage` lines added to its `[storage]` table and `extra` TOML after the test configuration.
    pub(crate) async fn start_configured(dir: &TestDir, db_url: &str, storage: &str, extra: &str) -> Self {
        for _ in 0..3 {
            let port = free_port();
            let base = pg_config(port, db_url).replacen("pool_size = 8\n", &format!("pool_size = 8\n{storage}"), 1);
            let config = dir.write(&format!("pg-{port}.toml"), &format!("{base}{extra}"));
            let log = dir.path().join(format!("pg-{port}.log"));
            let file = std::fs::File::create(&log).expect("create log");
            let child = dir
                .payhook()
                .arg("--config")
                .arg(&config)
                .arg("serve")
                .stdin(Stdio::null())
                .stdout(file.try_clone().expect("log handle"))
                .stderr(file)
                .spawn()
                .expect("spawn payhook serve");
            let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
            let mut server = Self { child: Some(child), port, config, log, client };
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(r) = server.client.get(server.url("/healthz")).send().await
                    && r.status() == StatusCode::OK
                {
                    return server;
                }
                if let Some(status) = server.child.as_mut().expect("child").try_wait().expect("try_wait") {
                    let log = server.log();
                    if log.contains("cannot listen") {
                        break;
                    }
                    panic!("payhook serve exited with {status}:\n{log}");
                }
                assert!(Instant::now() < deadline, "payhook serve did not become healthy:\n{}", server.log());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("payhook serve could not find a free port in 3 attempts");
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Its configuration file.
    pub(crate) fn config_path(&self) -> &std::path::Path {
        &self.config
    }

    pub(crate) fn webhook_url(&self) -> String {
        self.url(&format!("/webhooks/{SOURCE}"))
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().expect("try_wait").is_none())
    }

    pub(crate) async fn register_order(&self, id: &str) -> StatusCode {
        let body = serde_json::json!({ "id": id, "amount": AMOUNT, "currency": CURRENCY });
        let resp = self.client.post(self.url("/v1/orders")).bearer_auth(API_TOKEN).json(&body).send().await;
        resp.expect("POST /v1/orders").status()
    }

    pub(crate) async fn readyz(&self) -> StatusCode {
        self.readyz_body().await.0
    }

    /// `/readyz` with the API token and its JSON answer (`status`, `database`, `writer`, `worker`, `dispatcher`).
    pub(crate) async fn readyz_body(&self) -> (StatusCode, serde_json::Value) {
        let resp = self.client.get(self.url("/readyz")).bearer_auth(API_TOKEN).send().await.expect("GET /readyz");
        let status = resp.status();
        (status, resp.json().await.expect("/readyz answers JSON"))
    }

    /// SIGTERM, and insist on a clean exit.
    pub(crate) fn stop(mut self) {
        let mut child = self.child.take().expect("child");
        let status = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        assert!(status.expect("run kill").success());
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("payhook serve did not exit after SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "payhook serve exited with {status}:\n{}", self.log());
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A signed generic-format event, as the provider sends it.
pub(crate) fn event(event_id: &str, action: OrderAction, order_id: &str) -> Signed {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
    let body = Format::Generic.encode(&Outgoing {
        event_id,
        action,
        order_id,
        amount_minor: AMOUNT,
        currency: CURRENCY,
        created: now,
    });
    let headers = signer().sign(&body, now, event_id);
    Signed { event_id: event_id.to_owned(), body, headers }
}

/// Posts `d` to `url` like a provider: 503 is retried until the answer is 200, anything else fails the test.
pub(crate) async fn until_acked(client: reqwest::Client, url: String, d: Arc<Signed>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, answer) = post(&client, &url, &d).await.unwrap_or_else(|e| panic!("{} to {url}: {e}", d.event_id));
        match status {
            StatusCode::OK => return outcome(&answer).to_owned(),
            StatusCode::SERVICE_UNAVAILABLE if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("{} to {url}: {other} {answer}", d.event_id),
        }
    }
}

async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_database_apply_a_shuffled_duplicated_workload_exactly_once() {
    let Some(admin) = test_url() else { return };
    const ORDERS: usize = 240;
    let db = TestDb::schema(&admin).await;
    let dir = TestDir::new();
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(PgServer::start(&dir, &db.url).await);
    }
    let servers = Arc::new(servers);

    // One order in ten is registered only after its events arrived: those wait, deferred, for any instance's
    // worker. Every order is paid; one in four is refunded too.
    let late: HashSet<usize> = (0..ORDERS).filter(|i| i % 10 == 7).collect();
    for i in (0..ORDERS).filter(|i| !late.contains(i)) {
        assert_eq!(servers[fastrand::usize(..3)].register_order(&format!("pg-{i}")).await, StatusCode::CREATED);
    }
    let mut unique = Vec::new();
    for i in 0..ORDERS {
        unique.push(Arc::new(event(&format!("evt-pg-pay-{i}"), OrderAction::Pay, &format!("pg-{i}"))));
        if i % 4 == 0 {
            unique.push(Arc::new(event(&format!("evt-pg-ref-{i}"), OrderAction::Refund, &format!("pg-{i}"))));
        }
    }
    // 20 % of the deliveries are duplicates of another; shuffled, so refunds may come before their payments.
    let mut plan: Vec<usize> = (0..unique.len()).collect();
    while plan.len() < unique.len() * 5 / 4 {
        plan.push(fastrand::usize(..unique.len()));
    }
    fastrand::shuffle(&mut plan);

    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let in_flight = Arc::new(tokio::sync::Semaphore::new(32));
    let mut deliveries = JoinSet::new();
    for (k, &u) in plan.iter().enumerate() {
        let d = Arc::clone(&unique[u]);
        let (client, servers, in_flight) = (client.clone(), Arc::clone(&servers), Arc::clone(&in_flight));
        // Every tenth delivery goes to all three instances at once; the others to one chosen at random.
        let targets: Vec<String> = if k % 10 == 0 {
            servers.iter().map(PgServer::webhook_url).collect()
        } else {
            vec![servers[fastrand::usize(..3)].webhook_url()]
        };
        deliveries.spawn(async move {
            let _permit = in_flight.acquire_owned().await.expect("semaphore");
            let mut answers = JoinSet::new();
            for url in targets {
                answers.spawn(until_acked(client.clone(), url, Arc::clone(&d)));
            }
            let mut outcomes = Vec::new();
            while let Some(answer) = answers.join_next().await {
                outcomes.push(answer.expect("delivery task"));
            }
            (d.event_id.clone(), outcomes)
        });
    }
    let mut answers: HashMap<String, Vec<String>> = HashMap::new();
    while let Some(joined) = deliveries.join_next().await {
        let (id, outcomes) = joined.expect("delivery");
        answers.entry(id).or_default().extend(outcomes);
    }
    for (id, outcomes) in &answers {
        let first = outcomes.iter().filter(|o| *o != "duplicate").count();
        assert_eq!(first, 1, "{id} must be recorded by exactly one answer, got {outcomes:?}");
    }

    // The late orders arrive; whichever instance's worker claims their events applies them.
    for &i in &late {
        assert_eq!(servers[fastrand::usize(..3)].register_order(&format!("pg-{i}")).await, StatusCode::CREATED);
    }
    let check = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(&check, "SELECT count(*) FROM inbox WHERE status = 'deferred'").await > 0 {
        assert!(Instant::now() < deadline, "deferred events were not retried by the workers");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    assert_eq!(count(&check, "SELECT count(*) FROM inbox").await, unique.len() as i64, "each event recorded once");
    assert_eq!(count(&check, "SELECT count(*) FROM inbox WHERE status <> 'processed'").await, 0);
    for i in 0..ORDERS {
        let row = check
            .query_one(
                "SELECT o.status, (SELECT count(*) FROM outbox x WHERE x.order_id = o.id AND x.kind = 'order.paid')
                 FROM orders o WHERE o.id = $1",
                &[&format!("pg-{i}")],
            )
            .await
            .expect("order");
        let (status, receipts): (String, i64) = (row.get(0), row.get(1));
        if i % 4 == 0 {
            assert_eq!(status, "refunded", "pg-{i}");
            assert!(receipts <= 1, "pg-{i} has {receipts} receipts");
        } else {
            assert_eq!((status.as_str(), receipts), ("paid", 1), "pg-{i}: exactly one receipt per paid order");
        }
    }
    let servers = Arc::into_inner(servers).expect("no delivery task is left");
    for server in servers {
        let log = server.log();
        assert!(!log.contains("panicked"), "{log}");
        server.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_every_database_session_under_load_answers_only_2xx_or_503_and_loses_no_acknowledged_event() {
    let Some(admin) = test_url() else { return };
    const N: usize = 3000;
    let db = TestDb::database(&admin).await;
    let dir = TestDir::new();
    let server = PgServer::start(&dir, &db.url).await;
    let pid = server.child.as_ref().expect("child").id();
    let server = Arc::new(server);
    let mut registrations = JoinSet::new();
    for chunk in (0..N).collect::<Vec<_>>().chunks(N / 16) {
        let (server, chunk) = (Arc::clone(&server), chunk.to_vec());
        registrations.spawn(async move {
            for i in chunk {
                assert_eq!(server.register_order(&format!("kill-{i}")).await, StatusCode::CREATED);
            }
        });
    }
    while let Some(done) = registrations.join_next().await {
        done.expect("registration");
    }

    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let in_flight = Arc::new(tokio::sync::Semaphore::new(24));
    let url = server.webhook_url();
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut deliveries = JoinSet::new();
    for i in 0..N {
        let d = payment(&format!("evt-kill-{i}"), &format!("kill-{i}"));
        let (client, url, in_flight, answered) =
            (client.clone(), url.clone(), Arc::clone(&in_flight), Arc::clone(&answered));
        deliveries.spawn(async move {
            let _permit = in_flight.acquire_owned().await.expect("semaphore");
            let answer = post(&client, &url, &d).await.unwrap_or_else(|e| panic!("{}: {e}", d.event_id));
            answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (d, answer)
        });
    }
    // Meanwhile, from the first answers to the last, keep killing every session of the database.
    let killer = connect(&db.url).await;
    let (mut killed, mut rounds) = (0, 0);
    while answered.load(std::sync::atomic::Ordering::Relaxed) < N / 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    while answered.load(std::sync::atomic::Ordering::Relaxed) < N * 9 / 10 {
        killed += killer
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .expect("terminate")
            .len();
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    while let Some(joined) = deliveries.join_next().await {
        let (d, (status, answer)) = joined.expect("delivery");
        match status {
            StatusCode::OK => acked.push((d, outcome(&answer).to_owned())),
            StatusCode::SERVICE_UNAVAILABLE => refused.push(d),
            other => panic!("{}: only 2xx or 503 may be answered, got {other} {answer}", d.event_id),
        }
    }
    eprintln!(
        "{killed} sessions killed in {rounds} rounds: {} acknowledged, {} answered 503",
        acked.len(),
        refused.len()
    );
    assert!(killed > 0 && rounds >= 1, "killed {killed} sessions in {rounds} rounds");
    assert!(!acked.is_empty(), "nothing was acknowledged");

    // Every acknowledged event is in the database.
    let check = db.client().await;
    for (d, outcome) in &acked {
        // A batch whose COMMIT was cut off is run again, and what had committed answers duplicate.
        assert!(outcome == "processed" || outcome == "duplicate", "{}: {outcome}", d.event_id);
        let row = check
            .query_opt("SELECT status FROM inbox WHERE event_id = $1", &[&d.event_id])
            .await
            .expect("inbox")
            .unwrap_or_else(|| panic!("{} was acknowledged but is not stored", d.event_id));
        assert_eq!(row.get::<_, String>(0), "processed", "{}", d.event_id);
    }
    // payhook recovered by itself: same process, ready, and the provider's retries go through.
    let mut server = Arc::into_inner(server).expect("no delivery task is left");
    assert!(server.is_running(), "payhook must not exit:\n{}", server.log());
    assert_eq!(server.child.as_ref().expect("child").id(), pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.readyz().await != StatusCode::OK {
        assert!(Instant::now() < deadline, "payhook did not become ready again:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for d in refused {
        let outcome = until_acked(client.clone(), url.clone(), Arc::new(d)).await;
        assert!(outcome == "processed" || outcome == "duplicate", "{outcome}");
    }
    assert_eq!(count(&check, "SELECT count(*) FROM orders WHERE status = 'paid'").await, N as i64);
    assert_eq!(count(&check, "SELECT count(*) FROM outbox WHERE kind = 'order.paid'").await, N as i64);
    drop(check);
    drop(killer);
    server.stop();
}

/// Forwards TCP connections to the database, and can cut them all and refuse new ones: the database "goes away"
/// without restarting the server that other tests share.
struct Proxy {
    port: u16,
    upstream: std::net::SocketAddr,
    tasks: Option<JoinSet<()>>,
}

impl Proxy {
    async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let mut proxy = Self { port, upstream, tasks: None };
        proxy.serve(listener);
        proxy
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let upstream = self.upstream;
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut pipes = JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                pipes.spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        self.tasks = Some(tasks);
    }

    /// Cuts every connection and stops listening.
    async fn stop(&mut self) {
        if let Some(mut tasks) = self.tasks.take() {
            tasks.shutdown().await;
        }
    }

    /// Listens again on the same port.
    async fn restart(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await.expect("rebind the proxy");
        self.serve(listener);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_postgres_is_unreachable_webhooks_get_503_and_readyz_is_not_ready_until_it_returns() {
    let Some(admin) = test_url() else { return };
    let db = TestDb::schema(&admin).await;
    let config: tokio_postgres::Config = db.url.parse().expect("the test URL parses");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let upstream = tokio::net::lookup_host((host.as_str(), config.get_ports().first().copied().unwrap_or(5432)))
        .await
        .expect("resolve")
        .next()
        .expect("an address");
    let mut proxy = Proxy::start(upstream).await;
    let schema = db.url.split("csearch_path%3D").nth(1).and_then(|s| s.split('&').next()).expect("schema");
    let via_proxy = format!(
        "postgres://{}@127.0.0.1:{}/{}?options=-csearch_path%3D{schema}&connect_timeout=2",
        config.get_user().unwrap_or("postgres"),
        proxy.port,
        config.get_dbname().unwrap_or("postgres")
    );
    let dir = TestDir::new();
    let server = PgServer::start(&dir, &via_proxy).await;
    assert_eq!(server.register_order("gone-1").await, StatusCode::CREATED);
    assert_eq!(server.readyz().await, StatusCode::OK);
    let url = server.webhook_url();

    proxy.stop().await;
    let d = payment("evt-gone-1", "gone-1");
    let (status, answer) = post(&server.client, &url, &d).await.expect("post while the database is gone");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    let (status, ready) = server.readyz_body().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert_ne!(ready["database"], "ok", "{ready}");
    assert_eq!(ready["writer"], "ok", "{ready}");
    let (status, _) = post(&server.client, &url, &d).await.expect("post again");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "still gone");

    proxy.restart().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.readyz().await != StatusCode::OK {
        assert!(Instant::now() < deadline, "payhook did not reconnect:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, answer) = post(&server.client, &url, &d).await.expect("post after the database returned");
    assert_eq!((status, outcome(&answer)), (StatusCode::OK, "processed"), "{answer}");
    let check = db.client().await;
    assert_eq!(count(&check, "SELECT count(*) FROM orders WHERE id = 'gone-1' AND status = 'paid'").await, 1);
    drop(check);
    server.stop();
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_import_and_config_check_work_on_postgres() {
    let Some(admin) = test_url() else { return };
    let db = TestDb::schema(&admin).await;
    let dir = TestDir::new();
    let config = dir.write("pg.toml", &pg_config(free_port(), &db.url));
    let rows: String = (0..250).map(|i| format!("imp-{i},{},usd\n", 100 + i)).collect();
    dir.write("orders.csv", &format!("id,amount,currency\n{rows}"));

    let out = dir.run(&["--config", config.to_str().expect("path"), "orders", "import", "orders.csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("250 created, 0 already registered, 0 conflicts"), "{}", text(&out.stdout));
    let again = dir.run(&["--config", config.to_str().expect("path"), "orders", "import", "orders.csv"]);
    assert!(text(&again.stdout).contains("0 created, 250 already registered"), "{}", text(&again.stdout));
    let check = db.client().await;
    assert_eq!(count(&check, "SELECT count(*) FROM orders WHERE status = 'pending'").await, 250);
    assert_eq!(count(&check, "SELECT amount FROM orders WHERE id = 'imp-7'").await, 107);

    let out = dir.run(&["--config", config.to_str().expect("path"), "config", "check"]);
    let shown = text(&out.stdout);
    assert!(out.status.success() && shown.contains("storage  postgres://") && shown.contains("pool_size 8"), "{shown}");
}

/// Runs `payhook --config CONFIG ARGS` and insists that it succeeds; returns its stdout.
fn admin_ok(dir: &TestDir, config: &str, args: &[&str]) -> String {
    let out = dir.run(&[&["--config", config], args].concat());
    assert!(
        out.status.success(),
        "payhook {args:?} failed: {}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `admin_ok` with `--json`, parsed.
fn admin_json(dir: &TestDir, config: &str, args: &[&str]) -> serde_json::Value {
    let stdout = admin_ok(dir, config, &[args, &["--json"]].concat());
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("payhook {args:?} --json printed no JSON ({e}):\n{stdout}"))
}

/// Runs `payhook --config CONFIG ARGS` and insists that it fails; returns its stderr.
fn admin_fails(dir: &TestDir, config: &str, args: &[&str]) -> String {
    let out = dir.run(&[&["--config", config], args].concat());
    assert!(!out.status.success(), "payhook {args:?} succeeded:\n{}", text(&out.stdout));
    text(&out.stderr)
}

fn listed_ids(listing: &serde_json::Value) -> Vec<&str> {
    listing["events"].as_array().expect("events").iter().map(|e| e["event_id"].as_str().expect("id")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_list_show_replay_and_requeue_on_postgres_without_a_server() {
    let Some(admin) = test_url() else { return };
    let db = TestDb::schema(&admin).await;
    let dir = TestDir::new();
    // One attempt for events (a payment for a missing order is dead at once) and for outbox rows, and a sink
    // nobody listens on: the receipt dies at its first delivery.
    let extra = format!(
        "\n[retry]\nmax_attempts = 1\n\n[dispatcher.retry]\nmax_attempts = 1\n\n[[sinks]]\nname = \"shop\"\n\
         url = \"http://127.0.0.1:{}/hook\"\nkinds = [\"order.paid\"]\ntimeout_ms = 1000\n",
        free_port()
    );
    let server = PgServer::start_with(&dir, &db.url, &extra).await;
    assert_eq!(server.register_order("o1").await, StatusCode::CREATED);
    let url = server.webhook_url();
    let deliver = async |d: &Signed| {
        let (status, answer) = post(&server.client, &url, d).await.expect("POST webhook");
        assert_eq!(status, StatusCode::OK, "{answer}");
        outcome(&answer).to_owned()
    };
    assert_eq!(deliver(&payment("evt_1", "o1")).await, "processed");
    assert_eq!(deliver(&payment("evt_2", "o_late")).await, "dead_lettered");
    let body = b"not json".to_vec();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
    let unreadable = Signed { event_id: String::new(), headers: signer().sign(&body, now, "unused"), body };
    assert_eq!(deliver(&unreadable).await, "dead_lettered");
    let check = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&check, "SELECT count(*) FROM outbox WHERE status = 'dead'").await == 0 {
        assert!(Instant::now() < deadline, "the receipt never died:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let config = server.config.to_str().expect("path").to_owned();
    server.stop();
    let config = config.as_str();

    // Listings, newest first, with a cursor; the detail of one event; stats.
    let all = admin_json(&dir, config, &["events", "list"]);
    let ids = listed_ids(&all);
    assert_eq!((ids.len(), &ids[1..]), (3, &["evt_2", "evt_1"][..]), "{all}");
    let page = admin_json(&dir, config, &["events", "list", "--limit", "2"]);
    let cursor = page["next_cursor"].as_i64().expect("a cursor to the next page").to_string();
    assert_eq!(
        listed_ids(&admin_json(&dir, config, &["events", "list", "--limit", "2", "--before", &cursor])),
        ["evt_1"]
    );
    let dlq = admin_ok(&dir, config, &["dlq", "list"]);
    assert_eq!(dlq.lines().count(), 3, "{dlq}");
    assert!(dlq.contains("evt_2") && !dlq.contains("evt_1"), "{dlq}");
    let detail = admin_json(&dir, config, &["events", "show", SOURCE, "evt_1"]);
    assert_eq!(detail["changes"].as_array().expect("changes").len(), 1, "{detail}");
    assert_eq!((&detail["outbox"][0]["kind"], &detail["outbox"][0]["sink"]), (&"order.paid".into(), &"shop".into()));
    let dead = admin_json(&dir, config, &["events", "show", SOURCE, "evt_2"]);
    assert_eq!(dead["attempt_log"][0]["outcome"], "dead_lettered", "{dead}");
    let stats = admin_json(&dir, config, &["stats"]);
    assert_eq!((&stats["events"]["processed"], &stats["events"]["dead_lettered"]), (&1.into(), &2.into()), "{stats}");
    assert_eq!(stats["outbox"]["by_status"]["dead"], 1, "{stats}");

    // The late order arrives; its dead letter is replayed (dry run first) and pays it; the rest stays.
    let preview = admin_json(&dir, config, &["dlq", "replay", "--dry-run", "--type", "payment.succeeded"]);
    assert_eq!((&preview["dry_run"], &preview["matched"]), (&true.into(), &1.into()), "{preview}");
    dir.write("late.csv", &format!("id,amount,currency\no_late,{AMOUNT},{CURRENCY}\n"));
    admin_ok(&dir, config, &["orders", "import", "late.csv"]);
    let report = admin_json(&dir, config, &["dlq", "replay", "--yes", "--type", "payment.succeeded"]);
    assert_eq!(report["outcomes"]["processed"], 1, "{report}");
    assert!(admin_fails(&dir, config, &["replay", SOURCE, "evt_2"]).contains("not a dead letter"));
    let unreadable_id = listed_ids(&admin_json(&dir, config, &["dlq", "list"]))[0].to_owned();
    let again = admin_ok(&dir, config, &["replay", SOURCE, &unreadable_id]);
    assert!(again.contains(&format!("{SOURCE}/{unreadable_id}: dead_lettered")), "{again}");

    // The dead receipt is re-queued once.
    let listed = admin_json(&dir, config, &["outbox", "list", "--status", "dead", "--order", "o1"]);
    let id = listed["outbox"][0]["id"].as_i64().expect("a dead row").to_string();
    let requeued = admin_ok(&dir, config, &["outbox", "retry", &id]);
    assert!(requeued.contains(&format!("outbox row {id}")) && requeued.contains("re-queued: pending"), "{requeued}");
    assert!(admin_fails(&dir, config, &["outbox", "retry", &id]).contains("not dead"));

    assert_eq!(count(&check, "SELECT count(*) FROM orders WHERE status = 'paid'").await, 2);
    assert_eq!(count(&check, "SELECT count(*) FROM outbox WHERE kind = 'order.paid' AND sink = 'shop'").await, 2);
    let pending = format!("SELECT count(*) FROM outbox WHERE id = {id} AND status = 'pending' AND attempts = 0");
    assert_eq!(count(&check, &pending).await, 1);
}
