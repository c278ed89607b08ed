//! Retention: one bounded pruning step (see [`payhook_store::Store::prune`]), each part one statement (its own
//! transaction), so several instances may prune at once.
//!
//! The inbox is partitioned by day (the baseline). A day wholly older than the key retention is dropped rather
//! than deleted row by row: its dead letters and deferred events are moved to the held partition, the partition
//! is detached (its rows leave the counters in that transaction), its keys are forgotten in bounded steps, and the
//! detached table is dropped. The held and default partitions are pruned row by row, as the whole inbox was
//! before. The partition steps serialize on an advisory lock; the row steps skip rows another instance is pruning.

use crate::ops::rerun_on_conflict;
use crate::pool::{Object, Pool};
use payhook_store::{PruneRequest, Pruned, StoreError};

/// Creates the partitions of today and tomorrow (as of `$1`), waiting at most `$2` ms for the lock.
pub(crate) const ENSURE_SQL: &str = "SELECT payhook_ensure_partitions($1, $2)";
/// Moves the unsettled rows of days older than `$1` to the held partition, at most `$2`.
const HOLD_SQL: &str = "SELECT payhook_hold_unsettled($1, $2)";
/// Detaches the oldest day older than `$1`, waiting at most `$2` ms for the lock.
const DETACH_SQL: &str = "SELECT detached, events, lock_timed_out FROM payhook_detach_day($1, $2)";
/// Forgets the keys of up to `$1` events of a detached day, and drops it when none is left.
const FORGET_SQL: &str = "SELECT events, business_keys, dropped FROM payhook_forget_gone($1)";

/// The buckets of the rows in the default partition (days that had no partition when they arrived).
const STRAY_BUCKETS_SQL: &str = "SELECT coalesce(array_agg(DISTINCT bucket), '{}') FROM inbox_default";

/// Deletes old settled events of the held and default partitions with the business keys they hold (a duplicate's
/// key belongs to the event that applied it) and their attempt log; their event-id keys go with them (a trigger).
/// Day partitions are dropped whole instead. `BUCKETS` is replaced by the held bucket (0) and those of the default
/// partition's rows, as literals, so that the plan names only those two partitions, in the rows chosen and in the
/// delete: a day partition holding the key cut is never walked row by row.
const DELETE_SQL: &str = "
    WITH old AS (
        SELECT bucket, id, source, event_id, business_key FROM inbox
        WHERE bucket IN (BUCKETS) AND received_at < $1 AND status IN ('processed', 'duplicate', 'ignored')
        ORDER BY received_at LIMIT $2
        FOR UPDATE SKIP LOCKED
    ), keys AS (
        DELETE FROM business_keys b USING old
        WHERE b.source = old.source AND b.key = old.business_key AND b.event_id = old.event_id
        RETURNING 1
    ), attempts AS (
        DELETE FROM inbox_attempts a USING old WHERE a.inbox_id = old.id RETURNING 1
    ), gone AS (
        DELETE FROM inbox i USING old
        WHERE i.bucket IN (BUCKETS) AND i.bucket = old.bucket AND i.id = old.id RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM keys), (SELECT count(*) FROM attempts)";

/// Clears the raw body and headers of settled events in the payload window.
const CLEAR_SQL: &str = "SELECT payhook_clear_payloads($1, $2, $3, $4)";

/// Creates the partitions of the day of `now_ms` and the next one, if missing. False when the lock on the inbox
/// was not had within `lock_timeout_ms` (inserts of those days go to the default partition meanwhile).
pub(crate) async fn ensure_partitions(pool: &Pool, now_ms: i64, lock_timeout_ms: i32) -> Result<bool, StoreError> {
    rerun_on_conflict(pool, "partition creation", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(ENSURE_SQL).await?;
            let created: i32 = client.query_one(&stmt, &[&now_ms, &lock_timeout_ms]).await?.get(0);
            Ok(created >= 0)
        }
    })
    .await
}

pub(crate) async fn prune(pool: &Pool, r: &PruneRequest, lock_timeout_ms: i32) -> Result<Pruned, StoreError> {
    let limit = i64::from(r.limit);
    let limit_i32 = i32::try_from(r.limit).unwrap_or(i32::MAX);
    let mut pruned = Pruned::default();
    if !ensure_partitions(pool, r.now_ms, lock_timeout_ms).await? {
        pruned.partition_lock_timeouts += 1;
    }

    let held: i32 = rerun_on_conflict(pool, "holding unsettled events", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(HOLD_SQL).await?;
            Ok(client.query_one(&stmt, &[&r.keys_before_ms, &limit_i32]).await?.get(0))
        }
    })
    .await?;
    let (detached, detached_events, timed_out) = rerun_on_conflict(pool, "partition detach", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(DETACH_SQL).await?;
            let row = client.query_one(&stmt, &[&r.keys_before_ms, &lock_timeout_ms]).await?;
            Ok((row.get::<_, Option<String>>(0), row.get::<_, i64>(1), row.get::<_, bool>(2)))
        }
    })
    .await?;
    if let Some(name) = &detached {
        tracing::info!(partition = %name, events = detached_events, "detached an inbox partition past the key retention");
        pruned.partitions_detached += 1;
    }
    if timed_out {
        pruned.partition_lock_timeouts += 1;
    }
    let (forgotten, forgotten_keys, dropped) = rerun_on_conflict(pool, "forgetting a detached day", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(FORGET_SQL).await?;
            let row = client.query_one(&stmt, &[&limit_i32]).await?;
            Ok((row.get::<_, i64>(0), row.get::<_, i64>(1), row.get::<_, Option<String>>(2)))
        }
    })
    .await?;
    if let Some(name) = &dropped {
        tracing::info!(table = %name, "dropped a detached inbox partition");
        pruned.partitions_dropped += 1;
    }

    let (events, keys) = rerun_on_conflict(pool, "prune", || {
        async |client: &Object| {
            let strays = client.prepare_cached(STRAY_BUCKETS_SQL).await?;
            let buckets: Vec<i32> = client.query_one(&strays, &[]).await?.get(0);
            // Integers, formatted here: nothing of the text comes from outside.
            let list: Vec<String> = std::iter::once(0).chain(buckets).map(|b| b.to_string()).collect();
            let stmt = client.prepare_cached(&DELETE_SQL.replace("BUCKETS", &list.join(", "))).await?;
            let row = client.query_one(&stmt, &[&r.keys_before_ms, &limit]).await?;
            Ok((row.get::<_, i64>(0), row.get::<_, i64>(1)))
        }
    })
    .await?;
    let cleared = rerun_on_conflict(pool, "payload pruning", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(CLEAR_SQL).await?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&r.payloads_from_ms, &r.payloads_before_ms, &limit_i32, &r.now_ms];
            Ok(client.query_one(&stmt, &params).await?.get::<_, i32>(0))
        }
    })
    .await?;
    pruned.events_deleted = (events + detached_events) as u64;
    pruned.business_keys_deleted = (keys + forgotten_keys) as u64;
    pruned.payloads_cleared = u64::try_from(cleared).unwrap_or(0);
    // Rows moved to the held partition and events whose keys were forgotten: a full batch of either means more.
    pruned.rows_visited = u64::try_from(held).unwrap_or(0).max(forgotten as u64);
    crate::order_retention::prune_orders(pool, r, &mut pruned).await?;
    Ok(pruned)
}
