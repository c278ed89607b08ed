//! Integration tests for `payhook_verify::signature`, compiled as one binary so
//! the crate is linked once.
//!
//! * `vectors`: the shared, provider-derived test vectors.
//! * `props`: property tests of sign/verify for every scheme.
//! * `candidates`: at most `MAX_SIGNATURE_CANDIDATES` signatures per delivery, in every scheme that takes a list.
//! * `adyen`: Adyen notifications, signed per item inside the body.
//! * `ed25519`: Standard Webhooks `v1a` with Ed25519 keys, alone and mixed with `whsec_` secrets.
//! * `http_signatures`: RFC 9421 message signatures and RFC 9530 content digests.
//! * `named`: the named body-HMAC providers (GitHub, Paystack, Shopify).
//! * `not_after`: secrets being rotated out, refused after their `not_after`.
//! * `units`: targeted behaviour (error kinds, header aliases, redaction).
//! * `json_pointer`: JSON pointers resolved as `serde_json` resolves them, for any document.
//! * `forgery`: every part of a valid delivery changed one at a time, for every scheme, format and preset:
//!   refused, unreadable, ignored or the same effect, never another order, amount, type or status.
//! * `fuzz`: arbitrary headers and bodies through every parser: no panics.
//! * `layers`: `signature` never imports `format`; `request` and `template` import neither.
//! * `webhook`: the crate's front door, `Webhook::verify` and its errors.
//! * `axum` (feature `axum`): the extractor and the layer.

mod adyen;
#[cfg(feature = "axum")]
mod axum;
mod candidates;
mod declared;
mod ed25519;
mod forgery;
mod fuzz;
mod http_signatures;
mod json_pointer;
mod layers;
mod named;
mod not_after;
mod props;
mod units;
mod vectors;
mod webhook;

use payhook_verify::signature::{Encoding, HmacAlgorithm, Nonce, Scheme, Secret, Verified, Verifier, VerifyError};

/// What a verification reported, as plain data a test can write out: a [`Verified`] itself only comes from a
/// verifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub secret_index: usize,
    pub delivery_id: Option<String>,
    pub timestamp: Option<i64>,
    pub nonce: Option<Nonce>,
}

/// A verification's result as [`Seen`].
pub fn seen(result: Result<Verified, VerifyError>) -> Result<Seen, VerifyError> {
    result.map(|v| Seen {
        secret_index: v.secret_index(),
        delivery_id: v.delivery_id().map(str::to_owned),
        timestamp: v.timestamp(),
        nonce: v.nonce().cloned(),
    })
}

/// GitHub's `X-Hub-Signature-256: sha256=<hex>` configuration.
pub fn github_scheme() -> Scheme {
    Scheme::Hmac {
        header: "x-hub-signature-256".into(),
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: Some("sha256=".into()),
    }
}

/// Paystack's `x-paystack-signature: <hex HMAC-SHA512>` configuration.
pub fn paystack_scheme() -> Scheme {
    Scheme::Hmac {
        header: "x-paystack-signature".into(),
        algorithm: HmacAlgorithm::Sha512,
        encoding: Encoding::Hex,
        prefix: None,
    }
}

/// Shopify's `X-Shopify-Hmac-Sha256: <base64>` configuration.
pub fn shopify_scheme() -> Scheme {
    Scheme::Hmac {
        header: "x-shopify-hmac-sha256".into(),
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Base64,
        prefix: None,
    }
}

/// A verifier with 300 s tolerance over the given secrets; panics on bad keys.
pub fn verifier(scheme: Scheme, secrets: &[&str]) -> Verifier {
    let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
    Verifier::new(scheme, &secrets, 300).expect("test secrets are valid")
}

/// Replaces (case-insensitively) the value of header `name`.
pub fn set_header(headers: &mut [(String, String)], name: &str, value: String) {
    let slot =
        headers.iter_mut().find(|(k, _)| k.eq_ignore_ascii_case(name)).unwrap_or_else(|| panic!("no header {name}"));
    slot.1 = value;
}

/// Returns (case-insensitively) the value of header `name`.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no header {name} in {headers:?}"))
}
