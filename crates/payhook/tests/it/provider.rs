//! A retrying payment provider for the tests that kill payhook under load (`crash`, `powercut`): a shuffled
//! workload of payments, refunds and repeats, clients that deliver each until it is acknowledged (following the
//! server's URL across restarts), and the checks of what was answered and what the database holds.

use crate::helpers::{AMOUNT, CURRENCY, SOURCE, signer};
use payhook_core::event::OrderAction;
use payhook_core::format::{Format, Outgoing};
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// An environment variable as a number.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[derive(Debug)]
pub struct Delivery {
    pub event_id: String,
    pub order: usize,
    pub action: OrderAction,
}

/// Orders `{prefix}-{i}`, a payment for each, a refund for one in ten, and 20 % repeated deliveries, shuffled.
#[derive(Debug)]
pub struct Workload {
    pub prefix: String,
    pub unique: Vec<Delivery>,
    /// Indexes into `unique`, in sending order (repeats included).
    pub plan: Vec<usize>,
    pub refunded: Vec<bool>,
}

impl Workload {
    pub fn new(rng: &mut fastrand::Rng, prefix: &str, orders: usize) -> Self {
        let mut unique: Vec<Delivery> = Vec::new();
        let mut refunded = vec![false; orders];
        for (i, was_refunded) in refunded.iter_mut().enumerate() {
            unique.push(Delivery { event_id: format!("evt-{prefix}-pay-{i}"), order: i, action: OrderAction::Pay });
            if rng.u8(..10) == 0 {
                *was_refunded = true;
                let event_id = format!("evt-{prefix}-ref-{i}");
                unique.push(Delivery { event_id, order: i, action: OrderAction::Refund });
            }
        }
        let mut plan: Vec<usize> = (0..unique.len()).collect();
        for _ in 0..unique.len() / 4 {
            plan.push(rng.usize(..unique.len()));
        }
        rng.shuffle(&mut plan);
        Self { prefix: prefix.to_owned(), unique, plan, refunded }
    }

    pub fn order_id(&self, i: usize) -> String {
        format!("{}-{i}", self.prefix)
    }

    pub fn orders(&self) -> usize {
        self.refunded.len()
    }
}

/// Sends one delivery until payhook acknowledges it, as a provider does: retry on 5xx and on connection errors
/// (payhook is being killed), never on 4xx (which would be a bug here). Client `client_no` sends to its own one of
/// `urls` (several instances behind a load balancer). Returns the acknowledged outcome.
pub async fn deliver_until_acked(
    client: &reqwest::Client,
    urls: &RwLock<Vec<String>>,
    client_no: usize,
    order_id: &str,
    d: &Delivery,
    deadline: Instant,
) -> String {
    let body = Format::Generic.encode(&Outgoing {
        event_id: &d.event_id,
        action: d.action,
        order_id,
        amount_minor: AMOUNT,
        currency: CURRENCY,
        created: 1_700_000_000,
    });
    let headers = signer().sign(&body, 0, &d.event_id);
    loop {
        assert!(Instant::now() < deadline, "{} was never acknowledged", d.event_id);
        let target = {
            let urls = urls.read().expect("url lock");
            urls[client_no % urls.len()].clone()
        };
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

/// Event id → every outcome it was acknowledged with.
pub type AckedOutcomes = HashMap<String, Vec<String>>;

/// The provider's clients at work: each takes the next delivery of the plan and sends it until acknowledged.
#[derive(Debug)]
pub struct Load {
    tasks: tokio::task::JoinSet<()>,
    urls: Arc<RwLock<Vec<String>>>,
    next: Arc<AtomicUsize>,
    total: usize,
    acked: Arc<Mutex<AckedOutcomes>>,
    /// Acknowledgements so far (repeats included).
    answered: Arc<AtomicUsize>,
}

impl Load {
    /// `clients` clients, each pausing `pace` after every acknowledged delivery, all done by `deadline`.
    pub fn start(workload: &Arc<Workload>, url: String, clients: usize, pace: Duration, deadline: Instant) -> Self {
        Self::start_on(workload, vec![url], clients, pace, deadline)
    }

    /// The same, the clients spread over several instances' `urls`.
    pub fn start_on(
        workload: &Arc<Workload>,
        urls: Vec<String>,
        clients: usize,
        pace: Duration,
        deadline: Instant,
    ) -> Self {
        let urls = Arc::new(RwLock::new(urls));
        let acked: Arc<Mutex<AckedOutcomes>> = Arc::default();
        let next = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for client_no in 0..clients {
            let (workload, urls, acked, next, answered) =
                (Arc::clone(workload), Arc::clone(&urls), Arc::clone(&acked), Arc::clone(&next), Arc::clone(&answered));
            tasks.spawn(async move {
                let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client");
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&u) = workload.plan.get(k) else { return };
                    let d = &workload.unique[u];
                    let order_id = workload.order_id(d.order);
                    let outcome = deliver_until_acked(&client, &urls, client_no, &order_id, d, deadline).await;
                    acked.lock().expect("acked lock").entry(d.event_id.clone()).or_default().push(outcome);
                    answered.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(pace).await;
                }
            });
        }
        Self { tasks, urls, next, total: workload.plan.len(), acked, answered }
    }

    /// Points every client at a restarted server.
    pub fn set_url(&self, url: String) {
        *self.urls.write().expect("url lock") = vec![url];
    }

    /// Deliveries acknowledged so far, repeats included.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::Relaxed)
    }

    /// The events acknowledged so far.
    pub fn acked_ids(&self) -> std::collections::HashSet<String> {
        self.acked.lock().expect("acked lock").keys().cloned().collect()
    }

    /// Whether every delivery of the plan has been taken by a client.
    pub fn all_taken(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.total
    }

    /// Waits for every client to finish; returns what was acknowledged.
    pub async fn finish(mut self) -> AckedOutcomes {
        while let Some(joined) = self.tasks.join_next().await {
            joined.expect("client task");
        }
        self.acked.lock().expect("acked lock").clone()
    }
}

/// What the provider saw that breaks the promise: a delivery never acknowledged, an event processed twice, an
/// outcome other than processed or duplicate.
pub fn answer_violations(workload: &Workload, acked: &AckedOutcomes) -> Vec<String> {
    let mut found = Vec::new();
    let answered: usize = acked.values().map(Vec::len).sum();
    if answered != workload.plan.len() {
        found.push(format!("{answered} of {} deliveries acknowledged", workload.plan.len()));
    }
    for (event_id, outcomes) in acked {
        let applied = outcomes.iter().filter(|o| *o == "processed").count();
        if applied > 1 {
            found.push(format!("{event_id} was answered processed {applied} times: {outcomes:?}"));
        }
        if !outcomes.iter().all(|o| o == "processed" || o == "duplicate") {
            found.push(format!("{event_id}: unexpected outcomes {outcomes:?}"));
        }
    }
    found.sort();
    found
}

/// What the database holds that breaks the promise: each event exactly once, each order in the state its events
/// imply, one receipt per payment, one outbox row per transition.
pub fn database_violations(db: &rusqlite::Connection, workload: &Workload, acked: &AckedOutcomes) -> Vec<String> {
    let mut found = Vec::new();
    let one = |sql: &str, arg: &str| -> i64 {
        db.query_row(sql, [arg], |r| r.get(0)).unwrap_or_else(|e| panic!("{sql} ({arg}): {e}"))
    };
    let inbox: i64 = db.query_row("SELECT COUNT(*) FROM inbox", [], |r| r.get(0)).expect("count inbox");
    if inbox as usize != workload.unique.len() {
        found.push(format!("{inbox} inbox rows for {} events", workload.unique.len()));
    }
    for event_id in acked.keys() {
        let n: i64 = db
            .query_row("SELECT COUNT(*) FROM inbox WHERE source = ?1 AND event_id = ?2", [SOURCE, event_id], |r| {
                r.get(0)
            })
            .expect("count event");
        if n != 1 {
            found.push(format!("{event_id} is recorded {n} times"));
        }
    }
    for (i, was_refunded) in workload.refunded.iter().enumerate() {
        let id = workload.order_id(i);
        let status: String =
            db.query_row("SELECT status FROM orders WHERE id = ?1", [&id], |r| r.get(0)).expect("order status");
        let expected = if *was_refunded { "refunded" } else { "paid" };
        if status != expected {
            found.push(format!("order {id} is {status}, not {expected}"));
        }
        let receipts = one("SELECT COUNT(*) FROM outbox WHERE order_id = ?1 AND kind = 'order.paid'", &id);
        if receipts > 1 || (!*was_refunded && receipts != 1) {
            found.push(format!("order {id} has {receipts} receipts"));
        }
        let transitions = one("SELECT json_array_length(history) FROM orders WHERE id = ?1", &id);
        let outbox = one("SELECT COUNT(*) FROM outbox WHERE order_id = ?1", &id);
        if transitions != outbox {
            found.push(format!("order {id}: {transitions} transitions but {outbox} outbox rows"));
        }
    }
    found
}
