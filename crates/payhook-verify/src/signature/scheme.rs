//! The schemes payhook verifies: which headers carry what, and which bytes are signed. Each variant's documentation
//! is the scheme's rules; its code is in the module of the same name.

use std::sync::Arc;

use super::{DeclaredScheme, Encoding, HmacAlgorithm};

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
    /// [`Verified::delivery_id`](super::Verified::delivery_id) is the `X-GitHub-Delivery` header when
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
    /// [`Verified::delivery_id`](super::Verified::delivery_id) is the `X-Shopify-Webhook-Id` header when
    /// present; like GitHub's delivery id it is not covered by the signature.
    Shopify,
    /// Adyen's notification HMAC, carried inside the body rather than in a
    /// header.
    ///
    /// Each `notificationItems[].NotificationRequestItem` has its own
    /// `additionalData.hmacSignature`: the base64 HMAC-SHA256 of
    /// [`adyen_signing_string`](super::adyen_signing_string) of that item, keyed with the *hex-decoded*
    /// secret (Adyen shows it as 64 hex digits). A delivery verifies only if
    /// it has at least one item and every item verifies under some configured
    /// secret; a body that is not JSON or has no items is
    /// [`VerifyError::Malformed`](super::VerifyError::Malformed). Nothing time-bound is signed, so replays
    /// are caught by deduplication downstream. Signing is
    /// [`Verifier::adyen_sign_body`](super::Verifier::adyen_sign_body), since the signature changes the body.
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
    /// a payload with characters other than base64's and `\n`, is [`VerifyError::Malformed`](super::VerifyError::Malformed); no pair for a
    /// configured public key, or a MAC that differs, is [`VerifyError::Mismatch`](super::VerifyError::Mismatch). Nothing time-bound is signed:
    /// replays are caught by deduplication downstream. Signing is [`Verifier::braintree_sign_body`](super::Verifier::braintree_sign_body), since the
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
    ///   [`Verifier::sign_request`](super::Verifier::sign_request)) and verifies.
    ///
    /// The keyid is everything between the first and the last `:`; it must be
    /// non-empty printable ASCII and unique within a verifier.
    ///
    /// Of the `Signature-Input` members, the first whose `keyid` is configured
    /// is checked (an `alg` parameter, if present, must name that key's
    /// algorithm), and payhook's policy applies to it: it must cover every
    /// [required component](super::Verifier::required_components) (by default
    /// [`DEFAULT_REQUIRED_COMPONENTS`](super::DEFAULT_REQUIRED_COMPONENTS): `@method`, `@authority`, `@path` and
    /// `content-digest`, so that it cannot be replayed at another endpoint),
    /// else [`VerifyError::InsufficientCoverage`](super::VerifyError::InsufficientCoverage); `content-digest` must
    /// be covered and match the body (`sha-256` and/or `sha-512`), `created`
    /// is required and must lie within the tolerance in either direction, and
    /// an `expires` in the past is [`VerifyError::Stale`](super::VerifyError::Stale) (with `delta_secs`
    /// the seconds since expiry and a zero `tolerance_secs`). A `nonce` is
    /// surfaced as [`Verified::nonce`](super::Verified::nonce) for the server to claim; a signature
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
}
