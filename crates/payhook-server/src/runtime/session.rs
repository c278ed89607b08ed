//! Dashboard sessions and CSRF tokens.
//!
//! Logging in with a token (or arriving with a trusted proxy's identity) creates a session: 32 random bytes, sent to the browser hex-encoded in an
//! `HttpOnly`, `SameSite=Strict` cookie (`Secure` when the request came over HTTPS through a proxy), and kept
//! in this process's memory under their SHA-256 with an expiry and a CSRF token of 32 more random bytes. The
//! cookie never carries the API token. Every state-changing request is a POST whose form carries the session's
//! CSRF token; it is compared in constant time and a mismatch is refused with 403 before any handler runs.
//!
//! Sessions die with the process, which also logs everyone out on restart; behind a load balancer without
//! sticky sessions, each instance knows only its own.

use crate::runtime::access::{Credentials, Principal, Via, Vouched};
use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "payhook_session";
/// How long a session lasts after login, in milliseconds.
pub(crate) const SESSION_TTL_MS: i64 = 8 * 3_600_000;
/// Sessions kept at most; the one closest to expiry makes room for a new login.
const MAX_SESSIONS: usize = 256;

/// The logged-in sessions of this process.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_hash: Mutex<HashMap<[u8; 32], Session>>,
}

/// One logged-in browser.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// SHA-256 of the cookie's value: what the session is kept under.
    id_hash: [u8; 32],
    /// The token every form of this session carries, hex.
    pub(crate) csrf: String,
    expires_at_ms: i64,
    /// A message for the next page shown (what the last action did).
    flash: Option<String>,
    /// Who logged in, with the scope they held then ([`Session::current`] asks the configuration in force).
    pub(crate) principal: Principal,
}

/// A fresh session and the cookie value that names it.
#[derive(Debug)]
pub(crate) struct NewSession {
    /// The cookie's value, hex.
    pub(crate) cookie_value: String,
    /// The session.
    pub(crate) session: Session,
}

fn random_hex() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes)?;
    Ok(hex::encode(bytes))
}

fn hash(cookie_value: &str) -> [u8; 32] {
    Sha256::digest(cookie_value.as_bytes()).into()
}

impl Sessions {
    /// Opens a session for `principal` at `now_ms`.
    pub(crate) fn create(&self, now_ms: i64, principal: Principal) -> Result<NewSession, getrandom::Error> {
        let cookie_value = random_hex()?;
        let session = Session {
            id_hash: hash(&cookie_value),
            csrf: random_hex()?,
            expires_at_ms: now_ms + SESSION_TTL_MS,
            flash: None,
            principal,
        };
        let mut map = self.by_hash.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|_, s| s.expires_at_ms > now_ms);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map.values().min_by_key(|s| s.expires_at_ms).map(|s| s.id_hash)
        {
            map.remove(&oldest);
        }
        map.insert(session.id_hash, session.clone());
        Ok(NewSession { cookie_value, session })
    }

    /// The live session the request's cookie names, if any.
    ///
    /// The map is keyed by the SHA-256 of the cookie, so how long the lookup takes says nothing about how much of
    /// a guessed value matches a real one; the stored hash is then compared in constant time all the same.
    pub(crate) fn get(&self, headers: &HeaderMap, now_ms: i64) -> Option<Session> {
        let value = cookie_value(headers)?;
        let id_hash = hash(value);
        let map = self.by_hash.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let session = map.get(&id_hash)?;
        (bool::from(session.id_hash.ct_eq(&id_hash)) && session.expires_at_ms > now_ms).then(|| session.clone())
    }

    /// Ends `session`.
    pub(crate) fn remove(&self, session: &Session) {
        self.by_hash.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&session.id_hash);
    }

    /// Leaves `message` for the next page `session` sees.
    pub(crate) fn set_flash(&self, session: &Session, message: String) {
        let mut map = self.by_hash.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = map.get_mut(&session.id_hash) {
            s.flash = Some(message);
        }
    }

    /// Takes the message left for `session`, if any.
    pub(crate) fn take_flash(&self, session: &Session) -> Option<String> {
        let mut map = self.by_hash.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get_mut(&session.id_hash).and_then(|s| s.flash.take())
    }
}

impl Session {
    /// The session's caller as the configuration in force sees it, or `None` when the session no longer stands: a
    /// token session's token must still be configured and unexpired (its scope now is the one that counts), and an
    /// identity session needs the same identity, still with a scope, vouched for in this request.
    pub(crate) fn current(&self, credentials: &Credentials, vouched: &Vouched, now_ms: i64) -> Option<Principal> {
        let scope = match self.principal.via {
            Via::Token => {
                let token = credentials.token(&self.principal.actor)?;
                if token.not_after_ms.is_some_and(|at| now_ms >= at) {
                    return None;
                }
                token.scope
            }
            Via::Identity => match vouched {
                Vouched::Known(actor, scope) if *actor == self.principal.actor => *scope,
                _ => return None,
            },
        };
        Some(Principal { scope, ..self.principal.clone() })
    }

    /// Whether the session's caller may do what `needed` guards (to show or hide a page's forms; the server
    /// checks again when one is sent).
    pub(crate) fn may(&self, needed: crate::base::scope::Scope) -> bool {
        self.principal.scope.allows(needed)
    }

    /// Whether `given` is this session's CSRF token, compared in constant time.
    pub(crate) fn csrf_matches(&self, given: &str) -> bool {
        !given.is_empty() && bool::from(given.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// The value of the session cookie in the request, if it sent one.
fn cookie_value(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Whether the browser reached payhook over HTTPS (payhook itself speaks plain HTTP behind a TLS proxy).
pub(crate) fn is_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.split(',').next().is_some_and(|first| first.trim().eq_ignore_ascii_case("https")))
}

/// The `Set-Cookie` value that hands `value` to the browser; `Secure` when it came over HTTPS, so a session
/// opened over HTTPS is never sent in clear.
pub(crate) fn set_cookie(value: &str, https: bool) -> String {
    let secure = if https { "; Secure" } else { "" };
    format!("{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{secure}", SESSION_TTL_MS / 1000)
}

/// The `Set-Cookie` value that makes the browser forget the session.
pub(crate) fn clear_cookie(https: bool) -> String {
    let secure = if https { "; Secure" } else { "" };
    format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn someone() -> Principal {
        Principal { actor: "ops".into(), scope: crate::base::scope::Scope::Read, via: Via::Token, address: None }
    }

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("other=1; {COOKIE}={value}")).unwrap());
        headers
    }

    #[test]
    fn a_session_is_found_by_its_cookie_until_it_expires_or_is_removed() {
        let sessions = Sessions::default();
        let new = sessions.create(1_000, someone()).unwrap();
        let headers = with_cookie(&new.cookie_value);
        let session = sessions.get(&headers, 2_000).expect("live session");
        assert!(session.csrf_matches(&session.csrf.clone()));
        assert!(!session.csrf_matches(""));
        assert!(!session.csrf_matches(&new.cookie_value), "the cookie is not the CSRF token");
        assert!(sessions.get(&headers, 1_000 + SESSION_TTL_MS).is_none(), "expired");
        assert!(sessions.get(&with_cookie("00"), 2_000).is_none());
        sessions.remove(&session);
        assert!(sessions.get(&headers, 2_000).is_none(), "logged out");
    }

    #[test]
    fn sessions_are_bounded() {
        let sessions = Sessions::default();
        let first = sessions.create(0, someone()).unwrap();
        for i in 1..=MAX_SESSIONS as i64 {
            sessions.create(i, someone()).unwrap();
        }
        assert!(sessions.get(&with_cookie(&first.cookie_value), 10).is_none(), "the oldest made room");
        assert_eq!(sessions.by_hash.lock().unwrap().len(), MAX_SESSIONS);
    }
}
