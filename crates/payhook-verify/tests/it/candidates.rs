//! Every scheme that takes a list of signatures tries at most `MAX_SIGNATURE_CANDIDATES` of them: that many, the
//! right one last, verify; one more is refused as malformed before any is tried.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use payhook_verify::signature::{
    DeclaredScheme, MAX_SIGNATURE_CANDIDATES, RequestContext, RequestParts, Scheme, SignatureSpec, Verifier,
    VerifyError,
};
use std::sync::Arc;

use crate::{header, set_header, verifier};

const NOW: i64 = 1_764_756_000;
const BODY: &[u8] = br#"{"id":"evt_1","type":"payment.succeeded"}"#;

/// `n` wrong signatures, each `bytes` long, written by `encode`, different from one another.
fn wrong(n: usize, bytes: usize, encode: impl Fn(&[u8]) -> String) -> Vec<String> {
    (0..n).map(|i| encode(&vec![u8::try_from(i % 251).unwrap_or(0) + 1; bytes])).collect()
}

/// Asserts that `headers_with(n)` (n - 1 wrong signatures, then the right one) verifies for n =
/// `MAX_SIGNATURE_CANDIDATES` and is malformed, naming the bound, for one more.
fn check(v: &Verifier, headers_with: impl Fn(usize) -> Vec<(String, String)>, body: &[u8]) {
    let at_bound = headers_with(MAX_SIGNATURE_CANDIDATES);
    v.verify(&at_bound, body, NOW).unwrap_or_else(|e| panic!("{at_bound:?}: {e}"));
    let over = headers_with(MAX_SIGNATURE_CANDIDATES + 1);
    match v.verify(&over, body, NOW) {
        Err(VerifyError::Malformed(why)) => {
            assert!(why.contains(&format!("more than {MAX_SIGNATURE_CANDIDATES}")), "{why}");
        }
        other => panic!("{} candidates: {other:?}", MAX_SIGNATURE_CANDIDATES + 1),
    }
}

#[test]
fn stripe_tries_at_most_the_bound_of_v1_entries() {
    let v = verifier(Scheme::Stripe, &["whsec_stripe_candidates"]);
    let signed = v.sign(BODY, NOW, "msg_1");
    let good = header(&signed, "stripe-signature").to_owned();
    check(
        &v,
        |n| {
            let mut value: String = wrong(n - 1, 32, |b| hex::encode(b)).iter().map(|s| format!("v1={s},")).collect();
            value.push_str(&good);
            vec![("Stripe-Signature".to_owned(), value)]
        },
        BODY,
    );
}

#[test]
fn standard_webhooks_tries_at_most_the_bound_of_listed_signatures() {
    let v = verifier(Scheme::StandardWebhooks, &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
    let signed = v.sign(BODY, NOW, "msg_1");
    let good = header(&signed, "webhook-signature").to_owned();
    check(
        &v,
        |n| {
            let mut headers = signed.clone();
            let mut list: Vec<String> = wrong(n - 1, 32, |b| format!("v1,{}", STANDARD.encode(b)));
            list.push(good.clone());
            set_header(&mut headers, "webhook-signature", list.join(" "));
            headers
        },
        BODY,
    );
}

fn declared(rule: &str, secret: &str) -> Verifier {
    let spec: SignatureSpec = toml::from_str(rule).expect("a rule");
    let scheme = DeclaredScheme::new("test", spec, None).expect("a usable rule");
    verifier(Scheme::Declared(Arc::new(scheme)), &[secret])
}

#[test]
fn a_declared_rule_of_pairs_tries_at_most_the_bound_of_signature_pairs() {
    let v = declared(
        "header = \"x-sig\"\nsplit = \"pairs\"\ntimestamp_key = \"t\"\nsignature_key = \"s\"\n\
         signed = \"{timestamp}.{body}\"\nalgorithm = \"hmac-sha256\"",
        "declared-pairs-key",
    );
    let signed = v.sign_with(BODY, NOW, "msg_1", &RequestContext { url: None, headers: &[] });
    let good = header(&signed, "x-sig").to_owned();
    check(
        &v,
        |n| {
            let wrong: String = wrong(n - 1, 32, |b| hex::encode(b)).iter().map(|s| format!(",s={s}")).collect();
            vec![("x-sig".to_owned(), format!("{good}{wrong}"))]
        },
        BODY,
    );
}

#[test]
fn a_declared_rule_of_a_list_tries_at_most_the_bound_of_listed_signatures() {
    let v = declared(
        "header = \"x-sig\"\nsplit = \"list\"\nitem_prefix = \"v1,\"\nalgorithm = \"hmac-sha256\"\n\
         encoding = \"base64\"",
        "declared-list-key",
    );
    let signed = v.sign_with(BODY, NOW, "msg_1", &RequestContext { url: None, headers: &[] });
    let good = header(&signed, "x-sig").to_owned();
    check(
        &v,
        |n| {
            let mut list = wrong(n - 1, 32, |b| format!("v1,{}", STANDARD.encode(b)));
            list.push(good.clone());
            vec![("x-sig".to_owned(), list.join(" "))]
        },
        BODY,
    );
}

#[test]
fn a_declared_shared_secret_in_a_list_is_looked_for_among_at_most_the_bound_of_items() {
    let v = declared("header = \"x-token\"\nsplit = \"list\"\nalgorithm = \"shared-secret\"", "the-shared-secret");
    check(
        &v,
        |n| {
            let mut list: Vec<String> = (1..n).map(|i| format!("not-it-{i}")).collect();
            list.push("the-shared-secret".to_owned());
            vec![("x-token".to_owned(), list.join(" "))]
        },
        BODY,
    );
}

/// A request to `/webhooks/payments` with `headers`.
fn parts<'a>(headers: &'a [(&'a str, &'a str)]) -> RequestParts<'a> {
    RequestParts {
        method: "POST",
        scheme: "https",
        authority: "hooks.example.com",
        path: "/webhooks/payments",
        query: None,
        headers,
    }
}

#[test]
fn http_message_signatures_take_at_most_the_bound_of_members() {
    let v = verifier(Scheme::HttpMessageSignatures, &["hmac-sha256:payments-2024:c2VjcmV0LWtleS1mb3ItdGVzdHM="]);
    let base = [("Content-Type", "application/json")];
    let signed = v.sign_request(&parts(&base), BODY, NOW, None);
    let (input, signature) = (header(&signed, "signature-input"), header(&signed, "signature"));
    let with = |n: usize| -> Vec<(String, String)> {
        // Members for keys this verifier does not have come first: the configured one is found last.
        let others: Vec<usize> = (1..n).collect();
        let inputs: Vec<String> =
            others.iter().map(|i| format!(r#"other{i}=("@method");created={NOW};keyid="other-{i}""#)).collect();
        let signatures: Vec<String> =
            others.iter().map(|i| format!("other{i}=:{}:", STANDARD.encode([0u8; 32]))).collect();
        let mut headers: Vec<(String, String)> = base.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        headers.push(("Content-Digest".to_owned(), header(&signed, "content-digest").to_owned()));
        headers.push(("Signature-Input".to_owned(), [inputs, vec![input.to_owned()]].concat().join(", ")));
        headers.push(("Signature".to_owned(), [signatures, vec![signature.to_owned()]].concat().join(", ")));
        headers
    };
    let verify = |n: usize| {
        let headers = with(n);
        let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        v.verify(&parts(&refs), BODY, NOW)
    };
    verify(MAX_SIGNATURE_CANDIDATES).unwrap_or_else(|e| panic!("{MAX_SIGNATURE_CANDIDATES} members: {e}"));
    match verify(MAX_SIGNATURE_CANDIDATES + 1) {
        Err(VerifyError::Malformed(why)) => assert!(why.contains("Signature-Input members"), "{why}"),
        other => panic!("{} members: {other:?}", MAX_SIGNATURE_CANDIDATES + 1),
    }
}

#[test]
fn braintree_takes_at_most_the_bound_of_signature_pairs() {
    let v = verifier(Scheme::Braintree, &["payhook_public_key:payhook_private_key"]);
    let form = v.braintree_sign_body(b"<notification><kind>check</kind></notification>").expect("a Braintree verifier");
    let (mut good, mut payload) = (String::new(), String::new());
    for (name, value) in form_urlencoded::parse(&form) {
        match name.as_ref() {
            "bt_signature" => good = value.into_owned(),
            "bt_payload" => payload = value.into_owned(),
            _ => {}
        }
    }
    let body_with = |n: usize| -> Vec<u8> {
        let mut pairs: Vec<String> = wrong(n - 1, 20, |b| format!("other_key_{}|{}", b[0], hex::encode(b)));
        pairs.push(good.clone());
        form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", &pairs.join("&"))
            .append_pair("bt_payload", &payload)
            .finish()
            .into_bytes()
    };
    let none: [(&str, &str); 0] = [];
    v.verify(&none, &body_with(MAX_SIGNATURE_CANDIDATES), NOW).expect("the bound of pairs, the right one last");
    match v.verify(&none, &body_with(MAX_SIGNATURE_CANDIDATES + 1), NOW) {
        Err(VerifyError::Malformed(why)) => assert!(why.contains("bt_signature pairs"), "{why}"),
        other => panic!("{} pairs: {other:?}", MAX_SIGNATURE_CANDIDATES + 1),
    }
}
