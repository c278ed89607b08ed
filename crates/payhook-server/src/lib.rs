//! payhook-server: the HTTP runtime.
//!
//! - `app`: state, routes, start and graceful shutdown.
//! - `ingest`: `POST /webhooks/{source}`, the hot path.
//! - `api`: the `/v1` API behind the bearer token.
//! - [`worker`]: the retry worker for deferred events.
//! - `error`: [`ApiError`], the one place where failures become status codes.
//! - [`settings`]: the resolved settings the binary hands over.
//!
//! Boundary: this is the only crate that knows axum; it talks to storage only through [`payhook_store::Store`].

mod api;
mod app;
mod error;
mod ingest;
mod metrics;
pub mod settings;
pub mod worker;

pub use api::parse_order;
pub use app::{AppState, Running, SourceRuntime, now_ms, router, start};
pub use error::ApiError;
pub use metrics::SourceMetrics;
pub use settings::{Settings, SourceSettings, WorkerSettings};
