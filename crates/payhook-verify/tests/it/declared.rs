//! Every algorithm, encoding and key decoding a declared signature rule offers, each checked against a signature
//! computed here independently (RustCrypto's HMAC, ed25519-dalek) rather than by payhook's own signer, then
//! round-tripped through `sign_with`; a changed body, another key and a stale timestamp are refused.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::Signer as _;
use hmac::{Hmac, Mac};
use payhook_verify::signature::{DeclaredScheme, RequestContext, Scheme, Secret, SignatureSpec, Verifier, VerifyError};
use std::sync::Arc;

const BODY: &[u8] = br#"{"id":"ev_1","type":"payment.captured"}"#;
const NOW: i64 = 1_764_756_000;
const KEY: &[u8] = b"a-declared-rule-test-key-0123456789";

fn verifier(rule: &str, secret: &str) -> Verifier {
    let spec: SignatureSpec = toml::from_str(rule).expect("a rule");
    let scheme = DeclaredScheme::new("test", spec, None).expect("a usable rule");
    Verifier::new(Scheme::Declared(Arc::new(scheme)), &[Secret::new(secret)], 300).expect("a usable secret")
}

/// HMAC of `message` with RustCrypto's implementation of `$digest`.
macro_rules! hmac {
    ($digest:ty, $key:expr, $message:expr) => {{
        let mut mac = Hmac::<$digest>::new_from_slice($key).expect("any key length");
        mac.update($message);
        mac.finalize().into_bytes().to_vec()
    }};
}

/// Verifies `headers` (signed elsewhere) as valid, then checks what `sign_with` makes, a changed body, another key.
fn check(rule: &str, secret: &str, other: &str, headers: &[(&str, &str)]) {
    let v = verifier(rule, secret);
    let headers: Vec<(String, String)> = headers.iter().map(|(k, x)| ((*k).to_owned(), (*x).to_owned())).collect();
    v.verify(&headers, BODY, NOW).unwrap_or_else(|e| panic!("{rule}: {e}"));
    assert_eq!(v.verify(&headers, b"{\"id\":\"ev_2\"}", NOW).err(), Some(VerifyError::Mismatch), "{rule}");
    assert_eq!(verifier(rule, other).verify(&headers, BODY, NOW).err(), Some(VerifyError::Mismatch), "{rule}");
    let signed = v.sign_with(BODY, NOW, "msg_1", &RequestContext { url: None, headers: &[] });
    v.verify(&signed, BODY, NOW).unwrap_or_else(|e| panic!("{rule}: its own signature: {e}"));
}

#[test]
fn hmac_sha1_with_a_hex_key_in_hex() {
    let rule = "header = \"x-sig\"\nalgorithm = \"hmac-sha1\"\nencoding = \"hex\"\nkey = \"hex\"";
    let sig = hex::encode(hmac!(sha1::Sha1, KEY, BODY));
    check(rule, &hex::encode(KEY), &hex::encode(b"another key"), &[("x-sig", &sig)]);
}

#[test]
fn hmac_sha512_with_a_prefixed_base64_key_in_base64url_over_a_timestamp() {
    let rule = "header = \"x-sig\"\nsplit = \"pairs\"\nseparator = \";\"\ntimestamp_key = \"t\"\n\
                signature_key = \"s\"\nsigned = \"{timestamp}.{body}\"\nalgorithm = \"hmac-sha512\"\n\
                encoding = \"base64url\"\nkey = \"base64\"\nkey_prefix = \"sk_\"";
    let message = [NOW.to_string().as_bytes(), b".", BODY].concat();
    let sig = URL_SAFE_NO_PAD.encode(hmac!(sha2::Sha512, KEY, &message));
    let header = format!("t={NOW};s={sig}");
    check(
        rule,
        &format!("sk_{}", STANDARD.encode(KEY)),
        &format!("sk_{}", STANDARD.encode(b"other")),
        &[("x-sig", &header)],
    );
    // The signed timestamp must be within the tolerance.
    let v = verifier(rule, &format!("sk_{}", STANDARD.encode(KEY)));
    let err = v.verify(&[("x-sig", header.as_str())], BODY, NOW + 301).unwrap_err();
    assert!(matches!(err, VerifyError::Stale { .. }), "{err}");
}

#[test]
fn ed25519_over_an_id_and_a_timestamp_header_in_a_list() {
    let rule = "header = \"sig\"\nsplit = \"list\"\nitem_prefix = \"ed1=\"\nid_header = \"msg-id\"\n\
                timestamp_header = \"msg-ts\"\nsigned = \"{id}.{timestamp}.{body}\"\nalgorithm = \"ed25519\"\n\
                encoding = \"base64\"\nkey = \"base64\"";
    let signing = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
    let public = STANDARD.encode(signing.verifying_key().to_bytes());
    let keypair = STANDARD.encode([signing.to_bytes().as_slice(), signing.verifying_key().as_bytes()].concat());
    let message = [b"msg_1.".as_slice(), NOW.to_string().as_bytes(), b".", BODY].concat();
    let sig = format!("v0=ignored ed1={}", STANDARD.encode(signing.sign(&message).to_bytes()));
    let other = STANDARD.encode(ed25519_dalek::SigningKey::from_bytes(&[8u8; 32]).verifying_key().to_bytes());
    let ts = NOW.to_string();
    let headers = [("sig", sig.as_str()), ("msg-id", "msg_1"), ("msg-ts", ts.as_str())];
    // A public key verifies what the provider signed; it cannot sign, so the round trip uses the key pair.
    let v = verifier(rule, &public);
    let owned: Vec<(String, String)> = headers.iter().map(|(k, x)| ((*k).to_owned(), (*x).to_owned())).collect();
    v.verify(&owned, BODY, NOW).expect("the provider's signature");
    assert!(v.sign(BODY, NOW, "msg_1").is_empty(), "a public key signs nothing");
    check(rule, &keypair, &other, &headers);
    // The id is signed: another id is refused.
    let mut moved = owned.clone();
    moved[1].1 = "msg_2".into();
    assert_eq!(v.verify(&moved, BODY, NOW).err(), Some(VerifyError::Mismatch));
}

#[test]
fn a_shared_secret_is_compared_as_sent_and_says_nothing_of_the_body() {
    let rule = "header = \"verif-hash\"\nalgorithm = \"shared-secret\"";
    let v = verifier(rule, "my-secret-hash");
    assert!(v.verify(&[("verif-hash", "my-secret-hash")], BODY, NOW).is_ok());
    assert!(v.verify(&[("verif-hash", "my-secret-hash")], b"anything", NOW).is_ok(), "the body is not covered");
    assert_eq!(v.verify(&[("verif-hash", "my-secret-has")], BODY, NOW).err(), Some(VerifyError::Mismatch));
    assert_eq!(v.sign(BODY, NOW, "m"), vec![("verif-hash".to_owned(), "my-secret-hash".to_owned())]);
}

#[test]
fn a_plain_signature_with_a_prefix_over_the_url_and_a_json_field() {
    let rule = "header = \"x-sig\"\nprefix = \"sha256=\"\nsigned = \"{url}|{json:/id}|{header:x-tenant}|{body}\"\n\
                algorithm = \"hmac-sha256\"";
    let url = "https://shop.example/webhooks/acme?tenant=eu";
    let message = [format!("{url}|ev_1|eu-1|").as_bytes(), BODY].concat();
    let sig = format!("sha256={}", hex::encode(hmac!(sha2::Sha256, KEY, &message)));
    let v = verifier(rule, std::str::from_utf8(KEY).expect("ASCII"));
    let context_headers = vec![("x-tenant".to_owned(), "eu-1".to_owned())];
    let signed = v.sign_with(BODY, NOW, "m", &RequestContext { url: Some(url), headers: &context_headers });
    assert_eq!(signed, vec![("x-sig".to_owned(), sig.clone())], "sign_with covers the URL, the field and the header");
    // Without a prefix the header is malformed, not a mismatch.
    let bare = sig.trim_start_matches("sha256=").to_owned();
    let err = v.verify(&[("x-sig", bare.as_str()), ("x-tenant", "eu-1")], BODY, NOW).unwrap_err();
    assert!(matches!(err, VerifyError::Malformed(_)), "{err}");
}
