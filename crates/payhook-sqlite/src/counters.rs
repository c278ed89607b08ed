//! Row counters (migration 0008): triggers keep them in the transaction of every change; [`recount`] checks them
//! against a full count and corrects any drift.
//!
//! A recount reads in short steps on the read connection (the orders, the outbox, then the inbox one source at a
//! time, each in a snapshot of its own) and hands only the corrections to the writer. A correction is the
//! difference between the full count and the counters *of the same snapshot*: writes committed after it move rows
//! and counters together, so adding the difference later is still right.

use crate::read::in_snapshot;
use crate::writer::unavailable;
use payhook_store::{CounterKey, Counts, Drift, StoreError};
use rusqlite::{Connection, Params};

type Result<T> = std::result::Result<T, StoreError>;

/// One step of a recount: the rows it counts, read in one snapshot.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Orders,
    Outbox,
    /// The inbox rows of one source.
    Inbox(String),
}

/// Reads `(tbl, grp, kind, status, n)` rows into counts, adding up rows of the same key.
pub(crate) fn read_counts(conn: &Connection, sql: &str, params: impl Params) -> Result<Counts> {
    let mut stmt = conn.prepare_cached(sql).map_err(unavailable)?;
    let rows = stmt
        .query_map(params, |r| Ok(([r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get(3)?], r.get::<_, i64>(4)?)))
        .map_err(unavailable)?;
    let mut counts = Counts::new();
    for row in rows {
        let ([table, group, kind, status], n) = row.map_err(unavailable)?;
        let key = CounterKey::parse(&table, group, &kind, &status)?;
        *counts.entry(key).or_insert(0) += n;
    }
    Ok(counts)
}

/// The sources with inbox rows or inbox counters. The inbox is walked one source at a time down its
/// `(source, event_id)` index, so this costs one index step per source, not a scan.
pub(crate) fn inbox_sources(conn: &Connection) -> Result<Vec<String>> {
    let mut sources = std::collections::BTreeSet::new();
    let mut after = String::new();
    let mut next = conn.prepare_cached("SELECT min(source) FROM inbox WHERE source > ?1").map_err(unavailable)?;
    while let Some(source) = next.query_row([&after], |r| r.get::<_, Option<String>>(0)).map_err(unavailable)? {
        sources.insert(source.clone());
        after = source;
    }
    let mut kept = conn.prepare_cached("SELECT DISTINCT grp FROM counters WHERE tbl = 'inbox'").map_err(unavailable)?;
    for source in kept.query_map([], |r| r.get::<_, String>(0)).map_err(unavailable)? {
        sources.insert(source.map_err(unavailable)?);
    }
    Ok(sources.into_iter().collect())
}

/// The full count of a step's rows and the counters of the same rows, from one snapshot: `(counted, kept)`.
pub(crate) fn read_step(conn: &Connection, step: &Step) -> Result<(Counts, Counts)> {
    in_snapshot(conn, |tx| {
        let kept_sql = "SELECT tbl, grp, kind, status, n FROM counters WHERE tbl = ?1 AND (?2 IS NULL OR grp = ?2)";
        match step {
            Step::Orders => {
                read_counts(tx, "SELECT 'orders', '', '', status, count(*) FROM orders GROUP BY status", []).and_then(
                    |counted| Ok((counted, read_counts(tx, kept_sql, rusqlite::params!["orders", None::<&str>])?)),
                )
            }
            Step::Outbox => read_counts(
                tx,
                "SELECT 'outbox', sink, kind, status, count(*) FROM outbox GROUP BY sink, kind, status",
                [],
            )
            .and_then(|counted| Ok((counted, read_counts(tx, kept_sql, rusqlite::params!["outbox", None::<&str>])?))),
            Step::Inbox(source) => read_counts(
                tx,
                "SELECT 'inbox', source, '', status, count(*) FROM inbox WHERE source = ?1 GROUP BY status",
                [source],
            )
            .and_then(|counted| Ok((counted, read_counts(tx, kept_sql, rusqlite::params!["inbox", source])?))),
        }
    })
}

/// Adds each drift's difference to its counter (run by the writer, in its transaction).
pub(crate) fn correct(conn: &Connection, drift: &[Drift]) -> Result<()> {
    let mut add = conn
        .prepare_cached(
            "INSERT INTO counters (tbl, grp, kind, status, n) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (tbl, grp, kind, status) DO UPDATE SET n = n + excluded.n",
        )
        .map_err(unavailable)?;
    for d in drift {
        let k = &d.key;
        let texts = rusqlite::params![k.table().as_str(), k.group(), k.kind(), k.status(), d.counted - d.kept];
        add.execute(texts).map_err(unavailable)?;
    }
    Ok(())
}
