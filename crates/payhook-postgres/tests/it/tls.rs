//! TLS against a real PostgreSQL with `ssl = on`, started by the test itself: `initdb` into a temporary
//! directory, a CA and a server certificate for `localhost` and 127.0.0.1 made with rcgen, and a `pg_hba.conf` that
//! trusts TLS connections from 127.0.0.1 and rejects plaintext ones. Each `sslmode` connects or is refused as
//! libpq promises, through `PgOptions` and `PgStore::open` as the binary uses them.
//!
//! One cluster serves every test of this file (starting one costs about a second). Statics are never dropped, so
//! the cluster is stopped by a watchdog instead of a `Drop`: the server runs under a shell that waits for its
//! stdin, a pipe from this process, to close, which happens when this process exits however it exits (passing,
//! panicking, killed); the shell then shuts the server down immediately (SIGQUIT, `pg_ctl stop -m immediate`) and
//! removes the directory.
//!
//! Like every PostgreSQL test, these say they were skipped without `PAYHOOK_TEST_POSTGRES_URL`; with it set, a
//! missing server binary (`pg_config --bindir`) is a failure.

use crate::test_url;
use payhook_postgres::{PgError, PgOptions, PgStore, TlsError, TlsProblem};
use payhook_store::contract::{T0, ingest, new_order, pay, processed, register_new};
use payhook_store::{Store, StoreError};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The test cluster: where it listens and where its certificates are.
#[derive(Debug)]
struct Cluster {
    port: u16,
    dir: PathBuf,
    /// The watchdog shell; its stdin closes when this process exits, which stops the server.
    _watchdog: Mutex<Child>,
}

impl Cluster {
    /// The CA that signed the server's certificate.
    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A CA that signed nothing the server has.
    fn wrong_ca(&self) -> PathBuf {
        self.dir.join("wrong-ca.pem")
    }

    /// `postgres://postgres@HOST:PORT/postgres?QUERY`.
    fn url(&self, host: &str, query: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres?{query}", self.port)
    }
}

/// The cluster, started by the first test that asks.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(start_cluster)
}

fn run(what: &str, command: &mut Command) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, as (certificate, key).
fn make_ca(name: &str) -> (rcgen::Certificate, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().expect("CA key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    (params.self_signed(&key).expect("self-sign the CA"), key)
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn start_cluster() -> Cluster {
    let started = Instant::now();
    let bindir = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .expect("pg_config --bindir: the PostgreSQL server binaries are needed for the TLS tests");
    for binary in ["initdb", "postgres", "pg_isready"] {
        assert!(bindir.join(binary).exists(), "{} is missing: install the PostgreSQL server", binary);
    }
    let dir = tempfile::Builder::new().prefix("payhook-tls-").tempdir().expect("temp dir").keep();
    // PostgreSQL refuses to run as root: as root, everything of the cluster belongs to `postgres` and runs as it.
    let as_root = std::fs::metadata(&dir).expect("temp dir").uid() == 0;
    let as_server = |program: &Path| {
        if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    };

    let (ca, ca_key) = make_ca("payhook test CA");
    let (wrong_ca, _) = make_ca("payhook test CA that signed nothing");
    let server_key = rcgen::KeyPair::generate().expect("server key");
    let server = rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("server params")
        .signed_by(&server_key, &ca, &ca_key)
        .expect("sign the server certificate");
    write(&dir.join("ca.pem"), &ca.pem());
    write(&dir.join("wrong-ca.pem"), &wrong_ca.pem());
    write(&dir.join("server.crt"), &server.pem());
    let key = dir.join("server.key");
    write(&key, &server_key.serialize_pem());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod the key");
    if as_root {
        run("chown", Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir));
    }

    let data = dir.join("data");
    run(
        "initdb",
        as_server(&bindir.join("initdb"))
            .args(["--no-sync", "--auth=trust", "--username=postgres", "--encoding=UTF8", "-D"])
            .arg(&data),
    );
    let hba = data.join("pg_hba.conf");
    write(&hba, "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n");
    if as_root {
        run("chown", Command::new("chown").args(["postgres:postgres"]).arg(&hba));
    }

    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("port").port();
    // The watchdog: the server in the background, then wait for stdin to close, then an immediate shutdown
    // (SIGQUIT) and the directory removed.
    let script = r#"
        "$1" -D "$2/data" -c listen_addresses=127.0.0.1 -c port="$3" -c unix_socket_directories="$2" \
            -c ssl=on -c ssl_cert_file="$2/server.crt" -c ssl_key_file="$2/server.key" \
            -c fsync=off -c max_connections=40 -c shared_buffers=16MB 2>"$2/server.log" &
        server=$!
        cat >/dev/null
        kill -QUIT "$server"
        wait "$server"
        rm -rf "$2"
    "#;
    let mut watchdog = as_server(Path::new("/bin/sh"))
        .args(["-c", script, "sh"])
        .arg(bindir.join("postgres"))
        .arg(&dir)
        .arg(port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    // Nothing is ever written: the pipe only has to stay open as long as this process runs.
    assert!(watchdog.stdin.is_some(), "the watchdog's stdin is a pipe");

    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ready = Command::new(bindir.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .status()
            .expect("pg_isready");
        if ready.success() {
            break;
        }
        if Instant::now() > deadline || watchdog.try_wait().ok().flatten().is_some() {
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            panic!("the TLS test server did not start on port {port}: {log}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("TLS test server on 127.0.0.1:{port} ({}), started in {:?}", dir.display(), started.elapsed());
    Cluster { port, dir, _watchdog: Mutex::new(watchdog) }
}

/// Every message of an error's chain, as `payhook serve` prints it when it exits.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Opens the store on `url` (with a short connect timeout, for the refusals).
async fn open(url: &str) -> Result<PgStore, StoreError> {
    let mut options = PgOptions::new(url).expect("the URL parses");
    options.pool_size = 4;
    options.writers = 1;
    options.connect_timeout_ms = 3_000;
    PgStore::open(options).await
}

/// Opens the store on `url` and pings it; fails the test with the error chain if that does not work.
async fn connects(url: &str) -> PgStore {
    let store = open(url).await.unwrap_or_else(|e| panic!("{url}: {}", chain(&e)));
    store.ping().await.unwrap_or_else(|e| panic!("{url}: ping: {}", chain(&e)));
    store
}

/// The TLS failure `url` is refused with, and the whole message.
async fn refused_by_tls(url: &str) -> (TlsError, String) {
    let e = match open(url).await {
        Ok(store) => {
            store.shutdown().await;
            panic!("{url} connected, but must be refused");
        }
        Err(e) => e,
    };
    let text = chain(&e);
    eprintln!("refused as expected: {text}");
    match &e {
        StoreError::Unavailable(cause) => match cause.downcast_ref::<PgError>() {
            Some(PgError::Tls(tls)) => (tls.clone(), text),
            _ => panic!("{url}: not a TLS failure: {text}"),
        },
        _ => panic!("{url}: not a TLS failure: {text}"),
    }
}

#[tokio::test]
async fn require_connects_over_tls_and_the_store_records_a_delivery() {
    if test_url().is_none() {
        return;
    }
    let c = cluster();
    // The server rejects plaintext, so a connection at all is a TLS connection.
    let store = connects(&c.url("127.0.0.1", "sslmode=require")).await;
    let order = format!("ord_tls_{:016x}", fastrand::u64(..));
    register_new(&store, new_order(&order, 100, T0)).await;
    assert_eq!(ingest(&store, pay(&format!("evt_{order}"), &order, 100, T0 + 1)).await, processed());
    store.shutdown().await;
}

#[tokio::test]
async fn without_sslmode_tls_is_used_when_the_server_offers_it() {
    if test_url().is_none() {
        return;
    }
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster().port);
    assert_eq!(PgOptions::new(&url).unwrap().tls_summary(), "prefer");
    connects(&url).await.shutdown().await;
}

#[tokio::test]
async fn verify_full_with_the_servers_ca_connects_to_the_name_in_its_certificate() {
    if test_url().is_none() {
        return;
    }
    let c = cluster();
    let url = c.url("localhost", &format!("sslmode=verify-full&sslrootcert={}", c.ca().display()));
    connects(&url).await.shutdown().await;
}

#[tokio::test]
async fn verify_full_with_another_ca_is_refused_as_not_trusted_and_the_password_is_not_shown() {
    if test_url().is_none() {
        return;
    }
    let c = cluster();
    let url = format!(
        "postgres://postgres:s3cret-pw@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        c.port,
        c.wrong_ca().display()
    );
    let (tls, text) = refused_by_tls(&url).await;
    assert!(matches!(tls, TlsError::Handshake { problem: TlsProblem::Untrusted, .. }), "{text}");
    assert!(text.contains("the server's certificate is not trusted"), "{text}");
    assert!(text.contains(&c.wrong_ca().display().to_string()), "names the roots it tried: {text}");
    assert!(!text.contains("s3cret-pw") && !format!("{tls:?}").contains("s3cret-pw"), "{text}");
}

#[tokio::test]
async fn verify_full_to_a_host_name_not_in_the_certificate_is_refused() {
    if test_url().is_none() {
        return;
    }
    let c = cluster();
    // `hostaddr` reaches the server while the name checked against its certificate is another.
    let query = format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}", c.ca().display());
    let (tls, text) = refused_by_tls(&c.url("db.wrong.example", &query)).await;
    assert!(matches!(tls, TlsError::Handshake { problem: TlsProblem::WrongHost, .. }), "{text}");
    assert!(text.contains("not valid for the host name") && text.contains("db.wrong.example"), "{text}");
}

#[tokio::test]
async fn verify_ca_with_the_servers_ca_connects_whatever_the_host_name() {
    if test_url().is_none() {
        return;
    }
    let c = cluster();
    let query = format!("hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={}", c.ca().display());
    connects(&c.url("db.wrong.example", &query)).await.shutdown().await;
    // The chain is still checked.
    let query = format!("hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={}", c.wrong_ca().display());
    let (tls, text) = refused_by_tls(&c.url("db.wrong.example", &query)).await;
    assert!(matches!(tls, TlsError::Handshake { problem: TlsProblem::Untrusted, .. }), "{text}");
}

#[tokio::test]
async fn disable_is_refused_by_a_server_that_rejects_plaintext() {
    if test_url().is_none() {
        return;
    }
    let e = open(&cluster().url("127.0.0.1", "sslmode=disable")).await.expect_err("plaintext must be refused");
    let text = chain(&e);
    eprintln!("refused as expected: {text}");
    assert!(text.contains("pg_hba.conf rejects connection") && text.contains("no encryption"), "{text}");
}
