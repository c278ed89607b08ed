//! The operations routes: `/healthz`, `/readyz` and `/metrics` (`/openapi.json` is served by `openapi`).

use crate::base::metrics;
use crate::http::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use payhook_store::Store;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use tokio::task::AbortHandle;

/// Liveness: the process is up and serving HTTP.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "`ok`")))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the database answers, the store's writer takes work, and the enabled background tasks run; 503
/// unless all are well.
///
/// Anyone gets only that: `{"status": "ready"}` or `{"status": "not_ready"}`. With the API token (`Authorization:
/// Bearer`, through the same gate and throttle as `/v1`) the answer also has each part: `"ok"` or what is wrong
/// (`"stopped"`, `"disabled"`, the database's error). `replication` (PostgreSQL; null on SQLite) says whether a 2xx
/// is acknowledged on a synchronous standby; it makes the answer 503 only when `storage.require_sync_standby` is set
/// and it is not (or cannot be read). The database's and the replication's error text is for the operator only.
#[utoipa::path(get, path = "/readyz", tag = "operations", security((), ("bearer" = [])), responses(
    (status = 200, description = "Ready: `status` only, and each part with the API token", body = crate::base::schema::Readiness),
    (status = 503, description = "The database does not answer, the writer or a background task stopped, or a \
        synchronous standby is required and a 2xx would not be acknowledged on one (which: with the API token)", body = crate::base::schema::Readiness),
    (status = 401, description = "An `Authorization` header with a wrong token (without one, the answer is `status` only)", body = crate::base::schema::ErrorBody),
    (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn readyz<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    connect: Option<axum::Extension<axum::extract::ConnectInfo<SocketAddr>>>,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    // The token is looked at only when one is offered: an orchestrator's probe sends none and gets the status.
    let detailed = headers.contains_key(axum::http::header::AUTHORIZATION);
    if detailed {
        let peer = connect.map(|axum::Extension(axum::extract::ConnectInfo(peer))| peer);
        crate::http::api::authenticate(&state, &headers, peer)?;
    }
    let database = match state.store.ping().await {
        Ok(()) => Ok("ok".to_owned()),
        Err(e) => {
            tracing::warn!(error = %e, cause = ?std::error::Error::source(&e), "readiness: the database does not answer");
            Err(e.to_string())
        }
    };
    let writer = if state.store.writer_metrics().running { Ok("ok".to_owned()) } else { Err("stopped".to_owned()) };
    let task = |handle: &OnceLock<AbortHandle>| match handle.get() {
        None => Ok("disabled".to_owned()),
        Some(h) if h.is_finished() => Err("stopped".to_owned()),
        Some(_) => Ok("ok".to_owned()),
    };
    let (worker, dispatcher) = (task(&state.worker_task), task(&state.dispatcher_task));
    let (replication_ready, replication) = replication_part(&*state.store).await;
    let ready = [&database, &writer, &worker, &dispatcher].iter().all(|p| p.is_ok()) && replication_ready;
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let summary = if ready { "ready" } else { "not_ready" };
    if !detailed {
        return Ok((status, axum::Json(serde_json::json!({ "status": summary }))).into_response());
    }
    let text = |p: Result<String, String>| p.unwrap_or_else(|e| e);
    let body = serde_json::json!({
        "status": summary,
        "database": text(database),
        "writer": text(writer),
        "worker": text(worker),
        "dispatcher": text(dispatcher),
        "replication": replication,
    });
    Ok((status, axum::Json(body)).into_response())
}

/// `/readyz`'s `replication` part: whether it lets the answer be ready, and its JSON (null for a store without
/// replication). Not being able to read it is not-ready only when a synchronous standby is required; otherwise it
/// is logged and shown, and readiness is left to the other parts.
async fn replication_part<S: Store>(store: &S) -> (bool, serde_json::Value) {
    let required = store.requires_sync_standby();
    match store.replication().await {
        Ok(None) => (true, serde_json::Value::Null),
        Ok(Some(r)) => {
            let ready = r.ready();
            if !ready {
                tracing::warn!(problem = ?r.problem(), "readiness: a synchronous standby is required");
            }
            let body = serde_json::json!({
                "synchronous_commit": r.synchronous_commit,
                "synchronous_standby_names": r.synchronous_standby_names,
                "sync_standbys": r.sync_standbys,
                "streaming_standbys": r.streaming_standbys,
                "in_recovery": r.in_recovery,
                "acknowledged_on_standby": r.acknowledged_on_standby(),
                "required": r.required,
                // Only what makes this part not ready is a problem; with no standby required, the fields above
                // say it all.
                "problem": if ready { None } else { r.problem() },
            });
            (ready, body)
        }
        Err(e) => {
            tracing::warn!(error = %e, cause = ?std::error::Error::source(&e), required,
                "readiness: the database's replication could not be read");
            let problem = format!("the replication state could not be read: {e}");
            let body = serde_json::json!({
                "required": required,
                "error": e.to_string(),
                "problem": required.then_some(problem),
            });
            (!required, body)
        }
    }
}

#[utoipa::path(get, path = "/metrics", tag = "operations", security(("bearer" = [])), responses(
    (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain; version=0.0.4", body = String),
    (status = 401, description = "Missing or wrong bearer token (no token on the separate `server.metrics_listen` listener)", body = crate::base::schema::ErrorBody),
    (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn metrics_text<S: Store>(State(state): State<Arc<AppState<S>>>) -> impl IntoResponse {
    let stats = match state.store.stats().await {
        Ok(stats) => Some(stats),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: the database's row counts could not be read");
            None
        }
    };
    // Read at every scrape (one round trip on the probe's connection), so the gauge is never older than the scrape.
    let replication = match state.store.replication().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: the database's replication could not be read");
            None
        }
    };
    let live = state.live();
    let mut held = Vec::with_capacity(live.settings.sinks.len());
    for sink in &live.settings.sinks {
        let read = state.store.held_outbox(&sink.name, sink.order, metrics::HELD_SCAN_ROWS).await;
        let read = read.map_err(|e| tracing::warn!(sink = sink.name, error = %e, "metrics: held rows not read"));
        held.push((sink.name.clone(), read.ok()));
    }
    let mut names: Vec<&String> = live.sources.keys().collect();
    names.sort();
    let body = metrics::render(metrics::Scrape {
        sources: names.into_iter().map(|n| (n.as_str(), &*live.sources[n].metrics)),
        dispatch: &state.dispatch_metrics,
        writer: state.store.writer_metrics(),
        reads: state.store.read_metrics(),
        auth: state.auth.snapshot(),
        stats,
        replication,
        now_ms: state.clock.now_ms(),
    });
    let mut body = body;
    state.connections.render_into(&mut body);
    state.body_budget.render_into(&mut body);
    state.retention_metrics.render_into(&mut body);
    state.reload_metrics.render_into(&mut body);
    metrics::render_held(&mut body, &held, state.clock.now_ms());
    metrics::render_trace(&mut body);
    metrics::render_build_info(&mut body, &state.settings.build);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
