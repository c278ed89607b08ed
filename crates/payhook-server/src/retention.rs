//! Retention: settled events lose their payloads after `payloads_ms` and their dedup keys after `keys_ms`, in
//! bounded steps, by a background task (and `payhook prune`). Dead letters and deferred events are never pruned.

use crate::app::now_ms;
use crate::settings::RetentionSettings;
use payhook_store::{PruneRequest, Pruned, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Prunes everything due at `now_ms`, step by step; `payloads_from_ms` is where the previous run's payload window
/// ended (0 the first time). Returns the totals.
pub async fn prune_all<S: Store>(
    store: &S,
    retention: &RetentionSettings,
    now_ms: i64,
    payloads_from_ms: i64,
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
        let step = store.prune(request).await?;
        total.events_deleted += step.events_deleted;
        total.business_keys_deleted += step.business_keys_deleted;
        total.payloads_cleared += step.payloads_cleared;
        if !step.more(request.limit) {
            return Ok(total);
        }
        // Live deliveries share the writer: let them in between steps.
        tokio::task::yield_now().await;
    }
}

/// The background task: prunes every `interval_ms` until cancelled. A failed run is logged and retried next time.
pub(crate) async fn run<S: Store>(store: Arc<S>, retention: RetentionSettings, cancel: CancellationToken) {
    let mut payloads_from_ms = 0;
    loop {
        let now = now_ms();
        match prune_all(&*store, &retention, now, payloads_from_ms).await {
            Ok(total) => {
                payloads_from_ms = now - retention.payloads_ms;
                if total != Pruned::default() {
                    tracing::info!(
                        events_deleted = total.events_deleted,
                        business_keys_deleted = total.business_keys_deleted,
                        payloads_cleared = total.payloads_cleared,
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
