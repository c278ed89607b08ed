//! A declared rule at work: [`Verifier`] verifying and signing with a [`DeclaredScheme`].

use std::borrow::Cow;

use sha2::Digest as _;

use super::super::ed25519::Ed25519Key;
use super::super::key::Key;
use super::super::{Headers, HmacAlgorithm, Nonce, Scheme, Verified, Verifier, VerifyError};
use super::{Algorithm, DeclaredScheme};

impl Verifier {
    pub(in crate::signature) fn verify_declared(
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
    pub(in crate::signature) fn sign_declared(
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
