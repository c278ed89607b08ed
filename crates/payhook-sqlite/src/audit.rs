//! The operator audit trail's writes, on the writer's connection: entries appended alone or in the job of the
//! action they record (its savepoint: both are stored or neither is), and pruning steps, oldest first. Its listing
//! is in `listing`.

use crate::context::{Result, SqlResult};
use crate::kept::WriterConn;
use payhook_store::{AuditEntry, StoreError};
use rusqlite::params;

const INSERT_SQL: &str =
    "INSERT INTO audit (at_ms, actor, address, action, target, outcome, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// The oldest entries before a time, by time then id, down `audit_at`.
const PRUNE_SQL: &str = "DELETE FROM audit WHERE id IN (
         SELECT id FROM audit INDEXED BY audit_at WHERE at_ms < ?1 ORDER BY at_ms, id LIMIT ?2)";

/// An entry's `detail` as stored: its JSON text, or NULL for JSON `null`.
pub(crate) fn stored_detail(detail: &serde_json::Value) -> Result<Option<String>> {
    if detail.is_null() {
        return Ok(None);
    }
    serde_json::to_string(detail).map(Some).map_err(|e| StoreError::corrupt("an audit detail that does not encode", e))
}

/// Appends `entry` with `outcome` in place of its own.
pub(crate) fn insert(conn: &WriterConn<'_>, entry: &AuditEntry, outcome: &str) -> Result<()> {
    let detail = stored_detail(&entry.detail)?;
    conn.kept(INSERT_SQL, |s| {
        s.execute(params![
            entry.at_ms,
            entry.actor,
            entry.address,
            entry.action.as_str(),
            entry.target,
            outcome,
            detail
        ])
    })
    .db()?;
    Ok(())
}

/// Appends every entry, each with its own outcome.
pub(crate) fn append(conn: &WriterConn<'_>, entries: &[AuditEntry]) -> Result<()> {
    entries.iter().try_for_each(|entry| insert(conn, entry, &entry.outcome))
}

/// Appends `entry`, when there is one, with the outcome `outcome_of` finds in the action's `result`; an action
/// that failed, or whose result has no outcome, appends nothing.
pub(crate) fn after<T>(
    conn: &WriterConn<'_>,
    result: Result<T>,
    entry: Option<&AuditEntry>,
    outcome_of: impl FnOnce(&T) -> Option<&'static str>,
) -> Result<T> {
    let value = result?;
    if let (Some(entry), Some(outcome)) = (entry, outcome_of(&value)) {
        insert(conn, entry, outcome)?;
    }
    Ok(value)
}

/// Deletes at most `limit` entries made before `before_ms`, oldest first; returns how many.
pub(crate) fn prune(conn: &WriterConn<'_>, before_ms: i64, limit: u32) -> Result<u64> {
    let deleted = conn.kept(PRUNE_SQL, |s| s.execute(params![before_ms, limit])).db()?;
    Ok(deleted as u64)
}
