//! Property tests: whatever the body, secret and clock, a delivery signed by
//! [`Verifier::sign`] verifies, and any single change to it does not.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use payhook_verify::signature::{Encoding, RequestParts, Scheme, Secret, Verifier, VerifyError};
use proptest::prelude::*;

use crate::{github_scheme, header, paystack_scheme, set_header, shopify_scheme};

const TOLERANCE: i64 = 300;

/// The scheme configurations under test; the three `Hmac` ones cover both
/// algorithms, both encodings and the optional prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stripe,
    Standard,
    /// Standard Webhooks with an Ed25519 (`whsk_`) key, signing `v1a`.
    StandardEd25519,
    Github,
    Paystack,
    Shopify,
    NamedGithub,
    NamedPaystack,
    NamedShopify,
}

impl Kind {
    fn scheme(self) -> Scheme {
        match self {
            Kind::Stripe => Scheme::Stripe,
            Kind::Standard | Kind::StandardEd25519 => Scheme::StandardWebhooks,
            Kind::Github => github_scheme(),
            Kind::Paystack => paystack_scheme(),
            Kind::Shopify => shopify_scheme(),
            Kind::NamedGithub => Scheme::Github,
            Kind::NamedPaystack => Scheme::Paystack,
            Kind::NamedShopify => Scheme::Shopify,
        }
    }

    fn timed(self) -> bool {
        matches!(self, Kind::Stripe | Kind::Standard | Kind::StandardEd25519)
    }

    fn signature_header(self) -> &'static str {
        match self {
            Kind::Stripe => "stripe-signature",
            Kind::Standard | Kind::StandardEd25519 => "webhook-signature",
            Kind::Github | Kind::NamedGithub => "x-hub-signature-256",
            Kind::Paystack | Kind::NamedPaystack => "x-paystack-signature",
            Kind::Shopify | Kind::NamedShopify => "x-shopify-hmac-sha256",
        }
    }

    /// Splits a signature header value into the text before the encoded MAC
    /// and the encoded MAC itself, plus the MAC's encoding.
    fn split_signature(self, value: &str) -> (&str, &str, Encoding) {
        let (cut, encoding) = match self {
            Kind::Stripe => (value.find(",v1=").expect("v1 entry") + 4, Encoding::Hex),
            Kind::Standard => (3, Encoding::Base64),
            Kind::StandardEd25519 => (4, Encoding::Base64),
            Kind::Github | Kind::NamedGithub => (7, Encoding::Hex),
            Kind::Paystack | Kind::NamedPaystack => (0, Encoding::Hex),
            Kind::Shopify | Kind::NamedShopify => (0, Encoding::Base64),
        };
        let (head, mac) = value.split_at(cut);
        (head, mac, encoding)
    }

    fn expected(self, now: i64, msg_id: &str, secret_index: usize) -> crate::Seen {
        crate::Seen {
            secret_index,
            delivery_id: matches!(
                self,
                Kind::Standard | Kind::StandardEd25519 | Kind::NamedGithub | Kind::NamedShopify
            )
            .then(|| msg_id.to_owned()),
            timestamp: self.timed().then_some(now),
            nonce: None,
        }
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Stripe),
        Just(Kind::Standard),
        Just(Kind::StandardEd25519),
        Just(Kind::Github),
        Just(Kind::Paystack),
        Just(Kind::Shopify),
        Just(Kind::NamedGithub),
        Just(Kind::NamedPaystack),
        Just(Kind::NamedShopify),
    ]
}

fn timed_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Stripe), Just(Kind::Standard), Just(Kind::StandardEd25519)]
}

/// A secret as a provider would hand it out for `kind`.
fn secret(kind: Kind) -> BoxedStrategy<String> {
    match kind {
        Kind::Standard => (proptest::collection::vec(any::<u8>(), 1..64), any::<bool>())
            .prop_map(|(key, prefixed)| {
                let b64 = STANDARD.encode(key);
                if prefixed { format!("whsec_{b64}") } else { b64 }
            })
            .boxed(),
        Kind::StandardEd25519 => {
            proptest::array::uniform32(any::<u8>()).prop_map(|seed| format!("whsk_{}", STANDARD.encode(seed))).boxed()
        }
        _ => "[ -~]{1,64}".boxed(),
    }
}

fn kind_and_secret() -> impl Strategy<Value = (Kind, String)> {
    kind().prop_flat_map(|k| (Just(k), secret(k)))
}

fn timed_kind_and_secret() -> impl Strategy<Value = (Kind, String)> {
    timed_kind().prop_flat_map(|k| (Just(k), secret(k)))
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..512)
}

fn now() -> impl Strategy<Value = i64> {
    1_000_000_000i64..4_000_000_000
}

fn msg_id() -> impl Strategy<Value = String> {
    "msg_[A-Za-z0-9]{1,27}"
}

fn build(kind: Kind, secrets: &[&String]) -> Verifier {
    let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(s.as_str())).collect();
    Verifier::new(kind.scheme(), &secrets, TOLERANCE as u64).expect("generated secrets are valid")
}

fn encode(encoding: Encoding, bytes: &[u8]) -> String {
    encoding.encode(bytes)
}

fn decode(encoding: Encoding, text: &str) -> Vec<u8> {
    match encoding {
        Encoding::Hex => hex::decode(text).expect("sign() emits valid hex"),
        Encoding::Base64 => STANDARD.decode(text).expect("sign() emits valid base64"),
        Encoding::Base64Url => {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).expect("sign() emits valid base64url")
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_signed_delivery_verifies_for_any_body_secret_and_clock_skew_within_tolerance(
        (kind, secret) in kind_and_secret(),
        body in body(),
        now in now(),
        skew in -TOLERANCE..=TOLERANCE,
        msg_id in msg_id(),
    ) {
        let v = build(kind, &[&secret]);
        let headers = v.sign(&body, now, &msg_id);
        prop_assert_eq!(
            crate::seen(v.verify(&headers[..], &body, now + skew)),
            Ok(kind.expected(now, &msg_id, 0))
        );
    }

    #[test]
    fn flipping_any_single_bit_of_the_body_is_a_mismatch(
        (kind, secret) in kind_and_secret(),
        mut body in proptest::collection::vec(any::<u8>(), 1..512),
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
        now in now(),
        msg_id in msg_id(),
    ) {
        let v = build(kind, &[&secret]);
        let headers = v.sign(&body, now, &msg_id);
        let i = position.index(body.len());
        body[i] ^= 1 << bit;
        prop_assert_eq!(v.verify(&headers[..], &body, now), Err(VerifyError::Mismatch));
    }

    #[test]
    fn changing_the_signed_timestamp_within_tolerance_is_a_mismatch(
        (kind, secret) in timed_kind_and_secret(),
        body in body(),
        now in now(),
        shift in prop_oneof![-TOLERANCE..=-1, 1..=TOLERANCE],
        msg_id in msg_id(),
    ) {
        let v = build(kind, &[&secret]);
        let mut headers = v.sign(&body, now, &msg_id);
        let forged = now + shift;
        match kind {
            Kind::Stripe => {
                let value = header(&headers, "stripe-signature")
                    .replacen(&format!("t={now},"), &format!("t={forged},"), 1);
                set_header(&mut headers, "stripe-signature", value);
            }
            _ => set_header(&mut headers, "webhook-timestamp", forged.to_string()),
        }
        prop_assert_eq!(v.verify(&headers[..], &body, now), Err(VerifyError::Mismatch));
    }

    #[test]
    fn flipping_any_single_bit_of_the_signature_is_a_mismatch(
        (kind, secret) in kind_and_secret(),
        body in body(),
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
        now in now(),
        msg_id in msg_id(),
    ) {
        let v = build(kind, &[&secret]);
        let mut headers = v.sign(&body, now, &msg_id);
        let name = kind.signature_header();
        let (head, mac, encoding) = kind.split_signature(header(&headers, name));
        let mut bytes = decode(encoding, mac);
        let i = position.index(bytes.len());
        bytes[i] ^= 1 << bit;
        let forged = format!("{head}{}", encode(encoding, &bytes));
        set_header(&mut headers, name, forged);
        prop_assert_eq!(v.verify(&headers[..], &body, now), Err(VerifyError::Mismatch));
    }

    #[test]
    fn replacing_any_single_character_of_the_signature_text_is_a_mismatch(
        (kind, secret) in kind_and_secret(),
        body in body(),
        position in any::<prop::sample::Index>(),
        replacement in any::<prop::sample::Index>(),
        now in now(),
        msg_id in msg_id(),
    ) {
        let v = build(kind, &[&secret]);
        let mut headers = v.sign(&body, now, &msg_id);
        let name = kind.signature_header();
        let (head, mac, encoding) = kind.split_signature(header(&headers, name));
        // Only characters that carry data; '=' padding is not one of them.
        let mut chars: Vec<char> = mac.chars().collect();
        let data_len = chars.iter().take_while(|c| **c != '=').count();
        let i = position.index(data_len);
        // Replace with a character that decodes to a different value (hex
        // digits are case-insensitive, so only one case is offered).
        let alphabet: Vec<char> = match encoding {
            Encoding::Hex => "0123456789abcdef".chars().collect(),
            Encoding::Base64 => {
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".chars().collect()
            }
            Encoding::Base64Url => {
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".chars().collect()
            }
        };
        let candidates: Vec<char> = alphabet
            .into_iter()
            .filter(|c| !c.eq_ignore_ascii_case(&chars[i]))
            .collect();
        chars[i] = candidates[replacement.index(candidates.len())];
        let forged = format!("{head}{}", chars.into_iter().collect::<String>());
        set_header(&mut headers, name, forged);
        prop_assert_eq!(v.verify(&headers[..], &body, now), Err(VerifyError::Mismatch));
    }

    #[test]
    fn during_rotation_the_secret_that_matched_is_reported_by_index(
        (kind, right, wrong) in kind().prop_flat_map(|k| (Just(k), secret(k), secret(k))),
        body in body(),
        now in now(),
        msg_id in msg_id(),
    ) {
        let signer = build(kind, &[&right]);
        let same_key = Verifier::new(kind.scheme(), &[Secret::new(wrong.as_str())], 300)
            .expect("valid")
            .sign(&body, now, &msg_id)
            == signer.sign(&body, now, &msg_id);
        // "whsec_X" and "X" are the same Standard Webhooks key.
        prop_assume!(!same_key);
        let headers = signer.sign(&body, now, &msg_id);
        prop_assert_eq!(
            crate::seen(build(kind, &[&wrong, &right]).verify(&headers[..], &body, now)),
            Ok(kind.expected(now, &msg_id, 1))
        );
        prop_assert_eq!(
            crate::seen(build(kind, &[&right, &wrong]).verify(&headers[..], &body, now)),
            Ok(kind.expected(now, &msg_id, 0))
        );
        prop_assert_eq!(
            build(kind, &[&wrong]).verify(&headers[..], &body, now),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn a_timestamp_beyond_tolerance_in_either_direction_is_stale_even_if_tampered(
        (kind, secret) in timed_kind_and_secret(),
        body in body(),
        signed_at in now(),
        excess in 1i64..1_000_000,
        future in any::<bool>(),
        tamper in any::<bool>(),
        msg_id in msg_id(),
    ) {
        let v = build(kind, &[&secret]);
        let headers = v.sign(&body, signed_at, &msg_id);
        let delta = if future { -(TOLERANCE + excess) } else { TOLERANCE + excess };
        let mut body = body;
        if tamper {
            body.push(b'!');
        }
        prop_assert_eq!(
            v.verify(&headers[..], &body, signed_at + delta),
            Err(VerifyError::Stale { delta_secs: delta, tolerance_secs: TOLERANCE as u64 })
        );
    }

    #[test]
    fn a_signed_adyen_notification_verifies_and_changing_any_signed_field_is_a_mismatch(
        fields in proptest::collection::vec("[ -~]{0,24}", 8),
        which in 0usize..8,
        extra in "[a-z]{1,4}",
        key in proptest::array::uniform32(any::<u8>()),
    ) {
        let fields: [&str; 8] = std::array::from_fn(|i| fields[i].as_str());
        let v = Verifier::new(Scheme::Adyen, &[Secret::new(hex::encode(key))], 300).expect("hex key");
        let body = v.adyen_sign_body(&crate::adyen::notification(&[crate::adyen::item(fields)])).expect("signable");
        prop_assert!(v.verify(&[("content-type", "application/json")], &body, 0).is_ok());
        let mut doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let item = &mut doc["notificationItems"][0]["NotificationRequestItem"];
        let slot = match which {
            0 => &mut item["pspReference"],
            1 => &mut item["originalReference"],
            2 => &mut item["merchantAccountCode"],
            3 => &mut item["merchantReference"],
            4 => &mut item["amount"]["value"],
            5 => &mut item["amount"]["currency"],
            6 => &mut item["eventCode"],
            _ => &mut item["success"],
        };
        let changed = match &*slot {
            serde_json::Value::Null => extra.clone(),
            serde_json::Value::String(s) => format!("{s}{extra}"),
            other => format!("{other}{extra}"),
        };
        *slot = serde_json::Value::String(changed);
        let forged = doc.to_string();
        prop_assert_eq!(v.verify(&[("content-type", "application/json")], forged.as_bytes(), 0), Err(VerifyError::Mismatch));
    }

    #[test]
    fn flipping_any_single_bit_of_an_adyen_item_signature_is_a_mismatch(
        position in 0usize..32,
        bit in 0u8..8,
        key in proptest::array::uniform32(any::<u8>()),
    ) {
        let v = Verifier::new(Scheme::Adyen, &[Secret::new(hex::encode(key))], 300).expect("hex key");
        let fields = ["psp", "", "Merchant", "ref", "100", "EUR", "AUTHORISATION", "true"];
        let body = v.adyen_sign_body(&crate::adyen::notification(&[crate::adyen::item(fields)])).expect("signable");
        let mut doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let slot = &mut doc["notificationItems"][0]["NotificationRequestItem"]["additionalData"]["hmacSignature"];
        let mut bytes = STANDARD.decode(slot.as_str().unwrap()).unwrap();
        bytes[position] ^= 1 << bit;
        *slot = serde_json::Value::String(STANDARD.encode(bytes));
        prop_assert_eq!(v.verify(&[("x", "y")], doc.to_string().as_bytes(), 0), Err(VerifyError::Mismatch));
    }

    #[test]
    fn a_signed_http_request_verifies_and_any_bit_flip_of_body_or_signature_fails(
        key in proptest::collection::vec(any::<u8>(), 1..64),
        ed25519 in any::<bool>(),
        seed in proptest::array::uniform32(any::<u8>()),
        body in proptest::collection::vec(any::<u8>(), 1..256),
        now in now(),
        skew in -TOLERANCE..=TOLERANCE,
        nonce in proptest::option::of("[A-Za-z0-9_]{1,20}"),
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let secret = if ed25519 {
            format!("ed25519-private:k1:{}", STANDARD.encode(seed))
        } else {
            format!("hmac-sha256:k1:{}", STANDARD.encode(&key))
        };
        let v = Verifier::new(Scheme::HttpMessageSignatures, &[Secret::new(secret)], TOLERANCE as u64).expect("valid");
        let base = [("content-type", "application/json")];
        let parts = RequestParts {
            method: "POST", scheme: "https", authority: "hooks.example.com", path: "/in", query: None, headers: &base,
        };
        let added = v.sign_request(&parts, &body, now, nonce.as_deref());
        let mut owned: Vec<(&str, &str)> = base.to_vec();
        owned.extend(added.iter().map(|(k, x)| (k.as_str(), x.as_str())));
        let request = RequestParts { headers: &owned, ..parts };
        let verified = v.verify(&request, &body, now + skew);
        prop_assert_eq!(verified.as_ref().map(|ok| (ok.timestamp(), ok.nonce().map(|n| n.value.clone()))),
            Ok((Some(now), nonce.clone())));

        let mut flipped = body.clone();
        let i = position.index(flipped.len());
        flipped[i] ^= 1 << bit;
        prop_assert_eq!(v.verify(&request, &flipped, now), Err(VerifyError::DigestMismatch));

        let signature = header(&added, "signature");
        let mut bytes = STANDARD.decode(&signature[6..signature.len() - 1]).expect("base64 signature");
        let j = position.index(bytes.len());
        bytes[j] ^= 1 << bit;
        let forged = format!("sig1=:{}:", STANDARD.encode(&bytes));
        let mut tampered = owned.clone();
        for entry in &mut tampered {
            if entry.0.eq_ignore_ascii_case("signature") {
                entry.1 = &forged;
            }
        }
        let request = RequestParts { headers: &tampered, ..parts };
        prop_assert_eq!(v.verify(&request, &body, now), Err(VerifyError::Mismatch));
    }

    #[test]
    fn a_request_signed_for_any_required_components_verifies_and_the_defaults_alone_fall_short_of_them(
        key in proptest::collection::vec(any::<u8>(), 1..64),
        extra in proptest::sample::subsequence(
            vec!["@query", "@scheme", "@target-uri", "@request-target", "date", "x-shop-id"], 0..=6),
        body in proptest::collection::vec(any::<u8>(), 1..128),
        now in now(),
    ) {
        let secret = Secret::new(format!("hmac-sha256:k1:{}", STANDARD.encode(&key)));
        let mut required = vec!["content-digest", "@method", "@authority", "@path"];
        required.extend(extra.iter().copied());
        let strict = Verifier::new(Scheme::HttpMessageSignatures, std::slice::from_ref(&secret), TOLERANCE as u64)
            .expect("valid")
            .with_required_components(&required)
            .expect("well-formed");
        let base = [("date", "Tue, 20 Apr 2021 02:07:55 GMT"), ("x-shop-id", "shop_1")];
        let parts = RequestParts {
            method: "POST", scheme: "https", authority: "hooks.example.com", path: "/in", query: Some("a=1"),
            headers: &base,
        };
        let with = |added: &[(String, String)]| -> Vec<(String, String)> {
            base.iter().map(|(k, x)| ((*k).to_owned(), (*x).to_owned())).chain(added.iter().cloned()).collect()
        };
        let signed = with(&strict.sign_request(&parts, &body, now, None));
        let borrowed: Vec<(&str, &str)> = signed.iter().map(|(k, x)| (k.as_str(), x.as_str())).collect();
        let outcome = strict.verify(&RequestParts { headers: &borrowed, ..parts }, &body, now);
        prop_assert!(outcome.is_ok(), "{:?}", outcome);

        let by_default = Verifier::new(Scheme::HttpMessageSignatures, &[secret], TOLERANCE as u64).expect("valid");
        let signed = with(&by_default.sign_request(&parts, &body, now, None));
        let borrowed: Vec<(&str, &str)> = signed.iter().map(|(k, x)| (k.as_str(), x.as_str())).collect();
        let outcome = strict.verify(&RequestParts { headers: &borrowed, ..parts }, &body, now);
        if extra.is_empty() {
            prop_assert!(outcome.is_ok(), "{:?}", outcome);
        } else {
            let missing: Vec<String> = extra.iter().map(|c| (*c).to_owned()).collect();
            prop_assert_eq!(outcome, Err(VerifyError::InsufficientCoverage { missing }));
        }
    }
}
