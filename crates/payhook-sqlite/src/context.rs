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

/// The current [`Ctx`], replaced whole when the routing is reloaded: an operation takes it once, when it is
/// submitted, and runs under it to its commit.
#[derive(Debug)]
pub(crate) struct LiveCtx(std::sync::RwLock<std::sync::Arc<Ctx>>);

impl LiveCtx {
    pub(crate) fn new(ctx: Ctx) -> Self {
        Self(std::sync::RwLock::new(std::sync::Arc::new(ctx)))
    }

    /// The context in force now.
    pub(crate) fn current(&self) -> std::sync::Arc<Ctx> {
        // A poisoned lock still holds a whole context: the swap is one assignment.
        std::sync::Arc::clone(&self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Puts `routing` in force for the operations submitted from now on.
    pub(crate) fn set_routing(&self, routing: Routing) {
        let mut slot = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = std::sync::Arc::new(Ctx { retry: slot.retry.clone(), routing });
    }
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
