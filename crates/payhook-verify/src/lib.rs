//! payhook-verify: payment-provider webhooks verified on their raw bytes and read as one normalized event.
//!
//! - [`signature`]: signature schemes, verified on the raw bytes in constant time.
//! - [`mod@format`]: provider payload formats, turning a verified delivery into [`event::Event`]s.
//! - [`json_pointer`]: JSON pointers resolved without allocating, for the formats and the declarative rules.
//! - [`event`]: the normalized event and the newtypes that carry its checks (`EventId`, `OrderId`, `Money`, …).
//! - [`preset`]: providers' signature rules, formats and example deliveries, written as data (`presets/*.toml`).
//! - [`confirm`]: effects read from the provider's API about the signed resource, for providers that do not sign the
//!   body.
//! - [`request`]: what a received request offers its readers: [`request::Headers`], and the parts its signature
//!   covers ([`request::SignedParts`]); below both [`signature`] and [`mod@format`].
//! - [`mod@time`]: calendar time, providers' date-times to unix seconds and back.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod confirm;
pub mod event;
pub mod format;
pub mod json_pointer;
pub mod preset;
pub mod request;
pub mod signature;
mod template;
pub mod time;
