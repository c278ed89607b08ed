//! The configuration in force while serving, as a snapshot a request takes once (`service::reload` replaces it on
//! SIGHUP and `POST /v1/reload`).
//!
//!
//! Invariant: a request runs under one configuration (see `service::reload` for how the next one is applied).

use crate::base::metrics::SourceMetrics;
use crate::base::settings::{Settings, SourceSettings};
use crate::runtime::access::Credentials;
use crate::runtime::confirm::Confirmer;
use std::collections::HashMap;
use std::sync::Arc;

/// One generation of the reloadable configuration: what a request runs under from its start to its answer.
#[derive(Debug)]
pub struct Live {
    /// 0 as started, one more for each reload applied.
    pub generation: u64,
    /// The settings of this generation. Only its sources, sinks, alerts, tokens and identities may differ from
    /// the ones the process started with: everything else needs a restart, and a reload that changes it is
    /// refused.
    pub settings: Settings,
    /// The sources by name, with their counters (which a source keeps across reloads, changed or not).
    pub sources: HashMap<String, Arc<SourceRuntime>>,
    /// The tokens and identities of this generation, ready to compare.
    pub credentials: Credentials,
}

impl Live {
    /// The first generation, from the settings the process starts with.
    pub(crate) fn first(settings: Settings) -> Self {
        let sources = settings
            .sources
            .iter()
            .map(|s| (s.name.as_str().to_owned(), Arc::new(SourceRuntime::new(s.clone()))))
            .collect();
        Self { generation: 0, credentials: Credentials::of(&settings), settings, sources }
    }

    /// A source's runtime, by name.
    pub fn source(&self, name: &str) -> Option<&Arc<SourceRuntime>> {
        self.sources.get(name)
    }
}

/// A configuration file read again and checked in full, ready to apply.
#[derive(Debug)]
pub struct Reloaded {
    /// The new settings.
    pub settings: Settings,
    /// Sources present before and after whose definition (scheme, secrets, format, forwards, …) differs.
    pub changed_sources: Vec<String>,
    /// Sinks present before and after whose definition differs.
    pub changed_sinks: Vec<String>,
    /// Whether the `[alerts]` table differs.
    pub alerts_changed: bool,
}

/// Reads and checks the configuration file again, as the process was started with it: the new settings, or the
/// message saying why the file cannot be applied (the same words as `payhook config check`, or the settings that
/// would need a restart). Given by the binary, which alone knows the file.
pub type Loader = dyn Fn() -> Result<Reloaded, String> + Send + Sync;

/// The [`Loader`] the state holds.
pub(crate) struct LoaderSlot(pub(crate) Box<Loader>);

impl std::fmt::Debug for LoaderSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Loader")
    }
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
    pub(crate) confirmer: Option<Arc<Confirmer>>,
}

impl SourceRuntime {
    /// A source served for the first time, with fresh counters.
    pub(crate) fn new(settings: SourceSettings) -> Self {
        let confirmer = settings.confirm.clone().map(|c| Arc::new(Confirmer::new(c)));
        Self { settings, metrics: Arc::default(), failing: Arc::new(std::sync::Mutex::new((0, 0))), confirmer }
    }

    /// The same source under a new definition (a reload), keeping its counters.
    pub(crate) fn redefined(&self, settings: SourceSettings) -> Self {
        let confirmer = settings.confirm.clone().map(|c| Arc::new(Confirmer::new(c)));
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
