//! Operator actions on the running server, shared by the API (`http::admin_api`) and the dashboard (`http::ui`):
//! each does the store's work through [`crate::service::admin`] and wakes whichever background task has work from
//! it.

use crate::service::admin::{self, AdminError, ReplayFilter};
use crate::service::audit::Actor;
use crate::state::AppState;
use payhook_store::{OutboxView, Outcome, Store};

/// Replays one dead letter and wakes whoever has work from it: the API's and the dashboard's action.
pub(crate) async fn replay_one<S: Store>(
    state: &AppState<S>,
    source: &str,
    event_id: &str,
    by: &Actor,
) -> Result<admin::ReplayReport, AdminError> {
    let now_ms = state.clock.now_ms();
    let report = admin::replay_event(&*state.store, &state.live().settings, source, event_id, now_ms, by).await?;
    tracing::info!(source, event_id, outcome = report.status.as_str(), "dead letter replayed");
    // A replay may have written outbox rows (a receipt) or deferred the event again.
    state.dispatcher_wake.notify_waiters();
    if report.status == Outcome::Deferred {
        state.worker_wake.notify_one();
    }
    Ok(report)
}

/// Replays the dead letters `filter` selects, one bulk replay at a time per process: the API's and the
/// dashboard's action.
pub(crate) async fn replay_many<S: Store>(
    state: &AppState<S>,
    filter: &ReplayFilter,
    max: Option<u32>,
    by: &Actor,
) -> Result<admin::BulkReport, AdminError> {
    // Two at once would double the rate meant to protect live traffic.
    let Ok(_running) = state.bulk_replay.try_lock() else {
        return Err(AdminError::ReplayInProgress);
    };
    // Receipts written by the replays go out while the rest are still being replayed.
    let progress = |_, _| state.dispatcher_wake.notify_waiters();
    let now_ms = || state.clock.now_ms();
    let report = admin::bulk_replay(&*state.store, &state.live().settings, filter, max, now_ms, progress, by).await?;
    tracing::info!(matched = report.matched, outcomes = ?report.outcomes, "dead letters replayed in bulk");
    if report.outcomes.get(Outcome::Deferred.as_str()).is_some_and(|n| *n > 0) {
        state.worker_wake.notify_one();
    }
    Ok(report)
}

/// Re-queues a dead outbox row and wakes the dispatcher: the API's and the dashboard's action.
pub(crate) async fn retry_one_outbox<S: Store>(
    state: &AppState<S>,
    id: i64,
    by: &Actor,
) -> Result<OutboxView, AdminError> {
    let row = admin::retry_outbox(&*state.store, id, state.clock.now_ms(), by).await?;
    state.dispatcher_wake.notify_waiters();
    tracing::info!(id, sink = row.sink, kind = row.kind.as_str(), "dead outbox row re-queued");
    Ok(row)
}
