//! The connection pool: deadpool-postgres over tokio-postgres, with TLS as `sslmode` says (see `tls`).
//!
//! Connections are created lazily and re-created after a failure, so payhook reconnects by itself when the
//! server comes back. Invariant: a connection whose last use failed in a way that leaves it in doubt (closed,
//! terminated, timed out mid-protocol, or unable to roll back) is detached from the pool and dropped, never handed
//! out again; the pool's recycle check (`is_closed`) catches the ones that broke while idle.
//!
//! Reconnecting backs off: after a failed attempt to open a connection (no host up, or none of a multi-host URL's
//! hosts primary yet), a request that would need a new connection is refused at once ([`PgError::Reconnecting`],
//! answered 503) until the next attempt is due, 25 ms later and doubling up to `storage.reconnect_backoff_max_ms`;
//! then one request tries again for all. In a failover, the standby being promoted (which a read-write connection
//! string still reaches and refuses after authentication) therefore sees a few connection attempts a second, not
//! one per request. Connections already open are handed out as before. The readiness probe's pool shares the main
//! pool's backoff, so that once `/readyz` has connected again, requests do not wait out a backoff of their own.

use crate::PgOptions;
use crate::error::PgError;
pub(crate) use deadpool_postgres::Object;
use deadpool_postgres::{Manager, ManagerConfig, PoolError, RecyclingMethod, Runtime};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// The first wait after a failed connection attempt; it doubles with every further failure.
const BACKOFF_BASE: Duration = Duration::from_millis(25);

/// A deadpool-postgres pool, and when it may next try to open a connection.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    inner: deadpool_postgres::Pool,
    backoff: Arc<Backoff>,
}

impl Pool {
    /// Closes the pool: connections are dropped as they come back, and `get` fails from now on.
    pub(crate) fn close(&self) {
        self.inner.close();
    }

    /// Connection attempts that failed, and requests refused while the next one was not due.
    pub(crate) fn connect_metrics(&self) -> payhook_store::metrics::ConnectMetrics {
        payhook_store::metrics::ConnectMetrics {
            failures: self.backoff.failures.load(Ordering::Relaxed),
            held_back: self.backoff.held_back.load(Ordering::Relaxed),
        }
    }
}

/// When the next attempt to open a connection is due, after consecutive failures.
#[derive(Debug)]
struct Backoff {
    max: Duration,
    state: std::sync::Mutex<BackoffState>,
    failures: AtomicU64,
    held_back: AtomicU64,
}

#[derive(Debug, Default)]
struct BackoffState {
    /// Consecutive failed attempts (0: connecting works).
    failed: u32,
    /// No attempt before this (set when an attempt starts, so that one request tries at a time).
    not_before: Option<Instant>,
}

impl Backoff {
    fn delay(&self, failed: u32) -> Duration {
        BACKOFF_BASE.saturating_mul(1 << failed.saturating_sub(1).min(16)).min(self.max)
    }

    /// Whether a request may try to open a connection now; if it may, the others wait for this attempt's
    /// backoff to pass (or for its success).
    fn may_attempt(&self, now: Instant) -> bool {
        let Ok(mut state) = self.state.lock() else { return true };
        if state.failed == 0 {
            return true;
        }
        match state.not_before {
            Some(t) if now < t => {
                self.held_back.fetch_add(1, Ordering::Relaxed);
                false
            }
            _ => {
                state.not_before = Some(now + self.delay(state.failed));
                true
            }
        }
    }

    fn succeeded(&self) {
        if let Ok(mut state) = self.state.lock()
            && state.failed > 0
        {
            tracing::info!(failed_attempts = state.failed, "postgres: connected again");
            *state = BackoffState::default();
        }
    }

    fn failed(&self, now: Instant) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut state) = self.state.lock() {
            state.failed = state.failed.saturating_add(1);
            state.not_before = Some(now + self.delay(state.failed));
            if state.failed == 1 {
                tracing::warn!("postgres: no connection could be opened; backing off between attempts");
            }
        }
    }
}

/// Builds the pool. No connection is opened yet.
pub(crate) fn build(options: &PgOptions) -> Result<Pool, PgError> {
    let backoff = Backoff {
        max: Duration::from_millis(options.reconnect_backoff_max_ms.max(1)),
        state: std::sync::Mutex::default(),
        failures: AtomicU64::new(0),
        held_back: AtomicU64::new(0),
    };
    build_with(options, Arc::new(backoff))
}

/// Builds a pool to the same server as `beside` (the readiness probe's, beside the main pool), sharing its
/// reconnect backoff: a connection either of them opens shows the server is back, and the other tries at once.
pub(crate) fn build_beside(options: &PgOptions, beside: &Pool) -> Result<Pool, PgError> {
    build_with(options, Arc::clone(&beside.backoff))
}

fn build_with(options: &PgOptions, backoff: Arc<Backoff>) -> Result<Pool, PgError> {
    let mut config = options.config.clone();
    // Per-session settings travel in the startup packet, so every connection the pool (re)creates has them.
    let mut startup = config.get_options().unwrap_or_default().to_owned();
    if options.statement_timeout_ms > 0 {
        startup.push_str(&format!(" -c statement_timeout={}", options.statement_timeout_ms));
    }
    config.options(startup.trim());
    if config.get_application_name().is_none() {
        config.application_name("payhook");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_millis(options.connect_timeout_ms));
    }
    let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
    // The server never speaks TLS on a Unix socket: with only sockets to connect to, not even ask.
    let manager = match options.tls.connector() {
        Some(tls) if !crate::tls::unix_sockets_only(&config) => {
            config.ssl_mode(options.tls.mode().wire());
            Manager::from_config(config, tls, manager_config)
        }
        _ => {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
            Manager::from_config(config, NoTls, manager_config)
        }
    };
    let connect = Duration::from_millis(options.connect_timeout_ms);
    let inner = deadpool_postgres::Pool::builder(manager)
        .max_size(options.pool_size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_millis(options.pool_wait_ms)))
        .create_timeout(Some(connect))
        .recycle_timeout(Some(connect))
        .build()
        .map_err(PgError::Build)?;
    Ok(Pool { inner, backoff })
}

/// A connection from the pool. A new connection that failed because of TLS is a [`PgError::Tls`] saying why;
/// while connecting fails, a request that would need a new connection is refused until the next attempt is due
/// ([`PgError::Reconnecting`]).
pub(crate) async fn get(pool: &Pool) -> Result<Object, PgError> {
    // An idle connection needs no attempt; otherwise this request would open one (or wait for one in use).
    if pool.inner.status().available == 0 && !pool.backoff.may_attempt(Instant::now()) {
        return Err(PgError::Reconnecting);
    }
    match pool.inner.get().await {
        Ok(client) => {
            pool.backoff.succeeded();
            Ok(client)
        }
        Err(e) => {
            if matches!(e, PoolError::Backend(_) | PoolError::Timeout(deadpool_postgres::TimeoutType::Create)) {
                pool.backoff.failed(Instant::now());
            }
            Err(match &e {
                PoolError::Backend(cause) => crate::tls::TlsError::behind(cause).map_or(PgError::Pool(e), PgError::Tls),
                _ => PgError::Pool(e),
            })
        }
    }
}

/// Gives a connection back after a failed use: dropped for good when the failure left it in doubt (`broken`),
/// else rolled back (ending any transaction it was in) and returned; dropped too if that rollback fails.
pub(crate) async fn release_after(client: Object, broken: bool) {
    if broken || client.is_closed() {
        discard(client);
        return;
    }
    match tokio::time::timeout(Duration::from_secs(5), client.batch_execute("ROLLBACK")).await {
        Ok(Ok(())) => {}
        _ => discard(client),
    }
}

/// Detaches a connection from the pool; dropping it closes the socket.
pub(crate) fn discard(client: Object) {
    drop(Object::take(client));
}
