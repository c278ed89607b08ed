//! Reloading the configuration while serving (SIGHUP, `POST /v1/reload`).
//!
//! The reloadable part of the configuration (sources with their secrets and formats, sinks, alerts, the tokens
//! and identities with their scopes, and the routing the store derives from them) lives in a [`Live`] snapshot behind one pointer. A request takes the
//! snapshot once, at its start, and runs under it to its answer; a reload builds the next snapshot aside and
//! swaps the pointer. Nothing is ever half-applied: the new file is read and checked in full by the binary's
//! [`crate::runtime::live::Loader`] first, and a file that does not pass leaves the snapshot in force untouched.
//!
//! Invariant: a request runs under one configuration. The store's routing is the one exception, switched between
//! transactions rather than requests: a delivery committed after the swap is routed by the new routing.

use crate::runtime::access::Credentials;
use crate::runtime::live::{Live, Reloaded, SourceRuntime};
use crate::service::audit::{self, Actor};
use crate::state::AppState;
use payhook_store::AuditAction;
use payhook_store::Store;
use std::collections::HashMap;
use std::sync::Arc;

/// Why a reload did not happen. Either way, the configuration in force stays as it was.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file cannot be applied; the message says why, as `payhook config check` would.
    #[error("{0}")]
    Refused(String),
    /// This server has no file to read again (it was started with settings built in code).
    #[error("this server has no configuration file to reload")]
    Unavailable,
}

/// What a reload applied, by name: never a secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ReloadReport {
    /// The generation now in force.
    pub generation: u64,
    /// Sources now served that were not.
    pub sources_added: Vec<String>,
    /// Sources no longer served (their endpoints answer 404).
    pub sources_removed: Vec<String>,
    /// Sources whose scheme, secrets, format, forwards or orders changed.
    pub sources_changed: Vec<String>,
    /// Sinks now delivered to that were not.
    pub sinks_added: Vec<String>,
    /// Sinks no longer delivered to (their pending rows wait in the outbox).
    pub sinks_removed: Vec<String>,
    /// Sinks whose URL, kinds, signing secret, timeout, concurrency or transport changed.
    pub sinks_changed: Vec<String>,
    /// Whether the alerts endpoint or thresholds changed.
    pub alerts_changed: bool,
    /// Tokens that now open the operator surfaces and did not (by name).
    pub tokens_added: Vec<String>,
    /// Tokens refused from now on.
    pub tokens_removed: Vec<String>,
    /// Tokens whose value, scope or expiry changed.
    pub tokens_changed: Vec<String>,
    /// Whether the identity header or the identities' scopes changed.
    pub identities_changed: bool,
}

impl ReloadReport {
    /// True when the file defined everything as it already was.
    pub fn is_unchanged(&self) -> bool {
        *self == Self { generation: self.generation, ..Self::default() }
    }
}

fn names_of<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = names.map(str::to_owned).collect();
    names.sort();
    names
}

impl<S: Store> AppState<S> {
    /// Reads the configuration again (the [`Loader`]) and applies it, or refuses it and keeps the one in force.
    /// Reloads run one at a time. Logged, counted and recorded in the audit trail for `by` either way; `trigger`
    /// (`SIGHUP`, `api`) is logged.
    pub async fn reload(&self, trigger: &str, by: &Actor) -> Result<ReloadReport, ReloadError> {
        let result = self.reload_unrecorded(trigger).await;
        let (outcome, detail) = match &result {
            Ok(report) => ("ok", serde_json::to_value(report).unwrap_or_default()),
            Err(e @ ReloadError::Refused(_)) => ("refused", serde_json::json!({ "message": e.to_string() })),
            Err(ReloadError::Unavailable) => ("unavailable", serde_json::Value::Null),
        };
        let entry = by.entry(AuditAction::Reload, None, outcome, detail, self.clock.now_ms());
        let _ = audit::record(&*self.store, entry).await;
        result
    }

    async fn reload_unrecorded(&self, trigger: &str) -> Result<ReloadReport, ReloadError> {
        let _one_at_a_time = self.reloading.lock().await;
        let Some(loader) = self.loader.get() else {
            return Err(ReloadError::Unavailable);
        };
        match (loader.0)() {
            Ok(reloaded) => {
                let report = self.apply(reloaded);
                tracing::info!(
                    trigger,
                    generation = report.generation,
                    sources_added = ?report.sources_added,
                    sources_removed = ?report.sources_removed,
                    sources_changed = ?report.sources_changed,
                    sinks_added = ?report.sinks_added,
                    sinks_removed = ?report.sinks_removed,
                    sinks_changed = ?report.sinks_changed,
                    alerts_changed = report.alerts_changed,
                    tokens_added = ?report.tokens_added,
                    tokens_removed = ?report.tokens_removed,
                    tokens_changed = ?report.tokens_changed,
                    identities_changed = report.identities_changed,
                    "configuration reloaded{}",
                    if report.is_unchanged() { " (nothing changed)" } else { "" }
                );
                Ok(report)
            }
            Err(message) => {
                self.reload_metrics.refused();
                tracing::error!(trigger, error = %message, "configuration reload refused; the configuration in force is unchanged");
                Err(ReloadError::Refused(message))
            }
        }
    }

    /// Applies a configuration that has been read and checked: the store's routing, then the dispatcher's sinks,
    /// then the snapshot requests take. Sources that stay keep their counters.
    pub fn apply(&self, reloaded: Reloaded) -> ReloadReport {
        let Reloaded { settings, changed_sources, changed_sinks, alerts_changed } = reloaded;
        let old = self.live();
        let generation = old.generation + 1;
        let sources: HashMap<String, Arc<SourceRuntime>> = settings
            .sources
            .iter()
            .map(|s| {
                let name = s.name.as_str();
                let runtime = match old.sources.get(name) {
                    Some(kept) => kept.redefined(s.clone()),
                    None => SourceRuntime::new(s.clone()),
                };
                (name.to_owned(), Arc::new(runtime))
            })
            .collect();
        let old_sinks: Vec<&str> = old.settings.sinks.iter().map(|s| s.name.as_str()).collect();
        let new_sinks: Vec<&str> = settings.sinks.iter().map(|s| s.name.as_str()).collect();
        let credentials = Credentials::of(&settings);
        let token = |c: &Credentials, name: &str| c.token(name).cloned();
        let old_tokens: Vec<&str> = old.credentials.token_names().collect();
        let new_tokens: Vec<&str> = credentials.token_names().collect();
        let report = ReloadReport {
            generation,
            sources_added: names_of(sources.keys().map(String::as_str).filter(|n| !old.sources.contains_key(*n))),
            sources_removed: names_of(old.sources.keys().map(String::as_str).filter(|n| !sources.contains_key(*n))),
            sources_changed: names_of(
                changed_sources.iter().map(String::as_str).filter(|n| old.sources.contains_key(*n)),
            ),
            sinks_added: names_of(new_sinks.iter().copied().filter(|n| !old_sinks.contains(n))),
            sinks_removed: names_of(old_sinks.iter().copied().filter(|n| !new_sinks.contains(n))),
            sinks_changed: names_of(changed_sinks.iter().map(String::as_str).filter(|n| old_sinks.contains(n))),
            alerts_changed,
            tokens_added: names_of(new_tokens.iter().copied().filter(|n| !old_tokens.contains(n))),
            tokens_removed: names_of(old_tokens.iter().copied().filter(|n| !new_tokens.contains(n))),
            tokens_changed: names_of(
                new_tokens
                    .iter()
                    .copied()
                    .filter(|n| old_tokens.contains(n) && token(&old.credentials, n) != token(&credentials, n)),
            ),
            identities_changed: old.settings.access.identity_header != settings.access.identity_header
                || old.settings.access.identities != settings.access.identities,
        };
        self.store.set_routing(settings.routing());
        let mut restart = changed_sinks;
        if alerts_changed {
            restart.push(crate::base::settings::ALERTS_SINK.to_owned());
        }
        self.dispatcher.reconfigure(&settings, &restart, generation);
        self.live.replace(Live { generation, settings, sources, credentials });
        self.reload_metrics.applied(generation, self.clock.now_ms());
        report
    }
}
