//! Retention: settled events lose their payloads after `payloads_ms` and their dedup keys after `keys_ms`, in
//! bounded steps, by a background task (and `payhook prune`). Dead letters and deferred events are never pruned.
//!
//! Steps share the writer with live deliveries (the server's own writer, or the file's lock when `payhook prune`
//! runs as a second process), so after each step pruning pauses for `pause_percent` of the time the step took: at
//! 100, pruning uses at most about half of the write capacity, however much there is to prune.

use crate::app::now_ms;
use crate::settings::RetentionSettings;
use payhook_store::{PruneRequest, Pruned, Store, StoreError};
use std::sync::Arc;
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
        limit: retention.batch,
        now_ms,
    };
    let mut total = Pruned::default();
    loop {
        let started = std::time::Instant::now();
        let step = store.prune(request).await?;
        total.add(&step);
        if !step.more(request.limit) {
            return Ok(total);
        }
        // Live deliveries share the writer: let them in between steps.
        let pause = started.elapsed().mul_f64(f64::from(retention.pause_percent) / 100.0).max(min_pause);
        tokio::time::sleep(pause).await;
    }
}

/// The background task: prunes every `interval_ms` until cancelled. A failed run is logged and retried next time.
pub(crate) async fn run<S: Store>(store: Arc<S>, retention: RetentionSettings, cancel: CancellationToken) {
    let mut payloads_from_ms = 0;
    loop {
        let now = now_ms();
        match prune_all(&*store, &retention, now, payloads_from_ms, Duration::ZERO).await {
            Ok(total) => {
                payloads_from_ms = now - retention.payloads_ms;
                if total != Pruned::default() {
                    tracing::info!(
                        events_deleted = total.events_deleted,
                        business_keys_deleted = total.business_keys_deleted,
                        payloads_cleared = total.payloads_cleared,
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
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(retention.interval_ms)) => {}
        }
    }
}
