//! Retention: one bounded pruning step (see [`payhook_store::Store::prune`]), each part one statement (its own
//! transaction), so several instances may prune at once: rows another one is pruning are skipped.

use crate::ops::rerun_on_conflict;
use deadpool_postgres::{Object, Pool};
use payhook_store::{PruneRequest, Pruned, StoreError};

/// Deletes old settled events with the business keys they hold (a duplicate's key belongs to the event that
/// applied it) and their attempt log.
const DELETE_SQL: &str = "
    WITH old AS (
        SELECT id, source, event_id, business_key FROM inbox
        WHERE received_at < $1 AND status IN ('processed', 'duplicate', 'ignored')
        ORDER BY received_at LIMIT $2
        FOR UPDATE SKIP LOCKED
    ), keys AS (
        DELETE FROM business_keys b USING old
        WHERE b.source = old.source AND b.key = old.business_key AND b.event_id = old.event_id
        RETURNING 1
    ), attempts AS (
        DELETE FROM inbox_attempts a USING old WHERE a.inbox_id = old.id RETURNING 1
    ), gone AS (
        DELETE FROM inbox i USING old WHERE i.source = old.source AND i.event_id = old.event_id RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM keys), (SELECT count(*) FROM attempts)";

/// Clears the raw body and headers of settled events in the payload window.
const CLEAR_SQL: &str = "
    WITH p AS (
        SELECT source, event_id FROM inbox
        WHERE received_at >= $1 AND received_at < $2 AND status IN ('processed', 'duplicate', 'ignored')
          AND pruned_at IS NULL
        ORDER BY received_at LIMIT $3
        FOR UPDATE SKIP LOCKED
    )
    UPDATE inbox i SET body = '\\x'::bytea, headers = '{}', pruned_at = $4
    FROM p WHERE i.source = p.source AND i.event_id = p.event_id";

pub(crate) async fn prune(pool: &Pool, r: &PruneRequest) -> Result<Pruned, StoreError> {
    let limit = i64::from(r.limit);
    let (events, keys) = rerun_on_conflict(pool, "prune", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(DELETE_SQL).await?;
            let row = client.query_one(&stmt, &[&r.keys_before_ms, &limit]).await?;
            Ok((row.get::<_, i64>(0), row.get::<_, i64>(1)))
        }
    })
    .await?;
    let cleared = rerun_on_conflict(pool, "payload pruning", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(CLEAR_SQL).await?;
            Ok(client.execute(&stmt, &[&r.payloads_from_ms, &r.payloads_before_ms, &limit, &r.now_ms]).await?)
        }
    })
    .await?;
    let mut pruned = Pruned {
        events_deleted: events as u64,
        business_keys_deleted: keys as u64,
        payloads_cleared: cleared,
        ..Pruned::default()
    };
    crate::order_retention::prune_orders(pool, r, &mut pruned).await?;
    Ok(pruned)
}
