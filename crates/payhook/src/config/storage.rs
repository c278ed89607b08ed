//! The `[storage]` table: which backend, and its bounds (the writer's queue and batches, SQLite's readers and WAL,
//! PostgreSQL's pool, the listings' scan bound).

use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    pub(super) url: String,
    pub(super) group_commit: bool,
    pub(super) batch_max: usize,
    pub(super) queue_depth: usize,
    pub(super) busy_timeout_ms: u64,
    pub(super) read_connections: usize,
    pub(super) read_timeout_ms: u64,
    pub(super) wal_limit_bytes: u64,
    pub(super) wal_checkpoint_wait_ms: u64,
    pub(super) writer_cache_bytes: u64,
    pub(super) vacuum_step_pages: u32,
    pub(super) list_scan_rows: u32,
    pub(super) fsync: String,
    pub(super) pool_size: usize,
    pub(super) writers: Option<usize>,
    pub(super) executing_writers: Option<usize>,
    pub(super) statement_timeout_ms: u64,
    pub(super) connect_timeout_ms: u64,
    pub(super) partition_lock_timeout_ms: u64,
    pub(super) reconnect_backoff_max_ms: u64,
    pub(super) require_sync_standby: bool,
    pub(super) read_url: Option<String>,
    pub(super) read_pool_size: usize,
}

/// The smallest scan bound: a listing page of the most rows (`MAX_LIMIT`, plus the one that says whether more
/// exist) must be possible to fill in one call.
const MIN_LIST_SCAN_ROWS: u32 = payhook_server::admin::MAX_LIMIT + 1;

/// The writer's page cache: at least 1 MiB (a few hundred pages: the upper levels of the busy B-trees), at most
/// 64 GiB (a larger figure is a typo, not a plan).
const MIN_WRITER_CACHE_BYTES: u64 = 1 << 20;
const MAX_WRITER_CACHE_BYTES: u64 = 64 << 30;

pub(super) fn resolve_storage(raw: RawStorage, retry: RetryPolicy) -> Result<StorageConfig> {
    if raw.batch_max == 0 || raw.queue_depth == 0 {
        bail!("storage.batch_max and storage.queue_depth must be positive");
    }
    let sync = match raw.fsync.as_str() {
        // One commit per event means one fsync per event: the naive mode group commit is measured against.
        _ if !raw.group_commit => CommitSync::InCommit,
        "pipelined" => CommitSync::Pipelined,
        "in-commit" => CommitSync::InCommit,
        other => bail!("storage.fsync: {other:?} is not one of \"pipelined\", \"in-commit\""),
    };
    let batch_max = if raw.group_commit { raw.batch_max } else { 1 };
    if raw.list_scan_rows < MIN_LIST_SCAN_ROWS {
        bail!("storage.list_scan_rows: must be at least {MIN_LIST_SCAN_ROWS}, the largest page a listing returns");
    }
    // An empty read_url (an environment override clearing it) is no read_url.
    let read_url = raw.read_url.as_deref().filter(|u| !u.is_empty());
    if let Some(path) = raw.url.strip_prefix("sqlite://") {
        if read_url.is_some() {
            // Refused rather than ignored: whoever sets it expects the reads to go elsewhere.
            bail!(
                "storage.read_url: only for PostgreSQL; storage.url is sqlite://, whose reads have connections of their own (storage.read_connections)"
            );
        }
        if path.is_empty() {
            bail!("storage.url: sqlite:// needs a path");
        }
        if raw.read_connections == 0 || raw.read_timeout_ms == 0 {
            bail!("storage.read_connections and storage.read_timeout_ms must be positive");
        }
        if raw.wal_limit_bytes < 1 << 20 {
            bail!("storage.wal_limit_bytes: must be at least 1 MiB (1048576)");
        }
        if raw.wal_checkpoint_wait_ms == 0 || raw.wal_checkpoint_wait_ms >= raw.busy_timeout_ms {
            bail!("storage.wal_checkpoint_wait_ms: must be positive and below storage.busy_timeout_ms");
        }
        if !(MIN_WRITER_CACHE_BYTES..=MAX_WRITER_CACHE_BYTES).contains(&raw.writer_cache_bytes) {
            bail!(
                "storage.writer_cache_bytes: must be between 1 MiB ({MIN_WRITER_CACHE_BYTES}) and 64 GiB ({MAX_WRITER_CACHE_BYTES})"
            );
        }
        return Ok(StorageConfig::Sqlite(SqliteOptions {
            sync,
            path: PathBuf::from(path),
            batch_max,
            queue_depth: raw.queue_depth,
            busy_timeout_ms: raw.busy_timeout_ms,
            read_connections: raw.read_connections,
            read_timeout_ms: raw.read_timeout_ms,
            retry,
            routing: Default::default(),
            wal_limit_bytes: raw.wal_limit_bytes,
            wal_checkpoint_wait_ms: raw.wal_checkpoint_wait_ms,
            writer_cache_bytes: raw.writer_cache_bytes,
            vacuum_step_pages: raw.vacuum_step_pages,
            list_scan_rows: raw.list_scan_rows,
        }));
    }
    if !(raw.url.starts_with("postgres://") || raw.url.starts_with("postgresql://")) {
        // Never echo the URL: it may hold a password.
        bail!("storage.url: unsupported scheme; use sqlite://PATH or postgres://USER@HOST:PORT/DATABASE");
    }
    // The parser's message names the problem without repeating the URL.
    let mut options = PgOptions::new(&raw.url).context("storage.url")?;
    if raw.pool_size == 0 {
        bail!("storage.pool_size must be positive");
    }
    let writers = raw.writers.unwrap_or_else(|| PgOptions::default_writers(raw.pool_size));
    if writers == 0 || writers > raw.pool_size {
        bail!("storage.writers must be between 1 and storage.pool_size ({})", raw.pool_size);
    }
    // One event per transaction (no group commit) gains nothing from waiting for a turn: every writer executes.
    let executing_writers = raw.executing_writers.unwrap_or(if raw.group_commit { 1 } else { writers });
    if executing_writers == 0 || executing_writers > writers {
        bail!("storage.executing_writers must be between 1 and storage.writers ({writers})");
    }
    if raw.connect_timeout_ms == 0 {
        bail!("storage.connect_timeout_ms must be positive");
    }
    options.pool_size = raw.pool_size;
    options.writers = writers;
    options.executing_writers = executing_writers;
    options.statement_timeout_ms = raw.statement_timeout_ms;
    options.connect_timeout_ms = raw.connect_timeout_ms;
    options.pool_wait_ms = raw.connect_timeout_ms;
    if raw.partition_lock_timeout_ms == 0 || raw.partition_lock_timeout_ms > i32::MAX as u64 {
        bail!("storage.partition_lock_timeout_ms must be between 1 and {}", i32::MAX);
    }
    options.partition_lock_timeout_ms = raw.partition_lock_timeout_ms;
    if raw.reconnect_backoff_max_ms == 0 || raw.reconnect_backoff_max_ms > 60_000 {
        bail!("storage.reconnect_backoff_max_ms must be between 1 and 60000");
    }
    options.reconnect_backoff_max_ms = raw.reconnect_backoff_max_ms;
    options.batch_max = batch_max;
    options.queue_depth = raw.queue_depth;
    options.retry = retry;
    options.list_scan_rows = raw.list_scan_rows;
    options.require_sync_standby = raw.require_sync_standby;
    if let Some(read_url) = read_url {
        if !(read_url.starts_with("postgres://") || read_url.starts_with("postgresql://")) {
            // Never echo the URL: it may hold a password.
            bail!("storage.read_url: unsupported scheme; use postgres://USER@HOST:PORT/DATABASE");
        }
        // The parser's message names the problem without repeating the URL.
        options.set_read_url(read_url).context("storage.read_url")?;
        if raw.read_pool_size == 0 {
            bail!("storage.read_pool_size must be positive");
        }
        options.read_pool_size = raw.read_pool_size;
    }
    Ok(StorageConfig::Postgres(options))
}
