//! Building and running the HTTP application: shared state, routes, the worker, and graceful shutdown.

use crate::auth::AuthGate;
use crate::body::BodyBudget;
use crate::dispatcher::Dispatcher;
use crate::error::ApiError;
use crate::listener::{ConnectionMetrics, Listener, TlsError, TlsReloader};
use crate::metrics::{self, DispatchMetrics, SourceMetrics};
use crate::reload::{Live, LoaderSlot};
use crate::settings::{Settings, SourceSettings};
use crate::task::{Panicked, Task};
use crate::worker::RetryWorker;
use crate::{admin_api, api, ingest, ui};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use payhook_store::Store;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A source with its counters.
#[derive(Debug)]
pub struct SourceRuntime {
    /// Its settings.
    pub settings: SourceSettings,
    /// Its counters, shared by every definition of the source across reloads.
    pub metrics: Arc<SourceMetrics>,
    /// Verification failures in the current alert window: (window start, count); kept across reloads too.
    pub(crate) failing: Arc<std::sync::Mutex<(i64, u32)>>,
    /// Its confirmations from the provider's API, with `confirm = "api"`.
    pub(crate) confirmer: Option<Arc<crate::confirm::Confirmer>>,
}

impl SourceRuntime {
    /// A source served for the first time, with fresh counters.
    pub(crate) fn new(settings: SourceSettings) -> Self {
        let confirmer = settings.confirm.clone().map(|c| Arc::new(crate::confirm::Confirmer::new(c)));
        Self { settings, metrics: Arc::default(), failing: Arc::new(std::sync::Mutex::new((0, 0))), confirmer }
    }

    /// The same source under a new definition (a reload), keeping its counters.
    pub(crate) fn redefined(&self, settings: SourceSettings) -> Self {
        let confirmer = settings.confirm.clone().map(|c| Arc::new(crate::confirm::Confirmer::new(c)));
        Self { settings, metrics: Arc::clone(&self.metrics), failing: Arc::clone(&self.failing), confirmer }
    }

    /// Counts a verification failure at `now_ms`; true exactly when the count within the window reaches
    /// `threshold` (the moment to raise an alert: once per window, the store collapses the rest).
    pub(crate) fn verification_failure_reaches(&self, now_ms: i64, window_ms: i64, threshold: u32) -> bool {
        let Ok(mut w) = self.failing.lock() else { return false };
        if now_ms - w.0 >= window_ms {
            *w = (now_ms, 0);
        }
        w.1 += 1;
        w.1 == threshold.max(1)
    }
}

/// State shared by every request.
#[derive(Debug)]
pub struct AppState<S> {
    pub(crate) store: Arc<S>,
    /// The settings as started. Read from here only what a reload cannot change (listener, token, auth, limits,
    /// worker, retention); sources, sinks and alerts are read from [`AppState::live`].
    pub(crate) settings: Settings,
    /// The reloadable configuration in force (see `reload`).
    pub(crate) live: payhook_store::Current<Live>,
    /// Reads the configuration file again, when the binary gave one.
    pub(crate) loader: OnceLock<LoaderSlot>,
    /// Held while a reload runs, so that reloads apply one at a time.
    pub(crate) reloading: tokio::sync::Mutex<()>,
    pub(crate) reload_metrics: metrics::ReloadMetrics,
    /// The dispatcher, whose sinks a reload replaces.
    pub(crate) dispatcher: Dispatcher<S>,
    pub(crate) worker_wake: Arc<Notify>,
    /// Wakes the dispatcher's sink loops (an outbox row was re-queued).
    pub(crate) dispatcher_wake: Arc<Notify>,
    /// Held while a bulk replay runs, so that this process runs one at a time.
    pub(crate) bulk_replay: tokio::sync::Mutex<()>,
    /// Deliveries per minute over the last hour, for the dashboard's chart.
    pub(crate) throughput: metrics::Throughput,
    /// The dashboard's logged-in sessions.
    pub(crate) ui_sessions: ui::Sessions,
    /// The API token's gate for `/v1` and the dashboard's login, with the throttle on failures.
    pub(crate) auth: AuthGate,
    /// The dispatcher's send latencies.
    pub(crate) dispatch_metrics: Arc<DispatchMetrics>,
    /// The background tasks, for `/readyz`: unset while disabled.
    pub(crate) worker_task: OnceLock<AbortHandle>,
    pub(crate) dispatcher_task: OnceLock<AbortHandle>,
    /// The public listener's connection counters.
    pub(crate) connections: Arc<ConnectionMetrics>,
    /// The process's budget of request body bytes (`server.body_buffer_bytes`), shared by the listeners.
    pub(crate) body_budget: Arc<BodyBudget>,
    /// What the retention task removed.
    pub(crate) retention_metrics: Arc<crate::retention::RetentionMetrics>,
}

impl<S: Store> AppState<S> {
    /// A source's runtime in the configuration in force, by name.
    pub fn source(&self, name: &str) -> Option<Arc<SourceRuntime>> {
        self.live().source(name).cloned()
    }
}

/// Every route [`router`] registers, as (method, path), `/v1` ones in full: the OpenAPI document must describe
/// each (a test checks it), and a route added to the router belongs here too.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/webhooks/{source}"),
    ("POST", "/v1/orders"),
    ("GET", "/v1/orders/{id}"),
    ("GET", "/v1/subscriptions/{id}"),
    ("GET", "/v1/customers/{id}/entitlements"),
    ("GET", "/v1/events"),
    ("GET", "/v1/events/{source}/{event_id}"),
    ("POST", "/v1/events/{source}/{event_id}/replay"),
    ("GET", "/v1/dead-letters"),
    ("POST", "/v1/dead-letters/replay"),
    ("GET", "/v1/outbox"),
    ("POST", "/v1/outbox/{id}/retry"),
    ("GET", "/v1/stats"),
    ("POST", "/v1/reload"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
];

/// The routes, on `state`.
pub fn router<S: Store>(state: Arc<AppState<S>>) -> Router {
    let v1 = Router::new()
        .route("/orders", post(api::register_order::<S>))
        .route("/orders/{id}", get(api::get_order::<S>))
        .route("/subscriptions/{id}", get(api::get_subscription::<S>))
        .route("/customers/{id}/entitlements", get(api::get_entitlements::<S>))
        .route("/events", get(admin_api::list_events::<S>))
        .route("/events/{source}/{event_id}", get(admin_api::show_event::<S>))
        .route("/events/{source}/{event_id}/replay", post(admin_api::replay_event::<S>))
        .route("/dead-letters", get(admin_api::list_dead_letters::<S>))
        .route("/dead-letters/replay", post(admin_api::bulk_replay::<S>))
        .route("/outbox", get(admin_api::list_outbox::<S>))
        .route("/outbox/{id}/retry", post(admin_api::retry_outbox::<S>))
        .route("/stats", get(admin_api::stats::<S>))
        .route("/reload", post(admin_api::reload::<S>))
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), api::require_token::<S>));
    let token = || axum::middleware::from_fn_with_state(Arc::clone(&state), api::require_token::<S>);
    // Operator surfaces stay off the public port unless asked for: /metrics moves to its own listener or takes the
    // API token; /openapi.json takes the token unless `server.public_openapi`.
    let mut operator = Router::new();
    if state.settings.metrics_listen.is_none() {
        operator = operator.route("/metrics", get(metrics_text::<S>));
    }
    if !state.settings.public_openapi {
        operator = operator.route("/openapi.json", get(openapi_json));
    }
    let mut public = Router::new()
        .route("/webhooks/{source}", post(ingest::handle::<S>))
        .nest("/v1", v1)
        .nest("/ui", ui::router(Arc::clone(&state)))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<S>));
    if operator.has_routes() {
        public = public.merge(operator.route_layer(token()));
    }
    if state.settings.public_openapi {
        public = public.route("/openapi.json", get(openapi_json));
    }
    // Every extractor that reads a body (the `/v1` JSON bodies, the dashboard's forms) takes at most the limit the
    // webhook route takes.
    let body_limit = axum::extract::DefaultBodyLimit::max(state.settings.body_limit_bytes);
    public
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(body_limit)
        .with_state(state)
}

/// The routes of the separate metrics listener (`server.metrics_listen`): `/metrics` without a token.
fn metrics_router<S: Store>(state: Arc<AppState<S>>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text::<S>))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .with_state(state)
}

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
    (status = 200, description = "Ready: `status` only, and each part with the API token", body = crate::openapi::Readiness),
    (status = 503, description = "The database does not answer, the writer or a background task stopped, or a \
        synchronous standby is required and a 2xx would not be acknowledged on one (which: with the API token)", body = crate::openapi::Readiness),
    (status = 401, description = "An `Authorization` header with a wrong token (without one, the answer is `status` only)", body = crate::openapi::ErrorBody),
    (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::openapi::ErrorBody)))]
pub(crate) async fn readyz<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    connect: Option<axum::Extension<axum::extract::ConnectInfo<SocketAddr>>>,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    // The token is looked at only when one is offered: an orchestrator's probe sends none and gets the status.
    let detailed = headers.contains_key(axum::http::header::AUTHORIZATION);
    if detailed {
        let peer = connect.map(|axum::Extension(axum::extract::ConnectInfo(peer))| peer);
        api::check_token(&state, &headers, peer)?;
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
    (status = 401, description = "Missing or wrong bearer token (no token on the separate `server.metrics_listen` listener)", body = crate::openapi::ErrorBody),
    (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::openapi::ErrorBody)))]
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
        now_ms: now_ms(),
    });
    let mut body = body;
    state.connections.render_into(&mut body);
    state.body_budget.render_into(&mut body);
    state.retention_metrics.render_into(&mut body);
    state.reload_metrics.render_into(&mut body);
    metrics::render_build_info(&mut body, &state.settings.build);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", security(("bearer" = [])), responses(
    (status = 200, description = "This document", content_type = "application/json"),
    (status = 401, description = "Missing or wrong bearer token (unless `server.public_openapi = true`)", body = crate::openapi::ErrorBody),
    (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::openapi::ErrorBody)))]
pub(crate) async fn openapi_json() -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], crate::openapi::json())
}

/// A running payhook: its address, its worker and the means to stop it.
#[derive(Debug)]
pub struct Running<S> {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where the separate metrics listener listens, when `server.metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
    /// The shared state (sources and their counters).
    pub state: Arc<AppState<S>>,
    /// The worker, to drive by hand when the background one is disabled.
    pub worker: RetryWorker<S>,
    /// The outbox dispatcher, to drive by hand when the background one is disabled.
    pub dispatcher: Dispatcher<S>,
    cancel: CancellationToken,
    server: Task<std::io::Result<()>>,
    metrics_server: Option<Task<std::io::Result<()>>>,
    tls: Option<Arc<TlsReloader>>,
    worker_task: Option<Task<()>>,
    dispatcher_task: Option<Task<()>>,
    prune_task: Option<Task<()>>,
}

/// Starts serving on `listener` (HTTPS when `settings.listener.tls` is set), with the retry worker unless the
/// settings disable it, and the metrics listener when `settings.metrics_listen` is set.
pub fn start<S: Store>(listener: TcpListener, settings: Settings, store: Arc<S>) -> std::io::Result<Running<S>> {
    let addr = listener.local_addr()?;
    let tls = match settings.listener.tls.clone() {
        Some(tls) => Some(Arc::new(
            TlsReloader::load(tls).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
        )),
        None => None,
    };
    let metrics_listener = match settings.metrics_listen {
        Some(at) => {
            let std_listener = std::net::TcpListener::bind(at)?;
            std_listener.set_nonblocking(true)?;
            Some(TcpListener::from_std(std_listener)?)
        }
        None => None,
    };
    let metrics_addr = metrics_listener.as_ref().map(TcpListener::local_addr).transpose()?;
    let worker_wake = Arc::new(Notify::new());
    let worker = RetryWorker::new(Arc::clone(&store), settings.worker.clone(), Arc::clone(&worker_wake));
    let dispatcher_wake = Arc::new(Notify::new());
    let dispatcher = Dispatcher::new(Arc::clone(&store), &settings, Arc::clone(&dispatcher_wake));
    let auth = AuthGate::new(&settings.auth);
    let retention_metrics = Arc::new(crate::retention::RetentionMetrics::new(&settings.retention));
    let settings_body_buffer_bytes = settings.listener.body_buffer_bytes;
    let state = Arc::new(AppState {
        store,
        live: payhook_store::Current::new(Live::first(settings.clone())),
        settings,
        loader: OnceLock::new(),
        reloading: tokio::sync::Mutex::new(()),
        reload_metrics: metrics::ReloadMetrics::new(now_ms()),
        dispatcher: dispatcher.clone(),
        worker_wake,
        dispatcher_wake,
        bulk_replay: tokio::sync::Mutex::new(()),
        throughput: metrics::Throughput::default(),
        ui_sessions: ui::Sessions::default(),
        auth,
        dispatch_metrics: Arc::clone(dispatcher.metrics()),
        worker_task: OnceLock::new(),
        dispatcher_task: OnceLock::new(),
        connections: Arc::new(ConnectionMetrics::default()),
        body_budget: Arc::new(BodyBudget::new(settings_body_buffer_bytes)),
        retention_metrics,
    });
    let cancel = CancellationToken::new();
    let app = router(Arc::clone(&state));
    let public = Listener {
        tcp: listener,
        settings: state.settings.listener.clone(),
        tls: tls.clone(),
        metrics: Arc::clone(&state.connections),
        body_budget: Arc::clone(&state.body_budget),
        trusted_proxies: state.settings.auth.trusted_proxies.clone(),
    };
    let server = Task::spawn("listener", public.run(app, cancel.clone()));
    let metrics_server = metrics_listener.map(|tcp| {
        let settings = crate::settings::ListenerSettings { tls: None, ..state.settings.listener.clone() };
        let budget = Arc::clone(&state.body_budget);
        crate::listener::spawn_plain(tcp, settings, budget, metrics_router(Arc::clone(&state)), cancel.clone())
    });
    let worker_task = state.settings.worker.enabled.then(|| Task::spawn("worker", worker.clone().run(cancel.clone())));
    let dispatcher_task =
        state.settings.dispatcher.enabled.then(|| Task::spawn("dispatcher", dispatcher.clone().run(cancel.clone())));
    if let Some(task) = &worker_task {
        let _ = state.worker_task.set(task.abort_handle());
    }
    if let Some(task) = &dispatcher_task {
        let _ = state.dispatcher_task.set(task.abort_handle());
    }
    let prune_task = state.settings.retention.enabled.then(|| {
        Task::spawn(
            "retention",
            crate::retention::run(
                Arc::clone(&state.store),
                state.settings.retention.clone(),
                Arc::clone(&state.retention_metrics),
                cancel.clone(),
            ),
        )
    });
    Ok(Running {
        addr,
        metrics_addr,
        state,
        worker,
        dispatcher,
        cancel,
        server,
        metrics_server,
        tls,
        worker_task,
        dispatcher_task,
        prune_task,
    })
}

impl<S: Store> Running<S> {
    /// Reads the HTTPS certificate and key again (on SIGHUP); new connections use them, open ones keep theirs. On
    /// failure the current ones stay in use. Without HTTPS there is nothing to reload.
    pub fn reload_tls(&self) -> Result<bool, TlsError> {
        match &self.tls {
            Some(tls) => tls.reload().map(|()| true),
            None => Ok(false),
        }
    }

    /// Graceful shutdown: stop accepting, close connections without a request in progress, let in-flight requests
    /// commit and be answered for up to `server.shutdown_grace_ms` (then close what is left), stop the worker.
    /// Every background task is waited for; if one of them panicked (it was logged when it happened) the result
    /// is an error naming it, so that the process does not exit as if it had stopped cleanly.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.cancel.cancel();
        let served = self.server.join().await;
        let metrics_served = match self.metrics_server {
            Some(task) => task.join().await,
            None => Ok(Ok(())),
        };
        let mut panicked: Vec<Panicked> =
            [served.as_ref().err(), metrics_served.as_ref().err()].into_iter().flatten().cloned().collect();
        for task in [self.worker_task, self.dispatcher_task, self.prune_task].into_iter().flatten() {
            if let Err(p) = task.join().await {
                panicked.push(p);
            }
        }
        if let Ok(Err(e)) = metrics_served {
            tracing::warn!(error = %e, "the metrics listener failed");
        }
        match (served, panicked.as_slice()) {
            (Ok(served), []) => served,
            (_, panicked) => {
                Err(std::io::Error::other(panicked.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))
            }
        }
    }

    /// Serves until `signal` resolves, then shuts down gracefully.
    pub async fn serve_until(self, signal: impl Future<Output = ()>) -> std::io::Result<()> {
        signal.await;
        tracing::info!("shutting down: finishing in-flight requests");
        self.shutdown().await
    }
}
