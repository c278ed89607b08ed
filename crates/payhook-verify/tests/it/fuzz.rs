//! Parsers fed arbitrary input: every header parser and payload format answers with a value or an error, never
//! a panic, whatever the bytes.

use payhook_verify::format::Format;
use payhook_verify::signature::{
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
    fn no_body_makes_a_format_panic(
        body in proptest::collection::vec(any::<u8>(), 0..512),
        topic in shopify_topic(), id in any::<String>(), at in timestamp(),
    ) {
        let headers = shopify_headers(&topic, &id, &at);
        for format in Format::ALL {
            let _ = format.parse(&body);
            if let Ok(events) = format.parse_delivery(&headers, &body) {
                prop_assert!(!events.is_empty());
            }
        }
    }

    #[test]
    fn no_json_document_makes_a_format_panic(
        id in any::<String>(), ty in event_type(),
        created in any::<i64>(), amount in any::<i64>(), currency in any::<String>(), order in any::<String>(),
        at in timestamp(), price in decimal(), success in prop_oneof![Just("true".to_owned()), Just("false".to_owned()), any::<String>()],
        topic in shopify_topic(),
    ) {
        let object = serde_json::json!({
            "id": id, "amount": amount, "currency": currency, "metadata": { "order_id": order },
            "client_reference_id": order, "charge": { "metadata": { "order_id": order } },
            "status": success, "customer": order, "invoice": id, "amount_paid": amount,
            "items": { "data": [{ "current_period_end": created }] },
        });
        let data = serde_json::json!({
            "id": id, "order_id": order, "amount": amount, "currency": currency, "reference": order,
            "transaction_reference": order, "subscription_code": id, "invoice_code": id, "status": success,
            "paid": true, "paid_at": at, "created_at": at, "updated_at": at, "next_payment_date": at,
            "subscription_id": id, "invoice_id": id, "customer_id": order,
            "customer": { "customer_code": order }, "subscription": { "subscription_code": id },
            "transaction": { "reference": order, "currency": currency, "amount": amount },
            "object": object,
        });
        let item = serde_json::json!({
            "eventCode": ty, "success": success, "pspReference": id, "merchantReference": order,
            "amount": { "value": amount, "currency": currency }, "eventDate": at,
        });
        let doc = serde_json::json!({
            "id": id, "type": ty, "event": ty, "created": created, "data": data,
            "order_id": order, "currency": currency, "current_total_price": price, "total_price": price,
            "updated_at": at,
            "transactions": [{ "kind": "refund", "status": "success", "amount": price, "currency": currency }],
            "notificationItems": [{ "NotificationRequestItem": item }],
        });
        let body = doc.to_string().into_bytes();
        let headers = shopify_headers(&topic, &id, &at);
        for format in Format::ALL {
            let _ = format.parse(&body);
            if let Ok(events) = format.parse_delivery(&headers, &body) {
                prop_assert!(!events.is_empty());
            }
        }
    }

    #[test]
    fn no_arbitrary_json_value_makes_a_format_panic(doc in json_value(), topic in shopify_topic(), at in timestamp()) {
        let body = doc.to_string().into_bytes();
        let headers = shopify_headers(&topic, "evt", &at);
        for format in Format::ALL {
            let _ = format.parse(&body);
            if let Ok(events) = format.parse_delivery(&headers, &body) {
                prop_assert!(!events.is_empty());
            }
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

/// Event types every format knows, and anything else.
fn event_type() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("payment.succeeded".to_owned()),
        Just("payment_intent.succeeded".to_owned()),
        Just("charge.dispute.created".to_owned()),
        Just("checkout.session.completed".to_owned()),
        Just("charge.refunded".to_owned()),
        Just("subscription.created".to_owned()),
        Just("subscription.deleted".to_owned()),
        Just("invoice.paid".to_owned()),
        Just("invoice.payment_failed".to_owned()),
        Just("customer.subscription.updated".to_owned()),
        Just("charge.success".to_owned()),
        Just("refund.processed".to_owned()),
        Just("charge.dispute.create".to_owned()),
        Just("subscription.create".to_owned()),
        Just("subscription.disable".to_owned()),
        Just("invoice.update".to_owned()),
        Just("AUTHORISATION".to_owned()),
        Just("REFUND".to_owned()),
        Just("CHARGEBACK".to_owned()),
        any::<String>(),
    ]
}

fn shopify_topic() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("orders/paid".to_owned()),
        Just("orders/cancelled".to_owned()),
        Just("refunds/create".to_owned()),
        Just("disputes/create".to_owned()),
        any::<String>(),
    ]
}

/// Timestamps near the accepted shape, so the cases reach deep into the date parser.
fn timestamp() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?(Z|[+-][0-9]{2}(:?[0-9]{2})?)?",
        any::<String>(),
    ]
}

/// Decimal-looking amounts, valid or not.
fn decimal() -> impl Strategy<Value = String> {
    prop_oneof!["[0-9]{0,22}(\\.[0-9]{0,6})?", "-?[0-9.,e+]{0,12}", any::<String>()]
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        event_type().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        let key = prop_oneof![
            Just("id".to_owned()),
            Just("type".to_owned()),
            Just("event".to_owned()),
            Just("data".to_owned()),
            Just("object".to_owned()),
            Just("created".to_owned()),
            Just("amount".to_owned()),
            Just("currency".to_owned()),
            Just("notificationItems".to_owned()),
            Just("NotificationRequestItem".to_owned()),
            Just("transactions".to_owned()),
            any::<String>(),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(key, inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn shopify_headers(topic: &str, id: &str, at: &str) -> Vec<(String, String)> {
    vec![
        ("x-shopify-topic".to_owned(), topic.to_owned()),
        ("x-shopify-event-id".to_owned(), id.to_owned()),
        ("x-shopify-triggered-at".to_owned(), at.to_owned()),
    ]
}
