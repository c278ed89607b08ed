//! The connection pool: deadpool-postgres over tokio-postgres, with TLS as `sslmode` says (see `tls`).
//!
//! Connections are created lazily and re-created after a failure, so payhook reconnects by itself when the
//! server comes back. Invariant: a connection whose last use failed in a way that leaves it in doubt (closed,
//! terminated, timed out mid-protocol, or unable to roll back) is detached from the pool and dropped, never handed
//! out again; the pool's recycle check (`is_closed`) catches the ones that broke while idle.

use crate::PgOptions;
use crate::error::PgError;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime};
use std::time::Duration;
use tokio_postgres::NoTls;

/// Builds the pool. No connection is opened yet.
pub(crate) fn build(options: &PgOptions) -> Result<Pool, PgError> {
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
    Pool::builder(manager)
        .max_size(options.pool_size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_millis(options.pool_wait_ms)))
        .create_timeout(Some(connect))
        .recycle_timeout(Some(connect))
        .build()
        .map_err(PgError::Build)
}

/// A connection from the pool. A new connection that failed because of TLS is a [`PgError::Tls`] saying why.
pub(crate) async fn get(pool: &Pool) -> Result<Object, PgError> {
    pool.get().await.map_err(|e| match &e {
        PoolError::Backend(cause) => crate::tls::TlsError::behind(cause).map_or(PgError::Pool(e), PgError::Tls),
        _ => PgError::Pool(e),
    })
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
