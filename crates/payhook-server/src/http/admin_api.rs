//! The admin part of `/v1`: events, dead letters, replay, outbox and stats. Behind the bearer token like every
//! `/v1` route; each handler parses its input and calls the matching function of [`crate::service::admin`], the same one
//! the CLI calls.

use crate::http::error::ApiError;
use crate::http::json_body::{JsonBody, NoFields};
use crate::runtime::access::Principal;
use crate::service::actions::{replay_many, replay_one, retry_one_outbox};
use crate::service::admin::{self, DeadLetterQuery, EventQuery, OutboxQuery, ReplayFilter};
use crate::service::audit::Actor;
use crate::state::AppState;
use axum::Extension;
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use payhook_store::Store;
use serde::Deserialize;
use std::sync::Arc;

/// The body of `POST /v1/dead-letters/replay`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkReplayRequest {
    /// Which dead letters.
    #[serde(default, deserialize_with = "crate::http::json_body::object")]
    filter: ReplayFilter,
    /// Only say what would be replayed.
    #[serde(default)]
    dry_run: bool,
    /// At most this many (lowered to `replay.max_per_call`).
    #[serde(default, deserialize_with = "crate::base::json_int::opt_u32")]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 4294967295_u64)]
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
    responses((status = 200, description = "Recorded deliveries, newest first. `next_cursor` continues the listing (pass it as `before`); `null` only at the end. `partial` is true when the page stopped at `storage.list_scan_rows` examined rows (a filter no index serves whole): fewer rows than `limit`, even none, is then not the end", body = crate::service::admin::EventPage),
        (status = 422, description = "Invalid filter", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn list_events<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    q: Result<Query<EventQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = admin::list_events(&*state.store, &query(q)?).await?;
    Ok(Json(page).into_response())
}

#[utoipa::path(get, path = "/v1/events/{source}/{event_id}", tag = "admin", security(("bearer" = [])),
    params(("source" = crate::base::schema::Source, Path, description = "Source name"),
        ("event_id" = crate::base::schema::Id, Path, description = "Event id")),
    responses((status = 200, description = "Envelope, headers (every value of a repeated header, in arrival order), the \
            body exactly as received (`body` when it is UTF-8, else `body_base64`), attempts, order and billing \
            changes, and outbox rows", body = crate::service::admin::EventDetail),
        (status = 422, description = "Not a valid source name or event id", body = crate::base::schema::ErrorBody),
        (status = 404, description = "No such event", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn show_event<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (source, event_id) = path(p)?;
    let detail = admin::event_detail(&*state.store, &source, &event_id).await?;
    Ok(Json(detail).into_response())
}

#[utoipa::path(post, path = "/v1/events/{source}/{event_id}/replay", tag = "admin", security(("bearer" = [])),
    params(("source" = crate::base::schema::Source, Path, description = "Source name"),
        ("event_id" = crate::base::schema::Id, Path, description = "Event id")),
    responses((status = 200, description = "The replay's outcome"),
        (status = 422, description = "Not a valid source name or event id, or a body other than none or `{}`; nothing is replayed", body = crate::base::schema::ErrorBody),
        (status = 404, description = "No such event", body = crate::base::schema::ErrorBody),
        (status = 409, description = "Not a dead letter (`not_dead_letter`), or its source is no longer configured (`source_not_configured`)", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn replay_event<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(caller): Extension<Principal>,
    p: Result<Path<(String, String)>, PathRejection>,
    _: JsonBody<NoFields>,
) -> Result<Response, ApiError> {
    let (source, event_id) = path(p)?;
    Ok(Json(replay_one(&state, &source, &event_id, &Actor::of(&caller)).await?).into_response())
}

#[utoipa::path(get, path = "/v1/dead-letters", tag = "admin", params(DeadLetterQuery), security(("bearer" = [])),
    responses((status = 200, description = "Dead letters, newest first. `next_cursor` continues the listing (pass it as `before`); `null` only at the end. `partial` is true when the page stopped at `storage.list_scan_rows` examined rows: fewer rows than `limit`, even none, is then not the end", body = crate::service::admin::EventPage),
        (status = 422, description = "Invalid filter", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn list_dead_letters<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    q: Result<Query<DeadLetterQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = admin::list_dead_letters(&*state.store, &query(q)?.into()).await?;
    Ok(Json(page).into_response())
}

#[utoipa::path(post, path = "/v1/dead-letters/replay", tag = "admin", request_body = BulkReplayRequest,
    security(("bearer" = [])),
    responses((status = 200, description = "What a dry run found, or what was replayed (capped, paced)"),
        (status = 409, description = "Another bulk replay is running (`replay_in_progress`), or the filter's source is not configured (`source_not_configured`)", body = crate::base::schema::ErrorBody),
        (status = 413, description = "The body is over `server.body_limit_bytes`", body = crate::base::schema::ErrorBody),
        (status = 422, description = "Invalid request, or a body that is not one JSON object of the documented fields \
            (none, an array, a string, null, an unknown field, a field of the wrong type); nothing is replayed", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn bulk_replay<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(caller): Extension<Principal>,
    JsonBody(req): JsonBody<BulkReplayRequest>,
) -> Result<Response, ApiError> {
    // An empty body is refused rather than read as "everything": replaying every dead letter takes `{}`, said on
    // purpose.
    let Some(req) = req else {
        return Err(ApiError::Invalid(
            "a JSON body is required: {\"dry_run\": true} counts the dead letters a replay would take, {} replays \
             every one (up to replay.max_per_call)"
                .to_owned(),
        ));
    };
    if req.dry_run {
        let preview = admin::preview_replay(&*state.store, &state.live().settings, &req.filter, req.max).await?;
        return Ok(Json(preview).into_response());
    }
    Ok(Json(replay_many(&state, &req.filter, req.max, &Actor::of(&caller)).await?).into_response())
}

#[utoipa::path(get, path = "/v1/outbox", tag = "admin", params(OutboxQuery), security(("bearer" = [])),
    responses((status = 200, description = "Outbox rows, newest first. `next_cursor` continues the listing (pass it as `before`); `null` only at the end. `partial` is true when the page stopped at `storage.list_scan_rows` examined rows (a kind, or a status with a sink): fewer rows than `limit`, even none, is then not the end", body = crate::service::admin::OutboxPage),
        (status = 422, description = "Invalid filter", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
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
        (status = 404, description = "No such outbox row", body = crate::base::schema::ErrorBody),
        (status = 422, description = "Not an outbox row id (a 64-bit integer), or a body other than none or `{}`; nothing is re-queued", body = crate::base::schema::ErrorBody),
        (status = 409, description = "The row is not dead", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn retry_outbox<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(caller): Extension<Principal>,
    p: Result<Path<i64>, PathRejection>,
    _: JsonBody<NoFields>,
) -> Result<Response, ApiError> {
    let id = path(p)?;
    Ok(Json(retry_one_outbox(&state, id, &Actor::of(&caller)).await?).into_response())
}

#[utoipa::path(get, path = "/v1/stats", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "Events, orders and outbox rows by status, oldest pending ages"), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn stats<S: Store>(State(state): State<Arc<AppState<S>>>) -> Result<Response, ApiError> {
    Ok(Json(admin::stats(&*state.store, state.clock.now_ms()).await?).into_response())
}

#[utoipa::path(get, path = "/v1/audit", tag = "admin", params(crate::service::admin::AuditQuery), security(("bearer" = [])),
    responses((status = 200, description = "The operator audit trail, newest first: who (a token's name, a proxy's identity, `cli:USER`), from where, when, what, on what, with which outcome. `next_cursor` continues the listing (pass it as `before`); `null` only at the end", body = crate::service::admin::AuditPage),
        (status = 422, description = "Invalid filter", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn list_audit<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    q: Result<Query<crate::service::admin::AuditQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    Ok(Json(admin::list_audit(&*state.store, &query(q)?).await?).into_response())
}

#[utoipa::path(post, path = "/v1/reload", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "The configuration file was read again, checked and applied: what changed, \
            by name (sources and sinks added, removed, changed; never a secret). Requests already in progress finish \
            under the configuration they started with", body = crate::service::reload::ReloadReport),
        (status = 422, description = "Refused (`config_refused`): the file does not pass `payhook config check` (the \
            message is its own), or it changes a setting that needs a restart (named in the message); or a body \
            other than none or `{}` (`invalid_request`). The configuration in force is unchanged", body = crate::base::schema::ErrorBody),
        (status = 409, description = "This server has no configuration file to reload (`reload_unavailable`)", body = crate::base::schema::ErrorBody),
        (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn reload<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(caller): Extension<Principal>,
    _: JsonBody<NoFields>,
) -> Result<Response, ApiError> {
    Ok(Json(state.reload("api", &Actor::of(&caller)).await?).into_response())
}
