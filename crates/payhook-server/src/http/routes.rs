//! Every route payhook serves and what it asks of its caller, in one table: the router registers exactly these
//! (a test holds it), the token and session checks read a route's scope from here, and the OpenAPI document
//! states each operation's scope from here.
//!
//! A route the table does not list is treated as `admin`: forgetting a row closes a route rather than opening it.

use crate::base::scope::{Need, Scope};

/// One route: its method, its path as the router writes it (`/v1` and `/ui` ones in full), and its need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// The path pattern.
    pub path: &'static str,
    /// What the caller must hold.
    pub need: Need,
}

const fn route(method: &'static str, path: &'static str, need: Need) -> Route {
    Route { method, path, need }
}

const PUBLIC: Need = Need::Public;
const READ: Need = Need::Scope(Scope::Read);
const OPERATE: Need = Need::Scope(Scope::Operate);
const ADMIN: Need = Need::Scope(Scope::Admin);

/// Every route. `/metrics` and `/openapi.json` are listed as they are on the public port (`server.metrics_listen`
/// moves `/metrics` to a listener of its own, without a token; `server.public_openapi` opens the document).
pub const ROUTES: &[Route] = &[
    route("POST", "/webhooks/{source}", PUBLIC),
    route("POST", "/v1/orders", OPERATE),
    route("GET", "/v1/orders/{id}", READ),
    route("GET", "/v1/subscriptions/{id}", READ),
    route("GET", "/v1/customers/{id}/entitlements", READ),
    route("GET", "/v1/events", READ),
    route("GET", "/v1/events/{source}/{event_id}", READ),
    route("POST", "/v1/events/{source}/{event_id}/replay", OPERATE),
    route("GET", "/v1/dead-letters", READ),
    route("POST", "/v1/dead-letters/replay", OPERATE),
    route("GET", "/v1/outbox", READ),
    route("POST", "/v1/outbox/{id}/retry", OPERATE),
    route("GET", "/v1/stats", READ),
    route("POST", "/v1/reload", ADMIN),
    route("GET", "/v1/audit", ADMIN),
    route("GET", "/healthz", PUBLIC),
    route("GET", "/readyz", PUBLIC),
    route("GET", "/metrics", READ),
    route("GET", "/openapi.json", READ),
    route("GET", "/ui/login", PUBLIC),
    route("POST", "/ui/login", PUBLIC),
    route("POST", "/ui/logout", READ),
    route("GET", "/ui", READ),
    route("GET", "/ui/events", READ),
    route("GET", "/ui/events/{source}/{event_id}", READ),
    route("POST", "/ui/events/{source}/{event_id}/replay", OPERATE),
    route("GET", "/ui/dead-letters", READ),
    route("POST", "/ui/dead-letters/replay", OPERATE),
    route("GET", "/ui/outbox", READ),
    route("POST", "/ui/outbox/{id}/retry", OPERATE),
    route("GET", "/ui/orders", READ),
    route("GET", "/ui/billing", READ),
    route("GET", "/ui/audit", ADMIN),
];

/// The scope a request to the route `path` (the router's pattern, as `MatchedPath` gives it) with `method` needs:
/// its row's, `admin` for a route the table does not list. `HEAD` is a `GET`.
pub fn scope_needed(method: &str, path: &str) -> Scope {
    let method = if method.eq_ignore_ascii_case("HEAD") { "GET" } else { method };
    let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    match ROUTES.iter().find(|r| r.path == path && r.method.eq_ignore_ascii_case(method)).map(|r| r.need) {
        Some(Need::Scope(scope)) => scope,
        Some(Need::Public) => Scope::Read,
        None => Scope::Admin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_is_found_by_method_and_pattern_and_an_unlisted_one_needs_admin() {
        assert_eq!(scope_needed("GET", "/v1/events"), Scope::Read);
        assert_eq!(scope_needed("HEAD", "/ui/"), Scope::Read);
        assert_eq!(scope_needed("POST", "/v1/dead-letters/replay"), Scope::Operate);
        assert_eq!(scope_needed("POST", "/v1/reload"), Scope::Admin);
        assert_eq!(scope_needed("DELETE", "/v1/events"), Scope::Admin);
        assert_eq!(scope_needed("GET", "/v1/secret-new-route"), Scope::Admin);
    }

    #[test]
    fn reads_need_read_actions_operate_and_reload_and_the_audit_trail_admin() {
        for r in ROUTES {
            let admin = r.path == "/v1/reload" || r.path.ends_with("/audit");
            let public = r.path.starts_with("/webhooks/") || ["/healthz", "/readyz", "/ui/login"].contains(&r.path);
            let expected = match (r.method, r.path) {
                _ if public => PUBLIC,
                _ if admin => ADMIN,
                ("GET", _) | ("POST", "/ui/logout") => READ,
                _ => OPERATE,
            };
            assert_eq!(r.need, expected, "{} {}", r.method, r.path);
        }
    }

    #[test]
    fn every_route_is_listed_once() {
        for (i, a) in ROUTES.iter().enumerate() {
            assert!(
                !ROUTES[i + 1..].iter().any(|b| a.method == b.method && a.path == b.path),
                "{} {} twice",
                a.method,
                a.path
            );
        }
    }
}
