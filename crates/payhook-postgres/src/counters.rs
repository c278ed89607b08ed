//! Row counters: triggers append deltas in the transaction of every change, a short fold moves
//! them into totals, and [`recount`] checks them against a full count and corrects any drift.
//!
//! A recount step reads the full count of one table and its counters in one snapshot, and appends the
//! difference as a delta in the same transaction. Writes committed after the snapshot bring their own deltas, so
//! the correction is right whatever commits meanwhile, and no lock is taken.

use crate::ops::{Failure, rerun_on_conflict};
use crate::read::with_connection;
use std::sync::atomic::{AtomicU64, Ordering};

/// Folded delta rows after which the store vacuums `counter_deltas` (see [`fold`]).
const VACUUM_AFTER_ROWS: u64 = 50_000;
use crate::pool::{Object, Pool};
use payhook_store::{COUNTED_TABLES, CounterKey, Counts, Recounted, StoreError};
use tokio_postgres::Row;

/// Moves the deltas into the totals, unless another caller is doing it (see the migration).
pub(crate) const FOLD_SQL: &str = "SELECT payhook_fold_counters()";

/// The counters: totals plus the deltas not folded yet.
pub(crate) const KEPT_SQL: &str = "SELECT tbl, grp, kind, status, sum(n)::bigint FROM (
         SELECT tbl, grp, kind, status, n FROM counter_totals
         UNION ALL SELECT tbl, grp, kind, status, n FROM counter_deltas) c
     GROUP BY tbl, grp, kind, status";

/// The counters of one table (`$1`).
const KEPT_OF_TABLE_SQL: &str = "SELECT tbl, grp, kind, status, sum(n)::bigint FROM (
         SELECT tbl, grp, kind, status, n FROM counter_totals WHERE tbl = $1
         UNION ALL SELECT tbl, grp, kind, status, n FROM counter_deltas WHERE tbl = $1) c
     GROUP BY tbl, grp, kind, status";

/// The full count of one table, keyed like its counters.
fn counted_sql(table: &str) -> &'static str {
    match table {
        "inbox" => "SELECT 'inbox', source, '', status, count(*) FROM inbox GROUP BY source, status",
        "orders" => "SELECT 'orders', '', '', status, count(*) FROM orders GROUP BY status",
        _ => "SELECT 'outbox', sink, kind, status, count(*) FROM outbox GROUP BY sink, kind, status",
    }
}

/// `(tbl, grp, kind, status, n)` rows as counts.
pub(crate) fn counts(rows: &[Row]) -> Result<Counts, StoreError> {
    let mut counts = Counts::new();
    for r in rows {
        let field = |e| StoreError::corrupt("a counter row", e);
        let text = |i| r.try_get::<_, String>(i).map_err(field);
        let key = CounterKey::parse(&text(0)?, text(1)?, &text(2)?, &text(3)?)?;
        *counts.entry(key).or_insert(0) += r.try_get::<_, i64>(4).map_err(field)?;
    }
    Ok(counts)
}

/// Folds the deltas into the totals in one short transaction of its own.
pub(crate) async fn fold(pool: &Pool, folded_since_vacuum: &AtomicU64) -> Result<(), StoreError> {
    let folded = rerun_on_conflict(pool, "counter fold", || {
        async |client: &Object| {
            let stmt = client.prepare_cached(FOLD_SQL).await?;
            Ok::<_, Failure>(client.query_one(&stmt, &[]).await?.get::<_, i64>(0))
        }
    })
    .await?;
    let since = folded_since_vacuum.fetch_add(u64::try_from(folded).unwrap_or(0), Ordering::Relaxed);
    if since + u64::try_from(folded).unwrap_or(0) >= VACUUM_AFTER_ROWS {
        folded_since_vacuum.store(0, Ordering::Relaxed);
        // Every fold leaves its rows dead in `counter_deltas`, and the next fold's `DELETE` reads them all again
        // until a vacuum: with autovacuum off or behind, a fold (and so every scrape) would cost more with each
        // one. The store vacuums the table itself, a few thousand live rows and what the last folds left.
        let vacuumed = with_connection(pool, async |client: &Object| {
            client.batch_execute("VACUUM (SKIP_LOCKED) counter_deltas").await
        })
        .await;
        if let Err(e) = vacuumed {
            tracing::warn!(error = %e, "could not vacuum counter_deltas; the next fold tries again");
            folded_since_vacuum.store(VACUUM_AFTER_ROWS, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Recounts every table, one transaction each, and appends a correcting delta for each counter that drifted.
pub(crate) async fn recount(pool: &Pool) -> Result<Recounted, StoreError> {
    let mut recounted = Recounted::default();
    for table in COUNTED_TABLES {
        let (counted, drift) = rerun_on_conflict(pool, "recount", || {
            async |client: &Object| {
                client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await?;
                let counted = counts(&client.query(counted_sql(table), &[]).await?)?;
                let kept = counts(&client.query(KEPT_OF_TABLE_SQL, &[&table]).await?)?;
                let drift = Recounted::drift_between(&counted, &kept);
                let add = client.prepare_cached("INSERT INTO counter_deltas VALUES ($1, $2, $3, $4, $5)").await?;
                for d in &drift {
                    let k = &d.key;
                    client
                        .execute(
                            &add,
                            &[&k.table().as_str(), &k.group(), &k.kind(), &k.status(), &(d.counted - d.kept)],
                        )
                        .await?;
                }
                client.batch_execute("COMMIT").await?;
                Ok::<_, Failure>((counted, drift))
            }
        })
        .await?;
        recounted.counted.extend(counted);
        recounted.drift.extend(drift);
    }
    recounted.drift.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(recounted)
}
