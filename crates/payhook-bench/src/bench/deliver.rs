//! What the deliveries share (the source that signs, the counters, the latency samples), the connections they use,
//! and one delivery with a provider's retries.

use super::args::ClientKind;
use super::{OUTCOMES, RETRY_AFTER_CAP, http};
use payhook_core::event::OrderAction;
use payhook_server::SourceSettings;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The part of payhook's answer the benchmark counts, read without building a JSON tree.
#[derive(serde::Deserialize)]
struct Answer<'a> {
    status: &'a str,
}

#[derive(Debug)]
pub(super) struct Delivery {
    pub(super) order: usize,
    pub(super) event_id: String,
    pub(super) action: OrderAction,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) acked: AtomicUsize,
    pub(super) rejected: AtomicUsize,
    pub(super) gave_up: AtomicUsize,
    pub(super) retried_5xx: AtomicUsize,
    pub(super) retried_io: AtomicUsize,
    pub(super) outcomes: [AtomicUsize; 5],
}

/// How one delivery ended, retries included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivered {
    Acked,
    Rejected,
    GaveUp,
}

/// What the deliveries share: the source that signs, the counters and the latency samples.
pub(super) struct Run {
    pub(super) src: SourceSettings,
    pub(super) timeout: Duration,
    pub(super) attempts: u32,
    pub(super) started: Instant,
    pub(super) counters: Counters,
    /// (milliseconds since the start when the answer was read, latency in microseconds), per acked delivery.
    pub(super) samples: Mutex<Vec<(u32, u32)>>,
    /// When the last delivery was answered, if that is not when the phase returns (sustained stops its order
    /// registration afterwards, which is not part of the delivery rate).
    pub(super) finished: std::sync::OnceLock<Instant>,
    /// The orders (their indexes) with a delivery given up on: `--verify` cannot know what state they are in.
    pub(super) gave_up_orders: Mutex<std::collections::BTreeSet<usize>>,
}

/// One connection (lean) or a handle on the shared pool (reqwest), aimed at one of the URLs.
pub(super) enum Conn {
    Lean { conn: http::Conn, target: Arc<http::Target> },
    Reqwest { client: reqwest::Client, url: reqwest::Url },
}

impl Conn {
    pub(super) async fn post(&mut self, headers: &[(String, String)], body: &[u8]) -> std::io::Result<http::Response> {
        match self {
            Conn::Lean { conn, target } => conn.post(target, headers, body).await,
            Conn::Reqwest { client, url } => {
                let mut req = client.post(url.clone()).header("content-type", "application/json").body(body.to_vec());
                for (name, value) in headers {
                    req = req.header(name, value);
                }
                let resp = req.send().await.map_err(std::io::Error::other)?;
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let body = resp.bytes().await.map_err(std::io::Error::other)?.to_vec();
                Ok(http::Response { status, retry_after, body })
            }
        }
    }
}

/// Makes the connections of the workers, spreading them over the URLs.
pub(super) struct Connector {
    pub(super) client: reqwest::Client,
    pub(super) lean: Vec<Arc<http::Target>>,
    pub(super) urls: Vec<reqwest::Url>,
    pub(super) kind: ClientKind,
}

impl Connector {
    pub(super) fn conn(&self, j: usize) -> Conn {
        match self.kind {
            ClientKind::Lean => {
                Conn::Lean { conn: http::Conn::new(), target: Arc::clone(&self.lean[j % self.lean.len()]) }
            }
            ClientKind::Reqwest => {
                Conn::Reqwest { client: self.client.clone(), url: self.urls[j % self.urls.len()].clone() }
            }
        }
    }
}

/// Delivers one event like a provider: signs each attempt, retries 5xx (after `Retry-After`, capped), timeouts and
/// IO errors with a growing pause, never a 4xx.
///
/// The latency recorded is that of the answered attempt, or with `scheduled` (the open loop) the time since the
/// delivery was due: waiting for a free connection and earlier attempts then count, as they would for a provider
/// whose events keep arriving, rather than hiding the server's backlog in the client (coordinated omission).
pub(super) async fn deliver(
    run: &Run,
    conn: &mut Conn,
    body: &[u8],
    d: &Delivery,
    scheduled: Option<Instant>,
) -> Delivered {
    let counters = &run.counters;
    let mut backoff = Duration::from_millis(20);
    for attempt in 1..=run.attempts {
        let headers = run.src.verifier.sign(body, payhook_server::now_ms() / 1000, &d.event_id);
        let t0 = Instant::now();
        let wait = match tokio::time::timeout(run.timeout, conn.post(&headers, body)).await {
            Ok(Ok(resp)) if (200..300).contains(&resp.status) => {
                let micros = scheduled.unwrap_or(t0).elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                let at_ms = run.started.elapsed().as_millis().min(u128::from(u32::MAX)) as u32;
                if let Ok(mut s) = run.samples.lock() {
                    s.push((at_ms, micros));
                }
                counters.acked.fetch_add(1, Ordering::Relaxed);
                let status = serde_json::from_slice::<Answer<'_>>(&resp.body).map(|a| a.status).unwrap_or("");
                if let Some(i) = OUTCOMES.iter().position(|o| *o == status) {
                    counters.outcomes[i].fetch_add(1, Ordering::Relaxed);
                }
                return Delivered::Acked;
            }
            Ok(Ok(resp)) if (400..500).contains(&resp.status) => {
                counters.rejected.fetch_add(1, Ordering::Relaxed);
                return Delivered::Rejected;
            }
            Ok(Ok(resp)) => {
                counters.retried_5xx.fetch_add(1, Ordering::Relaxed);
                resp.retry_after.map(|r| r.min(RETRY_AFTER_CAP))
            }
            Ok(Err(_)) | Err(_) => {
                counters.retried_io.fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        if attempt < run.attempts {
            tokio::time::sleep(wait.unwrap_or_default().max(backoff)).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
    counters.gave_up.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut orders) = run.gave_up_orders.lock() {
        orders.insert(d.order);
    }
    Delivered::GaveUp
}

/// refund-first: a payment is sent only once its order's refund has been answered.
pub(super) struct Gate {
    pub(super) open: Vec<AtomicBool>,
    pub(super) notify: Notify,
}

impl Gate {
    pub(super) fn new(n: usize) -> Gate {
        Gate { open: (0..n).map(|_| AtomicBool::new(false)).collect(), notify: Notify::new() }
    }

    pub(super) async fn wait(&self, i: usize) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.open[i].load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    pub(super) fn open(&self, i: usize) {
        self.open[i].store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

/// What `--verify` expects of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
    /// Paid, with exactly one receipt.
    Paid,
    /// Refunded, with at most one receipt (the payment may have been applied first).
    Refunded,
    /// Refunded with no receipt: the refund was applied before the payment arrived.
    RefundedNoReceipt,
}
