//! payhook-server: the HTTP runtime, in layers. Each layer imports only from the layers below it (a test,
//! `tests/it/layers.rs`, fails on an import that points up or a cycle between modules):
//!
//! 1. [`base`]: settings, the [`Clock`], the metrics' instruments, the API's schema types, small vocabulary.
//! 2. `runtime`: the components the state holds and the background loops — the token gate, the body budget,
//!    the configuration snapshot ([`Live`]), the provider confirmations, the retry [`worker`], the outbox
//!    [`dispatcher`] and its broker clients, [`retention`].
//! 3. `state`: [`AppState`], shared by every request, task and action.
//! 4. `service`: operator actions shared by the API, the dashboard and the command line ([`admin`], replay and
//!    outbox retry on the running state, [`reload`]).
//! 5. `http`: the listener and its bounds, `POST /webhooks/{source}` (the hot path), the `/v1` API, the
//!    operations routes, the dashboard, the OpenAPI document, and [`ApiError`], where failures become status codes.
//! 6. `app`: the router and startup ([`start`], [`Running`]).
//!
//! Boundary: this is the only crate that knows axum; it talks to storage only through [`payhook_store::Store`].

mod app;
pub mod base;
mod http;
mod runtime;
mod service;
mod state;

pub use app::{Running, router, start, start_with_clock};
pub use base::clock::{Clock, system_now_ms as now_ms};
pub use base::ip_range::{InvalidIpRange, IpRange};
pub use base::metrics::SourceMetrics;
pub use base::scope::{Need, Scope};
pub use base::secret_url::SecretUrl;
pub use base::settings::{
    AuthSettings, BuildInfo, ListenerSettings, RetentionSettings, Settings, SinkRate, SinkTransport, SourceSettings,
    TlsSettings, WorkerSettings,
};
pub use base::{secret_url, settings, trace};
pub use http::api::parse_order;
pub use http::error::ApiError;
pub use http::listener::TlsError;
pub use http::routes::{ROUTES, Route};
pub use runtime::access::{API_TOKEN_NAME, MIN_TOKEN_CHARS, Principal, Via};
pub use runtime::live::{Live, Loader, Reloaded, SourceRuntime};
pub use runtime::{dispatcher, retention, worker};
pub use service::audit::Actor;
pub use service::reload::{ReloadError, ReloadReport};
pub use service::{admin, audit, reload};
pub use state::AppState;
