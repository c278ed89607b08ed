//! The top layer: the router over every route, and starting and stopping the server (the listeners, the retry
//! worker, the dispatcher, retention; graceful shutdown).

use crate::base::clock::Clock;
use crate::base::metrics;
use crate::base::settings::Settings;
use crate::base::task::{Panicked, Task};
use crate::http::error::ApiError;
use crate::http::listener::{Listener, TlsError, TlsReloader};
use crate::http::openapi::openapi_json;
use crate::http::operations::{healthz, metrics_text, readyz};
use crate::http::{admin_api, api, ingest, ui};
use crate::runtime::auth::AuthGate;
use crate::runtime::body::BodyBudget;
use crate::runtime::connections::ConnectionMetrics;
use crate::runtime::dispatcher::Dispatcher;
use crate::runtime::live::Live;
use crate::runtime::retention::RetentionMetrics;
use crate::runtime::session::Sessions;
use crate::runtime::worker::RetryWorker;
use crate::state::AppState;
use axum::Router;
use axum::routing::{get, post};
use payhook_store::Store;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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
        .route("/audit", get(admin_api::list_audit::<S>))
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), api::require_scope::<S>));
    let token = || axum::middleware::from_fn_with_state(Arc::clone(&state), api::require_scope::<S>);
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
    if crate::base::trace::on() {
        public = public.route_layer(RecordRoute::layer());
    }
    // After the route layer: the hot path names its span itself (`ingest::handle`), without a layer's boxing.
    public
        .route(ingest::ROUTE, post(ingest::handle::<S>))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(body_limit)
        .with_state(state)
}

/// With traces exported: names the request's span after its route (`GET /v1/orders/{id}`) and sets `http.route`,
/// as the semantic conventions for an HTTP server span ask; on every route but the webhook's, which names its span
/// itself. Not layered at all otherwise; a plain
/// service around each route (no boxed future, no clone of the route per request, as a `from_fn` middleware has),
/// since every request passes it, traced or not.
#[derive(Clone)]
struct RecordRoute<S>(S);

impl RecordRoute<()> {
    fn layer() -> tower::layer::LayerFn<fn(axum::routing::Route) -> RecordRoute<axum::routing::Route>> {
        tower::layer::layer_fn(RecordRoute)
    }
}

impl<S> tower::Service<axum::extract::Request> for RecordRoute<S>
where
    S: tower::Service<axum::extract::Request>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: axum::extract::Request) -> Self::Future {
        if let Some(cx) = crate::base::trace::request_cx()
            && let Some(route) = request.extensions().get::<axum::extract::MatchedPath>()
        {
            crate::base::trace::name_request(&cx, request.method().as_str(), route.as_str());
        }
        self.0.call(request)
    }
}

/// The routes of the separate metrics listener (`server.metrics_listen`): `/metrics` without a token.
fn metrics_router<S: Store>(state: Arc<AppState<S>>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text::<S>))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .with_state(state)
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
    start_with_clock(listener, settings, store, Clock::system())
}

/// [`start`], reading `clock` instead of the system's: a test holds a [`Clock::manual`] and moves it.
pub fn start_with_clock<S: Store>(
    listener: TcpListener,
    settings: Settings,
    store: Arc<S>,
    clock: Clock,
) -> std::io::Result<Running<S>> {
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
    let worker = RetryWorker::new(Arc::clone(&store), settings.worker.clone(), Arc::clone(&worker_wake))
        .with_clock(clock.clone());
    let dispatcher_wake = Arc::new(Notify::new());
    let dispatcher =
        Dispatcher::new(Arc::clone(&store), &settings, Arc::clone(&dispatcher_wake)).with_clock(clock.clone());
    let auth = AuthGate::new(&settings.auth);
    let retention_metrics = Arc::new(RetentionMetrics::new(&settings.retention));
    let settings_body_buffer_bytes = settings.listener.body_buffer_bytes;
    let started_ms = clock.now_ms();
    let state = Arc::new(AppState {
        store,
        clock,
        live: payhook_store::Current::new(Live::first(settings.clone())),
        settings,
        loader: OnceLock::new(),
        reloading: tokio::sync::Mutex::new(()),
        reload_metrics: metrics::ReloadMetrics::new(started_ms),
        dispatcher: dispatcher.clone(),
        worker_wake,
        dispatcher_wake,
        bulk_replay: tokio::sync::Mutex::new(()),
        throughput: metrics::Throughput::default(),
        ui_sessions: Sessions::default(),
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
        let settings = crate::base::settings::ListenerSettings { tls: None, ..state.settings.listener.clone() };
        let budget = Arc::clone(&state.body_budget);
        crate::http::listener::spawn_plain(tcp, settings, budget, metrics_router(Arc::clone(&state)), cancel.clone())
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
            crate::runtime::retention::run(
                Arc::clone(&state.store),
                state.settings.retention.clone(),
                Arc::clone(&state.retention_metrics),
                state.clock.clone(),
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
