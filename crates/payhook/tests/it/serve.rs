//! `payhook serve`: several processes on one file, graceful shutdown, the background worker.

use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Delivers `d` to `url` like a provider: 503 (and nothing else) is retried until the answer is 200.
async fn deliver_until_acked(client: reqwest::Client, url: String, d: Arc<Signed>) -> (String, usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut unavailable = 0;
    loop {
        let (status, answer) = post(&client, &url, &d).await.unwrap_or_else(|e| panic!("{} to {url}: {e}", d.event_id));
        match status {
            StatusCode::OK => return (outcome(&answer).to_owned(), unavailable),
            StatusCode::SERVICE_UNAVAILABLE if Instant::now() < deadline => {
                unavailable += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{} to {url}: {other} {answer}", d.event_id),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_on_one_sqlite_file_apply_each_of_200_events_once() {
    const N: usize = 200;
    let dir = TestDir::new();
    let mut servers = Vec::new();
    for _ in 0..4 {
        servers.push(Server::start(&dir).await);
    }
    let ports: Vec<u16> = servers.iter().map(|s| s.port).collect();
    assert_eq!(ports.iter().collect::<std::collections::HashSet<_>>().len(), 4, "distinct ports: {ports:?}");

    for i in 0..N {
        let (status, answer) = servers[0].register_order(&format!("mp-{i}"), AMOUNT).await;
        assert_eq!(status, StatusCode::CREATED, "registering mp-{i}: {answer}");
    }
    // The other processes see the orders through the shared file.
    for s in &servers[1..] {
        let (status, answer) = s.order(&format!("mp-{}", N - 1)).await;
        assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("pending")), "{answer}");
    }

    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let urls: Vec<String> = servers.iter().map(Server::webhook_url).collect();
    // Bounded so that 2 cores are not drowned in connections, yet every event is raced by all four at once.
    let in_flight = Arc::new(Semaphore::new(48));
    let mut events = JoinSet::new();
    for i in 0..N {
        let d = Arc::new(payment(&format!("evt-mp-{i}"), &format!("mp-{i}")));
        let (client, urls, in_flight) = (client.clone(), urls.clone(), Arc::clone(&in_flight));
        events.spawn(async move {
            let _permit = in_flight.acquire_owned().await.unwrap();
            let mut four = JoinSet::new();
            for url in urls {
                four.spawn(deliver_until_acked(client.clone(), url, Arc::clone(&d)));
            }
            let mut answers = Vec::new();
            while let Some(r) = four.join_next().await {
                answers.push(r.unwrap());
            }
            (d.event_id.clone(), answers)
        });
    }
    let (mut processed, mut duplicate, mut unavailable) = (0, 0, 0);
    while let Some(r) = events.join_next().await {
        let (event_id, answers) = r.unwrap();
        let outcomes: Vec<&str> = answers.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(
            (
                outcomes.iter().filter(|o| **o == "processed").count(),
                outcomes.iter().filter(|o| **o == "duplicate").count()
            ),
            (1, 3),
            "{event_id}: the four processes answered {outcomes:?}"
        );
        processed += 1;
        duplicate += 3;
        unavailable += answers.iter().map(|(_, u)| u).sum::<usize>();
    }
    assert_eq!((processed, duplicate), (N, 3 * N));
    eprintln!("four processes: {unavailable} answers were 503 and retried");

    for s in servers {
        s.stop();
    }
    let db = dir.open_db();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM inbox"), N as i64);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM inbox WHERE status = 'processed'"), N as i64);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM outbox"), N as i64);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM outbox WHERE kind = 'order.paid'"), N as i64);
    assert_eq!(count(&db, "SELECT COUNT(DISTINCT order_id) FROM outbox WHERE kind = 'order.paid'"), N as i64);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'paid'"), N as i64);
    assert_eq!(count(&db, "SELECT SUM(json_array_length(history)) FROM orders"), N as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_exits_cleanly() {
    const N: usize = 200;
    /// The first BURST deliveries go at once (many are in flight when SIGTERM lands); the rest trickle in after
    /// the signal, one every 2 ms, and the later ones must find the door closed (refused, never half-served).
    const BURST: usize = 100;
    /// SIGTERM once this many deliveries were answered 200.
    const SIGNAL_AFTER: usize = 10;
    let dir = TestDir::new();
    let mut server = Server::start(&dir).await;
    for i in 0..N {
        let (status, answer) = server.register_order(&format!("st-{i}"), AMOUNT).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }

    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let url = server.webhook_url();
    let acked = Arc::new(AtomicUsize::new(0));
    let signal = Arc::new(tokio::sync::Notify::new());
    let (signalled, signal_sent) = tokio::sync::watch::channel(false);
    let mut deliveries = JoinSet::new();
    for i in 0..N {
        let d = payment(&format!("evt-st-{i}"), &format!("st-{i}"));
        let (client, url, acked, signal) = (client.clone(), url.clone(), Arc::clone(&acked), Arc::clone(&signal));
        let mut signal_sent = signal_sent.clone();
        deliveries.spawn(async move {
            if i >= BURST {
                let _ = signal_sent.wait_for(|sent| *sent).await;
                tokio::time::sleep(Duration::from_millis(2 * (i - BURST) as u64)).await;
            }
            let answer = post(&client, &url, &d).await;
            if matches!(answer, Ok((StatusCode::OK, _))) && acked.fetch_add(1, Ordering::SeqCst) + 1 == SIGNAL_AFTER {
                signal.notify_one();
            }
            (d.event_id, answer)
        });
    }
    tokio::time::timeout(Duration::from_secs(20), signal.notified())
        .await
        .unwrap_or_else(|_| panic!("fewer than {SIGNAL_AFTER} deliveries were answered 200:\n{}", server.log()));
    server.terminate();
    signalled.send_replace(true);

    let mut answered_ok: Vec<String> = Vec::new();
    let (mut unavailable, mut connection_errors) = (0, 0);
    while let Some(r) = deliveries.join_next().await {
        let (event_id, answer) = r.unwrap();
        match answer {
            Ok((StatusCode::OK, v)) => {
                assert_eq!(outcome(&v), "processed", "{event_id}: {v}");
                answered_ok.push(event_id);
            }
            Ok((StatusCode::SERVICE_UNAVAILABLE, _)) => unavailable += 1,
            Ok((status, v)) => panic!("{event_id}: answered {status} {v} during shutdown"),
            Err(e) if e.is_timeout() => panic!("{event_id}: no answer during shutdown: {e}"),
            // Refused once the listener is closed, or reset while still in the accept backlog.
            Err(_) => connection_errors += 1,
        }
    }
    let status = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "payhook serve exited with {status} after SIGTERM:\n{}", server.log());
    eprintln!("sigterm: {} answered 200, {unavailable} 503, {connection_errors} connection errors", answered_ok.len());
    assert!(answered_ok.len() >= SIGNAL_AFTER);
    assert!(
        answered_ok.len() < N,
        "every delivery was answered 200, even those sent up to 200 ms after SIGTERM: it still accepts connections"
    );

    let db = dir.open_db();
    let mut stmt = db.prepare("SELECT COUNT(*) FROM inbox WHERE source = ?1 AND event_id = ?2").unwrap();
    for event_id in &answered_ok {
        let n: i64 = stmt.query_row((SOURCE, event_id), |r| r.get(0)).unwrap();
        assert_eq!(n, 1, "{event_id} was answered 200 but is not in the inbox");
    }
    // Drained, not cut off: nothing was recorded without its answer reaching the provider (a delivery refused
    // or reset before the server read it is not recorded either).
    let mut recorded: Vec<String> = db
        .prepare("SELECT event_id FROM inbox ORDER BY event_id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    recorded.retain(|id| !answered_ok.contains(id));
    assert!(recorded.is_empty(), "recorded but never answered: {recorded:?}");
    // Every acknowledged payment was applied, with its receipt, in the same commit.
    let paid = count(&db, "SELECT COUNT(*) FROM orders WHERE status = 'paid'");
    assert_eq!(paid, answered_ok.len() as i64);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM outbox WHERE kind = 'order.paid'"), paid);
    check_store(&dir, &answered_ok).await;
}

#[tokio::test]
async fn payment_before_its_order_is_applied_by_the_background_worker() {
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let early = payment("evt-early-1", "early-1");
    let (status, answer) = post(&server.client, &server.webhook_url(), &early).await.unwrap();
    assert_eq!((status, outcome(&answer)), (StatusCode::OK, "deferred"), "{answer}");
    let (status, _) = server.order("early-1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, answer) = server.register_order("early-1", AMOUNT).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");

    // The real worker, woken by the registration (its own backoff would be 5 s): poll, don't drive it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let order: Value = loop {
        let (status, order) = server.order("early-1").await;
        assert_eq!(status, StatusCode::OK, "{order}");
        if order["status"] == "paid" {
            break order;
        }
        assert!(
            Instant::now() < deadline,
            "the deferred payment was not applied within 10 s: {order}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(paid_receipts(&order), 1, "{order}");
    assert_eq!(order["outbox"].as_array().map(Vec::len), Some(1), "{order}");
    let history = order["history"].as_array().cloned().unwrap_or_default();
    assert_eq!(history.len(), 1, "{order}");
    assert_eq!(history[0]["event_id"], "evt-early-1", "{order}");

    // A redelivery now is a duplicate, not a second payment.
    let (status, answer) = post(&server.client, &server.webhook_url(), &early).await.unwrap();
    assert_eq!((status, outcome(&answer)), (StatusCode::OK, "duplicate"), "{answer}");
    server.stop();
    let db = dir.open_db();
    let inbox_status: String = db
        .query_row("SELECT status FROM inbox WHERE source = ?1 AND event_id = 'evt-early-1'", [SOURCE], |r| r.get(0))
        .unwrap();
    assert_eq!(inbox_status, "processed");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM outbox WHERE order_id = 'early-1' AND kind = 'order.paid'"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_over_capacity_every_answer_is_200_or_503_with_retry_after_in_time_and_memory_stays_bounded() {
    /// Deliveries sent, by CLIENTS connections with no think time, against a queue of QUEUE_DEPTH.
    const N: usize = 4_000;
    const CLIENTS: usize = 128;
    const QUEUE_DEPTH: usize = 4;
    const BODY_TIMEOUT_MS: u64 = 5_000;
    const PEAK_RSS_LIMIT_MIB: u64 = 512;
    let dir = TestDir::new();
    let server = Server::start_edited(&dir, |config| {
        config
            .replace("[storage]\n", &format!("[storage]\nqueue_depth = {QUEUE_DEPTH}\nbatch_max = 8\n"))
            .replace("[server]\n", &format!("[server]\nbody_timeout_ms = {BODY_TIMEOUT_MS}\n"))
    })
    .await;
    let url = server.webhook_url();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(2 * BODY_TIMEOUT_MS))
        .pool_max_idle_per_host(CLIENTS)
        .build()
        .unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut clients = JoinSet::new();
    for _ in 0..CLIENTS {
        let (client, url, next) = (client.clone(), url.clone(), Arc::clone(&next));
        clients.spawn(async move {
            let mut answers = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= N {
                    return answers;
                }
                // Payments for orders that do not exist yet: each is a real write (recorded as deferred).
                let d = payment(&format!("evt-ov-{i}"), &format!("ov-{i}"));
                let mut req = client.post(&url).header("content-type", "application/json").body(d.body);
                for (name, value) in &d.headers {
                    req = req.header(name, value);
                }
                let sent = Instant::now();
                let resp = req.send().await.unwrap_or_else(|e| panic!("{}: {e}", d.event_id));
                let status = resp.status();
                let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                let _ = resp.bytes().await;
                answers.push((d.event_id, status, retry_after, sent.elapsed()));
            }
        });
    }
    let mut acked = Vec::new();
    let (mut shed, mut slowest) = (0, Duration::ZERO);
    while let Some(joined) = clients.join_next().await {
        for (event_id, status, retry_after, latency) in joined.unwrap() {
            slowest = slowest.max(latency);
            match status {
                StatusCode::OK => acked.push(event_id),
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert!(retry_after.is_some(), "{event_id}: 503 without a Retry-After in seconds");
                    shed += 1;
                }
                other => panic!("{event_id}: answered {other} under overload"),
            }
        }
    }
    let elapsed = started.elapsed();
    let peak_kib = server.peak_rss_kib();
    eprintln!(
        "overload: {N} deliveries from {CLIENTS} clients in {elapsed:?}: {} answered 200, {shed} shed with 503; \
         slowest answer {slowest:?}; peak RSS of payhook serve {:.1} MiB",
        acked.len(),
        peak_kib as f64 / 1024.0
    );
    assert!(slowest < Duration::from_millis(BODY_TIMEOUT_MS), "an answer took {slowest:?}");
    assert!(peak_kib < PEAK_RSS_LIMIT_MIB * 1024, "peak RSS {peak_kib} KiB");
    assert!(!acked.is_empty(), "nothing got through");
    server.stop();
    let checked = check_store(&dir, &acked).await;
    assert_eq!(checked.events, acked.len(), "every 200 is recorded, nothing answered 503 is");
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_source_event_id_and_outcome() {
    let dir = TestDir::new();
    let server = Server::start_with(&dir, "\n[log]\nformat = \"json\"\n").await;
    assert_eq!(server.register_order("ord-log", AMOUNT).await.0, StatusCode::CREATED);
    let d = payment("evt-log", "ord-log");
    for expected in ["processed", "duplicate"] {
        let (status, answer) = post(&server.client, &server.webhook_url(), &d).await.expect("post");
        assert_eq!((status, outcome(&answer)), (StatusCode::OK, expected), "{answer}");
    }
    let mut forged = d.clone();
    forged.headers = vec![("x-webhook-signature".into(), "00".repeat(32))];
    let (status, _) = post(&server.client, &server.webhook_url(), &forged).await.expect("post forged");
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let log = server.log();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{log}")))
        .collect();
    assert!(lines.iter().all(|l| l["timestamp"].is_string() && l["level"].is_string()), "{log}");
    let recorded: Vec<&Value> = lines.iter().filter(|l| l["message"] == "delivery recorded").collect();
    let outcomes: Vec<&str> = recorded.iter().map(|l| l["outcome"].as_str().unwrap_or("")).collect();
    assert_eq!(outcomes, ["processed", "duplicate"], "{log}");
    for l in &recorded {
        assert_eq!((&l["source"], &l["event_id"]), (&Value::from(SOURCE), &Value::from("evt-log")), "{l}");
    }
    let refused = lines.iter().find(|l| l["message"] == "signature verification failed").expect(&log);
    assert_eq!((&refused["source"], &refused["outcome"]), (&Value::from(SOURCE), &Value::from("refused")));
    assert_eq!(refused["reason"], "mismatch");
    server.stop();
}
