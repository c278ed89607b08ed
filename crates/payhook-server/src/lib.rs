//! payhook-server: the HTTP runtime.
//!
//! - `app`: state, routes, start and graceful shutdown.
//! - `ingest`: `POST /webhooks/{source}`, the hot path.
//! - `listener`: the public listener: connection caps (global and per client), header and idle timeouts, the body
//!   and request deadlines and the body buffer bound on every route, TLS, shutdown grace.
//! - `api`: the `/v1` orders API behind the bearer token.
//! - `body`: the request body under the listener's bounds (its deadline, the process's body buffer budget).
//! - `auth`: the API token for `/v1` and the dashboard's login: the client's address, the comparison, the
//!   throttle on failures.
//! - [`admin`]: operator actions (list, show, replay, bulk replay, outbox retry, stats), shared with the CLI;
//!   `admin_api` serves them under `/v1`.
//! - [`worker`]: the retry worker for deferred events.
//! - [`dispatcher`]: delivers outbox rows to sinks (and alerts), one loop per sink.
//! - `metrics`: the instruments behind `/metrics`; `openapi`: the document served at `/openapi.json`.
//! - `error`: [`ApiError`], the one place where failures become status codes.
//! - `json_body`: `/v1`'s JSON bodies: one object of known fields, or 422 before anything is done.
//! - `json_int`: integers in request bodies as JSON (and the OpenAPI document) defines them: `5` and `5.0` alike.
//! - [`reload`]: the configuration in force as a snapshot a request takes once, and reloading it.
//! - [`retention`]: the pruning task and `prune_all`, shared with `payhook prune`.
//! - `ui`: the operator dashboard under `/ui`, server-rendered behind the API token.
//! - [`settings`]: the resolved settings the binary hands over.
//! - `task`: background tasks whose panics are logged when they happen and fail the shutdown.
//! - [`secret_url`]: [`SecretUrl`], a sink's or the alerts' URL, shown everywhere only in its redacted form.
//!
//! Boundary: this is the only crate that knows axum; it talks to storage only through [`payhook_store::Store`].

pub mod admin;
mod admin_api;
mod api;
mod app;
mod auth;
mod body;
mod broker;
mod confirm;
pub mod dispatcher;
mod error;
mod ingest;
mod json_body;
mod json_int;
mod listener;
mod metrics;
mod openapi;
pub mod reload;
pub mod retention;
pub mod secret_url;
pub mod settings;
mod task;
mod ui;
pub mod worker;

pub use api::parse_order;
pub use app::{AppState, ROUTES, Running, SourceRuntime, now_ms, router, start};
pub use auth::{InvalidIpRange, IpRange};
pub use error::ApiError;
pub use listener::TlsError;
pub use metrics::SourceMetrics;
pub use reload::{Live, Loader, ReloadError, ReloadReport, Reloaded};
pub use secret_url::SecretUrl;
pub use settings::{
    AuthSettings, BuildInfo, ListenerSettings, RetentionSettings, Settings, SinkTransport, SourceSettings, TlsSettings,
    WorkerSettings,
};
