//! Who may call the operator surfaces, per configuration generation: every token (the `api_token`, an admin
//! token, and the named `[[server.tokens]]`) as a SHA-256 digest with its scope and expiry, and the identities a
//! trusted proxy vouches for. [`crate::runtime::auth::AuthGate`] compares and throttles; this module only knows
//! what is configured.
//!
//! Invariant: a token is compared by its digest against every configured digest, each in constant time and
//! without stopping at a match, so neither which token matched nor how much of a guess was right shows in the time
//! taken. A token shorter than [`MIN_TOKEN_CHARS`] never matches, whatever digest is configured.

use crate::base::ip_range::IpRange;
use crate::base::scope::Scope;
use crate::base::settings::{AccessSettings, IdentityRule, Settings};
use axum::http::{HeaderMap, HeaderName};
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use subtle::ConstantTimeEq;

/// The shortest token accepted, in characters, once surrounding whitespace is trimmed.
pub const MIN_TOKEN_CHARS: usize = 24;

/// The actor name of `server.api_token` in logs and the audit trail.
pub const API_TOKEN_NAME: &str = "api_token";

/// How a caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// A bearer token, or the dashboard session a token opened.
    Token,
    /// A trusted proxy's identity header.
    Identity,
}

/// An authenticated caller: its name (a token's name or a proxy identity), its scope, and where it called from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name or the identity.
    pub actor: String,
    /// What it may do.
    pub scope: Scope,
    /// How it proved it.
    pub via: Via,
    /// The client's address, as the throttle knows it (`None` when the connection's is unknown).
    pub address: Option<String>,
}

/// One token, ready to compare.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credential {
    pub(crate) name: String,
    pub(crate) scope: Scope,
    sha256: [u8; 32],
    pub(crate) not_after_ms: Option<i64>,
}

/// One generation's credentials.
#[derive(Clone, Default)]
pub struct Credentials {
    tokens: Vec<Credential>,
    identity_header: Option<HeaderName>,
    identities: Vec<IdentityRule>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tokens.iter().map(|t| t.name.as_str()).collect();
        f.debug_struct("Credentials").field("tokens", &names).field("identity_header", &self.identity_header).finish()
    }
}

/// What a request's identity header says, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Vouched {
    /// No identity header is configured, or the request carries none.
    Nothing,
    /// The header came from a peer that is not a trusted proxy: ignored (and counted).
    Untrusted,
    /// A trusted proxy names this identity, which no `[[server.identities]]` rule gives a scope.
    Unknown(String),
    /// A trusted proxy names this identity, holding this scope.
    Known(String, Scope),
}

impl Credentials {
    /// The credentials `settings` configure: `api_token` (as [`API_TOKEN_NAME`], admin) and the named tokens.
    pub fn of(settings: &Settings) -> Self {
        let mut tokens: Vec<Credential> = settings
            .api_token
            .iter()
            .map(|t| t.expose().trim())
            .filter(|t| !t.is_empty())
            .map(|t| Credential {
                name: API_TOKEN_NAME.to_owned(),
                scope: Scope::Admin,
                sha256: Sha256::digest(t.as_bytes()).into(),
                not_after_ms: None,
            })
            .collect();
        let AccessSettings { tokens: named, identity_header, identities } = &settings.access;
        tokens.extend(named.iter().map(|t| Credential {
            name: t.name.clone(),
            scope: t.scope,
            sha256: t.sha256,
            not_after_ms: t.not_after_ms,
        }));
        let identity_header = identity_header.as_deref().and_then(|h| HeaderName::from_bytes(h.as_bytes()).ok());
        Self { tokens, identity_header, identities: identities.clone() }
    }

    /// Whether no token and no identity can open the operator surfaces (then they answer 401 to everyone).
    pub fn is_closed(&self) -> bool {
        self.tokens.is_empty() && (self.identity_header.is_none() || self.identities.is_empty())
    }

    /// The names of the tokens, in the order configured.
    pub fn token_names(&self) -> impl Iterator<Item = &str> {
        self.tokens.iter().map(|t| t.name.as_str())
    }

    /// The token named `name`.
    pub(crate) fn token(&self, name: &str) -> Option<&Credential> {
        self.tokens.iter().find(|t| t.name == name)
    }

    /// The token `given` is (trimmed), if any: every configured digest is compared, in constant time each.
    pub(crate) fn find(&self, given: &str) -> Option<&Credential> {
        let given = given.trim();
        let digest = Sha256::digest(given.as_bytes());
        let mut found = None;
        for token in &self.tokens {
            if bool::from(token.sha256.as_slice().ct_eq(digest.as_slice())) {
                found = Some(token);
            }
        }
        found.filter(|_| given.chars().count() >= MIN_TOKEN_CHARS)
    }

    /// What the identity header of a request from `peer` says: believed only when `peer` is a trusted proxy.
    pub(crate) fn vouched(&self, headers: &HeaderMap, peer: Option<IpAddr>, trusted: &[IpRange]) -> Vouched {
        let Some(name) = &self.identity_header else { return Vouched::Nothing };
        let Some(value) = headers.get(name) else { return Vouched::Nothing };
        let from_proxy = peer.is_some_and(|p| trusted.iter().any(|r| r.contains(p.to_canonical())));
        if !from_proxy {
            return Vouched::Untrusted;
        }
        let identity = String::from_utf8_lossy(value.as_bytes()).trim().to_owned();
        if identity.is_empty() {
            return Vouched::Nothing;
        }
        match self.identities.iter().filter(|r| r.names(&identity)).map(|r| r.scope).max() {
            Some(scope) => Vouched::Known(identity, scope),
            None => Vouched::Unknown(identity),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::settings::{IdentityMatch, NamedToken};
    use payhook_core::signature::Secret;

    const ADMIN: &str = "admin-token-0123456789abcdef";
    const READ: &str = "read-token-0123456789abcdefgh";

    fn credentials() -> Credentials {
        let mut settings = Settings::new(Vec::new());
        settings.api_token = Some(Secret::new(ADMIN));
        settings.access.tokens.push(NamedToken {
            name: "grafana".into(),
            scope: Scope::Read,
            sha256: Sha256::digest(READ.as_bytes()).into(),
            not_after_ms: Some(1_000),
        });
        settings.access.tokens.push(NamedToken {
            name: "short".into(),
            scope: Scope::Admin,
            sha256: Sha256::digest(b"short").into(),
            not_after_ms: None,
        });
        settings.access.identity_header = Some("X-Forwarded-Email".into());
        settings.access.identities = vec![
            IdentityRule { matches: IdentityMatch::Domain("example.com".into()), scope: Scope::Read },
            IdentityRule { matches: IdentityMatch::Exact("oncall@example.com".into()), scope: Scope::Operate },
        ];
        Credentials::of(&settings)
    }

    #[test]
    fn a_token_is_found_by_its_digest_trimmed_and_a_short_one_never() {
        let c = credentials();
        assert_eq!(
            c.find(&format!(" {ADMIN}\n")).map(|t| (t.name.as_str(), t.scope)),
            Some(("api_token", Scope::Admin))
        );
        assert_eq!(c.find(READ).map(|t| (t.name.as_str(), t.not_after_ms)), Some(("grafana", Some(1_000))));
        assert!(c.find("short").is_none(), "below the minimum length, even with its digest configured");
        for near in [&ADMIN[1..], &format!("{ADMIN}8"), &ADMIN.to_uppercase(), ""] {
            assert!(c.find(near).is_none(), "{near:?}");
        }
        assert_eq!(c.token_names().collect::<Vec<_>>(), ["api_token", "grafana", "short"]);
    }

    #[test]
    fn an_identity_is_believed_only_from_a_trusted_proxy_and_holds_its_highest_rule() {
        let c = credentials();
        let trusted = [IpRange::parse("10.0.0.0/8").expect("range")];
        let proxy: IpAddr = "10.1.2.3".parse().expect("ip");
        let stranger: IpAddr = "192.0.2.1".parse().expect("ip");
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-email", v.parse().expect("value"));
            h
        };
        assert_eq!(c.vouched(&HeaderMap::new(), Some(proxy), &trusted), Vouched::Nothing);
        assert_eq!(c.vouched(&with("ann@example.com"), Some(stranger), &trusted), Vouched::Untrusted);
        assert_eq!(c.vouched(&with("ann@example.com"), None, &trusted), Vouched::Untrusted);
        assert_eq!(
            c.vouched(&with("Ann@Example.COM"), Some(proxy), &trusted),
            Vouched::Known("Ann@Example.COM".into(), Scope::Read)
        );
        assert_eq!(
            c.vouched(&with("oncall@example.com"), Some(proxy), &trusted),
            Vouched::Known("oncall@example.com".into(), Scope::Operate)
        );
        assert_eq!(
            c.vouched(&with("eve@example.com.evil"), Some(proxy), &trusted),
            Vouched::Unknown("eve@example.com.evil".into())
        );
        assert_eq!(c.vouched(&with("@example.com"), Some(proxy), &trusted), Vouched::Unknown("@example.com".into()));
    }
}
