//! Retention: settled events lose their payloads after `payloads_ms` and their dedup keys after `keys_ms`, and
//! settled orders (refunded, disputed) go with their outbox rows after `orders_ms`, in bounded steps, by a
//! background task (and `payhook prune`). Dead letters and deferred events are never pruned, nor an order whose
//! outbox rows are not all delivered.
//!
//! Steps share the writer with live deliveries (the server's own writer, or the file's lock when `payhook prune`
//! runs as a second process), so after each step pruning pauses for `pause_percent` of the time the step took: at
//! 100, pruning uses at most about half of the write capacity, however much there is to prune.

use crate::base::clock::Clock;
use crate::base::settings::RetentionSettings;
use payhook_store::{PruneRequest, Pruned, Store, StoreError};
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Prunes everything due at `now_ms`, step by step; `payloads_from_ms` is where the previous run's payload window
/// ended (0 the first time). Between two steps it pauses for `pause_percent` of the step's time, and at least
/// `min_pause` (which `payhook prune` sets, as it competes for the file's lock from another process). Returns the
/// totals.
pub async fn prune_all<S: Store>(
    store: &S,
    retention: &RetentionSettings,
    now_ms: i64,
    payloads_from_ms: i64,
    min_pause: Duration,
) -> Result<Pruned, StoreError> {
    let request = PruneRequest {
        keys_before_ms: now_ms - retention.keys_ms,
        payloads_from_ms,
        payloads_before_ms: now_ms - retention.payloads_ms,
        orders_before_ms: now_ms - retention.orders_ms,
        limit: retention.batch,
        now_ms,
    };
    let mut total = Pruned::default();
    loop {
        let started = std::time::Instant::now();
        let step = store.prune(request).await?;
        total.add(&step);
        // One line per step, for measuring what a step costs as pruning goes on (scripts/bench-prune.sh).
        tracing::debug!(
            rows = step.events_deleted + step.payloads_cleared + step.orders_deleted,
            micros = started.elapsed().as_micros() as u64,
            events_deleted = step.events_deleted,
            payloads_cleared = step.payloads_cleared,
            orders_deleted = step.orders_deleted,
            "pruning step"
        );
        if !step.more(request.limit) {
            return Ok(total);
        }
        // Live deliveries share the writer: let them in between steps.
        let pause = started.elapsed().mul_f64(f64::from(retention.pause_percent) / 100.0).max(min_pause);
        tokio::time::sleep(pause).await;
    }
}

/// Deletes the audit trail's entries older than `retention.audit_ms` at `now_ms`, `retention.batch` at a time with
/// the same pauses as [`prune_all`]. Returns how many.
pub async fn prune_audit<S: Store>(
    store: &S,
    retention: &RetentionSettings,
    now_ms: i64,
    min_pause: Duration,
) -> Result<u64, StoreError> {
    let mut total = 0;
    loop {
        let started = std::time::Instant::now();
        let deleted = store.prune_audit(now_ms - retention.audit_ms, retention.batch).await?;
        total += deleted;
        if deleted < u64::from(retention.batch) {
            return Ok(total);
        }
        let pause = started.elapsed().mul_f64(f64::from(retention.pause_percent) / 100.0).max(min_pause);
        tokio::time::sleep(pause).await;
    }
}

/// What this process's pruning task removed since it started, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct RetentionMetrics {
    events: AtomicU64,
    business_keys: AtomicU64,
    payloads: AtomicU64,
    orders: AtomicU64,
    outbox_rows: AtomicU64,
    pages: AtomicU64,
    audit_entries: AtomicU64,
    /// `retention.orders_days` in seconds, set once at start.
    orders_age_secs: AtomicU64,
}

impl RetentionMetrics {
    pub(crate) fn new(retention: &RetentionSettings) -> Self {
        let metrics = Self::default();
        metrics.orders_age_secs.store(u64::try_from(retention.orders_ms / 1000).unwrap_or(0), Ordering::Relaxed);
        metrics
    }

    fn add(&self, p: &Pruned) {
        self.events.fetch_add(p.events_deleted, Ordering::Relaxed);
        self.business_keys.fetch_add(p.business_keys_deleted, Ordering::Relaxed);
        self.payloads.fetch_add(p.payloads_cleared, Ordering::Relaxed);
        self.orders.fetch_add(p.orders_deleted, Ordering::Relaxed);
        self.outbox_rows.fetch_add(p.outbox_deleted, Ordering::Relaxed);
        self.pages.fetch_add(p.pages_released, Ordering::Relaxed);
    }

    /// Appends the retention families to a scrape.
    pub(crate) fn render_into(&self, out: &mut String) {
        let name = "payhook_pruned_total";
        let _ = writeln!(
            out,
            "# HELP {name} What this process's retention task removed since it started: rows by kind, and free pages given back."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        for (what, n) in [
            ("events", &self.events),
            ("business_keys", &self.business_keys),
            ("payloads", &self.payloads),
            ("orders", &self.orders),
            ("outbox_rows", &self.outbox_rows),
            ("pages", &self.pages),
            ("audit_entries", &self.audit_entries),
        ] {
            let _ = writeln!(out, "{name}{{what=\"{what}\"}} {}", n.load(Ordering::Relaxed));
        }
        let name = "payhook_retention_orders_age_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} How long a settled order is kept after its last change (retention.orders_days)."
        );
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {}", self.orders_age_secs.load(Ordering::Relaxed));
    }
}

/// The background task: prunes every `interval_ms` until cancelled. A failed run is logged and retried next time.
pub(crate) async fn run<S: Store>(
    store: Arc<S>,
    retention: RetentionSettings,
    metrics: Arc<RetentionMetrics>,
    clock: Clock,
    cancel: CancellationToken,
) {
    let mut payloads_from_ms = 0;
    loop {
        let now = clock.now_ms();
        match prune_all(&*store, &retention, now, payloads_from_ms, Duration::ZERO).await {
            Ok(total) => {
                payloads_from_ms = now - retention.payloads_ms;
                metrics.add(&total);
                if total != Pruned::default() {
                    tracing::info!(
                        events_deleted = total.events_deleted,
                        business_keys_deleted = total.business_keys_deleted,
                        payloads_cleared = total.payloads_cleared,
                        orders_deleted = total.orders_deleted,
                        outbox_deleted = total.outbox_deleted,
                        pages_released = total.pages_released,
                        partitions_detached = total.partitions_detached,
                        partitions_dropped = total.partitions_dropped,
                        partition_lock_timeouts = total.partition_lock_timeouts,
                        "pruned by the retention policy"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "pruning failed; trying again at the next interval"),
        }
        match prune_audit(&*store, &retention, now, Duration::ZERO).await {
            Ok(0) => {}
            Ok(deleted) => {
                metrics.audit_entries.fetch_add(deleted, Ordering::Relaxed);
                tracing::info!(audit_deleted = deleted, "audit trail entries past retention.audit_days deleted");
            }
            Err(e) => tracing::warn!(error = %e, "pruning the audit trail failed; trying again at the next interval"),
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(retention.interval_ms)) => {}
        }
    }
}
