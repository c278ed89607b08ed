//! Crash testing: `kill -9` the real binary at random moments under load — mid-batch, between the commit and the
//! answer, while idle — restart it on the same database, and check the promise at the end: every acknowledged
//! delivery recorded exactly once, every order in the state its events imply, one receipt per paid order.
//!
//! `PAYHOOK_CRASH_KILLS` sets the number of kills (20 by default, for CI; raise it for a long run) and
//! `PAYHOOK_CRASH_SEED` replays a run's workload and kill schedule (the seed of every run is printed).

use crate::helpers::{AMOUNT, Server, TestDir, check_store};
use crate::provider::{Load, Workload, answer_violations, database_violations, env_u64};
use reqwest::StatusCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_acknowledged_delivery_and_applies_nothing_twice() {
    let kills = env_u64("PAYHOOK_CRASH_KILLS").unwrap_or(20) as usize;
    let seed = env_u64("PAYHOOK_CRASH_SEED").unwrap_or_else(|| fastrand::u64(..));
    eprintln!("crash test: {kills} kills, seed {seed} (PAYHOOK_CRASH_SEED={seed} replays this schedule)");
    let mut rng = fastrand::Rng::with_seed(seed);

    let dir = TestDir::new();
    let mut server = Server::start(&dir).await;
    let workload = Arc::new(Workload::new(&mut rng, "crash", 40 * kills.max(5)));
    for i in 0..workload.orders() {
        let (status, answer) = server.register_order(&workload.order_id(i), AMOUNT).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }

    let kill_delays: Vec<u64> = (0..kills).map(|_| rng.u64(20..250)).collect();
    // Spread the load over the kill schedule so that kills land under load.
    let schedule_ms: u64 = kill_delays.iter().sum::<u64>() + 250 * kills as u64;
    let clients = 16;
    let pace = Duration::from_millis(schedule_ms * clients as u64 / workload.plan.len() as u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    let load = Load::start(&workload, server.webhook_url(), clients, pace, deadline);

    for (k, delay) in kill_delays.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(*delay)).await;
        drop(server); // SIGKILL, then wait for the process to be gone.
        server = Server::start(&dir).await;
        load.set_url(server.webhook_url());
        if load.all_taken() {
            eprintln!("crash test: the workload finished after {} kills", k + 1);
            break;
        }
    }
    let acked = load.finish().await;
    server.stop();

    // Every delivery was acknowledged (the provider kept retrying), with an outcome that makes sense; the
    // database holds each acknowledged event exactly once, each order as its events imply, one receipt per payment.
    assert_eq!(answer_violations(&workload, &acked), Vec::<String>::new(), "seed {seed}");
    assert_eq!(database_violations(&dir.open_db(), &workload, &acked), Vec::<String>::new(), "seed {seed}");

    // The same promise through the shared checker, as every end-to-end test checks it.
    let acked: Vec<String> = acked.keys().cloned().collect();
    let checked = check_store(&dir, &acked).await;
    assert_eq!((checked.events, checked.orders), (workload.unique.len(), workload.orders()), "seed {seed}");
}
