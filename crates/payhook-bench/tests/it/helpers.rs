//! The `payhook-bench` binary as a child process, against a payhook server run in the test's own process (the
//! server's library on a SQLite file in a temp dir, configured by the same file the child reads).

use payhook::config::{Config, StorageConfig};
use payhook_server::Running;
use payhook_sqlite::SqliteStore;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use tempfile::TempDir;

pub const API_TOKEN: &str = "it-api-token-0123456789abcdef";
pub const SOURCE: &str = "payments";

/// A temp dir for one test: the configuration and the database.
#[derive(Debug)]
pub struct TestDir {
    dir: TempDir,
}

impl TestDir {
    pub fn new() -> Self {
        Self { dir: tempfile::Builder::new().prefix("payhook-bench-it-").tempdir().expect("temp dir") }
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("payhook.db")
    }

    /// Writes the test configuration for a server on `port`: the benchmark scripts' one (scripts/bench-lib.sh), an
    /// hmac source of the generic format, with the API token and the dir's database.
    pub fn config(&self, port: u16) -> PathBuf {
        let path = self.dir.path().join("payhook.toml");
        let text = format!(
            r#"[server]
listen = "127.0.0.1:{port}"
api_token = "{API_TOKEN}"
[storage]
url = "sqlite://{db}"
[[sources]]
name = "{SOURCE}"
scheme = "hmac"
header = "X-Webhook-Signature"
format = "generic"
secrets = ["whsec_bench_secret"]
"#,
            db = self.db_path().display()
        );
        std::fs::write(&path, text).expect("write the configuration");
        path
    }

    /// Runs `payhook-bench ARGS` to completion. Within a (multi-threaded) runtime, its worker hands its tasks over
    /// while it waits, so that a server of this process keeps serving.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_payhook-bench"));
        command.current_dir(self.dir.path()).env_remove("PAYHOOK_CONFIG").env_remove("PAYHOOK_API_TOKEN");
        command.args(args).stdin(Stdio::null());
        let mut run = move || command.output().expect("run payhook-bench");
        match tokio::runtime::Handle::try_current() {
            Ok(_) => tokio::task::block_in_place(run),
            Err(_) => run(),
        }
    }

    /// Opens the database file directly (for checks after the server stopped).
    pub fn open_db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.db_path()).expect("open the database file")
    }
}

/// A port nobody listens on right now: bind port 0, read it, let it go.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// The payhook server of `dir`'s configuration, in this process.
pub struct Server {
    running: Running<SqliteStore>,
    store: Arc<SqliteStore>,
    pub config: PathBuf,
}

impl Server {
    /// Starts the server of the standard test configuration on a free port, as `payhook serve` would.
    pub async fn start(dir: &TestDir) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let config = dir.config(listener.local_addr().expect("local addr").port());
        let cfg = Config::load(Some(&config)).expect("the test configuration loads");
        let StorageConfig::Sqlite(options) = cfg.storage else { panic!("the test configuration is SQLite's") };
        let store = Arc::new(SqliteStore::open(options).expect("open the database"));
        let running = payhook_server::start(listener, cfg.settings, Arc::clone(&store)).expect("start the server");
        Server { running, store, config }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.running.addr)
    }

    pub fn config(&self) -> &str {
        self.config.to_str().expect("a UTF-8 path")
    }

    /// Drains the server and closes the database.
    pub async fn stop(self) {
        self.running.shutdown().await.expect("a clean shutdown");
        self.store.shutdown().await;
    }
}

/// Output as text, for assertions and messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn count(db: &rusqlite::Connection, sql: &str) -> i64 {
    db.query_row(sql, [], |r| r.get(0)).expect(sql)
}
