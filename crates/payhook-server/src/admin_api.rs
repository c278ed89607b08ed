//! The admin part of `/v1`: events, dead letters, replay, outbox and stats. Behind the bearer token like every
//! `/v1` route; each handler parses its input and calls the matching function of [`crate::admin`], the same one
//! the CLI calls.

use crate::admin::{self, EventQuery, OutboxQuery, ReplayFilter};
use crate::app::{AppState, now_ms};
use crate::error::ApiError;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use payhook_store::{Outcome, Store};
use serde::Deserialize;
use std::sync::Arc;

/// The body of `POST /v1/dead-letters/replay`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkReplayRequest {
    /// Which dead letters.
    #[serde(default)]
    filter: ReplayFilter,
    /// Only say what would be replayed.
    #[serde(default)]
    dry_run: bool,
    /// At most this many (lowered to `replay.max_per_call`).
    max: Option<u32>,
}

/// A query string that does not fit is a 422 with a JSON body, like every other refusal of the API.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t).map_err(|e| ApiError::Invalid(e.body_text()))
}

fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(t)| t).map_err(|e| ApiError::Invalid(e.body_text()))
}

#[utoipa::path(get, path = "/v1/events", tag = "admin", params(EventQuery), security(("bearer" = [])),
    responses((status = 200, description = "Recorded deliveries, newest first, with `next_cursor`"),
        (status = 422, description = "Invalid filter", body = crate::openapi::ErrorBody), (status = 401, description = "Missing or wrong bearer token", body = crate::openapi::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::openapi::ErrorBody)))]
pub(crate) async fn list_events<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    q: Result<Query<EventQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = admin::list_events(&*state.store, &query(q)?).await?;
    Ok(Json(page).into_response())
}

#[utoipa::path(get, path = "/v1/events/{source}/{event_id}", tag = "admin", security(("bearer" = [])),
    params(("source" = String, Path, description = "Source name"), ("event_id" = String, Path, description = "Event id")),
    responses((status = 200, description = "Envelope, headers, raw body, attempts, changes and outbox rows"),
        (status = 404, description = "No such event", body = crate::openapi::ErrorBody), (status = 401, description = "Missing or wrong bearer token", body = crate::openapi::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::openapi::ErrorBody)))]
pub(crate) async fn show_event<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (source, event_id) = path(p)?;
    let detail = admin::event_detail(&*state.store, &source, &event_id).await?;
    Ok(Json(detail).into_response())
}

#[utoipa::path(post, path = "/v1/events/{source}/{event_id}/replay", tag = "admin", security(("bearer" = [])),
    params(("source" = String, Path, description = "Source name"), ("event_id" = String, Path, description = "Event id")),
    responses((status = 200, description = "The replay's outcome"),
        (status = 404, description = "No such event", body = crate::openapi::ErrorBody),
        (status = 409, description = "Not a dead letter", body = crate::openapi::ErrorBody), (status = 401, description = "Missing or wrong bearer token", body = crate::openapi::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::openapi::ErrorBody)))]
pub(crate) async fn replay_event<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (source, event_id) = path(p)?;
    let report = admin::replay_event(&*state.store, &state.settings, &source, &event_id, now_ms()).await?;
    tracing::info!(source, event_id, outcome = report.status.as_str(), "dead letter replayed");
    // A replay may have written outbox rows (a receipt) or deferred the event again.
    state.dispatcher_wake.notify_waiters();
    if report.status == Outcome::Deferred {
        state.worker_wake.notify_one();
    }
    Ok(Json(report).into_response())
}

#[utoipa::path(get, path = "/v1/dead-letters", tag = "admin", params(EventQuery), security(("bearer" = [])),
    responses((status = 200, description = "Dead letters, newest first, with `next_cursor`"),
        (status = 422, description = "Invalid filter", body = crate::openapi::ErrorBody), (status = 401, description = "Missing or wrong bearer token", body = crate::openapi::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::openapi::ErrorBody)))]
pub(crate) async fn list_dead_letters<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    q: Result<Query<EventQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = admin::list_dead_letters(&*state.store, &query(q)?).await?;
    Ok(Json(page).into_response())
}

#[utoipa::path(post, path = "/v1/dead-letters/replay", tag = "admin", request_body = BulkReplayRequest,
    security(("bearer" = [])),
    responses((status = 200, description = "What a dry run found, or what was replayed (capped, paced)"),
        (status = 422, description = "Invalid request", body = crate::openapi::ErrorBody), (status = 401, description = "Missing or wrong bearer token", body = crate::openapi::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::openapi::ErrorBody)))]
pub(crate) async fn bulk_replay<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: BulkReplayRequest = if body.iter().all(u8::is_ascii_whitespace) {
        BulkReplayRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::Invalid(format!(
                "expected {{\"filter\": {{\"source\", \"type\", \"reason\", \"since\", \"until\"}}, \"dry_run\", \
                 \"max\"}}: {e}"
            ))
        })?
    };
    if req.dry_run {
        let preview = admin::preview_replay(&*state.store, &state.settings, &req.filter, req.max).await?;
        return Ok(Json(preview).into_response());
    }
    // One bulk replay at a time per process: two at once would double the rate meant to protect live traffic.
    let Ok(_running) = state.bulk_replay.try_lock() else {
        return Err(ApiError::WrongState {
            code: "replay_in_progress",
            message: "another bulk replay is running in this process; try again when it has finished".into(),
            status: None,
        });
    };
    // Receipts written by the replays go out while the rest are still being replayed.
    let progress = |_, _| state.dispatcher_wake.notify_waiters();
    let report = admin::bulk_replay(&*state.store, &state.settings, &req.filter, req.max, now_ms, progress).await?;
    tracing::info!(matched = report.matched, outcomes = ?report.outcomes, "dead letters replayed in bulk");
    if report.outcomes.get(Outcome::Deferred.as_str()).is_some_and(|n| *n > 0) {
        state.worker_wake.notify_one();
    }
    Ok(Json(report).into_response())
}

#[utoipa::path(get, path = "/v1/outbox", tag = "admin", params(OutboxQuery), security(("bearer" = [])),
    responses((status = 200, description = "Outbox rows, newest first, with `next_cursor`"),
        (status = 422, description = "Invalid filter", body = crate::openapi::ErrorBody), (status = 401, description = "Missing or wrong bearer token", body = crate::openapi::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::openapi::ErrorBody)))]
pub(crate) async fn list_outbox<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    q: Result<Query<OutboxQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = admin::list_outbox(&*state.store, &query(q)?).await?;
    Ok(Json(page).into_response())
}

#[utoipa::path(post, path = "/v1/outbox/{id}/retry", tag = "admin", security(("bearer" = [])),
    params(("id" = i64, Path, description = "Outbox row id")),
    responses((status = 200, description = "The row is pending again with a fresh budget"),
        (status = 409, description = "The row is not dead", body = crate::openapi::ErrorBody), (status = 401, description = "Missing or wrong bearer token", body = crate::openapi::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::openapi::ErrorBody)))]
pub(crate) async fn retry_outbox<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    p: Result<Path<i64>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = path(p)?;
    let row = admin::retry_outbox(&*state.store, id, now_ms()).await?;
    state.dispatcher_wake.notify_waiters();
    tracing::info!(id, sink = row.sink, kind = row.kind, "dead outbox row re-queued");
    Ok(Json(row).into_response())
}

#[utoipa::path(get, path = "/v1/stats", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "Events, orders and outbox rows by status, oldest pending ages"), (status = 401, description = "Missing or wrong bearer token", body = crate::openapi::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::openapi::ErrorBody)))]
pub(crate) async fn stats<S: Store>(State(state): State<Arc<AppState<S>>>) -> Result<Response, ApiError> {
    Ok(Json(admin::stats(&*state.store, now_ms()).await?).into_response())
}
