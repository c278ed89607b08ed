//! Parsers fed arbitrary input: every header parser and payload format answers with a value or an error, never
//! a panic, whatever the bytes.

use payhook_core::format::Format;
use payhook_core::signature::{
    Encoding, HmacAlgorithm, RequestParts, Scheme, Secret, Verifier, check_content_digest, parse_signature,
    parse_signature_input, signature_base,
};
use proptest::prelude::*;

fn verifiers() -> Vec<Verifier> {
    let hmac = |algorithm, encoding, prefix: Option<&str>| Scheme::Hmac {
        header: "x-sig".into(),
        algorithm,
        encoding,
        prefix: prefix.map(str::to_owned),
    };
    [
        (Scheme::Stripe, "whsec_fuzz"),
        (Scheme::StandardWebhooks, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        (Scheme::StandardWebhooks, "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="),
        (Scheme::Github, "k"),
        (Scheme::Shopify, "k"),
        (hmac(HmacAlgorithm::Sha256, Encoding::Hex, Some("sha256=")), "k"),
        (hmac(HmacAlgorithm::Sha512, Encoding::Base64, None), "k"),
    ]
    .into_iter()
    .map(|(scheme, secret)| Verifier::new(scheme, &[Secret::new(secret)], 300).unwrap())
    .collect()
}

/// Header values built from the characters the parsers split on, so the cases reach deep into them.
fn header_value() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("t=".to_owned()),
            Just("v1=".to_owned()),
            Just("v1,".to_owned()),
            Just("v1a,".to_owned()),
            Just(",".to_owned()),
            Just(" ".to_owned()),
            Just("=".to_owned()),
            Just("sha256=".to_owned()),
            "[0-9]{1,12}",
            "[a-f0-9]{0,130}",
            "[A-Za-z0-9+/=]{0,90}",
            any::<String>(),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn no_signature_header_makes_a_verifier_panic(
        a in header_value(), b in header_value(), c in header_value(),
        body in proptest::collection::vec(any::<u8>(), 0..256),
        now in any::<i64>(),
    ) {
        for v in verifiers() {
            let headers = vec![
                ("stripe-signature".to_owned(), a.clone()),
                ("webhook-id".to_owned(), c.clone()),
                ("webhook-timestamp".to_owned(), b.clone()),
                ("webhook-signature".to_owned(), a.clone()),
                ("x-sig".to_owned(), a.clone()),
                ("x-hub-signature-256".to_owned(), a.clone()),
                ("x-shopify-hmac-sha256".to_owned(), b.clone()),
            ];
            // A random header never verifies (2^-256 aside); what matters is that it returns.
            prop_assert!(v.verify(&headers, &body, now).is_err());
        }
    }

    #[test]
    fn no_body_makes_a_format_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        for format in [Format::Generic, Format::Stripe] {
            let _ = format.parse(&body);
        }
    }

    #[test]
    fn no_json_document_makes_a_format_panic(
        id in any::<String>(), ty in prop_oneof![
            Just("payment.succeeded".to_owned()), Just("payment_intent.succeeded".to_owned()),
            Just("charge.dispute.created".to_owned()), Just("checkout.session.completed".to_owned()),
            any::<String>()],
        created in any::<i64>(), amount in any::<i64>(), currency in any::<String>(), order in any::<String>(),
    ) {
        let doc = serde_json::json!({
            "id": id, "type": ty, "created": created,
            "data": { "order_id": order, "amount": amount, "currency": currency,
                      "object": { "id": id, "amount": amount, "currency": currency, "metadata": { "order_id": order },
                                  "client_reference_id": order, "charge": { "metadata": { "order_id": order } } } },
        });
        for format in [Format::Generic, Format::Stripe] {
            let _ = format.parse(doc.to_string().as_bytes());
        }
    }

    #[test]
    fn no_adyen_like_body_makes_the_adyen_verifier_or_signer_panic(
        items in proptest::collection::vec(
            prop_oneof![
                Just(serde_json::json!(null)),
                Just(serde_json::json!({})),
                Just(serde_json::json!({"NotificationRequestItem": 5})),
                Just(serde_json::json!({"NotificationRequestItem": {"additionalData": 1}})),
                Just(serde_json::json!({"NotificationRequestItem": {"additionalData": {"hmacSignature": 7}}})),
                (any::<String>(), any::<i64>(), any::<bool>()).prop_map(|(s, n, b)| serde_json::json!({
                    "NotificationRequestItem": {"pspReference": s, "amount": {"value": n, "currency": [s]},
                        "success": b, "additionalData": {"hmacSignature": s}}})),
            ],
            0..4,
        ),
        raw in proptest::collection::vec(any::<u8>(), 0..128),
    ) {
        let v = Verifier::new(Scheme::Adyen, &[Secret::new("00ff")], 300).unwrap();
        let body = serde_json::json!({"notificationItems": items}).to_string();
        prop_assert!(v.verify(&[("x", "y")], body.as_bytes(), 0).is_err());
        let _ = v.adyen_sign_body(body.as_bytes());
        prop_assert!(v.verify(&[("x", "y")], &raw, 0).is_err());
        let _ = v.adyen_sign_body(&raw);
    }

    #[test]
    fn no_structured_field_header_makes_the_rfc_9421_parsers_or_verifier_panic(
        input in sf_value(), signature in sf_value(), digest in sf_value(),
        body in proptest::collection::vec(any::<u8>(), 0..64),
        now in any::<i64>(),
    ) {
        let _ = parse_signature_input(&input);
        let _ = parse_signature(&signature);
        let _ = check_content_digest(&digest, &body);
        let v = Verifier::new(Scheme::HttpMessageSignatures, &[Secret::new("hmac-sha256:k:a2V5")], 300).unwrap();
        let headers = [("signature-input", input.as_str()), ("signature", signature.as_str()),
            ("content-digest", digest.as_str()), ("content-type", "application/json")];
        let request = RequestParts {
            method: "POST", scheme: "https", authority: "h", path: "/", query: Some("a=b"), headers: &headers,
        };
        prop_assert!(v.verify(&request, &body, now).is_err());
        if let Ok(inputs) = parse_signature_input(&input) {
            for i in &inputs {
                let _ = signature_base(i, &request);
            }
        }
    }
}

/// Structured-field-like text built from the tokens the RFC 8941 parser branches on.
fn sf_value() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("sig1=".to_owned()),
            Just("(".to_owned()),
            Just(")".to_owned()),
            Just("\"".to_owned()),
            Just("\\".to_owned()),
            Just(";".to_owned()),
            Just(",".to_owned()),
            Just(" ".to_owned()),
            Just(":".to_owned()),
            Just("?1".to_owned()),
            Just("=".to_owned()),
            Just("\"@method\"".to_owned()),
            Just("\"content-digest\"".to_owned()),
            Just("keyid=\"k\"".to_owned()),
            Just("created=".to_owned()),
            Just("sha-256=".to_owned()),
            "-?[0-9]{1,18}(\\.[0-9]{0,4})?",
            "[A-Za-z0-9+/=]{0,60}",
            "[a-z*][a-z0-9_.*-]{0,8}",
            any::<String>(),
        ],
        0..16,
    )
    .prop_map(|parts| parts.concat())
}
