//! `payhook-bench bench`: the scenarios, the open loop, `--verify`, the report.

use crate::helpers::*;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_reports_throughput_and_verifies_the_final_state() {
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let config = server.config();
    let pid = std::process::id().to_string();
    #[rustfmt::skip]
    let args = [
        "--config", config, "bench", "--source", SOURCE, "--orders", "300", "--dup", "0.2", "--refund", "0.1",
        "--shuffle", "--concurrency", "16", "--verify", "--json", "--server-pid", &pid,
    ];
    let out = dir.run(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{stdout}\n{}", out.status, text(&out.stderr));
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let n = |path: &str| report.pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("{path}: {report}"));

    assert_eq!(n("/orders"), 300.0, "{report}");
    // 300 payments, ~30 refunds, then a fifth more as duplicates.
    assert!(n("/deliveries") >= 375.0, "{report}");
    assert_eq!(n("/acked"), n("/deliveries"), "{report}");
    assert_eq!((n("/rejected_4xx"), n("/gave_up")), (0.0, 0.0), "{report}");
    assert!(n("/acked_per_s") > 0.0, "{report}");
    assert_eq!(n("/verify/orders_checked"), 300.0, "{report}");
    assert_eq!(n("/verify/violations"), 0.0, "{report}");
    assert!(n("/outcomes/duplicate") > 0.0, "{report}");
    assert!(n("/outcomes/processed") >= 300.0, "{report}");
    let outcomes: f64 = ["processed", "duplicate", "deferred", "ignored", "dead_lettered"]
        .iter()
        .map(|o| n(&format!("/outcomes/{o}")))
        .sum();
    assert_eq!(outcomes, n("/acked"), "every acknowledged delivery has an outcome: {report}");
    assert_eq!(n("/outcomes/dead_lettered"), 0.0, "{report}");
    // The server's own CPU, per acknowledged delivery and by thread: its tokio workers serve every request.
    assert!(n("/server_cpu/us_per_acked") > 0.0, "{report}");
    let threads = report["server_cpu"]["by_thread_us_per_acked"].as_object().expect("CPU by thread");
    assert!(threads.keys().any(|name| name.starts_with("tokio")), "{report}");
    let split: f64 = threads.values().filter_map(Value::as_f64).sum();
    assert!((split - n("/server_cpu/us_per_acked")).abs() < 1e-6, "the threads add up to the total: {report}");
    let (rss, peak) = (n("/server_cpu/rss_mib"), n("/server_cpu/peak_rss_mib"));
    assert!(rss > 1.0 && peak >= rss && peak < 1_024.0, "the server's memory: {report}");
    server.stop().await;

    // The database agrees with the report.
    let db = dir.open_db();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders"), 300);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders WHERE status NOT IN ('paid', 'refunded')"), 0);
    let refunded = count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'refunded'");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM inbox"), 300 + refunded, "one inbox row per unique event");
}

/// A delivery the benchmark gives up on (`--attempts`, here to a second URL where nothing listens) leaves its
/// order in a state nobody knows: `--verify` leaves such orders out, says how many, and checks all the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_verify_leaves_out_the_orders_whose_delivery_it_gave_up_on() {
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let config = server.config();
    let urls = format!("{},http://127.0.0.1:{}", server.base(), free_port());
    #[rustfmt::skip]
    let args = [
        "--config", config, "bench", "--url", &urls, "--source", SOURCE, "--orders", "100", "--dup", "0",
        "--refund", "0", "--concurrency", "8", "--attempts", "2", "--verify", "--json",
    ];
    let out = dir.run(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{stdout}\n{}", out.status, text(&out.stderr));
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let n = |path: &str| report.pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("{path}: {report}"));

    // One payment per order: the workers on the second URL gave up on each of theirs after two attempts.
    let (acked, gave_up) = (n("/acked"), n("/gave_up"));
    assert!(acked > 0.0 && gave_up > 0.0, "{report}");
    assert_eq!(acked + gave_up, 100.0, "{report}");
    assert_eq!(n("/retried_io"), 2.0 * gave_up, "two failed attempts each: {report}");
    assert_eq!(n("/params/attempts"), 2.0, "{report}");
    assert!(report["command"].as_str().is_some_and(|c| c.contains(" --attempts 2 ")), "{report}");
    assert_eq!((n("/verify/orders_skipped"), n("/verify/orders_checked")), (gave_up, acked), "{report}");
    assert_eq!(n("/verify/violations"), 0.0, "{report}");
    server.stop().await;

    // The orders left out are the ones still waiting for their payment: checked, they would have been violations.
    let db = dir.open_db();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'paid'") as f64, acked);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'pending'") as f64, gave_up);
}

/// `--rate`: an open loop. The deliveries arrive on the schedule whatever the answers, so the run lasts as long as
/// the schedule (a closed loop of these few hundred deliveries is over far sooner), with no more connections in
/// flight than `--concurrency`, and everything still acknowledged and verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_rate_paces_an_open_loop_and_verifies() {
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let config = server.config();
    #[rustfmt::skip]
    let args = [
        "--config", config, "bench", "--source", SOURCE, "--scenario", "steady", "--orders", "200", "--dup", "0.2",
        "--refund", "0.1", "--shuffle", "--rate", "400", "--concurrency", "8", "--verify", "--json",
    ];
    let out = dir.run(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{stdout}\n{}", out.status, text(&out.stderr));
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let n = |path: &str| report.pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("{path}: {report}"));

    assert_eq!(n("/verify/orders_checked"), 200.0, "{report}");
    assert_eq!(n("/verify/violations"), 0.0, "{report}");
    let deliveries = n("/deliveries");
    assert!(deliveries >= 250.0, "{report}");
    assert_eq!(n("/acked"), deliveries, "{report}");
    assert_eq!((n("/rejected_4xx"), n("/gave_up")), (0.0, 0.0), "{report}");
    assert_eq!(n("/open_loop/rate"), 400.0, "{report}");
    assert_eq!(n("/params/rate"), 400.0, "{report}");
    assert!(report["command"].as_str().unwrap_or_default().contains(" --rate 400 --concurrency 8 "), "{report}");
    // Paced by the schedule: the last delivery is not due before (deliveries - 1) / 400 s.
    assert!(n("/elapsed_s") >= deliveries / 400.0 * 0.8, "the schedule did not pace the run: {report}");
    assert!(n("/open_loop/offered_per_s") <= 400.0 * 1.05, "{report}");
    assert!(n("/open_loop/offered_per_s") > 0.0, "{report}");
    let in_flight = n("/open_loop/max_in_flight");
    assert!((1.0..=8.0).contains(&in_flight), "{report}");
    assert!(n("/open_loop/late_starts") <= deliveries, "{report}");
    for p in ["/latency_ms/p50", "/latency_ms/max"] {
        assert!(n(p) > 0.0, "{p}: {report}");
    }
    // Offered far more than two connections can take: the deliveries wait for a connection (late starts), never
    // more than two in flight, and all are still delivered.
    #[rustfmt::skip]
    let args = [
        "--config", config, "bench", "--source", SOURCE, "--orders", "60", "--rate", "100000", "--concurrency", "2",
        "--verify", "--json",
    ];
    let out = dir.run(&args);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let flood: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let n = |path: &str| flood.pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("{path}: {flood}"));
    assert_eq!(n("/acked"), n("/deliveries"), "{flood}");
    assert_eq!(n("/verify/violations"), 0.0, "{flood}");
    assert_eq!(n("/open_loop/max_in_flight"), 2.0, "{flood}");
    assert!(n("/open_loop/late_starts") > 0.0, "{flood}");
    assert!(n("/open_loop/offered_per_s") < 100_000.0, "late starts lower the rate offered: {flood}");

    // A closed-loop run has no open_loop object, and its rate is null.
    let out = dir.run(&["--config", config, "bench", "--source", SOURCE, "--orders", "20", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let closed: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert!(closed.get("open_loop").is_none() && closed["params"]["rate"].is_null(), "{closed}");
    server.stop().await;
}

/// Only steady takes `--rate`, and only above 0: refused, naming the flag, before anything is sent (no server runs).
#[test]
fn bench_rate_is_refused_outside_steady_and_at_zero() {
    let dir = TestDir::new();
    let config = dir.config(free_port());
    let config = config.to_str().unwrap();
    for scenario in ["dup-storm", "refund-first", "sustained"] {
        let out = dir.run(&["--config", config, "bench", "--source", SOURCE, "--scenario", scenario, "--rate", "100"]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{scenario} took --rate: {}", text(&out.stdout));
        assert!(stderr.contains(&format!("--rate is for --scenario steady, not {scenario}")), "{stderr}");
    }
    // `--rate=-5`, as `--rate -5` would read -5 as a flag.
    for rate in ["0", "-5", "inf", "NaN", "fast"] {
        let out = dir.run(&["--config", config, "bench", "--source", SOURCE, &format!("--rate={rate}")]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "--rate {rate} was taken: {}", text(&out.stdout));
        assert!(stderr.contains("a number of deliveries per second above 0"), "--rate {rate}: {stderr}");
    }
}

/// The named scenarios: a storm of identical concurrent deliveries, refunds before payments, and a sustained run
/// reported per second. Each reports its scenario, parameters and command line, and `--verify` finds no violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_scenarios_report_their_parameters_and_verify() {
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let config = server.config();
    let bench = |extra: &[&str]| -> Value {
        let mut args =
            vec!["--config", config, "bench", "--source", SOURCE, "--concurrency", "32", "--verify", "--json"];
        args.extend_from_slice(extra);
        let out = dir.run(&args);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{extra:?} failed: {}\n{stdout}\n{}", out.status, text(&out.stderr));
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };
    let n = |r: &Value, path: &str| r.pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("{path}: {r}"));
    let common = |r: &Value, scenario: &str| {
        assert_eq!(r["scenario"], scenario, "{r}");
        assert_eq!(r["params"]["scenario"], scenario, "{r}");
        assert_eq!(r["client"], "lean", "http:// URLs get the lean client: {r}");
        let command = r["command"].as_str().unwrap_or_default();
        assert!(command.starts_with(&format!("payhook-bench bench --scenario {scenario} ")), "{r}");
        for p in ["/acked_per_s", "/latency_ms/p50", "/latency_ms/p90", "/latency_ms/p99", "/latency_ms/max"] {
            assert!(n(r, p) > 0.0, "{p}: {r}");
        }
        assert_eq!(n(r, "/acked"), n(r, "/deliveries"), "{r}");
        assert_eq!((n(r, "/rejected_4xx"), n(r, "/gave_up")), (0.0, 0.0), "{r}");
        assert_eq!(n(r, "/retries"), n(r, "/retried_5xx") + n(r, "/retried_io"), "{r}");
        assert_eq!(n(r, "/verify/violations"), 0.0, "{r}");
        let outcomes: f64 = ["processed", "duplicate", "deferred", "ignored", "dead_lettered"]
            .iter()
            .map(|o| n(r, &format!("/outcomes/{o}")))
            .sum();
        assert_eq!(outcomes, n(r, "/acked"), "{r}");
    };

    // 16 identical deliveries of each event at once: one is processed, fifteen are duplicates.
    let storm = bench(&["--scenario", "dup-storm", "--orders", "20", "--refund", "0"]);
    common(&storm, "dup-storm");
    assert_eq!(n(&storm, "/deliveries"), 20.0 * 16.0, "{storm}");
    assert_eq!((n(&storm, "/outcomes/processed"), n(&storm, "/outcomes/duplicate")), (20.0, 300.0), "{storm}");

    // Every refund answered before its payment is sent: every order refunded, no receipt.
    let first = bench(&["--scenario", "refund-first", "--orders", "150"]);
    common(&first, "refund-first");
    assert_eq!(n(&first, "/params/refund"), 1.0, "{first}");
    assert!(n(&first, "/deliveries") >= 300.0, "{first}");
    assert_eq!(n(&first, "/verify/orders_checked"), 150.0, "{first}");

    // Fresh events for two seconds, one row per second.
    let sustained = bench(&["--scenario", "sustained", "--duration-secs", "2", "--orders", "400"]);
    common(&sustained, "sustained");
    assert_eq!(n(&sustained, "/params/duration_secs"), 2.0, "{sustained}");
    let rows = sustained["per_second"].as_array().unwrap_or_else(|| panic!("per_second: {sustained}"));
    assert_eq!(rows.len(), 2, "{sustained}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(n(row, "/second"), (i + 1) as f64, "{row}");
        for p in ["/acked", "/p50", "/p99", "/max"] {
            assert!(row.pointer(p).and_then(Value::as_f64).is_some(), "{p}: {row}");
        }
    }
    assert!(n(&sustained, "/verify/orders_checked") > 0.0, "{sustained}");

    // A flag that does not fit the scenario is refused before anything is sent.
    let out = dir.run(&["--config", config, "bench", "--source", SOURCE, "--duration-secs", "2"]);
    assert!(!out.status.success() && text(&out.stderr).contains("--duration-secs"), "{}", text(&out.stderr));
    server.stop().await;

    let db = dir.open_db();
    assert!(count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'refunded'") >= 150);
}
