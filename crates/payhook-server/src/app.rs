//! Building and running the HTTP application: shared state, routes, the worker, and graceful shutdown.

use crate::error::ApiError;
use crate::metrics::{self, SourceMetrics};
use crate::settings::{Settings, SourceSettings};
use crate::worker::RetryWorker;
use crate::{api, ingest};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use payhook_store::Store;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
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
    /// Its counters.
    pub metrics: SourceMetrics,
}

/// State shared by every request.
#[derive(Debug)]
pub struct AppState<S> {
    pub(crate) store: Arc<S>,
    pub(crate) settings: Settings,
    pub(crate) sources: HashMap<String, SourceRuntime>,
    pub(crate) worker_wake: Arc<Notify>,
}

impl<S> AppState<S> {
    /// A source's runtime, by name.
    pub fn source(&self, name: &str) -> Option<&SourceRuntime> {
        self.sources.get(name)
    }
}

/// The routes, on `state`.
pub fn router<S: Store>(state: Arc<AppState<S>>) -> Router {
    let v1 = Router::new()
        .route("/orders", post(api::register_order::<S>))
        .route("/orders/{id}", get(api::get_order::<S>))
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), api::require_token::<S>));
    Router::new()
        .route("/webhooks/{source}", post(ingest::handle::<S>))
        .nest("/v1", v1)
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics_text::<S>))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
}

async fn readyz<S: Store>(State(state): State<Arc<AppState<S>>>) -> impl IntoResponse {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "storage unavailable"),
    }
}

async fn metrics_text<S: Store>(State(state): State<Arc<AppState<S>>>) -> impl IntoResponse {
    let mut names: Vec<&String> = state.sources.keys().collect();
    names.sort();
    let body = metrics::render(names.into_iter().map(|n| (n.as_str(), &state.sources[n].metrics)));
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// A running payhook: its address, its worker and the means to stop it.
#[derive(Debug)]
pub struct Running<S> {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The shared state (sources and their counters).
    pub state: Arc<AppState<S>>,
    /// The worker, to drive by hand when the background one is disabled.
    pub worker: RetryWorker<S>,
    cancel: CancellationToken,
    server: JoinHandle<std::io::Result<()>>,
    worker_task: Option<JoinHandle<()>>,
}

/// Starts serving on `listener`, with the retry worker unless the settings disable it.
pub fn start<S: Store>(listener: TcpListener, settings: Settings, store: Arc<S>) -> std::io::Result<Running<S>> {
    let addr = listener.local_addr()?;
    let worker_wake = Arc::new(Notify::new());
    let worker = RetryWorker::new(Arc::clone(&store), settings.worker.clone(), Arc::clone(&worker_wake));
    let sources = settings
        .sources
        .iter()
        .map(|s| (s.name.as_str().to_owned(), SourceRuntime { settings: s.clone(), metrics: SourceMetrics::default() }))
        .collect();
    let state = Arc::new(AppState { store, settings, sources, worker_wake });
    let cancel = CancellationToken::new();
    let app = router(Arc::clone(&state));
    let shutdown = cancel.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await }).await
    });
    let worker_task = state.settings.worker.enabled.then(|| tokio::spawn(worker.clone().run(cancel.clone())));
    Ok(Running { addr, state, worker, cancel, server, worker_task })
}

impl<S: Store> Running<S> {
    /// Graceful shutdown: stop accepting, let in-flight requests commit and be answered, stop the worker.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.cancel.cancel();
        let served = self.server.await.map_err(std::io::Error::other)?;
        if let Some(worker) = self.worker_task {
            let _ = worker.await;
        }
        served
    }

    /// Serves until `signal` resolves, then shuts down gracefully.
    pub async fn serve_until(self, signal: impl Future<Output = ()>) -> std::io::Result<()> {
        signal.await;
        tracing::info!("shutting down: finishing in-flight requests");
        self.shutdown().await
    }
}
