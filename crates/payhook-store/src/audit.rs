//! The operator audit trail: who acted on payhook (through the API, the dashboard or the CLI), from where, when,
//! what they did, on what, and how it ended.
//!
//! An entry is appended in the transaction of the action it records wherever the action is one transaction
//! ([`Store::replay_audited`], [`Store::retry_outbox_audited`], [`Store::register_order_audited`]), so that an
//! action and its entry are both stored or neither is; the store then writes the entry's `outcome` from the
//! action's result, in the words of this module ([`replay_outcome`], [`retry_outbox_outcome`],
//! [`registration_outcome`]). Anything else (a refusal, a login, a reload, an action that failed) is recorded on
//! its own with [`Store::audit`].
//!
//! [`Store::replay_audited`]: crate::Store::replay_audited
//! [`Store::retry_outbox_audited`]: crate::Store::retry_outbox_audited
//! [`Store::register_order_audited`]: crate::Store::register_order_audited
//! [`Store::audit`]: crate::Store::audit

use crate::{Registered, Replayed};
use serde::{Deserialize, Serialize};

/// One operator action, as it is recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    /// When, unix milliseconds.
    pub at_ms: i64,
    /// Who: the API token's name, the identity a trusted proxy vouched for, or `"cli"`.
    pub actor: String,
    /// The client's address as text, when the action came over the network.
    pub address: Option<String>,
    /// What was done.
    pub action: AuditAction,
    /// On what, as `kind/id`: `"stripe/evt_1"` (an event of a source), `"outbox/42"`, `"order/ord_1"`; `None` for
    /// actions on nothing in particular (a login, a reload).
    pub target: Option<String>,
    /// How it ended, as a short machine word: `"ok"`, `"refused"`, `"not_found"`, or the word the store writes for
    /// an audited action ([`replay_outcome`], [`retry_outbox_outcome`], [`registration_outcome`]).
    pub outcome: String,
    /// Anything else worth keeping, as a JSON object (or `null`). Never a secret: it is stored as it is and shown
    /// to every operator who may read the trail.
    pub detail: serde_json::Value,
}

/// What an operator did. Stored, sent and parsed by its snake_case name ([`AuditAction::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditAction {
    /// Replayed one dead-lettered event.
    Replay,
    /// Replayed the dead letters a filter selected.
    BulkReplay,
    /// Re-queued a dead outbox row.
    OutboxRetry,
    /// Registered an order.
    OrderRegister,
    /// Imported orders from a file.
    OrderImport,
    /// Reloaded the configuration.
    Reload,
    /// Ran a retention step by hand.
    Prune,
    /// Logged in to the dashboard.
    Login,
    /// Logged out of the dashboard.
    Logout,
    /// Was refused for lack of a scope.
    Refused,
}

impl AuditAction {
    /// Every action.
    pub const ALL: [AuditAction; 10] = [
        Self::Replay,
        Self::BulkReplay,
        Self::OutboxRetry,
        Self::OrderRegister,
        Self::OrderImport,
        Self::Reload,
        Self::Prune,
        Self::Login,
        Self::Logout,
        Self::Refused,
    ];

    /// The stored, sent and parsed name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::BulkReplay => "bulk_replay",
            Self::OutboxRetry => "outbox_retry",
            Self::OrderRegister => "order_register",
            Self::OrderImport => "order_import",
            Self::Reload => "reload",
            Self::Prune => "prune",
            Self::Login => "login",
            Self::Logout => "logout",
            Self::Refused => "refused",
        }
    }
}

impl std::fmt::Display for AuditAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not an [`AuditAction`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an audit action")]
pub struct UnknownAuditAction(pub String);

impl std::str::FromStr for AuditAction {
    type Err = UnknownAuditAction;

    /// The inverse of [`AuditAction::as_str`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|a| a.as_str() == s).ok_or_else(|| UnknownAuditAction(s.to_owned()))
    }
}

/// A stored entry with its id, which orders the trail (newest first) and is a listing's cursor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    /// The entry's id: later entries have larger ones.
    pub id: i64,
    /// The entry.
    #[serde(flatten)]
    pub entry: AuditEntry,
}

/// Which entries to list. Every field narrows the selection (they combine with AND).
///
/// A time range is read as a range of ids, as an event listing's is: from the first entry (in time order) made at
/// or after `since_ms`, below the first made at or after `until_ms`, each entry's time checked too. That holds while
/// entries are appended in about the order of their times, as an action's entry is, at the time of the action; an
/// entry appended with a time well before those of entries appended earlier may be left out of a timed listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only this actor's.
    pub actor: Option<String>,
    /// Only this action.
    pub action: Option<AuditAction>,
    /// Only actions on this target.
    pub target: Option<String>,
    /// Made at or after, unix milliseconds.
    pub since_ms: Option<i64>,
    /// Made before, unix milliseconds.
    pub until_ms: Option<i64>,
    /// Cursor: only entries older than this id (newest first).
    pub before: Option<i64>,
    /// At most this many entries.
    pub limit: u32,
}

/// The `outcome` of an audited re-queue of a dead outbox row that was re-queued.
pub const REQUEUED: &str = "requeued";
/// The `outcome` of an audited re-queue of an outbox row that is not dead (or does not exist): nothing changed.
pub const NOT_DEAD: &str = "not_dead";
/// The `outcome` of an audited replay of an event that is not a dead letter: nothing changed.
pub const NOT_DEAD_LETTER: &str = "not_dead_letter";

/// The `outcome` an audited replay writes: what the replayed event came to (`processed`, `duplicate`, `deferred`,
/// `ignored`, `dead_lettered`: [`crate::Outcome::as_str`]), or [`NOT_DEAD_LETTER`]. `None` for an event that does
/// not exist: there is nothing it acted on, so the store writes no entry (the caller may record the attempt with
/// [`crate::Store::audit`], as `not_found`).
pub fn replay_outcome(replayed: &Replayed) -> Option<&'static str> {
    match replayed {
        Replayed::Done(recorded) => Some(recorded.outcome.as_str()),
        Replayed::NotDeadLetter(_) => Some(NOT_DEAD_LETTER),
        Replayed::NotFound => None,
    }
}

/// The `outcome` an audited re-queue of an outbox row writes: [`REQUEUED`] or [`NOT_DEAD`].
pub fn retry_outbox_outcome(requeued: bool) -> &'static str {
    if requeued { REQUEUED } else { NOT_DEAD }
}

/// The `outcome` an audited registration writes: `created`, `already_exists` (the same amount and currency) or
/// `conflict` (another amount or currency; nothing changed).
pub fn registration_outcome(registered: &Registered) -> &'static str {
    match registered {
        Registered::Created => "created",
        Registered::AlreadyExists => "already_exists",
        Registered::Conflict { .. } => "conflict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Outcome, Recorded};

    #[test]
    fn every_action_parses_back_from_its_name_and_serializes_as_it() {
        for action in AuditAction::ALL {
            assert_eq!(action.as_str().parse::<AuditAction>(), Ok(action));
            assert_eq!(serde_json::to_value(action).unwrap(), action.as_str());
        }
        assert_eq!("Replay".parse::<AuditAction>(), Err(UnknownAuditAction("Replay".into())));
    }

    #[test]
    fn a_record_serializes_its_entry_beside_its_id() {
        let record = AuditRecord {
            id: 7,
            entry: AuditEntry {
                at_ms: 1,
                actor: "ops".into(),
                address: None,
                action: AuditAction::OutboxRetry,
                target: Some("outbox/42".into()),
                outcome: REQUEUED.into(),
                detail: serde_json::json!({"sink": "crm"}),
            },
        };
        assert_eq!(
            serde_json::to_value(&record).unwrap(),
            serde_json::json!({"id": 7, "at_ms": 1, "actor": "ops", "address": null, "action": "outbox_retry",
                               "target": "outbox/42", "outcome": "requeued", "detail": {"sink": "crm"}})
        );
    }

    #[test]
    fn each_result_of_an_audited_action_has_its_word() {
        let done = Replayed::Done(Recorded { outcome: Outcome::Deferred, detail: None });
        assert_eq!(replay_outcome(&done), Some("deferred"));
        assert_eq!(replay_outcome(&Replayed::NotDeadLetter(Outcome::Processed)), Some("not_dead_letter"));
        assert_eq!(replay_outcome(&Replayed::NotFound), None);
        assert_eq!((retry_outbox_outcome(true), retry_outbox_outcome(false)), ("requeued", "not_dead"));
        let usd = payhook_core::event::Currency::parse("usd").unwrap();
        let conflict = Registered::Conflict { existing: payhook_core::event::Money::new(100, usd).unwrap() };
        assert_eq!(registration_outcome(&conflict), "conflict");
        assert_eq!(registration_outcome(&Registered::AlreadyExists), "already_exists");
        assert_eq!(registration_outcome(&Registered::Created), "created");
    }
}
