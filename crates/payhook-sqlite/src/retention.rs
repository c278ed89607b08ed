//! Retention: one bounded pruning step (see [`payhook_store::Store::prune`]), run by the writer like any write.

use crate::ops::{Result, SqlResult};
use payhook_store::{PruneRequest, Pruned};
use rusqlite::{Connection, params};

/// Statuses of settled events: nothing is left to do with them, so their payloads and keys may age out.
const SETTLED: &str = "('processed', 'duplicate', 'ignored')";

pub(crate) fn prune(conn: &Connection, r: &PruneRequest) -> Result<Pruned> {
    let mut pruned = Pruned::default();
    let old: Vec<(i64, String, String, Option<String>)> = conn
        .prepare_cached(&format!(
            "SELECT id, source, event_id, business_key FROM inbox
             WHERE received_at < ?1 AND status IN {SETTLED} ORDER BY received_at LIMIT ?2"
        ))
        .db()?
        .query_map(params![r.keys_before_ms, r.limit], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .db()?
        .collect::<rusqlite::Result<_>>()
        .db()?;
    for (id, source, event_id, key) in old {
        if let Some(key) = key {
            // Only the key this event holds: a duplicate's key belongs to the event that applied it.
            pruned.business_keys_deleted += conn
                .prepare_cached("DELETE FROM business_keys WHERE source = ?1 AND key = ?2 AND event_id = ?3")
                .db()?
                .execute(params![source, key, event_id])
                .db()? as u64;
        }
        conn.prepare_cached("DELETE FROM inbox_attempts WHERE inbox_id = ?1").db()?.execute([id]).db()?;
        pruned.events_deleted +=
            conn.prepare_cached("DELETE FROM inbox WHERE id = ?1").db()?.execute([id]).db()? as u64;
    }
    pruned.payloads_cleared = conn
        .prepare_cached(&format!(
            "UPDATE inbox SET body = x'', headers = '{{}}', pruned_at = ?4
             WHERE id IN (SELECT id FROM inbox
                          WHERE received_at >= ?1 AND received_at < ?2 AND status IN {SETTLED} AND pruned_at IS NULL
                          ORDER BY received_at LIMIT ?3)"
        ))
        .db()?
        .execute(params![r.payloads_from_ms, r.payloads_before_ms, r.limit, r.now_ms])
        .db()? as u64;
    Ok(pruned)
}
