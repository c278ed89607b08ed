//! The scenarios' deliveries: planned ahead (steady, dup-storm, refund-first) or made up as the run goes
//! (sustained), the order registration before and during the run, and the event ids.

use super::args::{Params, Scenario};
use super::deliver::{Conn, Connector, Delivery, Expect, Gate, Run, deliver};
use super::{AMOUNT, CURRENCY, STORM, verify::pool};
use anyhow::{Result, bail};
use payhook_core::event::OrderAction;
use payhook_core::format::Outgoing;
use payhook_server::SourceSettings;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Registers orders through `/v1/orders`, the way a shop would before its customers pay.
pub(super) struct Registrar {
    pub(super) client: reqwest::Client,
    pub(super) url: String,
    pub(super) token: String,
    pub(super) run_id: String,
}

impl Registrar {
    pub(super) fn order_id(run_id: &str, i: usize) -> String {
        format!("bench-{run_id}-{i}")
    }

    pub(super) async fn register(&self, concurrency: usize, range: std::ops::Range<usize>) -> Result<()> {
        let (client, url, token, run_id) =
            (self.client.clone(), self.url.clone(), self.token.clone(), self.run_id.clone());
        let start = range.start;
        pool(concurrency, range.len(), move |k| {
            let (client, url, token, id) =
                (client.clone(), url.clone(), token.clone(), Self::order_id(&run_id, start + k));
            async move {
                let body = json!({ "id": id, "amount": AMOUNT, "currency": CURRENCY });
                for _ in 0..20 {
                    match client.post(&url).bearer_auth(&token).json(&body).send().await {
                        Ok(r) if r.status().is_success() => return Ok(()),
                        Ok(r) if r.status().is_client_error() => bail!("registering {id}: {}", r.status()),
                        _ => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
                bail!("registering {id}: gave up")
            }
        })
        .await
    }
}

/// The deliveries of a planned scenario (all but sustained), built before the clock starts.
pub(super) struct Workload {
    pub(super) unique: Vec<Delivery>,
    pub(super) bodies: Vec<Vec<u8>>,
    /// Indexes into `unique`, in delivery order (dup-storm: each one is a storm).
    pub(super) plan: Vec<usize>,
    /// Identical deliveries in flight at once per entry of the plan: 1, or [`STORM`] in dup-storm.
    pub(super) width: usize,
    pub(super) expect: Vec<Expect>,
}

impl Workload {
    pub(super) fn build(p: &Params, rng: &mut fastrand::Rng, run_id: &str, src: &SourceSettings) -> Workload {
        let mut unique: Vec<Delivery> = Vec::new();
        let mut expect = vec![Expect::Paid; p.orders];
        for (i, e) in expect.iter_mut().enumerate() {
            unique.push(Delivery { order: i, event_id: event_id(run_id, "pay", i as u64), action: OrderAction::Pay });
            if rng.f64() < p.refund {
                unique.push(Delivery {
                    order: i,
                    event_id: event_id(run_id, "ref", i as u64),
                    action: OrderAction::Refund,
                });
                *e = if p.scenario == Scenario::RefundFirst { Expect::RefundedNoReceipt } else { Expect::Refunded };
            }
        }
        let total = (unique.len() as f64 / (1.0 - p.dup)).round() as usize;
        let mut plan: Vec<usize> = (0..unique.len()).collect();
        while plan.len() < total {
            plan.push(rng.usize(..unique.len()));
        }
        if p.shuffle {
            rng.shuffle(&mut plan);
        }
        if p.scenario == Scenario::RefundFirst {
            refunds_first(&unique, &mut plan, p.orders);
        }
        let created = payhook_server::now_ms() / 1000;
        let bodies = unique
            .iter()
            .map(|d| src.format.encode(&outgoing(d, &Registrar::order_id(run_id, d.order), created)))
            .collect();
        let width = if p.scenario == Scenario::DupStorm { STORM } else { 1 };
        Workload { unique, bodies, plan, width, expect }
    }

    pub(super) fn deliveries(&self) -> usize {
        self.plan.len() * self.width
    }
}

fn outgoing<'a>(d: &'a Delivery, order_id: &'a str, created: i64) -> Outgoing<'a> {
    Outgoing { event_id: &d.event_id, action: d.action, order_id, amount_minor: AMOUNT, currency: CURRENCY, created }
}

/// Reorders `plan` so that each order's first delivery is a refund: where a payment (or a copy of it) comes first,
/// it trades places with the order's first refund. Every other delivery keeps its shuffled place.
fn refunds_first(unique: &[Delivery], plan: &mut [usize], orders: usize) {
    let (mut first_pay, mut first_ref) = (vec![usize::MAX; orders], vec![usize::MAX; orders]);
    for (k, &u) in plan.iter().enumerate() {
        let first = if unique[u].action == OrderAction::Refund { &mut first_ref } else { &mut first_pay };
        first[unique[u].order] = first[unique[u].order].min(k);
    }
    for (&pay, &refund) in first_pay.iter().zip(&first_ref) {
        if pay < refund && refund != usize::MAX {
            plan.swap(pay, refund);
        }
    }
}

/// steady, dup-storm and refund-first, closed loop: the workers take the plan's entries in order, each with its own
/// connection(s), until none is left. (steady with `--rate` is [`open_loop::deliver_at_rate`].)
pub(super) async fn planned(p: &Params, run: &Arc<Run>, connector: &Connector, w: Workload) -> Result<()> {
    let w = Arc::new(w);
    let gate = Arc::new(Gate::new(if p.scenario == Scenario::RefundFirst { p.orders } else { 0 }));
    let next = Arc::new(AtomicUsize::new(0));
    let workers = (p.concurrency / w.width).max(1);
    let mut set = tokio::task::JoinSet::new();
    for worker in 0..workers {
        let mut conns: Vec<Conn> = (0..w.width).map(|j| connector.conn(worker * w.width + j)).collect();
        let (run, w, gate, next) = (Arc::clone(run), Arc::clone(&w), Arc::clone(&gate), Arc::clone(&next));
        set.spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&u) = w.plan.get(k) else { return };
                let (d, body) = (&w.unique[u], &w.bodies[u]);
                let gated = !gate.open.is_empty();
                if gated && d.action == OrderAction::Pay {
                    gate.wait(d.order).await;
                }
                let run = &run;
                futures_util::future::join_all(conns.iter_mut().map(|c| deliver(run, c, body, d, None))).await;
                if gated && d.action == OrderAction::Refund {
                    gate.open(d.order);
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r?;
    }
    Ok(())
}

/// sustained: fresh orders for `duration_secs`, each worker delivering an order's payment, its refund for
/// `refund` of the orders, and a repeat of each for `dup` of the deliveries; orders are registered a block ahead.
/// Returns the deliveries made, what each used order should end as, and how many orders were registered.
pub(super) async fn sustained(
    p: &Params,
    run: &Arc<Run>,
    connector: &Connector,
    registrar: &Registrar,
) -> Result<(usize, Vec<Expect>, usize)> {
    let deadline = run.started + Duration::from_secs(p.duration_secs.unwrap_or(30));
    let next = Arc::new(AtomicUsize::new(0));
    let registered = Arc::new(AtomicUsize::new(p.orders));
    let stop = Arc::new(AtomicBool::new(false));
    let ahead = {
        let (next, registered, stop) = (Arc::clone(&next), Arc::clone(&registered), Arc::clone(&stop));
        let registrar = Registrar {
            client: registrar.client.clone(),
            url: registrar.url.clone(),
            token: registrar.token.clone(),
            run_id: registrar.run_id.clone(),
        };
        // Registering competes with the deliveries for the server: `--orders` should cover the run, and this
        // only keeps it going (the report says how many orders were registered during the run).
        let (block, helpers) = (p.orders, (p.concurrency / 4).max(4));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let have = registered.load(Ordering::Relaxed);
                if next.load(Ordering::Relaxed) + block / 2 >= have {
                    registrar.register(helpers, have..have + block).await?;
                    registered.store(have + block, Ordering::Release);
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Ok::<(), anyhow::Error>(())
        })
    };
    let (seed, refund, dup) = (p.seed, p.refund, p.dup / (1.0 - p.dup));
    let sent = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    for worker in 0..p.concurrency {
        let mut conn = connector.conn(worker);
        let (run, next, registered, sent) =
            (Arc::clone(run), Arc::clone(&next), Arc::clone(&registered), Arc::clone(&sent));
        let run_id = registrar.run_id.clone();
        set.spawn(async move {
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed);
                while i >= registered.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let order_id = Registrar::order_id(&run_id, i);
                let mut events = vec![(event_id(&run_id, "pay", i as u64), OrderAction::Pay)];
                let mut rng = order_rng(seed, i);
                if rng.f64() < refund {
                    events.push((event_id(&run_id, "ref", i as u64), OrderAction::Refund));
                }
                for (event_id, action) in events {
                    let d = Delivery { order: i, event_id, action };
                    let body = run.src.format.encode(&outgoing(&d, &order_id, payhook_server::now_ms() / 1000));
                    let copies = 1 + usize::from(rng.f64() < dup);
                    for _ in 0..copies {
                        deliver(&run, &mut conn, &body, &d, None).await;
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r?;
    }
    let _ = run.finished.set(Instant::now());
    stop.store(true, Ordering::Relaxed);
    ahead.await??;
    let used = next.load(Ordering::Relaxed);
    let expect =
        (0..used).map(|i| if order_rng(seed, i).f64() < refund { Expect::Refunded } else { Expect::Paid }).collect();
    Ok((sent.load(Ordering::Relaxed) as usize, expect, registered.load(Ordering::Relaxed)))
}

/// The event id of delivery `what` of order `i` in run `run_id`: random-looking as providers' are (`evt_` and 16
/// hex digits of a hash), so that a run's deliveries land all over the inbox's unique key, among the ids stored
/// before, rather than next to each other at one end of it; the same arguments give the same id.
pub(crate) fn event_id(run_id: &str, what: &str, i: u64) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    (run_id, what, i).hash(&mut hasher);
    format!("evt_{:016x}", hasher.finish())
}

/// The random choices of sustained's order `i`, the same when `--verify` asks again.
fn order_rng(seed: u64, i: usize) -> fastrand::Rng {
    fastrand::Rng::with_seed(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

#[cfg(test)]
mod tests {
    use super::event_id;
    use std::collections::BTreeSet;

    /// A run's event ids are its own, the same when asked again, and spread over the whole key space: a run's
    /// deliveries are not written next to each other in the inbox's unique key.
    #[test]
    fn event_ids_are_stable_distinct_and_spread() {
        assert_eq!(event_id("0badf00d", "pay", 7), event_id("0badf00d", "pay", 7));
        let ids: BTreeSet<String> = (0..4096).map(|i| event_id("0badf00d", "pay", i)).collect();
        assert_eq!(ids.len(), 4096);
        assert!(!ids.contains(&event_id("0badf00d", "ref", 7)) && !ids.contains(&event_id("cafebabe", "pay", 7)));
        // Sorted, consecutive orders' ids are far apart: every one of the 256 leading byte values is used.
        let leading: BTreeSet<&str> = ids.iter().map(|id| &id["evt_".len().."evt_".len() + 2]).collect();
        assert_eq!(leading.len(), 256, "{leading:?}");
        assert!(ids.iter().all(|id| id.len() == "evt_".len() + 16 && id.starts_with("evt_")));
    }
}
