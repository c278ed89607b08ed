//! Schema migrations and the schema's functions, embedded in the binary.
//!
//! The schema starts at a baseline: `migrations/0011_baseline.sql` creates in one step what the first eleven
//! migrations of the releases before it built one by one (their files are kept, for the test that holds the two
//! equal, under `tests/fixtures/`). Migrations after it (`migrations/NNNN_*.sql`, numbered from 0012) change
//! tables, indexes and types; they are never edited once released, since databases in the field have run them.
//! Each version reached is recorded in `payhook_schema_version`, so a database whose highest version is the
//! baseline's, however it got there, is at the baseline and gets the migrations after it. A database with a
//! version below the baseline's (a release older than the previous one, never upgraded) is refused: an earlier
//! payhook, whose schema version is the baseline's, upgrades it first.
//!
//! Each step runs in one transaction with its version row, under a transaction-scoped advisory lock keyed by the
//! schema, so several instances starting at once apply each step exactly once.
//!
//! Functions (`sql/functions/NAME.sql`, one per function, each a `CREATE OR REPLACE`) hold the one current
//! definition of each: they are applied after the migrations, in one transaction under the same lock, whenever
//! their checksum differs from the one recorded in `payhook_functions`. A migration that changes a function's
//! signature drops the old one (CREATE OR REPLACE cannot). A database whose schema is newer than this build's
//! keeps its functions: they belong to the newer build. The baseline's triggers (`0011_baseline_triggers.sql`)
//! need the functions they call to exist, so the baseline step applies those first ([`TRIGGER_FUNCTIONS`]).
//!
//! Everything is created in the connection's current schema (the first existing schema of its `search_path`).

use crate::error::PgError;
use crate::pool::Object;

/// The schema version of the baseline.
const BASELINE_VERSION: usize = 11;

/// The baseline's tables, types, indexes and rows, then (after [`TRIGGER_FUNCTIONS`]) its triggers.
const BASELINE: &str = include_str!("../migrations/0011_baseline.sql");
const BASELINE_TRIGGERS: &str = include_str!("../migrations/0011_baseline_triggers.sql");

/// The functions the baseline's triggers call, applied in the baseline's step before the triggers. They take no
/// argument and return `trigger`, so no later migration's types are needed to create them.
const TRIGGER_FUNCTIONS: &[&str] = &["payhook_count_rows", "payhook_count_status_change", "payhook_forget_keys"];

/// The migrations after the baseline, in order; migration `i` moves the schema from version
/// `BASELINE_VERSION + i` to `BASELINE_VERSION + i + 1`.
const MIGRATIONS: &[&str] =
    &[include_str!("../migrations/0012_audit.sql"), include_str!("../migrations/0013_outbox_order_key.sql")];

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

/// What a database at schema version `version` needs next, with `later` migrations after the baseline.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// An empty schema: the baseline.
    Baseline,
    /// The migration of this index in [`MIGRATIONS`].
    Migration(usize),
    /// At this build's version: only the functions, if they changed.
    UpToDate,
    /// Migrated by a newer build: nothing to do, its functions stay.
    Newer,
}

fn next_step(version: usize, later: usize) -> Result<Step, PgError> {
    if version == 0 {
        return Ok(Step::Baseline);
    }
    let Some(past) = version.checked_sub(BASELINE_VERSION) else {
        return Err(PgError::BeforeBaseline { version, baseline: BASELINE_VERSION });
    };
    Ok(match past.cmp(&later) {
        std::cmp::Ordering::Less => Step::Migration(past),
        std::cmp::Ordering::Equal => Step::UpToDate,
        std::cmp::Ordering::Greater => Step::Newer,
    })
}

/// Brings the schema up to date. Returns the number of steps applied (the baseline counts as one).
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
        let next = match next_step(version as usize, MIGRATIONS.len())? {
            Step::UpToDate | Step::Newer => {
                if version as usize == latest() {
                    apply_functions(&tx, false).await?;
                }
                tx.commit().await?;
                return Ok(applied);
            }
            Step::Baseline => {
                let failed = |source| PgError::Migration { version: BASELINE_VERSION, source };
                tx.batch_execute(BASELINE).await.map_err(failed)?;
                for name in TRIGGER_FUNCTIONS {
                    let (name, sql) = FUNCTIONS.iter().find(|(n, _)| n == name).expect("a function of FUNCTIONS");
                    tx.batch_execute(sql).await.map_err(|source| PgError::Function { name, source })?;
                }
                tx.batch_execute(BASELINE_TRIGGERS).await.map_err(failed)?;
                BASELINE_VERSION
            }
            Step::Migration(i) => {
                let next = BASELINE_VERSION + i + 1;
                tx.batch_execute(MIGRATIONS[i]).await.map_err(|source| PgError::Migration { version: next, source })?;
                next
            }
        };
        tx.execute("INSERT INTO payhook_schema_version (version) VALUES ($1)", &[&(next as i32)]).await?;
        if next == latest() {
            // In the last step's transaction: no moment without the functions a migration dropped.
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
    BASELINE_VERSION + MIGRATIONS.len()
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

    /// The baseline defines no function (they are the files'), and its triggers call exactly the functions its
    /// step applies before them.
    #[test]
    fn the_baseline_leaves_the_functions_to_their_files_and_its_triggers_call_those_it_applies_first() {
        assert!(!BASELINE.contains("FUNCTION"), "0011_baseline.sql defines or names a function");
        let mut called: Vec<&str> = BASELINE_TRIGGERS
            .split("EXECUTE FUNCTION ")
            .skip(1)
            .map(|rest| rest.split('(').next().expect("a name"))
            .collect();
        called.sort();
        called.dedup();
        assert_eq!(called, TRIGGER_FUNCTIONS);
    }

    /// An empty schema gets the baseline; one at the baseline (however it got there: the baseline, or the eleven
    /// migrations before it) gets each later migration in turn; one below it is refused; one above this build's
    /// version is left alone.
    #[test]
    fn each_version_gets_its_next_step() {
        assert_eq!(next_step(0, 0).unwrap(), Step::Baseline);
        assert_eq!(next_step(0, 2).unwrap(), Step::Baseline);
        for version in 1..BASELINE_VERSION {
            let refused = next_step(version, 2).unwrap_err();
            assert!(matches!(refused, PgError::BeforeBaseline { version: v, baseline: 11 } if v == version));
        }
        assert_eq!(next_step(11, 0).unwrap(), Step::UpToDate);
        assert_eq!(next_step(11, 2).unwrap(), Step::Migration(0));
        assert_eq!(next_step(12, 2).unwrap(), Step::Migration(1));
        assert_eq!(next_step(13, 2).unwrap(), Step::UpToDate);
        assert_eq!(next_step(14, 2).unwrap(), Step::Newer);
        assert_eq!(next_step(12, 0).unwrap(), Step::Newer);
        assert_eq!(latest(), BASELINE_VERSION + MIGRATIONS.len());
    }
}
