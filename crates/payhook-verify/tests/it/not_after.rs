//! Secrets being rotated out: a secret with a `not_after` is accepted up to and including that second and refused
//! afterwards, by the same verifier, whatever the scheme; the other secrets are not affected.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use payhook_verify::signature::{RequestParts, Scheme, Secret, Verified, Verifier, VerifyError};

const BODY: &[u8] = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;
const NOT_AFTER: i64 = 1_800_000_000;

/// A verifier of `secrets`, each `(text, not_after)`.
fn rotating(scheme: Scheme, secrets: &[(&str, Option<i64>)]) -> Verifier {
    let secrets: Vec<Secret> = secrets
        .iter()
        .map(|(text, not_after)| match not_after {
            Some(t) => Secret::new(*text).with_not_after(*t),
            None => Secret::new(*text),
        })
        .collect();
    Verifier::new(scheme, &secrets, 300).expect("test secrets are valid")
}

/// Headers signed at `now` by a verifier holding `secret` alone.
fn signed_with(scheme: Scheme, secret: &str, now: i64) -> Vec<(String, String)> {
    rotating(scheme, &[(secret, None)]).sign(BODY, now, "msg_1")
}

fn index(r: Result<Verified, VerifyError>) -> Result<usize, VerifyError> {
    r.map(|v| v.secret_index())
}

#[test]
fn a_retiring_secret_is_accepted_until_its_not_after_and_refused_one_second_later() {
    let v = rotating(Scheme::Stripe, &[("whsec_new", None), ("whsec_old", Some(NOT_AFTER))]);
    for now in [NOT_AFTER - 60, NOT_AFTER] {
        let old = signed_with(Scheme::Stripe, "whsec_old", now);
        assert_eq!(index(v.verify(&old, BODY, now)), Ok(1), "at {now}");
    }
    let after = NOT_AFTER + 1;
    let old = signed_with(Scheme::Stripe, "whsec_old", after);
    assert_eq!(index(v.verify(&old, BODY, after)), Err(VerifyError::Mismatch));
    let new = signed_with(Scheme::Stripe, "whsec_new", after);
    assert_eq!(index(v.verify(&new, BODY, after)), Ok(0), "the new secret keeps its configured index");
}

#[test]
fn a_secret_listed_after_a_retired_one_keeps_its_index() {
    let v = rotating(Scheme::Stripe, &[("whsec_old", Some(NOT_AFTER)), ("whsec_new", None)]);
    let now = NOT_AFTER + 10;
    // Stripe signs with both secrets while it rotates: the retired one's v1 entry no longer counts.
    let old = signed_with(Scheme::Stripe, "whsec_old", now);
    let new = signed_with(Scheme::Stripe, "whsec_new", now);
    let both = format!("{},{}", old[0].1, new[0].1.split(',').nth(1).expect("a v1 entry"));
    let headers = vec![("Stripe-Signature".to_owned(), both)];
    assert_eq!(index(v.verify(&headers, BODY, now)), Ok(1));
    assert_eq!(index(v.verify(&old, BODY, now)), Err(VerifyError::Mismatch));
}

#[test]
fn with_every_secret_retired_nothing_verifies() {
    let v = rotating(Scheme::Github, &[("old", Some(NOT_AFTER))]);
    let headers = signed_with(Scheme::Github, "old", NOT_AFTER);
    assert_eq!(index(v.verify(&headers, BODY, NOT_AFTER)), Ok(0));
    assert_eq!(index(v.verify(&headers, BODY, NOT_AFTER + 1)), Err(VerifyError::Mismatch));
}

#[test]
fn a_retired_ed25519_key_no_longer_verifies_v1a_signatures() {
    let seed = STANDARD.encode([7u8; 32]);
    let (old, new) = (format!("whsk_{seed}"), "whsec_bmV3LXNlY3JldC1rZXk=");
    let v = rotating(Scheme::StandardWebhooks, &[(new, None), (&old, Some(NOT_AFTER))]);
    let at = |now| signed_with(Scheme::StandardWebhooks, &old, now);
    assert_eq!(index(v.verify(&at(NOT_AFTER), BODY, NOT_AFTER)), Ok(1));
    assert_eq!(index(v.verify(&at(NOT_AFTER + 1), BODY, NOT_AFTER + 1)), Err(VerifyError::Mismatch));
    let fresh = signed_with(Scheme::StandardWebhooks, new, NOT_AFTER + 1);
    assert_eq!(index(v.verify(&fresh, BODY, NOT_AFTER + 1)), Ok(0));
}

#[test]
fn a_retired_http_signature_key_is_no_longer_selected_by_its_keyid() {
    let (new, old) =
        ("hmac-sha256:key-2027:bmV3LWtleS1mb3ItdGVzdHM=", "hmac-sha256:key-2026:c2VjcmV0LWtleS1mb3ItdGVzdHM=");
    let v = rotating(Scheme::HttpMessageSignatures, &[(new, None), (old, Some(NOT_AFTER))]);
    let base = [("Content-Type", "application/json")];
    let parts = RequestParts {
        method: "POST",
        scheme: "https",
        authority: "h.example",
        path: "/w",
        query: None,
        headers: &base,
    };
    let signed = |secret: &str, now: i64| {
        let signer = rotating(Scheme::HttpMessageSignatures, &[(secret, None)]);
        let mut all: Vec<(String, String)> = base.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        all.extend(signer.sign_request(&parts, BODY, now, None));
        all
    };
    let check = |headers: &[(String, String)], now: i64| {
        let received: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        index(v.verify(&RequestParts { headers: &received, ..parts }, BODY, now))
    };
    assert_eq!(check(&signed(old, NOT_AFTER), NOT_AFTER), Ok(1));
    assert_eq!(check(&signed(old, NOT_AFTER + 1), NOT_AFTER + 1), Err(VerifyError::Mismatch));
    assert_eq!(check(&signed(new, NOT_AFTER + 1), NOT_AFTER + 1), Ok(0));
}

#[test]
fn a_secret_without_not_after_never_expires_and_debug_stays_redacted() {
    let v = rotating(Scheme::Stripe, &[("whsec_only", None)]);
    let far = 4_000_000_000;
    assert_eq!(index(v.verify(&signed_with(Scheme::Stripe, "whsec_only", far), BODY, far)), Ok(0));
    let secret = Secret::new("whsec_x").with_not_after(NOT_AFTER);
    assert_eq!(secret.not_after(), Some(NOT_AFTER));
    assert_eq!(format!("{secret:?}"), "Secret([redacted])");
}

#[test]
fn a_retired_secret_of_a_declared_rule_is_refused_like_any_other() {
    let preset = payhook_verify::preset::Preset::get("stripe").expect("a stripe preset").expect("it parses");
    let scheme = preset.scheme(None).expect("its rule compiles").expect("it has a rule");
    assert!(matches!(scheme, Scheme::Declared(_)));
    let v = rotating(scheme.clone(), &[("whsec_new", None), ("whsec_old", Some(NOT_AFTER))]);
    // Stripe's own code signs what the preset verifies.
    let old = |now| signed_with(Scheme::Stripe, "whsec_old", now);
    assert_eq!(index(v.verify(&old(NOT_AFTER), BODY, NOT_AFTER)), Ok(1));
    assert_eq!(index(v.verify(&old(NOT_AFTER + 1), BODY, NOT_AFTER + 1)), Err(VerifyError::Mismatch));
    let new = signed_with(Scheme::Stripe, "whsec_new", NOT_AFTER + 1);
    assert_eq!(index(v.verify(&new, BODY, NOT_AFTER + 1)), Ok(0));
}
