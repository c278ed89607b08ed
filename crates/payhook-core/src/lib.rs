//! payhook-core: the pure heart of payhook.
//!
//! Everything here is deterministic and free of IO and async, so it can be tested exhaustively and reused by
//! every backend and runtime:
//!
//! - [`signature`]: signature schemes, verified on the raw bytes in constant time.
//! - [`mod@format`]: provider payload formats, turning a verified delivery into [`event::Event`]s.
//! - [`json_pointer`]: JSON pointers resolved without allocating, for the formats and the declarative rules.
//! - [`event`]: the normalized event and the newtypes that carry its checks (`EventId`, `OrderId`, `Money`, …).
//! - [`ledger`]: the order state machine; turns an effect into a guarded [`ledger::Plan`] and explains a guard
//!   that matched nothing.
//! - [`billing`]: subscriptions (newest event wins, ended is final) and entitlements (one per paid invoice).
//! - [`preset`]: providers' signature rules, formats and example deliveries, written as data (`presets/*.toml`).
//! - [`confirm`]: effects read from the provider's API about the signed resource, for providers that do not sign the
//!   body.
//! - [`request`]: what a received request offers its readers: [`request::Headers`], and the parts its signature
//!   covers ([`request::SignedParts`]); below both [`signature`] and [`mod@format`].
//! - [`retry`]: the retry policy, a pure function from attempt count to the next attempt or a dead letter.
//! - [`mod@time`]: calendar time, providers' date-times to unix seconds and back.

pub mod billing;
pub mod confirm;
pub mod event;
pub mod format;
pub mod json_pointer;
pub mod ledger;
pub mod preset;
pub mod request;
pub mod retry;
pub mod signature;
mod template;
pub mod time;
