//! RFC 9421 HTTP message signatures and RFC 9530 `Content-Digest`, as pieces that can be used one at a time.
//!
//! [`Verifier::verify`](super::Verifier::verify) for
//! [`Scheme::HttpMessageSignatures`](super::Scheme::HttpMessageSignatures) combines them under payhook's policy;
//! the pieces are public so that a raw RFC example (which need not satisfy that policy) can be checked too:
//! [`parse_signature_input`], [`parse_signature`], [`signature_base`] and
//! [`Verifier::verify_http_signature`](super::Verifier::verify_http_signature).

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest as _, Sha256, Sha512};

use super::ed25519::Ed25519Key;
use super::key::LENIENT_BASE64;
use super::mac::KeyedMac;
use super::structured::{self, BareItem, Member, Parameters};
use super::{Headers, HmacAlgorithm, Key, VerifyError};

/// The derived components (RFC 9421 §2.2) that payhook can rebuild; others are refused as malformed.
pub const DERIVED_COMPONENTS: [&str; 7] =
    ["@method", "@authority", "@path", "@query", "@target-uri", "@scheme", "@request-target"];

/// The components a signature must cover unless its source says otherwise: the method, the authority and the path
/// tie it to one endpoint (a signature over the body alone could be replayed at another), and `content-digest`
/// ties it to the body.
pub const DEFAULT_REQUIRED_COMPONENTS: [&str; 4] = ["@method", "@authority", "@path", "content-digest"];

/// Why a list of required components was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComponentError {
    /// Neither a lowercase header field name nor one of [`DERIVED_COMPONENTS`].
    #[error(
        "{0:?} is neither a lowercase header field name nor a derived component payhook can rebuild (@method, \
         @authority, @path, @query, @target-uri, @scheme, @request-target)"
    )]
    Unknown(String),
    /// The same component is listed twice.
    #[error("{0:?} is listed twice")]
    Duplicate(String),
}

/// Checks one component name: a derived component payhook can rebuild, or a header field name (an RFC 9110 token)
/// in lowercase, as RFC 9421 §2.1 writes them.
pub fn check_component_name(name: &str) -> Result<(), ComponentError> {
    let header_name = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b));
    if DERIVED_COMPONENTS.contains(&name) || header_name {
        Ok(())
    } else {
        Err(ComponentError::Unknown(name.to_owned()))
    }
}

/// The parts of an HTTP request that derived components are computed from, plus its header fields: a small
/// [`Headers`] implementation for tests, `payhook send` and integrations that have the request at hand.
///
/// Values are used as given, so pass them normalized as RFC 9421 §2.2 says: `authority` in lowercase without a
/// default port, `path` as sent (an empty path is `/`), `query` without its leading `?`.
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    /// Request method, such as `POST` (case-sensitive).
    pub method: &'a str,
    /// URI scheme, `https` or `http`.
    pub scheme: &'a str,
    /// Host and non-default port, such as `example.com`.
    pub authority: &'a str,
    /// Absolute path, such as `/webhooks/payments`.
    pub path: &'a str,
    /// Query string without the leading `?`, or `None` when the target has none.
    pub query: Option<&'a str>,
    /// Header fields; lookups are case-insensitive and return the first match.
    pub headers: &'a [(&'a str, &'a str)],
}

impl Headers for RequestParts<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }

    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        let path = if self.path.is_empty() { "/" } else { self.path };
        let query = self.query.map(|q| format!("?{q}"));
        Some(match component {
            "@method" => Cow::Borrowed(self.method),
            "@authority" => Cow::Borrowed(self.authority),
            "@scheme" => Cow::Borrowed(self.scheme),
            "@path" => Cow::Borrowed(path),
            "@query" => Cow::Owned(query.unwrap_or_else(|| "?".to_owned())),
            "@target-uri" => {
                Cow::Owned(format!("{}://{}{path}{}", self.scheme, self.authority, query.unwrap_or_default()))
            }
            "@request-target" => Cow::Owned(format!("{path}{}", query.unwrap_or_default())),
            _ => return None,
        })
    }
}

/// One member of a `Signature-Input` dictionary: which components a signature covers and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureInput {
    label: String,
    components: Vec<String>,
    params: Parameters,
    serialized: String,
}

impl SignatureInput {
    /// The dictionary key naming this signature (such as `sig1`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Covered component identifiers in order (`@method`, `content-digest`, ...).
    pub fn components(&self) -> &[String] {
        &self.components
    }

    /// Whether `component` is covered.
    pub fn covers(&self, component: &str) -> bool {
        self.components.iter().any(|c| c == component)
    }

    fn integer(&self, key: &str) -> Option<i64> {
        self.params.iter().find(|(k, _)| k == key).and_then(|(_, v)| match v {
            BareItem::Integer(n) => Some(*n),
            _ => None,
        })
    }

    fn string(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == key).and_then(|(_, v)| match v {
            BareItem::String(s) => Some(s.as_str()),
            _ => None,
        })
    }

    /// `created`: when the signature was made, in unix seconds.
    pub fn created(&self) -> Option<i64> {
        self.integer("created")
    }

    /// `expires`: unix seconds after which the signature must not be accepted.
    pub fn expires(&self) -> Option<i64> {
        self.integer("expires")
    }

    /// `keyid`: which key made the signature.
    pub fn keyid(&self) -> Option<&str> {
        self.string("keyid")
    }

    /// `alg`: the algorithm the signer claims (`hmac-sha256`, `ed25519`, ...).
    pub fn alg(&self) -> Option<&str> {
        self.string("alg")
    }

    /// `nonce`: a value the signer promises never to reuse.
    pub fn nonce(&self) -> Option<&str> {
        self.string("nonce")
    }

    /// `tag`: an application-specific label.
    pub fn tag(&self) -> Option<&str> {
        self.string("tag")
    }

    /// The value of the `@signature-params` line: the inner list serialized with its parameters in the order
    /// received (RFC 9421 §2.3).
    pub fn signature_params(&self) -> &str {
        &self.serialized
    }
}

fn malformed(what: &str, why: &str) -> VerifyError {
    VerifyError::Malformed(format!("{what}: {why}"))
}

/// Parses a `Signature-Input` header: a dictionary of inner lists of component strings with parameters.
///
/// Components with parameters of their own (`;sf`, `;key`, `;req`, `;name`, ...), duplicate components,
/// uppercase field names and `@signature-params` are refused as malformed, because payhook cannot rebuild them.
pub fn parse_signature_input(header: &str) -> Result<Vec<SignatureInput>, VerifyError> {
    let dict = structured::parse_dictionary(header).map_err(|e| malformed("Signature-Input", e))?;
    if dict.is_empty() {
        return Err(malformed("Signature-Input", "no signature"));
    }
    dict.into_iter()
        .map(|(label, member)| {
            let Member::InnerList(items, params) = member else {
                return Err(malformed("Signature-Input", "a member is not an inner list"));
            };
            let mut components: Vec<String> = Vec::with_capacity(items.len());
            for (item, item_params) in &items {
                let BareItem::String(name) = item else {
                    return Err(malformed("Signature-Input", "a component is not a string"));
                };
                if !item_params.is_empty() {
                    return Err(malformed("Signature-Input", "component parameters are not supported"));
                }
                if name.is_empty() || name.bytes().any(|b| b.is_ascii_uppercase()) || name == "@signature-params" {
                    return Err(malformed("Signature-Input", "invalid component name"));
                }
                if components.contains(name) {
                    return Err(malformed("Signature-Input", "a component is covered twice"));
                }
                components.push(name.clone());
            }
            let serialized = structured::serialize_inner_list(&items, &params);
            Ok(SignatureInput { label, components, params, serialized })
        })
        .collect()
}

/// Parses a `Signature` header: a dictionary of byte sequences, returned as (label, signature bytes).
pub fn parse_signature(header: &str) -> Result<Vec<(String, Vec<u8>)>, VerifyError> {
    let dict = structured::parse_dictionary(header).map_err(|e| malformed("Signature", e))?;
    dict.into_iter()
        .map(|(label, member)| match member {
            Member::Item(BareItem::Bytes(bytes), _) => Ok((label, bytes)),
            _ => Err(malformed("Signature", "a member is not a byte sequence")),
        })
        .collect()
}

/// Builds the signature base of RFC 9421 §2.5 for `input` over `request`, byte for byte: one
/// `"name": value` line per covered component, then the `"@signature-params"` line, without a final newline.
///
/// Header fields are looked up by their (lowercase) name and trimmed; [`Headers::get`] returns only the first
/// field of a name, so a field sent on several lines is covered by its first line only (RFC 9421 would join them
/// with `", "`). Derived components come from [`Headers::derived`]. A covered component the request lacks is
/// [`VerifyError::MissingHeader`] (named like the component); a value containing a line break is malformed.
pub fn signature_base(input: &SignatureInput, request: &(impl Headers + ?Sized)) -> Result<String, VerifyError> {
    let mut base = String::with_capacity(256);
    for name in &input.components {
        let value: Cow<'_, str> = if name.starts_with('@') {
            if !DERIVED_COMPONENTS.contains(&name.as_str()) {
                return Err(malformed("Signature-Input", "unsupported derived component"));
            }
            request.derived(name).ok_or_else(|| VerifyError::MissingHeader(name.clone()))?
        } else {
            Cow::Borrowed(request.get(name).ok_or_else(|| VerifyError::MissingHeader(name.clone()))?.trim())
        };
        if value.contains(['\n', '\r']) {
            return Err(malformed(name, "a covered value contains a line break"));
        }
        structured::serialize_string(&mut base, name);
        base.push_str(": ");
        base.push_str(&value);
        base.push('\n');
    }
    base.push_str("\"@signature-params\": ");
    base.push_str(&input.serialized);
    Ok(base)
}

/// The `Content-Digest` value payhook sends: `sha-256=:<base64 SHA-256 of body>:` (RFC 9530).
pub fn content_digest(body: &[u8]) -> String {
    format!("sha-256=:{}:", STANDARD.encode(Sha256::digest(body)))
}

/// Checks a `Content-Digest` header (RFC 9530) against the body.
///
/// `sha-256` and `sha-512` are supported and other algorithms are ignored; at least one supported digest must be
/// present, and every supported one present must match ([`VerifyError::DigestMismatch`] otherwise). The body is
/// public, so the comparison need not be constant time.
pub fn check_content_digest(header: &str, body: &[u8]) -> Result<(), VerifyError> {
    let dict = structured::parse_dictionary(header).map_err(|e| malformed("Content-Digest", e))?;
    let mut checked = 0;
    for (algorithm, member) in &dict {
        let expected: Vec<u8> = match algorithm.as_str() {
            "sha-256" => Sha256::digest(body).to_vec(),
            "sha-512" => Sha512::digest(body).to_vec(),
            _ => continue,
        };
        let Member::Item(BareItem::Bytes(sent), _) = member else {
            return Err(malformed("Content-Digest", "a digest is not a byte sequence"));
        };
        if *sent != expected {
            return Err(VerifyError::DigestMismatch);
        }
        checked += 1;
    }
    if checked == 0 {
        return Err(malformed("Content-Digest", "no sha-256 or sha-512 digest"));
    }
    Ok(())
}

/// An RFC 9421 key.
#[derive(Clone)]
pub(super) enum HttpKey {
    /// `hmac-sha256`.
    Hmac(KeyedMac),
    /// `ed25519`.
    Ed25519(Ed25519Key),
}

impl HttpKey {
    /// The RFC 9421 algorithm name, as in the `alg` parameter.
    pub(super) fn alg(&self) -> &'static str {
        match self {
            Self::Hmac(_) => "hmac-sha256",
            Self::Ed25519(_) => "ed25519",
        }
    }

    pub(super) fn verify(&self, base: &[u8], signature: &[u8]) -> bool {
        match self {
            Self::Hmac(mac) => mac.compute(&[base]).matches(signature),
            Self::Ed25519(key) => key.verify(base, signature),
        }
    }

    pub(super) fn sign(&self, base: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Hmac(mac) => Some(mac.compute(&[base]).into_bytes()),
            Self::Ed25519(key) => key.sign(base).map(|sig| sig.to_vec()),
        }
    }
}

/// Decodes an RFC 9421 secret `<alg>:<keyid>:<base64 key>`.
pub(super) fn parse_http_key(text: &str) -> Result<Key, &'static str> {
    const SYNTAX: &str = "expected hmac-sha256:<keyid>:<base64>, ed25519:<keyid>:<base64> or ed25519-private:...";
    let (alg, rest) = text.split_once(':').ok_or(SYNTAX)?;
    let (keyid, b64) = rest.rsplit_once(':').ok_or(SYNTAX)?;
    if keyid.is_empty() || !keyid.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err("the keyid must be non-empty printable ASCII");
    }
    let bytes = LENIENT_BASE64.decode(b64).map_err(|_| "the key is not valid base64")?;
    let key = match alg {
        "hmac-sha256" if !bytes.is_empty() => {
            HttpKey::Hmac(KeyedMac::new(HmacAlgorithm::Sha256, &bytes).map_err(|_| "unusable key length")?)
        }
        "hmac-sha256" => return Err("the HMAC key is empty"),
        "ed25519" => HttpKey::Ed25519(Ed25519Key::from_public(&bytes)?),
        "ed25519-private" => {
            if bytes.len() != 32 {
                return Err("an ed25519-private key is a 32-byte seed");
            }
            HttpKey::Ed25519(Ed25519Key::from_private(&bytes)?)
        }
        _ => return Err(SYNTAX),
    };
    Ok(Key::Http { keyid: keyid.to_owned(), key })
}

/// Header fields on top of a request, for computing the signature base of a request being signed.
pub(super) struct WithHeaders<'r, 'e, R: ?Sized> {
    pub(super) request: &'r R,
    pub(super) extra: &'e [(&'e str, &'e str)],
}

impl<R: Headers + ?Sized> Headers for WithHeaders<'_, '_, R> {
    fn get(&self, name: &str) -> Option<&str> {
        self.extra
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .or_else(|| self.request.get(name))
    }

    fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
        self.request.derived(component)
    }
}

/// Whether a coverage check insists on `content-digest` beyond the required components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// payhook's policy: the body must be covered, whatever the required components say.
    Always,
    /// Only the required components (a raw RFC example checked on its own terms).
    AsRequired,
}

impl super::Verifier {
    /// [`VerifyError::InsufficientCoverage`] naming every required component (and, under payhook's policy,
    /// `content-digest`) that `input` leaves out.
    fn check_coverage(&self, input: &SignatureInput, body: Body) -> Result<(), VerifyError> {
        let mut missing: Vec<String> = self.required_components.iter().filter(|c| !input.covers(c)).cloned().collect();
        if body == Body::Always && !input.covers("content-digest") && !missing.iter().any(|c| c == "content-digest") {
            missing.push("content-digest".to_owned());
        }
        if missing.is_empty() { Ok(()) } else { Err(VerifyError::InsufficientCoverage { missing }) }
    }

    /// The configured RFC 9421 key called `keyid`, with its index among the secrets.
    fn http_key(&self, keyid: &str) -> Option<(usize, &HttpKey)> {
        self.keys.iter().enumerate().find_map(|(i, k)| k.http().filter(|(id, _)| *id == keyid).map(|(_, key)| (i, key)))
    }

    /// Verifies one RFC 9421 signature without payhook's policy (no digest, `created` or `expires` checks):
    /// selects the key by `keyid`, checks that an `alg` parameter (if any) names its algorithm, that the signature
    /// covers every [required component](super::Verifier::required_components), rebuilds the signature base from
    /// `request` and checks `signature` over it (HMAC in constant time, Ed25519 strictly).
    ///
    /// Returns the index of the matching secret. An unknown or absent keyid, a conflicting `alg` and a signature
    /// that does not verify are all [`VerifyError::Mismatch`]; a required component left out is
    /// [`VerifyError::InsufficientCoverage`] (so a verifier checking an example that covers less, such as RFC 9421
    /// B.2.5, is built with that example's components).
    pub fn verify_http_signature(
        &self,
        input: &SignatureInput,
        signature: &[u8],
        request: &(impl Headers + ?Sized),
    ) -> Result<usize, VerifyError> {
        let (index, key) = input.keyid().and_then(|id| self.http_key(id)).ok_or(VerifyError::Mismatch)?;
        if input.alg().is_some_and(|alg| alg != key.alg()) {
            return Err(VerifyError::Mismatch);
        }
        self.check_coverage(input, Body::AsRequired)?;
        let base = signature_base(input, request)?;
        if key.verify(base.as_bytes(), signature) { Ok(index) } else { Err(VerifyError::Mismatch) }
    }

    /// [`Scheme::HttpMessageSignatures`](super::Scheme::HttpMessageSignatures) under payhook's policy.
    pub(super) fn verify_http(
        &self,
        headers: &(impl Headers + ?Sized),
        body: &[u8],
        now_unix: i64,
    ) -> Result<super::Verified, VerifyError> {
        let input_header = headers.get("signature-input").ok_or_else(|| super::missing("signature-input"))?;
        let signature_header = headers.get("signature").ok_or_else(|| super::missing("signature"))?;
        let inputs = parse_signature_input(input_header)?;
        let signatures = parse_signature(signature_header)?;
        super::check_candidates(inputs.len(), "Signature-Input members")?;
        super::check_candidates(signatures.len(), "Signature members")?;
        let Some((input, keyid)) =
            inputs.iter().find_map(|i| i.keyid().filter(|id| self.http_key(id).is_some()).map(|id| (i, id)))
        else {
            return Err(VerifyError::Mismatch);
        };
        let signature = signatures
            .iter()
            .find(|(label, _)| label == input.label())
            .map(|(_, bytes)| bytes)
            .ok_or_else(|| malformed("Signature", "no signature for the selected Signature-Input label"))?;
        // Before anything costs more than a comparison: a signature that leaves out what this source requires, or
        // the body, is refused whatever else it says.
        self.check_coverage(input, Body::Always)?;
        let created = input.created().ok_or_else(|| malformed("Signature-Input", "no created parameter"))?;
        self.check_fresh(created, now_unix)?;
        if let Some(expires) = input.expires()
            && now_unix > expires
        {
            return Err(VerifyError::Stale { delta_secs: now_unix.saturating_sub(expires), tolerance_secs: 0 });
        }
        let secret_index = self.verify_http_signature(input, signature, headers)?;
        let digest = headers.get("content-digest").ok_or_else(|| super::missing("content-digest"))?;
        check_content_digest(digest, body)?;
        let window_end = created.saturating_add_unsigned(self.tolerance_secs);
        let nonce = input.nonce().map(|value| super::Nonce {
            keyid: keyid.to_owned(),
            value: value.to_owned(),
            expires_at: input.expires().map_or(window_end, |e| e.max(window_end)),
        });
        Ok(super::Verified { secret_index, delivery_id: None, timestamp: Some(created), nonce })
    }

    /// Signs a request for [`Scheme::HttpMessageSignatures`](super::Scheme::HttpMessageSignatures) with the first
    /// configured key that can sign (HMAC or `ed25519-private`), returning the headers to add:
    /// `Content-Digest` (SHA-256 of `body`), `Signature-Input` and `Signature`, under the label `sig1`.
    ///
    /// The signature covers `"@method" "@authority" "@path" "content-digest"`, then every other
    /// [required component](super::Verifier::required_components) of this verifier, then, when `parts` has one,
    /// `"content-type"`, with the parameters `created` (= `now_unix`), `keyid`, `alg` and, when given, `nonce`: what
    /// it signs, its own verifier accepts. Returns no headers when every configured key is verify-only, or when a
    /// required header field is not among `parts`' headers.
    pub fn sign_request(
        &self,
        parts: &RequestParts<'_>,
        body: &[u8],
        now_unix: i64,
        nonce: Option<&str>,
    ) -> Vec<(String, String)> {
        let Some((keyid, key)) = self
            .keys
            .iter()
            .filter_map(Key::http)
            .find(|(_, key)| matches!(key, HttpKey::Hmac(_)) || matches!(key, HttpKey::Ed25519(k) if k.can_sign()))
        else {
            return Vec::new();
        };
        let digest = content_digest(body);
        let mut components: Vec<&str> = DEFAULT_REQUIRED_COMPONENTS.to_vec();
        for name in &self.required_components {
            if !components.contains(&name.as_str()) {
                components.push(name);
            }
        }
        if parts.get("content-type").is_some() && !components.contains(&"content-type") {
            components.push("content-type");
        }
        let mut covered = String::from("(");
        for (i, name) in components.iter().enumerate() {
            if i > 0 {
                covered.push(' ');
            }
            structured::serialize_string(&mut covered, name);
        }
        covered.push_str(&format!(");created={now_unix};keyid="));
        structured::serialize_string(&mut covered, keyid);
        covered.push_str(&format!(";alg=\"{}\"", key.alg()));
        if let Some(nonce) = nonce {
            covered.push_str(";nonce=");
            structured::serialize_string(&mut covered, nonce);
        }
        let input_header = format!("sig1={covered}");
        let Ok(Some(input)) = parse_signature_input(&input_header).map(|mut list| list.pop()) else {
            return Vec::new();
        };
        let extra = [("content-digest", digest.as_str())];
        let request = WithHeaders { request: parts, extra: &extra };
        let Some(signature) = signature_base(&input, &request).ok().and_then(|base| key.sign(base.as_bytes())) else {
            return Vec::new();
        };
        vec![
            ("Content-Digest".to_owned(), digest),
            ("Signature-Input".to_owned(), input_header),
            ("Signature".to_owned(), format!("sig1=:{}:", STANDARD.encode(signature))),
        ]
    }
}
