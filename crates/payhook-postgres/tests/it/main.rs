//! Integration tests of the PostgreSQL backend, against the server named by `PAYHOOK_TEST_POSTGRES_URL`
//! (e.g. `postgres://postgres@127.0.0.1:5432/test`). Each test works in a fresh schema of its own, dropped at the
//! end. Without the variable, every test says it was skipped and passes.
//!
//! * `batch_set`: a batch run as a set of statements does what running its deliveries one at a time does (random
//!   batches into two schemas, compared row for row).
//! * `billing`: payments racing a subscription's end on several instances; a billing dead letter replayed.
//! * `contract`: the store contract every backend must pass (`payhook_store::contract`), with group commit and
//!   with one commit per event.
//! * `counters`: the counters behind `stats` are kept whoever writes, read without a scan, corrected by a recount.
//! * `executing`: of the batches in flight, at most `executing_writers` run their statements at once, and a batch
//!   gives its turn back once its `COMMIT` is sent.
//! * `failover`: a multi-host URL whose first host is gone; a server that turns read-only under the store's
//!   connections (a demoted or fenced primary): they are dropped, and writes resume without a restart.
//! * `faults`: a failing delivery rolls back only its own savepoint; a deadlocked batch is run again whole; a
//!   statement timeout answers with an error and stores nothing.
//! * `instances`: several stores (instances) on one schema: migrations once, dedup across them, leases (deferred
//!   events and outbox rows) split by `SKIP LOCKED`, one alert per window and one effect per replay across them,
//!   no deadlock with dead letters and alerts in overlapping batches.
//! * `listings`: every listing walks an index matching its filter or is a bounded scan (the plan of each shape).
//! * `order_retention`: deleting settled orders costs the same per order however many went before.
//! * `partitions`: retention drops whole days of the inbox: old days' partitions are gone, dead letters and
//!   deferred events moved to the held partition survive and can be replayed, keys go with their day, counters
//!   stay exact; two instances prune at once while deliveries arrive.
//! * `probe`: the ping answers on a connection of its own while every pooled connection is held.
//! * `read_routing`: with a read URL, listings and stats come from it (another schema here), point reads and
//!   writes from the primary, and a listing there waits for nothing of the primary's pool.
//! * `replication`: the primary's replication as the store reports it (no standby on the test server: 0
//!   synchronous ones, or unknown to a role without pg_monitor), read on the probe's connection.
//! * `resilience`: connections terminated under load: errors only, nothing acknowledged lost, recovery alone.
//! * `tls`: each `sslmode` against a server of its own with `ssl = on` that rejects plaintext: `require` and
//!   `prefer` connect, `verify-full` needs the right CA and host name, `verify-ca` only the CA, `disable` is refused.
//! * `upgrade`: a database that the migrations before the baseline built is at the baseline, with the catalog of a
//!   schema created from it (`catalog`: a schema's catalog as comparable lines); an older one is refused.

mod batch_set;
mod billing;
mod catalog;
#[cfg(payhook_test_postgres)]
mod contract;
mod counters;
mod documents;
mod executing;
mod failover;
mod faults;
mod instances;
mod listings;
mod order_retention;
mod partitions;
mod probe;
mod read_routing;
mod replication;
mod resilience;
mod tls;
mod upgrade;

use payhook_core::retry::RetryPolicy;
use payhook_postgres::{PgOptions, PgStore};
use std::time::Duration;

/// The variable naming the test server.
pub const URL_VAR: &str = "PAYHOOK_TEST_POSTGRES_URL";

/// The test server's URL, or `None` after saying that the calling test is skipped.
pub fn test_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("skipped: {URL_VAR} not set");
            None
        }
    }
}

/// Without a test server the contract cases are not compiled in (see build.rs); this says so.
#[cfg(not(payhook_test_postgres))]
#[test]
fn the_store_contract_is_skipped_without_a_test_database() {
    assert!(test_url().is_none());
    eprintln!("skipped: the store contract against PostgreSQL ({URL_VAR} not set at build time)");
}

/// A schema of its own on the test server, dropped (with everything in it) when this is dropped.
#[derive(Debug)]
pub struct TempSchema {
    url: String,
    name: String,
}

impl TempSchema {
    /// Creates `payhook_test_<random>`.
    pub async fn create(url: &str) -> Self {
        let name = format!("payhook_test_{:016x}", fastrand::u64(..));
        let side = connect(url).await;
        side.batch_execute(&format!("CREATE SCHEMA {name}")).await.expect("create the test schema");
        Self { url: url.to_owned(), name }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Store options whose connections work in this schema (`-c search_path=…` in the startup options).
    pub fn options(&self, policy: RetryPolicy) -> PgOptions {
        let mut options = PgOptions::new(&self.url).expect("the test URL parses");
        options.config.options(format!("-c search_path={}", self.name));
        // Names the store's own sessions in pg_stat_activity, apart from other tests' and from side connections.
        options.config.application_name(&self.name);
        options.retry = policy;
        options
    }

    /// Store options like [`TempSchema::options`] that connect through `proxy` (which a test can stop and restart:
    /// the server going away), with 1 s connect and pool waits so that failures come quickly.
    pub fn options_through(&self, proxy: &Proxy, policy: RetryPolicy) -> PgOptions {
        let mut options = self.options(policy);
        let search_path = options.config.get_options().expect("search_path").to_owned();
        options.config = proxy.url(&self.url).parse().expect("proxy URL");
        options.config.options(search_path);
        (options.connect_timeout_ms, options.pool_wait_ms) = (1_000, 1_000);
        options
    }

    /// A connection of the test's own in the schema, as an operator (or a fault) would open one.
    pub async fn side(&self) -> tokio_postgres::Client {
        let client = connect(&self.url).await;
        client.batch_execute(&format!("SET search_path = {}", self.name)).await.expect("set search_path");
        client
    }
}

impl Drop for TempSchema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on; a thread with its own runtime can.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                let side = connect(&url).await;
                side.batch_execute("SET lock_timeout = '10s'").await.expect("lock_timeout");
                if let Err(e) = side.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE")).await {
                    eprintln!("could not drop the test schema {name}: {e}");
                }
            });
        });
        let _ = dropped.join();
    }
}

/// A plain connection to `url`, its connection task spawned on the current runtime.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A login role of the test's own that owns a fresh schema, for tests that change what one role may do or see
/// (make its sessions read-only, grant it `pg_monitor`) without touching any other test. The schema, then the
/// role, are dropped when this is dropped.
#[derive(Debug)]
pub struct RoleSchema {
    schema: Option<TempSchema>,
    url: String,
    role: String,
}

impl RoleSchema {
    /// Creates `<prefix>_<random>` and a schema it owns.
    pub async fn create(url: &str, prefix: &str) -> Self {
        let role = format!("{prefix}_{:016x}", fastrand::u64(..));
        let admin = connect(url).await;
        admin.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.expect("create the role");
        let schema = TempSchema::create(url).await;
        admin.batch_execute(&format!("ALTER SCHEMA {} OWNER TO {role}", schema.name())).await.expect("schema owner");
        Self { schema: Some(schema), url: url.to_owned(), role }
    }

    /// The role's name.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// Store options that connect as the role, in its schema.
    pub fn options(&self, policy: RetryPolicy) -> PgOptions {
        let mut options = self.schema.as_ref().expect("the schema lives until drop").options(policy);
        options.config.user(&self.role);
        options
    }
}

impl Drop for RoleSchema {
    fn drop(&mut self) {
        drop(self.schema.take());
        let (url, role) = (self.url.clone(), self.role.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                if let Err(e) = connect(&url).await.batch_execute(&format!("DROP ROLE IF EXISTS {role}")).await {
                    eprintln!("could not drop the test role {role}: {e}");
                }
            });
        });
        let _ = dropped.join();
    }
}

/// A PostgreSQL store in a schema of its own; the schema is dropped after the store.
#[derive(Debug)]
pub struct TempStore {
    // Declared first, so that the store (its batcher and pool) goes before its schema.
    store: PgStore,
    schema: TempSchema,
}

impl TempStore {
    /// A fresh store on the test server with `policy`, default options otherwise.
    pub async fn open(url: &str, policy: RetryPolicy) -> Self {
        Self::open_with(url, policy, |_| {}).await
    }

    /// A fresh store with its options adjusted by `adjust`.
    pub async fn open_with(url: &str, policy: RetryPolicy, adjust: impl FnOnce(&mut PgOptions)) -> Self {
        let schema = TempSchema::create(url).await;
        let mut options = schema.options(policy);
        adjust(&mut options);
        let store = PgStore::open(options).await.expect("open the postgres store");
        Self { store, schema }
    }

    /// Its schema.
    pub fn schema(&self) -> &TempSchema {
        &self.schema
    }

    /// The store itself, for PostgreSQL-specific calls.
    pub fn pg(&self) -> &PgStore {
        &self.store
    }
}

payhook_store::delegate_store!(TempStore => store);

/// Waits until `condition` holds (checked every 10 ms), failing the test after `within`.
pub async fn eventually<F: AsyncFnMut() -> bool>(what: &str, within: Duration, mut condition: F) {
    let deadline = tokio::time::Instant::now() + within;
    while !condition().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sessions named `application_name` (a store's, see [`TempSchema::options`]) that wait for a lock.
pub async fn waiting_for_locks(side: &tokio_postgres::Client, application_name: &str) -> i64 {
    side.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
        &[&application_name],
    )
    .await
    .expect("pg_stat_activity")
    .get(0)
}

/// Every pooled connection of a store (of `pool_size` 2 with one writer) held: a query and a batch wait for a lock
/// that a session of the test holds on `orders`. [`FullPool::release`] lets them finish and checks that they did.
#[derive(Debug)]
pub struct FullPool {
    side: tokio_postgres::Client,
    /// A session that watches `pg_stat_activity` (read once per transaction, so not `side`).
    watch: tokio_postgres::Client,
    name: String,
    read: tokio::task::JoinHandle<Result<Option<payhook_store::OrderView>, payhook_store::StoreError>>,
    write: tokio::task::JoinHandle<Result<payhook_store::Registered, payhook_store::StoreError>>,
}

impl FullPool {
    /// A fresh store whose pool a [`FullPool`] can fill: two connections, one of them the writers', and 1 s waits.
    pub async fn store(url: &str) -> std::sync::Arc<TempStore> {
        let store = TempStore::open_with(url, payhook_store::contract::test_policy(), |o| {
            (o.pool_size, o.writers, o.pool_wait_ms, o.connect_timeout_ms) = (2, 1, 1_000, 1_000);
        })
        .await;
        std::sync::Arc::new(store)
    }

    /// Registers `ord_p`, locks `orders`, and waits until a read of it and a registration of `ord_q` wait.
    pub async fn hold(store: &std::sync::Arc<TempStore>) -> Self {
        use payhook_store::Store;
        use payhook_store::contract::{T0, new_order, register_new};
        register_new(&**store, new_order("ord_p", 100, T0)).await;
        let side = store.schema().side().await;
        let watch = store.schema().side().await;
        side.batch_execute("BEGIN; LOCK TABLE orders IN ACCESS EXCLUSIVE MODE").await.expect("lock the orders");
        let read = tokio::spawn({
            let store = std::sync::Arc::clone(store);
            async move { store.order(&payhook_core::event::OrderId::parse("ord_p").expect("order id")).await }
        });
        let write = tokio::spawn({
            let store = std::sync::Arc::clone(store);
            async move { store.register_order(new_order("ord_q", 100, T0)).await }
        });
        let name = store.schema().name().to_owned();
        eventually("a query and a batch wait for the lock", Duration::from_secs(10), async || {
            waiting_for_locks(&watch, &name).await >= 2
        })
        .await;
        Self { side, watch, name, read, write }
    }

    /// Checks that the query and the batch still wait, unlocks, and checks that both complete.
    pub async fn release(self) {
        assert_eq!(waiting_for_locks(&self.watch, &self.name).await, 2, "the pool was full throughout");
        self.side.batch_execute("ROLLBACK").await.expect("unlock the orders");
        assert!(self.read.await.expect("read task").expect("the read completes").is_some());
        self.write.await.expect("write task").expect("the registration completes");
    }
}

/// A TCP proxy in front of the test server, standing in for the network or the server going away and coming back
/// (the server itself is shared with other tests and must not be restarted).
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    upstream: std::net::SocketAddr,
    tasks: Option<tokio::task::JoinSet<()>>,
}

impl Proxy {
    /// Listens on a free local port and forwards every connection to `upstream`.
    pub async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let mut proxy = Self { port, upstream, tasks: None };
        proxy.serve(listener);
        proxy
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let upstream = self.upstream;
        let mut tasks = tokio::task::JoinSet::new();
        let (conns_tx, mut conns_rx) = tokio::sync::mpsc::unbounded_channel::<tokio::net::TcpStream>();
        tasks.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if conns_tx.send(stream).is_err() {
                    return;
                }
            }
        });
        tasks.spawn(async move {
            let mut pipes = tokio::task::JoinSet::new();
            while let Some(mut client) = conns_rx.recv().await {
                pipes.spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
            // Dropping `pipes` here (when this task is aborted) closes every proxied connection.
            pipes.shutdown().await;
        });
        self.tasks = Some(tasks);
    }

    /// Closes every proxied connection and refuses new ones: the database is gone.
    pub async fn stop(&mut self) {
        if let Some(mut tasks) = self.tasks.take() {
            tasks.shutdown().await;
        }
    }

    /// Accepts and forwards connections again, on the same port: the database is back.
    pub async fn restart(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await.expect("rebind the proxy");
        self.serve(listener);
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url(&self, url: &str) -> String {
        let config: tokio_postgres::Config = url.parse().expect("the test URL parses");
        let user = config.get_user().unwrap_or("postgres");
        let db = config.get_dbname().unwrap_or("postgres");
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }
}

/// The test server's TCP address.
pub fn server_addr(url: &str) -> std::net::SocketAddr {
    use std::net::ToSocketAddrs;
    let config: tokio_postgres::Config = url.parse().expect("the test URL parses");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    (host.as_str(), port).to_socket_addrs().expect("resolve the test server").next().expect("an address")
}
