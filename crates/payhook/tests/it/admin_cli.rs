//! The admin commands (`events`, `dlq`, `replay`, `outbox`, `stats`) run as the real binary on a database a real
//! server wrote and then left: they need no server.

use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::process::Output;
use std::time::{Duration, Instant};

/// A retry budget of one attempt: a payment for an order that does not exist is dead-lettered on arrival.
const ONE_ATTEMPT: &str = "\n[retry]\nmax_attempts = 1\n";

/// Runs `payhook --config CONFIG ARGS` and insists that it succeeds.
fn ok(dir: &TestDir, config: &str, args: &[&str]) -> String {
    let out = admin(dir, config, args);
    assert!(
        out.status.success(),
        "payhook {args:?} failed: {}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs `payhook --config CONFIG ARGS` and insists that it fails; returns its stderr.
fn fails(dir: &TestDir, config: &str, args: &[&str]) -> String {
    let out = admin(dir, config, args);
    assert!(!out.status.success(), "payhook {args:?} succeeded:\n{}", text(&out.stdout));
    text(&out.stderr)
}

fn admin(dir: &TestDir, config: &str, args: &[&str]) -> Output {
    let mut all = vec!["--config", config];
    all.extend_from_slice(args);
    dir.run(&all)
}

fn json(dir: &TestDir, config: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let stdout = ok(dir, config, &all);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("payhook {args:?} --json printed no JSON ({e}):\n{stdout}"))
}

/// Whether a line of `table` consists of exactly these cells.
fn has_row(table: &str, cells: &[&str]) -> bool {
    table.lines().any(|l| l.split_whitespace().eq(cells.iter().copied()))
}

fn event_ids(listing: &Value) -> Vec<&str> {
    listing["events"].as_array().unwrap().iter().map(|e| e["event_id"].as_str().unwrap()).collect()
}

/// Posts a signed delivery and returns the answer's status field.
async fn deliver(server: &Server, d: &Signed) -> String {
    let (status, answer) = post(&server.client, &server.webhook_url(), d).await.expect("POST webhook");
    assert_eq!(status, StatusCode::OK, "{answer}");
    outcome(&answer).to_owned()
}

/// A verified body the generic format cannot read.
fn unreadable(n: usize) -> Signed {
    let body = format!("not json #{n}").into_bytes();
    let headers = signer().sign(&body, now_ms() / 1000, "unused");
    Signed { event_id: String::new(), body, headers }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn dead_letters(dir: &TestDir) -> i64 {
    count(&dir.open_db(), "SELECT COUNT(*) FROM inbox WHERE status = 'dead_lettered'")
}

#[tokio::test]
async fn events_list_show_dlq_list_and_stats_print_tables_and_json_without_a_server() {
    let dir = TestDir::new();
    let server = Server::start_with(&dir, ONE_ATTEMPT).await;
    assert_eq!(server.register_order("o1", AMOUNT).await.0, StatusCode::CREATED);
    assert_eq!(deliver(&server, &payment("evt_1", "o1")).await, "processed");
    assert_eq!(deliver(&server, &payment("evt_2", "o_missing")).await, "dead_lettered");
    assert_eq!(deliver(&server, &unreadable(1)).await, "dead_lettered");
    let config = server.config.to_str().unwrap().to_owned();
    server.stop();
    let config = config.as_str();

    // A table for people: a header, one line per event, every column aligned under its title.
    let table = ok(&dir, config, &["events", "list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].contains("EVENT ID") && lines[0].contains("STATUS"), "{table}");
    let column = |title: &str| lines[0].find(title).unwrap();
    for (line, id, status) in [(lines[2], "evt_2", "dead_lettered"), (lines[3], "evt_1", "processed")] {
        assert_eq!(line.find(id), Some(column("EVENT ID")), "{table}");
        assert_eq!(line.find(status), Some(column("STATUS")), "{table}");
    }

    let all = json(&dir, config, &["events", "list"]);
    assert_eq!(event_ids(&all)[1..], ["evt_2", "evt_1"]);
    assert_eq!(all["next_cursor"], Value::Null);
    let dead = json(&dir, config, &["events", "list", "--status", "dead_lettered"]);
    assert_eq!(event_ids(&dead).len(), 2);
    let page = json(&dir, config, &["events", "list", "--limit", "2"]);
    assert_eq!(event_ids(&page).len(), 2);
    let cursor = page["next_cursor"].as_i64().expect("a cursor to the next page").to_string();
    assert_eq!(event_ids(&json(&dir, config, &["events", "list", "--limit", "2", "--before", &cursor])), ["evt_1"]);
    assert!(ok(&dir, config, &["events", "list", "--limit", "2"]).contains(&format!("more: --before {cursor}")));
    assert!(event_ids(&json(&dir, config, &["events", "list", "--since", "1h"])).len() == 3);
    assert!(event_ids(&json(&dir, config, &["events", "list", "--until", "1h"])).is_empty());
    assert!(fails(&dir, config, &["events", "list", "--status", "exploded"]).contains("exploded"));

    let shown = ok(&dir, config, &["events", "show", SOURCE, "evt_1"]);
    for expected in ["processed", "\"order_id\":\"o1\"", "order changes", "pending", "paid", "order.paid", "hmac"] {
        assert!(shown.contains(expected), "{expected:?} missing from:\n{shown}");
    }
    let detail = json(&dir, config, &["events", "show", SOURCE, "evt_1"]);
    assert_eq!((&detail["event_id"], &detail["status"]), (&Value::from("evt_1"), &Value::from("processed")));
    assert_eq!(detail["changes"].as_array().unwrap().len(), 1);
    assert_eq!(detail["outbox"][0]["kind"], "order.paid");
    assert!(fails(&dir, config, &["events", "show", SOURCE, "evt_nope"]).contains("no event"));

    let dlq = ok(&dir, config, &["dlq", "list"]);
    assert_eq!(dlq.lines().count(), 3, "{dlq}");
    assert!(dlq.contains("evt_2") && !dlq.contains("evt_1"), "{dlq}");
    assert_eq!(event_ids(&json(&dir, config, &["dlq", "list", "--reason", "not valid JSON"])).len(), 1);

    let stats = json(&dir, config, &["stats"]);
    assert_eq!((&stats["events"]["processed"], &stats["events"]["dead_lettered"]), (&Value::from(1), &Value::from(2)));
    assert_eq!(
        (&stats["orders"]["paid"], &stats["outbox"]["by_kind"]["order.paid"]),
        (&Value::from(1), &Value::from(1))
    );
    let table = ok(&dir, config, &["stats"]);
    assert!(has_row(&table, &["events", "dead_lettered", "2"]), "{table}");
    assert!(has_row(&table, &["processed", "1"]), "{table}");

    let recounted = json(&dir, config, &["stats", "--recount"]);
    assert_eq!(recounted["drift"], Value::Array(vec![]), "{recounted}");
    assert_eq!(recounted["stats"]["events"]["dead_lettered"], Value::from(2), "{recounted}");
    let table = ok(&dir, config, &["stats", "--recount"]);
    assert!(table.contains("nothing corrected"), "{table}");
    assert!(has_row(&table, &["events", "dead_lettered", "2"]), "{table}");
}

#[tokio::test]
async fn dlq_replay_previews_with_dry_run_refuses_without_yes_off_a_terminal_and_replays_with_yes() {
    let dir = TestDir::new();
    let server = Server::start_with(&dir, ONE_ATTEMPT).await;
    for n in 1..=3 {
        assert_eq!(deliver(&server, &payment(&format!("evt_a{n}"), &format!("a{n}"))).await, "dead_lettered");
    }
    assert_eq!(deliver(&server, &unreadable(1)).await, "dead_lettered");
    let config = server.config.to_str().unwrap().to_owned();
    server.stop();
    let config = config.as_str();
    dir.write(
        "late.csv",
        &format!("id,amount,currency\na1,{AMOUNT},{CURRENCY}\na2,{AMOUNT},{CURRENCY}\na3,{AMOUNT},{CURRENCY}\n"),
    );
    ok(&dir, config, &["orders", "import", "late.csv"]);
    let payments = ["--type", "payment.succeeded"];

    let preview = ok(&dir, config, &[&["dlq", "replay", "--dry-run"], &payments[..]].concat());
    assert!(preview.contains("3 dead letters would be replayed"), "{preview}");
    let preview = json(&dir, config, &[&["dlq", "replay", "--dry-run"], &payments[..]].concat());
    assert_eq!((&preview["dry_run"], &preview["matched"]), (&Value::from(true), &Value::from(3)));
    assert_eq!(dead_letters(&dir), 4);

    // More than one row and nobody to ask: refused, naming --yes; nothing changed.
    let refused = fails(&dir, config, &[&["dlq", "replay"], &payments[..]].concat());
    assert!(refused.contains("--yes") && refused.contains("not a terminal"), "{refused}");
    assert_eq!(dead_letters(&dir), 4);

    let out = admin(&dir, config, &[&["dlq", "replay", "--max", "2", "--yes"], &payments[..]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(has_row(&table, &["processed", "2"]), "{table}");
    assert!(table.contains("run again to continue"), "{table}");
    assert!(text(&out.stderr).contains("2/2 replayed"), "{}", text(&out.stderr));
    assert_eq!(dead_letters(&dir), 2);

    let report = json(&dir, config, &[&["dlq", "replay", "--yes"], &payments[..]].concat());
    assert_eq!((&report["matched"], &report["outcomes"]["processed"]), (&Value::from(1), &Value::from(1)));
    assert_eq!(dead_letters(&dir), 1);
    let nothing = json(&dir, config, &[&["dlq", "replay", "--yes"], &payments[..]].concat());
    assert_eq!((&nothing["dry_run"], &nothing["matched"]), (&Value::from(false), &Value::from(0)), "{nothing}");
    let db = dir.open_db();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'paid'"), 3);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM outbox WHERE kind = 'order.paid'"), 3);

    // One row needs no confirmation; a single replay names what it came to, and refuses a non-dead-letter.
    let one = ok(&dir, config, &["dlq", "replay", "--reason", "not valid JSON"]);
    assert!(has_row(&one, &["dead_lettered", "1"]), "{one}");
    let unreadable_id = event_ids(&json(&dir, config, &["dlq", "list"]))[0].to_owned();
    let replayed = ok(&dir, config, &["replay", SOURCE, &unreadable_id]);
    assert!(replayed.contains(&format!("{SOURCE}/{unreadable_id}: dead_lettered")), "{replayed}");
    assert!(fails(&dir, config, &["replay", SOURCE, "evt_a1"]).contains("not a dead letter"));
    assert_eq!(count(&dir.open_db(), "SELECT COUNT(*) FROM outbox WHERE kind = 'order.paid'"), 3);
}

#[tokio::test]
async fn outbox_list_and_retry_requeue_a_dead_row_once() {
    let dir = TestDir::new();
    // A sink nobody listens on, and a budget of one attempt: the receipt dies at its first delivery.
    let sink = format!(
        "\n[dispatcher.retry]\nmax_attempts = 1\n\n[[sinks]]\nname = \"shop\"\nurl = \"http://127.0.0.1:{}/hook\"\n\
         kinds = [\"order.paid\"]\ntimeout_ms = 1000\n",
        free_port()
    );
    let server = Server::start_with(&dir, &sink).await;
    server.register_order("o1", AMOUNT).await;
    assert_eq!(deliver(&server, &payment("evt_1", "o1")).await, "processed");
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&dir.open_db(), "SELECT COUNT(*) FROM outbox WHERE status = 'dead'") == 0 {
        assert!(Instant::now() < deadline, "the receipt never died:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let config = server.config.to_str().unwrap().to_owned();
    server.stop();
    let config = config.as_str();

    let table = ok(&dir, config, &["outbox", "list"]);
    assert!(table.lines().next().unwrap().contains("LAST ERROR"), "{table}");
    assert!(table.contains("order.paid") && table.contains("shop") && table.contains("dead"), "{table}");
    let listed = json(&dir, config, &["outbox", "list", "--status", "dead", "--order", "o1"]);
    let row = &listed["outbox"][0];
    assert_eq!((&row["kind"], &row["sink"]), (&Value::from("order.paid"), &Value::from("shop")), "{listed}");
    let id = row["id"].as_i64().unwrap().to_string();
    assert!(json(&dir, config, &["outbox", "list", "--status", "pending"])["outbox"].as_array().unwrap().is_empty());

    let retried = ok(&dir, config, &["outbox", "retry", &id]);
    assert!(retried.contains(&format!("outbox row {id}")) && retried.contains("re-queued: pending"), "{retried}");
    let db = dir.open_db();
    assert_eq!(count(&db, &format!("SELECT COUNT(*) FROM outbox WHERE id = {id} AND status = 'pending'")), 1);
    assert!(fails(&dir, config, &["outbox", "retry", &id]).contains("not dead"));
    assert!(fails(&dir, config, &["outbox", "retry", "987654"]).contains("no outbox row"));
}

/// `payhook prune` applies the retention policy: a settled event older than `keys_days` goes with its key, a
/// younger one stays, a dead letter of any age stays.
#[tokio::test]
async fn prune_removes_settled_events_past_the_retention_and_nothing_younger() {
    let dir = TestDir::new();
    let server = Server::start_with(&dir, ONE_ATTEMPT).await;
    for (event, order) in [("evt_old", "ord_old"), ("evt_young", "ord_young")] {
        server.register_order(order, AMOUNT).await;
        assert_eq!(deliver(&server, &payment(event, order)).await, "processed");
    }
    assert_eq!(deliver(&server, &payment("evt_dead", "ord_missing")).await, "dead_lettered");
    server.stop();
    // Age two of them by 40 days, as if the file had been running that long.
    let db = dir.open_db();
    let forty_days_ms: i64 = 40 * 86_400_000;
    db.execute(
        "UPDATE inbox SET received_at = received_at - ?1 WHERE event_id IN ('evt_old', 'evt_dead')",
        [forty_days_ms],
    )
    .expect("age rows");
    drop(db);

    let config = dir.path().join("payhook-prune.toml");
    std::fs::write(&config, config_toml(free_port()) + ONE_ATTEMPT).expect("write config");
    let config = config.to_str().unwrap();
    let pruned = json(&dir, config, &["prune"]);
    assert_eq!(pruned["events_deleted"], 1, "{pruned}");
    assert_eq!(pruned["business_keys_deleted"], 1, "{pruned}");
    let listing = json(&dir, config, &["events", "list"]);
    let mut ids = event_ids(&listing);
    ids.sort_unstable();
    assert_eq!(ids, ["evt_dead", "evt_young"], "{listing}");
    let again = json(&dir, config, &["prune"]);
    assert_eq!(again["events_deleted"], 0, "{again}");
}
