//! Adyen: per-item HMACs over eight notification fields, keyed with a hex key.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use payhook_verify::signature::{KeyError, Scheme, Secret, Verifier, VerifyError, adyen_signing_string};
use serde_json::{Value, json};

use crate::verifier;

/// The key of Adyen's own library tests (also the shared vector's secret).
pub const KEY: &str = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00";
const OTHER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// A notification item carrying the eight signed fields in Adyen's order; `value` becomes a JSON number when it
/// is one, as Adyen sends it.
pub fn item(fields: [&str; 8]) -> Value {
    let [psp, original, merchant, reference, value, currency, event, success] = fields;
    let value: Value = value.parse::<i64>().map_or_else(|_| Value::String(value.to_owned()), Value::from);
    let mut item = json!({
        "pspReference": psp,
        "merchantAccountCode": merchant,
        "merchantReference": reference,
        "amount": { "value": value, "currency": currency },
        "eventCode": event,
        "success": success,
        "eventDate": "2024-01-01T00:00:00+01:00",
    });
    if !original.is_empty() {
        item["originalReference"] = original.into();
    }
    item
}

/// A notification body of the given items, unsigned.
pub fn notification(items: &[Value]) -> Vec<u8> {
    let wrapped: Vec<Value> = items.iter().map(|i| json!({ "NotificationRequestItem": i })).collect();
    serde_json::to_vec(&json!({ "live": "false", "notificationItems": wrapped })).unwrap()
}

fn signatures(body: &[u8]) -> Vec<String> {
    let doc: Value = serde_json::from_slice(body).unwrap();
    doc["notificationItems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["NotificationRequestItem"]["additionalData"]["hmacSignature"].as_str().unwrap().to_owned())
        .collect()
}

const FIELDS: [&str; 8] =
    ["7914073381342284", "", "TestMerchant", "TestPayment-1407325143704", "1130", "EUR", "AUTHORISATION", "true"];

fn adyen() -> Verifier {
    verifier(Scheme::Adyen, &[KEY])
}

#[test]
fn the_signing_string_joins_the_eight_fields_with_colons_and_blanks_missing_ones() {
    assert_eq!(
        adyen_signing_string(&item(FIELDS)),
        "7914073381342284::TestMerchant:TestPayment-1407325143704:1130:EUR:AUTHORISATION:true"
    );
    assert_eq!(adyen_signing_string(&json!({})), ":::::::");
    assert_eq!(adyen_signing_string(&json!({"success": false, "amount": {"value": 0}})), "::::0:::false");
}

#[test]
fn a_signed_notification_verifies_and_reports_no_delivery_id_or_timestamp() {
    let body = adyen().adyen_sign_body(&notification(&[item(FIELDS)])).unwrap();
    assert_eq!(
        crate::seen(adyen().verify(&[("content-type", "application/json")], &body, 0)),
        Ok(crate::Seen { secret_index: 0, delivery_id: None, timestamp: None, nonce: None })
    );
    assert_eq!(signatures(&body), ["Ny9gS2veKo5E4w8/OL6xz1/wvT/hYkAXy1xNc/QvO4I="]);
}

#[test]
fn every_item_must_verify_for_the_delivery_to_verify() {
    let mut second = FIELDS;
    second[0] = "8814073381342285";
    let body = adyen().adyen_sign_body(&notification(&[item(FIELDS), item(second)])).unwrap();
    assert!(adyen().verify(&[("x", "y")], &body, 0).is_ok());
    let tampered = String::from_utf8(body).unwrap().replace("8814073381342285", "8814073381342286");
    assert_eq!(adyen().verify(&[("x", "y")], tampered.as_bytes(), 0), Err(VerifyError::Mismatch));
}

#[test]
fn each_item_may_match_a_different_configured_secret() {
    let first = verifier(Scheme::Adyen, &[KEY]).adyen_sign_body(&notification(&[item(FIELDS)])).unwrap();
    let second = verifier(Scheme::Adyen, &[OTHER_KEY]).adyen_sign_body(&notification(&[item(FIELDS)])).unwrap();
    let a: Value = serde_json::from_slice(&first).unwrap();
    let b: Value = serde_json::from_slice(&second).unwrap();
    let mixed = json!({ "live": "false", "notificationItems": [a["notificationItems"][0], b["notificationItems"][0]] });
    let both = verifier(Scheme::Adyen, &[OTHER_KEY, KEY]);
    assert_eq!(
        crate::seen(both.verify(&[("x", "y")], mixed.to_string().as_bytes(), 0)),
        Ok(crate::Seen { secret_index: 1, delivery_id: None, timestamp: None, nonce: None })
    );
    assert_eq!(adyen().verify(&[("x", "y")], mixed.to_string().as_bytes(), 0), Err(VerifyError::Mismatch));
}

#[test]
fn a_body_that_is_not_an_adyen_notification_is_malformed() {
    let unsigned_item = notification(&[item(FIELDS)]);
    for body in [
        &b"not json"[..],
        br#"{"live":"false"}"#,
        br#"{"live":"false","notificationItems":[]}"#,
        br#"{"live":"false","notificationItems":{}}"#,
        br#"{"live":"false","notificationItems":[{"Other":{}}]}"#,
        &unsigned_item,
    ] {
        let outcome = adyen().verify(&[("x", "y")], body, 0);
        assert!(matches!(outcome, Err(VerifyError::Malformed(_))), "{}: {outcome:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn a_truncated_or_undecodable_item_signature_is_a_mismatch() {
    let body = adyen().adyen_sign_body(&notification(&[item(FIELDS)])).unwrap();
    let good = signatures(&body).remove(0);
    for bad in [&good[..40], "not*base64!", ""] {
        let forged = String::from_utf8(body.clone()).unwrap().replace(&good, bad);
        assert_eq!(adyen().verify(&[("x", "y")], forged.as_bytes(), 0), Err(VerifyError::Mismatch), "{bad}");
    }
}

#[test]
fn adyen_secrets_must_be_hex() {
    for bad in ["not hex at all", "ABC", "DFB1EB54858 95CFA"] {
        let err = Verifier::new(Scheme::Adyen, &[Secret::new(KEY), Secret::new(bad)], 300).unwrap_err();
        assert!(matches!(err, KeyError::Invalid { index: 1, .. }), "{bad}: {err:?}");
    }
}

#[test]
fn adyen_has_no_signature_headers_and_other_schemes_cannot_sign_a_notification_body() {
    assert!(adyen().sign(b"{}", 0, "msg").is_empty());
    let body = notification(&[item(FIELDS)]);
    assert!(matches!(verifier(Scheme::Stripe, &["whsec_x"]).adyen_sign_body(&body), Err(VerifyError::Malformed(_))));
}

#[test]
fn the_signature_is_the_base64_hmac_of_the_hex_decoded_key() {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&hex::decode(KEY).unwrap()).unwrap();
    mac.update(FIELDS.join(":").as_bytes());
    let body = adyen().adyen_sign_body(&notification(&[item(FIELDS)])).unwrap();
    assert_eq!(signatures(&body), [STANDARD.encode(mac.finalize().into_bytes())]);
}
