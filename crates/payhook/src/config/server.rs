//! The `[server]` table: the listener's bounds and TLS, the API token and its rules, the throttle on failed
//! attempts at it.

use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) listen: String,
    pub(super) api_token: Option<String>,
    pub(super) api_token_env: Option<String>,
    pub(super) body_limit_bytes: usize,
    pub(super) body_timeout_ms: u64,
    pub(super) header_read_timeout_ms: u64,
    pub(super) keep_alive_idle_ms: u64,
    pub(super) request_timeout_ms: u64,
    pub(super) max_connections: usize,
    /// Unset: half of `max_connections`.
    pub(super) max_connections_per_client: Option<usize>,
    pub(super) body_buffer_bytes: u64,
    pub(super) max_header_bytes: usize,
    pub(super) max_headers: usize,
    pub(super) shutdown_grace_ms: u64,
    pub(super) public_openapi: bool,
    pub(super) metrics_listen: String,
    pub(super) tls: Option<RawTls>,
    pub(super) trusted_proxies: Vec<String>,
    pub(super) auth_failures_per_minute: u32,
    pub(super) auth_failure_burst: u32,
    pub(super) auth_throttle_max_addresses: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) cert_path: PathBuf,
    pub(super) key_path: PathBuf,
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

/// The public listener's bounds; each must be positive, the header limit at least hyper's minimum buffer, and the
/// bounds must fit one another: a client's share within the cap, a body of the limit within the buffer, a body's
/// deadline and a bulk replay within the request's.
pub(super) fn resolve_listener(raw: &RawServer, replay: &ReplaySettings) -> Result<ListenerSettings> {
    for (key, value) in [
        ("header_read_timeout_ms", raw.header_read_timeout_ms),
        ("keep_alive_idle_ms", raw.keep_alive_idle_ms),
        ("body_timeout_ms", raw.body_timeout_ms),
        ("request_timeout_ms", raw.request_timeout_ms),
        ("max_connections", raw.max_connections as u64),
        ("max_headers", raw.max_headers as u64),
        ("body_buffer_bytes", raw.body_buffer_bytes),
    ] {
        if value == 0 {
            bail!("server.{key}: must be positive");
        }
    }
    if raw.max_header_bytes < 8192 {
        bail!(
            "server.max_header_bytes must be at least 8192 (a request head needs room), not {}",
            raw.max_header_bytes
        );
    }
    let max_connections_per_client = match raw.max_connections_per_client {
        None => (raw.max_connections / 2).max(1),
        Some(0) => bail!("server.max_connections_per_client: must be positive"),
        Some(n) if n > raw.max_connections => bail!(
            "server.max_connections_per_client ({n}) must not exceed server.max_connections ({})",
            raw.max_connections
        ),
        Some(n) => n,
    };
    if raw.body_buffer_bytes < raw.body_limit_bytes as u64 {
        bail!(
            "server.body_buffer_bytes ({}) must be at least server.body_limit_bytes ({}), or a body of the limit \
             could never be read",
            raw.body_buffer_bytes,
            raw.body_limit_bytes
        );
    }
    if raw.request_timeout_ms < raw.body_timeout_ms {
        bail!(
            "server.request_timeout_ms ({}) must be at least server.body_timeout_ms ({}): a request's deadline \
             includes reading its body",
            raw.request_timeout_ms,
            raw.body_timeout_ms
        );
    }
    // A bulk replay paces itself at replay.per_second for up to replay.max_per_call events.
    let replay_ms = u64::from(replay.max_per_call) * 1000 / u64::from(replay.per_second.max(1));
    if raw.request_timeout_ms <= replay_ms {
        bail!(
            "server.request_timeout_ms ({}) must be longer than a bulk replay of replay.max_per_call events at \
             replay.per_second ({replay_ms} ms), or a full bulk replay would always be stopped",
            raw.request_timeout_ms
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
        body_timeout_ms: raw.body_timeout_ms,
        request_timeout_ms: raw.request_timeout_ms,
        max_connections_per_client,
        body_buffer_bytes: raw.body_buffer_bytes,
        shutdown_grace_ms: raw.shutdown_grace_ms,
        tls,
    })
}

/// The API token: `server.api_token` when set, else the variable `server.api_token_env` names, read through `var`;
/// trimmed of surrounding whitespace (a trailing newline from a secrets file is not part of it), and at least
/// [`MIN_TOKEN_CHARS`] long.
pub(super) fn resolve_api_token(
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

pub(super) fn resolve_auth(server: &RawServer) -> Result<AuthSettings> {
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
