//! `--verify`: every order read back and compared with what its events imply.

use super::deliver::Expect;
use super::workload::Registrar;
use anyhow::Result;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What `--verify` checks: each order's expected state, but for the orders with a delivery given up on.
pub(super) struct Checks<'a> {
    pub(super) run_id: &'a str,
    pub(super) expect: &'a [Expect],
    pub(super) skipped: &'a std::collections::BTreeSet<usize>,
}

impl Checks<'_> {
    /// The orders to read back, with the state each should be in.
    pub(super) fn orders(&self) -> Vec<(String, Expect)> {
        (self.expect.iter().enumerate())
            .filter(|(i, _)| !self.skipped.contains(i))
            .map(|(i, e)| (Registrar::order_id(self.run_id, i), *e))
            .collect()
    }
}

/// Reads every order to check back and lists those not in the state their events imply.
pub(super) async fn verify(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    checks: &Checks<'_>,
    concurrency: usize,
) -> Result<Vec<String>> {
    let bad = Arc::new(Mutex::new(Vec::new()));
    let orders: Arc<[(String, Expect)]> = checks.orders().into();
    let (client, token, b, base) = (client.clone(), token.to_owned(), Arc::clone(&bad), base.to_owned());
    pool(concurrency, orders.len(), move |i| {
        let (client, token, bad) = (client.clone(), token.clone(), Arc::clone(&b));
        let (id, e) = orders[i].clone();
        let url = format!("{base}/v1/orders/{id}");
        async move {
            let v: Value = client.get(&url).bearer_auth(&token).send().await?.json().await?;
            let status = v["status"].as_str().unwrap_or("?");
            let receipts =
                v["outbox"].as_array().map_or(0, |rows| rows.iter().filter(|r| r["kind"] == "order.paid").count());
            let (ok, expected) = match e {
                Expect::Paid => (status == "paid" && receipts == 1, "paid with one receipt"),
                Expect::Refunded => (status == "refunded" && receipts <= 1, "refunded with at most one receipt"),
                Expect::RefundedNoReceipt => (status == "refunded" && receipts == 0, "refunded with no receipt"),
            };
            if !ok && let Ok(mut b) = bad.lock() {
                b.push(format!("{id}: {status} with {receipts} receipts, expected {expected}"));
            }
            Ok(())
        }
    })
    .await?;
    let bad = bad.lock().map(|b| b.clone()).unwrap_or_default();
    Ok(bad)
}

/// Runs `job(0..n)` with at most `concurrency` in flight; the first error stops the run.
pub(super) async fn pool<F, Fut>(concurrency: usize, n: usize, job: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let job = Arc::new(job);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.min(n.max(1)) {
        let (next, job) = (Arc::clone(&next), Arc::clone(&job));
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<(), anyhow::Error>(());
                }
                job(i).await?;
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r??;
    }
    Ok(())
}
