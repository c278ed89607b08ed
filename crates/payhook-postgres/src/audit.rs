//! The operator audit trail's writes: entries appended alone (one statement), or in the transaction of the action
//! they record (a replay, a re-queue, a registration's batch), and pruning steps, oldest first. Every instance on
//! the database shares the one table (migration 0012). Its listing is in `listing`.
//!
//! The entries take no lock but their own rows', so appending one changes nothing in the locking protocol of the
//! transaction it joins.

use crate::ops::{Failure, rerun_on_conflict};
use crate::pipeline::send;
use crate::pool::{Object, Pool};
use payhook_store::{AuditEntry, StoreError};
use tokio_postgres::types::ToSql;

/// Appends the entries of [`AuditColumns`], in their order (so their ids follow it).
pub(crate) const INSERT_SQL: &str = "INSERT INTO audit (at_ms, actor, address, action, target, outcome, detail)
     SELECT at_ms, actor, address, action, target, outcome, detail::jsonb
     FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
          WITH ORDINALITY AS e(at_ms, actor, address, action, target, outcome, detail, n)
     ORDER BY n";

/// The oldest entries before a time, by time then id, down `audit_at`.
const PRUNE_SQL: &str =
    "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at_ms < $1 ORDER BY at_ms, id LIMIT $2)";

/// The arguments of [`INSERT_SQL`]: one element per entry.
#[derive(Debug, Default)]
pub(crate) struct AuditColumns<'a> {
    at_ms: Vec<i64>,
    actor: Vec<&'a str>,
    address: Vec<Option<&'a str>>,
    action: Vec<&'static str>,
    target: Vec<Option<&'a str>>,
    outcome: Vec<&'a str>,
    /// JSON text, or NULL for JSON `null`.
    detail: Vec<Option<String>>,
}

impl<'a> AuditColumns<'a> {
    /// Adds `entry` with `outcome` in place of its own.
    pub(crate) fn push(&mut self, entry: &'a AuditEntry, outcome: &'a str) -> Result<(), StoreError> {
        let detail = match &entry.detail {
            serde_json::Value::Null => None,
            detail => Some(
                serde_json::to_string(detail)
                    .map_err(|e| StoreError::corrupt("an audit detail that does not encode", e))?,
            ),
        };
        self.at_ms.push(entry.at_ms);
        self.actor.push(&entry.actor);
        self.address.push(entry.address.as_deref());
        self.action.push(entry.action.as_str());
        self.target.push(entry.target.as_deref());
        self.outcome.push(outcome);
        self.detail.push(detail);
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.at_ms.is_empty()
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 7] {
        [&self.at_ms, &self.actor, &self.address, &self.action, &self.target, &self.outcome, &self.detail]
    }
}

/// Appends every entry, each with its own outcome, in one statement (one transaction).
pub(crate) async fn append(pool: &Pool, entries: &[AuditEntry]) -> Result<(), StoreError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut columns = AuditColumns::default();
    for entry in entries {
        columns.push(entry, &entry.outcome)?;
    }
    rerun_on_conflict(pool, "audit", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(INSERT_SQL).await?;
            client.execute(&stmt, &columns.params()).await?;
            Ok(())
        }
    })
    .await
}

/// Ends the transaction `client` is in with `entry` appended (when there is one) with `outcome`: both statements
/// sent before either answer is read.
pub(crate) async fn commit_with(client: &Object, entry: Option<(&AuditEntry, &str)>) -> Result<(), Failure> {
    let Some((entry, outcome)) = entry else {
        client.batch_execute("COMMIT").await?;
        return Ok(());
    };
    let mut columns = AuditColumns::default();
    columns.push(entry, outcome)?;
    let stmt = client.prepare_cached(INSERT_SQL).await?;
    let params = columns.params();
    let inserted = send(client.execute(&stmt, &params)).await;
    let committed = send(client.batch_execute("COMMIT")).await;
    // A failed insert aborted the transaction, and the COMMIT after it rolled back: report the insert.
    inserted.answer().await?;
    committed.answer().await?;
    Ok(())
}

/// Deletes at most `limit` entries made before `before_ms`, oldest first; returns how many. An entry another
/// instance deletes meanwhile is not counted.
pub(crate) async fn prune(pool: &Pool, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
    let limit = i64::from(limit);
    rerun_on_conflict(pool, "audit pruning", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(PRUNE_SQL).await?;
            Ok(client.execute(&stmt, &[&before_ms, &limit]).await?)
        }
    })
    .await
}
