//! The state every request, background task and operator action shares: the store, the settings as started, the
//! configuration in force, the clock, the background components' handles and the process's counters.
//!
//! It sits below the services and the HTTP layer and above the components it holds (`runtime`), so that any of
//! them can be given the whole state without importing what serves it.

use crate::base::clock::Clock;
use crate::base::metrics::{self, DispatchMetrics};
use crate::base::settings::Settings;
use crate::runtime::auth::AuthGate;
use crate::runtime::body::BodyBudget;
use crate::runtime::connections::ConnectionMetrics;
use crate::runtime::dispatcher::Dispatcher;
use crate::runtime::live::{Live, Loader, LoaderSlot, SourceRuntime};
use crate::runtime::retention::RetentionMetrics;
use crate::runtime::session::Sessions;
use payhook_store::Store;
use std::sync::{Arc, OnceLock};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// State shared by every request.
#[derive(Debug)]
pub struct AppState<S> {
    pub(crate) store: Arc<S>,
    /// Where every timestamp the server writes or compares is read from.
    pub(crate) clock: Clock,
    /// The settings as started. Read from here only what a reload cannot change (listener, token, auth, limits,
    /// worker, retention); sources, sinks and alerts are read from [`AppState::live`].
    pub(crate) settings: Settings,
    /// The reloadable configuration in force (`runtime::live`; `service::reload` replaces it).
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
    pub(crate) ui_sessions: Sessions,
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
    pub(crate) retention_metrics: Arc<RetentionMetrics>,
}

impl<S: Store> AppState<S> {
    /// A source's runtime in the configuration in force, by name.
    pub fn source(&self, name: &str) -> Option<Arc<SourceRuntime>> {
        self.live().source(name).cloned()
    }

    /// The clock the server reads: the system's, or the manual one a test started it with.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The configuration in force: take it once per request and keep it to the answer.
    pub fn live(&self) -> Arc<Live> {
        self.live.current()
    }

    /// Sets how [`AppState::reload`] reads the configuration again; the binary sets it once, after start.
    pub fn set_loader(&self, loader: Box<Loader>) {
        let _ = self.loader.set(LoaderSlot(loader));
    }
}
