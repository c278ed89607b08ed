//! `payhook orders import FILE`: register many orders at once, straight into the configured database.

use crate::config::{Config, StorageConfig};
use anyhow::{Context, Result, bail};
use clap::Subcommand;
use payhook_postgres::PgStore;
use payhook_server::{Actor, audit, now_ms, parse_order};
use payhook_sqlite::SqliteStore;
use payhook_store::{AuditAction, NewOrder, Registered, Store};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub enum OrdersCommand {
    /// Register orders from a CSV file (header: id,amount,currency) or JSON lines ({"id","amount","currency"}).
    Import {
        /// The file; `.csv` is read as CSV, anything else as JSON lines.
        file: PathBuf,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    id: String,
    amount: i64,
    currency: String,
}

pub async fn run(cfg: Config, command: OrdersCommand) -> Result<()> {
    match command {
        OrdersCommand::Import { file } => {
            let orders = read(&file)?;
            let (created, existing, conflicts) = match cfg.storage {
                StorageConfig::Sqlite(options) => {
                    let queue_depth = options.queue_depth;
                    let store = Arc::new(SqliteStore::open(options)?);
                    let counts = import(&store, orders, queue_depth, &file).await;
                    store.shutdown().await;
                    counts?
                }
                StorageConfig::Postgres(options) => {
                    let queue_depth = options.queue_depth;
                    let store = Arc::new(PgStore::open(options).await?);
                    let counts = import(&store, orders, queue_depth, &file).await;
                    store.shutdown().await;
                    counts?
                }
            };
            println!("{created} created, {existing} already registered, {} conflicts", conflicts.len());
            if !conflicts.is_empty() {
                bail!("orders registered with another amount or currency: {}", conflicts.join(", "));
            }
            Ok(())
        }
    }
}

/// Registers `orders` (read from `file`) in `store`: (created, already registered, conflicts). The import is one
/// entry of the audit trail, with its counts.
async fn import<S: Store>(
    store: &Arc<S>,
    orders: Vec<NewOrder>,
    queue_depth: usize,
    file: &Path,
) -> Result<(usize, usize, Vec<String>)> {
    let counts = register_all(store, orders, queue_depth).await;
    let (outcome, detail) = match &counts {
        Ok((created, existing, conflicts)) => (
            "ok",
            serde_json::json!({ "created": created, "already_registered": existing, "conflicts": conflicts.len() }),
        ),
        Err(e) => ("error", serde_json::json!({ "error": format!("{e:#}") })),
    };
    let detail = serde_json::json!({ "file": file.display().to_string(), "result": detail });
    let entry = Actor::cli().entry(AuditAction::OrderImport, None, outcome, detail, now_ms());
    audit::record(&**store, entry).await?;
    counts
}

async fn register_all<S: Store>(
    store: &Arc<S>,
    orders: Vec<NewOrder>,
    queue_depth: usize,
) -> Result<(usize, usize, Vec<String>)> {
    let (mut created, mut existing) = (0usize, 0usize);
    let mut conflicts = Vec::new();
    // Submitted together so they share the writer's commits, but never more at once than the writer's
    // queue holds: a full queue refuses a job (load shedding) instead of waiting for room.
    let room = Arc::new(tokio::sync::Semaphore::new(queue_depth));
    let mut tasks = tokio::task::JoinSet::new();
    for order in orders {
        let store = Arc::clone(store);
        let permit = Arc::clone(&room).acquire_owned().await?;
        tasks.spawn(async move {
            let result = (order.id.clone(), store.register_order(order).await);
            drop(permit);
            result
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let (id, result) = joined?;
        match result.with_context(|| format!("order {id}"))? {
            Registered::Created => created += 1,
            Registered::AlreadyExists => existing += 1,
            Registered::Conflict { existing } => conflicts.push(format!("{id} (stored: {existing})")),
        }
    }
    Ok((created, existing, conflicts))
}

fn read(path: &Path) -> Result<Vec<NewOrder>> {
    let now = now_ms();
    let mut out = Vec::new();
    let to_order = |line: String, r: Row| {
        parse_order(r.id, r.amount, &r.currency, now).with_context(|| format!("{}: {line}", path.display()))
    };
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
        let mut reader = csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
        for (i, row) in reader.deserialize::<Row>().enumerate() {
            let line = format!("record {}", i + 1);
            let row = row.with_context(|| format!("{}: {line}", path.display()))?;
            out.push(to_order(line, row)?);
        }
    } else {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        for (i, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let line = format!("line {}", i + 1);
            let row: Row = serde_json::from_str(l).with_context(|| format!("{}: {line}", path.display()))?;
            out.push(to_order(line, row)?);
        }
    }
    Ok(out)
}
