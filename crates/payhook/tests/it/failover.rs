//! Losing the database machine: a PostgreSQL primary with a streaming standby, built in temp dirs from the machine's
//! own server binaries (`pg_config --bindir`: initdb, pg_basebackup, pg_ctl, run as the `postgres` user), two
//! `payhook serve` instances on the multi-host URL (`…?target_session_attrs=read-write`), and a retrying provider's
//! load spread over both. At random moments the primary is killed (SIGKILL to the postmaster and every backend, and
//! its replication link cut), the standby promoted, and the old primary rebuilt as the new standby from a fresh base
//! backup, several times per run. At the end the invariant checker reads the last primary: every acknowledged
//! delivery is there, nothing applied twice, every outbox row delivered to the sink, no event left deferred (the
//! dispatcher and the retry worker resumed; orders registered only after a failover have their early payments
//! applied).
//!
//! The replication link crosses a proxy that delays each direction (`PAYHOOK_FAILOVER_DELAY_MS`, 10 ms by default:
//! two machines some distance apart), and a kill cuts it, dropping what was on the wire. With a synchronous
//! standby (`synchronous_standby_names = '*'`, `synchronous_commit = on`) nothing acknowledged can be lost; the
//! control runs the same harness with asynchronous replication and must find acknowledged deliveries lost, which
//! proves that the harness can see a loss.
//!
//! Like Patroni's (non-strict) synchronous mode, the new primary runs without a synchronous standby from its
//! promotion until the rebuilt one streams, and the next kill waits until that one is synchronous again.
//!
//! `PAYHOOK_TEST_FAILOVER=1` runs these tests (`.ci/run` sets it); `PAYHOOK_FAILOVER_KILLS` sets the number of
//! kills (5 by default), `PAYHOOK_FAILOVER_SEED` replays a run's workload and schedule, `PAYHOOK_FAILOVER_DELAY_MS`
//! sets the link's delay (the control: `PAYHOOK_FAILOVER_CONTROL_KILLS`, 3, and `PAYHOOK_FAILOVER_CONTROL_DELAY_MS`,
//! 50). Each kill prints the time from the kill and from the promotion to the first 2xx on the new primary.

use crate::helpers::{Recorder, SOURCE, TestDir, free_port};
use crate::postgres::{PgServer, connect};
use crate::provider::{AckedOutcomes, Load, Workload, env_u64};
use payhook_postgres::{PgOptions, PgStore};
use payhook_store::checker::{self, Acked, Evidence, Violation};
use reqwest::StatusCode;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ENABLE_VAR: &str = "PAYHOOK_TEST_FAILOVER";

/// Whether the failover tests run here; says so when they do not.
fn enabled() -> bool {
    if std::env::var(ENABLE_VAR).is_ok_and(|v| v == "1") {
        return true;
    }
    eprintln!("skipped: {ENABLE_VAR}=1 not set (the failover tests build PostgreSQL clusters of their own)");
    false
}

/// Where the machine's PostgreSQL server binaries are.
fn bindir() -> PathBuf {
    let out = Command::new("pg_config").arg("--bindir").output().expect("run pg_config --bindir");
    assert!(out.status.success(), "pg_config --bindir failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs one of the server binaries as the `postgres` user (initdb and the server refuse to run as root).
fn as_postgres(bin: &Path, tool: &str, args: &[&str]) {
    if let Err(e) = try_as_postgres(bin, tool, args) {
        panic!("{e}");
    }
}

/// The same, with the failure as a message.
fn try_as_postgres(bin: &Path, tool: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new("runuser")
        .current_dir("/tmp")
        .args(["-u", "postgres", "--"])
        .arg(bin.join(tool))
        .args(args)
        .output()
        .map_err(|e| format!("run {tool}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{tool} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The uid and gid of the `postgres` user.
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").args([flag, "postgres"]).output().expect("run id");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("a numeric id")
    };
    (id("-u"), id("-g"))
}

/// A TCP link that delays every chunk by `delay` in each direction, and can be cut: the network between the two
/// database machines. Cutting drops what is still on the wire; new connections are forwarded again.
struct DelayLink {
    port: u16,
    pipes: Arc<Mutex<tokio::task::JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
    /// While set, nothing is forwarded (it waits on the link): a network that stopped delivering.
    stalled: Arc<std::sync::atomic::AtomicBool>,
}

impl DelayLink {
    async fn start(upstream_port: u16, delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the link");
        let port = listener.local_addr().expect("link address").port();
        let pipes: Arc<Mutex<tokio::task::JoinSet<()>>> = Arc::default();
        let stalled: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (spawn_into, stall) = (Arc::clone(&pipes), Arc::clone(&stalled));
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream_port)).await else { continue };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let mut pipes = spawn_into.lock().expect("link lock");
                pipes.spawn(Self::pipe(client_read, server_write, delay, Arc::clone(&stall)));
                pipes.spawn(Self::pipe(server_read, client_write, delay, Arc::clone(&stall)));
            }
        });
        Self { port, pipes, accept, stalled }
    }

    /// Copies `from` to `to`, each chunk `delay` after it was read.
    async fn pipe(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        delay: Duration,
        stalled: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(4096);
        let read = async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = from.read(&mut buf).await {
                if n == 0 || tx.send((tokio::time::Instant::now() + delay, buf[..n].to_vec())).await.is_err() {
                    break;
                }
            }
        };
        let write = async move {
            while let Some((at, chunk)) = rx.recv().await {
                tokio::time::sleep_until(at).await;
                while stalled.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if to.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            let _ = to.shutdown().await;
        };
        tokio::join!(read, write);
    }

    /// Stops delivering anything, without closing a connection: the other side waits.
    fn stall(&self) {
        self.stalled.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Closes every connection on the link at once, dropping what was still on its way.
    fn cut(&self) {
        self.stalled.store(false, std::sync::atomic::Ordering::Relaxed);
        self.pipes.lock().expect("link lock").abort_all();
    }
}

impl Drop for DelayLink {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// One database machine: a data directory and its port.
struct Node {
    name: String,
    data: PathBuf,
    port: u16,
    log: PathBuf,
}

impl Node {
    fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    fn start(&self, bin: &Path) {
        // A killed postmaster leaves its socket's lock file, naming its pid; where nothing reaps the dead
        // postmaster, that pid still "exists" (a zombie) and the next start would refuse the socket.
        let sockets = self.data.parent().expect("the cluster's directory");
        for stale in [format!(".s.PGSQL.{}.lock", self.port), format!(".s.PGSQL.{}", self.port)] {
            let _ = std::fs::remove_file(sockets.join(stale));
        }
        let (data, log) = (self.data.to_string_lossy(), self.log.to_string_lossy());
        if let Err(e) = try_as_postgres(bin, "pg_ctl", &["-D", &data, "-l", &log, "-w", "-t", "120", "start"]) {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!("{e}\n{} log:\n{}", self.name, tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
    }

    /// The postmaster's pid, from its pid file, while it runs.
    fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        let pid: u32 = text.lines().next()?.trim().parse().ok()?;
        Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }

    /// SIGKILL to the postmaster and every process it started, at once: the machine is gone.
    fn kill(&self) {
        let Some(pid) = self.postmaster_pid() else { return };
        let mut victims = vec![pid];
        for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            // The parent pid is the second field after the command name (which may hold spaces, in parentheses).
            let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
            if parent.and_then(|p| p.parse::<u32>().ok()) == Some(pid) {
                victims.push(child);
            }
        }
        let args: Vec<String> = victims.iter().map(u32::to_string).collect();
        // A backend may exit on its own between the listing and the kill: `kill` then complains about that one.
        let _ = Command::new("kill").arg("-KILL").args(&args).stderr(std::process::Stdio::null()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while victims.iter().any(|p| Path::new(&format!("/proc/{p}/stat")).exists() && !is_zombie(*p)) {
            assert!(Instant::now() < deadline, "{} did not die", self.name);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// What one failover took, from the provider's side.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// From the kill to the end of the promotion (the failover manager's detection time included).
    kill_to_promoted: Duration,
    /// From the end of the promotion to the first delivery acknowledged after it (by the new primary: the old
    /// one is dead and the standby took no writes before).
    promoted_to_first_ack: Duration,
    /// Deliveries acknowledged between the kill and the end of the promotion: answers of commits made before the
    /// kill, still on their way to the provider.
    acked_meanwhile: usize,
}

/// A primary and a standby, each on its own link, one of them primary at a time.
struct Cluster {
    bin: PathBuf,
    // Declared before `root`, so that the nodes are killed before their directories go.
    nodes: [Node; 2],
    links: [DelayLink; 2],
    primary: usize,
    sync: bool,
    _root: tempfile::TempDir,
}

const DB: &str = "payhook";

impl Cluster {
    /// Builds node 0 as the primary and node 1 as its standby, streaming (and synchronous with `sync`).
    async fn build(sync: bool, delay: Duration) -> Self {
        let bin = bindir();
        let root = tempfile::Builder::new().prefix("payhook-failover-").tempdir().expect("temp dir");
        let (uid, gid) = postgres_ids();
        std::os::unix::fs::chown(root.path(), Some(uid), Some(gid)).expect("chown the cluster's directory");
        let node = |i: usize| Node {
            name: format!("node{i}"),
            data: root.path().join(format!("node{i}")),
            port: free_port(),
            log: root.path().join(format!("node{i}.log")),
        };
        let nodes = [node(0), node(1)];
        let links = [DelayLink::start(nodes[0].port, delay).await, DelayLink::start(nodes[1].port, delay).await];
        let data = nodes[0].data.to_string_lossy().into_owned();
        as_postgres(&bin, "initdb", &["-D", &data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        // No synchronous standby until there is one (a commit would wait for it forever): `rebuild_standby` names
        // it once it streams.
        let conf = format!(
            "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nwal_level = replica\n\
             max_wal_senders = 8\nwal_keep_size = '1GB'\nhot_standby = on\nshared_buffers = '64MB'\n\
             max_connections = 80\nsynchronous_standby_names = ''\nsynchronous_commit = on\n",
            nodes[0].port,
            root.path().display()
        );
        append(&nodes[0].data.join("postgresql.conf"), &conf);
        nodes[0].start(&bin);
        connect(&nodes[0].url("postgres")).await.batch_execute(&format!("CREATE DATABASE {DB}")).await.expect("db");
        let mut cluster = Self { bin, nodes, links, primary: 0, sync, _root: root };
        cluster.rebuild_standby().await;
        cluster
    }

    fn standby(&self) -> usize {
        1 - self.primary
    }

    /// The multi-host URL payhook is given: both machines, whichever is primary.
    fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{DB}?target_session_attrs=read-write",
            self.nodes[0].port, self.nodes[1].port
        )
    }

    async fn primary_client(&self) -> tokio_postgres::Client {
        connect(&self.nodes[self.primary].url(DB)).await
    }

    /// Makes the non-primary node a fresh standby of the primary (a base backup, replicating over the primary's
    /// link), and waits until it streams; with `sync`, until the primary counts it as synchronous.
    async fn rebuild_standby(&mut self) {
        let (p, s) = (self.primary, self.standby());
        let standby = &self.nodes[s];
        if standby.data.exists() {
            std::fs::remove_dir_all(&standby.data).expect("remove the old data directory");
        }
        let (data, port) = (standby.data.to_string_lossy().into_owned(), self.nodes[p].port.to_string());
        as_postgres(
            &self.bin,
            "pg_basebackup",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-D", &data, "-X", "stream", "-c", "fast", "--no-sync"],
        );
        let conf = format!(
            "\nport = {}\nprimary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={}'\n",
            standby.port, self.links[p].port, standby.name
        );
        append(&standby.data.join("postgresql.auto.conf"), &conf);
        std::fs::write(standby.data.join("standby.signal"), "").expect("standby.signal");
        let (uid, gid) = postgres_ids();
        for file in ["postgresql.auto.conf", "standby.signal"] {
            std::os::unix::fs::chown(standby.data.join(file), Some(uid), Some(gid)).expect("chown");
        }
        standby.start(&self.bin);
        if self.sync {
            synchronous_standby_names(&self.primary_client().await, "*").await;
        }
        self.wait_standby_state().await;
    }

    /// Waits until the standby streams, and is counted as synchronous with `sync` (asynchronous without).
    async fn wait_standby_state(&self) {
        let standby = &self.nodes[self.standby()];
        let primary = self.primary_client().await;
        let want = if self.sync { "sync" } else { "async" };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let row = primary
                .query_opt(
                    "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1",
                    &[&standby.name],
                )
                .await
                .expect("pg_stat_replication");
            if let Some(row) = row
                && row.get::<_, Option<String>>(0).as_deref() == Some("streaming")
                && row.get::<_, Option<String>>(1).as_deref() == Some(want)
            {
                break;
            }
            assert!(Instant::now() < deadline, "{} never became a {want} standby", standby.name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the standby has flushed everything the primary has written so far.
    async fn standby_caught_up(&self) {
        let primary = self.primary_client().await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let behind: bool = primary
                .query_one(
                    "SELECT coalesce(bool_or(flush_lsn < pg_current_wal_lsn()), true) FROM pg_stat_replication",
                    &[],
                )
                .await
                .expect("pg_stat_replication")
                .get(0);
            if !behind {
                return;
            }
            assert!(Instant::now() < deadline, "the standby did not catch up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The primary's machine is lost (its link cut, every process killed); after `detect` (a failover manager
    /// noticing) the standby is promoted. Returns when the promotion is done, with the time of the kill.
    async fn fail_over(&mut self, detect: Duration) -> Instant {
        let (p, s) = (self.primary, self.standby());
        let killed = Instant::now();
        self.links[p].cut();
        self.nodes[p].kill();
        tokio::time::sleep(detect).await;
        let data = self.nodes[s].data.to_string_lossy().into_owned();
        as_postgres(&self.bin, "pg_ctl", &["-D", &data, "-w", "-t", "60", "promote"]);
        self.primary = s;
        if self.sync {
            // No synchronous standby until the old primary is rebuilt: commits must not wait for one meanwhile.
            synchronous_standby_names(&self.primary_client().await, "").await;
        }
        killed
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &self.nodes {
            node.kill();
        }
    }
}

/// Names the synchronous standbys (`*`: any; empty: none) and reloads the configuration, as a failover manager does.
async fn synchronous_standby_names(primary: &tokio_postgres::Client, names: &str) {
    // ALTER SYSTEM refuses to run in a transaction block, which several statements in one call would be.
    let set = format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'");
    primary.batch_execute(&set).await.expect("ALTER SYSTEM");
    primary.batch_execute("SELECT pg_reload_conf()").await.expect("reload");
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).expect("open a configuration file");
    file.write_all(text.as_bytes()).expect("append to a configuration file");
}

/// The two instances' extra configuration: the sink, and short polls and backoffs so that the test ends soon.
fn instance_config(sink: &Recorder) -> String {
    format!(
        "\n[retry]\nbase_ms = 200\ncap_ms = 2000\n\n[worker]\npoll_interval_ms = 200\n\n[dispatcher]\n\
         poll_interval_ms = 100\n\n[dispatcher.retry]\nbase_ms = 100\ncap_ms = 1000\n\n[[sinks]]\nname = \"shop\"\n\
         url = \"http://{}/hook\"\nkinds = [\"*\"]\ntimeout_ms = 2000\n",
        sink.addr
    )
}

/// What the provider saw that breaks the promise: an event processed twice, an outcome that makes no sense.
fn answer_violations(acked: &AckedOutcomes) -> Vec<String> {
    let mut found = Vec::new();
    for (event_id, outcomes) in acked {
        let applied = outcomes.iter().filter(|o| *o == "processed").count();
        if applied > 1 {
            found.push(format!("{event_id} was answered processed {applied} times: {outcomes:?}"));
        }
        if !outcomes.iter().all(|o| ["processed", "duplicate", "deferred"].contains(&o.as_str())) {
            found.push(format!("{event_id}: unexpected outcomes {outcomes:?}"));
        }
    }
    found.sort();
    found
}

/// Registers `id` through `server`, waiting out a failover (503) on the way.
async fn register(server: &PgServer, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match server.register_order(id).await {
            StatusCode::CREATED | StatusCode::OK => return,
            StatusCode::SERVICE_UNAVAILABLE if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("registering {id}: {other}"),
        }
    }
}

/// Registers the orders `ids` through the two instances, 16 at a time.
async fn register_all(servers: &Arc<[PgServer; 2]>, ids: Vec<String>) {
    let ids = Arc::new(Mutex::new(ids));
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..16 {
        let (servers, ids) = (Arc::clone(servers), Arc::clone(&ids));
        tasks.spawn(async move {
            loop {
                let Some(id) = ids.lock().expect("ids").pop() else { return };
                register(&servers[k % 2], &id).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("registration task");
    }
}

/// What a run saw.
struct Run {
    acked: AckedOutcomes,
    timings: Vec<Timing>,
    violations: Vec<Violation>,
    answer_violations: Vec<String>,
}

/// The harness: a cluster, two instances, the provider's load, `kills` failovers, then the checker on the last
/// primary. With `settle`, waits first until no event is deferred and every outbox row reached the sink.
async fn run(sync: bool, kills: usize, settle: bool, delay: Duration) -> Run {
    let seed = env_u64("PAYHOOK_FAILOVER_SEED").unwrap_or_else(|| fastrand::u64(..));
    let mode = if sync { "synchronous" } else { "asynchronous" };
    eprintln!("failover test ({mode}): {kills} kills, link delay {delay:?}, seed {seed} (PAYHOOK_FAILOVER_SEED)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut cluster = Cluster::build(sync, delay).await;
    let sink = Recorder::start(200).await;
    let dir = TestDir::new();
    let extra = instance_config(&sink);
    let servers = Arc::new([
        PgServer::start_with(&dir, &cluster.url(), &extra).await,
        PgServer::start_with(&dir, &cluster.url(), &extra).await,
    ]);

    // Each instance tells whether its 2xx is on a standby.
    let (status, readiness) = servers[0].readyz_body().await;
    assert_eq!(status, StatusCode::OK, "{readiness}");
    assert_eq!(readiness["replication"]["acknowledged_on_standby"], sync, "{readiness}");
    assert_eq!(readiness["replication"]["sync_standbys"], u32::from(sync), "{readiness}");

    // One order in ten is registered only after the first failover: its early payments are deferred meanwhile,
    // and the retry worker applies them once it exists.
    // Sized so that the load between two kills (about 1,700 deliveries, 7 s) outlasts a failover and the standby's
    // rebuild after it on a loaded machine: with 700 orders a kill, a 4 s rebuild let the load run past the next
    // kill's moment, and the last kill found the workload done.
    let workload = Arc::new(Workload::new(&mut rng, "fo", 1_200 * kills.max(1)));
    let late = |i: usize| settle && i % 10 == 9;
    let early: Vec<String> = (0..workload.orders()).filter(|i| !late(*i)).map(|i| workload.order_id(i)).collect();
    register_all(&servers, early).await;
    cluster.standby_caught_up().await;

    let urls = vec![servers[0].webhook_url(), servers[1].webhook_url()];
    let deadline = Instant::now() + Duration::from_secs(600);
    // About 250 deliveries a second: a failover and the rebuild after it take a few seconds, and every kill must
    // find load before it and after it.
    let load = Load::start_on(&workload, urls, 16, Duration::from_millis(60), deadline);
    let total = workload.plan.len();
    let mut timings = Vec::new();
    for k in 0..kills {
        // Kills spread over the workload, each at a random moment after the previous failover served traffic.
        let due = total * (k + 1) / (kills + 1);
        while load.answered() < due && !load.all_taken() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(0..400))).await;
        assert!(
            load.answered() + 200 < total,
            "the workload is nearly done before kill {}: make it larger, or the load slower",
            k + 1
        );
        let detect = Duration::from_millis(rng.u64(100..1000));
        let at_kill = load.answered();
        let killed = cluster.fail_over(detect).await;
        let (promoted, at_promotion) = (Instant::now(), load.answered());
        let first_ack = loop {
            if load.answered() > at_promotion {
                break promoted.elapsed();
            }
            assert!(promoted.elapsed() < Duration::from_secs(60), "no 2xx within a minute of the promotion");
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let timing = Timing {
            kill_to_promoted: promoted - killed,
            promoted_to_first_ack: first_ack,
            acked_meanwhile: at_promotion - at_kill,
        };
        eprintln!(
            "failover {}: kill → promoted {:?} (detection {detect:?}), promoted → first 2xx {:?}, kill → first 2xx \
             {:?}; {} acknowledged between kill and promotion; {} of {total} deliveries acknowledged",
            k + 1,
            timing.kill_to_promoted,
            timing.promoted_to_first_ack,
            timing.kill_to_promoted + timing.promoted_to_first_ack,
            timing.acked_meanwhile,
            load.answered()
        );
        timings.push(timing);
        if k == 0 {
            let late_ids: Vec<String> =
                (0..workload.orders()).filter(|i| late(*i)).map(|i| workload.order_id(i)).collect();
            register_all(&servers, late_ids).await;
        }
        cluster.rebuild_standby().await;
    }
    let acked = load.finish().await;
    let answer_violations = answer_violations(&acked);

    let primary = cluster.primary_client().await;
    if settle {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let row = primary
                .query_one(
                    "SELECT (SELECT count(*) FROM inbox WHERE status = 'deferred'),
                            (SELECT count(*) FROM outbox WHERE status = 'pending')",
                    &[],
                )
                .await
                .expect("what is left to do");
            let (deferred, pending): (i64, i64) = (row.get(0), row.get(1));
            if deferred == 0 && pending == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{deferred} events still deferred, {pending} outbox rows pending");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for server in Arc::into_inner(servers).expect("no task holds the servers") {
        server.stop();
    }

    let store = PgStore::open(PgOptions::new(&cluster.url()).expect("the cluster's URL parses"))
        .await
        .expect("open the last primary as a store");
    let evidence = Evidence {
        acked: acked.keys().map(|id| Acked::new(SOURCE, id.as_str())).collect(),
        sink: settle.then(|| sink.receipts()),
    };
    let violations = match checker::check(&store, &evidence).await {
        Ok(checked) => {
            eprintln!("checked: {checked:?}");
            Vec::new()
        }
        Err(v) => v.0,
    };
    store.shutdown().await;
    Run { acked, timings, violations, answer_violations }
}

/// A run that hangs (a commit waiting for a standby that never comes) fails instead of holding CI.
async fn within_limit(run: impl Future<Output = Run>) -> Run {
    tokio::time::timeout(Duration::from_secs(900), run).await.expect("the failover run finished within 15 minutes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_primary_under_load_loses_no_acknowledged_delivery_with_a_synchronous_standby() {
    if !enabled() {
        return;
    }
    let kills = env_u64("PAYHOOK_FAILOVER_KILLS").unwrap_or(5) as usize;
    let delay = Duration::from_millis(env_u64("PAYHOOK_FAILOVER_DELAY_MS").unwrap_or(10));
    let run = within_limit(run(true, kills, true, delay)).await;
    assert_eq!(run.timings.len(), kills);
    assert_eq!(run.answer_violations, Vec::<String>::new());
    assert!(run.violations.is_empty(), "{} violations: {:#?}", run.violations.len(), run.violations);
    let worst = run.timings.iter().map(|t| t.promoted_to_first_ack).max().unwrap_or_default();
    eprintln!("{} deliveries acknowledged; slowest promoted → first 2xx: {worst:?}", run.acked.len());
    assert!(worst < Duration::from_secs(10), "the first 2xx came {worst:?} after a promotion");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_with_asynchronous_replication_sees_acknowledged_deliveries_lost() {
    if !enabled() {
        return;
    }
    // A longer link than the real test's, so that every kill finds acknowledged commits on the wire: about 12 at
    // this load (at 10 ms, a run of two kills once lost only one).
    let kills = env_u64("PAYHOOK_FAILOVER_CONTROL_KILLS").unwrap_or(3) as usize;
    let delay = Duration::from_millis(env_u64("PAYHOOK_FAILOVER_CONTROL_DELAY_MS").unwrap_or(50));
    let run = within_limit(run(false, kills, false, delay)).await;
    let lost = run.violations.iter().filter(|v| matches!(v, Violation::Lost(_))).count();
    eprintln!(
        "control: {lost} acknowledged deliveries lost over {kills} kills of an asynchronously replicated primary \
         ({} violations in all, {} in the answers)",
        run.violations.len(),
        run.answer_violations.len()
    );
    assert!(lost > 0, "asynchronous replication lost nothing: the harness cannot see a loss");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cut_off_while_it_waits_for_the_synchronous_standby_is_not_answered_2xx_before_the_standby_has_it() {
    if !enabled() {
        return;
    }
    // A session terminated while its COMMIT waits for the synchronous standby leaves that commit visible on the
    // primary ("committed locally, but might not have been replicated"). The batch is run again (its outcome is
    // unknown) and the provider retries: either finds the delivery's keys. A `duplicate` answered then, before the
    // standby holds the original, is a 2xx that dies with the primary.
    let mut cluster = Cluster::build(true, Duration::from_millis(1)).await;
    let dir = TestDir::new();
    // A statement timeout far below the wait, which must not cut it short either.
    let server = PgServer::start_configured(&dir, &cluster.url(), "statement_timeout_ms = 300\n", "").await;
    register(&server, "stall-1").await;
    cluster.standby_caught_up().await;

    cluster.links[cluster.primary].stall();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
    let delivery = crate::helpers::payment("evt-stall-1", "stall-1");
    let url = server.webhook_url();
    let answer = tokio::spawn(async move { crate::helpers::post(&client, &url, &delivery).await });
    let primary = cluster.primary_client().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let terminated = loop {
        let rows = primary
            .query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'", &[])
            .await
            .expect("terminate the session waiting for the standby");
        if !rows.is_empty() {
            break rows.len();
        }
        assert!(Instant::now() < deadline, "no COMMIT waited for the synchronous standby");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    eprintln!("{terminated} session(s) terminated while waiting for the standby");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Then the primary's machine is lost, whatever was answered, and the standby is promoted.
    cluster.fail_over(Duration::from_millis(100)).await;
    let (status, body) = answer.await.expect("the request task").expect("an answer");
    let on_the_standby = cluster
        .primary_client()
        .await
        .query_opt("SELECT status FROM inbox WHERE event_id = 'evt-stall-1'", &[])
        .await
        .expect("the inbox")
        .is_some();
    eprintln!("answered {status} {body}; on the last primary: {on_the_standby}");
    assert!(!status.is_success() || on_the_standby, "answered {status} {body}, and the new primary does not hold it");
    server.stop();
}

/// The load generator, `payhook-bench`: `$PAYHOOK_BENCH_BIN`, else the one beside the `payhook` binary under test
/// (`cargo test -p payhook -p payhook-bench …` builds both).
fn bench_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("PAYHOOK_BENCH_BIN").filter(|b| !b.is_empty()) {
        return bin.into();
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_payhook")).with_file_name("payhook-bench");
    assert!(bin.exists(), "{} is missing: build it (cargo test -p payhook -p payhook-bench …)", bin.display());
    bin
}

/// One `payhook-bench bench` run (the project's own benchmark) against the two instances; its acknowledged
/// deliveries per second.
fn bench(dir: &TestDir, servers: &[PgServer; 2], orders: usize) -> f64 {
    let urls = format!("{},{}", servers[0].url(""), servers[1].url(""));
    let out = Command::new(bench_binary())
        .current_dir(dir.path())
        .env_remove("PAYHOOK_CONFIG")
        .env_remove("PAYHOOK_API_TOKEN")
        .arg("--config")
        .arg(servers[0].config_path())
        .args(["bench", "--url", &urls, "--source", SOURCE, "--orders", &orders.to_string()])
        .args(["--shuffle", "--concurrency", "64", "--json"])
        .output()
        .expect("run payhook-bench bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "payhook-bench bench failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_str(stdout.trim()).expect("bench --json prints one object");
    result["acked_per_s"].as_f64().expect("acked_per_s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_with_a_synchronous_standby_against_without_one() {
    if !enabled() {
        return;
    }
    if std::env::var("PAYHOOK_FAILOVER_BENCH").is_err() {
        eprintln!("skipped: PAYHOOK_FAILOVER_BENCH=1 not set (a benchmark, not a check)");
        return;
    }
    let delay = Duration::from_millis(env_u64("PAYHOOK_FAILOVER_DELAY_MS").unwrap_or(0));
    let rounds = env_u64("PAYHOOK_FAILOVER_BENCH_ROUNDS").unwrap_or(3) as usize;
    let orders = env_u64("PAYHOOK_FAILOVER_BENCH_ORDERS").unwrap_or(20_000) as usize;
    let mut cluster = Cluster::build(true, delay).await;
    let dir = TestDir::new();
    let servers =
        [PgServer::start_with(&dir, &cluster.url(), "").await, PgServer::start_with(&dir, &cluster.url(), "").await];
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Interleaved, and each round starts with the other mode, so that drift on a shared machine hits both.
        let order = if round % 2 == 0 { [true, false] } else { [false, true] };
        for sync in order {
            cluster.sync = sync;
            let primary = cluster.primary_client().await;
            synchronous_standby_names(&primary, if sync { "*" } else { "" }).await;
            cluster.wait_standby_state().await;
            let rate = tokio::task::block_in_place(|| bench(&dir, &servers, orders));
            eprintln!(
                "round {}: {} standby: {rate:.0} acked/s",
                round + 1,
                if sync { "synchronous" } else { "asynchronous" }
            );
            if sync { with.push(rate) } else { without.push(rate) }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (w, wo) = (median(&mut with), median(&mut without));
    eprintln!(
        "median acked/s: {w:.0} with a synchronous standby, {wo:.0} without (asynchronous); ratio {:.2} \
         (link delay {delay:?}, {orders} orders, 64 in flight, {rounds} interleaved rounds)",
        w / wo
    );
    for server in servers {
        server.stop();
    }
}
