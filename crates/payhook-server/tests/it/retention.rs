//! The server's retention task: what it removes and how it is counted. Its effect on the ingest rate is measured in
//! `tests/pruning_rate.rs`, a test binary of its own, so that no other test shares the machine while it measures.

use payhook_server::now_ms;
use payhook_store::Store;
use std::time::{Duration, Instant};

const DAY_MS: i64 = 86_400_000;

/// The server's retention task deletes a refunded order older than `orders_days` with its outbox rows, and counts
/// what it removed in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_task_deletes_settled_orders_and_counts_them_in_the_metrics() {
    use crate::helpers::TestApp;
    use payhook_store::contract::{new_order, order_id, pay, refund};
    let app = TestApp::spawn_with(|s, _| {
        s.retention.interval_ms = 50;
        s.retention.orders_ms = 40 * DAY_MS;
    })
    .await;
    let old = now_ms() - 41 * DAY_MS;
    app.store.register_order(new_order("ord_old", 100, old)).await.expect("register");
    app.store.ingest(pay("evt_old_pay", "ord_old", 100, old + 1)).await.expect("pay");
    app.store.ingest(refund("evt_old_refund", "ord_old", 100, old + 2)).await.expect("refund");
    app.store.register_order(new_order("ord_new", 100, now_ms())).await.expect("register");
    app.store.ingest(refund("evt_new_refund", "ord_new", 100, now_ms())).await.expect("refund");

    let series = |text: &str, name: &str| -> Option<f64> {
        text.lines().find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (_, text) = app.get_text_authorized("/metrics").await;
        if series(&text, r#"payhook_pruned_total{what="orders"}"#) == Some(1.0) || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(series(&text, r#"payhook_pruned_total{what="orders"}"#), Some(1.0), "{text}");
    assert_eq!(series(&text, r#"payhook_pruned_total{what="outbox_rows"}"#), Some(2.0), "{text}");
    assert_eq!(series(&text, "payhook_retention_orders_age_seconds"), Some((40 * DAY_MS / 1000) as f64));
    assert!(app.store.order(&order_id("ord_old")).await.expect("order").is_none(), "the old refunded order is gone");
    assert!(app.store.order(&order_id("ord_new")).await.expect("order").is_some(), "the young one stays");
}

/// The retention task deletes audit entries older than `retention.audit_ms` and keeps the rest.
#[tokio::test]
async fn audit_entries_past_their_retention_are_deleted_and_the_rest_kept() {
    use crate::helpers::TestApp;
    use payhook_store::{AuditAction, AuditFilter};
    let app = TestApp::spawn().await;
    let now = app.clock.now_ms();
    let by = payhook_server::Actor::cli();
    let entries = [(now - 401 * DAY_MS, "old"), (now - 399 * DAY_MS, "kept"), (now, "new")]
        .map(|(at, target)| by.entry(AuditAction::Reload, Some(target.into()), "ok", serde_json::Value::Null, at));
    app.store.audit(entries.to_vec()).await.unwrap();
    let retention = app.settings.retention.clone();
    assert_eq!(retention.audit_ms, 400 * DAY_MS);
    let deleted = payhook_server::retention::prune_audit(&*app.store, &retention, now, Duration::ZERO).await.unwrap();
    assert_eq!(deleted, 1);
    let left = app.store.list_audit(AuditFilter { limit: 10, ..AuditFilter::default() }).await.unwrap();
    let targets: Vec<_> = left.rows.iter().filter_map(|r| r.entry.target.as_deref()).collect();
    assert_eq!(targets, ["new", "kept"]);
}
