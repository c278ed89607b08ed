//! What every write operation shares: the configuration it runs under, and the crate's `Result` with the
//! conversion of SQLite's errors.

use crate::writer::unavailable;
use payhook_store::StoreError;

pub(crate) type Result<T> = std::result::Result<T, StoreError>;

/// The configuration the write operations run under, shared with the other backends (`payhook_store::WriteCtx`).
pub(crate) use payhook_store::{LiveWriteCtx as LiveCtx, WriteCtx as Ctx};

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
