//! Webhook signature verification for the schemes payhook understands.
//!
//! Why one file of about 1,200 lines: the `Verifier` and the schemes' shared types (keys and their `not_after`,
//! headers, errors) live together, and every scheme's verify and sign dispatch from here; the per-scheme code is
//! in submodules (`declared`, `braintree`, `adyen`, `http`, …), and about a third of this file is documentation of
//! each scheme's rules.
//!
//! Payment providers sign every delivery so that a receiver can tell a genuine
//! event from a forged or replayed one. This module turns a configured
//! [`Scheme`] plus one or more [`Secret`]s into a [`Verifier`] that checks the
//! signature headers against the *raw* request body (never a re-serialised
//! one, because re-encoding JSON changes the bytes and breaks the MAC).
//!
//! Design choices, and why:
//!
//! * Keys are decoded and the HMAC key schedule is computed once, in
//!   [`Verifier::new`], because verification sits on the request hot path and
//!   configuration errors should surface at startup rather than per request.
//! * Several secrets may be configured so that a secret can be rotated without
//!   downtime; [`Verified::secret_index`] reports which one matched so that the
//!   operator can tell when the old secret stops being used.
//! * Every signature comparison is constant time and requires an exact length
//!   match, so that an attacker learns nothing from response timing and cannot
//!   get away with a truncated MAC.
//! * Timestamps are checked in both directions against a tolerance, so that a
//!   captured delivery cannot be replayed later and a clock far in the future
//!   is not trusted either.
//! * Checks run in a fixed order (header parsing, then freshness, then the
//!   MAC) so that error codes are stable and cheap rejections happen before
//!   the comparatively expensive HMAC computation.
//!
//! Layout: this file holds the public types and the header-based schemes
//! (Stripe, Standard Webhooks, body HMACs); `mac` the shared HMAC machinery;
//! `ed25519` Ed25519 keys; `adyen` Adyen's in-body signatures; `braintree` Braintree's form-body signatures;
//! `http` RFC 9421
//! message signatures and RFC 9530 digests, on top of the RFC 8941 parser in
//! `structured`.

use sha2::Digest as _;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

mod adyen;
mod braintree;
mod declared;
mod ed25519;
mod http;
mod mac;
mod structured;

use http::{HttpKey, parse_http_key};

pub use adyen::adyen_signing_string;
pub use braintree::braintree_payload;
pub(crate) use declared::split_template;
pub use declared::{Algorithm, DeclaredScheme, KeyDecoding, SignatureSpec, SignedPart, SpecError, Split, TimeUnit};
pub use http::{
    ComponentError, DEFAULT_REQUIRED_COMPONENTS, DERIVED_COMPONENTS, RequestParts, SignatureInput,
    check_component_name, check_content_digest, content_digest, parse_signature, parse_signature_input, signature_base,
};

use ed25519::Ed25519Key;
use mac::{KeyedMac, SIG_BUF_LEN, decode_signature};

/// Base64 engine used for Standard Webhooks *secrets*: providers are not
/// consistent about padding their keys, so padding is optional here (it is
/// still required for signatures, which are always emitted padded).
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Prefix that Standard Webhooks (and Svix) put in front of base64 secrets.
const WHSEC_PREFIX: &str = "whsec_";

/// Prefix of a Standard Webhooks Ed25519 public key (base64 of 32 bytes).
const WHPK_PREFIX: &str = "whpk_";

/// Prefix of a Standard Webhooks Ed25519 private key (base64 of a 32-byte seed, or of 64 bytes: seed then public
/// key).
const WHSK_PREFIX: &str = "whsk_";

/// Base64 length of a 64-byte Ed25519 signature.
const ED25519_SIG_B64_LEN: usize = 88;

/// The most signatures one delivery may offer (Stripe's `v1=` entries, a Standard Webhooks list, a declared rule's
/// pairs or list, RFC 9421 members, Braintree's `bt_signature` pairs); more is [`VerifyError::Malformed`].
///
/// Every candidate is checked against every secret, so a header of thousands of them costs thousands of
/// comparisons (or Ed25519 verifications) per request. Providers send one, two or three while they rotate a
/// secret; sixteen leaves room for that, and refusing beyond it (rather than trying the first sixteen) tells a
/// sender what is wrong.
pub const MAX_SIGNATURE_CANDIDATES: usize = 16;

/// Refuses a delivery offering more than [`MAX_SIGNATURE_CANDIDATES`] signatures; `what` names them.
fn check_candidates(count: usize, what: &str) -> Result<(), VerifyError> {
    if count > MAX_SIGNATURE_CANDIDATES {
        return Err(VerifyError::Malformed(format!("more than {MAX_SIGNATURE_CANDIDATES} {what}")));
    }
    Ok(())
}

/// Read access to request headers.
///
/// The verifier only needs to look headers up by name, so it takes this small
/// trait instead of a concrete HTTP type; that keeps the crate free of HTTP
/// dependencies and lets tests use plain arrays. Implementations must compare
/// names case-insensitively because HTTP header names are case-insensitive;
/// callers always pass lowercase names.
pub trait Headers {
    /// Returns the value of the first header called `name`, if any.
    fn get(&self, name: &str) -> Option<&str>;

    /// Returns the value of an RFC 9421 derived component, named with its
    /// leading `@` (`@method`, `@authority`, `@path`, `@query`,
    /// `@target-uri`, `@scheme`, `@request-target`; see
    /// [`RequestParts`] for the exact forms), if the implementation knows
    /// the request line. Only [`Scheme::HttpMessageSignatures`] asks; the
    /// default knows nothing, so signatures covering derived components fail
    /// with [`VerifyError::MissingHeader`] naming the component.
    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        let _ = component;
        None
    }
}

impl Headers for [(String, String)] {
    fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl Headers for Vec<(String, String)> {
    fn get(&self, name: &str) -> Option<&str> {
        <[(String, String)] as Headers>::get(self.as_slice(), name)
    }
}

impl Headers for [(&str, &str)] {
    fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }
}

impl<const N: usize> Headers for [(&str, &str); N] {
    fn get(&self, name: &str) -> Option<&str> {
        <[(&str, &str)] as Headers>::get(self.as_slice(), name)
    }
}

/// A webhook signing secret exactly as configured (for example `whsec_...`).
///
/// It is a newtype rather than a bare `String` so that it cannot end up in
/// logs by accident: its `Debug` output is always `Secret([redacted])`.
///
/// A secret being rotated out carries a [`not_after`](Secret::not_after):
/// a [`Verifier`] accepts signatures made with it up to and including that
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

/// A signature scheme: which headers carry what, and which bytes are signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    /// Stripe's `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...][,v0=...]`.
    ///
    /// The signed payload is `"{t}.{body}"`, HMAC-SHA256 keyed with the
    /// secret string's bytes exactly as configured (the `whsec_` prefix is
    /// part of the key, unlike Standard Webhooks). Several `v1` entries may be
    /// present while Stripe rotates secrets; any one matching is enough.
    /// Entries with other versions (such as the test-mode `v0`) are ignored.
    Stripe,
    /// [Standard Webhooks](https://www.standardwebhooks.com/) (also Svix).
    ///
    /// Headers `webhook-id`, `webhook-timestamp` and `webhook-signature`
    /// (or their `svix-` equivalents); the signature header is a
    /// space-separated list of `v1,<base64>` (symmetric) and
    /// `v1a,<base64>` (Ed25519) entries; other versions are ignored. The
    /// signed content is `"{id}.{timestamp}.{body}"` for both.
    ///
    /// Secrets are written as:
    ///
    /// * `whsec_<base64>` (or bare base64): an HMAC-SHA256 key, checking `v1`
    ///   entries;
    /// * `whpk_<base64 of 32 bytes>`: an Ed25519 public key, checking `v1a`
    ///   entries (verify only);
    /// * `whsk_<base64 of a 32-byte seed, or of 64 bytes of seed then public
    ///   key>`: an Ed25519 private key, signing `v1a` and verifying with its
    ///   derived public key.
    ///
    /// One verifier may mix both kinds while a sender migrates; a `v1`
    /// signature only ever matches a symmetric secret and a `v1a` signature
    /// only an Ed25519 one.
    StandardWebhooks,
    /// A generic HMAC over the raw body only, with no timestamp (GitHub,
    /// Shopify, Paystack and many others).
    ///
    /// Because nothing but the body is signed, this scheme cannot detect
    /// replays by itself; deduplication has to happen downstream.
    Hmac {
        /// Header carrying the signature (lowercase name).
        header: String,
        /// Hash function of the HMAC.
        algorithm: HmacAlgorithm,
        /// How the signature bytes are written in the header.
        encoding: Encoding,
        /// Literal prefix (such as `sha256=`) that must be present and is
        /// stripped before decoding.
        prefix: Option<String>,
    },
    /// GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the raw
    /// body keyed with the secret's bytes.
    ///
    /// [`Verified::delivery_id`] is the `X-GitHub-Delivery` header when
    /// present. GitHub does not sign that header, so it identifies a delivery
    /// for logs and for storing an unparseable body, but a replayed body could
    /// carry any value in it.
    Github,
    /// Paystack: `x-paystack-signature: <hex>`, HMAC-SHA512 of the raw body
    /// keyed with the secret key's bytes.
    Paystack,
    /// Shopify: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA256 of the raw body
    /// keyed with the app's client secret bytes.
    ///
    /// [`Verified::delivery_id`] is the `X-Shopify-Webhook-Id` header when
    /// present; like GitHub's delivery id it is not covered by the signature.
    Shopify,
    /// Adyen's notification HMAC, carried inside the body rather than in a
    /// header.
    ///
    /// Each `notificationItems[].NotificationRequestItem` has its own
    /// `additionalData.hmacSignature`: the base64 HMAC-SHA256 of
    /// [`adyen_signing_string`] of that item, keyed with the *hex-decoded*
    /// secret (Adyen shows it as 64 hex digits). A delivery verifies only if
    /// it has at least one item and every item verifies under some configured
    /// secret; a body that is not JSON or has no items is
    /// [`VerifyError::Malformed`]. Nothing time-bound is signed, so replays
    /// are caught by deduplication downstream. Signing is
    /// [`Verifier::adyen_sign_body`], since the signature changes the body.
    Adyen,
    /// Braintree's webhook signature, carried in the form body next to the payload it covers.
    ///
    /// The body is `application/x-www-form-urlencoded` with `bt_payload` (the base64 of the XML notification,
    /// possibly in lines ending in `\n`) and `bt_signature`: `PUBLIC_KEY|HEX` pairs joined by `&`, where `HEX` is
    /// the hex HMAC-SHA1 of `bt_payload` as received (or, as Braintree's libraries also accept, of the payload
    /// followed by `\n`), keyed with the SHA-1 digest of the private key.
    ///
    /// Secrets are written `PUBLIC_KEY:PRIVATE_KEY`, the API key pair of the Braintree account (the public key is
    /// everything before the first `:`). For each configured pair, the first `bt_signature` pair naming its public
    /// key is checked, so that a rotation can configure the old and the new pair. A body without both fields, or
    /// a payload with characters other than base64's and `\n`, is [`VerifyError::Malformed`]; no pair for a
    /// configured public key, or a MAC that differs, is [`VerifyError::Mismatch`]. Nothing time-bound is signed:
    /// replays are caught by deduplication downstream. Signing is [`Verifier::braintree_sign_body`], since the
    /// signature changes the body.
    Braintree,
    /// [RFC 9421](https://www.rfc-editor.org/rfc/rfc9421) HTTP message
    /// signatures over the request, with the body bound through an
    /// [RFC 9530](https://www.rfc-editor.org/rfc/rfc9530) `Content-Digest`.
    ///
    /// Keys are configured by `keyid`, one secret each, written as:
    ///
    /// * `hmac-sha256:<keyid>:<base64 key>`: a shared HMAC-SHA256 key;
    /// * `ed25519:<keyid>:<base64 32-byte public key>`: verify only;
    /// * `ed25519-private:<keyid>:<base64 32-byte seed>`: signs (see
    ///   [`Verifier::sign_request`]) and verifies.
    ///
    /// The keyid is everything between the first and the last `:`; it must be
    /// non-empty printable ASCII and unique within a verifier.
    ///
    /// Of the `Signature-Input` members, the first whose `keyid` is configured
    /// is checked (an `alg` parameter, if present, must name that key's
    /// algorithm), and payhook's policy applies to it: it must cover every
    /// [required component](Verifier::required_components) (by default
    /// [`DEFAULT_REQUIRED_COMPONENTS`]: `@method`, `@authority`, `@path` and
    /// `content-digest`, so that it cannot be replayed at another endpoint),
    /// else [`VerifyError::InsufficientCoverage`]; `content-digest` must
    /// be covered and match the body (`sha-256` and/or `sha-512`), `created`
    /// is required and must lie within the tolerance in either direction, and
    /// an `expires` in the past is [`VerifyError::Stale`] (with `delta_secs`
    /// the seconds since expiry and a zero `tolerance_secs`). A `nonce` is
    /// surfaced as [`Verified::nonce`] for the server to claim; a signature
    /// without one is accepted, and then replay protection rests on the
    /// `created`/`expires` window plus event deduplication, because many
    /// signers (including the RFC's own examples) send none. There is no
    /// delivery id.
    HttpMessageSignatures,
    /// A rule written as data (a source's `[signature]` table, or a preset's): see [`DeclaredScheme`].
    Declared(Arc<DeclaredScheme>),
}

impl Scheme {
    /// A short, stable name for logs, metrics and the stored delivery:
    /// `stripe`, `standard-webhooks`, `hmac`, `github`, `paystack` or
    /// `shopify`, `adyen`, `braintree` and `http-message-signatures`.
    pub fn name(&self) -> &str {
        match self {
            Self::Declared(d) => d.name(),
            Self::Stripe => "stripe",
            Self::StandardWebhooks => "standard-webhooks",
            Self::Hmac { .. } => "hmac",
            Self::Github => "github",
            Self::Paystack => "paystack",
            Self::Shopify => "shopify",
            Self::Adyen => "adyen",
            Self::Braintree => "braintree",
            Self::HttpMessageSignatures => "http-message-signatures",
        }
    }

    /// The body-only HMAC parameters of [`Scheme::Hmac`] and the named
    /// providers built on it, or `None` for the other schemes.
    fn body_hmac(&self) -> Option<BodyHmac<'_>> {
        Some(match self {
            Self::Hmac { header, algorithm, encoding, prefix } => BodyHmac {
                header,
                canonical_header: header,
                algorithm: *algorithm,
                encoding: *encoding,
                prefix: prefix.as_deref(),
                delivery: None,
            },
            Self::Github => BodyHmac::GITHUB,
            Self::Paystack => BodyHmac::PAYSTACK,
            Self::Shopify => BodyHmac::SHOPIFY,
            Self::Stripe
            | Self::StandardWebhooks
            | Self::Adyen
            | Self::Braintree
            | Self::HttpMessageSignatures
            | Self::Declared(_) => return None,
        })
    }
}

/// How a body-only HMAC scheme is carried.
struct BodyHmac<'s> {
    /// Signature header, lowercase (for lookups).
    header: &'s str,
    /// Signature header as the provider spells it (for signing).
    canonical_header: &'s str,
    algorithm: HmacAlgorithm,
    encoding: Encoding,
    prefix: Option<&'s str>,
    /// Unsigned delivery-id header, lowercase and as the provider spells it.
    delivery: Option<(&'static str, &'static str)>,
}

impl BodyHmac<'static> {
    const GITHUB: Self = Self {
        header: "x-hub-signature-256",
        canonical_header: "X-Hub-Signature-256",
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: Some("sha256="),
        delivery: Some(("x-github-delivery", "X-GitHub-Delivery")),
    };
    const PAYSTACK: Self = Self {
        header: "x-paystack-signature",
        canonical_header: "x-paystack-signature",
        algorithm: HmacAlgorithm::Sha512,
        encoding: Encoding::Hex,
        prefix: None,
        delivery: None,
    };
    const SHOPIFY: Self = Self {
        header: "x-shopify-hmac-sha256",
        canonical_header: "X-Shopify-Hmac-Sha256",
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Base64,
        prefix: None,
        delivery: Some(("x-shopify-webhook-id", "X-Shopify-Webhook-Id")),
    };
}

/// What a successful verification tells the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Index into the verifier's secrets of the secret that matched, so that
    /// operators can see when a rotated-out secret is no longer in use.
    pub secret_index: usize,
    /// The provider's delivery/message id when the scheme carries one, else
    /// `None`. Standard Webhooks' `webhook-id` / `svix-id` is covered by the
    /// signature and therefore safe to deduplicate on; GitHub's
    /// `X-GitHub-Delivery` and Shopify's `X-Shopify-Webhook-Id` are not signed
    /// by those providers, so they only label the delivery.
    pub delivery_id: Option<String>,
    /// The signed timestamp (unix seconds) when the scheme has one (RFC 9421:
    /// `created`).
    pub timestamp: Option<i64>,
    /// The signer's nonce (RFC 9421 `nonce` parameter), for the server to
    /// claim once; `None` for every other scheme and for RFC 9421 signatures
    /// that carry none.
    pub nonce: Option<Nonce>,
}

/// A signed, single-use value that a server claims in its nonce table to
/// reject replays within the signature's validity window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce {
    /// The key that signed it; nonces are unique per signer, not globally.
    pub keyid: String,
    /// The nonce as sent.
    pub value: String,
    /// Unix seconds after which the nonce can be forgotten, because no
    /// signature carrying it can verify any more: `created + tolerance`, or
    /// `expires` when that is later.
    pub expires_at: i64,
}

/// Why a delivery was rejected.
///
/// The variants are coarse on purpose: callers map them to a response and a
/// metric label (see [`VerifyError::code`]) and should not leak more detail
/// than this to the sender.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// A header the scheme requires is absent (the lowercase name is given).
    #[error("missing header {0}")]
    MissingHeader(String),
    /// A header is present but cannot be parsed.
    #[error("malformed signature header: {0}")]
    Malformed(String),
    /// The signed timestamp is too far from the verifier's clock, in either
    /// direction; `delta_secs` is `now - timestamp`.
    #[error("timestamp outside the tolerance of {tolerance_secs} s (delta {delta_secs} s)")]
    Stale {
        /// `now - timestamp` in seconds (negative when the timestamp is in
        /// the future).
        delta_secs: i64,
        /// The configured tolerance in seconds.
        tolerance_secs: u64,
    },
    /// The headers are well formed but no signature matches any secret.
    #[error("no signature matches any configured secret")]
    Mismatch,
    /// The signature verifies but the body does not match its signed
    /// `Content-Digest` (RFC 9530): the body changed after signing.
    #[error("the body does not match its signed content digest")]
    DigestMismatch,
    /// A rule's body field that repeats a signed part (`body_must_match`) differs from it: the body is not the
    /// one that was signed with this signature.
    #[error("the body's {pointer} {reason}")]
    BodyMismatch {
        /// The body field.
        pointer: String,
        /// Why it does not match.
        reason: String,
    },
    /// An RFC 9421 signature that leaves out components its source requires
    /// (by default the method, authority, path and content digest): it
    /// could be replayed at another endpoint, or with another body.
    #[error("the signature does not cover {}, which this source requires", missing.join(" "))]
    InsufficientCoverage {
        /// The required components it does not cover, in the source's order.
        missing: Vec<String>,
    },
}

impl VerifyError {
    /// A short, stable machine code for metrics and logs:
    /// `"missing_header"`, `"malformed"`, `"stale"`, `"mismatch"`,
    /// `"digest_mismatch"` or `"insufficient_coverage"`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingHeader(_) => "missing_header",
            Self::Malformed(_) => "malformed",
            Self::Stale { .. } => "stale",
            Self::Mismatch => "mismatch",
            Self::DigestMismatch => "digest_mismatch",
            Self::InsufficientCoverage { .. } => "insufficient_coverage",
            Self::BodyMismatch { .. } => "body_mismatch",
        }
    }
}

/// Why a [`Verifier`] could not be built from the configured secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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

/// Parses a signed timestamp, which must be a plain run of ASCII digits
/// (no sign, no whitespace, no fraction) so that the signed text and the
/// value we check can never disagree.
fn parse_timestamp(s: &str) -> Result<i64, VerifyError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::Malformed("timestamp is not a plain unix time in seconds".into()));
    }
    s.parse().map_err(|_| VerifyError::Malformed("timestamp is out of range".into()))
}

fn missing(name: &str) -> VerifyError {
    VerifyError::MissingHeader(name.to_owned())
}

/// Iterates the `v1` values of a `Stripe-Signature` header.
fn stripe_v1_values(header: &str) -> impl Iterator<Item = &str> {
    header.split(',').filter_map(|item| match item.trim().split_once('=') {
        Some(("v1", v)) => Some(v),
        _ => None,
    })
}

/// Iterates the values of one version (`v1` or `v1a`) of a Standard Webhooks signature header.
fn standard_values<'h>(header: &'h str, version: &'static str) -> impl Iterator<Item = &'h str> {
    header.split(' ').filter_map(move |entry| match entry.split_once(',') {
        Some((v, value)) if v == version => Some(value),
        _ => None,
    })
}

/// Checks webhook signatures for one configured source.
///
/// Built once per source at startup (decoding keys there, so that a bad
/// secret fails fast) and then shared; [`Verifier::verify`] takes `&self` and
/// allocates only for the returned delivery id.
#[derive(Clone)]
pub struct Verifier {
    scheme: Scheme,
    keys: Vec<Key>,
    /// Each key's [`Secret::not_after`], by the same index: a key past it is left out at verify time.
    not_after: Vec<Option<i64>>,
    tolerance_secs: u64,
    /// RFC 9421 components every signature must cover (only [`Scheme::HttpMessageSignatures`] reads them).
    required_components: Vec<String>,
}

/// One configured secret, decoded for its scheme.
#[derive(Clone)]
enum Key {
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
    fn mac(&self) -> Option<&KeyedMac> {
        match self {
            Self::Mac(mac) => Some(mac),
            Self::Ed25519(_) | Self::Shared(_) | Self::Braintree(_) | Self::Http { .. } => None,
        }
    }

    fn ed25519(&self) -> Option<&Ed25519Key> {
        match self {
            Self::Ed25519(key) => Some(key),
            Self::Mac(_) | Self::Shared(_) | Self::Braintree(_) | Self::Http { .. } => None,
        }
    }

    fn http(&self) -> Option<(&str, &HttpKey)> {
        match self {
            Self::Http { keyid, key } => Some((keyid, key)),
            Self::Mac(_) | Self::Ed25519(_) | Self::Shared(_) | Self::Braintree(_) => None,
        }
    }
}

/// A secret that a delivery must carry as is; compared through SHA-256 digests in constant time, so that neither
/// its content nor its length shows in the comparison's timing.
#[derive(Clone)]
struct SharedSecret {
    text: String,
    digest: [u8; 32],
}

impl SharedSecret {
    fn new(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Self { text: String::from_utf8_lossy(bytes).into_owned(), digest: sha2::Sha256::digest(bytes).into() }
    }

    fn matches(&self, candidate: &str) -> bool {
        use sha2::Digest as _;
        use subtle::ConstantTimeEq as _;
        let digest: [u8; 32] = sha2::Sha256::digest(candidate.as_bytes()).into();
        bool::from(digest.ct_eq(&self.digest))
    }
}

/// Decodes one configured secret for `scheme`; the error is a reason without key material.
fn parse_key(scheme: &Scheme, text: &str) -> Result<Key, &'static str> {
    if text.is_empty() {
        return Err("secret is empty");
    }
    let sha256 =
        |key: &[u8]| KeyedMac::new(HmacAlgorithm::Sha256, key).map(Key::Mac).map_err(|_| "unusable key length");
    match scheme {
        Scheme::StandardWebhooks => {
            if let Some(b64) = text.strip_prefix(WHPK_PREFIX) {
                let bytes = LENIENT_BASE64.decode(b64).map_err(|_| "not valid base64 (expected whpk_<base64>)")?;
                return Ed25519Key::from_public(&bytes).map(Key::Ed25519);
            }
            if let Some(b64) = text.strip_prefix(WHSK_PREFIX) {
                let bytes = LENIENT_BASE64.decode(b64).map_err(|_| "not valid base64 (expected whsk_<base64>)")?;
                return Ed25519Key::from_private(&bytes).map(Key::Ed25519);
            }
            let b64 = text.strip_prefix(WHSEC_PREFIX).unwrap_or(text);
            let decoded = LENIENT_BASE64.decode(b64).map_err(|_| "not valid base64 (expected whsec_<base64>)")?;
            if decoded.is_empty() {
                return Err("secret decodes to an empty key");
            }
            sha256(&decoded)
        }
        Scheme::Stripe => sha256(text.as_bytes()),
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
            sha256(&key)
        }
        Scheme::Hmac { .. } | Scheme::Github | Scheme::Paystack | Scheme::Shopify => {
            let algorithm = scheme.body_hmac().map_or(HmacAlgorithm::Sha256, |h| h.algorithm);
            KeyedMac::new(algorithm, text.as_bytes()).map(Key::Mac).map_err(|_| "unusable key length")
        }
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Key material is deliberately left out; the count is enough to debug
        // a rotation setup.
        let mut s = f.debug_struct("Verifier");
        s.field("scheme", &self.scheme)
            .field("secrets", &self.keys.len())
            .field("tolerance_secs", &self.tolerance_secs);
        if self.scheme == Scheme::HttpMessageSignatures {
            s.field("required_components", &self.required_components);
        }
        s.finish()
    }
}

impl Verifier {
    /// Builds a verifier for `scheme` accepting any of `secrets`.
    ///
    /// `tolerance_secs` bounds how far the signed timestamp may be from the
    /// verifier's clock, in either direction; it is ignored by
    /// [`Scheme::Hmac`], which has no timestamp.
    ///
    /// Fails with [`KeyError::Empty`] when no secret is given, and with
    /// [`KeyError::Invalid`] when a secret is empty or (Standard Webhooks)
    /// is not valid base64 after its `whsec_` prefix.
    pub fn new(scheme: Scheme, secrets: &[Secret], tolerance_secs: u64) -> Result<Self, KeyError> {
        if secrets.is_empty() {
            return Err(KeyError::Empty);
        }
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(index, secret)| {
                parse_key(&scheme, secret.expose()).map_err(|reason| KeyError::Invalid { index, reason: reason.into() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (index, key) in keys.iter().enumerate() {
            let Some((keyid, _)) = key.http() else { continue };
            if keys[..index].iter().any(|k| k.http().is_some_and(|(other, _)| other == keyid)) {
                return Err(KeyError::Invalid { index, reason: "this keyid is already configured".into() });
            }
        }
        let required_components = DEFAULT_REQUIRED_COMPONENTS.iter().map(|c| (*c).to_owned()).collect();
        let not_after = secrets.iter().map(Secret::not_after).collect();
        Ok(Self { scheme, keys, not_after, tolerance_secs, required_components })
    }

    /// The same verifier requiring RFC 9421 signatures to cover exactly `components` (instead of
    /// [`DEFAULT_REQUIRED_COMPONENTS`]); other schemes ignore them.
    ///
    /// Each must be a lowercase header field name or one of [`DERIVED_COMPONENTS`], listed once
    /// ([`ComponentError`] otherwise). The list is not required to name `content-digest`:
    /// [`Verifier::verify`] insists on it anyway, while
    /// [`Verifier::verify_http_signature`] checks a raw example on the list alone; a configuration should name
    /// it, so that what it says is what is enforced.
    pub fn with_required_components<I>(mut self, components: I) -> Result<Self, ComponentError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut list: Vec<String> = Vec::new();
        for name in components {
            let name = name.as_ref();
            check_component_name(name)?;
            if list.iter().any(|c| c == name) {
                return Err(ComponentError::Duplicate(name.to_owned()));
            }
            list.push(name.to_owned());
        }
        self.required_components = list;
        Ok(self)
    }

    /// The RFC 9421 components every signature must cover, in order.
    pub fn required_components(&self) -> &[String] {
        &self.required_components
    }

    /// The scheme this verifier checks.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// What a verified delivery's signature covers, as a payload format reads it (the body and headers): the
    /// parts a declared format may read without naming them `unsigned`. Adyen signs a few fields of each item, not
    /// the body, so it counts as not covering the body; an RFC 9421 signature covers what its source requires.
    pub fn signed_parts(&self) -> crate::format::SignedParts {
        use crate::format::SignedParts;
        let body =
            |headers: &[&str]| SignedParts { body: true, headers: headers.iter().map(|h| (*h).to_owned()).collect() };
        match &self.scheme {
            Scheme::Stripe
            | Scheme::Hmac { .. }
            | Scheme::Github
            | Scheme::Paystack
            | Scheme::Shopify
            | Scheme::Braintree => body(&[]),
            Scheme::StandardWebhooks => body(&["webhook-id", "webhook-timestamp", "svix-id", "svix-timestamp"]),
            Scheme::Adyen => SignedParts::default(),
            Scheme::HttpMessageSignatures => SignedParts {
                body: self.required_components.iter().any(|c| c == "content-digest"),
                headers: self.required_components.iter().filter(|c| !c.starts_with('@')).cloned().collect(),
            },
            Scheme::Declared(d) => SignedParts { body: d.signs_body(), headers: d.signed_header_names() },
        }
    }

    /// The request header (lowercase) that carries a configured secret itself rather than a signature made with
    /// it: a declared `shared-secret` rule's. Whoever reads it can forge deliveries, so it must be neither stored
    /// nor shown. `None` for every scheme whose headers carry only signatures.
    pub fn secret_header(&self) -> Option<&str> {
        match &self.scheme {
            Scheme::Declared(d) => d.secret_header(),
            _ => None,
        }
    }

    /// The Standard Webhooks headers with one `v1a` signature.
    fn sign_standard_v1a(&self, key: &Ed25519Key, body: &[u8], now_unix: i64, msg_id: &str) -> Vec<(String, String)> {
        let ts = now_unix.to_string();
        let message = [msg_id.as_bytes(), b".", ts.as_bytes(), b".", body].concat();
        let Some(signature) = key.sign(&message) else {
            return Vec::new();
        };
        vec![
            ("webhook-id".to_owned(), msg_id.to_owned()),
            ("webhook-timestamp".to_owned(), ts),
            ("webhook-signature".to_owned(), format!("v1a,{}", STANDARD.encode(signature))),
        ]
    }

    /// Verifies a delivery given its headers and raw body bytes.
    ///
    /// Every configured secret is tried against every signature in the
    /// header (the MAC is computed once per secret), with constant-time,
    /// exact-length comparisons; a delivery offering more than
    /// [`MAX_SIGNATURE_CANDIDATES`] signatures is [`VerifyError::Malformed`]. Errors are reported in a fixed order:
    /// missing or unparsable headers first, then a timestamp more than the
    /// tolerance away from `now_unix` in either direction ([`VerifyError::Stale`]),
    /// then [`VerifyError::Mismatch`]. Signature values that are not valid
    /// hex/base64 simply do not match; a header with no signature of the
    /// expected version at all is [`VerifyError::Malformed`].
    ///
    /// A secret past its [`Secret::not_after`] at `now_unix` is not tried: a
    /// delivery signed only with it is [`VerifyError::Mismatch`].
    pub fn verify(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now_unix: i64,
    ) -> Result<Verified, VerifyError> {
        if self.not_after.iter().any(|t| t.is_some_and(|t| now_unix > t)) {
            return self.verify_without_retired(headers, body, now_unix);
        }
        self.verify_with_all_keys(headers, body, now_unix)
    }

    /// [`Verifier::verify`] by a copy of this verifier that holds only the keys still valid at `now_unix`, with
    /// [`Verified::secret_index`] mapped back to the configured order. Taken only while a retired secret is still
    /// configured, so every scheme's key lookups stay as they are; with no valid key left, nothing can match.
    fn verify_without_retired(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now_unix: i64,
    ) -> Result<Verified, VerifyError> {
        let valid: Vec<usize> =
            (0..self.keys.len()).filter(|&i| self.not_after[i].is_none_or(|t| now_unix <= t)).collect();
        if valid.is_empty() {
            return Err(VerifyError::Mismatch);
        }
        let current = Self {
            scheme: self.scheme.clone(),
            keys: valid.iter().map(|&i| self.keys[i].clone()).collect(),
            not_after: vec![None; valid.len()],
            tolerance_secs: self.tolerance_secs,
            required_components: self.required_components.clone(),
        };
        match current.verify_with_all_keys(headers, body, now_unix) {
            Ok(mut verified) => {
                verified.secret_index = valid[verified.secret_index];
                Ok(verified)
            }
            // Signatures of a kind no remaining key checks (`v1a` once the last Ed25519 key is retired) read as
            // malformed to the copy: what only a retired secret verifies is a mismatch.
            Err(_) if self.verify_with_all_keys(headers, body, now_unix).is_ok() => Err(VerifyError::Mismatch),
            Err(e) => Err(e),
        }
    }

    fn verify_with_all_keys(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now_unix: i64,
    ) -> Result<Verified, VerifyError> {
        match &self.scheme {
            Scheme::Stripe => self.verify_stripe(headers, body, now_unix),
            Scheme::StandardWebhooks => self.verify_standard(headers, body, now_unix),
            Scheme::Hmac { header, algorithm, encoding, prefix } => {
                let params = BodyHmac {
                    header,
                    canonical_header: header,
                    algorithm: *algorithm,
                    encoding: *encoding,
                    prefix: prefix.as_deref(),
                    delivery: None,
                };
                self.verify_hmac(headers, body, &params)
            }
            Scheme::Adyen => self.verify_adyen(body),
            Scheme::Braintree => self.verify_braintree(body),
            Scheme::HttpMessageSignatures => self.verify_http(headers, body, now_unix),
            Scheme::Declared(d) => self.verify_declared(d, headers, body, now_unix),
            Scheme::Github => self.verify_hmac(headers, body, &BodyHmac::GITHUB),
            Scheme::Paystack => self.verify_hmac(headers, body, &BodyHmac::PAYSTACK),
            Scheme::Shopify => self.verify_hmac(headers, body, &BodyHmac::SHOPIFY),
        }
    }

    fn check_fresh(&self, timestamp: i64, now_unix: i64) -> Result<(), VerifyError> {
        let delta = now_unix.saturating_sub(timestamp);
        if delta.unsigned_abs() > self.tolerance_secs {
            return Err(VerifyError::Stale { delta_secs: delta, tolerance_secs: self.tolerance_secs });
        }
        Ok(())
    }

    /// Tries each secret's MAC of `parts` against each candidate signature.
    fn find_match<'h, I>(
        &self,
        parts: &[&[u8]],
        candidates: impl Fn() -> I,
        encoding: Encoding,
        expected: usize,
    ) -> Option<usize>
    where
        I: Iterator<Item = &'h str>,
    {
        let mut buf = [0u8; SIG_BUF_LEN];
        self.keys.iter().position(|key| {
            let Some(key) = key.mac() else {
                return false;
            };
            let tag = key.compute(parts);
            candidates()
                .any(|value| decode_signature(encoding, value, expected, &mut buf).is_some_and(|sig| tag.matches(sig)))
        })
    }

    fn verify_stripe(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now_unix: i64,
    ) -> Result<Verified, VerifyError> {
        const NAME: &str = "stripe-signature";
        let header = headers.get(NAME).ok_or_else(|| missing(NAME))?;
        let mut ts_text = None;
        for item in header.split(',') {
            if let Some(("t", v)) = item.trim().split_once('=')
                && ts_text.replace(v).is_some()
            {
                return Err(VerifyError::Malformed("more than one t= entry".into()));
            }
        }
        let ts_text = ts_text.ok_or_else(|| VerifyError::Malformed("no t= timestamp".into()))?;
        let timestamp = parse_timestamp(ts_text)?;
        if stripe_v1_values(header).next().is_none() {
            return Err(VerifyError::Malformed("no v1= signature".into()));
        }
        check_candidates(stripe_v1_values(header).count(), "v1= signatures")?;
        self.check_fresh(timestamp, now_unix)?;
        let parts: [&[u8]; 3] = [ts_text.as_bytes(), b".", body];
        let secret_index =
            self.find_match(&parts, || stripe_v1_values(header), Encoding::Hex, 32).ok_or(VerifyError::Mismatch)?;
        Ok(Verified { secret_index, delivery_id: None, timestamp: Some(timestamp), nonce: None })
    }

    fn verify_standard(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now_unix: i64,
    ) -> Result<Verified, VerifyError> {
        // Use the svix- names only when the delivery really is in that
        // family, so that the three values always come from one consistent set.
        let [id_name, ts_name, sig_name] =
            if headers.get("webhook-signature").is_none() && headers.get("svix-signature").is_some() {
                ["svix-id", "svix-timestamp", "svix-signature"]
            } else {
                ["webhook-id", "webhook-timestamp", "webhook-signature"]
            };
        let id = headers.get(id_name).ok_or_else(|| missing(id_name))?;
        let ts_text = headers.get(ts_name).ok_or_else(|| missing(ts_name))?;
        let header = headers.get(sig_name).ok_or_else(|| missing(sig_name))?;
        if id.is_empty() {
            return Err(VerifyError::Malformed(format!("{id_name} is empty")));
        }
        let timestamp = parse_timestamp(ts_text)?;
        // Only versions that some configured secret can check count, so a verifier of symmetric secrets still
        // calls a header of nothing but `v1a` entries malformed.
        let checks_v1 = self.keys.iter().any(|k| k.mac().is_some()) && standard_values(header, "v1").next().is_some();
        let checks_v1a =
            self.keys.iter().any(|k| k.ed25519().is_some()) && standard_values(header, "v1a").next().is_some();
        if !checks_v1 && !checks_v1a {
            return Err(VerifyError::Malformed("no v1 signature (or v1a, for Ed25519 secrets)".into()));
        }
        let offered = standard_values(header, "v1").count() + standard_values(header, "v1a").count();
        check_candidates(offered, "v1 and v1a signatures")?;
        self.check_fresh(timestamp, now_unix)?;
        let parts: [&[u8]; 5] = [id.as_bytes(), b".", ts_text.as_bytes(), b".", body];
        let mut secret_index = self.find_match(&parts, || standard_values(header, "v1"), Encoding::Base64, 32);
        if secret_index.is_none() && checks_v1a {
            let message = parts.concat();
            secret_index = self.keys.iter().position(|key| {
                key.ed25519().is_some_and(|key| {
                    standard_values(header, "v1a").any(|value| {
                        value.len() == ED25519_SIG_B64_LEN
                            && STANDARD.decode(value).is_ok_and(|sig| key.verify(&message, &sig))
                    })
                })
            });
        }
        let secret_index = secret_index.ok_or(VerifyError::Mismatch)?;
        Ok(Verified { secret_index, delivery_id: Some(id.to_owned()), timestamp: Some(timestamp), nonce: None })
    }

    fn verify_declared(
        &self,
        d: &DeclaredScheme,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now_unix: i64,
    ) -> Result<Verified, VerifyError> {
        let (candidates, timestamp) = d.read(headers)?;
        if let Some((_, secs)) = timestamp {
            self.check_fresh(secs, now_unix)?;
        }
        let secret_index = match d.algorithm() {
            Algorithm::SharedSecret => self
                .keys
                .iter()
                .position(|k| matches!(k, Key::Shared(secret) if candidates.iter().any(|c| secret.matches(c)))),
            Algorithm::Ed25519 => {
                let message = d.content(headers, body, timestamp.map(|t| t.0))?.concat();
                self.keys.iter().position(|key| {
                    key.ed25519().is_some_and(|key| {
                        candidates.iter().any(|c| d.decode(c).is_some_and(|sig| key.verify(&message, &sig)))
                    })
                })
            }
            algorithm => {
                let parts = d.content(headers, body, timestamp.map(|t| t.0))?;
                let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_ref()).collect();
                let expected = algorithm.hmac().map_or(32, HmacAlgorithm::tag_len);
                self.find_match(&parts, || candidates.iter().copied(), d.spec().encoding, expected)
            }
        };
        let secret_index = secret_index.ok_or(VerifyError::Mismatch)?;
        d.check_body_matches(headers, body, timestamp.map(|t| t.0))?;
        // A signature that does not cover the body binds to the first body it is seen with: the server claims it
        // as a nonce with the body's digest, and refuses the same signature with another body while it is fresh.
        let nonce = match timestamp {
            Some((_, secs)) if !d.signs_body() && d.algorithm() != Algorithm::SharedSecret => {
                let value = headers.get(d.header()).unwrap_or_default();
                Some(Nonce {
                    keyid: format!("{}:{}", d.name(), d.header()),
                    value: hex::encode(sha2::Sha256::digest(value.as_bytes())),
                    expires_at: secs.saturating_add(i64::try_from(self.tolerance_secs).unwrap_or(i64::MAX)),
                })
            }
            _ => None,
        };
        Ok(Verified { secret_index, delivery_id: d.delivery_id(headers), timestamp: timestamp.map(|t| t.1), nonce })
    }

    /// Signs `body` with a declarative rule and the first key that can, in `context` (the URL and the other
    /// headers the delivery is sent with, which the rule may cover).
    fn sign_declared(
        &self,
        d: &DeclaredScheme,
        body: &[u8],
        now_unix: i64,
        msg_id: &str,
        context: &RequestContext<'_>,
    ) -> Vec<(String, String)> {
        let timestamp = d.timestamp_text(now_unix).unwrap_or_default();
        let Some(key) = self.keys.iter().find(|k| k.ed25519().is_none_or(Ed25519Key::can_sign)) else {
            return Vec::new();
        };
        if let Key::Shared(secret) = key {
            return d.signed_headers(&secret.text, &timestamp, msg_id);
        }
        // The content may cover the timestamp and id headers this signature travels with: give them first.
        let mut sent = d.signed_headers("", &timestamp, msg_id);
        sent.remove(0);
        sent.extend(context.headers.iter().cloned());
        let request = SigningRequest { headers: &sent, url: context.url };
        let Ok(parts) = d.content(&request, body, Some(&timestamp)) else {
            return Vec::new();
        };
        let bytes = match key {
            Key::Mac(mac) => {
                let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_ref()).collect();
                mac.compute(&parts).into_bytes()
            }
            Key::Ed25519(ed) => match ed.sign(&parts.concat()) {
                Some(sig) => sig.to_vec(),
                None => return Vec::new(),
            },
            Key::Shared(_) | Key::Braintree(_) | Key::Http { .. } => return Vec::new(),
        };
        d.signed_headers(&d.spec().encoding.encode(&bytes), &timestamp, msg_id)
    }

    /// [`Verifier::sign`] for a delivery sent to `context.url` with `context.headers` besides the signature's:
    /// the declarative rules that cover the URL, a query parameter or another header need them; the other
    /// schemes sign as [`Verifier::sign`] does.
    pub fn sign_with(
        &self,
        body: &[u8],
        now_unix: i64,
        msg_id: &str,
        context: &RequestContext<'_>,
    ) -> Vec<(String, String)> {
        match &self.scheme {
            Scheme::Declared(d) => self.sign_declared(d, body, now_unix, msg_id, context),
            _ => self.sign(body, now_unix, msg_id),
        }
    }

    fn verify_hmac(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        params: &BodyHmac<'_>,
    ) -> Result<Verified, VerifyError> {
        let raw = headers.get(params.header).ok_or_else(|| missing(params.header))?.trim();
        let value = match params.prefix {
            Some(p) => raw
                .strip_prefix(p)
                .ok_or_else(|| VerifyError::Malformed(format!("signature does not start with {p:?}")))?,
            None => raw,
        };
        let expected = params.algorithm.tag_len();
        let parts: [&[u8]; 1] = [body];
        let secret_index = self
            .find_match(&parts, || std::iter::once(value), params.encoding, expected)
            .ok_or(VerifyError::Mismatch)?;
        let delivery_id = params.delivery.and_then(|(name, _)| headers.get(name)).map(str::to_owned);
        Ok(Verified { secret_index, delivery_id, timestamp: None, nonce: None })
    }

    /// Produces the headers a provider would send for `body`, signed with the
    /// FIRST configured secret that can sign at time `now_unix`.
    ///
    /// Every secret can sign except public keys (Standard Webhooks `whpk_`);
    /// when only public keys are configured the result is empty. A Standard
    /// Webhooks `whsk_` key signs a `v1a` (Ed25519) signature, a `whsec_` key
    /// a `v1` one. [`Scheme::Adyen`] carries no signature header, so the
    /// result is empty; use [`Verifier::adyen_sign_body`]; nor does [`Scheme::Braintree`]: use
    /// [`Verifier::braintree_sign_body`]. Nor does
    /// [`Scheme::HttpMessageSignatures`], whose signature covers the method,
    /// authority and path that this function is not given; use
    /// [`Verifier::sign_request`].
    ///
    /// `msg_id` becomes the Standard Webhooks `webhook-id`, GitHub's
    /// `X-GitHub-Delivery` and Shopify's `X-Shopify-Webhook-Id`, and is
    /// ignored by the other schemes. Header names use the provider's canonical
    /// casing (`Stripe-Signature`, `webhook-id`, `X-Hub-Signature-256`, ...;
    /// the configured name for [`Scheme::Hmac`]). This exists so that `payhook send`, the benchmark
    /// and the tests generate deliveries exactly the way providers do; a
    /// negative `now_unix` produces a timestamp that [`Verifier::verify`]
    /// rejects as malformed.
    pub fn sign(&self, body: &[u8], now_unix: i64, msg_id: &str) -> Vec<(String, String)> {
        if let Scheme::Declared(d) = &self.scheme {
            return self.sign_declared(d, body, now_unix, msg_id, &RequestContext { url: None, headers: &[] });
        }
        let key = match self.keys.iter().find(|key| key.ed25519().is_none_or(Ed25519Key::can_sign)) {
            Some(Key::Mac(mac)) => mac,
            Some(Key::Ed25519(ed)) => return self.sign_standard_v1a(ed, body, now_unix, msg_id),
            // RFC 9421 signs through `sign_request`, which is told the request line, and Braintree through
            // `braintree_sign_body`; when only public keys are configured nothing can sign.
            Some(Key::Http { .. } | Key::Shared(_) | Key::Braintree(_)) | None => return Vec::new(),
        };
        match &self.scheme {
            // Adyen's and Braintree's signatures live in the body: see `adyen_sign_body`, `braintree_sign_body`.
            Scheme::Adyen | Scheme::Braintree | Scheme::HttpMessageSignatures => Vec::new(),
            Scheme::Declared(d) => {
                self.sign_declared(d, body, now_unix, msg_id, &RequestContext { url: None, headers: &[] })
            }
            Scheme::Stripe => {
                let ts = now_unix.to_string();
                let tag = key.compute(&[ts.as_bytes(), b".", body]);
                vec![("Stripe-Signature".to_owned(), format!("t={ts},v1={}", hex::encode(tag.into_bytes())))]
            }
            Scheme::StandardWebhooks => {
                let ts = now_unix.to_string();
                let tag = key.compute(&[msg_id.as_bytes(), b".", ts.as_bytes(), b".", body]);
                let signature = format!("v1,{}", STANDARD.encode(tag.into_bytes()));
                vec![
                    ("webhook-id".to_owned(), msg_id.to_owned()),
                    ("webhook-timestamp".to_owned(), ts),
                    ("webhook-signature".to_owned(), signature),
                ]
            }
            Scheme::Hmac { .. } | Scheme::Github | Scheme::Paystack | Scheme::Shopify => {
                let Some(params) = self.scheme.body_hmac() else {
                    return Vec::new();
                };
                let bytes = key.compute(&[body]).into_bytes();
                let encoded = params.encoding.encode(&bytes);
                let value = format!("{}{encoded}", params.prefix.unwrap_or(""));
                let mut out = vec![(params.canonical_header.to_owned(), value)];
                if let Some((_, name)) = params.delivery {
                    out.push((name.to_owned(), msg_id.to_owned()));
                }
                out
            }
        }
    }
}

/// Where a delivery is sent, for signing with a rule that covers more than its body.
#[derive(Debug, Clone, Copy)]
pub struct RequestContext<'a> {
    /// The URL it is POSTed to (`{url}`, `{query:NAME}`).
    pub url: Option<&'a str>,
    /// The headers it is sent with besides the signature's own (`{header:NAME}`).
    pub headers: &'a [(String, String)],
}

/// The request a signer is about to send, as the rule's template reads it.
struct SigningRequest<'a> {
    headers: &'a [(String, String)],
    url: Option<&'a str>,
}

impl Headers for SigningRequest<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        <[(String, String)] as Headers>::get(self.headers, name)
    }

    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        let url = self.url?;
        match component {
            "@target-uri" => Some(Cow::Borrowed(url)),
            "@query" => Some(Cow::Owned(url.find('?').map_or_else(|| "?".to_owned(), |at| url[at..].to_owned()))),
            _ => None,
        }
    }
}
