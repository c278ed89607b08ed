//! The crate's front door: `Webhook` built from a provider's name or a scheme, `verify` giving a `Delivery` or an
//! `Error` with its status and JSON body.

use payhook_verify::event::{Effect, OrderAction};
use payhook_verify::format::Format;
use payhook_verify::signature::{Encoding, HmacAlgorithm, Scheme};
use payhook_verify::{ConfigError, Error, Secret, Webhook};

const NOW: i64 = 1_767_225_600;
const URL: &str = "https://shop.example/webhooks/stripe";

fn stripe() -> Webhook {
    Webhook::preset("stripe", ["whsec_test_secret"]).expect("a valid secret")
}

#[test]
fn a_stripe_payment_verifies_and_reads_as_its_order_amount_and_keys() {
    let stripe = stripe();
    let sent = stripe.example("pay", "ord_1", URL, NOW).expect("stripe has a payment");
    let delivery = stripe.verify_at("POST", &sent.target, &sent.headers, &sent.body, NOW).expect("verifies");
    let event = delivery.event();
    assert_eq!(event.event_type, "payment_intent.succeeded");
    assert_eq!(event.order_id().map(|o| o.as_str()), Some("ord_1"));
    assert_eq!(event.money().map(|m| (m.amount_minor, m.currency.as_str())), Some((1999, "usd")));
    assert!(matches!(event.effect, Effect::Order { action: OrderAction::Pay, .. }));
    assert!(event.business_key.starts_with("payment_intent.succeeded:"));
    assert_eq!(delivery.verified().secret_index(), 0);
    assert_eq!(delivery.events().count(), 1);
}

#[test]
fn a_changed_body_is_refused_with_401_and_a_json_body_naming_the_mismatch() {
    let stripe = stripe();
    let sent = stripe.example("pay", "ord_1", URL, NOW).expect("stripe has a payment");
    let mut body = sent.body.clone();
    body.extend_from_slice(b" ");
    let refused = stripe.verify_at("POST", &sent.target, &sent.headers, &body, NOW).expect_err("forged");
    assert!(matches!(refused, Error::Signature(_)));
    assert_eq!((refused.status(), refused.code()), (401, "mismatch"));
    let json: serde_json::Value = serde_json::from_str(&refused.json()).expect("JSON");
    assert_eq!(json["error"], "mismatch");
    assert!(json["message"].as_str().is_some_and(|m| m.contains("no signature matches")), "{json}");
}

#[test]
fn a_delivery_outside_the_tolerance_is_refused_as_stale_either_way() {
    let stripe = Webhook::builder("stripe").expect("known").secret("whsec_test_secret").tolerance_secs(60).build();
    let stripe = stripe.expect("valid");
    let sent = stripe.example("pay", "ord_1", URL, NOW).expect("stripe has a payment");
    for now in [NOW + 61, NOW - 61] {
        let refused = stripe.verify_at("POST", &sent.target, &sent.headers, &sent.body, now).expect_err("stale");
        assert_eq!((refused.status(), refused.code()), (401, "stale"));
    }
    assert!(stripe.verify_at("POST", &sent.target, &sent.headers, &sent.body, NOW + 60).is_ok());
}

#[test]
fn a_secret_past_its_not_after_verifies_nothing_and_the_new_one_takes_over() {
    let old = Webhook::preset("stripe", ["whsec_old"]).expect("valid");
    let sent = old.example("pay", "ord_1", URL, NOW).expect("stripe has a payment");
    let rotating = Webhook::builder("stripe")
        .expect("known")
        .secret("whsec_new")
        .secret(Secret::new("whsec_old").with_not_after(NOW))
        .build()
        .expect("valid");
    let delivery = rotating.verify_at("POST", &sent.target, &sent.headers, &sent.body, NOW).expect("still valid");
    assert_eq!(delivery.verified().secret_index(), 1);
    let later = rotating.verify_at("POST", &sent.target, &sent.headers, &sent.body, NOW + 1).expect_err("retired");
    assert_eq!(later.code(), "mismatch");
}

#[test]
fn an_unknown_provider_is_refused_naming_the_known_ones() {
    let err = Webhook::preset("stripey", ["s"]).expect_err("unknown");
    assert!(matches!(err, ConfigError::UnknownProvider { .. }));
    let text = err.to_string();
    assert!(text.contains("stripe") && text.contains("paddle") && text.contains("standard-webhooks"), "{text}");
}

#[test]
fn a_webhook_without_a_secret_is_refused_when_built() {
    let err = Webhook::preset("paddle", Vec::<String>::new()).expect_err("no secret");
    assert!(matches!(err, ConfigError::Secret(_)), "{err}");
}

#[test]
fn a_format_reading_what_the_signature_leaves_out_is_refused_when_built() {
    // Adyen signs fields of each item, not the body: the generic format would read unsigned bytes.
    let err = Webhook::custom(Scheme::Adyen, Format::Generic)
        .secret("44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056")
        .build()
        .expect_err("unsigned body");
    assert!(err.to_string().contains("reads the body, which the adyen signature does not cover"), "{err}");
}

#[test]
fn an_adyen_notification_gives_one_event_per_item() {
    let adyen =
        Webhook::preset("adyen", ["44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"]).expect("valid");
    let sent = adyen.example("pay", "ord_1", "https://shop.example/webhooks/adyen", NOW).expect("example");
    let delivery = adyen.verify_at("POST", &sent.target, &sent.headers, &sent.body, NOW).expect("verifies");
    assert_eq!(delivery.event().event_type, "AUTHORISATION");
    assert_eq!(delivery.clone().into_events().len(), delivery.events().count());
}

#[test]
fn a_genuine_delivery_that_cannot_be_read_is_answered_422() {
    let custom = Webhook::custom(
        Scheme::Hmac {
            header: "x-signature".into(),
            algorithm: HmacAlgorithm::Sha256,
            encoding: Encoding::Hex,
            prefix: None,
        },
        Format::Generic,
    )
    .secret("shh")
    .build()
    .expect("valid");
    let sent = custom.sign(URL, br#"{"no":"id"}"#.to_vec(), NOW).expect("signs");
    let refused = custom.verify_at("POST", &sent.target, &sent.headers, &sent.body, NOW).expect_err("unreadable");
    assert_eq!((refused.status(), refused.code()), (422, "unreadable"));
}

#[test]
fn a_square_delivery_verifies_against_the_url_its_request_was_sent_to() {
    let square = Webhook::preset("square", ["square_signature_key"]).expect("valid");
    let sent = square.example("payment.updated", "ord_1", "https://shop.example/webhooks/square", NOW);
    let sent = sent.expect("example");
    // The Host header and the target make the URL Square signed (https unless X-Forwarded-Proto says http).
    assert!(square.verify_at("POST", &sent.target, &sent.headers, &sent.body, NOW).is_ok());
    let elsewhere = square.verify_at("POST", "/webhooks/other", &sent.headers, &sent.body, NOW);
    assert_eq!(elsewhere.expect_err("another URL").code(), "mismatch");
}

#[test]
fn an_http_message_signature_covers_the_method_and_target_it_was_verified_with() {
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let rfc9421 = Webhook::custom(Scheme::HttpMessageSignatures, Format::Generic)
        .secret(format!("hmac-sha256:test-key:{key}"))
        .build()
        .expect("valid");
    let body = br#"{"id":"evt_1","type":"payment.succeeded","created":1767225600,"data":{"order_id":"ord_1","amount":1999,"currency":"usd"}}"#;
    let sent = rfc9421.sign("https://shop.example/webhooks/acquirer", body.to_vec(), NOW).expect("signs");
    let delivery = rfc9421.verify_at("POST", &sent.target, &sent.headers, &sent.body, NOW).expect("verifies");
    assert!(delivery.nonce().is_some());
    let replayed = rfc9421.verify_at("PUT", &sent.target, &sent.headers, &sent.body, NOW);
    assert_eq!(replayed.expect_err("another method").code(), "mismatch");
}
