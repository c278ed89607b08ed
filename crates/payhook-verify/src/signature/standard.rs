//! [Standard Webhooks](https://www.standardwebhooks.com/) (also Svix): `webhook-id`, `webhook-timestamp` and
//! `webhook-signature` (or their `svix-` equivalents) over `"{id}.{timestamp}.{body}"`, with `v1` (HMAC-SHA256)
//! and `v1a` (Ed25519) signatures (see [`Scheme::StandardWebhooks`](super::Scheme::StandardWebhooks)).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::ed25519::Ed25519Key;
use super::key::{Key, LENIENT_BASE64, sha256_key};
use super::mac::KeyedMac;
use super::{Encoding, Headers, Verified, VerifyError, check_candidates, missing, parse_timestamp};

/// Prefix that Standard Webhooks (and Svix) put in front of base64 secrets.
const WHSEC_PREFIX: &str = "whsec_";

/// Prefix of a Standard Webhooks Ed25519 public key (base64 of 32 bytes).
const WHPK_PREFIX: &str = "whpk_";

/// Prefix of a Standard Webhooks Ed25519 private key (base64 of a 32-byte seed, or of 64 bytes: seed then public
/// key).
const WHSK_PREFIX: &str = "whsk_";

/// Base64 length of a 64-byte Ed25519 signature.
const ED25519_SIG_B64_LEN: usize = 88;

/// Iterates the values of one version (`v1` or `v1a`) of a Standard Webhooks signature header.
fn standard_values<'h>(header: &'h str, version: &'static str) -> impl Iterator<Item = &'h str> {
    header.split(' ').filter_map(move |entry| match entry.split_once(',') {
        Some((v, value)) if v == version => Some(value),
        _ => None,
    })
}

/// Decodes a Standard Webhooks secret: `whpk_` (Ed25519 public key), `whsk_` (Ed25519 private key), else
/// `whsec_<base64>` or bare base64 (an HMAC-SHA256 key).
pub(super) fn parse_key(text: &str) -> Result<Key, &'static str> {
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
    sha256_key(&decoded)
}

impl super::Verifier {
    pub(super) fn verify_standard(
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
}

/// The Standard Webhooks headers with one `v1` signature, MACed with `key`.
pub(super) fn sign_v1(key: &KeyedMac, body: &[u8], now_unix: i64, msg_id: &str) -> Vec<(String, String)> {
    let ts = now_unix.to_string();
    let tag = key.compute(&[msg_id.as_bytes(), b".", ts.as_bytes(), b".", body]);
    let signature = format!("v1,{}", STANDARD.encode(tag.into_bytes()));
    vec![
        ("webhook-id".to_owned(), msg_id.to_owned()),
        ("webhook-timestamp".to_owned(), ts),
        ("webhook-signature".to_owned(), signature),
    ]
}

/// The Standard Webhooks headers with one `v1a` signature.
pub(super) fn sign_v1a(key: &Ed25519Key, body: &[u8], now_unix: i64, msg_id: &str) -> Vec<(String, String)> {
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
