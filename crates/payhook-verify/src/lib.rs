#![doc = include_str!("../README.md")]
//!
//! ## The modules
//!
//! The front door is [`Webhook`]; underneath it, the parts payhook's own server is built on:
//!
//! - [`signature`]: signature schemes, verified on the raw bytes in constant time ([`signature::Verifier`]).
//! - [`mod@format`]: provider payload formats, turning a verified delivery into [`Event`]s.
//! - [`event`]: the normalized event and the newtypes that carry its checks (`EventId`, `OrderId`, `Money`, …).
//! - [`preset`]: providers' signature rules, formats and example deliveries, written as data (`presets/*.toml`).
//! - [`confirm`]: effects read from the provider's API about the signed resource, for providers that do not sign
//!   the body.
//! - [`request`]: what a received request offers its readers: [`request::Headers`], and the parts its signature
//!   covers ([`request::SignedParts`]); below both [`signature`] and [`mod@format`].
//! - [`json_pointer`]: JSON pointers resolved without allocating, for the formats and the declarative rules.
//! - [`mod@time`]: calendar time, providers' date-times to unix seconds and back.
//! - [`providers`]: every provider by name, with an example each.
//!
//! Everything below [`Webhook`] is free of IO and of a clock: time is a parameter (`now_unix`). [`Webhook::verify`]
//! reads the system clock; [`Webhook::verify_at`] takes the time instead.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod confirm;
mod error;
pub mod event;
pub mod format;
#[cfg(feature = "http")]
mod http_request;
pub mod json_pointer;
pub mod preset;
pub mod providers;
pub mod request;
pub mod signature;
mod template;
pub mod time;
mod webhook;

#[cfg(feature = "axum")]
pub mod axum;

pub use error::{ConfigError, Error};
pub use event::Event;
pub use request::Headers;
pub use signature::Secret;
pub use webhook::{Builder, DEFAULT_TOLERANCE_SECS, Delivery, SignedRequest, Webhook};
