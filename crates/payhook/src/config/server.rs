//! The `[server]` table: the listener's bounds and TLS, the API token and its rules, the throttle on failed
//! attempts at it.

use super::*;
use payhook_server::Scope;
use payhook_server::settings::{AccessSettings, IdentityMatch, IdentityRule, NamedToken};
use sha2::{Digest, Sha256};

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
    #[serde(default)]
    pub(super) tokens: Vec<RawToken>,
    pub(super) identity_header: String,
    #[serde(default)]
    pub(super) identities: Vec<RawIdentity>,
}

/// One `[[server.tokens]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToken {
    name: String,
    scopes: Vec<String>,
    token_sha256: Option<String>,
    token_env: Option<String>,
    not_after: Option<toml::Value>,
}

/// One `[[server.identities]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdentity {
    name: Option<String>,
    domain: Option<String>,
    scopes: Vec<String>,
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
/// The shortest token accepted, in characters, once surrounding whitespace is trimmed.
pub use payhook_server::MIN_TOKEN_CHARS;

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

/// The highest of `scopes` (each `read`, `operate` or `admin`); at least one.
fn highest_scope(scopes: &[String]) -> Result<Scope> {
    let mut highest = None;
    for name in scopes {
        let scope = Scope::parse(name.trim())
            .with_context(|| format!("scopes: unknown scope {name:?} (the scopes are read, operate and admin)"))?;
        highest = highest.max(Some(scope));
    }
    highest.context("scopes: give at least one of read, operate and admin")
}

/// `[[server.tokens]]`, `server.identity_header` and `[[server.identities]]`, checked: unique names, a known scope
/// each, a digest of 64 hex digits or a set variable holding a token of at least [`MIN_TOKEN_CHARS`], an RFC 3339
/// `not_after`. Each message names its table (`server.tokens[1] (grafana): scopes: …`), so `config check` gives
/// its line.
pub(super) fn resolve_access(server: &RawServer, var: &dyn Fn(&str) -> Option<String>) -> Result<AccessSettings> {
    let mut tokens: Vec<NamedToken> = Vec::new();
    for (i, raw) in server.tokens.iter().enumerate() {
        let name = raw.name.trim();
        let at = format!("server.tokens[{i}] ({name})");
        if name.is_empty() {
            bail!("server.tokens[{i}]: name: must not be empty");
        }
        if name == payhook_server::API_TOKEN_NAME || tokens.iter().any(|t| t.name == name) {
            bail!(
                "{at}: name: {name:?} is already the name of another token (names must be unique; api_token is server.api_token's)"
            );
        }
        let scope = highest_scope(&raw.scopes).with_context(|| at.clone())?;
        let sha256: [u8; 32] = match (&raw.token_sha256, &raw.token_env) {
            (Some(hex_digest), None) => {
                let digest = hex::decode(hex_digest.trim()).ok().and_then(|d| <[u8; 32]>::try_from(d).ok());
                digest.with_context(|| {
                    format!(
                        "{at}: token_sha256: must be 64 hexadecimal digits, the SHA-256 of the token \
                         (`printf %s \"$TOKEN\" | sha256sum`)"
                    )
                })?
            }
            (None, Some(env)) => {
                let value = var(env.trim())
                    .with_context(|| format!("{at}: token_env: the environment variable {env} is not set"))?;
                let token = value.trim();
                if token.chars().count() < MIN_TOKEN_CHARS {
                    bail!("{at}: token_env ({env}): the token must be at least {MIN_TOKEN_CHARS} characters");
                }
                Sha256::digest(token.as_bytes()).into()
            }
            _ => bail!("{at}: give exactly one of token_sha256 and token_env"),
        };
        let not_after_ms = match &raw.not_after {
            None => None,
            Some(value) => {
                let text = match value {
                    toml::Value::String(text) => text.clone(),
                    toml::Value::Datetime(at) => at.to_string(),
                    other => other.to_string(),
                };
                let secs = super::sources::rfc3339_secs(&text).with_context(|| {
                    format!("{at}: not_after: {text:?} is not an RFC 3339 date-time with a zone, such as \"2027-06-30T00:00:00Z\"")
                })?;
                Some(secs.saturating_mul(1000))
            }
        };
        tokens.push(NamedToken { name: name.to_owned(), scope, sha256, not_after_ms });
    }
    let identity_header = match server.identity_header.trim() {
        "" => None,
        name if name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) => {
            Some(name.to_ascii_lowercase())
        }
        name => bail!("server.identity_header: {name:?} is not a header name"),
    };
    let mut identities = Vec::new();
    for (i, raw) in server.identities.iter().enumerate() {
        let at = format!("server.identities[{i}]");
        let matches = match (raw.name.as_deref().map(str::trim), raw.domain.as_deref().map(str::trim)) {
            (Some(name), None) if !name.is_empty() => IdentityMatch::Exact(name.to_owned()),
            (None, Some(domain)) if !domain.is_empty() && !domain.contains('@') => {
                IdentityMatch::Domain(domain.to_owned())
            }
            (None, Some(domain)) if !domain.is_empty() => {
                bail!("{at}: domain: {domain:?} is a domain without `@` (example.com), or use name for one identity")
            }
            _ => bail!("{at}: give exactly one of name (one identity) and domain (every identity @ that domain)"),
        };
        let scope = highest_scope(&raw.scopes).with_context(|| at.clone())?;
        identities.push(IdentityRule { matches, scope });
    }
    if !identities.is_empty() && identity_header.is_none() {
        bail!("server.identities: set server.identity_header too (the header the proxy names the user in)");
    }
    if identity_header.is_some() && server.trusted_proxies.is_empty() {
        bail!(
            "server.identity_header: set server.trusted_proxies too (the header is believed only from a trusted proxy)"
        );
    }
    Ok(AccessSettings { tokens, identity_header, identities })
}
