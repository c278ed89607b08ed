//! Stripe's `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`: HMAC-SHA256 of `"{t}.{body}"`, keyed with the
//! secret string's bytes as configured (see [`Scheme::Stripe`](super::Scheme::Stripe)).

use super::mac::KeyedMac;
use super::{Encoding, Headers, Verified, VerifyError, check_candidates, missing, parse_timestamp};

/// Iterates the `v1` values of a `Stripe-Signature` header.
fn stripe_v1_values(header: &str) -> impl Iterator<Item = &str> {
    header.split(',').filter_map(|item| match item.trim().split_once('=') {
        Some(("v1", v)) => Some(v),
        _ => None,
    })
}

impl super::Verifier {
    pub(super) fn verify_stripe(
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
}

/// The `Stripe-Signature` header for `body` at `now_unix`, MACed with `key`.
pub(super) fn sign(key: &KeyedMac, body: &[u8], now_unix: i64) -> Vec<(String, String)> {
    let ts = now_unix.to_string();
    let tag = key.compute(&[ts.as_bytes(), b".", body]);
    vec![("Stripe-Signature".to_owned(), format!("t={ts},v1={}", hex::encode(tag.into_bytes())))]
}
