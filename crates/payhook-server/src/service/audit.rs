//! The operator audit trail, as the server writes it: who acts ([`Actor`]), the entry each action makes, and the
//! structured log line each entry gets (target `payhook::audit`). The store keeps the entries
//! (`payhook_store::audit`); an action that is one transaction writes its entry in that transaction, everything
//! else (a refusal, a login, a reload, a failed action) with [`record`].

use crate::runtime::access::Principal;
use payhook_store::{AuditAction, AuditEntry, Store};
use serde_json::Value;

/// Who is acting, as the trail names them: a token's name or a proxy's identity (with the client's address), or
/// the command line (`cli:` and the operating system's user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The name the trail records.
    pub name: String,
    /// The client's address, for an action that came over the network.
    pub address: Option<String>,
}

impl Actor {
    /// The caller of a request.
    pub fn of(principal: &Principal) -> Self {
        Self { name: principal.actor.clone(), address: principal.address.clone() }
    }

    /// The command line, run by the operating system's user `$USER` (or `$LOGNAME`).
    pub fn cli() -> Self {
        let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "unknown".into());
        Self { name: format!("cli:{user}"), address: None }
    }

    /// An entry of this actor's: `action` on `target` at `at_ms`, ending in `outcome`, with `detail` (a JSON
    /// object or `null`, never a secret).
    pub fn entry(
        &self,
        action: AuditAction,
        target: Option<String>,
        outcome: &str,
        detail: Value,
        at_ms: i64,
    ) -> AuditEntry {
        AuditEntry {
            at_ms,
            actor: self.name.clone(),
            address: self.address.clone(),
            action,
            target,
            outcome: outcome.to_owned(),
            detail,
        }
    }
}

/// The entry's log line: every field, under the target `payhook::audit`, so a log collector can keep the trail
/// apart. At INFO, a refusal at WARN, and an order's registration at DEBUG: registrations come at the rate of
/// orders, from the merchant's systems rather than from people, and an INFO line each cost more than the rest of
/// auditing them (BENCHMARKS.md); the database keeps every one.
pub fn log(entry: &AuditEntry) {
    let (actor, action, outcome) = (entry.actor.as_str(), entry.action.as_str(), entry.outcome.as_str());
    let (address, target) = (entry.address.as_deref().unwrap_or(""), entry.target.as_deref().unwrap_or(""));
    let detail = || if entry.detail.is_null() { String::new() } else { entry.detail.to_string() };
    match entry.action {
        AuditAction::Refused => {
            tracing::warn!(target: "payhook::audit", actor, address, action, target, outcome, detail = detail(), "operator action");
        }
        AuditAction::OrderRegister => {
            tracing::debug!(target: "payhook::audit", actor, address, action, target, outcome, detail = detail(), "operator action");
        }
        _ => {
            tracing::info!(target: "payhook::audit", actor, address, action, target, outcome, detail = detail(), "operator action");
        }
    }
}

/// Appends `entry` on its own and logs it. A trail that cannot be written is logged at ERROR and reported to the
/// caller, which decides whether the action may stand without its entry.
pub async fn record<S: Store>(store: &S, entry: AuditEntry) -> Result<(), payhook_store::StoreError> {
    log(&entry);
    store.audit(vec![entry]).await.inspect_err(|e| {
        tracing::error!(error = %e, "the audit trail could not be written");
    })
}
