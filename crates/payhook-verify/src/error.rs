//! What can go wrong: building a [`Webhook`](crate::Webhook) ([`ConfigError`]), and verifying a delivery
//! ([`Error`], with the HTTP status to answer and a JSON body for it).

use crate::confirm::ConfirmError;
use crate::format::{FormatSpecError, ParseError};
use crate::preset::PresetError;
use crate::signature::{ComponentError, KeyError, VerifyError};

/// Why a delivery was not accepted: what failed, the HTTP status to answer ([`Error::status`]) and a JSON body for
/// it ([`Error::json`]).
///
/// A provider retries a delivery answered with anything but a 2xx, so every variant's status is a 4xx: a forged,
/// stale or unreadable delivery is refused where the provider's dashboard shows it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The signature is missing, malformed, stale or wrong: nothing in the delivery can be trusted. `401`.
    #[error("signature verification failed: {0}")]
    Signature(#[from] VerifyError),
    /// The signature verified but the body is not one the provider's format can read (a required field is
    /// missing, it is not JSON, an unsigned header it depends on is not confirmed by the body). `422`: the
    /// delivery is genuine, so a service with a place for it may keep the raw body and answer 2xx instead.
    #[error("the delivery verified but cannot be read: {0}")]
    Unreadable(#[from] ParseError),
    /// The provider's API answer about the signed resource does not confirm the delivery
    /// ([`Webhook::confirm`](crate::Webhook::confirm)). `422`.
    #[error("the delivery cannot be confirmed: {0}")]
    Unconfirmed(#[from] ConfirmError),
    /// The body is longer than the limit (the `axum` integration's). `413`.
    #[error("the body is over the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The body could not be read (the `axum` integration's: the client went away, a broken chunked body). `400`.
    #[error("the body could not be read")]
    Body,
}

impl Error {
    /// The HTTP status to answer with: `401` for a signature that does not verify, `422` for a genuine delivery
    /// that cannot be read or confirmed, `413` for a body over the limit, `400` for a body that could not be read.
    pub fn status(&self) -> u16 {
        match self {
            Self::Signature(_) => 401,
            Self::Unreadable(_) | Self::Unconfirmed(_) => 422,
            Self::BodyTooLarge { .. } => 413,
            Self::Body => 400,
        }
    }

    /// A short, stable machine code: the signature's ([`VerifyError::code`]: `missing_header`, `malformed`,
    /// `stale`, `mismatch`, …), or `unreadable`, `unconfirmed`, `body_too_large`, `body_unreadable`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Signature(e) => e.code(),
            Self::Unreadable(_) => "unreadable",
            Self::Unconfirmed(_) => "unconfirmed",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::Body => "body_unreadable",
        }
    }

    /// The answer's body, `{"error": "<code>", "message": "<sentence>"}`, as payhook's server writes it. The
    /// sentence says what failed and never holds a secret or a signature.
    pub fn json(&self) -> String {
        serde_json::json!({ "error": self.code(), "message": self.to_string() }).to_string()
    }
}

/// Why a [`Webhook`](crate::Webhook) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No built-in provider or preset has this name.
    #[error("unknown provider {name:?} (expected one of {})", crate::webhook::provider_names().join(", "))]
    UnknownProvider {
        /// The name asked for.
        name: String,
    },
    /// The preset cannot be used (a test keeps every shipped preset free of this).
    #[error(transparent)]
    Preset(#[from] PresetError),
    /// A secret is unusable for the scheme, or none was given.
    #[error("secrets: {0}")]
    Secret(#[from] KeyError),
    /// The RFC 9421 components to require are not valid component names.
    #[error("required_components: {0}")]
    Components(#[from] ComponentError),
    /// The format reads a part of the delivery its signature does not cover, so anyone could change it.
    #[error("format.{0}")]
    Unsigned(FormatSpecError),
}
