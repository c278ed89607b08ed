//! What an operator may do: the scopes a token or a proxy identity holds, and what a route needs.
//!
//! Three scopes, each including the one below it: `read` (every `GET` of `/v1`, `/metrics`, the dashboard's
//! pages), `operate` (replays, outbox retries, registering and importing orders) and `admin` (everything, reload
//! and the audit trail included). A token configured with several holds the highest of them.

use std::fmt;

/// An operator's scope; a higher one includes every lower one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Reading: listings, events with their payloads, orders, stats, metrics, the dashboard's pages.
    Read,
    /// Acting on deliveries: replays, outbox retries, registering and importing orders.
    Operate,
    /// Everything: reloading the configuration, the audit trail.
    Admin,
}

impl Scope {
    /// Every scope, lowest first.
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Operate, Scope::Admin];

    /// The scope's name, as the configuration and the API write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Operate => "operate",
            Scope::Admin => "admin",
        }
    }

    /// The scope named `name`, or `None`.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether holding `self` allows what `needed` guards.
    pub fn allows(self, needed: Scope) -> bool {
        self >= needed
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a route asks of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nothing: anyone may call it (webhooks, probes, the login page).
    Public,
    /// A token or an identity holding this scope.
    Scope(Scope),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_includes_those_below_it_and_no_other() {
        assert!(Scope::Admin.allows(Scope::Operate) && Scope::Admin.allows(Scope::Read));
        assert!(Scope::Operate.allows(Scope::Read) && !Scope::Operate.allows(Scope::Admin));
        assert!(!Scope::Read.allows(Scope::Operate));
        for s in Scope::ALL {
            assert!(s.allows(s));
            assert_eq!(Scope::parse(s.as_str()), Some(s));
        }
        assert_eq!(Scope::parse("Admin"), None);
    }
}
