//! Braintree's webhook signature: the signature travels in the form body, next to the payload it covers.
//!
//! A notification is POSTed as `application/x-www-form-urlencoded` with two fields: `bt_payload`, the base64 of
//! the XML notification (possibly wrapped in lines ending in `\n`), and `bt_signature`, `PUBLIC_KEY|HEX` pairs
//! joined by `&` (several while keys rotate). `HEX` is the lowercase hex HMAC-SHA1 of `bt_payload` exactly as
//! received, keyed with the 20-byte SHA-1 digest of the private key. Braintree's own libraries also accept the
//! MAC of the payload followed by one `\n`, and so does payhook.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha1::Digest as _;

use super::mac::{KeyedMac, SIG_BUF_LEN, decode_signature};
use super::{Encoding, HmacAlgorithm, Key, Scheme, Verified, VerifyError};

/// Width of the base64 lines Braintree's Ruby gateway writes (Ruby's `Base64.encode64`).
const LINE_WIDTH: usize = 60;

/// A configured `PUBLIC_KEY:PRIVATE_KEY` pair: the public key names the pair in `bt_signature`, the private key's
/// SHA-1 digest keys the MAC.
#[derive(Clone)]
pub(super) struct BraintreeKey {
    public_key: String,
    mac: KeyedMac,
}

/// Decodes a `PUBLIC_KEY:PRIVATE_KEY` secret; the error is a reason without key material.
pub(super) fn parse_key(text: &str) -> Result<Key, &'static str> {
    let (public_key, private_key) =
        text.split_once(':').ok_or("expected PUBLIC_KEY:PRIVATE_KEY (Braintree's API key pair)")?;
    if public_key.is_empty() || private_key.is_empty() {
        return Err("expected PUBLIC_KEY:PRIVATE_KEY, both non-empty");
    }
    // These characters separate the pairs of `bt_signature`: a public key holding one could never be matched.
    if public_key.contains(['|', '&']) {
        return Err("the public key must not contain '|' or '&'");
    }
    let digest = sha1::Sha1::digest(private_key.as_bytes());
    let mac = KeyedMac::new(HmacAlgorithm::Sha1, &digest).map_err(|_| "unusable key length")?;
    Ok(Key::Braintree(BraintreeKey { public_key: public_key.to_owned(), mac }))
}

/// The two fields of a Braintree notification form, decoded.
struct Form {
    signature: String,
    payload: String,
}

/// Reads `bt_signature` and `bt_payload` from a form body; each must be there exactly once.
fn read_form(body: &[u8]) -> Result<Form, VerifyError> {
    let (mut signature, mut payload) = (None, None);
    for (name, value) in form_urlencoded::parse(body) {
        let slot = match name.as_ref() {
            "bt_signature" => &mut signature,
            "bt_payload" => &mut payload,
            _ => continue,
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(VerifyError::Malformed(format!("more than one {name} field")));
        }
    }
    let signature = signature.ok_or_else(|| VerifyError::Malformed("no bt_signature field in the form".into()))?;
    let payload = payload.ok_or_else(|| VerifyError::Malformed("no bt_payload field in the form".into()))?;
    Ok(Form { signature, payload })
}

/// The base64 of `notification` in lines of 60 characters, each ending in `\n`, as Braintree's Ruby gateway
/// writes `bt_payload`.
pub fn braintree_payload(notification: &[u8]) -> String {
    let encoded = STANDARD.encode(notification);
    let mut out = String::with_capacity(encoded.len() + encoded.len() / LINE_WIDTH + 1);
    for line in encoded.as_bytes().chunks(LINE_WIDTH) {
        // Base64 output is ASCII, so every chunk is text.
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out
}

impl super::Verifier {
    pub(super) fn verify_braintree(&self, body: &[u8]) -> Result<Verified, VerifyError> {
        let form = read_form(body)?;
        let payload = form.payload.as_bytes();
        if !payload.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'=' | b'/' | b'\n')) {
            return Err(VerifyError::Malformed("bt_payload holds characters outside base64 and newlines".into()));
        }
        // Pairs without a `|` are skipped, as Braintree's libraries skip them; for each configured key the first
        // pair naming its public key is the one checked.
        let pairs: Vec<(&str, &str)> = form
            .signature
            .split('&')
            .filter(|pair| pair.contains('|'))
            .map(|pair| {
                let mut parts = pair.split('|');
                (parts.next().unwrap_or_default(), parts.next().unwrap_or_default())
            })
            .collect();
        super::check_candidates(pairs.len(), "bt_signature pairs")?;
        let mut buf = [0u8; SIG_BUF_LEN];
        let secret_index = self
            .keys
            .iter()
            .position(|key| {
                let Key::Braintree(key) = key else { return false };
                let Some((_, signature)) = pairs.iter().find(|(public, _)| *public == key.public_key) else {
                    return false;
                };
                let Some(signature) = decode_signature(Encoding::Hex, signature, 20, &mut buf) else {
                    return false;
                };
                let as_sent = key.mac.compute(&[payload]).matches(signature);
                let with_newline = key.mac.compute(&[payload, b"\n"]).matches(signature);
                as_sent | with_newline
            })
            .ok_or(VerifyError::Mismatch)?;
        Ok(Verified { secret_index, delivery_id: None, timestamp: None, nonce: None })
    }

    /// The form body Braintree would POST for `body`, signed with the first configured key pair:
    /// `bt_signature=PUBLIC_KEY|HEX&bt_payload=…`, percent-encoded.
    ///
    /// `body` is either a form that already carries a `bt_payload` (such as [`Format::Braintree`]'s encoding;
    /// the payload is kept byte for byte and any `bt_signature` replaced) or the XML notification itself, which is
    /// base64-encoded by [`braintree_payload`]. Fails with [`VerifyError::Malformed`] when this verifier is not
    /// for [`Scheme::Braintree`].
    ///
    /// [`Format::Braintree`]: crate::format::Format::Braintree
    pub fn braintree_sign_body(&self, body: &[u8]) -> Result<Vec<u8>, VerifyError> {
        let (Scheme::Braintree, Some(Key::Braintree(key))) = (&self.scheme, self.keys.first()) else {
            return Err(VerifyError::Malformed("this verifier is not for Braintree".into()));
        };
        let from_form = form_urlencoded::parse(body).find(|(name, _)| name == "bt_payload").map(|(_, v)| v);
        let payload = match from_form {
            Some(payload) => payload.into_owned(),
            None => braintree_payload(body),
        };
        let mac = hex::encode(key.mac.compute(&[payload.as_bytes()]).into_bytes());
        let signature = format!("{}|{mac}", key.public_key);
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", &signature)
            .append_pair("bt_payload", &payload)
            .finish();
        Ok(form.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::{KeyError, Secret, Verifier};

    const KEYS: &str = "payhook_public_key:payhook_private_key";

    /// Three notifications signed by Braintree's Node SDK (3.40.0, checked with its `webhookNotification.parse`)
    /// with the public key `payhook_public_key` and the private key `payhook_private_key`: each payload is the
    /// base64 of an XML notification in 60-character lines, as Braintree's Ruby gateway writes them.
    const SIGNED: [(&str, &str); 3] = [
        (
            include_str!("../../tests/data/braintree/subscription_charged_successfully.payload"),
            "payhook_public_key|2caf3c4612101bd11f81195c22fd4ba58e0e5c3b",
        ),
        (
            include_str!("../../tests/data/braintree/dispute_opened.payload"),
            "payhook_public_key|bf7d2612ef325c6ddade9e8fc5d76ca12b6da181",
        ),
        (
            include_str!("../../tests/data/braintree/transaction_settled.payload"),
            "payhook_public_key|183e7777ded8c8a877940354962b4e837881e541",
        ),
    ];

    fn verifier(secrets: &[&str]) -> Verifier {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Verifier::new(Scheme::Braintree, &secrets, 300).expect("valid Braintree keys")
    }

    fn form(signature: &str, payload: &str) -> Vec<u8> {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", signature)
            .append_pair("bt_payload", payload)
            .finish()
            .into_bytes()
    }

    fn verify(v: &Verifier, body: &[u8]) -> Result<Verified, VerifyError> {
        let none: [(&str, &str); 0] = [];
        v.verify(&none, body, 0)
    }

    #[test]
    fn notifications_signed_by_braintree_verify_byte_for_byte() {
        for (payload, signature) in SIGNED {
            let verified = verify(&verifier(&[KEYS]), &form(signature, payload)).unwrap();
            assert_eq!(verified, Verified { secret_index: 0, delivery_id: None, timestamp: None, nonce: None });
        }
    }

    #[test]
    fn the_payload_without_its_final_newline_verifies_as_braintree_libraries_accept_it() {
        let (payload, signature) = SIGNED[2];
        let trimmed = payload.strip_suffix('\n').expect("ends in a newline");
        assert!(verify(&verifier(&[KEYS]), &form(signature, trimmed)).is_ok());
    }

    #[test]
    fn a_one_character_change_in_the_payload_or_the_signature_does_not_verify() {
        let (payload, signature) = SIGNED[2];
        let mut changed = payload.to_owned();
        changed.replace_range(10..11, if &payload[10..11] == "A" { "B" } else { "A" });
        assert_eq!(verify(&verifier(&[KEYS]), &form(signature, &changed)), Err(VerifyError::Mismatch));
        let changed = format!("{}0", &signature[..signature.len() - 1]);
        assert_eq!(verify(&verifier(&[KEYS]), &form(&changed, payload)), Err(VerifyError::Mismatch));
        let truncated = &signature[..signature.len() - 2];
        assert_eq!(verify(&verifier(&[KEYS]), &form(truncated, payload)), Err(VerifyError::Mismatch));
        let extra_newline = format!("{payload}\n");
        assert_eq!(verify(&verifier(&[KEYS]), &form(signature, &extra_newline)), Err(VerifyError::Mismatch));
    }

    #[test]
    fn another_private_key_or_an_unknown_public_key_does_not_verify() {
        let (payload, signature) = SIGNED[0];
        let body = form(signature, payload);
        assert_eq!(verify(&verifier(&["payhook_public_key:another_private_key"]), &body), Err(VerifyError::Mismatch));
        assert_eq!(verify(&verifier(&["other_public_key:payhook_private_key"]), &body), Err(VerifyError::Mismatch));
    }

    #[test]
    fn during_a_rotation_the_pair_of_each_configured_public_key_is_checked() {
        let (payload, signature) = SIGNED[1];
        let mac = signature.split_once('|').unwrap().1;
        let both = format!("old_public_key|{}&{signature}&no-bar", "0".repeat(40));
        let v = verifier(&["new_public_key:new_private_key", KEYS]);
        assert_eq!(verify(&v, &form(&both, payload)).unwrap().secret_index, 1);
        // The first pair naming a key is the one checked, as in Braintree's libraries.
        let shadowed = format!("payhook_public_key|{}&payhook_public_key|{mac}", "0".repeat(40));
        assert_eq!(verify(&verifier(&[KEYS]), &form(&shadowed, payload)), Err(VerifyError::Mismatch));
    }

    #[test]
    fn a_body_without_both_fields_or_with_a_foreign_payload_is_malformed() {
        let (payload, signature) = SIGNED[2];
        let v = verifier(&[KEYS]);
        for body in [
            b"bt_payload=abc".to_vec(),
            b"bt_signature=a%7Cb".to_vec(),
            b"{\"id\":\"evt_1\"}".to_vec(),
            form(signature, "PD94bWwg dmVy"),
            form(signature, "PD94bWwg\r\n"),
            [form(signature, payload), b"&bt_payload=QQ%3D%3D".to_vec()].concat(),
        ] {
            assert!(matches!(verify(&v, &body), Err(VerifyError::Malformed(_))), "{}", String::from_utf8_lossy(&body));
        }
        // A `+` sent unencoded is a space in a form, so it cannot be base64.
        let raw = format!("bt_signature={}&bt_payload=ab+c", signature.replace('|', "%7C"));
        assert!(matches!(verify(&v, raw.as_bytes()), Err(VerifyError::Malformed(_))));
    }

    #[test]
    fn what_it_signs_verifies_and_keeps_the_payload_as_it_was() {
        let v = verifier(&[KEYS]);
        let xml = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<notification>\n</notification>\n";
        let signed = v.braintree_sign_body(xml).unwrap();
        assert!(verify(&v, &signed).is_ok());
        let (payload, signature) = SIGNED[0];
        let unsigned = form_urlencoded::Serializer::new(String::new()).append_pair("bt_payload", payload).finish();
        let signed = v.braintree_sign_body(unsigned.as_bytes()).unwrap();
        assert_eq!(signed, form(signature, payload), "the SDK's own signature, in the same form");
        assert_eq!(v.sign(&signed, 0, "m"), Vec::new(), "nothing travels in headers");
        let other = Verifier::new(Scheme::Adyen, &[Secret::new("00ff")], 300).unwrap();
        assert!(other.braintree_sign_body(xml).is_err());
    }

    #[test]
    fn payloads_are_wrapped_as_braintree_writes_them() {
        let xml = include_str!("../../tests/data/braintree/transaction_settled.payload");
        let decoded = STANDARD.decode(xml.replace('\n', "")).unwrap();
        assert_eq!(braintree_payload(&decoded), xml);
    }

    #[test]
    fn secrets_are_a_public_and_a_private_key() {
        for bad in ["no-colon", ":sekrit", "public:", "pub|lic:sekrit", "pub&lic:sekrit"] {
            let err = Verifier::new(Scheme::Braintree, &[Secret::new(bad)], 300).unwrap_err();
            assert!(matches!(err, KeyError::Invalid { index: 0, .. }), "{bad}: {err}");
            assert!(!err.to_string().contains("sekrit"), "{err}");
        }
        assert!(Verifier::new(Scheme::Braintree, &[Secret::new("pub:priv:with:colons")], 300).is_ok());
        assert_eq!(Scheme::Braintree.name(), "braintree");
    }
}
