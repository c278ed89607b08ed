//! The backend's own errors, and how they become [`StoreError`]s.

use payhook_store::StoreError;
use std::time::Duration;
use tokio_postgres::error::SqlState;

/// What went wrong talking to PostgreSQL. Kept as the `source()` of the [`StoreError`] the caller sees.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// `storage.url` is not a PostgreSQL connection string.
    #[error("invalid PostgreSQL connection string")]
    Url(#[source] tokio_postgres::Error),
    /// `sslmode` or `sslrootcert` in the connection string cannot be used.
    #[error(transparent)]
    TlsConfig(#[from] crate::tls::TlsConfigError),
    /// A connection could not be made because TLS failed: the server's certificate was refused, or the server
    /// does not speak TLS and the mode requires it.
    #[error("TLS with the database failed")]
    Tls(#[source] crate::tls::TlsError),
    /// The connection pool could not be built.
    #[error("cannot build the connection pool")]
    Build(#[source] deadpool_postgres::BuildError),
    /// No connection could be had: the server is unreachable, refuses connections, or every connection stayed
    /// busy for longer than the pool's wait timeout.
    #[error("no database connection available")]
    Pool(#[source] deadpool_postgres::PoolError),
    /// Opening a connection failed a moment ago and the next attempt is not due yet (see `pool`): the database
    /// is down, or no host of the connection string is primary yet.
    #[error("no database connection: reconnecting, the next attempt is not due yet")]
    Reconnecting,
    /// A statement failed, or the connection broke while it ran.
    #[error("database error")]
    Db(#[from] tokio_postgres::Error),
    /// A batch or a query took longer than its deadline; its connection is discarded.
    #[error("no answer from the database within {0:?}")]
    Timeout(Duration),
    /// One delivery of a batch failed inside its own savepoint (and left nothing behind); its batch-mates went on.
    #[error("the delivery could not be recorded: {0}")]
    Savepoint(String),
    /// The server refused a batch's writes because it is read-only (a standby, or a primary being demoted or
    /// fenced): the batch function's savepoints caught the refusal of each delivery, so it is reported here for
    /// the whole batch, and the connection is dropped so that the next one finds the primary.
    #[error("the database server is read-only (a standby, or a primary being demoted)")]
    ReadOnly,
    /// Applying a migration failed.
    #[error("migration {version} failed")]
    Migration {
        /// The schema version the migration leads to.
        version: usize,
        /// Why.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Applying one of the schema's functions (`sql/functions/NAME.sql`) failed.
    #[error("creating the function {name} failed")]
    Function {
        /// The function.
        name: &'static str,
        /// Why.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database's schema is older than this build's baseline (see `migrate`): a release before the previous
    /// one left it there, and only a build whose schema version is the baseline's can bring it up to it.
    #[error(
        "the database is at schema version {version}, older than this build's baseline (version {baseline}): \
         upgrade it first with a payhook release whose schema version is {baseline}, then start this one"
    )]
    BeforeBaseline {
        /// The version recorded in `payhook_schema_version`.
        version: usize,
        /// The baseline's version.
        baseline: usize,
    },
    /// No schema of the connection's `search_path` exists, so there is nowhere to create the tables.
    #[error("no schema of the search_path exists: create it, or fix the search_path in storage.url")]
    NoSchema,
    /// The store is shutting down.
    #[error("the store is shutting down")]
    ShuttingDown,
}

impl PgError {
    /// The SQLSTATE of a database error, if this is one.
    pub fn code(&self) -> Option<&SqlState> {
        match self {
            PgError::Db(e) | PgError::Migration { source: e, .. } | PgError::Function { source: e, .. } => e.code(),
            PgError::Pool(deadpool_postgres::PoolError::Backend(e)) => e.code(),
            _ => None,
        }
    }

    /// A deadlock or serialization failure: the server rolled the whole transaction back, so it is safe (and
    /// expected) to run it again.
    pub fn is_conflict(&self) -> bool {
        let conflicts = [SqlState::T_R_DEADLOCK_DETECTED, SqlState::T_R_SERIALIZATION_FAILURE];
        self.code().is_some_and(|c| conflicts.contains(c))
    }

    /// The connection it happened on cannot be trusted any more (closed, terminated, timed out mid-protocol), or
    /// leads to a server that no longer takes writes, so it must not go back to the pool.
    ///
    /// 25006 (`read_only_sql_transaction`) is here because of failover: a session whose server was demoted, or
    /// fenced by a failover manager with `default_transaction_read_only`, refuses every write for the rest of its
    /// life. Dropped, it is replaced by a new connection, and a multi-host `storage.url` with
    /// `target_session_attrs=read-write` makes that one find the current primary.
    pub fn breaks_connection(&self) -> bool {
        match self {
            PgError::Db(e) => {
                e.is_closed()
                    || e.code().is_none_or(|c| {
                        // Class 08 (connection exception) and 57P0x (operator intervention: terminated, shut down).
                        c.code().starts_with("08") || c.code().starts_with("57P") || is_read_only(c)
                    })
            }
            PgError::Timeout(_) | PgError::ReadOnly => true,
            _ => false,
        }
    }
}

/// The server refused a write because it, or the session, is read-only (a standby, or a fenced primary).
fn is_read_only(code: &SqlState) -> bool {
    *code == SqlState::READ_ONLY_SQL_TRANSACTION
}

/// A savepoint's failure detail (`SQLSTATE: message`, as the batch functions write it) that says the server is
/// read-only.
pub(crate) fn detail_is_read_only(detail: &str) -> bool {
    detail.starts_with(SqlState::READ_ONLY_SQL_TRANSACTION.code())
}

impl From<PgError> for StoreError {
    fn from(e: PgError) -> Self {
        match e {
            PgError::ShuttingDown => StoreError::ShuttingDown,
            e => StoreError::Unavailable(Box::new(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutting_down_is_its_own_store_error_and_everything_else_is_unavailable() {
        assert!(matches!(StoreError::from(PgError::ShuttingDown), StoreError::ShuttingDown));
        let e = StoreError::from(PgError::Savepoint("23505: duplicate key".into()));
        assert!(matches!(&e, StoreError::Unavailable(cause) if cause.to_string().contains("23505")), "{e:?}");
        assert!(PgError::Timeout(Duration::from_secs(1)).breaks_connection());
        assert!(!PgError::Savepoint(String::new()).is_conflict());
        assert!(PgError::ReadOnly.breaks_connection());
        assert!(detail_is_read_only("25006: cannot execute INSERT in a read-only transaction"));
        assert!(!detail_is_read_only("23505: duplicate key value violates unique constraint"));
    }
}
