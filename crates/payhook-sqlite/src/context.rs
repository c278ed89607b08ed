//! What every write operation shares: the configuration it runs under, and the crate's `Result` with the
//! conversion of SQLite's errors.

use crate::writer::unavailable;
use payhook_core::retry::RetryPolicy;
use payhook_store::{Routing, StoreError};

pub(crate) type Result<T> = std::result::Result<T, StoreError>;

/// The configuration the write operations need: the retry policy of deferred events and the sink routing.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) retry: RetryPolicy,
    pub(crate) routing: Routing,
}

/// The current [`Ctx`], replaced whole when the routing is reloaded: an operation takes it once and runs under it
/// to its commit.
pub(crate) type LiveCtx = payhook_store::Current<Ctx>;

/// Puts `routing` in force for the operations started from now on.
pub(crate) fn set_routing(ctx: &LiveCtx, routing: Routing) {
    ctx.update(|c| Ctx { retry: c.retry.clone(), routing });
}

pub(crate) trait SqlResult<T> {
    fn db(self) -> Result<T>;
}

impl<T> SqlResult<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T> {
        self.map_err(unavailable)
    }
}

/// Column `i` of `row` as an outbox kind.
pub(crate) fn outbox_kind(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<payhook_store::OutboxKind> {
    let s: String = row.get(i)?;
    payhook_store::OutboxKind::parse(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, format!("outbox kind {s:?}").into())
    })
}
