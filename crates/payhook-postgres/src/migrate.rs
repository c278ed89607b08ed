//! Schema migrations and the schema's functions, embedded in the binary.
//!
//! Migrations (`migrations/NNNN_*.sql`) change tables, indexes and types; they are tracked in
//! `payhook_schema_version` and never edited once released, since databases in the field have run them. Each
//! runs in one transaction with its version row, under a transaction-scoped advisory lock keyed by the schema, so
//! several instances starting at once apply each migration exactly once.
//!
//! Functions (`sql/functions/NAME.sql`, one per function, each a `CREATE OR REPLACE`) hold the one current
//! definition of each: they are applied after the migrations, in one transaction under the same lock, whenever
//! their checksum differs from the one recorded in `payhook_functions`. A migration that changes a function's
//! signature drops the old one (CREATE OR REPLACE cannot). Older definitions in early migrations are history: the
//! files win on every database that this build migrates. A database whose schema is newer than this build's keeps
//! its functions: they belong to the newer build.
//!
//! Everything is created in the connection's current schema (the first existing schema of its `search_path`).

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
    include_str!("../migrations/0010_batch_composites.sql"),
    include_str!("../migrations/0011_status_indexes_without_the_bulk.sql"),
];

/// The schema's functions, by name: `sql/functions/NAME.sql` (a unit test checks the list against the directory).
pub(crate) const FUNCTIONS: &[(&str, &str)] = &[
    ("payhook_apply", include_str!("../sql/functions/payhook_apply.sql")),
    ("payhook_apply_invoice", include_str!("../sql/functions/payhook_apply_invoice.sql")),
    ("payhook_apply_subscription", include_str!("../sql/functions/payhook_apply_subscription.sql")),
    ("payhook_billing_outbox", include_str!("../sql/functions/payhook_billing_outbox.sql")),
    ("payhook_billing_state", include_str!("../sql/functions/payhook_billing_state.sql")),
    ("payhook_claim_due", include_str!("../sql/functions/payhook_claim_due.sql")),
    ("payhook_claim_key", include_str!("../sql/functions/payhook_claim_key.sql")),
    ("payhook_claim_nonce", include_str!("../sql/functions/payhook_claim_nonce.sql")),
    ("payhook_clear_payloads", include_str!("../sql/functions/payhook_clear_payloads.sql")),
    ("payhook_count_rows", include_str!("../sql/functions/payhook_count_rows.sql")),
    ("payhook_count_status_change", include_str!("../sql/functions/payhook_count_status_change.sql")),
    ("payhook_day_partition", include_str!("../sql/functions/payhook_day_partition.sql")),
    ("payhook_day_partitions", include_str!("../sql/functions/payhook_day_partitions.sql")),
    ("payhook_detach_day", include_str!("../sql/functions/payhook_detach_day.sql")),
    ("payhook_ensure_partitions", include_str!("../sql/functions/payhook_ensure_partitions.sql")),
    ("payhook_finish_outbox", include_str!("../sql/functions/payhook_finish_outbox.sql")),
    ("payhook_fold_counters", include_str!("../sql/functions/payhook_fold_counters.sql")),
    ("payhook_forget_gone", include_str!("../sql/functions/payhook_forget_gone.sql")),
    ("payhook_forget_keys", include_str!("../sql/functions/payhook_forget_keys.sql")),
    ("payhook_hold_unsettled", include_str!("../sql/functions/payhook_hold_unsettled.sql")),
    ("payhook_ingest_batch", include_str!("../sql/functions/payhook_ingest_batch.sql")),
    ("payhook_ingest_each", include_str!("../sql/functions/payhook_ingest_each.sql")),
    ("payhook_lock_all", include_str!("../sql/functions/payhook_lock_all.sql")),
    ("payhook_raise_alert", include_str!("../sql/functions/payhook_raise_alert.sql")),
    ("payhook_reapply", include_str!("../sql/functions/payhook_reapply.sql")),
    ("payhook_register_batch", include_str!("../sql/functions/payhook_register_batch.sql")),
    ("payhook_settle_batch", include_str!("../sql/functions/payhook_settle_batch.sql")),
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
            if version as usize == MIGRATIONS.len() {
                apply_functions(&tx, false).await?;
            }
            tx.commit().await?;
            return Ok(applied);
        };
        let next = version + 1;
        tx.batch_execute(sql).await.map_err(|source| PgError::Migration { version: next as usize, source })?;
        tx.execute("INSERT INTO payhook_schema_version (version) VALUES ($1)", &[&next]).await?;
        if next as usize == MIGRATIONS.len() {
            // In the last migration's transaction: no moment without the functions a migration dropped.
            apply_functions(&tx, true).await?;
        }
        tx.commit().await?;
        tracing::info!(version = next, "applied PostgreSQL migration");
        applied += 1;
    }
}

/// Applies [`FUNCTIONS`] when their checksum is not the one recorded (always after a migration, which may have
/// dropped one), and records it.
async fn apply_functions(tx: &tokio_postgres::Transaction<'_>, after_migration: bool) -> Result<(), PgError> {
    let checksum = functions_checksum();
    tx.batch_execute("CREATE TABLE IF NOT EXISTS payhook_functions (checksum text NOT NULL)").await?;
    let recorded: Option<String> = tx.query_opt("SELECT checksum FROM payhook_functions", &[]).await?.map(|r| r.get(0));
    if !after_migration && recorded.as_deref() == Some(checksum.as_str()) {
        return Ok(());
    }
    for (name, sql) in FUNCTIONS {
        tx.batch_execute(sql).await.map_err(|source| PgError::Function { name, source })?;
    }
    tx.execute("DELETE FROM payhook_functions", &[]).await?;
    tx.execute("INSERT INTO payhook_functions (checksum) VALUES ($1)", &[&checksum]).await?;
    tracing::info!(functions = FUNCTIONS.len(), "applied the schema's PostgreSQL functions");
    Ok(())
}

/// SHA-256 over the functions' names and definitions, in hex.
fn functions_checksum() -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for (name, sql) in FUNCTIONS {
        hash.update(name.as_bytes());
        hash.update([0]);
        hash.update(sql.as_bytes());
        hash.update([0]);
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The schema version this build migrates to.
pub(crate) fn latest() -> usize {
    MIGRATIONS.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_file_is_applied_and_defines_the_function_it_is_named_after() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/functions");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .expect("sql/functions")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let listed: Vec<String> = FUNCTIONS.iter().map(|(name, _)| format!("{name}.sql")).collect();
        assert_eq!(files, listed, "FUNCTIONS lists every file of sql/functions, in name order");
        for (name, sql) in FUNCTIONS {
            let creates = sql.matches("CREATE OR REPLACE FUNCTION ").count();
            assert_eq!(creates, 1, "{name}.sql defines one function with CREATE OR REPLACE");
            assert!(sql.contains(&format!("CREATE OR REPLACE FUNCTION {name}(")), "{name}.sql defines {name}");
            assert!(!sql.contains("CREATE FUNCTION"), "{name}.sql: a plain CREATE would fail on the next migrate");
        }
    }
}
