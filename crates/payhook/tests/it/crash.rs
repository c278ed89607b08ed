//! Crash testing: `kill -9` the real binary at random moments under load — mid-batch, between the commit and the
//! answer, while idle — restart it on the same database, and check the promise at the end: every acknowledged
//! delivery recorded exactly once, every order in the state its events imply, one receipt per paid order.
//!
//! `PAYHOOK_CRASH_KILLS` sets the number of kills (20 by default, for CI; raise it for a long run) and
//! `PAYHOOK_CRASH_SEED` replays a run's workload and kill schedule (the seed of every run is printed).

use crate::helpers::{AMOUNT, CURRENCY, SOURCE, Server, TestDir, check_store, count, signer};
use payhook_core::event::OrderAction;
use payhook_core::format::{Format, Outgoing};
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

struct Delivery {
    event_id: String,
    order: usize,
    action: OrderAction,
}

/// Sends one delivery until payhook acknowledges it, as a provider does: retry on 5xx and on connection errors
/// (payhook is being killed), never on 4xx (which would be a bug here). Returns the acknowledged outcome.
async fn deliver_until_acked(
    client: &reqwest::Client,
    url: &RwLock<String>,
    d: &Delivery,
    deadline: Instant,
) -> String {
    let body = Format::Generic.encode(&Outgoing {
        event_id: &d.event_id,
        action: d.action,
        order_id: &format!("crash-{}", d.order),
        amount_minor: AMOUNT,
        currency: CURRENCY,
        created: 1_700_000_000,
    });
    let headers = signer().sign(&body, 0, &d.event_id);
    loop {
        assert!(Instant::now() < deadline, "{} was never acknowledged", d.event_id);
        let target = url.read().expect("url lock").clone();
        let mut req = client.post(&target).header("content-type", "application/json").body(body.clone());
        for (name, value) in &headers {
            req = req.header(name, value);
        }
        match req.send().await {
            Ok(resp) if resp.status() == StatusCode::OK => {
                let answer: Value = resp.json().await.unwrap_or(Value::Null);
                if let Some(status) = answer["status"].as_str() {
                    return status.to_owned();
                }
                // The connection died while the answer was being read: not acknowledged, so retry.
            }
            Ok(resp) if resp.status().is_client_error() => {
                panic!("{} was refused with {}: {:?}", d.event_id, resp.status(), resp.text().await)
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_acknowledged_delivery_and_applies_nothing_twice() {
    let kills = env_u64("PAYHOOK_CRASH_KILLS").unwrap_or(20) as usize;
    let seed = env_u64("PAYHOOK_CRASH_SEED").unwrap_or_else(|| fastrand::u64(..));
    eprintln!("crash test: {kills} kills, seed {seed} (PAYHOOK_CRASH_SEED={seed} replays this schedule)");
    let mut rng = fastrand::Rng::with_seed(seed);

    let dir = TestDir::new();
    let mut server = Server::start(&dir).await;
    let orders = 40 * kills.max(5);
    for i in 0..orders {
        let (status, answer) = server.register_order(&format!("crash-{i}"), AMOUNT).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }

    // A shuffled workload: a payment per order, a refund for one order in ten, and 20 % duplicate deliveries.
    let mut unique: Vec<Delivery> = Vec::new();
    let mut refunded = vec![false; orders];
    for (i, was_refunded) in refunded.iter_mut().enumerate() {
        unique.push(Delivery { event_id: format!("evt-crash-pay-{i}"), order: i, action: OrderAction::Pay });
        if rng.u8(..10) == 0 {
            *was_refunded = true;
            unique.push(Delivery { event_id: format!("evt-crash-ref-{i}"), order: i, action: OrderAction::Refund });
        }
    }
    let mut plan: Vec<usize> = (0..unique.len()).collect();
    for _ in 0..unique.len() / 4 {
        plan.push(rng.usize(..unique.len()));
    }
    rng.shuffle(&mut plan);
    let kill_delays: Vec<u64> = (0..kills).map(|_| rng.u64(20..250)).collect();
    // Spread the load over the kill schedule so that kills land under load.
    let schedule_ms: u64 = kill_delays.iter().sum::<u64>() + 250 * kills as u64;
    let clients = 16;
    let pace = Duration::from_millis(schedule_ms * clients as u64 / plan.len() as u64);

    let unique = Arc::new(unique);
    let plan = Arc::new(plan);
    let url = Arc::new(RwLock::new(server.webhook_url()));
    let acked: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (unique, plan, url, acked, next) =
            (Arc::clone(&unique), Arc::clone(&plan), Arc::clone(&url), Arc::clone(&acked), Arc::clone(&next));
        tasks.spawn(async move {
            let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client");
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&u) = plan.get(k) else { return };
                let d = &unique[u];
                let outcome = deliver_until_acked(&client, &url, d, deadline).await;
                acked.lock().expect("acked lock").entry(d.event_id.clone()).or_default().push(outcome);
                tokio::time::sleep(pace).await;
            }
        });
    }

    for (k, delay) in kill_delays.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(*delay)).await;
        drop(server); // SIGKILL, then wait for the process to be gone.
        server = Server::start(&dir).await;
        *url.write().expect("url lock") = server.webhook_url();
        if next.load(Ordering::Relaxed) >= plan.len() {
            eprintln!("crash test: the workload finished after {} kills", k + 1);
            break;
        }
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("client task");
    }
    server.stop();

    // Every delivery was acknowledged (the provider kept retrying), with an outcome that makes sense.
    let acked = acked.lock().expect("acked lock").clone();
    assert_eq!(acked.values().map(Vec::len).sum::<usize>(), plan.len(), "every delivery is acknowledged");
    for (event_id, outcomes) in acked.iter() {
        let applied = outcomes.iter().filter(|o| *o == "processed").count();
        assert!(applied <= 1, "{event_id} was answered processed {applied} times: {outcomes:?}");
        assert!(
            outcomes.iter().all(|o| o == "processed" || o == "duplicate"),
            "{event_id}: unexpected outcomes {outcomes:?}"
        );
    }

    // The database: each acknowledged event exactly once, each order as its events imply, one receipt per payment.
    let db = dir.open_db();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM inbox") as usize, unique.len(), "one inbox row per event");
    for event_id in acked.keys() {
        let n: i64 = db
            .query_row("SELECT COUNT(*) FROM inbox WHERE source = ?1 AND event_id = ?2", [SOURCE, event_id], |r| {
                r.get(0)
            })
            .expect("count event");
        assert_eq!(n, 1, "{event_id} is recorded exactly once");
    }
    for (i, was_refunded) in refunded.iter().enumerate() {
        let id = format!("crash-{i}");
        let status: String =
            db.query_row("SELECT status FROM orders WHERE id = ?1", [&id], |r| r.get(0)).expect("order status");
        let expected = if *was_refunded { "refunded" } else { "paid" };
        assert_eq!(status, expected, "order {id} (seed {seed})");
        let receipts: i64 = db
            .query_row("SELECT COUNT(*) FROM outbox WHERE order_id = ?1 AND kind = 'order.paid'", [&id], |r| r.get(0))
            .expect("receipts");
        if *was_refunded {
            assert!(receipts <= 1, "order {id} has {receipts} receipts (seed {seed})");
        } else {
            assert_eq!(receipts, 1, "order {id} has {receipts} receipts (seed {seed})");
        }
        let transitions: i64 = db
            .query_row("SELECT json_array_length(history) FROM orders WHERE id = ?1", [&id], |r| r.get(0))
            .expect("audit rows");
        let outbox: i64 =
            db.query_row("SELECT COUNT(*) FROM outbox WHERE order_id = ?1", [&id], |r| r.get(0)).expect("outbox rows");
        assert_eq!(transitions, outbox, "order {id}: one outbox row per real transition (seed {seed})");
    }
    drop(db);

    // The same promise through the shared checker, as every end-to-end test checks it.
    let acked: Vec<String> = acked.keys().cloned().collect();
    let checked = check_store(&dir, &acked).await;
    assert_eq!((checked.events, checked.orders), (unique.len(), orders), "seed {seed}");
}
