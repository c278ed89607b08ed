//! Body-only HMACs, with no timestamp: the generic [`Scheme::Hmac`] and the providers built on it (GitHub,
//! Paystack, Shopify). Nothing but the body is signed, so these schemes cannot detect replays by themselves;
//! deduplication happens downstream.

use super::mac::KeyedMac;
use super::{Encoding, Headers, HmacAlgorithm, Scheme, Verified, VerifyError, missing};

impl Scheme {
    /// The body-only HMAC parameters of [`Scheme::Hmac`] and the named
    /// providers built on it, or `None` for the other schemes.
    pub(super) fn body_hmac(&self) -> Option<BodyHmac<'_>> {
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
pub(super) struct BodyHmac<'s> {
    /// Signature header, lowercase (for lookups).
    pub(super) header: &'s str,
    /// Signature header as the provider spells it (for signing).
    pub(super) canonical_header: &'s str,
    pub(super) algorithm: HmacAlgorithm,
    pub(super) encoding: Encoding,
    pub(super) prefix: Option<&'s str>,
    /// Unsigned delivery-id header, lowercase and as the provider spells it.
    pub(super) delivery: Option<(&'static str, &'static str)>,
}

impl BodyHmac<'static> {
    pub(super) const GITHUB: Self = Self {
        header: "x-hub-signature-256",
        canonical_header: "X-Hub-Signature-256",
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: Some("sha256="),
        delivery: Some(("x-github-delivery", "X-GitHub-Delivery")),
    };
    pub(super) const PAYSTACK: Self = Self {
        header: "x-paystack-signature",
        canonical_header: "x-paystack-signature",
        algorithm: HmacAlgorithm::Sha512,
        encoding: Encoding::Hex,
        prefix: None,
        delivery: None,
    };
    pub(super) const SHOPIFY: Self = Self {
        header: "x-shopify-hmac-sha256",
        canonical_header: "X-Shopify-Hmac-Sha256",
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Base64,
        prefix: None,
        delivery: Some(("x-shopify-webhook-id", "X-Shopify-Webhook-Id")),
    };
}

impl super::Verifier {
    pub(super) fn verify_hmac(
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
}

/// The signature header (and, for GitHub and Shopify, the delivery id header) for `body`, MACed with `key`.
pub(super) fn sign(params: &BodyHmac<'_>, key: &KeyedMac, body: &[u8], msg_id: &str) -> Vec<(String, String)> {
    let bytes = key.compute(&[body]).into_bytes();
    let encoded = params.encoding.encode(&bytes);
    let value = format!("{}{encoded}", params.prefix.unwrap_or(""));
    let mut out = vec![(params.canonical_header.to_owned(), value)];
    if let Some((_, name)) = params.delivery {
        out.push((name.to_owned(), msg_id.to_owned()));
    }
    out
}
