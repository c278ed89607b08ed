//! Configuration in layers: documented defaults (`payhook.default.toml`, compiled in), then the user's file.
//! The raw file is a separate type from the resolved settings; resolving validates everything and names the key
//! of each problem.
//!
//! - `reload`: reading the file again for a running server, and what a reload may not change.
//! - `server`: the `[server]` table (listener bounds and TLS, the API token and its throttle).

use anyhow::{Context, Result, bail};
use payhook_core::event::SourceName;
use payhook_core::format::{DeclaredFormat, Format, FormatSpec};
use payhook_core::preset::Preset;
use payhook_core::retry::RetryPolicy;
use payhook_core::signature::{
    DEFAULT_REQUIRED_COMPONENTS, DeclaredScheme, Encoding, HmacAlgorithm, Scheme, Secret, SignatureSpec, Verifier,
};
use payhook_postgres::PgOptions;
use payhook_server::settings::{AlertSettings, ConfirmSettings, DispatcherSettings, ReplaySettings};
use payhook_server::{
    AuthSettings, IpRange, ListenerSettings, RetentionSettings, SecretUrl, Settings, SourceSettings, TlsSettings,
    WorkerSettings,
};
use payhook_sqlite::{CommitSync, SqliteOptions};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

mod reload;
mod retention;
mod server;
mod sinks;
mod storage;

use retention::{RawRetention, resolve_retention};
pub use server::TokenOrigin;
use server::{RawServer, resolve_api_token, resolve_auth, resolve_listener};
use sinks::{RawSink, resolve_sink};
use storage::{RawStorage, resolve_storage};

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    /// A built-in scheme or a preset; absent (or `"declared"`) with a `signature` table.
    scheme: Option<String>,
    /// The source's own signature rule.
    signature: Option<SignatureSpec>,
    /// What `{url}` stands for in a declared rule: the notification URL as registered with the provider.
    notification_url: Option<String>,
    format: RawFormat,
    /// Each a string, or `{ value = "…", not_after = "RFC 3339" }` for a secret being rotated out.
    #[serde(default)]
    secrets: Vec<toml::Value>,
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
    #[serde(default)]
    orders: payhook_server::settings::Orders,
    /// `"api"`: the effect is read from the provider's API (presets whose signature does not cover the body).
    confirm: Option<String>,
    /// The provider's access token for `confirm = "api"`, or the environment variable holding it.
    confirm_token: Option<String>,
    confirm_token_env: Option<String>,
    /// The API's base URL, when not the preset's (a sandbox, a test server).
    confirm_base_url: Option<String>,
    #[serde(default = "default_confirm_timeout_ms")]
    confirm_timeout_ms: u64,
    #[serde(default = "default_confirm_max_in_flight")]
    confirm_max_in_flight: usize,
}

fn default_confirm_timeout_ms() -> u64 {
    5_000
}
fn default_confirm_max_in_flight() -> usize {
    16
}

/// A source's format: a built-in format or a preset by name, or the source's own `[format]` table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawFormat {
    Named(String),
    Declared(Box<FormatSpec>),
}

/// The names `scheme = …` takes besides the presets.
pub const BUILT_IN_SCHEMES: [&str; 9] = [
    "stripe",
    "standard-webhooks",
    "github",
    "paystack",
    "shopify",
    "adyen",
    "braintree",
    "http-message-signatures",
    "hmac",
];

/// The scheme a source names, or declares in its `signature` table.
fn resolve_scheme(s: &mut RawSource) -> Result<Scheme> {
    let hmac_only = |key: &str, present: bool| -> Result<()> {
        if present {
            bail!("{key}: only the hmac scheme takes this key");
        }
        Ok(())
    };
    let name = s.scheme.as_deref().unwrap_or(if s.signature.is_some() { "declared" } else { "" });
    if name != "hmac" {
        hmac_only("header", s.header.is_some())?;
        hmac_only("algorithm", s.algorithm.is_some())?;
        hmac_only("encoding", s.encoding.is_some())?;
        hmac_only("prefix", s.prefix.is_some())?;
    }
    if s.signature.is_some() && name != "declared" {
        bail!("signature: a source with its own signature table has no scheme (or scheme = \"declared\")");
    }
    if s.notification_url.is_some() && (BUILT_IN_SCHEMES.contains(&name) || name.is_empty()) {
        bail!("notification_url: only a declared rule or a preset takes this key (it is what {{url}} stands for)");
    }
    if let Some(spec) = s.signature.take() {
        let scheme = DeclaredScheme::new("declared", spec, s.notification_url.clone())
            .map_err(|e| anyhow::anyhow!("signature.{e}"))?;
        return Ok(Scheme::Declared(std::sync::Arc::new(scheme)));
    }
    Ok(match name {
        "stripe" => Scheme::Stripe,
        "standard-webhooks" => Scheme::StandardWebhooks,
        "github" => Scheme::Github,
        "paystack" => Scheme::Paystack,
        "shopify" => Scheme::Shopify,
        "adyen" => Scheme::Adyen,
        "braintree" => Scheme::Braintree,
        "http-message-signatures" => Scheme::HttpMessageSignatures,
        "hmac" => Scheme::Hmac {
            header: s
                .header
                .take()
                .context("header: the hmac scheme needs the signature header's name")?
                .to_ascii_lowercase(),
            algorithm: s.algorithm.unwrap_or(HmacAlgorithm::Sha256),
            encoding: s.encoding.unwrap_or(Encoding::Hex),
            prefix: s.prefix.take().filter(|p| !p.is_empty()),
        },
        "" => {
            bail!("scheme: a source needs a scheme (a built-in one or a preset) or its own [sources.signature] table")
        }
        "declared" => bail!("scheme: \"declared\" needs a [sources.signature] table"),
        other => match Preset::get(other) {
            Some(preset) => match preset?.scheme(s.notification_url.clone())? {
                Some(scheme) => scheme,
                None => {
                    bail!("scheme: the {other} preset describes a payload format only; sign with a built-in scheme")
                }
            },
            None => bail!(
                "scheme: unknown scheme {other:?} (expected one of {}, a preset ({}), or a [sources.signature] table)",
                BUILT_IN_SCHEMES.join(", "),
                Preset::names()
                    .filter(|n| Preset::get(n).and_then(Result::ok).is_some_and(|p| p.signature.is_some()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    })
}

/// The format a source names, or declares in its `format` table.
fn resolve_format(format: &RawFormat) -> Result<Format> {
    match format {
        RawFormat::Declared(spec) => {
            let format = DeclaredFormat::new("declared", spec).map_err(|e| anyhow::anyhow!("format.{e}"))?;
            Ok(Format::Declared(std::sync::Arc::new(format)))
        }
        RawFormat::Named(name) => {
            if let Some(format) = Format::built_in(name) {
                return Ok(format);
            }
            match Preset::get(name) {
                Some(preset) => match preset?.format()? {
                    Some(format) => Ok(format),
                    None => bail!("format: the {name} preset has no payload format (it describes a signature only)"),
                },
                None => bail!(
                    "format: unknown format {name:?} (expected one of {}, a preset ({}), or a [sources.format] table)",
                    Format::ALL.iter().map(Format::name).collect::<Vec<_>>().join(", "),
                    Preset::names()
                        .filter(|n| Preset::get(n).and_then(Result::ok).is_some_and(|p| p.format.is_some()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
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
    settings.api_token = api_token;
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
    Ok(Config { file, listen, settings, storage, log_format, api_token_origin, merged })
}

fn resolve_source(mut s: RawSource) -> Result<SourceSettings> {
    let name = SourceName::parse(s.name.clone()).context("name")?;
    let scheme = resolve_scheme(&mut s)?;
    let format = resolve_format(&s.format)?;
    let mut secrets: Vec<Secret> = std::mem::take(&mut s.secrets)
        .into_iter()
        .enumerate()
        .map(|(i, v)| resolve_secret(v).with_context(|| format!("secrets[{i}]")))
        .collect::<Result<_>>()?;
    let now = payhook_server::now_ms() / 1000;
    if !secrets.is_empty() && secrets.iter().all(|s| s.not_after().is_some_and(|t| t < now)) {
        bail!("secrets: every secret is past its not_after, so every delivery would be refused; add the new secret");
    }
    if let Some(var) = &s.secrets_env {
        let value =
            std::env::var(var).with_context(|| format!("secrets_env: environment variable {var} is not set"))?;
        secrets.extend(value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(|v| Secret::new(v.to_owned())));
    }
    let mut verifier = Verifier::new(scheme, &secrets, s.tolerance_secs.unwrap_or(300)).context("secrets")?;
    if let Some(components) = s.required_components.take() {
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
    // No field that decides an effect may read a part the signature leaves out, unless the format says so by name.
    let signed = verifier.signed_parts();
    match &format {
        Format::Declared(d) => d.check_signed(&signed).map_err(|e| anyhow::anyhow!("format.{e}"))?,
        // Adyen's format reads only the fields each item's signature covers.
        Format::Adyen if *verifier.scheme() == Scheme::Adyen => {}
        built_in if !signed.body => bail!(
            "format: {} reads the body, which the {} signature does not cover, so anyone could change it; declare \
             a [sources.format] table instead, naming the fields it reads unsigned (unsigned = [...])",
            built_in.name(),
            verifier.scheme().name()
        ),
        _ => {}
    }
    let confirm = resolve_confirm(&mut s)?;
    Ok(SourceSettings { name, verifier, format, forward: s.forward, orders: s.orders, confirm })
}

/// `confirm = "api"` and its keys: required by a preset with a `[confirm]` table (its signature does not cover the
/// body, so its effects come from the provider's API), refused elsewhere.
fn resolve_confirm(s: &mut RawSource) -> Result<Option<ConfirmSettings>> {
    let preset = match &s.format {
        RawFormat::Named(name) => Preset::get(name).transpose()?,
        RawFormat::Declared(_) => None,
    };
    let confirm = preset.as_ref().map(Preset::confirm).transpose()?.flatten();
    let keys_without_confirm =
        s.confirm_token.is_some() || s.confirm_token_env.is_some() || s.confirm_base_url.is_some();
    match (s.confirm.as_deref(), confirm) {
        (None, None) if keys_without_confirm => {
            bail!("confirm: confirm_token, confirm_token_env and confirm_base_url go with confirm = \"api\"")
        }
        (None, None) => Ok(None),
        (Some(other), _) if other != "api" => bail!("confirm: {other:?} is not \"api\""),
        (Some(_), None) => {
            bail!("confirm: only a preset with a [confirm] table (mercado-pago) is confirmed from its provider's API")
        }
        (None, Some(_)) => {
            let name = preset.as_ref().map_or("", |p| p.name);
            bail!(
                "confirm: the {name} preset's signature does not cover the body, so its effects are read from the \
                 provider's API: set confirm = \"api\" and confirm_token_env = \"…\" (the account's access token)"
            )
        }
        (Some(_), Some(confirm)) => {
            let token = match (s.confirm_token.take(), &s.confirm_token_env) {
                (Some(_), Some(_)) => bail!("confirm_token: give the token or confirm_token_env, not both"),
                (Some(token), None) => token,
                (None, Some(var)) => std::env::var(var)
                    .with_context(|| format!("confirm_token_env: environment variable {var} is not set"))?,
                (None, None) => bail!("confirm_token_env: confirm = \"api\" needs the provider's access token"),
            };
            if token.trim().is_empty() {
                bail!("confirm_token: the access token is empty");
            }
            let base_url = match s.confirm_base_url.take() {
                Some(url) => {
                    let parsed = reqwest::Url::parse(&url)
                        .ok()
                        .filter(|u| matches!(u.scheme(), "https" | "http") && u.host().is_some());
                    if parsed.is_none() {
                        bail!("confirm_base_url: {url:?} is not an http(s) URL");
                    }
                    url.trim_end_matches('/').to_owned()
                }
                None => confirm.base_url().to_owned(),
            };
            if s.confirm_timeout_ms == 0 || s.confirm_max_in_flight == 0 {
                bail!("confirm_timeout_ms and confirm_max_in_flight must be positive");
            }
            Ok(Some(ConfirmSettings {
                confirm: std::sync::Arc::new(confirm),
                base_url,
                token: Secret::new(token.trim().to_owned()),
                timeout_ms: s.confirm_timeout_ms,
                max_in_flight: s.confirm_max_in_flight,
            }))
        }
    }
}

/// One entry of a source's `secrets`: `"…"`, or `{ value = "…", not_after = "2026-12-31T00:00:00Z" }` for a secret
/// accepted until that second (RFC 3339, with its zone; a TOML date-time without quotes is read the same way).
fn resolve_secret(entry: toml::Value) -> Result<Secret> {
    let mut table = match entry {
        toml::Value::String(value) => return Ok(Secret::new(value)),
        toml::Value::Table(table) => table,
        other => bail!("expected a string or {{ value = \"…\", not_after = \"…\" }}, not a {}", other.type_str()),
    };
    let value = match table.remove("value") {
        Some(toml::Value::String(value)) => value,
        Some(_) => bail!("value: must be a string"),
        None => bail!("value: missing (a secret with a not_after is written {{ value = \"…\", not_after = \"…\" }})"),
    };
    let not_after = match table.remove("not_after") {
        Some(toml::Value::String(text)) => text,
        Some(toml::Value::Datetime(at)) => at.to_string(),
        Some(_) => bail!("not_after: must be an RFC 3339 date-time such as \"2026-12-31T00:00:00Z\""),
        None => bail!("not_after: missing (without one, write the secret as a plain string)"),
    };
    if let Some(key) = table.keys().next() {
        bail!("{key}: unknown key (expected value and not_after)");
    }
    let at = rfc3339_secs(&not_after).with_context(|| {
        format!("not_after: {not_after:?} is not an RFC 3339 date-time with a zone, such as \"2026-12-31T00:00:00Z\"")
    })?;
    Ok(Secret::new(value).with_not_after(at))
}

/// Unix seconds of an RFC 3339 date-time, which (unlike the ISO 8601 providers send) must state its zone.
fn rfc3339_secs(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let zoned = matches!(b.last(), Some(b'Z' | b'z'))
        || (b.len() > 6 && matches!(b[b.len() - 6], b'+' | b'-') && b[b.len() - 3] == b':');
    if !zoned || b.len() < 20 {
        return None;
    }
    payhook_core::time::parse_iso8601(text)
}

#[cfg(test)]
mod tests;
