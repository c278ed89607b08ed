//! [`Replication`]: the database's replication as payhook sees it, for `/readyz`, `/metrics` and the start-up log.
//!
//! A 2xx is sent after `COMMIT` returned. Whether that commit survives the loss of the database machine depends
//! on the primary: only when a standby is synchronous and the session's `synchronous_commit` waits for it
//! (`on`, `remote_write`, `remote_apply`) has the commit reached another machine before `COMMIT` returned.

use serde::Serialize;

/// The `synchronous_commit` values with which `COMMIT` waits for the synchronous standbys (with `local` and `off`
/// it returns once the primary alone has the commit, or before).
pub const WAITING_SYNCHRONOUS_COMMIT: [&str; 3] = ["on", "remote_write", "remote_apply"];

/// The replication of the database payhook writes to, read from the primary (`pg_stat_replication` and the
/// session's settings). Only backends with replication report one (PostgreSQL); see
/// [`crate::Store::replication`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replication {
    /// The session's `synchronous_commit` (`on`, `remote_apply`, `remote_write`, `local`, `off`): what `COMMIT`
    /// waits for.
    pub synchronous_commit: String,
    /// The server's `synchronous_standby_names`: which standbys may be synchronous (empty: none).
    pub synchronous_standby_names: String,
    /// Standbys the primary counts as synchronous now (`sync_state` `sync` or `quorum` in `pg_stat_replication`).
    /// `None` when payhook's role may not see those details (neither superuser nor a member of
    /// `pg_read_all_stats`, which `pg_monitor` includes): the server then shows them as NULL.
    pub sync_standbys: Option<u32>,
    /// Standbys streaming from the primary, synchronous or not; `None` as for `sync_standbys`.
    pub streaming_standbys: Option<u32>,
    /// The server is in recovery: it is a standby itself, not the primary.
    pub in_recovery: bool,
    /// `storage.require_sync_standby`: payhook is not ready unless a 2xx is acknowledged on a standby.
    pub required: bool,
}

impl Replication {
    /// True when a commit is on a standby by the time `COMMIT` returns, and so is every 2xx: the server is the
    /// primary, at least one standby is synchronous, and `synchronous_commit` waits for it.
    pub fn acknowledged_on_standby(&self) -> bool {
        !self.in_recovery
            && self.sync_standbys.is_some_and(|n| n > 0)
            && WAITING_SYNCHRONOUS_COMMIT.contains(&self.synchronous_commit.as_str())
    }

    /// Ready as far as replication goes: a synchronous standby is not required, or a 2xx is acknowledged on one.
    pub fn ready(&self) -> bool {
        !self.required || self.acknowledged_on_standby()
    }

    /// Why a 2xx is not acknowledged on a standby, in an operator's words; `None` when it is. The first reason
    /// found is given, in the order an operator would fix them.
    pub fn problem(&self) -> Option<String> {
        if self.acknowledged_on_standby() {
            return None;
        }
        let problem = if self.in_recovery {
            "the database is in recovery (a standby): payhook must write to the primary".to_owned()
        } else if !WAITING_SYNCHRONOUS_COMMIT.contains(&self.synchronous_commit.as_str()) {
            format!(
                "synchronous_commit is {:?}: COMMIT does not wait for a standby (use on, remote_write or remote_apply)",
                self.synchronous_commit
            )
        } else if self.synchronous_standby_names.trim().is_empty() {
            // Whatever the role may see: with no names, the primary makes no standby synchronous.
            "no synchronous standby is connected: synchronous_standby_names is empty, so none can be".to_owned()
        } else if self.sync_standbys.is_none() {
            "payhook's role cannot see pg_stat_replication: grant pg_monitor".to_owned()
        } else {
            "no synchronous standby is connected".to_owned()
        };
        Some(problem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A primary with one synchronous standby, `synchronous_commit = on`, standby required.
    fn healthy() -> Replication {
        Replication {
            synchronous_commit: "on".to_owned(),
            synchronous_standby_names: "FIRST 1 (standby1)".to_owned(),
            sync_standbys: Some(1),
            streaming_standbys: Some(2),
            in_recovery: false,
            required: true,
        }
    }

    #[test]
    fn a_synchronous_standby_with_a_waiting_synchronous_commit_acknowledges_a_2xx_and_is_ready() {
        for setting in WAITING_SYNCHRONOUS_COMMIT {
            let r = Replication { synchronous_commit: setting.to_owned(), ..healthy() };
            assert!(r.acknowledged_on_standby() && r.ready(), "{setting}");
            assert_eq!(r.problem(), None, "{setting}");
        }
    }

    #[test]
    fn without_a_synchronous_standby_a_2xx_is_not_on_a_standby_and_only_a_requirement_makes_it_not_ready() {
        let r = Replication { sync_standbys: Some(0), ..healthy() };
        assert!(!r.acknowledged_on_standby() && !r.ready());
        assert_eq!(r.problem().as_deref(), Some("no synchronous standby is connected"));
        let r = Replication { required: false, ..r };
        assert!(!r.acknowledged_on_standby() && r.ready());
    }

    #[test]
    fn a_synchronous_commit_that_does_not_wait_is_not_acknowledged_on_a_standby_whatever_is_connected() {
        for setting in ["local", "off"] {
            let r = Replication { synchronous_commit: setting.to_owned(), ..healthy() };
            assert!(!r.acknowledged_on_standby() && !r.ready(), "{setting}");
            let problem = r.problem().expect("a problem");
            assert!(problem.starts_with(&format!("synchronous_commit is \"{setting}\"")), "{problem}");
        }
    }

    #[test]
    fn a_role_that_cannot_see_pg_stat_replication_is_told_to_get_pg_monitor() {
        let r = Replication { sync_standbys: None, streaming_standbys: None, ..healthy() };
        assert!(!r.acknowledged_on_standby() && !r.ready());
        assert_eq!(r.problem().as_deref(), Some("payhook's role cannot see pg_stat_replication: grant pg_monitor"));
    }

    #[test]
    fn an_empty_synchronous_standby_names_is_named_as_the_reason() {
        let r = Replication { synchronous_standby_names: String::new(), sync_standbys: Some(0), ..healthy() };
        let problem = r.problem().expect("a problem");
        assert!(problem.ends_with("synchronous_standby_names is empty, so none can be"), "{problem}");
        let r = Replication { sync_standbys: None, ..r };
        assert_eq!(r.problem(), Some(problem), "no grant makes a standby synchronous without names");
    }

    #[test]
    fn a_server_in_recovery_is_never_acknowledged_on_a_standby() {
        let r = Replication { in_recovery: true, ..healthy() };
        assert!(!r.acknowledged_on_standby() && !r.ready());
        assert!(r.problem().is_some_and(|p| p.contains("in recovery")));
    }
}
