//! Standard Webhooks with Ed25519 keys: `whpk_` public keys verify `v1a` signatures, `whsk_` private keys sign
//! them, and a verifier may mix them with symmetric `whsec_` secrets.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use payhook_verify::signature::{KeyError, Scheme, Secret, Verifier, VerifyError};

use crate::{header, set_header, verifier};

const NOW: i64 = 1_700_000_000;
const BODY: &[u8] = br#"{"type":"payment.succeeded"}"#;
const SYMMETRIC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// RFC 8032 §7.1, test 1: a fixed seed and its public key.
const SEED_HEX: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const PUBLIC_HEX: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

fn b64_of_hex(h: &str) -> String {
    STANDARD.encode(hex::decode(h).expect("hex"))
}

fn whsk() -> String {
    format!("whsk_{}", b64_of_hex(SEED_HEX))
}

fn whpk() -> String {
    format!("whpk_{}", b64_of_hex(PUBLIC_HEX))
}

fn ok(secret_index: usize, id: &str) -> Result<crate::Seen, VerifyError> {
    Ok(crate::Seen { secret_index, delivery_id: Some(id.into()), timestamp: Some(NOW), nonce: None })
}

#[test]
fn a_private_key_signs_v1a_and_its_public_key_verifies_it() {
    let headers = verifier(Scheme::StandardWebhooks, &[&whsk()]).sign(BODY, NOW, "msg_1");
    let signature = header(&headers, "webhook-signature");
    assert!(signature.starts_with("v1a,") && signature.len() == 4 + 88, "{signature}");
    assert_eq!(crate::seen(verifier(Scheme::StandardWebhooks, &[&whpk()]).verify(&headers, BODY, NOW)), ok(0, "msg_1"));
    assert_eq!(crate::seen(verifier(Scheme::StandardWebhooks, &[&whsk()]).verify(&headers, BODY, NOW)), ok(0, "msg_1"));
}

#[test]
fn the_64_byte_private_key_form_with_its_public_half_is_accepted() {
    let long = format!("whsk_{}", STANDARD.encode(hex::decode(format!("{SEED_HEX}{PUBLIC_HEX}")).unwrap()));
    let headers = verifier(Scheme::StandardWebhooks, &[&long]).sign(BODY, NOW, "msg_1");
    assert_eq!(crate::seen(verifier(Scheme::StandardWebhooks, &[&whpk()]).verify(&headers, BODY, NOW)), ok(0, "msg_1"));
}

#[test]
fn malformed_ed25519_keys_are_rejected_when_the_verifier_is_built() {
    let wrong_public_half = format!("whsk_{}", STANDARD.encode([[1u8; 32], [2u8; 32]].concat()));
    for bad in [
        "whpk_".to_owned(),
        "whpk_not*base64".to_owned(),
        format!("whpk_{}", STANDARD.encode([9u8; 31])),
        format!("whsk_{}", STANDARD.encode([9u8; 33])),
        wrong_public_half,
    ] {
        let err = Verifier::new(Scheme::StandardWebhooks, &[Secret::new(SYMMETRIC), Secret::new(bad.as_str())], 300)
            .unwrap_err();
        assert!(matches!(err, KeyError::Invalid { index: 1, .. }), "{bad}: {err:?}");
    }
}

#[test]
fn a_mixed_verifier_matches_v1_to_symmetric_and_v1a_to_ed25519_secrets() {
    let mixed = verifier(Scheme::StandardWebhooks, &[SYMMETRIC, &whpk()]);
    let v1 = verifier(Scheme::StandardWebhooks, &[SYMMETRIC]).sign(BODY, NOW, "msg_1");
    let v1a = verifier(Scheme::StandardWebhooks, &[&whsk()]).sign(BODY, NOW, "msg_2");
    assert_eq!(crate::seen(mixed.verify(&v1, BODY, NOW)), ok(0, "msg_1"));
    assert_eq!(crate::seen(mixed.verify(&v1a, BODY, NOW)), ok(1, "msg_2"));
    // Both in one header, as a sender migrating to Ed25519 sends them.
    let mut both = v1a.clone();
    let combined = format!("{} {}", header(&v1a, "webhook-signature"), "v1,AAAA");
    set_header(&mut both, "webhook-signature", combined);
    assert_eq!(crate::seen(mixed.verify(&both, BODY, NOW)), ok(1, "msg_2"));
}

#[test]
fn a_signature_under_the_other_version_tag_never_matches() {
    let v1 = verifier(Scheme::StandardWebhooks, &[SYMMETRIC]).sign(BODY, NOW, "msg_1");
    let v1a = verifier(Scheme::StandardWebhooks, &[&whsk()]).sign(BODY, NOW, "msg_1");
    let mixed = verifier(Scheme::StandardWebhooks, &[SYMMETRIC, &whpk()]);
    let mut relabelled = v1.clone();
    set_header(&mut relabelled, "webhook-signature", header(&v1, "webhook-signature").replacen("v1,", "v1a,", 1));
    assert_eq!(mixed.verify(&relabelled, BODY, NOW), Err(VerifyError::Mismatch));
    let mut relabelled = v1a.clone();
    set_header(&mut relabelled, "webhook-signature", header(&v1a, "webhook-signature").replacen("v1a,", "v1,", 1));
    assert_eq!(mixed.verify(&relabelled, BODY, NOW), Err(VerifyError::Mismatch));
}

#[test]
fn a_header_with_only_versions_no_secret_can_check_is_malformed() {
    let v1a = verifier(Scheme::StandardWebhooks, &[&whsk()]).sign(BODY, NOW, "msg_1");
    let v1 = verifier(Scheme::StandardWebhooks, &[SYMMETRIC]).sign(BODY, NOW, "msg_1");
    let symmetric_only = verifier(Scheme::StandardWebhooks, &[SYMMETRIC]);
    let ed25519_only = verifier(Scheme::StandardWebhooks, &[&whpk()]);
    assert!(matches!(symmetric_only.verify(&v1a, BODY, NOW), Err(VerifyError::Malformed(_))));
    assert!(matches!(ed25519_only.verify(&v1, BODY, NOW), Err(VerifyError::Malformed(_))));
}

#[test]
fn v1a_signatures_obey_the_tolerance_and_the_svix_header_names() {
    let signed = verifier(Scheme::StandardWebhooks, &[&whsk()]).sign(BODY, NOW, "msg_svix");
    let v = verifier(Scheme::StandardWebhooks, &[&whpk()]);
    assert_eq!(v.verify(&signed, BODY, NOW + 301), Err(VerifyError::Stale { delta_secs: 301, tolerance_secs: 300 }));
    let svix: Vec<(String, String)> = signed.into_iter().map(|(k, v)| (k.replace("webhook-", "svix-"), v)).collect();
    assert_eq!(crate::seen(v.verify(&svix, BODY, NOW)), ok(0, "msg_svix"));
}

#[test]
fn a_verifier_of_public_keys_only_cannot_sign_and_says_so_with_no_headers() {
    assert!(verifier(Scheme::StandardWebhooks, &[&whpk()]).sign(BODY, NOW, "msg_1").is_empty());
    // With a signing-capable secret later in the list, that one signs.
    let signed = verifier(Scheme::StandardWebhooks, &[&whpk(), SYMMETRIC]).sign(BODY, NOW, "msg_1");
    assert!(header(&signed, "webhook-signature").starts_with("v1,"));
}

#[test]
fn ed25519_signing_is_deterministic_for_the_fixed_seed() {
    let a = verifier(Scheme::StandardWebhooks, &[&whsk()]).sign(BODY, NOW, "msg_1");
    let b = verifier(Scheme::StandardWebhooks, &[&whsk()]).sign(BODY, NOW, "msg_1");
    assert_eq!(a, b);
}
