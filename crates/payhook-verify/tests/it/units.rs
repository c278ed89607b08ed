//! Targeted behaviour: error kinds and their order, header aliases, rotation
//! in a single header, key validation and redaction.

use payhook_verify::signature::{Encoding, Headers, HmacAlgorithm, KeyError, Scheme, Secret, Verifier, VerifyError};

use crate::{github_scheme, header, set_header, shopify_scheme, verifier};

const STRIPE_SECRET: &str = "whsec_test_secret";
const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NOW: i64 = 1_700_000_000;
const BODY: &[u8] = br#"{"id":"evt_1","object":"event"}"#;

fn stripe() -> Verifier {
    verifier(Scheme::Stripe, &[STRIPE_SECRET])
}

fn standard() -> Verifier {
    verifier(Scheme::StandardWebhooks, &[SW_SECRET])
}

fn stripe_header(value: &str) -> Vec<(String, String)> {
    vec![("Stripe-Signature".to_owned(), value.to_owned())]
}

fn stripe_v1(v: &Verifier) -> String {
    let signed = v.sign(BODY, NOW, "");
    header(&signed, "stripe-signature").split_once(",v1=").expect("v1 entry").1.to_owned()
}

#[test]
fn sign_uses_each_providers_canonical_header_names() {
    let names = |v: &Verifier| -> Vec<String> { v.sign(BODY, NOW, "msg_1").into_iter().map(|(k, _)| k).collect() };
    assert_eq!(names(&stripe()), ["Stripe-Signature"]);
    assert_eq!(names(&standard()), ["webhook-id", "webhook-timestamp", "webhook-signature"]);
    assert_eq!(names(&verifier(github_scheme(), &["s"])), ["x-hub-signature-256"]);
}

#[test]
fn stripe_reports_an_absent_signature_header_as_missing_header() {
    let err = stripe().verify(&[("content-type", "application/json")], BODY, NOW);
    assert_eq!(err, Err(VerifyError::MissingHeader("stripe-signature".into())));
    assert_eq!(err.unwrap_err().code(), "missing_header");
}

#[test]
fn standard_webhooks_names_whichever_header_is_missing() {
    let full = standard().sign(BODY, NOW, "msg_1");
    for missing in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let partial: Vec<(String, String)> = full.iter().filter(|(k, _)| k != missing).cloned().collect();
        assert_eq!(
            standard().verify(&partial, BODY, NOW),
            Err(VerifyError::MissingHeader(missing.into())),
            "without {missing}"
        );
    }
}

#[test]
fn generic_hmac_reports_its_configured_header_as_missing() {
    let v = verifier(shopify_scheme(), &["shpss_x"]);
    assert_eq!(
        v.verify(&[("x-other", "abc")], BODY, 0),
        Err(VerifyError::MissingHeader("x-shopify-hmac-sha256".into()))
    );
}

#[test]
fn standard_webhooks_accepts_svix_header_names_in_any_case() {
    let signed = standard().sign(BODY, NOW, "msg_svix");
    let svix: Vec<(String, String)> =
        signed.into_iter().map(|(k, v)| (k.replace("webhook-", "Svix-").to_uppercase(), v)).collect();
    assert_eq!(
        crate::seen(standard().verify(&svix, BODY, NOW)),
        Ok(crate::Seen { secret_index: 0, delivery_id: Some("msg_svix".into()), timestamp: Some(NOW), nonce: None })
    );
}

#[test]
fn standard_webhooks_does_not_mix_svix_and_webhook_header_families() {
    let signed = standard().sign(BODY, NOW, "msg_1");
    let mixed = vec![
        ("svix-id".to_owned(), "msg_1".to_owned()),
        ("svix-timestamp".to_owned(), NOW.to_string()),
        ("webhook-signature".to_owned(), header(&signed, "webhook-signature").to_owned()),
    ];
    assert_eq!(standard().verify(&mixed, BODY, NOW), Err(VerifyError::MissingHeader("webhook-id".into())));
}

#[test]
fn stripe_accepts_a_second_v1_signature_during_rotation() {
    let good = stripe_v1(&stripe());
    let value = format!("t={NOW},v1={},v1={good},v0=abc", "0".repeat(64));
    assert_eq!(
        crate::seen(stripe().verify(&stripe_header(&value), BODY, NOW)),
        Ok(crate::Seen { secret_index: 0, delivery_id: None, timestamp: Some(NOW), nonce: None })
    );
}

#[test]
fn stripe_tolerates_whitespace_around_entries_and_uppercase_hex() {
    let good = stripe_v1(&stripe()).to_uppercase();
    let value = format!("t={NOW}, v1={good}");
    assert!(stripe().verify(&stripe_header(&value), BODY, NOW).is_ok());
}

#[test]
fn stripe_without_any_v1_entry_is_malformed_even_with_a_v0() {
    let value = format!("t={NOW},v0={}", "0".repeat(64));
    assert!(matches!(stripe().verify(&stripe_header(&value), BODY, NOW), Err(VerifyError::Malformed(_))));
}

#[test]
fn stripe_with_two_timestamps_is_malformed() {
    let good = stripe_v1(&stripe());
    let value = format!("t={NOW},t={},v1={good}", NOW + 1);
    assert!(matches!(stripe().verify(&stripe_header(&value), BODY, NOW), Err(VerifyError::Malformed(_))));
}

#[test]
fn a_truncated_or_extended_signature_never_verifies() {
    let good = stripe_v1(&stripe());
    for sig in [&good[..62], &good[..32], &format!("{good}00")[..], ""] {
        let value = format!("t={NOW},v1={sig}");
        assert_eq!(stripe().verify(&stripe_header(&value), BODY, NOW), Err(VerifyError::Mismatch), "v1={sig}");
    }
}

#[test]
fn timestamps_must_be_plain_ascii_digits() {
    let good = stripe_v1(&stripe());
    for t in [
        "",
        "+1700000000",
        "-1700000000",
        " 1700000000",
        "1700000000.0",
        "1_700_000_000",
        "１７００００００００",
        "99999999999999999999",
    ] {
        let value = format!("t={t},v1={good}");
        assert!(
            matches!(stripe().verify(&stripe_header(&value), BODY, NOW), Err(VerifyError::Malformed(_))),
            "t={t:?} must be malformed"
        );
    }
}

#[test]
fn a_timestamp_exactly_at_the_tolerance_is_accepted_in_both_directions() {
    let headers = stripe().sign(BODY, NOW, "");
    assert!(stripe().verify(&headers, BODY, NOW + 300).is_ok());
    assert!(stripe().verify(&headers, BODY, NOW - 300).is_ok());
    assert_eq!(
        stripe().verify(&headers, BODY, NOW + 301),
        Err(VerifyError::Stale { delta_secs: 301, tolerance_secs: 300 })
    );
}

#[test]
fn malformed_headers_are_reported_before_staleness() {
    let value = format!("t={NOW}");
    assert!(matches!(stripe().verify(&stripe_header(&value), BODY, NOW + 10_000), Err(VerifyError::Malformed(_))));
}

#[test]
fn standard_webhooks_ignores_v1a_entries_but_accepts_a_v1_next_to_them() {
    let mut headers = standard().sign(BODY, NOW, "msg_1");
    let good = header(&headers, "webhook-signature").to_owned();
    set_header(&mut headers, "webhook-signature", format!("v1a,AAAA  {good} v2,zzz"));
    assert!(standard().verify(&headers, BODY, NOW).is_ok());
    set_header(&mut headers, "webhook-signature", "v1a,AAAA".into());
    assert!(matches!(standard().verify(&headers, BODY, NOW), Err(VerifyError::Malformed(_))));
}

#[test]
fn standard_webhooks_treats_undecodable_v1_values_as_a_mismatch() {
    let mut headers = standard().sign(BODY, NOW, "msg_1");
    set_header(&mut headers, "webhook-signature", "v1,not*base64!".into());
    assert_eq!(standard().verify(&headers, BODY, NOW), Err(VerifyError::Mismatch));
}

#[test]
fn standard_webhooks_rejects_an_empty_message_id() {
    let mut headers = standard().sign(BODY, NOW, "msg_1");
    set_header(&mut headers, "webhook-id", String::new());
    assert!(matches!(standard().verify(&headers, BODY, NOW), Err(VerifyError::Malformed(_))));
}

#[test]
fn standard_webhooks_secrets_work_with_or_without_prefix_and_padding() {
    let headers = standard().sign(BODY, NOW, "msg_1");
    let bare = SW_SECRET.trim_start_matches("whsec_");
    assert!(verifier(Scheme::StandardWebhooks, &[bare]).verify(&headers, BODY, NOW).is_ok());
    // 5 bytes encode to "AQIDBAU=", accepted without its padding too.
    let padded = verifier(Scheme::StandardWebhooks, &["whsec_AQIDBAU="]);
    let unpadded = verifier(Scheme::StandardWebhooks, &["whsec_AQIDBAU"]);
    let headers = padded.sign(BODY, NOW, "msg_1");
    assert!(unpadded.verify(&headers, BODY, NOW).is_ok());
}

#[test]
fn github_signatures_without_the_sha256_prefix_are_malformed() {
    let v = verifier(github_scheme(), &["It's a Secret to Everybody"]);
    let signed = v.sign(b"Hello, World!", 0, "");
    let bare = header(&signed, "x-hub-signature-256").trim_start_matches("sha256=");
    assert!(matches!(v.verify(&[("X-Hub-Signature-256", bare)], b"Hello, World!", 0), Err(VerifyError::Malformed(_))));
}

#[test]
fn generic_hmac_ignores_the_clock() {
    let v = verifier(github_scheme(), &["secret"]);
    let headers = v.sign(BODY, 0, "");
    assert_eq!(
        crate::seen(v.verify(&headers, BODY, i64::MAX)),
        Ok(crate::Seen { secret_index: 0, delivery_id: None, timestamp: None, nonce: None })
    );
}

#[test]
fn secret_debug_output_is_redacted() {
    let secret = Secret::new("whsec_supersecret");
    assert_eq!(format!("{secret:?}"), "Secret([redacted])");
    assert_eq!(secret.expose(), "whsec_supersecret");
}

#[test]
fn verifier_debug_output_contains_no_key_material() {
    let cases = [
        (Scheme::Stripe, "whsec_Zm9vYmFyYmF6cXV4"),
        (Scheme::StandardWebhooks, "whsec_Zm9vYmFyYmF6cXV4"),
        (github_scheme(), "Zm9vYmFyYmF6cXV4"),
    ];
    for (scheme, secret) in cases {
        let debug = format!("{:?}", verifier(scheme, &[secret, "c2Vjb25kc2VjcmV0"]));
        assert!(debug.contains("secrets: 2"), "{debug}");
        for needle in ["Zm9v", "foobar", "666f6f", "c2Vjb25k", "secondsecret", "7365636f6e64"] {
            assert!(!debug.contains(needle), "{debug} leaks {needle}");
        }
    }
}

#[test]
fn verifier_new_rejects_an_empty_secret_list() {
    assert_eq!(Verifier::new(Scheme::Stripe, &[], 300).unwrap_err(), KeyError::Empty);
}

#[test]
fn verifier_new_rejects_an_invalid_base64_whsec_key_and_names_its_index() {
    let secrets = [Secret::new(SW_SECRET), Secret::new("whsec_not*base64!")];
    let err = Verifier::new(Scheme::StandardWebhooks, &secrets, 300).unwrap_err();
    assert!(matches!(err, KeyError::Invalid { index: 1, .. }), "{err:?}");
    assert!(!err.to_string().contains("not*base64"), "{err}");
}

#[test]
fn verifier_new_rejects_empty_secrets() {
    for scheme in [Scheme::Stripe, Scheme::StandardWebhooks, github_scheme()] {
        let err = Verifier::new(scheme.clone(), &[Secret::new("")], 300).unwrap_err();
        assert!(matches!(err, KeyError::Invalid { index: 0, .. }), "{scheme:?}: {err:?}");
    }
    let err = Verifier::new(Scheme::StandardWebhooks, &[Secret::new("whsec_")], 300).unwrap_err();
    assert!(matches!(err, KeyError::Invalid { index: 0, .. }), "{err:?}");
}

#[test]
fn error_codes_are_short_and_stable() {
    let codes: Vec<&str> = [
        VerifyError::MissingHeader("x".into()),
        VerifyError::Malformed("x".into()),
        VerifyError::Stale { delta_secs: 1, tolerance_secs: 0 },
        VerifyError::Mismatch,
    ]
    .iter()
    .map(VerifyError::code)
    .collect();
    assert_eq!(codes, ["missing_header", "malformed", "stale", "mismatch"]);
}

#[test]
fn header_lookup_is_case_insensitive_and_returns_the_first_match() {
    let owned = vec![("Content-Type".to_owned(), "a".to_owned()), ("content-type".to_owned(), "b".to_owned())];
    assert_eq!(Headers::get(owned.as_slice(), "content-type"), Some("a"));
    assert_eq!(Headers::get(&owned, "CONTENT-TYPE"), Some("a"));
    assert_eq!(Headers::get(&[("X-A", "1")], "x-a"), Some("1"));
    assert_eq!(Headers::get(&[("X-A", "1")], "x-b"), None);
}

#[test]
fn algorithm_and_encoding_use_lowercase_names_in_configuration() {
    assert_eq!(serde_json::to_string(&HmacAlgorithm::Sha512).unwrap(), "\"sha512\"");
    assert_eq!(serde_json::from_str::<Encoding>("\"base64\"").unwrap(), Encoding::Base64);
}
