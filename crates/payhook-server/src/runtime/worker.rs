//! The retry worker: claims due deferred events under a lease and re-applies them through the store.
//!
//! It is the one path for retries. A worker that dies holding a lease loses nothing: the lease expires and any
//! worker (in this process or another) claims the rows again.

use crate::base::clock::Clock;
use crate::base::settings::WorkerSettings;
use crate::base::trace;
use payhook_store::{Claim, Retried, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// What one pass of the worker did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Events claimed and re-applied.
    pub retried: usize,
    /// Events whose lease was lost to another worker meanwhile.
    pub lease_lost: usize,
}

/// The worker. Cheap to clone.
#[derive(Debug)]
pub struct RetryWorker<S> {
    store: Arc<S>,
    settings: WorkerSettings,
    owner: String,
    wake: Arc<Notify>,
    clock: Clock,
}

impl<S> Clone for RetryWorker<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            settings: self.settings.clone(),
            owner: self.owner.clone(),
            wake: Arc::clone(&self.wake),
            clock: self.clock.clone(),
        }
    }
}

impl<S: Store> RetryWorker<S> {
    /// A worker with a random owner id for its leases.
    pub fn new(store: Arc<S>, settings: WorkerSettings, wake: Arc<Notify>) -> Self {
        let owner = format!("worker-{:016x}", fastrand::u64(..));
        Self { store, settings, owner, wake, clock: Clock::system() }
    }

    /// The same worker reading `clock` (a test's manual one) for its passes.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Claims the events due at `now_ms` (one claim batch) and re-applies each of them.
    pub async fn run_once(&self, now_ms: i64) -> Result<Pass, StoreError> {
        let claim = Claim {
            now_ms,
            lease_ms: self.settings.lease_ms,
            limit: self.settings.claim_batch,
            owner: self.owner.clone(),
        };
        let claimed = self.store.claim_due(claim).await?;
        let mut pass = Pass::default();
        // Retries go to the writer together, so they share its commits.
        let mut tasks = tokio::task::JoinSet::new();
        for c in claimed {
            let store = Arc::clone(&self.store);
            tasks.spawn(async move {
                let (source, event_id) = (c.source.clone(), c.event_id.clone());
                if !trace::sample_root() {
                    return (source, event_id, store.retry(c, now_ms).await);
                }
                // Each retry is a trace of its own, linked to the delivery's when this process recorded it.
                let span = tracing::debug_span!(parent: None, "payhook.retry", payhook.source = %source,
                    payhook.event_id = %event_id, payhook.attempt = c.attempts + 1,
                    payhook.outcome = tracing::field::Empty);
                trace::link_to_delivery(&span, &format!("event:{source}:{event_id}"));
                let retried = span.in_scope(|| store.retry(c, now_ms)).instrument(span.clone()).await;
                let outcome = match &retried {
                    Ok(Retried::Done(recorded)) => recorded.outcome.as_str(),
                    Ok(Retried::LeaseLost) => "lease_lost",
                    Err(_) => "failed",
                };
                span.record("payhook.outcome", outcome);
                (source, event_id, retried)
            });
        }
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((source, event_id, Ok(Retried::Done(recorded)))) => {
                    pass.retried += 1;
                    tracing::info!(
                        source = %source, event_id = %event_id, outcome = recorded.outcome.as_str(),
                        detail = ?recorded.detail, "deferred event retried"
                    );
                }
                Ok((_, _, Ok(Retried::LeaseLost))) => pass.lease_lost += 1,
                // The lease expires and the event is claimed again later: nothing is lost.
                Ok((source, event_id, Err(e))) => tracing::warn!(
                    source = %source, event_id = %event_id, outcome = "failed", error = %e,
                    "retrying a deferred event failed"
                ),
                Err(e) => tracing::error!(error = %e, "retry task panicked"),
            }
        }
        Ok(pass)
    }

    /// Passes at `now_ms` until nothing due is left (for tests and for draining).
    pub async fn run_until_idle(&self, now_ms: i64) -> Result<Pass, StoreError> {
        let mut total = Pass::default();
        loop {
            let pass = self.run_once(now_ms).await?;
            if pass.retried + pass.lease_lost == 0 {
                return Ok(total);
            }
            total.retried += pass.retried;
            total.lease_lost += pass.lease_lost;
        }
    }

    /// Runs until `cancel` fires, sleeping until the next due event, a wake-up (an order was registered) or
    /// the poll interval, whichever comes first.
    pub async fn run(self, cancel: CancellationToken) {
        let poll = Duration::from_millis(self.settings.poll_interval_ms);
        while !cancel.is_cancelled() {
            let now = self.clock.now_ms();
            let sleep = match self.run_once(now).await {
                Ok(pass) if pass.retried > 0 => Duration::ZERO,
                Ok(_) => match self.store.next_due_ms().await {
                    Ok(Some(due)) => Duration::from_millis(u64::try_from(due - now).unwrap_or(0).max(10)).min(poll),
                    _ => poll,
                },
                Err(e) => {
                    tracing::warn!(error = %e, "retry worker could not claim events");
                    poll
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
        tracing::debug!("retry worker stopped");
    }
}
