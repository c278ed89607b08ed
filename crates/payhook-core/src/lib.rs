//! payhook-core: the pure heart of payhook's server.
//!
//! Everything here is deterministic and free of IO and async, so it can be tested exhaustively and reused by
//! every backend and runtime. Verification and normalization live in [`payhook_verify`], the crate a service of
//! its own can use too, and are re-exported here at the paths the rest of payhook names them by; this crate adds
//! what only a receiver that keeps state needs:
//!
//! - [`ledger`]: the order state machine; turns an effect into a guarded [`ledger::Plan`] and explains a guard
//!   that matched nothing.
//! - [`billing`]: subscriptions (newest event wins, ended is final) and entitlements (one per paid invoice).
//! - [`retry`]: the retry policy, a pure function from attempt count to the next attempt or a dead letter.
//!
//! Re-exported from `payhook_verify`: [`signature`], [`mod@format`], [`event`], [`preset`], [`confirm`],
//! [`request`], [`json_pointer`] and [`mod@time`].

pub mod billing;
pub mod ledger;
pub mod retry;

pub use payhook_verify::{confirm, event, format, json_pointer, preset, request, signature, time};
