//! `/metrics` after a known workload: every counter exact, every histogram counting what it should, and the text
//! well formed.

use crate::helpers::{API_TOKEN, TestApp, event, now_secs};
use axum::Router;
use axum::routing::post;
use payhook_core::event::OrderAction::Pay;
use payhook_server::now_ms;
use payhook_server::settings::SinkSettings;
use payhook_store::Stats;
use reqwest::StatusCode;
use std::collections::{BTreeMap, BTreeSet};

/// The samples of a scrape by series (`name{labels}`), checking the format on the way: every sample line is
/// `name{labels} value` or `name value` with a numeric value, and every family has its HELP and TYPE.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let (mut helped, mut typed) = (BTreeSet::new(), BTreeMap::new());
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or_else(|| panic!("HELP without text: {line}"));
            assert!(!help.is_empty(), "{line}");
            helped.insert(name.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("TYPE without kind: {line}"));
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value is not a number: {line}"));
        let name = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line}"));
                for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                    let (key, value) = pair.split_once("=\"").unwrap_or_else(|| panic!("bad label {pair}: {line}"));
                    assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{line}");
                    assert!(!value.is_empty(), "{line}");
                }
                name
            }
            None => series,
        };
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad name: {line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| typed.get(*f).is_some_and(|k| k == "histogram")))
            .unwrap_or(name);
        assert!(helped.contains(family) && typed.contains_key(family), "{family} has no HELP or TYPE before {line}");
        assert!(samples.insert(series.to_owned(), value).is_none(), "series twice: {series}");
    }
    samples
}

fn get(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples.get(series).unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

/// A local sink that acknowledges everything.
async fn accepting_sink() -> String {
    let app = Router::new().route("/{*path}", post(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind sink");
    let url = format!("http://{}/receipts", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn metrics_count_a_known_workload_exactly() {
    let url = accepting_sink().await;
    let app = TestApp::spawn_with(|s, _| {
        s.sinks.push(SinkSettings {
            name: "shop".into(),
            url: payhook_server::SecretUrl::parse(&url).unwrap(),
            kinds: vec!["order.paid".into()],
            signer: None,
            timeout_ms: 2_000,
            max_in_flight: 4,
            transport: payhook_server::SinkTransport::Http,
            order: payhook_store::KeyOrder::default(),
            rate: None,
            filter: Default::default(),
        })
    })
    .await;
    let (processed, duplicates, forged) = (3, 2, 4);
    for i in 0..processed {
        app.register_order(&format!("ord_{i}"), 100, "usd").await;
        let (status, body) = app.deliver("payments", &event(&format!("evt_{i}"), Pay, &format!("ord_{i}"), 100)).await;
        assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("processed")), "{body}");
    }
    for i in 0..duplicates {
        let (_, body) = app.deliver("payments", &event(&format!("evt_{i}"), Pay, &format!("ord_{i}"), 100)).await;
        assert_eq!(body["status"], "duplicate");
    }
    // Early: its order is not registered.
    let (_, body) = app.deliver("payments", &event("evt_early", Pay, "ord_later", 100)).await;
    assert_eq!(body["status"], "deferred");
    // Verified but unparseable: kept as a dead letter.
    let (_, body) = app.deliver_bytes("payments", b"{not json".to_vec()).await;
    assert_eq!(body["status"], "dead_lettered");
    for i in 0..forged {
        let body = app.encode("payments", &event(&format!("evt_forged_{i}"), Pay, "ord_0", 100));
        let reply = app.post_raw("payments", &[("x-webhook-signature".into(), "00".repeat(32))], body).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    let body = app.encode("stripe", &event("evt_stale", Pay, "ord_0", 100));
    let reply = app.post_raw("stripe", &app.sign("stripe", &body, now_secs() - 3600), body).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let pass = app.running.dispatcher.run_until_idle(now_ms()).await.expect("dispatch");
    assert_eq!(pass.delivered, processed);

    let resp = app.client.get(app.url("/metrics")).bearer_auth(API_TOKEN).send().await.expect("GET /metrics");
    assert_eq!(resp.status(), StatusCode::OK);
    let content_type = resp.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let samples = parse(&resp.text().await.unwrap());
    let m = |series: &str| get(&samples, series);

    let outcomes =
        [("processed", processed), ("duplicate", duplicates), ("deferred", 1), ("dead_lettered", 1), ("ignored", 0)];
    for (outcome, n) in outcomes {
        assert_eq!(m(&format!(r#"payhook_deliveries_total{{source="payments",outcome="{outcome}"}}"#)), n as f64);
        assert_eq!(m(&format!(r#"payhook_deliveries_total{{source="stripe",outcome="{outcome}"}}"#)), 0.0);
    }
    let reasons =
        ["missing_header", "malformed", "stale", "mismatch", "digest_mismatch", "insufficient_coverage", "replayed"];
    for reason in reasons {
        let payments = if reason == "mismatch" { forged } else { 0 };
        let stripe = if reason == "stale" { 1 } else { 0 };
        assert_eq!(
            m(&format!(r#"payhook_verification_failures_total{{source="payments",reason="{reason}"}}"#)),
            payments as f64
        );
        assert_eq!(
            m(&format!(r#"payhook_verification_failures_total{{source="stripe",reason="{reason}"}}"#)),
            stripe as f64
        );
    }

    // Every answered request of a source is timed, whatever its answer.
    let answered = processed + duplicates + 1 + 1 + forged;
    assert_eq!(m(r#"payhook_ingest_duration_seconds_count{source="payments"}"#), answered as f64);
    assert_eq!(m(r#"payhook_ingest_duration_seconds_bucket{source="payments",le="+Inf"}"#), answered as f64);
    assert_eq!(m(r#"payhook_ingest_duration_seconds_count{source="stripe"}"#), 1.0);
    assert_eq!(m(r#"payhook_ingest_duration_seconds_count{source="standard"}"#), 0.0);
    assert!(m(r#"payhook_ingest_duration_seconds_sum{source="payments"}"#) > 0.0);
    assert_eq!(m(r#"payhook_dispatch_duration_seconds_count{sink="shop"}"#), processed as f64);

    // Buckets are cumulative and end at the count.
    for prefix in [r#"payhook_ingest_duration_seconds_bucket{source="payments","#, "payhook_commit_batch_size_bucket{"]
    {
        let mut buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|(k, v)| {
                let le = k.strip_prefix(prefix)?.split("le=\"").nth(1)?.trim_end_matches("\"}");
                Some((if le == "+Inf" { f64::INFINITY } else { le.parse().expect("numeric le") }, *v))
            })
            .collect();
        assert!(buckets.len() > 2, "{prefix}");
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{prefix} not cumulative: {buckets:?}");
        assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
    }
    // Every write went through the writer: the registrations and every verified delivery at least.
    let batches = m("payhook_commit_batch_size_count");
    assert!(batches >= 1.0 && m(r#"payhook_commit_batch_size_bucket{le="+Inf"}"#) == batches);
    assert!(m("payhook_commit_batch_size_sum") >= (processed * 2 + duplicates + 2) as f64);
    assert_eq!(m("payhook_writer_queue_depth"), 0.0);
    assert_eq!(m("payhook_writer_queue_capacity"), 4096.0);
    assert_eq!(m("payhook_writer_up"), 1.0);
    // The SQLite WAL against its default limit, with the checkpoints by mode.
    assert_eq!(m("payhook_sqlite_wal_limit_bytes"), f64::from(256u32 << 20));
    assert!(m("payhook_sqlite_wal_bytes") >= 0.0);
    for mode in ["passive", "truncate", "writer"] {
        assert!(m(&format!(r#"payhook_sqlite_checkpoints_total{{mode="{mode}"}}"#)) >= 0.0);
        assert!(m(&format!(r#"payhook_sqlite_checkpoints_busy_total{{mode="{mode}"}}"#)) >= 0.0);
    }

    // The writer's page cache bound, its default.
    assert_eq!(m("payhook_sqlite_writer_cache_limit_bytes"), f64::from(8u32 << 20));

    // Rows by status, as the database counts them.
    assert_eq!(m("payhook_stats_up"), 1.0);
    let stats = app.stats().await;
    assert_eq!(m(r#"payhook_events{status="processed"}"#), processed as f64);
    assert_eq!(m(r#"payhook_events{status="deferred"}"#), 1.0);
    assert_eq!(m(r#"payhook_events{status="dead_lettered"}"#), 1.0);
    for (status, n) in &stats.events {
        assert_eq!(m(&format!(r#"payhook_events{{status="{status}"}}"#)), *n as f64);
    }
    assert_eq!(m(r#"payhook_outbox_rows{status="delivered"}"#), processed as f64);
    assert_eq!(m(r#"payhook_outbox_rows{status="dead"}"#), 0.0);
    for status in ["pending", "delivered", "dead", "unrouted"] {
        assert_eq!(
            m(&format!(r#"payhook_outbox_rows{{status="{status}"}}"#)),
            Stats::count(&stats.outbox_by_status, status) as f64,
            "{status}"
        );
    }
    assert!(m("payhook_oldest_deferred_event_age_seconds") >= 0.0);
    assert_eq!(m("payhook_oldest_pending_outbox_age_seconds"), 0.0);
}
