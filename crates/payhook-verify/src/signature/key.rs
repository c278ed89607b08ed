//! Secrets as configured and keys as decoded: [`Secret`], the algorithms and encodings the schemes name, and the
//! per-scheme decoding of a secret into a [`Key`], done once when a [`Verifier`](super::Verifier)(super::Verifier) is built.

use std::fmt;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use super::ed25519::Ed25519Key;
use super::http::{HttpKey, parse_http_key};
use super::mac::KeyedMac;
use super::{Algorithm, Scheme, braintree, standard};

/// Base64 engine used for Standard Webhooks *secrets*: providers are not
/// consistent about padding their keys, so padding is optional here (it is
/// still required for signatures, which are always emitted padded).
pub(super) const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A webhook signing secret exactly as configured (for example `whsec_...`).
///
/// It is a newtype rather than a bare `String` so that it cannot end up in
/// logs by accident: its `Debug` output is always `Secret([redacted])`.
///
/// A secret being rotated out carries a [`not_after`](Secret::not_after):
/// a [`Verifier`](super::Verifier) accepts signatures made with it up to and including that
/// second, and no longer afterwards, without being rebuilt.
#[derive(Clone)]
pub struct Secret(String, Option<i64>);

impl Secret {
    /// Wraps a configured secret string, valid without a time limit.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into(), None)
    }

    /// The same secret, accepted by a verifier only while its clock is at or before `unix_secs`.
    #[must_use]
    pub fn with_not_after(self, unix_secs: i64) -> Self {
        Self(self.0, Some(unix_secs))
    }

    /// Returns the secret text; named so that every use is easy to audit.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The last unix second at which signatures made with this secret are accepted, if it is being retired.
    pub fn not_after(&self) -> Option<i64> {
        self.1
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Hash function used by the generic [`Scheme::Hmac`] scheme, because
/// providers differ (GitHub and Shopify use SHA-256, Paystack SHA-512).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HmacAlgorithm {
    /// HMAC-SHA1 (20-byte signatures), for the providers that still sign with it.
    Sha1,
    /// HMAC-SHA256 (32-byte signatures).
    Sha256,
    /// HMAC-SHA512 (64-byte signatures).
    Sha512,
}

/// Text encoding of the signature bytes in the header, because providers
/// differ (GitHub and Paystack use hex, Shopify base64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Lowercase hex when signing; either case is accepted when verifying.
    Hex,
    /// Standard base64 alphabet with padding.
    Base64,
    /// The URL-safe base64 alphabet (RFC 4648 §5); padding optional when verifying, omitted when signing.
    Base64Url,
}

impl HmacAlgorithm {
    /// The length of its MACs in bytes.
    pub fn tag_len(self) -> usize {
        match self {
            Self::Sha1 => 20,
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }
}

impl Encoding {
    /// `bytes` written in this encoding, as a signer writes them.
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            Self::Hex => hex::encode(bytes),
            Self::Base64 => STANDARD.encode(bytes),
            Self::Base64Url => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        }
    }
}

/// Why a [`Verifier`](super::Verifier) could not be built from the configured secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The secret at `index` (0-based, in configuration order) is unusable.
    #[error("secret #{index}: {reason}")]
    Invalid {
        /// Position of the offending secret in the list.
        index: usize,
        /// Human-readable reason; never contains key material.
        reason: String,
    },
    /// No secret was configured, which would make every delivery fail.
    #[error("at least one secret is required")]
    Empty,
}

/// One configured secret, decoded for its scheme.
#[derive(Clone)]
pub(super) enum Key {
    /// A symmetric key with its HMAC schedule.
    Mac(KeyedMac),
    /// An Ed25519 key (Standard Webhooks `v1a`).
    Ed25519(Ed25519Key),
    /// A secret a declarative `shared-secret` rule expects to find in its header as is.
    Shared(SharedSecret),
    /// A Braintree API key pair: the public key and the MAC keyed with the private key's digest.
    Braintree(braintree::BraintreeKey),
    /// An RFC 9421 key and the `keyid` it is known by.
    Http {
        /// The `keyid` parameter that selects this key.
        keyid: String,
        /// The key.
        key: HttpKey,
    },
}

impl Key {
    pub(super) fn mac(&self) -> Option<&KeyedMac> {
        match self {
            Self::Mac(mac) => Some(mac),
            Self::Ed25519(_) | Self::Shared(_) | Self::Braintree(_) | Self::Http { .. } => None,
        }
    }

    pub(super) fn ed25519(&self) -> Option<&Ed25519Key> {
        match self {
            Self::Ed25519(key) => Some(key),
            Self::Mac(_) | Self::Shared(_) | Self::Braintree(_) | Self::Http { .. } => None,
        }
    }

    pub(super) fn http(&self) -> Option<(&str, &HttpKey)> {
        match self {
            Self::Http { keyid, key } => Some((keyid, key)),
            Self::Mac(_) | Self::Ed25519(_) | Self::Shared(_) | Self::Braintree(_) => None,
        }
    }
}

/// A secret that a delivery must carry as is; compared through SHA-256 digests in constant time, so that neither
/// its content nor its length shows in the comparison's timing.
#[derive(Clone)]
pub(super) struct SharedSecret {
    pub(super) text: String,
    digest: [u8; 32],
}

impl SharedSecret {
    fn new(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Self { text: String::from_utf8_lossy(bytes).into_owned(), digest: sha2::Sha256::digest(bytes).into() }
    }

    pub(super) fn matches(&self, candidate: &str) -> bool {
        use sha2::Digest as _;
        use subtle::ConstantTimeEq as _;
        let digest: [u8; 32] = sha2::Sha256::digest(candidate.as_bytes()).into();
        bool::from(digest.ct_eq(&self.digest))
    }
}

/// An HMAC-SHA256 key of `bytes`.
pub(super) fn sha256_key(bytes: &[u8]) -> Result<Key, &'static str> {
    KeyedMac::new(HmacAlgorithm::Sha256, bytes).map(Key::Mac).map_err(|_| "unusable key length")
}

/// Decodes one configured secret for `scheme`; the error is a reason without key material.
pub(super) fn parse_key(scheme: &Scheme, text: &str) -> Result<Key, &'static str> {
    if text.is_empty() {
        return Err("secret is empty");
    }
    match scheme {
        Scheme::StandardWebhooks => standard::parse_key(text),
        Scheme::Stripe => sha256_key(text.as_bytes()),
        Scheme::Declared(d) => {
            let bytes = d.key_bytes(text)?;
            match d.algorithm() {
                Algorithm::Ed25519 if bytes.len() == 64 => Ed25519Key::from_private(&bytes).map(Key::Ed25519),
                Algorithm::Ed25519 => Ed25519Key::from_public(&bytes).map(Key::Ed25519),
                Algorithm::SharedSecret => Ok(Key::Shared(SharedSecret::new(&bytes))),
                algorithm => {
                    let hmac = algorithm.hmac().unwrap_or(HmacAlgorithm::Sha256);
                    KeyedMac::new(hmac, &bytes).map(Key::Mac).map_err(|_| "unusable key length")
                }
            }
        }
        Scheme::HttpMessageSignatures => parse_http_key(text),
        Scheme::Braintree => braintree::parse_key(text),
        Scheme::Adyen => {
            let key = hex::decode(text).map_err(|_| "not valid hex (Adyen HMAC keys are hex)")?;
            sha256_key(&key)
        }
        Scheme::Hmac { .. } | Scheme::Github | Scheme::Paystack | Scheme::Shopify => {
            let algorithm = scheme.body_hmac().map_or(HmacAlgorithm::Sha256, |h| h.algorithm);
            KeyedMac::new(algorithm, text.as_bytes()).map(Key::Mac).map_err(|_| "unusable key length")
        }
    }
}
