//! `payhook-bench prefill`, and the operator probes of `bench` against the database it grew.

use crate::helpers::*;
use serde_json::Value;

/// `payhook-bench prefill` grows a database through the store's own operations: paid orders, processed events with their
/// outbox rows, received over the requested span. Then `bench --scrape-ms --read-ms` reports each operator probe
/// against that database, every one answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_grows_the_database_and_bench_reports_the_operator_probes() {
    let dir = TestDir::new();
    let config = dir.config(free_port());
    let config = config.to_str().unwrap();
    let out =
        dir.run(&["--config", config, "prefill", "--source", SOURCE, "--deliveries", "500", "--days", "2", "--json"]);
    assert!(out.status.success(), "prefill failed: {}\n{}", text(&out.stdout), text(&out.stderr));
    let summary: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(summary["deliveries"], 500, "{summary}");
    assert_eq!(summary["processed"], 500, "{summary}");

    let db = dir.open_db();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM inbox WHERE status = 'processed'"), 500);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'paid'"), 500);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM outbox WHERE kind = 'order.paid'"), 500);
    // Spread over the two days before now, oldest first.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let (oldest, newest): (i64, i64) = db
        .query_row("SELECT MIN(received_at), MAX(received_at) FROM inbox", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert!(now - oldest > 47 * 3_600_000 && now - oldest <= 48 * 3_600_000 + 60_000, "oldest {oldest}, now {now}");
    assert!(now - newest < 3_600_000, "newest {newest}, now {now}");
    let out_of_order =
        count(&db, "SELECT COUNT(*) FROM inbox a JOIN inbox b ON b.id = a.id + 1 WHERE b.received_at < a.received_at");
    // Concurrent deliveries commit in any order within the in-flight window, as live ones do.
    assert!(out_of_order < 50, "received times grow with row ids, give or take the in-flight window: {out_of_order}");
    drop(db);

    let server = Server::start(&dir).await;
    // The counters the writer kept agree with a full count.
    let stats: Value = reqwest::Client::new()
        .get(format!("{}/v1/stats", server.base()))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("GET /v1/stats")
        .json()
        .await
        .expect("the stats as JSON");
    assert_eq!(stats["events"]["processed"], 500, "{stats}");
    let config = server.config();
    #[rustfmt::skip]
    let args = [
        "--config", config, "bench", "--source", SOURCE, "--scenario", "sustained", "--duration-secs", "3",
        "--orders", "2000", "--concurrency", "8", "--scrape-ms", "200", "--read-ms", "200", "--json",
    ];
    let out = dir.run(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{stdout}\n{}", out.status, text(&out.stderr));
    let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(report["command"].as_str().unwrap().contains(" --scrape-ms 200 --read-ms 200"), "{report}");
    for probe in ["metrics", "stats", "events_newest", "events_deferred", "outbox_dead", "readyz"] {
        let p = &report["probes"][probe];
        assert!(p["count"].as_u64().unwrap_or(0) >= 5, "{probe} ran too few times: {report}");
        assert_eq!(p["failures"], 0, "{probe}: {report}");
        assert!(p["p99"].as_f64().unwrap() > 0.0, "{probe}: {report}");
    }
    server.stop().await;
}
