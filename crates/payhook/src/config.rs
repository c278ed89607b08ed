//! Configuration in layers: documented defaults (`payhook.default.toml`, compiled in), then the user's file.
//! The raw file is a separate type from the resolved settings; resolving validates everything and names the key
//! of each problem.
//!
//! - `reload`: reading the file again for a running server, and what a reload may not change.
//! - `server`: the `[server]` table (listener bounds and TLS, the API token and its throttle).
//! - `telemetry`: the `[telemetry]` table and the `OTEL_*` variables (trace export).

use anyhow::{Context, Result, bail};
use payhook_core::retry::RetryPolicy;
use payhook_core::signature::{Scheme, Secret, Verifier};
use payhook_postgres::PgOptions;
use payhook_server::settings::{AlertSettings, DispatcherSettings, ReplaySettings};
use payhook_server::{
    AuthSettings, IpRange, ListenerSettings, RetentionSettings, SecretUrl, Settings, SourceSettings, TlsSettings,
    WorkerSettings,
};
use payhook_sqlite::{CommitSync, SqliteOptions};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

mod confirm;
mod reload;
mod retention;
mod server;
mod sinks;
mod sources;
mod storage;
mod telemetry;

use retention::{RawRetention, resolve_retention};
pub use server::TokenOrigin;
use server::{RawServer, resolve_access, resolve_api_token, resolve_auth, resolve_listener};
use sinks::{RawSink, kinds_taken, resolve_sink};
pub use sources::BUILT_IN_SCHEMES;
use sources::{RawSource, resolve_source};
use storage::{RawStorage, resolve_storage};
pub use telemetry::{Export, ParentRoot, Protocol, Sampler, TelemetryConfig};
use telemetry::{RawTelemetry, resolve_telemetry};

/// The compiled-in defaults, printed by `payhook config print-default`.
pub const DEFAULT_TOML: &str = include_str!("../payhook.default.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server: RawServer,
    storage: RawStorage,
    retry: RetryPolicy,
    worker: RawWorker,
    dispatcher: RawDispatcher,
    replay: RawReplay,
    retention: RawRetention,
    alerts: Option<RawAlerts>,
    #[serde(default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    sinks: Vec<RawSink>,
    log: RawLog,
    telemetry: RawTelemetry,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    format: String,
}

/// How `payhook serve` writes its logs (to stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, every field at the top level, for log collectors.
    Json,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDispatcher {
    enabled: bool,
    poll_interval_ms: u64,
    lease_ms: i64,
    retry: RetryPolicy,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplay {
    max_per_call: u32,
    per_second: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    url: String,
    #[serde(default = "default_alert_window_secs")]
    window_secs: u64,
    #[serde(default = "default_alert_gather_secs")]
    gather_secs: u64,
    #[serde(default = "default_alert_verification_failures")]
    verification_failures: u32,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_alert_window_secs() -> u64 {
    300
}
fn default_alert_gather_secs() -> u64 {
    10
}
fn default_alert_verification_failures() -> u32 {
    20
}
fn default_timeout_ms() -> u64 {
    10_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    enabled: bool,
    poll_interval_ms: u64,
    lease_ms: i64,
    claim_batch: u32,
}

/// `--config FILE` (or `$PAYHOOK_CONFIG`): the flag of every command that reads the configuration, the server's and
/// the load generator's (`payhook-bench`).
#[derive(Debug, clap::Args)]
pub struct ConfigFlag {
    /// Configuration file (default: ./payhook.toml when present, else the built-in defaults).
    #[arg(long, short, global = true, env = "PAYHOOK_CONFIG")]
    config: Option<PathBuf>,
}

impl ConfigFlag {
    /// The file named, if any.
    pub fn path(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// The configuration the flag names (see [`Config::load`]).
    pub fn load(&self) -> Result<Config> {
        Config::load(self.path())
    }
}

/// Everything the binary needs, resolved and checked.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from, if any.
    pub file: Option<PathBuf>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The HTTP runtime's settings.
    pub settings: Settings,
    /// Which store, and its options.
    pub storage: StorageConfig,
    /// How logs are written.
    pub log_format: LogFormat,
    /// Where traces are exported, if anywhere (`[telemetry]`, `OTEL_*`).
    pub telemetry: TelemetryConfig,
    /// Where the API token came from.
    pub api_token_origin: TokenOrigin,
    /// The configuration as read (defaults, file, environment merged), before resolving: what a reload compares.
    pub(crate) merged: Merged,
}

/// The merged configuration table. It holds the secrets as written, so it is never printed.
#[derive(Clone, PartialEq)]
pub(crate) struct Merged(toml::Table);

impl std::fmt::Debug for Merged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Merged([redacted])")
    }
}

/// The store `storage.url` selects, with its resolved options.
#[derive(Debug, Clone)]
pub enum StorageConfig {
    /// `sqlite://PATH`: the embedded default.
    Sqlite(SqliteOptions),
    /// `postgres://…` (or `postgresql://…`): several instances on one database.
    Postgres(PgOptions),
}

impl StorageConfig {
    /// Sets the sink routing the store applies in each effect's transaction.
    pub fn set_routing(&mut self, routing: payhook_store::Routing) {
        match self {
            StorageConfig::Sqlite(o) => o.routing = routing,
            StorageConfig::Postgres(o) => o.routing = routing,
        }
    }

    /// Where the data lives, for logs and `config check`: never the password.
    pub fn describe(&self) -> String {
        match self {
            StorageConfig::Sqlite(o) => {
                format!("sqlite://{} (batch_max {}, fsync {:?})", o.path.display(), o.batch_max, o.sync)
            }
            StorageConfig::Postgres(o) => format!(
                "{} (tls: {}, pool_size {}, writers {} ({} executing), batch_max {}, statement_timeout_ms {}{}{})",
                o.target(),
                o.tls_summary(),
                o.pool_size,
                o.writers,
                o.executing_writers,
                o.batch_max,
                o.statement_timeout_ms,
                if o.require_sync_standby { ", synchronous standby required" } else { "" },
                o.read.as_ref().map_or_else(String::new, |r| format!(
                    "; listings and stats read from {} (tls: {}, read_pool_size {})",
                    r.target(),
                    r.tls_summary(),
                    o.read_pool_size
                ))
            ),
        }
    }
}

impl Config {
    /// Loads `path`, or `payhook.toml` in the working directory when it exists, or the defaults alone.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        let path = match path {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from("payhook.toml")).filter(|p| p.exists()),
        };
        let text = match &path {
            Some(p) => std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?,
            None => String::new(),
        };
        let name = path.as_ref().map_or_else(|| "<defaults>".to_owned(), |p| p.display().to_string());
        Self::from_toml_and_env(&text, &name, path, std::env::vars())
    }

    /// The configured source named `name`; the error lists the configured ones.
    pub fn source(&self, name: &str) -> Result<&SourceSettings> {
        self.settings.sources.iter().find(|s| s.name.as_str() == name).with_context(|| {
            let names: Vec<&str> = self.settings.sources.iter().map(|s| s.name.as_str()).collect();
            format!("no source named {name:?} in the configuration (configured: {})", names.join(", "))
        })
    }

    /// The base URL of this configuration's server: `url` without a trailing slash, else the listen address.
    pub fn base_url(&self, url: Option<&str>) -> String {
        url.map_or_else(|| format!("http://{}", self.listen), |u| u.trim_end_matches('/').to_owned())
    }

    /// Resolves `text` (the user's file, named `name` in messages) over the defaults, without the environment.
    #[cfg(test)]
    pub fn from_toml(text: &str, name: &str, file: Option<PathBuf>) -> Result<Self> {
        Self::from_toml_and_env(text, name, file, std::iter::empty())
    }

    /// Resolves `text` over the defaults, then the `PAYHOOK_<TABLE>__<KEY>` overrides found in `env`.
    ///
    /// A problem is reported with the file, the line and the key it concerns (or the environment variable that
    /// set it).
    pub fn from_toml_and_env(
        text: &str,
        name: &str,
        file: Option<PathBuf>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self> {
        let mut merged: toml::Table = toml::from_str(DEFAULT_TOML).context("the built-in defaults do not parse")?;
        let user: toml::Table = toml::from_str(text).map_err(|e| anyhow::anyhow!("{name}: {}", located(text, &e)))?;
        merge(&mut merged, user);
        let env: Vec<(String, String)> = env.into_iter().collect();
        let overrides = env_overrides(env.iter().cloned())?;
        for (var, path, value) in &overrides {
            set_path(&mut merged, path, value.clone()).with_context(|| format!("environment variable {var}"))?;
        }
        // Where the value at `key` (`server.listen`, `sources[1].secrets`) came from: the environment variable
        // that set it or a table above it, else the file's line (that of the closest table, for a key the file
        // does not write: a default).
        let blame = |key: Option<&str>, message: String| -> anyhow::Error {
            let under = |path: &[String], k: &str| {
                let set = path.join(".");
                k == set || k.starts_with(&format!("{set}.")) || k.starts_with(&format!("{set}["))
            };
            if let Some((var, _, _)) = key.and_then(|k| overrides.iter().find(|(_, p, _)| under(p, k))) {
                return anyhow::anyhow!("environment variable {var}: {message}");
            }
            match key.and_then(|k| line_of_key(text, k)) {
                Some(line) => anyhow::anyhow!("{name}:{line}: {message}"),
                None => anyhow::anyhow!("{name}: {message}"),
            }
        };
        let merged_copy = merged.clone();
        // serde_path_to_error gives the path of a value serde refused (a wrong type, an unknown key).
        let raw: RawConfig = serde_path_to_error::deserialize(merged).map_err(|e| {
            let key = e.path().to_string();
            blame(Some(&key), format!("{key}: {}", e.inner().message()))
        })?;
        let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        // Resolving names the key first in each message it writes (`server.listen: …`).
        resolve(raw, file, Merged(merged_copy), &var).map_err(|e| {
            let message = format!("{e:#}");
            blame(key_path_in(&message).as_deref(), message)
        })
    }
}

/// `PAYHOOK_SERVER__LISTEN=0.0.0.0:8080` → (`server`, `listen`) = `"0.0.0.0:8080"`. A value that reads as a TOML
/// value (a number, a boolean, an array) is taken as one; anything else is a string. Variables without `__` (such
/// as `PAYHOOK_API_TOKEN` and `PAYHOOK_LOG`) are not overrides.
fn env_overrides(env: impl IntoIterator<Item = (String, String)>) -> Result<Vec<(String, Vec<String>, toml::Value)>> {
    let mut out = Vec::new();
    for (var, value) in env {
        let Some(rest) = var.strip_prefix("PAYHOOK_") else { continue };
        if !rest.contains("__") {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        if path.iter().any(String::is_empty) || path[0] == "sources" || path[0] == "sinks" {
            bail!("environment variable {var}: not a [table] key (sources and sinks are configured in the file)");
        }
        let parsed = toml::from_str::<toml::Table>(&format!("v = {value}")).ok().and_then(|mut t| t.remove("v"));
        out.push((var, path, parsed.unwrap_or(toml::Value::String(value))));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<()> {
    let (last, parents) = path.split_last().context("empty key")?;
    let mut at = table;
    for key in parents {
        let entry = at.entry(key.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        at = entry.as_table_mut().with_context(|| format!("{key} is not a table"))?;
    }
    at.insert(last.clone(), value);
    Ok(())
}

/// The key a resolving message is about: `server.listen: …` or `sources[1] (stripe): secrets: …` (resolving
/// writes every message so, and labels a source or sink with its name).
fn key_path_in(message: &str) -> Option<String> {
    let mut path = Vec::new();
    for layer in message.split(": ") {
        let token: String = layer
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '[' | ']'))
            .collect();
        let rest = &layer[token.len()..];
        if token.is_empty() || !(rest.is_empty() || rest.starts_with(" (")) {
            break;
        }
        path.push(token);
    }
    (!path.is_empty()).then(|| path.join("."))
}

/// The 1-based line where `key` (`server.listen`, `sources[1].secrets`) is written in `text`; for a key the file
/// does not set, the line of the closest table it is in.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let line = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let mut table: &toml_edit::Table = doc.as_table();
    let mut found = None;
    for segment in key.split('.') {
        let (name, index) = match segment.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (segment, None),
        };
        let Some((k, item)) = table.get_key_value(name) else { break };
        found = k.span().map(|s| s.start).or(found);
        match (index, item) {
            (Some(n), toml_edit::Item::ArrayOfTables(array)) => {
                let Some(t) = array.get(n) else { break };
                found = t.span().map(|s| s.start).or(found);
                table = t;
            }
            (None, toml_edit::Item::Table(t)) => table = t,
            _ => break,
        }
    }
    found.map(line)
}

/// A TOML error with its line and column.
fn located(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {col}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}

/// Overlays `user` on `base`, table by table.
fn merge(base: &mut toml::Table, user: toml::Table) {
    for (key, value) in user {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(u)) => merge(b, u),
            (_, v) => {
                base.insert(key, v);
            }
        }
    }
}

fn resolve(
    raw: RawConfig,
    file: Option<PathBuf>,
    merged: Merged,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Config> {
    let listen: SocketAddr = raw
        .server
        .listen
        .parse()
        .with_context(|| format!("server.listen: {:?} is not an address", raw.server.listen))?;
    let (api_token, api_token_origin) = resolve_api_token(&raw.server, var)?;
    let auth = resolve_auth(&raw.server)?;
    let access = resolve_access(&raw.server, var)?;
    if raw.server.body_limit_bytes == 0 {
        bail!("server.body_limit_bytes must be positive");
    }
    raw.retry.validate().context("retry")?;
    let storage = resolve_storage(raw.storage, raw.retry)?;
    let log_format = match raw.log.format.as_str() {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => bail!("log.format: {other:?} is not one of \"text\", \"json\""),
    };
    let telemetry = resolve_telemetry(&raw.telemetry, var)?;
    let mut sources = Vec::new();
    for (i, s) in raw.sources.into_iter().enumerate() {
        let label = format!("sources[{i}] ({})", s.name);
        let source = resolve_source(s).with_context(|| label.clone())?;
        if sources.iter().any(|o: &SourceSettings| o.name == source.name) {
            bail!("{label}.name: another source already has this name");
        }
        sources.push(source);
    }
    let mut settings = Settings::new(sources);
    settings.body_limit_bytes = raw.server.body_limit_bytes;
    settings.api_token = api_token;
    settings.access = access;
    settings.public_openapi = raw.server.public_openapi;
    settings.metrics_listen = match raw.server.metrics_listen.trim() {
        "" => None,
        at => Some(at.parse().with_context(|| format!("server.metrics_listen: {at:?} is not an address"))?),
    };
    if settings.metrics_listen.is_some_and(|at| at == listen) {
        bail!("server.metrics_listen: must differ from server.listen");
    }
    settings.auth = auth;
    settings.worker = WorkerSettings {
        enabled: raw.worker.enabled,
        poll_interval_ms: raw.worker.poll_interval_ms.max(1),
        lease_ms: raw.worker.lease_ms.max(1),
        claim_batch: raw.worker.claim_batch.max(1),
    };
    raw.dispatcher.retry.validate().context("dispatcher.retry")?;
    settings.dispatcher = DispatcherSettings {
        enabled: raw.dispatcher.enabled,
        poll_interval_ms: raw.dispatcher.poll_interval_ms.max(1),
        lease_ms: raw.dispatcher.lease_ms.max(1),
        retry: raw.dispatcher.retry,
    };
    settings.replay =
        ReplaySettings { max_per_call: raw.replay.max_per_call.max(1), per_second: raw.replay.per_second.max(1) };
    settings.listener = resolve_listener(&raw.server, &settings.replay)?;
    settings.retention = resolve_retention(&raw.retention)?;
    for (i, sink) in raw.sinks.into_iter().enumerate() {
        let label = format!("sinks[{i}] ({})", sink.name);
        let sink = resolve_sink(sink).with_context(|| label.clone())?;
        if settings.sinks.iter().any(|o| o.name == sink.name) {
            bail!("{label}.name: another sink already has this name");
        }
        if sink.timeout_ms as i64 >= settings.dispatcher.lease_ms {
            bail!("{label}.timeout_ms: must be shorter than dispatcher.lease_ms, or a slow sink would be sent twice");
        }
        settings.sinks.push(sink);
    }
    for (i, source) in settings.sources.iter().enumerate() {
        for name in &source.forward {
            if !settings.sinks.iter().any(|s| &s.name == name) {
                bail!("sources[{i}] ({}).forward: no sink named {name:?}", source.name);
            }
        }
    }
    for (i, sink) in settings.sinks.iter().enumerate() {
        let forwarded = settings.sources.iter().any(|s| s.forward.contains(&sink.name));
        if let Err(why) = sink.filter.check(&kinds_taken(sink, forwarded)) {
            bail!("sinks[{i}] ({}): when: {why}", sink.name);
        }
    }
    if let Some(a) = raw.alerts {
        // Never echo the URL: a Slack webhook's path is its secret.
        let url = SecretUrl::parse(&a.url).context("alerts.url")?;
        settings.alerts = Some(AlertSettings {
            url,
            window_ms: (a.window_secs.max(1) * 1000) as i64,
            gather_ms: (a.gather_secs * 1000) as i64,
            verification_failures: a.verification_failures.max(1),
            timeout_ms: a.timeout_ms,
        });
    }
    let mut storage = storage;
    storage.set_routing(settings.routing());
    Ok(Config { file, listen, settings, storage, log_format, telemetry, api_token_origin, merged })
}

#[cfg(test)]
mod tests;
