//! Schema migrations, embedded in the binary and tracked in `payhook_schema_version`.
//!
//! Each migration runs in one transaction with its version row, under a transaction-scoped advisory lock keyed
//! by the schema, so several instances starting at once apply each migration exactly once. Everything is created
//! in the connection's current schema (the first existing schema of its `search_path`).

use crate::error::PgError;
use crate::pool::Object;

/// The migrations in order; migration `i` moves the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_outbox_dispatch.sql"),
    include_str!("../migrations/0003_billing.sql"),
    include_str!("../migrations/0004_retention.sql"),
    include_str!("../migrations/0005_billing_audit_by_event.sql"),
    include_str!("../migrations/0006_counters.sql"),
    include_str!("../migrations/0007_inbox_partitions.sql"),
    include_str!("../migrations/0008_listing_indexes.sql"),
    include_str!("../migrations/0009_order_retention.sql"),
];

/// Brings the schema up to date. Returns the number of migrations applied.
pub(crate) async fn run(client: &mut Object) -> Result<usize, PgError> {
    let mut applied = 0;
    loop {
        let tx = client.transaction().await?;
        let schema: Option<String> = tx.query_one("SELECT current_schema()", &[]).await?.get(0);
        if schema.is_none() {
            // CREATE would fail with a less helpful message; say what is missing.
            return Err(PgError::NoSchema);
        }
        tx.execute("SELECT pg_advisory_xact_lock(hashtext('payhook-migrate:' || current_schema()))", &[]).await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS payhook_schema_version (
                 version    integer     PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await?;
        let version: i32 =
            tx.query_one("SELECT coalesce(max(version), 0) FROM payhook_schema_version", &[]).await?.get(0);
        let Some(sql) = MIGRATIONS.get(version as usize) else {
            tx.commit().await?;
            return Ok(applied);
        };
        let next = version + 1;
        tx.batch_execute(sql).await.map_err(|source| PgError::Migration { version: next as usize, source })?;
        tx.execute("INSERT INTO payhook_schema_version (version) VALUES ($1)", &[&next]).await?;
        tx.commit().await?;
        tracing::info!(version = next, "applied PostgreSQL migration");
        applied += 1;
    }
}

/// The schema version this build migrates to.
pub(crate) fn latest() -> usize {
    MIGRATIONS.len()
}
