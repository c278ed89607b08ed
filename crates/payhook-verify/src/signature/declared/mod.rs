//! Declarative signature schemes: a provider's signature rule written as data (a `[signature]` table) instead of
//! code, so that a provider payhook has no code for can be configured, and so that the presets of the providers it
//! ships are written in the same language as a user's own.
//!
//! A rule says where the signature travels (one header, split as a plain value, `k=v` pairs or a list), what was
//! signed (a [template](SignedPart) over the raw body, the timestamp, a delivery id, headers, the notification URL,
//! query parameters and JSON fields of the body), with which algorithm (HMAC-SHA1/256/512, Ed25519, or a shared
//! secret sent as is) and in which encoding, and how a configured secret becomes key bytes. Verification keeps the
//! order of the built-in schemes: header parsing, then freshness, then the MAC, each comparison in constant time.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};

use super::{Encoding, Headers, VerifyError, missing, parse_timestamp};

mod spec;
mod verify;

pub use spec::{Algorithm, KeyDecoding, SignatureSpec, SignedPart, SpecError, Split, TimeUnit};
use spec::{default_signed, parse_signed, spec_error, split_name};
pub use verify::RequestContext;

/// A checked, compiled signature rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredScheme {
    name: String,
    spec: SignatureSpec,
    /// The signature, timestamp and id headers' names, lower-cased once.
    header: String,
    timestamp_header: Option<String>,
    id_header: Option<String>,
    separator: String,
    signed: Vec<SignedPart>,
    notification_url: Option<String>,
    /// `body_must_match`, compiled: a pointer into the body and the signed part it repeats.
    body_must_match: Vec<(String, SignedPart)>,
}

/// A signature header read: the candidate signatures, and the timestamp (as sent, and in unix seconds).
type SignatureHeader<'h> = (Vec<&'h str>, Option<(&'h str, i64)>);

/// Where the values of one delivery are, once its signature header is split.
struct Parsed<'h> {
    signatures: Vec<&'h str>,
    timestamp: Option<&'h str>,
}

impl DeclaredScheme {
    /// Checks `spec` and compiles it under `name` (a preset's name, or `declared` for a source's own rule).
    /// `notification_url` is what `{url}` stands for; without it, `{url}` is the request URL as received.
    pub fn new(name: &str, spec: SignatureSpec, notification_url: Option<String>) -> Result<Self, SpecError> {
        let header = spec.header.trim().to_ascii_lowercase();
        if header.is_empty() {
            return Err(spec_error("header", "must name the signature header"));
        }
        let signed = parse_signed(&spec.signed)?;
        let is = |part: &SignedPart| signed.contains(part);
        let separator = match spec.split {
            Split::Plain => String::new(),
            Split::Pairs => spec.separator.clone().unwrap_or_else(|| ",".to_owned()),
            Split::List => spec.separator.clone().unwrap_or_else(|| " ".to_owned()),
        };
        if spec.split != Split::Plain && separator.is_empty() {
            return Err(spec_error("separator", "must not be empty"));
        }
        let only = |key: &'static str, present: bool, split: Split| {
            if present && spec.split != split {
                return Err(spec_error(key, format!("only split = \"{}\" takes this key", split_name(split))));
            }
            Ok(())
        };
        only("prefix", spec.prefix.is_some(), Split::Plain)?;
        only("signature_key", spec.signature_key.is_some(), Split::Pairs)?;
        only("timestamp_key", spec.timestamp_key.is_some(), Split::Pairs)?;
        only("item_prefix", spec.item_prefix.is_some(), Split::List)?;
        if spec.split == Split::Pairs && spec.signature_key.as_deref().is_none_or(str::is_empty) {
            return Err(spec_error("signature_key", "split = \"pairs\" needs the key of the signature values"));
        }
        if spec.timestamp_key.is_some() && spec.timestamp_header.is_some() {
            return Err(spec_error("timestamp_header", "the timestamp is either a pair (timestamp_key) or a header"));
        }
        let has_timestamp = spec.timestamp_key.is_some() || spec.timestamp_header.is_some();
        if is(&SignedPart::Timestamp) && !has_timestamp {
            return Err(spec_error("signed", "{timestamp} needs timestamp_key or timestamp_header"));
        }
        if is(&SignedPart::Id) && spec.id_header.is_none() {
            return Err(spec_error("signed", "{id} needs id_header"));
        }
        if spec.algorithm == Algorithm::SharedSecret {
            if spec.signed != default_signed() {
                return Err(spec_error("signed", "a shared secret signs nothing: leave `signed` out"));
            }
        } else if !spec.unsigned_body && !signed.iter().any(|p| matches!(p, SignedPart::Body | SignedPart::Json(_))) {
            return Err(spec_error(
                "signed",
                "must cover the body ({body}), or anyone could change it (unsigned_body = true accepts such a rule)",
            ));
        }
        let mut body_must_match = Vec::with_capacity(spec.body_must_match.len());
        for (pointer, part) in &spec.body_must_match {
            if !pointer.starts_with('/') {
                return Err(spec_error(
                    "body_must_match",
                    format!("{pointer:?} is not a JSON pointer such as /data/id"),
                ));
            }
            let part = parse_signed(&format!("{{{part}}}"))?.pop().filter(|p| signed.contains(p)).ok_or_else(|| {
                spec_error("body_must_match", format!("{part:?} is not one of the parts `signed` covers"))
            })?;
            body_must_match.push((pointer.clone(), part));
        }
        let timestamp_header = spec.timestamp_header.as_deref().map(|h| h.trim().to_ascii_lowercase());
        let id_header = spec.id_header.as_deref().map(|h| h.trim().to_ascii_lowercase());
        Ok(Self {
            body_must_match,
            name: name.to_owned(),
            spec,
            header,
            timestamp_header,
            id_header,
            separator,
            signed,
            notification_url,
        })
    }

    /// The name it was compiled under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rule as written.
    pub fn spec(&self) -> &SignatureSpec {
        &self.spec
    }

    /// Decodes a configured secret into key bytes, without its `key_prefix`.
    pub(super) fn key_bytes(&self, text: &str) -> Result<Vec<u8>, &'static str> {
        let text = match &self.spec.key_prefix {
            Some(prefix) => text.strip_prefix(prefix.as_str()).unwrap_or(text),
            None => text,
        };
        let bytes = match self.spec.key {
            KeyDecoding::Raw => text.as_bytes().to_vec(),
            KeyDecoding::Base64 => super::key::LENIENT_BASE64.decode(text).map_err(|_| "not valid base64")?,
            KeyDecoding::Hex => hex::decode(text).map_err(|_| "not valid hex")?,
        };
        if bytes.is_empty() {
            return Err("secret decodes to an empty key");
        }
        Ok(bytes)
    }

    /// The header that carries a secret as is (a `shared-secret` rule's), which must not be kept with the
    /// delivery; `None` for a rule whose header carries a signature.
    pub fn secret_header(&self) -> Option<&str> {
        (self.spec.algorithm == Algorithm::SharedSecret).then_some(self.header.as_str())
    }

    /// The algorithm.
    pub(super) fn algorithm(&self) -> Algorithm {
        self.spec.algorithm
    }

    /// The delivery id header's value, when the rule names one.
    pub(super) fn delivery_id(&self, headers: &(impl Headers + ?Sized)) -> Option<String> {
        self.id_header.as_deref().and_then(|h| headers.get(h)).map(str::to_owned)
    }

    fn parse<'h>(&self, value: &'h str) -> Result<Parsed<'h>, VerifyError> {
        let spec = &self.spec;
        match spec.split {
            Split::Plain => {
                let value = value.trim();
                let value = match &spec.prefix {
                    Some(p) => value
                        .strip_prefix(p.as_str())
                        .ok_or_else(|| VerifyError::Malformed(format!("signature does not start with {p:?}")))?,
                    None => value,
                };
                Ok(Parsed { signatures: vec![value], timestamp: None })
            }
            Split::Pairs => {
                let (mut signatures, mut timestamp) = (Vec::new(), None);
                for pair in value.split(self.separator.as_str()) {
                    let Some((k, v)) = pair.trim().split_once('=') else { continue };
                    if Some(k) == spec.signature_key.as_deref() {
                        signatures.push(v);
                    } else if Some(k) == spec.timestamp_key.as_deref() && timestamp.replace(v).is_some() {
                        return Err(VerifyError::Malformed(format!("more than one {k}= entry")));
                    }
                }
                if signatures.is_empty() {
                    let key = spec.signature_key.as_deref().unwrap_or_default();
                    return Err(VerifyError::Malformed(format!("no {key}= signature")));
                }
                if let Some(key) = &spec.timestamp_key
                    && timestamp.is_none()
                {
                    return Err(VerifyError::Malformed(format!("no {key}= timestamp")));
                }
                Ok(Parsed { signatures, timestamp })
            }
            Split::List => {
                let prefix = spec.item_prefix.as_deref().unwrap_or("");
                let signatures: Vec<&str> = value
                    .split(self.separator.as_str())
                    .filter_map(|item| item.trim().strip_prefix(prefix))
                    .filter(|s| !s.is_empty())
                    .collect();
                if signatures.is_empty() {
                    return Err(VerifyError::Malformed(format!("no {prefix}signature in the list")));
                }
                Ok(Parsed { signatures, timestamp: None })
            }
        }
    }

    /// Reads the signature header: the candidate signatures, and the timestamp (text as sent, and unix seconds)
    /// when the rule has one. Fails on a missing or malformed header or timestamp.
    pub(super) fn read<'h>(&self, headers: &'h (impl Headers + ?Sized)) -> Result<SignatureHeader<'h>, VerifyError> {
        let value = headers.get(&self.header).ok_or_else(|| missing(&self.header))?;
        let parsed = self.parse(value)?;
        super::check_candidates(parsed.signatures.len(), "signatures")?;
        let text = match (&self.timestamp_header, parsed.timestamp) {
            (Some(h), _) => Some(headers.get(h).ok_or_else(|| missing(h))?.trim()),
            (None, t) => t.map(str::trim),
        };
        let timestamp = match text {
            Some(text) => {
                let value = parse_timestamp(text)?;
                let secs = match self.spec.timestamp_unit {
                    TimeUnit::Seconds => value,
                    TimeUnit::Milliseconds => value.div_euclid(1000),
                };
                Some((text, secs))
            }
            None => None,
        };
        // The id header is required when it is signed; otherwise it only labels the delivery (GitHub's).
        if let Some(h) = self.id_header.as_deref().filter(|_| self.signed.contains(&SignedPart::Id)) {
            let id = headers.get(h).ok_or_else(|| missing(h))?;
            if id.is_empty() {
                return Err(VerifyError::Malformed(format!("{h} is empty")));
            }
        }
        Ok((parsed.signatures, timestamp))
    }

    /// The signed content's parts for one delivery (`timestamp` as sent).
    pub(super) fn content<'a>(
        &'a self,
        headers: &'a (impl Headers + ?Sized),
        body: &'a [u8],
        timestamp: Option<&'a str>,
    ) -> Result<Vec<Cow<'a, [u8]>>, VerifyError> {
        let mut json: Option<serde_json::Value> = None;
        let mut parts = Vec::with_capacity(self.signed.len());
        for part in &self.signed {
            parts.push(match part {
                SignedPart::Literal(text) => Cow::Borrowed(text.as_bytes()),
                SignedPart::Body => Cow::Borrowed(body),
                SignedPart::Timestamp => Cow::Borrowed(timestamp.unwrap_or_default().as_bytes()),
                SignedPart::Id => {
                    let h = self.id_header.as_deref().unwrap_or_default();
                    Cow::Borrowed(headers.get(h).ok_or_else(|| missing(h))?.as_bytes())
                }
                SignedPart::Header(name) => Cow::Borrowed(headers.get(name).ok_or_else(|| missing(name))?.as_bytes()),
                SignedPart::Url => match &self.notification_url {
                    Some(url) => Cow::Borrowed(url.as_bytes()),
                    None => match headers.derived("@target-uri") {
                        Some(url) => Cow::Owned(url.into_owned().into_bytes()),
                        None => return Err(missing("@target-uri")),
                    },
                },
                SignedPart::Query(name) => {
                    let query = headers.derived("@query").unwrap_or(Cow::Borrowed("?"));
                    let query = query.strip_prefix('?').unwrap_or(&query);
                    let value = form_urlencoded::parse(query.as_bytes())
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.into_owned())
                        .ok_or_else(|| VerifyError::Malformed(format!("no query parameter {name}")))?;
                    Cow::Owned(value.into_bytes())
                }
                SignedPart::Json(pointer) => {
                    if json.is_none() {
                        json = Some(
                            serde_json::from_slice(body)
                                .map_err(|_| VerifyError::Malformed("the signed body is not JSON".into()))?,
                        );
                    }
                    let value = json.as_ref().and_then(|j| crate::json_pointer::get(j, pointer));
                    let text = match value {
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(v) => v.to_string(),
                        None => return Err(VerifyError::Malformed(format!("the body has no {pointer}"))),
                    };
                    Cow::Owned(text.into_bytes())
                }
            });
        }
        Ok(parts)
    }

    /// Checks the body fields that repeat a signed part (`body_must_match`) against it, once the signature verified.
    pub(super) fn check_body_matches(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        timestamp: Option<&str>,
    ) -> Result<(), VerifyError> {
        if self.body_must_match.is_empty() {
            return Ok(());
        }
        let json: serde_json::Value = serde_json::from_slice(body)
            .map_err(|_| VerifyError::BodyMismatch { pointer: "/".into(), reason: "the body is not JSON".into() })?;
        for (pointer, part) in &self.body_must_match {
            let signed = self.content_of(part, headers, body, timestamp)?;
            let in_body = match crate::json_pointer::get(&json, pointer) {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(v @ serde_json::Value::Number(_)) => Some(v.to_string()),
                _ => None,
            };
            if !in_body.is_some_and(|b| b.as_bytes().eq_ignore_ascii_case(&signed)) {
                return Err(VerifyError::BodyMismatch {
                    pointer: pointer.clone(),
                    reason: "differs from the signed value it repeats".into(),
                });
            }
        }
        Ok(())
    }

    /// Whether the rule signs the body (all of it, or fields of it).
    pub fn signs_body(&self) -> bool {
        self.spec.algorithm != Algorithm::SharedSecret
            && self.signed.iter().any(|p| matches!(p, SignedPart::Body | SignedPart::Json(_)))
    }

    /// The signed content's parts: what the rule covers.
    pub fn signed_parts(&self) -> &[SignedPart] {
        if self.spec.algorithm == Algorithm::SharedSecret { &[] } else { &self.signed }
    }

    /// The headers the signature covers: `{header:NAME}` parts, and the id and timestamp headers when `{id}` and
    /// `{timestamp}` are signed.
    pub fn signed_header_names(&self) -> Vec<String> {
        self.signed_parts()
            .iter()
            .filter_map(|p| match p {
                SignedPart::Header(h) => Some(h.clone()),
                SignedPart::Id => self.id_header.clone(),
                SignedPart::Timestamp => self.timestamp_header.clone(),
                _ => None,
            })
            .collect()
    }

    /// The header that carries the signature (lower case).
    pub fn header(&self) -> &str {
        &self.header
    }

    fn content_of(
        &self,
        part: &SignedPart,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        timestamp: Option<&str>,
    ) -> Result<Vec<u8>, VerifyError> {
        let one = Self { signed: vec![part.clone()], ..self.clone() };
        Ok(one.content(headers, body, timestamp)?.concat())
    }

    /// Decodes one candidate signature; `None` when it is not valid in the rule's encoding.
    pub(super) fn decode(&self, value: &str) -> Option<Vec<u8>> {
        match self.spec.encoding {
            Encoding::Hex => hex::decode(value).ok(),
            Encoding::Base64 => STANDARD.decode(value).ok(),
            Encoding::Base64Url => URL_SAFE.decode(value).or_else(|_| URL_SAFE_NO_PAD.decode(value)).ok(),
        }
    }

    /// The headers a provider sends with `signature` (already encoded, or the secret itself), the timestamp text
    /// and the delivery id.
    pub(super) fn signed_headers(&self, signature: &str, timestamp: &str, msg_id: &str) -> Vec<(String, String)> {
        let spec = &self.spec;
        let value = match spec.split {
            Split::Plain => format!("{}{signature}", spec.prefix.as_deref().unwrap_or("")),
            Split::Pairs => {
                let sig = format!("{}={signature}", spec.signature_key.as_deref().unwrap_or_default());
                match &spec.timestamp_key {
                    Some(k) => format!("{k}={timestamp}{}{sig}", self.separator),
                    None => sig,
                }
            }
            Split::List => format!("{}{signature}", spec.item_prefix.as_deref().unwrap_or("")),
        };
        let mut out = vec![(self.header.clone(), value)];
        if let Some(h) = &self.timestamp_header {
            out.push((h.clone(), timestamp.to_owned()));
        }
        if let Some(h) = &self.id_header {
            out.push((h.clone(), msg_id.to_owned()));
        }
        out
    }

    /// The timestamp text a signer writes for `now_unix`.
    pub(super) fn timestamp_text(&self, now_unix: i64) -> Option<String> {
        (self.spec.timestamp_key.is_some() || self.spec.timestamp_header.is_some()).then(|| {
            match self.spec.timestamp_unit {
                TimeUnit::Seconds => now_unix.to_string(),
                TimeUnit::Milliseconds => (now_unix * 1000).to_string(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml_text: &str) -> SignatureSpec {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_rule_that_does_not_cover_the_body_or_lacks_its_timestamp_is_refused() {
        let no_body = spec("header = \"x-sig\"\nalgorithm = \"hmac-sha256\"\nsigned = \"{url}\"");
        assert_eq!(DeclaredScheme::new("t", no_body, None).unwrap_err().key, "signed");
        let no_ts = spec("header = \"x-sig\"\nalgorithm = \"hmac-sha256\"\nsigned = \"{timestamp}.{body}\"");
        assert_eq!(DeclaredScheme::new("t", no_ts, None).unwrap_err().key, "signed");
        let pairs = spec("header = \"x-sig\"\nsplit = \"pairs\"\nalgorithm = \"hmac-sha256\"");
        assert_eq!(DeclaredScheme::new("t", pairs, None).unwrap_err().key, "signature_key");
        let stray = spec("header = \"x-sig\"\nprefix = \"v1=\"\nsplit = \"list\"\nalgorithm = \"hmac-sha256\"");
        assert_eq!(DeclaredScheme::new("t", stray, None).unwrap_err().key, "prefix");
        let unknown = spec("header = \"x-sig\"\nalgorithm = \"hmac-sha256\"\nsigned = \"{nonce}{body}\"");
        assert!(DeclaredScheme::new("t", unknown, None).unwrap_err().reason.contains("unknown placeholder"));
    }
}
