//! A signature rule as written: the `[signature]` table's types, and the parse of its `signed` template.

use serde::Deserialize;

use super::super::{Encoding, HmacAlgorithm};
use crate::template::split_template;

/// A signature rule as written in configuration (a source's `[sources.signature]` table or a preset's
/// `[signature]`). [`DeclaredScheme::new`](super::DeclaredScheme::new) checks it and compiles its template.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureSpec {
    /// The header that carries the signature (any case; looked up case-insensitively).
    pub header: String,
    /// How the header's value holds the signature(s).
    #[serde(default)]
    pub split: Split,
    /// `plain` only: a literal prefix (such as `sha256=`) that must be there and is stripped.
    pub prefix: Option<String>,
    /// `pairs`: between two pairs (default `,`); `list`: between two items (default a space).
    pub separator: Option<String>,
    /// `pairs`: the key of the signature values (it may repeat while the provider rotates its secret).
    pub signature_key: Option<String>,
    /// `pairs`: the key of the signed timestamp.
    pub timestamp_key: Option<String>,
    /// `list`: only items starting with this prefix (such as `v1,`) are signatures; it is stripped.
    pub item_prefix: Option<String>,
    /// The header of the signed timestamp, when it is not a pair of the signature header.
    pub timestamp_header: Option<String>,
    /// The timestamp's unit.
    #[serde(default)]
    pub timestamp_unit: TimeUnit,
    /// The header of the provider's delivery id (`{id}` in `signed`); required when it is signed, else it only labels
    /// the delivery.
    pub id_header: Option<String>,
    /// What is signed, as a template (see [`SignedPart`]); `{body}` by default.
    #[serde(default = "default_signed")]
    pub signed: String,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// How the signature bytes are written.
    #[serde(default = "default_encoding")]
    pub encoding: Encoding,
    /// How a configured secret becomes key bytes.
    #[serde(default)]
    pub key: KeyDecoding,
    /// Stripped from a secret before it is decoded, when the secret starts with it (such as `whsec_`).
    pub key_prefix: Option<String>,
    /// Accept a rule that signs no part of the body (Mercado Pago signs the resource id, a request id and a
    /// timestamp only). Anyone who captures one delivery can then resend its signature with another body within the
    /// tolerance; a rule must say so to be accepted, and the body is trusted only as far as the ids it signs.
    #[serde(default)]
    pub unsigned_body: bool,
    /// Body fields that repeat a signed part, each of which must equal it (ASCII case aside): a JSON pointer and the
    /// part it repeats, written as in `signed` without braces (`{ "/data/id" = "query:data.id" }`). For a rule that
    /// does not sign the body, this ties the body to what was signed; a body that differs is refused.
    #[serde(default)]
    pub body_must_match: std::collections::BTreeMap<String, String>,
}

pub(super) fn default_signed() -> String {
    "{body}".to_owned()
}

fn default_encoding() -> Encoding {
    Encoding::Hex
}

/// How a signature header's value holds the signature(s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// The whole value is one signature.
    #[default]
    Plain,
    /// `k=v` pairs: the signature(s) and perhaps the timestamp under their keys (`t=…,v1=…`).
    Pairs,
    /// Several signatures separated by a separator, each perhaps behind a version prefix (`v1,… v1,…`).
    List,
}

/// The unit of a signed timestamp.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Unix seconds.
    #[default]
    Seconds,
    /// Unix milliseconds.
    Milliseconds,
}

/// A declarative scheme's algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Algorithm {
    /// HMAC-SHA1 of the signed content.
    #[serde(rename = "hmac-sha1")]
    HmacSha1,
    /// HMAC-SHA256 of the signed content.
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    /// HMAC-SHA512 of the signed content.
    #[serde(rename = "hmac-sha512")]
    HmacSha512,
    /// An Ed25519 signature of the signed content; a secret of 32 bytes is a public key (verify only), of 64 bytes
    /// a private seed followed by its public key (signs and verifies).
    #[serde(rename = "ed25519")]
    Ed25519,
    /// No signature: the header carries the secret itself (Flutterwave's `verif-hash`). It proves only that the
    /// sender knows the secret, not that the body is the one it sent; prefer a real signature where the provider
    /// offers one.
    #[serde(rename = "shared-secret")]
    SharedSecret,
}

impl Algorithm {
    /// The HMAC behind it, if it is one.
    pub fn hmac(self) -> Option<HmacAlgorithm> {
        match self {
            Self::HmacSha1 => Some(HmacAlgorithm::Sha1),
            Self::HmacSha256 => Some(HmacAlgorithm::Sha256),
            Self::HmacSha512 => Some(HmacAlgorithm::Sha512),
            Self::Ed25519 | Self::SharedSecret => None,
        }
    }
}

/// How a configured secret becomes key bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDecoding {
    /// The secret's UTF-8 bytes as written.
    #[default]
    Raw,
    /// Standard base64 (padding optional).
    Base64,
    /// Hex.
    Hex,
}

/// One piece of the signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignedPart {
    /// Literal text.
    Literal(String),
    /// `{body}`: the raw body bytes.
    Body,
    /// `{timestamp}`: the timestamp exactly as sent.
    Timestamp,
    /// `{id}`: the delivery id header's value.
    Id,
    /// `{url}`: the notification URL (the source's `notification_url`, else the request URL as received).
    Url,
    /// `{header:NAME}`: a request header's value.
    Header(String),
    /// `{query:NAME}`: a query parameter of the request URL, decoded.
    Query(String),
    /// `{json:/pointer}`: a JSON field of the body (a string unquoted, anything else as JSON text).
    Json(String),
}

/// Why a signature rule cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct SpecError {
    /// The key of the rule at fault (`signed`, `signature_key`, …).
    pub key: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

pub(super) fn spec_error(key: &'static str, reason: impl Into<String>) -> SpecError {
    SpecError { key, reason: reason.into() }
}

pub(super) fn parse_signed(template: &str) -> Result<Vec<SignedPart>, SpecError> {
    let pieces = split_template(template).map_err(|e| spec_error("signed", e))?;
    pieces
        .into_iter()
        .map(|(placeholder, text)| {
            if !placeholder {
                return Ok(SignedPart::Literal(text));
            }
            Ok(match text.as_str() {
                "body" => SignedPart::Body,
                "timestamp" => SignedPart::Timestamp,
                "id" => SignedPart::Id,
                "url" => SignedPart::Url,
                _ => match text.split_once(':') {
                    Some(("header", name)) if !name.is_empty() => SignedPart::Header(name.to_ascii_lowercase()),
                    Some(("query", name)) if !name.is_empty() => SignedPart::Query(name.to_owned()),
                    Some(("json", pointer)) if pointer.starts_with('/') || pointer.is_empty() => {
                        SignedPart::Json(pointer.to_owned())
                    }
                    _ => {
                        return Err(spec_error(
                            "signed",
                            format!(
                                "unknown placeholder {{{text}}} (expected {{body}}, {{timestamp}}, {{id}}, {{url}}, \
                                 {{header:NAME}}, {{query:NAME}} or {{json:/pointer}})"
                            ),
                        ));
                    }
                },
            })
        })
        .collect()
}

pub(super) fn split_name(split: Split) -> &'static str {
    match split {
        Split::Plain => "plain",
        Split::Pairs => "pairs",
        Split::List => "list",
    }
}
