//! Configuration in layers: documented defaults (`payhook.default.toml`, compiled in), then the user's file.
//! The raw file is a separate type from the resolved settings; resolving validates everything and names the key
//! of each problem.

use anyhow::{Context, Result, bail};
use payhook_core::event::SourceName;
use payhook_core::format::Format;
use payhook_core::retry::RetryPolicy;
use payhook_core::signature::{DEFAULT_REQUIRED_COMPONENTS, Encoding, HmacAlgorithm, Scheme, Secret, Verifier};
use payhook_postgres::PgOptions;
use payhook_server::settings::{AlertSettings, DispatcherSettings, ReplaySettings, SinkSettings};
use payhook_server::{
    AuthSettings, IpRange, ListenerSettings, RetentionSettings, SecretUrl, Settings, SourceSettings, TlsSettings,
    WorkerSettings,
};
use payhook_sqlite::{CommitSync, SqliteOptions};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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
struct RawRetention {
    enabled: bool,
    payloads_days: u32,
    keys_days: u32,
    interval_secs: u64,
    batch: u32,
    pause_percent: u32,
    cli_min_pause_ms: u64,
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
fn default_max_in_flight() -> usize {
    4
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSink {
    name: String,
    url: String,
    kinds: Vec<String>,
    secret: Option<String>,
    secret_env: Option<String>,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "default_max_in_flight")]
    max_in_flight: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: String,
    api_token: Option<String>,
    api_token_env: Option<String>,
    body_limit_bytes: usize,
    body_timeout_ms: u64,
    header_read_timeout_ms: u64,
    keep_alive_idle_ms: u64,
    max_connections: usize,
    max_header_bytes: usize,
    max_headers: usize,
    shutdown_grace_ms: u64,
    public_openapi: bool,
    metrics_listen: String,
    tls: Option<RawTls>,
    trusted_proxies: Vec<String>,
    auth_failures_per_minute: u32,
    auth_failure_burst: u32,
    auth_throttle_max_addresses: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_path: PathBuf,
    key_path: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    url: String,
    group_commit: bool,
    batch_max: usize,
    queue_depth: usize,
    busy_timeout_ms: u64,
    read_connections: usize,
    read_timeout_ms: u64,
    wal_limit_bytes: u64,
    wal_checkpoint_wait_ms: u64,
    vacuum_step_pages: u32,
    fsync: String,
    pool_size: usize,
    writers: Option<usize>,
    statement_timeout_ms: u64,
    connect_timeout_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    enabled: bool,
    poll_interval_ms: u64,
    lease_ms: i64,
    claim_batch: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    scheme: String,
    format: Format,
    #[serde(default)]
    secrets: Vec<String>,
    secrets_env: Option<String>,
    tolerance_secs: Option<u64>,
    header: Option<String>,
    algorithm: Option<HmacAlgorithm>,
    encoding: Option<Encoding>,
    prefix: Option<String>,
    /// `http-message-signatures` only: the components every signature must cover.
    required_components: Option<Vec<String>>,
    #[serde(default)]
    forward: Vec<String>,
}

/// Everything the binary needs, resolved and checked.
#[derive(Debug)]
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
    /// Where the API token came from.
    pub api_token_origin: TokenOrigin,
}

/// The variable `server.api_token_env` names by default. Unset, it means no token: `/v1` and the dashboard are
/// closed and `payhook serve` warns. Any other variable it names must be set.
pub const DEFAULT_TOKEN_ENV: &str = "PAYHOOK_API_TOKEN";
/// The shortest API token accepted, in characters, once surrounding whitespace is trimmed.
pub const MIN_TOKEN_CHARS: usize = 24;

/// Where the API token came from, for `config check` and the startup warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// `server.api_token`, in the file or from `PAYHOOK_SERVER__API_TOKEN`.
    Inline,
    /// The environment variable `server.api_token_env` names.
    Env(String),
    /// No token: the default variable is unset (`Some` of it), or `server.api_token_env` is empty (`None`).
    Unset(Option<String>),
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
                "{} (tls: {}, pool_size {}, writers {}, batch_max {}, statement_timeout_ms {})",
                o.target(),
                o.tls_summary(),
                o.pool_size,
                o.writers,
                o.batch_max,
                o.statement_timeout_ms
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
        let blame = |message: String| -> anyhow::Error {
            let key = key_path_in(&message);
            // serde names an unknown field alone: match it against an override's last segment too.
            let from_env = |k: &String| overrides.iter().find(|(_, p, _)| p.join(".") == *k || p.last() == Some(k));
            if let Some((var, _, _)) = key.as_ref().and_then(from_env) {
                return anyhow::anyhow!("environment variable {var}: {message}");
            }
            match key.as_deref().and_then(|k| line_of_key(text, k)) {
                Some(line) => anyhow::anyhow!("{name}:{line}: {message}"),
                None => anyhow::anyhow!("{name}: {message}"),
            }
        };
        let raw: RawConfig = RawConfig::deserialize(merged).map_err(|e| blame(e.to_string()))?;
        let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        resolve(raw, file, &var).map_err(|e| blame(format!("{e:#}")))
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

/// The key a message is about: `server.listen: …`, `sources[1] (stripe): secrets: …`, or serde's "unknown field
/// `urll`" (the bare key).
fn key_path_in(message: &str) -> Option<String> {
    if let Some(rest) = message.split("unknown field `").nth(1) {
        return rest.split('`').next().map(str::to_owned);
    }
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

/// The 1-based line where `key` (`server.listen`, `sources[1].secrets`, or a bare key that serde named alone) is
/// written in `text`; for a key the file does not set, the line of the closest table it is in.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let line = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    if !key.contains('.') && !key.contains('[') {
        return find_key(doc.as_table(), key).map(line);
    }
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

/// The offset of the first place `name` is written as a key, in any table.
fn find_key(table: &toml_edit::Table, name: &str) -> Option<usize> {
    for (k, item) in table.iter() {
        if k == name {
            return table.key(k).and_then(|key| key.span()).map(|s| s.start);
        }
        let inner = match item {
            toml_edit::Item::Table(t) => find_key(t, name),
            toml_edit::Item::ArrayOfTables(a) => a.iter().find_map(|t| find_key(t, name)),
            _ => None,
        };
        if inner.is_some() {
            return inner;
        }
    }
    None
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

/// The public listener's bounds; each must be positive, and the header limit at least hyper's minimum buffer.
fn resolve_listener(raw: &RawServer) -> Result<ListenerSettings> {
    for (key, value) in [
        ("header_read_timeout_ms", raw.header_read_timeout_ms),
        ("keep_alive_idle_ms", raw.keep_alive_idle_ms),
        ("max_connections", raw.max_connections as u64),
        ("max_headers", raw.max_headers as u64),
    ] {
        if value == 0 {
            bail!("server.{key} must be positive");
        }
    }
    if raw.max_header_bytes < 8192 {
        bail!(
            "server.max_header_bytes must be at least 8192 (a request head needs room), not {}",
            raw.max_header_bytes
        );
    }
    let tls = match &raw.tls {
        None => None,
        Some(t) => {
            for (key, path) in [("cert_path", &t.cert_path), ("key_path", &t.key_path)] {
                if !path.is_file() {
                    bail!("server.tls.{key}: {} is not a readable file", path.display());
                }
            }
            Some(TlsSettings { cert_path: t.cert_path.clone(), key_path: t.key_path.clone() })
        }
    };
    Ok(ListenerSettings {
        header_read_timeout_ms: raw.header_read_timeout_ms,
        keep_alive_idle_ms: raw.keep_alive_idle_ms,
        max_connections: raw.max_connections,
        max_header_bytes: raw.max_header_bytes,
        max_headers: raw.max_headers,
        shutdown_grace_ms: raw.shutdown_grace_ms,
        tls,
    })
}

/// The API token: `server.api_token` when set, else the variable `server.api_token_env` names, read through `var`;
/// trimmed of surrounding whitespace (a trailing newline from a secrets file is not part of it), and at least
/// [`MIN_TOKEN_CHARS`] long.
fn resolve_api_token(
    server: &RawServer,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<Secret>, TokenOrigin)> {
    let checked = |token: &str, setting: &str| -> Result<Secret> {
        if token.chars().count() < MIN_TOKEN_CHARS {
            bail!("{setting}: the API token must be at least {MIN_TOKEN_CHARS} characters");
        }
        Ok(Secret::new(token))
    };
    if let Some(token) = server.api_token.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        return Ok((Some(checked(token, "server.api_token")?), TokenOrigin::Inline));
    }
    let Some(name) = server.api_token_env.as_deref().map(str::trim).filter(|n| !n.is_empty()) else {
        return Ok((None, TokenOrigin::Unset(None)));
    };
    match var(name) {
        Some(value) => {
            let token = checked(value.trim(), &format!("server.api_token_env ({name})"))?;
            Ok((Some(token), TokenOrigin::Env(name.to_owned())))
        }
        None if name == DEFAULT_TOKEN_ENV => Ok((None, TokenOrigin::Unset(Some(name.to_owned())))),
        None => bail!("server.api_token_env ({name}): the environment variable {name} is not set"),
    }
}

fn resolve(raw: RawConfig, file: Option<PathBuf>, var: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
    let listen: SocketAddr = raw
        .server
        .listen
        .parse()
        .with_context(|| format!("server.listen: {:?} is not an address", raw.server.listen))?;
    let (api_token, api_token_origin) = resolve_api_token(&raw.server, var)?;
    let auth = resolve_auth(&raw.server)?;
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
    settings.body_timeout_ms = raw.server.body_timeout_ms;
    settings.api_token = api_token;
    settings.listener = resolve_listener(&raw.server)?;
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
    Ok(Config { file, listen, settings, storage, log_format, api_token_origin })
}

fn resolve_auth(server: &RawServer) -> Result<AuthSettings> {
    let mut trusted_proxies = Vec::new();
    for (i, text) in server.trusted_proxies.iter().enumerate() {
        trusted_proxies.push(IpRange::parse(text).with_context(|| format!("server.trusted_proxies[{i}]"))?);
    }
    for (key, value) in [
        ("auth_failures_per_minute", server.auth_failures_per_minute as usize),
        ("auth_failure_burst", server.auth_failure_burst as usize),
        ("auth_throttle_max_addresses", server.auth_throttle_max_addresses),
    ] {
        if value == 0 {
            bail!("server.{key}: must be positive");
        }
    }
    Ok(AuthSettings {
        trusted_proxies,
        failures_per_minute: server.auth_failures_per_minute,
        failure_burst: server.auth_failure_burst,
        max_addresses: server.auth_throttle_max_addresses,
    })
}

fn resolve_sink(s: RawSink) -> Result<SinkSettings> {
    if s.name.is_empty() || s.name.starts_with('_') {
        bail!("name: must be non-empty and must not start with '_' (reserved)");
    }
    // Never echo the URL: its path or query may hold the sink's token.
    let url = SecretUrl::parse(&s.url).context("url")?;
    if s.kinds.is_empty() {
        bail!("kinds: list the outbox kinds this sink takes (order.paid, order.refunded, …) or \"*\"");
    }
    let secret = match (s.secret, &s.secret_env) {
        (Some(secret), _) => Some(secret),
        (None, Some(var)) => {
            Some(std::env::var(var).with_context(|| format!("secret_env: environment variable {var} is not set"))?)
        }
        (None, None) => None,
    };
    let signer = secret
        .map(|secret| Verifier::new(Scheme::StandardWebhooks, &[Secret::new(secret)], 300))
        .transpose()
        .context("secret: a Standard Webhooks secret (whsec_ followed by base64)")?;
    Ok(SinkSettings {
        name: s.name,
        url,
        kinds: s.kinds,
        signer,
        timeout_ms: s.timeout_ms.max(1),
        max_in_flight: s.max_in_flight.max(1),
    })
}

fn resolve_storage(raw: RawStorage, retry: RetryPolicy) -> Result<StorageConfig> {
    if raw.batch_max == 0 || raw.queue_depth == 0 {
        bail!("storage.batch_max and storage.queue_depth must be positive");
    }
    let sync = match raw.fsync.as_str() {
        // One commit per event means one fsync per event: the naive mode group commit is measured against.
        _ if !raw.group_commit => CommitSync::InCommit,
        "pipelined" => CommitSync::Pipelined,
        "in-commit" => CommitSync::InCommit,
        other => bail!("storage.fsync: {other:?} is not one of \"pipelined\", \"in-commit\""),
    };
    let batch_max = if raw.group_commit { raw.batch_max } else { 1 };
    if let Some(path) = raw.url.strip_prefix("sqlite://") {
        if path.is_empty() {
            bail!("storage.url: sqlite:// needs a path");
        }
        if raw.read_connections == 0 || raw.read_timeout_ms == 0 {
            bail!("storage.read_connections and storage.read_timeout_ms must be positive");
        }
        if raw.wal_limit_bytes < 1 << 20 {
            bail!("storage.wal_limit_bytes: must be at least 1 MiB (1048576)");
        }
        if raw.wal_checkpoint_wait_ms == 0 || raw.wal_checkpoint_wait_ms >= raw.busy_timeout_ms {
            bail!("storage.wal_checkpoint_wait_ms: must be positive and below storage.busy_timeout_ms");
        }
        return Ok(StorageConfig::Sqlite(SqliteOptions {
            sync,
            path: PathBuf::from(path),
            batch_max,
            queue_depth: raw.queue_depth,
            busy_timeout_ms: raw.busy_timeout_ms,
            read_connections: raw.read_connections,
            read_timeout_ms: raw.read_timeout_ms,
            retry,
            routing: Default::default(),
            wal_limit_bytes: raw.wal_limit_bytes,
            wal_checkpoint_wait_ms: raw.wal_checkpoint_wait_ms,
            vacuum_step_pages: raw.vacuum_step_pages,
        }));
    }
    if !(raw.url.starts_with("postgres://") || raw.url.starts_with("postgresql://")) {
        // Never echo the URL: it may hold a password.
        bail!("storage.url: unsupported scheme; use sqlite://PATH or postgres://USER@HOST:PORT/DATABASE");
    }
    // The parser's message names the problem without repeating the URL.
    let mut options = PgOptions::new(&raw.url).context("storage.url")?;
    if raw.pool_size == 0 {
        bail!("storage.pool_size must be positive");
    }
    let writers = raw.writers.unwrap_or_else(|| PgOptions::default_writers(raw.pool_size));
    if writers == 0 || writers > raw.pool_size {
        bail!("storage.writers must be between 1 and storage.pool_size ({})", raw.pool_size);
    }
    if raw.connect_timeout_ms == 0 {
        bail!("storage.connect_timeout_ms must be positive");
    }
    options.pool_size = raw.pool_size;
    options.writers = writers;
    options.statement_timeout_ms = raw.statement_timeout_ms;
    options.connect_timeout_ms = raw.connect_timeout_ms;
    options.pool_wait_ms = raw.connect_timeout_ms;
    options.batch_max = batch_max;
    options.queue_depth = raw.queue_depth;
    options.retry = retry;
    Ok(StorageConfig::Postgres(options))
}

fn resolve_retention(r: &RawRetention) -> Result<RetentionSettings> {
    const DAY_MS: i64 = 86_400_000;
    if r.keys_days < 3 {
        bail!("retention.keys_days: must be at least 3, as providers redeliver for up to 3 days");
    }
    if r.payloads_days == 0 || r.payloads_days > r.keys_days {
        bail!("retention.payloads_days: must be between 1 and retention.keys_days ({})", r.keys_days);
    }
    if r.interval_secs == 0 || r.batch == 0 {
        bail!("retention.interval_secs and retention.batch must be positive");
    }
    Ok(RetentionSettings {
        enabled: r.enabled,
        payloads_ms: i64::from(r.payloads_days) * DAY_MS,
        keys_ms: i64::from(r.keys_days) * DAY_MS,
        interval_ms: r.interval_secs.saturating_mul(1000),
        batch: r.batch,
        pause_percent: r.pause_percent,
        cli_min_pause_ms: r.cli_min_pause_ms,
    })
}

fn resolve_source(s: RawSource) -> Result<SourceSettings> {
    let name = SourceName::parse(s.name).context("name")?;
    let hmac_only = |key: &str, present: bool| -> Result<()> {
        if present {
            bail!("{key}: only the hmac scheme takes this key");
        }
        Ok(())
    };
    let named = match s.scheme.as_str() {
        "stripe" => Some(Scheme::Stripe),
        "standard-webhooks" => Some(Scheme::StandardWebhooks),
        "github" => Some(Scheme::Github),
        "paystack" => Some(Scheme::Paystack),
        "shopify" => Some(Scheme::Shopify),
        "adyen" => Some(Scheme::Adyen),
        "http-message-signatures" => Some(Scheme::HttpMessageSignatures),
        _ => None,
    };
    let scheme = match (named, s.scheme.as_str()) {
        (Some(scheme), _) => {
            hmac_only("header", s.header.is_some())?;
            hmac_only("algorithm", s.algorithm.is_some())?;
            hmac_only("encoding", s.encoding.is_some())?;
            hmac_only("prefix", s.prefix.is_some())?;
            scheme
        }
        (None, "hmac") => Scheme::Hmac {
            header: s.header.context("header: the hmac scheme needs the signature header's name")?.to_ascii_lowercase(),
            algorithm: s.algorithm.unwrap_or(HmacAlgorithm::Sha256),
            encoding: s.encoding.unwrap_or(Encoding::Hex),
            prefix: s.prefix.filter(|p| !p.is_empty()),
        },
        (None, other) => bail!(
            "scheme: unknown scheme {other:?} (expected stripe, standard-webhooks, github, paystack, shopify, adyen, \
             http-message-signatures or hmac)"
        ),
    };
    let mut secrets: Vec<Secret> = s.secrets.into_iter().map(Secret::new).collect();
    if let Some(var) = &s.secrets_env {
        let value =
            std::env::var(var).with_context(|| format!("secrets_env: environment variable {var} is not set"))?;
        secrets.extend(value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(|v| Secret::new(v.to_owned())));
    }
    let mut verifier = Verifier::new(scheme, &secrets, s.tolerance_secs.unwrap_or(300)).context("secrets")?;
    if let Some(components) = s.required_components {
        if *verifier.scheme() != Scheme::HttpMessageSignatures {
            bail!("required_components: only the http-message-signatures scheme takes this key");
        }
        if !components.iter().any(|c| c == "content-digest") {
            bail!(
                "required_components: must include \"content-digest\", or the signature would not cover the body \
                 (the default is {DEFAULT_REQUIRED_COMPONENTS:?})"
            );
        }
        verifier = verifier.with_required_components(&components).context("required_components")?;
    }
    Ok(SourceSettings { name, verifier, format: s.format, forward: s.forward })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_alone_resolve() {
        let c = Config::from_toml("", "t", None).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        let StorageConfig::Sqlite(o) = &c.storage else { panic!("sqlite by default: {:?}", c.storage) };
        assert_eq!(o.path, PathBuf::from("payhook.db"));
        assert!(c.settings.sources.is_empty());
    }

    #[test]
    fn the_example_file_resolves() {
        let text = include_str!("../../../examples/payhook.toml");
        let c = Config::from_toml(text, "example", None).unwrap();
        assert_eq!(c.settings.sources.len(), 3);
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let err = Config::from_toml("[server]\nlisten = \n", "f.toml", None).unwrap_err().to_string();
        assert!(err.contains("f.toml") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn problems_name_the_file_line_and_key() {
        let text = "[server]\nlisten = \"127.0.0.1:8080\"\n\n[storage]\nurll = \"x\"\n";
        let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
        assert!(err.starts_with("f.toml:5: ") && err.contains("urll"), "{err}");

        let text = "[server]\nbody_limit_bytes = 10\nlisten = \"nowhere\"\n";
        let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
        assert!(err.starts_with("f.toml:3: server.listen"), "{err}");

        let text = "[[sources]]\nname = \"a\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n\n\
                    [[sources]]\nname = \"b\"\nscheme = \"nope\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n";
        let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
        assert!(err.starts_with("f.toml:9: sources[1] (b): scheme"), "{err}");
    }

    #[test]
    fn environment_overrides_apply_over_the_file_and_are_blamed_by_name() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let text = "[server]\nlisten = \"127.0.0.1:8080\"\n";
        let c = Config::from_toml_and_env(
            text,
            "f.toml",
            None,
            env(&[
                ("PAYHOOK_SERVER__LISTEN", "0.0.0.0:9090"),
                ("PAYHOOK_WORKER__CLAIM_BATCH", "7"),
                ("PAYHOOK_RETENTION__ENABLED", "false"),
                ("PAYHOOK_API_TOKEN", "not-an-override-but-the-token"),
            ]),
        )
        .unwrap();
        assert_eq!(c.settings.api_token.as_ref().map(Secret::expose), Some("not-an-override-but-the-token"));
        assert_eq!(c.listen.to_string(), "0.0.0.0:9090");
        assert_eq!(c.settings.worker.claim_batch, 7);
        assert!(!c.settings.retention.enabled);

        let err = format!(
            "{:#}",
            Config::from_toml_and_env(text, "f.toml", None, env(&[("PAYHOOK_SERVER__LISTEN", "nowhere")])).unwrap_err()
        );
        assert!(err.starts_with("environment variable PAYHOOK_SERVER__LISTEN: server.listen"), "{err}");
        let err = format!(
            "{:#}",
            Config::from_toml_and_env(text, "f.toml", None, env(&[("PAYHOOK_SOURCES__NAME", "x")])).unwrap_err()
        );
        assert!(err.contains("PAYHOOK_SOURCES__NAME"), "{err}");
    }

    #[test]
    fn retention_must_outlast_provider_redeliveries() {
        let err = format!("{:#}", Config::from_toml("[retention]\nkeys_days = 1\n", "f.toml", None).unwrap_err());
        assert!(err.contains("f.toml:2: retention.keys_days"), "{err}");
        let c = Config::from_toml("", "f.toml", None).unwrap();
        assert_eq!((c.settings.retention.payloads_ms, c.settings.retention.keys_ms), (7 * 86_400_000, 30 * 86_400_000));
    }

    #[test]
    fn the_wal_bound_and_pruning_pace_come_from_the_configuration() {
        let c = Config::from_toml("", "f.toml", None).unwrap();
        let o = sqlite(&c);
        assert_eq!((o.wal_limit_bytes, o.wal_checkpoint_wait_ms, o.vacuum_step_pages), (64 << 20, 100, 1024));
        assert_eq!((c.settings.retention.pause_percent, c.settings.retention.cli_min_pause_ms), (100, 150));
        let text = "[storage]\nwal_limit_bytes = 2097152\nwal_checkpoint_wait_ms = 50\n";
        assert_eq!(sqlite(&Config::from_toml(text, "f.toml", None).unwrap()).wal_limit_bytes, 2 << 20);
        for (text, names) in [
            ("[storage]\nwal_limit_bytes = 4096\n", "storage.wal_limit_bytes"),
            ("[storage]\nwal_checkpoint_wait_ms = 5000\n", "storage.wal_checkpoint_wait_ms"),
            ("[storage]\nwal_checkpoint_wait_ms = 0\n", "storage.wal_checkpoint_wait_ms"),
        ] {
            let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
            assert!(err.contains(names), "{text}: {err}");
        }
    }

    #[test]
    fn an_unknown_key_is_named() {
        let err = format!("{:#}", Config::from_toml("[storage]\nurll = \"x\"\n", "f.toml", None).unwrap_err());
        assert!(err.contains("urll"), "{err}");
    }

    #[test]
    fn a_source_without_secrets_is_refused_with_its_index() {
        let text = "[[sources]]\nname = \"p\"\nscheme = \"stripe\"\nformat = \"stripe\"\n";
        let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
        assert!(err.contains("sources[0] (p)") && err.contains("secret"), "{err}");
    }

    fn sqlite(c: &Config) -> &SqliteOptions {
        match &c.storage {
            StorageConfig::Sqlite(o) => o,
            other => panic!("expected sqlite: {other:?}"),
        }
    }

    fn postgres(c: &Config) -> &PgOptions {
        match &c.storage {
            StorageConfig::Postgres(o) => o,
            other => panic!("expected postgres: {other:?}"),
        }
    }

    #[test]
    fn group_commit_off_means_batches_of_one_each_with_its_own_fsync() {
        let c = Config::from_toml("[storage]\ngroup_commit = false\n", "t", None).unwrap();
        assert_eq!(sqlite(&c).batch_max, 1);
        assert_eq!(sqlite(&c).sync, CommitSync::InCommit);
        let c = Config::from_toml("", "t", None).unwrap();
        assert_eq!(sqlite(&c).sync, CommitSync::Pipelined);
    }

    #[test]
    fn sqlite_reads_get_four_connections_and_five_seconds_by_default_and_both_must_be_positive() {
        let c = Config::from_toml("", "t", None).unwrap();
        assert_eq!((sqlite(&c).read_connections, sqlite(&c).read_timeout_ms), (4, 5_000));
        let c = Config::from_toml("[storage]\nread_connections = 8\nread_timeout_ms = 250\n", "t", None).unwrap();
        assert_eq!((sqlite(&c).read_connections, sqlite(&c).read_timeout_ms), (8, 250));
        for text in ["read_connections = 0", "read_timeout_ms = 0"] {
            let err = format!("{:#}", Config::from_toml(&format!("[storage]\n{text}\n"), "t", None).unwrap_err());
            assert!(err.contains("storage.read_connections and storage.read_timeout_ms"), "{text}: {err}");
        }
    }

    #[test]
    fn a_postgres_url_selects_postgres_with_the_pool_keys() {
        let text = "[storage]\nurl = \"postgres://payhook:s3cret@db.internal:6543/hooks?options=-csearch_path%3Dph\"\n\
                    pool_size = 24\nstatement_timeout_ms = 750\nbatch_max = 100\n";
        let c = Config::from_toml(text, "t", None).unwrap();
        let o = postgres(&c);
        assert_eq!((o.pool_size, o.writers, o.statement_timeout_ms, o.batch_max), (24, 4, 750, 100));
        assert_eq!(o.config.get_dbname(), Some("hooks"));
        assert_eq!(o.config.get_options(), Some("-csearch_path=ph"));
        let shown = format!("{} {c:?}", c.storage.describe());
        assert!(shown.contains("db.internal:6543/hooks (tls: prefer, ") && !shown.contains("s3cret"), "{shown}");

        let c =
            Config::from_toml("[storage]\nurl = \"postgresql://u@h/d\"\ngroup_commit = false\n", "t", None).unwrap();
        assert_eq!((postgres(&c).batch_max, postgres(&c).pool_size), (1, 16), "the defaults file's pool_size");
    }

    #[test]
    fn the_postgres_tls_mode_comes_from_the_url_and_is_shown_with_the_storage() {
        let text = "[storage]\nurl = \"postgres://payhook:s3cret@db.example/payhook?sslmode=verify-full\"\n";
        let c = Config::from_toml(text, "t", None).unwrap();
        assert_eq!(postgres(&c).tls.mode(), payhook_postgres::SslMode::VerifyFull);
        let shown = c.storage.describe();
        assert!(shown.starts_with("postgres://payhook@db.example:5432/payhook (tls: verify-full, "), "{shown}");
    }

    #[test]
    fn bad_postgres_settings_are_named_without_echoing_the_url() {
        for (text, key) in [
            ("url = \"mysql://u:pw@h/d\"", "storage.url"),
            ("url = \"postgres://u:pw@h:notaport/d\"", "storage.url"),
            ("url = \"postgres://u:pw@h/d?sslmode=verfy-full\"", "storage.url: sslmode \"verfy-full\" is not one of"),
            (
                "url = \"postgres://u:pw@h/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem\"",
                "/nonexistent/ca.pem",
            ),
            ("url = \"postgres://u:pw@h/d\"\npool_size = 0", "storage.pool_size"),
            ("url = \"postgres://u:pw@h/d\"\npool_size = 4\nwriters = 5", "storage.writers"),
        ] {
            let err = format!("{:#}", Config::from_toml(&format!("[storage]\n{text}\n"), "t", None).unwrap_err());
            assert!(err.contains(key) && !err.contains("pw"), "{text}: {err}");
        }
    }

    #[test]
    fn the_log_format_is_text_by_default_and_may_be_json() {
        assert_eq!(Config::from_toml("", "t", None).unwrap().log_format, LogFormat::Text);
        let c = Config::from_toml("[log]\nformat = \"json\"\n", "t", None).unwrap();
        assert_eq!(c.log_format, LogFormat::Json);
        let err = format!("{:#}", Config::from_toml("[log]\nformat = \"xml\"\n", "t", None).unwrap_err());
        assert!(err.contains("log.format"), "{err}");
    }

    #[test]
    fn sink_and_alert_urls_are_only_ever_shown_redacted() {
        let text = "[alerts]\nurl = \"https://hooks.slack.com/services/T0/B0/s3cr3t-PLANTED\"\n\n[[sinks]]\n\
                    name = \"shop\"\nurl = \"https://u:s3cr3t-PLANTED@shop.example:8443/hooks/in?token=s3cr3t-PLANTED\"\n\
                    kinds = [\"*\"]\n";
        let c = Config::from_toml(text, "t", None).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t-PLANTED"), "{shown}");
        assert!(shown.contains("https://shop.example:8443/hooks/…"), "{shown}");
        assert!(shown.contains("https://hooks.slack.com/services/…"), "{shown}");
        for (text, key) in [
            (
                "[[sinks]]\nname = \"shop\"\nurl = \"ftp://s3cr3t-PLANTED@host/x\"\nkinds = [\"*\"]\n",
                "sinks[0] (shop): url",
            ),
            (
                "[[sinks]]\nname = \"shop\"\nurl = \"https://host:99999/s3cr3t-PLANTED\"\nkinds = [\"*\"]\n",
                "sinks[0] (shop): url",
            ),
            ("[alerts]\nurl = \"hooks.slack.com/services/s3cr3t-PLANTED\"\n", "alerts.url"),
        ] {
            let err = format!("{:#}", Config::from_toml(text, "t", None).unwrap_err());
            assert!(err.contains(key) && !err.contains("s3cr3t-PLANTED"), "{text}: {err}");
        }
    }

    #[test]
    fn rfc_9421_sources_require_the_default_components_unless_they_list_others_with_the_body() {
        let source = |extra: &str| {
            format!(
                "[[sources]]\nname = \"acq\"\nscheme = \"http-message-signatures\"\nformat = \"generic\"\n\
                 secrets = [\"hmac-sha256:k1:c2VjcmV0\"]\n{extra}"
            )
        };
        let c = Config::from_toml(&source(""), "t", None).unwrap();
        assert_eq!(c.settings.sources[0].verifier.required_components(), DEFAULT_REQUIRED_COMPONENTS);
        let c = Config::from_toml(
            &source("required_components = [\"@method\", \"@path\", \"@query\", \"content-digest\", \"x-shop\"]\n"),
            "t",
            None,
        )
        .unwrap();
        assert_eq!(
            c.settings.sources[0].verifier.required_components(),
            ["@method", "@path", "@query", "content-digest", "x-shop"]
        );
        for (extra, says) in [
            ("required_components = [\"@method\", \"@authority\", \"@path\"]\n", "content-digest"),
            ("required_components = [\"@Method\", \"content-digest\"]\n", "@Method"),
            ("required_components = [\"@status\", \"content-digest\"]\n", "@status"),
            ("required_components = [\"content-digest\", \"content-digest\"]\n", "twice"),
        ] {
            let err = format!("{:#}", Config::from_toml(&source(extra), "f.toml", None).unwrap_err());
            assert!(err.starts_with("f.toml:6: sources[0] (acq): required_components") && err.contains(says), "{err}");
        }
        let text = "[[sources]]\nname = \"p\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\n\
                    required_components = [\"content-digest\"]\n";
        let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
        assert!(err.contains("required_components") && err.contains("http-message-signatures"), "{err}");
    }

    #[test]
    fn an_unknown_fsync_mode_is_named() {
        let err = format!("{:#}", Config::from_toml("[storage]\nfsync = \"never\"\n", "t", None).unwrap_err());
        assert!(err.contains("storage.fsync"), "{err}");
    }

    const TOKEN_40: &str = "0123456789abcdef0123456789abcdef01234567";

    fn with_env(text: &str, env: &[(&str, &str)]) -> Result<Config> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Config::from_toml_and_env(text, "f.toml", None, env)
    }

    fn token(c: &Config) -> Option<&str> {
        c.settings.api_token.as_ref().map(Secret::expose)
    }

    #[test]
    fn an_api_token_shorter_than_24_characters_is_refused_naming_the_setting() {
        let err = format!("{:#}", with_env("", &[("PAYHOOK_API_TOKEN", "0123456789")]).unwrap_err());
        assert!(
            err.contains("server.api_token_env (PAYHOOK_API_TOKEN): the API token must be at least 24 characters"),
            "{err}"
        );
        assert!(!err.contains("0123456789"), "the token is echoed: {err}");
        // Whitespace does not count: 23 characters and a newline are still too short.
        let err =
            format!("{:#}", with_env("", &[("PAYHOOK_API_TOKEN", &format!("{}\n", &TOKEN_40[..23]))]).unwrap_err());
        assert!(err.contains("at least 24 characters"), "{err}");
        let text = "[server]\nlisten = \"127.0.0.1:8080\"\napi_token = \"x\"\n";
        let err = format!("{:#}", with_env(text, &[]).unwrap_err());
        assert!(err.starts_with("f.toml:3: server.api_token: the API token must be at least 24"), "{err}");
        // Exactly 24 is enough.
        let c = with_env("", &[("PAYHOOK_API_TOKEN", &TOKEN_40[..24])]).unwrap();
        assert_eq!(token(&c), Some(&TOKEN_40[..24]));
    }

    #[test]
    fn the_api_token_is_trimmed_of_surrounding_whitespace() {
        let c = with_env("", &[("PAYHOOK_API_TOKEN", &format!("{TOKEN_40}\n"))]).unwrap();
        assert_eq!(token(&c), Some(TOKEN_40));
        assert_eq!(c.api_token_origin, TokenOrigin::Env("PAYHOOK_API_TOKEN".into()));
        let c = with_env(&format!("[server]\napi_token = \"  {TOKEN_40} \"\n"), &[]).unwrap();
        assert_eq!((token(&c), &c.api_token_origin), (Some(TOKEN_40), &TokenOrigin::Inline));
    }

    #[test]
    fn an_api_token_env_naming_an_unset_variable_is_an_error_unless_it_is_the_default() {
        let text = "[server]\napi_token_env = \"SOME_UNSET_VAR\"\n";
        let err = format!("{:#}", with_env(text, &[]).unwrap_err());
        assert!(
            err.starts_with("f.toml:2: server.api_token_env (SOME_UNSET_VAR): the environment variable SOME_UNSET_VAR"),
            "{err}"
        );
        let c = with_env(text, &[("SOME_UNSET_VAR", TOKEN_40)]).unwrap();
        assert_eq!((token(&c), &c.api_token_origin), (Some(TOKEN_40), &TokenOrigin::Env("SOME_UNSET_VAR".into())));
        // An inline token wins, and then the variable is not needed.
        let inline = format!("{text}api_token = \"{TOKEN_40}\"\n");
        assert_eq!(with_env(&inline, &[]).unwrap().api_token_origin, TokenOrigin::Inline);
        // The default variable unset: no token, the API closed.
        let c = with_env("", &[]).unwrap();
        assert_eq!((token(&c), &c.api_token_origin), (None, &TokenOrigin::Unset(Some(DEFAULT_TOKEN_ENV.into()))));
        let c = with_env("[server]\napi_token_env = \"\"\n", &[]).unwrap();
        assert_eq!((token(&c), &c.api_token_origin), (None, &TokenOrigin::Unset(None)));
    }

    #[test]
    fn trusted_proxies_and_the_throttle_are_resolved_and_checked() {
        let c = with_env("", &[]).unwrap();
        let auth = &c.settings.auth;
        assert!(auth.trusted_proxies.is_empty());
        assert_eq!((auth.failures_per_minute, auth.failure_burst, auth.max_addresses), (10, 10, 10_000));

        let text = "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"127.0.0.1\", \"fd00::/8\"]\n\
                    auth_failures_per_minute = 5\nauth_failure_burst = 20\nauth_throttle_max_addresses = 100\n";
        let auth = with_env(text, &[]).unwrap().settings.auth;
        let proxies: Vec<String> = auth.trusted_proxies.iter().map(ToString::to_string).collect();
        assert_eq!(proxies, ["10.0.0.0/8", "127.0.0.1/32", "fd00::/8"]);
        assert_eq!((auth.failures_per_minute, auth.failure_burst, auth.max_addresses), (5, 20, 100));

        let err =
            format!("{:#}", with_env("[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"proxy\"]\n", &[]).unwrap_err());
        assert!(err.starts_with("f.toml:2: server.trusted_proxies[1]: \"proxy\" is not an IP address"), "{err}");
        let err = format!("{:#}", with_env("[server]\ntrusted_proxies = [\"10.1.0.0/8\"]\n", &[]).unwrap_err());
        assert!(err.contains("server.trusted_proxies[0]") && err.contains("10.0.0.0/8"), "{err}");
        for key in ["auth_failures_per_minute", "auth_failure_burst", "auth_throttle_max_addresses"] {
            let err = format!("{:#}", with_env(&format!("[server]\n{key} = 0\n"), &[]).unwrap_err());
            assert!(err.contains(&format!("server.{key}: must be positive")), "{err}");
        }
    }
}
