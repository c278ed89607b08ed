//! `--rate`: steady as an open loop. The closed loop sends a worker's next delivery only once its previous one is
//! answered, so it slows down to the server's pace and never offers more than the server takes; providers do not
//! wait like that. Here the deliveries arrive on a fixed schedule whatever the answers, which is what it takes to
//! see a server offered more than it can take (its memory, its latency, its `Retry-After`).

use super::{Conn, Connector, Run, Workload, deliver};
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Delivers the plan at `rate` per second: entry k is due at `start + k / rate`, every deadline computed from the
/// start so that a late wake-up does not push the rest of the schedule back. A due delivery starts as its own task,
/// answered or not the ones before it, on a connection from a pool that grows to at most `cap`; one that finds every
/// connection busy waits for the next free one and counts as a late start. Its latency counts from when it was due.
///
/// Returns the report's `open_loop` object: the rate asked for, the rate offered (lower when starts were late), the
/// late starts and the most deliveries in flight at once.
pub(super) async fn deliver_at_rate(
    run: &Arc<Run>,
    connector: &Connector,
    w: Workload,
    rate: f64,
    cap: usize,
) -> Result<Value> {
    let w = Arc::new(w);
    // A permit is a connection in use: taken before a delivery starts, given back once it is answered (or given
    // up) and its connection is back in the pool.
    let slots = Arc::new(Semaphore::new(cap));
    let pool: Arc<Mutex<Vec<Conn>>> = Arc::new(Mutex::new(Vec::with_capacity(cap)));
    let (mut made, mut late_starts, mut max_in_flight) = (0, 0, 0);
    // When the scheduler last got a connection it had to wait for: a delivery due before then was late too,
    // though a connection may have been free by the time the scheduler reached it.
    let mut waited_until: Option<Instant> = None;
    let mut set = tokio::task::JoinSet::new();
    let start = Instant::now();
    let mut last_start = start;
    for (k, &u) in w.plan.iter().enumerate() {
        let due = start + Duration::from_secs_f64(k as f64 / rate);
        if Instant::now() < due {
            tokio::time::sleep_until(due.into()).await;
        }
        // The scheduler itself waits for a free connection rather than leaving a task per overdue delivery to wait:
        // the semaphore serves its waiters in order, so the server sees the same requests either way, and the
        // client's memory does not grow with the server's backlog. Latency still counts from each one's `due`.
        let permit = match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => {
                if waited_until.is_some_and(|t| t > due) {
                    late_starts += 1;
                }
                permit
            }
            Err(_) => {
                late_starts += 1;
                let permit = Arc::clone(&slots).acquire_owned().await.context("the open loop's connection slots")?;
                waited_until = Some(Instant::now());
                permit
            }
        };
        last_start = Instant::now();
        max_in_flight = max_in_flight.max(cap - slots.available_permits());
        // Popped under a permit, so an empty pool means the other connections are all in use: fewer than `cap`.
        let pooled = pool.lock().ok().and_then(|mut p| p.pop());
        let mut conn = pooled.unwrap_or_else(|| {
            made += 1;
            connector.conn(made - 1)
        });
        let (run, w, pool) = (Arc::clone(run), Arc::clone(&w), Arc::clone(&pool));
        set.spawn(async move {
            let d = &w.unique[u];
            deliver(&run, &mut conn, &w.bodies[u], d, Some(due)).await;
            if let Ok(mut p) = pool.lock() {
                p.push(conn);
            }
            // Only now, with the connection back in the pool, may the next delivery take its place.
            drop(permit);
        });
        // Reaped as they finish, so that a long run does not keep a result per delivery until the end.
        while let Some(r) = set.try_join_next() {
            r?;
        }
    }
    while let Some(r) = set.join_next().await {
        r?;
    }
    // The schedule's span counts one interval per delivery, so that a schedule kept exactly offers `rate`.
    let span = last_start.duration_since(start).as_secs_f64() + 1.0 / rate;
    Ok(json!({
        "rate": rate,
        "offered_per_s": w.deliveries() as f64 / span,
        "late_starts": late_starts,
        "max_in_flight": max_in_flight,
    }))
}
