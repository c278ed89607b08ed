//! Webhook signature verification for the schemes payhook understands.
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
//! Layout: this file holds what every scheme shares: the [`Scheme`] enum (with each scheme's rules as its
//! documentation), [`Verified`] and the errors, and the [`Verifier`] that dispatches to a scheme. Each scheme is a
//! file of its own: `stripe`, `standard` (Standard Webhooks), `body_hmac` (the generic HMAC, GitHub, Paystack,
//! Shopify), `adyen` (signatures in the body), `braintree` (form-body signatures), `http` (RFC 9421 message
//! signatures and RFC 9530 digests, on the RFC 8941 parser in `structured`) and `declared` (rules written as
//! data). Underneath them: `key` (configured secrets and their decoded keys), `mac` (the shared HMAC machinery)
//! and `ed25519`. The request's [`Headers`] live in [`crate::request`], below both this module and
//! [`crate::format`], so that neither imports the other for them.

use std::fmt;

mod adyen;
mod body_hmac;
mod braintree;
mod declared;
mod deliver;
mod ed25519;
mod http;
mod key;
mod mac;
mod scheme;
mod standard;
mod stripe;
mod structured;

pub use crate::request::{Headers, SignedParts};
pub use adyen::adyen_signing_string;
pub use braintree::braintree_payload;
pub use declared::{
    Algorithm, DeclaredScheme, KeyDecoding, RequestContext, SignatureSpec, SignedPart, SpecError, Split, TimeUnit,
};
pub use deliver::SignedDelivery;
pub use http::{
    ComponentError, DEFAULT_REQUIRED_COMPONENTS, DERIVED_COMPONENTS, RequestParts, SignatureInput,
    check_component_name, check_content_digest, content_digest, parse_signature, parse_signature_input, signature_base,
};
pub use key::{Encoding, HmacAlgorithm, KeyError, Secret};
pub use scheme::Scheme;

use ed25519::Ed25519Key;
use key::{Key, parse_key};
use mac::{SIG_BUF_LEN, decode_signature};

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

/// What a successful verification tells the pipeline, and the proof that it happened.
///
/// Only a [`Verifier`] makes one (its fields are private to this module), so a value of this type means a
/// delivery's signature was checked: the store's `Delivery` is built from it, which is how the type system keeps
/// an unverified body out of the inbox.
///
/// ```compile_fail
/// // Outside payhook-verify a `Verified` cannot be written by hand.
/// let forged = payhook_verify::signature::Verified { secret_index: 0, delivery_id: None, timestamp: None, nonce: None };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    secret_index: usize,
    delivery_id: Option<String>,
    timestamp: Option<i64>,
    nonce: Option<Nonce>,
}

impl Verified {
    /// Index into the verifier's secrets of the secret that matched, so that
    /// operators can see when a rotated-out secret is no longer in use.
    pub fn secret_index(&self) -> usize {
        self.secret_index
    }

    /// The provider's delivery/message id when the scheme carries one, else
    /// `None`. Standard Webhooks' `webhook-id` / `svix-id` is covered by the
    /// signature and therefore safe to deduplicate on; GitHub's
    /// `X-GitHub-Delivery` and Shopify's `X-Shopify-Webhook-Id` are not signed
    /// by those providers, so they only label the delivery.
    pub fn delivery_id(&self) -> Option<&str> {
        self.delivery_id.as_deref()
    }

    /// The signed timestamp (unix seconds) when the scheme has one (RFC 9421:
    /// `created`).
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The signer's nonce (RFC 9421 `nonce` parameter), for the server to
    /// claim once; `None` for every other scheme and for RFC 9421 signatures
    /// that carry none.
    pub fn nonce(&self) -> Option<&Nonce> {
        self.nonce.as_ref()
    }
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
#[non_exhaustive]
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
    pub fn signed_parts(&self) -> SignedParts {
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
            // Generic HMAC, GitHub, Paystack and Shopify: one body HMAC each, its parameters defined once.
            Scheme::Hmac { .. } | Scheme::Github | Scheme::Paystack | Scheme::Shopify => {
                match self.scheme.body_hmac() {
                    Some(params) => self.verify_hmac(headers, body, &params),
                    None => Err(VerifyError::Malformed("no body HMAC for this scheme".into())),
                }
            }
            Scheme::Adyen => self.verify_adyen(body),
            Scheme::Braintree => self.verify_braintree(body),
            Scheme::HttpMessageSignatures => self.verify_http(headers, body, now_unix),
            Scheme::Declared(d) => self.verify_declared(d, headers, body, now_unix),
        }
    }

    pub(super) fn check_fresh(&self, timestamp: i64, now_unix: i64) -> Result<(), VerifyError> {
        let delta = now_unix.saturating_sub(timestamp);
        if delta.unsigned_abs() > self.tolerance_secs {
            return Err(VerifyError::Stale { delta_secs: delta, tolerance_secs: self.tolerance_secs });
        }
        Ok(())
    }

    /// Tries each secret's MAC of `parts` against each candidate signature.
    pub(super) fn find_match<'h, I>(
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
            Some(Key::Ed25519(ed)) => return standard::sign_v1a(ed, body, now_unix, msg_id),
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
            Scheme::Stripe => stripe::sign(key, body, now_unix),
            Scheme::StandardWebhooks => standard::sign_v1(key, body, now_unix, msg_id),
            Scheme::Hmac { .. } | Scheme::Github | Scheme::Paystack | Scheme::Shopify => {
                match self.scheme.body_hmac() {
                    Some(params) => body_hmac::sign(&params, key, body, msg_id),
                    None => Vec::new(),
                }
            }
        }
    }
}
