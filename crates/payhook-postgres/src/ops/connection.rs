//! Running an operation on a pooled connection: a failed one is rolled back or discarded, and a transaction the
//! server rolled back for a deadlock or a serialization failure runs again.

use super::*;

/// Why an operation on one connection failed: the database (the connection may be in doubt) or a stored value.
#[derive(Debug)]
pub(crate) enum Failure {
    Pg(PgError),
    Corrupt(StoreError),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(PgError::Db(e))
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Corrupt(e)
    }
}

/// Runs `op` on a pooled connection; after a failure, the connection is rolled back or discarded.
pub(crate) async fn on_connection<T, F>(pool: &Pool, op: F) -> Result<T, StoreError>
where
    F: AsyncFnOnce(&Object) -> Result<T, Failure>,
{
    let client = pool::get(pool).await?;
    match op(&client).await {
        Ok(value) => Ok(value),
        Err(Failure::Pg(e)) => {
            pool::release_after(client, e.breaks_connection()).await;
            Err(e.into())
        }
        Err(Failure::Corrupt(e)) => {
            pool::release_after(client, false).await;
            Err(e)
        }
    }
}

/// Runs the transaction `op()` makes on a pooled connection, again (up to three times in all) when the server
/// rolled it back for a deadlock or a serialization failure; any other failure is returned as it is.
///
/// `op` makes a fresh `AsyncFnOnce` per attempt: an `AsyncFn` called by reference would be simpler, but its future
/// cannot be shown to be `Send` (a known limitation of async closures), and the store's futures must be.
pub(crate) async fn rerun_on_conflict<T, F, G>(pool: &Pool, what: &str, op: F) -> Result<T, StoreError>
where
    F: Fn() -> G,
    G: AsyncFnOnce(&Object) -> Result<T, Failure>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        let client = pool::get(pool).await?;
        let error = match op()(&client).await {
            Ok(value) => return Ok(value),
            Err(Failure::Corrupt(e)) => {
                pool::release_after(client, false).await;
                return Err(e);
            }
            Err(Failure::Pg(e)) => {
                pool::release_after(client, e.breaks_connection()).await;
                e
            }
        };
        if attempt >= 3 || !error.is_conflict() {
            return Err(error.into());
        }
        tracing::debug!(what, attempt, "a transaction hit a deadlock; running it again");
    }
}
