//! Listings page through a filter no index serves whole in pages that each examine at most
//! `storage.list_scan_rows` rows: a page the bound stops short says so (`partial`) and carries a cursor, and
//! following the cursors gives every match once, whether the client is the API, the dashboard or a bulk replay.

use crate::helpers::{TestApp, event, now_secs};
use crate::ui::{get as ui_get, login};
use payhook_core::event::OrderAction::{Pay, Refund};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The scan bound of these tests: a dozen rows cross it many times.
const SCAN_ROWS: u32 = 3;

/// An app whose listings examine at most [`SCAN_ROWS`] rows a page, holding 18 events: six unparseable bodies
/// (dead letters whose reason says JSON), six payments of the wrong amount (dead letters for another reason), six
/// ignored events; newest last.
async fn app_with_mixed_events() -> TestApp {
    let app = TestApp::spawn_with(|_, options| options.list_scan_rows = SCAN_ROWS).await;
    app.register_order("ord_amount", 1999, "usd").await;
    for i in 0..18 {
        let body = match i % 3 {
            0 => {
                let (_, answer) = app.deliver_bytes("payments", format!("not json #{i}").into_bytes()).await;
                answer
            }
            1 => app.deliver("payments", &event(&format!("evt_amount_{i}"), Pay, "ord_amount", 5)).await.1,
            _ => {
                let other = json!({ "id": format!("evt_ign_{i}"), "type": "customer.created", "created": now_secs() });
                app.deliver_bytes("payments", other.to_string().into_bytes()).await.1
            }
        };
        assert!(["dead_lettered", "ignored"].contains(&body["status"].as_str().unwrap_or("")), "{body}");
    }
    app
}

fn ids(rows: &Value, key: &str) -> Vec<String> {
    rows.as_array().unwrap().iter().map(|r| r[key].to_string()).collect()
}

/// Follows `next_cursor` from `path` (which has a query string); returns every row, and how many pages were partial.
async fn page_through(app: &TestApp, path: &str, rows: &str, key: &str) -> (Vec<String>, usize) {
    let (mut all, mut partial, mut cursor) = (Vec::new(), 0, None::<i64>);
    for _ in 0..100 {
        let url = match cursor {
            Some(c) => format!("{path}&before={c}"),
            None => path.to_owned(),
        };
        let page = app.api_get(&url).await;
        assert_eq!(page.status, StatusCode::OK, "{url}: {}", page.json);
        all.extend(ids(&page.json[rows], key));
        let next = page.json["next_cursor"].as_i64();
        if page.json["partial"] == json!(true) {
            partial += 1;
            assert!(next.is_some(), "a partial page is not the end: {}", page.json);
        }
        match next {
            Some(c) => {
                assert!(cursor.is_none_or(|before| c < before), "the cursor moves down: {}", page.json);
                cursor = Some(c);
            }
            None => return (all, partial),
        }
    }
    panic!("{path} never ended");
}

/// Every row of an unfiltered listing (which the row id order serves whole: one page, never partial).
async fn everything(app: &TestApp, path: &str, rows: &str) -> Vec<Value> {
    let page = app.api_get(&format!("{path}?limit=500")).await;
    assert_eq!((page.json["partial"].clone(), page.json["next_cursor"].clone()), (json!(false), Value::Null));
    page.json[rows].as_array().unwrap().clone()
}

#[tokio::test]
async fn cursors_page_through_a_filter_no_index_serves_without_missing_or_repeating_a_row() {
    let app = app_with_mixed_events().await;
    let all = everything(&app, "/v1/events", "events").await;
    let json_reason = |e: &&Value| e["reason"].as_str().is_some_and(|r| r.contains("JSON"));
    let expected: Vec<String> = all.iter().filter(json_reason).map(|e| e["event_id"].to_string()).collect();
    assert_eq!(expected.len(), 6);

    let (seen, partial) = page_through(&app, "/v1/events?reason=JSON&limit=2", "events", "event_id").await;
    assert_eq!(seen, expected, "every match once, newest first");
    assert!(partial > 0, "one match in three rows crosses a bound of {SCAN_ROWS}");
    let (seen, partial) = page_through(&app, "/v1/dead-letters?reason=JSON&limit=2", "events", "event_id").await;
    assert_eq!(seen, expected, "dead letters: every match once");
    assert!(partial > 0, "one match in two dead letters crosses a bound of {SCAN_ROWS}");

    // A filter an index serves whole fills its pages, bound or not.
    let dead: Vec<String> =
        all.iter().filter(|e| e["status"] == "dead_lettered").map(|e| e["event_id"].to_string()).collect();
    let (seen, partial) = page_through(&app, "/v1/dead-letters?limit=5", "events", "event_id").await;
    assert_eq!((seen, partial), (dead, 0));

    // Outbox rows of one kind (no index) beside a status: paged the same way. No sink is configured, so every
    // row is `unrouted`.
    for i in 0..6 {
        let order = format!("ord_paid_{i}");
        app.register_order(&order, 100, "usd").await;
        app.deliver("payments", &event(&format!("evt_paid_{i}"), Pay, &order, 100)).await;
        if i % 3 == 0 {
            app.deliver("payments", &event(&format!("evt_refund_{i}"), Refund, &order, 100)).await;
        }
    }
    let rows = everything(&app, "/v1/outbox", "outbox").await;
    let refunds = |r: &&Value| r["kind"] == "order.refunded" && r["status"] == "unrouted";
    let expected: Vec<String> = rows.iter().filter(refunds).map(|r| r["id"].to_string()).collect();
    assert_eq!(expected.len(), 2, "{rows:?}");
    let path = "/v1/outbox?kind=order.refunded&status=unrouted&limit=1";
    let (seen, partial) = page_through(&app, path, "outbox", "id").await;
    assert_eq!(seen, expected, "refund rows: every one once");
    assert!(partial > 0, "two refunds among eight rows cross a bound of {SCAN_ROWS}");

    // Each page the bound stopped is counted.
    let (status, metrics) = app.get_text_authorized("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let stopped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("payhook_list_scans_stopped_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no payhook_list_scans_stopped_total in\n{metrics}"));
    assert!(stopped > 0, "{stopped}");
}

#[tokio::test]
async fn a_bulk_replay_pages_on_through_the_bound_and_finds_every_matching_dead_letter() {
    let app = app_with_mixed_events().await;
    let by_reason = json!({ "dry_run": true, "filter": { "reason": "JSON" } });
    let dry = app.api_post("/v1/dead-letters/replay", by_reason.to_string()).await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.json);
    assert_eq!((&dry.json["matched"], &dry.json["more"]), (&json!(6), &json!(false)), "{}", dry.json);
}

#[tokio::test]
async fn a_dashboard_page_stopped_by_the_bound_says_so_and_links_to_the_rest() {
    let app = app_with_mixed_events().await;
    let session = login(&app).await;
    let resp = ui_get(&app, "/ui/dead-letters?reason=JSON", Some(&session.cookie)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let html = resp.text().await.unwrap();
    assert!(html.contains("id=\"partial\""), "no notice of a partial page: {html}");
    assert!(html.contains("id=\"older\""), "no link to the rest: {html}");
}
