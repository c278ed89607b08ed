//! Power-cut testing: the database on `payhook_powercut`'s file system, a retrying provider's load, and at random
//! moments `kill -9` followed by a power cut (every write not fsynced is dropped), sometimes a second cut while
//! payhook recovers, then a restart; at the end a last kill and cut, and the invariant checker. `kill -9` alone
//! cannot see a missing fsync (the page cache survives the process); this can.
//!
//! Every SQLite mode runs: `fsync = "pipelined"` (the default), `"in-commit"`, and one commit per event
//! (`group_commit = false`). Built with the `mutant-skip-fdatasync` feature, the pipelined syncer skips its
//! fdatasync, and the mutant's test insists that this harness finds acknowledged deliveries lost (`.ci/run` runs
//! it: `cargo test -p payhook --features mutant-skip-fdatasync --test it powercut::mutant`).
//!
//! `PAYHOOK_POWERCUT_CYCLES` sets the cycles per mode (10 by default, for CI; raise it for a long run),
//! `PAYHOOK_POWERCUT_SEED` replays a run's workload and schedule (the seed of every run is printed). Without
//! `/dev/fuse` or the right to mount, the tests print why and skip, unless `PAYHOOK_TEST_POWERCUT=1` (set by
//! `.ci/run`) makes that a failure.

use crate::helpers::{AMOUNT, DB_FILE, Server, TestDir, check_db};
use crate::provider::{Load, Workload, answer_violations, database_violations, env_u64};
use payhook_powercut::{Cut, Mount, mount_for_test};
use reqwest::StatusCode;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `[storage]` lines of one mode, after its `url`. (A mutant build runs the pipelined mode only.)
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "mutant-skip-fdatasync", allow(dead_code))]
enum Mode {
    Pipelined,
    InCommit,
    PerEvent,
}

impl Mode {
    fn storage(self) -> &'static str {
        match self {
            Mode::Pipelined => "fsync = \"pipelined\"",
            Mode::InCommit => "fsync = \"in-commit\"",
            Mode::PerEvent => "group_commit = false",
        }
    }
}

/// What one run found: the provider's and the database's violations, and the checker's.
#[derive(Debug, Default)]
struct Found {
    violations: Vec<String>,
    cycles: usize,
    /// Unsynced pages restored, bytes cut off and files removed, over all cuts.
    dropped: Cut,
    /// Per cut, the deliveries acknowledged since the previous cut and then lost.
    lost_per_cycle: Vec<usize>,
}

/// The standard test configuration with the database on the mount and `mode`'s storage settings.
fn config_on(db: &std::path::Path, mode: Mode) -> impl Fn(String) -> String {
    let url = format!("url = \"sqlite://{}\"\n{}", db.display(), mode.storage());
    move |config: String| {
        let standard = format!("url = \"sqlite://{DB_FILE}\"");
        assert!(config.contains(&standard), "the standard test configuration changed: {config}");
        config.replace(&standard, &url)
    }
}

/// Runs the cycles of one mode; `None` when this machine cannot mount the file system (the test skips).
async fn run(name: &str, mode: Mode) -> Option<Found> {
    let cycles = env_u64("PAYHOOK_POWERCUT_CYCLES").unwrap_or(10).max(1) as usize;
    let seed = env_u64("PAYHOOK_POWERCUT_SEED").unwrap_or_else(|| fastrand::u64(..));
    eprintln!(
        "power-cut test {name}: {cycles} cycles, seed {seed} (PAYHOOK_POWERCUT_SEED={seed} replays this schedule)"
    );
    let mut rng = fastrand::Rng::with_seed(seed);

    let dir = TestDir::new(); // configs and logs, on the real file system
    let backing = tempfile::Builder::new().prefix("payhook-powercut-backing-").tempdir().expect("backing dir");
    let at = tempfile::Builder::new().prefix("payhook-powercut-").tempdir().expect("mount point");
    let mount: Mount = mount_for_test(backing.path(), at.path())?;
    let db: PathBuf = mount.path().join("payhook.db");
    let edit = config_on(&db, mode);

    // The orders, registered and then made durable by a clean stop, so that the cuts test the deliveries.
    let workload = Arc::new(Workload::new(&mut rng, &format!("cut-{name}"), 30 * cycles));
    let server = Server::start_edited(&dir, &edit).await;
    for i in 0..workload.orders() {
        let (status, answer) = server.register_order(&workload.order_id(i), AMOUNT).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    server.stop();
    let mut server = Server::start_edited(&dir, &edit).await;

    // Load windows between cuts; a third of the cycles cut again while payhook recovers.
    let windows: Vec<u64> = (0..cycles).map(|_| rng.u64(80..400)).collect();
    let recovery_cuts: Vec<Option<u64>> = (0..cycles).map(|_| (rng.u8(..3) == 0).then(|| rng.u64(0..150))).collect();
    let schedule_ms: u64 = windows.iter().sum::<u64>() + 400 * cycles as u64;
    let clients = 12;
    let pace = Duration::from_millis(schedule_ms * clients as u64 / workload.plan.len() as u64);
    let deadline = Instant::now() + Duration::from_secs(240);
    let load = Load::start(&workload, server.webhook_url(), clients, pace, deadline);

    let mut found = Found::default();
    // The events acknowledged before each cut, to tell in which cycle a lost delivery had been acknowledged.
    let mut acked_before_cut: Vec<HashSet<String>> = Vec::new();
    let mut all_sent = false;
    for (window, recovery_cut) in windows.iter().zip(&recovery_cuts) {
        tokio::time::sleep(Duration::from_millis(*window)).await;
        drop(server); // SIGKILL, and wait for the process to be gone: nothing of it writes after the cut.
        acked_before_cut.push(load.acked_ids());
        found.dropped.add(mount.power_cut().expect("power cut"));
        if let Some(after_ms) = recovery_cut {
            let recovering = Server::launch(&dir, &edit, &[]);
            tokio::time::sleep(Duration::from_millis(*after_ms)).await;
            drop(recovering);
            found.dropped.add(mount.power_cut().expect("power cut during recovery"));
        }
        server = Server::start_edited(&dir, &edit).await;
        load.set_url(server.webhook_url());
        found.cycles += 1;
        // Every cycle runs even if the load ends early: a cut of an idle server still tests its recovery.
        if load.all_taken() && !all_sent {
            all_sent = true;
            eprintln!("power-cut test {name}: the workload was all sent by cycle {} of {cycles}", found.cycles);
        }
    }
    let acked = load.finish().await;
    drop(server);
    acked_before_cut.push(acked.keys().cloned().collect());
    found.dropped.add(mount.power_cut().expect("last power cut"));

    found.violations.extend(answer_violations(&workload, &acked));
    let conn = rusqlite::Connection::open(&db).expect("open the database on the mount");
    found.violations.extend(database_violations(&conn, &workload, &acked));
    drop(conn);
    // Lost: missing from the database, or answered processed twice (lost, then applied again when repeated).
    let mut lost: HashSet<String> = acked
        .iter()
        .filter(|(_, outcomes)| outcomes.iter().filter(|o| *o == "processed").count() > 1)
        .map(|(id, _)| id.clone())
        .collect();
    if let Err(v) = check_db(&db, acked.keys()).await {
        lost.extend(v.lost().into_iter().map(|a| a.event_id.clone()));
        found.violations.push(v.to_string());
    }
    found.lost_per_cycle = acked_before_cut
        .iter()
        .enumerate()
        .map(|(k, ids)| {
            let earlier = k.checked_sub(1).map(|j| &acked_before_cut[j]);
            ids.iter().filter(|id| lost.contains(*id) && !earlier.is_some_and(|e| e.contains(*id))).count()
        })
        .collect();
    eprintln!(
        "power-cut test {name}: {} cycles, dropped {:?}, {} violations, lost per cycle {:?} (seed {seed})",
        found.cycles,
        found.dropped,
        found.violations.len(),
        found.lost_per_cycle
    );
    wait_for_files_closed(mount.path());
    Some(found)
}

/// Waits (up to 30 s) until this process holds no file open on the mount: the store `check_db` opened closes its
/// connections on its own threads after it is dropped, and a process that exits with a file open there waits in
/// the kernel for the file system's threads, which exit with it: the test binary never ends.
fn wait_for_files_closed(mount: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open = std::fs::read_dir("/proc/self/fd")
            .map(|fds| {
                fds.filter_map(Result::ok)
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                    .any(|target| target.starts_with(mount))
            })
            .unwrap_or(false);
        if !open || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every SQLite mode of a correct build: no violation at all.
#[cfg(not(feature = "mutant-skip-fdatasync"))]
mod every_mode {
    use super::{Mode, run};

    async fn assert_no_violation(name: &str, mode: Mode) {
        let Some(found) = run(name, mode).await else { return };
        assert!(
            found.violations.is_empty(),
            "{name}: {} violations:\n{}",
            found.violations.len(),
            found.violations.join("\n")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn power_cuts_lose_no_acknowledged_delivery_with_the_pipelined_fsync() {
        assert_no_violation("pipelined", Mode::Pipelined).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn power_cuts_lose_no_acknowledged_delivery_with_the_fsync_in_commit() {
        assert_no_violation("in-commit", Mode::InCommit).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn power_cuts_lose_no_acknowledged_delivery_with_one_commit_per_event() {
        assert_no_violation("per-event", Mode::PerEvent).await;
    }
}

/// Only in a build with the mutant: the syncer answers without its fdatasync, and the harness must see the loss.
#[cfg(feature = "mutant-skip-fdatasync")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutant_power_cuts_find_the_syncer_that_skips_its_fdatasync() {
    let Some(found) = run("mutant", Mode::Pipelined).await else { return };
    eprintln!("the mutant's violations:\n{}", found.violations.join("\n"));
    assert!(
        !found.violations.is_empty(),
        "a syncer without fdatasync lost nothing across {} power cuts: the harness cannot see a missing fsync",
        found.cycles
    );
}
