//! RFC 9421 HTTP message signatures and RFC 9530 content digests: the RFC's own examples through the low-level
//! pieces, then signed requests through the full policy and its negatives.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use payhook_verify::signature::{
    ComponentError, Headers, KeyError, Nonce, RequestParts, Scheme, Secret, Verified, Verifier, VerifyError,
    check_component_name, check_content_digest, parse_signature, parse_signature_input, signature_base,
};

use crate::verifier;

/// The shared secret of RFC 9421 Appendix B.1.5.
pub const RFC_SHARED_SECRET: &str =
    "uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ==";
/// The body of RFC 9421's test request (and RFC 9530's example).
pub const RFC_BODY: &[u8] = br#"{"hello": "world"}"#;
/// The test request of RFC 9421 Appendix B.2 (`POST /foo?param=Value&Pet=dog`, host example.com).
pub const RFC_HEADERS: [(&str, &str); 5] = [
    ("Host", "example.com"),
    ("Date", "Tue, 20 Apr 2021 02:07:55 GMT"),
    ("Content-Type", "application/json"),
    (
        "Content-Digest",
        "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
    ),
    ("Content-Length", "18"),
];

const NOW: i64 = 1_700_000_000;
const BODY: &[u8] = br#"{"type":"payment.succeeded","data":{"amount":1000}}"#;
const HMAC_SECRET: &str = "hmac-sha256:payments-2024:c2VjcmV0LWtleS1mb3ItdGVzdHM=";
/// RFC 8032 §7.1 test 1 seed and its public key, as RFC 9421 secrets.
const ED_PRIVATE: &str = "ed25519-private:ed-key:nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";
const ED_PUBLIC: &str = "ed25519:ed-key:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";

fn rfc_request<'a>(headers: &'a [(&'a str, &'a str)]) -> RequestParts<'a> {
    RequestParts {
        method: "POST",
        scheme: "https",
        authority: "example.com",
        path: "/foo",
        query: Some("param=Value&Pet=dog"),
        headers,
    }
}

fn http(secrets: &[&str]) -> Verifier {
    verifier(Scheme::HttpMessageSignatures, secrets)
}

/// Signs a request to `/webhooks/payments` and returns its full header list.
fn signed(v: &Verifier, body: &[u8], now: i64, nonce: Option<&str>) -> Vec<(String, String)> {
    let base = [("Content-Type", "application/json")];
    let added = v.sign_request(&parts(&base, "/webhooks/payments"), body, now, nonce);
    assert_eq!(added.len(), 3, "signing produced {added:?}");
    let mut all: Vec<(String, String)> = base.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    all.extend(added);
    all
}

fn parts<'a>(headers: &'a [(&'a str, &'a str)], path: &'a str) -> RequestParts<'a> {
    RequestParts { method: "POST", scheme: "https", authority: "hooks.example.com", path, query: None, headers }
}

/// Verifies `headers` as if received at `/webhooks/payments` (or `path`).
fn check(
    v: &Verifier,
    headers: &[(String, String)],
    path: &str,
    body: &[u8],
    now: i64,
) -> Result<Verified, VerifyError> {
    let borrowed: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    v.verify(&parts(&borrowed, path), body, now)
}

fn replace(headers: &mut [(String, String)], name: &str, value: String) {
    crate::set_header(headers, name, value);
}

#[test]
fn the_rfc_9421_b_2_5_signature_base_is_rebuilt_byte_for_byte_and_its_hmac_verifies() {
    let headers = [
        RFC_HEADERS[0],
        RFC_HEADERS[1],
        RFC_HEADERS[2],
        RFC_HEADERS[3],
        RFC_HEADERS[4],
        (
            "Signature-Input",
            r#"sig-b25=("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret""#,
        ),
        ("Signature", "sig-b25=:pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=:"),
    ];
    let request = rfc_request(&headers);
    let input = parse_signature_input(request.get("signature-input").unwrap()).unwrap().remove(0);
    assert_eq!(input.label(), "sig-b25");
    assert_eq!(input.keyid(), Some("test-shared-secret"));
    assert_eq!(input.created(), Some(1_618_884_473));
    let expected = "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n\"@authority\": example.com\n\"content-type\": \
                    application/json\n\"@signature-params\": (\"date\" \"@authority\" \"content-type\");\
                    created=1618884473;keyid=\"test-shared-secret\"";
    assert_eq!(signature_base(&input, &request).unwrap(), expected);
    let (_, signature) = parse_signature(request.get("signature").unwrap()).unwrap().remove(0);
    let by_default = http(&[&format!("hmac-sha256:test-shared-secret:{RFC_SHARED_SECRET}")]);
    // The example covers less than payhook requires by default; checked on its own terms, it verifies.
    let v = by_default.clone().with_required_components(input.components()).unwrap();
    assert_eq!(v.verify_http_signature(&input, &signature, &request), Ok(0));
    let missing: Vec<String> = ["@method", "@path", "content-digest"].map(String::from).to_vec();
    assert_eq!(
        by_default.verify_http_signature(&input, &signature, &request),
        Err(VerifyError::InsufficientCoverage { missing: missing.clone() })
    );
    // The full policy refuses it either way: the example does not cover content-digest, so not the body.
    assert_eq!(
        v.verify(&request, RFC_BODY, 1_618_884_473),
        Err(VerifyError::InsufficientCoverage { missing: vec!["content-digest".into()] })
    );
    assert_eq!(
        by_default.verify(&request, RFC_BODY, 1_618_884_473),
        Err(VerifyError::InsufficientCoverage { missing })
    );
}

#[test]
fn the_rfc_9530_content_digest_example_matches_its_body() {
    assert_eq!(check_content_digest(RFC_HEADERS[3].1, RFC_BODY), Ok(()));
    assert_eq!(check_content_digest(RFC_HEADERS[3].1, br#"{"hello": "world!"}"#), Err(VerifyError::DigestMismatch));
}

#[test]
fn content_digest_needs_one_supported_algorithm_and_every_supported_one_must_match() {
    let sha256 = format!("sha-256=:{}:", STANDARD.encode(<sha2::Sha256 as sha2::Digest>::digest(RFC_BODY)));
    assert_eq!(check_content_digest(&sha256, RFC_BODY), Ok(()));
    let both = format!("{sha256}, {}", RFC_HEADERS[3].1);
    assert_eq!(check_content_digest(&both, RFC_BODY), Ok(()));
    let one_wrong = format!("{sha256}, sha-512=:{}:", STANDARD.encode([0u8; 64]));
    assert_eq!(check_content_digest(&one_wrong, RFC_BODY), Err(VerifyError::DigestMismatch));
    let with_unknown = format!("md5=:AAAA:, {sha256}");
    assert_eq!(check_content_digest(&with_unknown, RFC_BODY), Ok(()));
    for bad in ["md5=:AAAA:", "", "sha-256=abc", "sha-256=:!!:", "sha-256"] {
        assert!(matches!(check_content_digest(bad, RFC_BODY), Err(VerifyError::Malformed(_))), "{bad}");
    }
}

#[test]
fn derived_components_follow_rfc_9421_section_2_2() {
    let request = rfc_request(&[]);
    let value = |c: &str| request.derived(c).map(|v| v.into_owned());
    assert_eq!(value("@method").as_deref(), Some("POST"));
    assert_eq!(value("@authority").as_deref(), Some("example.com"));
    assert_eq!(value("@scheme").as_deref(), Some("https"));
    assert_eq!(value("@path").as_deref(), Some("/foo"));
    assert_eq!(value("@query").as_deref(), Some("?param=Value&Pet=dog"));
    assert_eq!(value("@target-uri").as_deref(), Some("https://example.com/foo?param=Value&Pet=dog"));
    assert_eq!(value("@request-target").as_deref(), Some("/foo?param=Value&Pet=dog"));
    let bare = RequestParts { path: "", query: None, ..request };
    assert_eq!(bare.derived("@query").as_deref(), Some("?"));
    assert_eq!(bare.derived("@path").as_deref(), Some("/"));
    assert_eq!(bare.derived("@status"), None);
}

#[test]
fn an_hmac_signed_request_passes_the_full_policy_and_surfaces_its_nonce() {
    let v = http(&[HMAC_SECRET]);
    let headers = signed(&v, BODY, NOW, Some("msg_1"));
    assert_eq!(
        crate::seen(check(&v, &headers, "/webhooks/payments", BODY, NOW + 10)),
        Ok(crate::Seen {
            secret_index: 0,
            delivery_id: None,
            timestamp: Some(NOW),
            nonce: Some(Nonce { keyid: "payments-2024".into(), value: "msg_1".into(), expires_at: NOW + 300 }),
        })
    );
    let input = crate::header(&headers, "signature-input");
    assert!(
        input.starts_with(r#"sig1=("@method" "@authority" "@path" "content-digest" "content-type");created="#),
        "{input}"
    );
}

#[test]
fn an_ed25519_signed_request_verifies_with_the_public_key_and_without_a_nonce() {
    let headers = signed(&http(&[ED_PRIVATE]), BODY, NOW, None);
    let v = http(&[HMAC_SECRET, ED_PUBLIC]);
    let outcome = check(&v, &headers, "/webhooks/payments", BODY, NOW).unwrap();
    assert_eq!((outcome.secret_index(), outcome.nonce()), (1, None));
    assert!(http(&[ED_PUBLIC]).sign_request(&parts(&[], "/"), BODY, NOW, None).is_empty());
}

#[test]
fn a_later_expires_extends_how_long_the_nonce_must_be_kept() {
    let v = http(&[HMAC_SECRET]);
    let headers = signed(&v, BODY, NOW, Some("n"));
    let input = crate::header(&headers, "signature-input").to_owned();
    // Re-sign by hand with an expires parameter appended.
    let with_expires = format!("{input};expires={}", NOW + 3600);
    let parsed = parse_signature_input(&with_expires).unwrap().remove(0);
    let mut all = headers.clone();
    replace(&mut all, "signature-input", with_expires.clone());
    let borrowed: Vec<(&str, &str)> = all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let request = parts(&borrowed, "/webhooks/payments");
    let base = signature_base(&parsed, &request).unwrap();
    let key = STANDARD.decode("c2VjcmV0LWtleS1mb3ItdGVzdHM=").unwrap();
    let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(&key).unwrap();
    hmac::Mac::update(&mut mac, base.as_bytes());
    let sig = STANDARD.encode(hmac::Mac::finalize(mac).into_bytes());
    replace(&mut all, "signature", format!("sig1=:{sig}:"));
    let outcome = check(&v, &all, "/webhooks/payments", BODY, NOW).unwrap();
    assert_eq!(outcome.nonce().map(|n| n.expires_at), Some(NOW + 3600));
    assert_eq!(
        check(&v, &all, "/webhooks/payments", BODY, NOW + 3601),
        Err(VerifyError::Stale { delta_secs: 3601, tolerance_secs: 300 })
    );
}

#[test]
fn a_body_that_does_not_match_the_signed_digest_is_a_digest_mismatch() {
    let v = http(&[HMAC_SECRET]);
    let headers = signed(&v, BODY, NOW, None);
    assert_eq!(check(&v, &headers, "/webhooks/payments", b"{}", NOW), Err(VerifyError::DigestMismatch));
    assert_eq!(VerifyError::DigestMismatch.code(), "digest_mismatch");
}

#[test]
fn a_signature_that_does_not_cover_content_digest_is_insufficient_coverage() {
    let v = http(&[HMAC_SECRET]);
    let mut headers = signed(&v, BODY, NOW, None);
    let input = crate::header(&headers, "signature-input").replace(" \"content-digest\"", "");
    replace(&mut headers, "signature-input", input);
    let refused = check(&v, &headers, "/webhooks/payments", BODY, NOW);
    assert_eq!(refused, Err(VerifyError::InsufficientCoverage { missing: vec!["content-digest".into()] }));
    // Even for a verifier whose own list leaves it out: the policy always insists on the body.
    let lax = http(&[HMAC_SECRET]).with_required_components(["@method"]).unwrap();
    let refused = check(&lax, &headers, "/webhooks/payments", BODY, NOW);
    assert_eq!(refused, Err(VerifyError::InsufficientCoverage { missing: vec!["content-digest".into()] }));
    assert_eq!(refused.unwrap_err().code(), "insufficient_coverage");
}

/// Headers of a request to `path` signed by hand with the HMAC key of [`HMAC_SECRET`], covering `components`.
fn signed_covering(components: &[&str], path: &str) -> Vec<(String, String)> {
    let digest = payhook_verify::signature::content_digest(BODY);
    let list: Vec<String> = components.iter().map(|c| format!("\"{c}\"")).collect();
    let input_header = format!("sig1=({});created={NOW};keyid=\"payments-2024\";alg=\"hmac-sha256\"", list.join(" "));
    let mut headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Content-Digest".to_owned(), digest),
        ("Signature-Input".to_owned(), input_header.clone()),
    ];
    let borrowed: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let input = parse_signature_input(&input_header).unwrap().remove(0);
    let base = signature_base(&input, &parts(&borrowed, path)).unwrap();
    let key = STANDARD.decode("c2VjcmV0LWtleS1mb3ItdGVzdHM=").unwrap();
    let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(&key).unwrap();
    hmac::Mac::update(&mut mac, base.as_bytes());
    headers
        .push(("Signature".to_owned(), format!("sig1=:{}:", STANDARD.encode(hmac::Mac::finalize(mac).into_bytes()))));
    headers
}

#[test]
fn a_signature_covering_only_the_body_is_refused_by_default_and_one_covering_the_defaults_passes() {
    let v = http(&[HMAC_SECRET]);
    assert_eq!(v.required_components(), ["@method", "@authority", "@path", "content-digest"]);
    let body_only = signed_covering(&["content-digest"], "/webhooks/payments");
    assert_eq!(
        check(&v, &body_only, "/webhooks/payments", BODY, NOW),
        Err(VerifyError::InsufficientCoverage {
            missing: ["@method", "@authority", "@path"].map(String::from).to_vec()
        })
    );
    // Why: a verifier that asked only for the body takes the same signature at any endpoint.
    let lax = http(&[HMAC_SECRET]).with_required_components(["content-digest"]).unwrap();
    assert!(check(&lax, &body_only, "/webhooks/payments", BODY, NOW).is_ok());
    assert!(check(&lax, &body_only, "/webhooks/refunds", BODY, NOW).is_ok(), "replayable elsewhere");

    let defaults = signed_covering(&["@method", "@authority", "@path", "content-digest"], "/webhooks/payments");
    assert_eq!(check(&v, &defaults, "/webhooks/payments", BODY, NOW).map(|ok| ok.secret_index()), Ok(0));
    assert_eq!(check(&v, &defaults, "/webhooks/refunds", BODY, NOW), Err(VerifyError::Mismatch), "tied to its path");
    let missing_path = signed_covering(&["@method", "@authority", "content-digest"], "/webhooks/payments");
    assert_eq!(
        check(&v, &missing_path, "/webhooks/payments", BODY, NOW),
        Err(VerifyError::InsufficientCoverage { missing: vec!["@path".into()] })
    );
}

#[test]
fn required_components_must_be_lowercase_header_names_or_known_derived_components_listed_once() {
    let v = || http(&[HMAC_SECRET]);
    for good in [
        &["@method", "@authority", "@path", "@query", "@target-uri", "@scheme", "@request-target"][..],
        &["content-digest", "x-shop-id", "date", "content-type"][..],
        &[][..],
    ] {
        let built = v().with_required_components(good).unwrap_or_else(|e| panic!("{good:?}: {e}"));
        assert_eq!(built.required_components(), good);
    }
    for bad in ["Content-Digest", "@status", "@signature-params", "@Method", "", "x shop", "x-shop-id;sf", "é"] {
        let err = v().with_required_components(["content-digest", bad]).unwrap_err();
        assert_eq!(err, ComponentError::Unknown(bad.to_owned()), "{bad:?}");
    }
    let err = v().with_required_components(["@path", "content-digest", "@path"]).unwrap_err();
    assert_eq!(err, ComponentError::Duplicate("@path".into()));
    assert_eq!(check_component_name("@query"), Ok(()));
}

#[test]
fn sign_request_covers_every_component_its_verifier_requires() {
    let strict = http(&[HMAC_SECRET])
        .with_required_components(["@method", "@authority", "@path", "@query", "content-digest", "x-shop-id"])
        .unwrap();
    let base = [("Content-Type", "application/json"), ("X-Shop-Id", "shop_42")];
    let added = strict.sign_request(&parts(&base, "/webhooks/payments"), BODY, NOW, None);
    let input = crate::header(&added, "signature-input");
    assert!(
        input.starts_with(
            r#"sig1=("@method" "@authority" "@path" "content-digest" "@query" "x-shop-id" "content-type");"#
        ),
        "{input}"
    );
    let mut headers: Vec<(String, String)> = base.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    headers.extend(added);
    assert!(check(&strict, &headers, "/webhooks/payments", BODY, NOW).is_ok());
    // What a default verifier signs does not satisfy the stricter one.
    let default_signed = signed(&http(&[HMAC_SECRET]), BODY, NOW, None);
    assert_eq!(
        check(&strict, &default_signed, "/webhooks/payments", BODY, NOW),
        Err(VerifyError::InsufficientCoverage { missing: vec!["@query".into(), "x-shop-id".into()] })
    );
    // A required header the request lacks cannot be signed.
    assert!(strict.sign_request(&parts(&base[..1], "/webhooks/payments"), BODY, NOW, None).is_empty());
}

#[test]
fn created_outside_the_tolerance_is_stale_in_both_directions() {
    let v = http(&[HMAC_SECRET]);
    let headers = signed(&v, BODY, NOW, None);
    assert_eq!(
        check(&v, &headers, "/webhooks/payments", BODY, NOW + 301),
        Err(VerifyError::Stale { delta_secs: 301, tolerance_secs: 300 })
    );
    assert_eq!(
        check(&v, &headers, "/webhooks/payments", BODY, NOW - 301),
        Err(VerifyError::Stale { delta_secs: -301, tolerance_secs: 300 })
    );
}

#[test]
fn a_passed_expires_is_stale_and_a_missing_created_is_malformed() {
    let v = http(&[HMAC_SECRET]);
    let mut headers = signed(&v, BODY, NOW, None);
    let input = crate::header(&headers, "signature-input").to_owned();
    replace(&mut headers, "signature-input", format!("{input};expires={}", NOW - 1));
    assert_eq!(
        check(&v, &headers, "/webhooks/payments", BODY, NOW),
        Err(VerifyError::Stale { delta_secs: 1, tolerance_secs: 0 })
    );
    replace(&mut headers, "signature-input", input.replace(&format!(";created={NOW}"), ""));
    assert!(matches!(check(&v, &headers, "/webhooks/payments", BODY, NOW), Err(VerifyError::Malformed(_))));
}

#[test]
fn an_unknown_keyid_or_a_conflicting_alg_is_a_mismatch() {
    let headers = signed(&http(&[HMAC_SECRET]), BODY, NOW, None);
    let other = http(&["hmac-sha256:someone-else:c2VjcmV0LWtleS1mb3ItdGVzdHM="]);
    assert_eq!(check(&other, &headers, "/webhooks/payments", BODY, NOW), Err(VerifyError::Mismatch));
    let mut relabelled = headers.clone();
    let input = crate::header(&headers, "signature-input").replace("hmac-sha256", "ed25519");
    replace(&mut relabelled, "signature-input", input);
    assert_eq!(check(&http(&[HMAC_SECRET]), &relabelled, "/webhooks/payments", BODY, NOW), Err(VerifyError::Mismatch));
}

#[test]
fn a_changed_covered_component_is_a_mismatch() {
    let v = http(&[HMAC_SECRET]);
    let headers = signed(&v, BODY, NOW, None);
    assert_eq!(check(&v, &headers, "/webhooks/refunds", BODY, NOW), Err(VerifyError::Mismatch));
    let mut changed = headers.clone();
    replace(&mut changed, "content-type", "text/plain".into());
    assert_eq!(check(&v, &changed, "/webhooks/payments", BODY, NOW), Err(VerifyError::Mismatch));
    let mut tampered_nonce = headers.clone();
    let input = crate::header(&headers, "signature-input").to_owned() + ";nonce=\"x\"";
    replace(&mut tampered_nonce, "signature-input", input);
    assert_eq!(check(&v, &tampered_nonce, "/webhooks/payments", BODY, NOW), Err(VerifyError::Mismatch));
}

#[test]
fn without_derived_components_from_the_integration_the_component_is_reported_missing() {
    let v = http(&[HMAC_SECRET]);
    let headers = signed(&v, BODY, NOW, None);
    assert_eq!(v.verify(&headers, BODY, NOW), Err(VerifyError::MissingHeader("@method".into())));
}

#[test]
fn malformed_signature_dictionaries_are_malformed() {
    let v = http(&[HMAC_SECRET]);
    let good = signed(&v, BODY, NOW, None);
    let cases: [(&str, &str); 10] = [
        ("signature-input", ""),
        ("signature-input", "sig1=\"not a list\""),
        ("signature-input", "sig1=(\"@method\" \"@method\" \"content-digest\");created=1;keyid=\"payments-2024\""),
        ("signature-input", "sig1=(\"Content-Type\" \"content-digest\");created=1;keyid=\"payments-2024\""),
        ("signature-input", "sig1=(\"@method\";req \"content-digest\");keyid=\"payments-2024\""),
        ("signature-input", "sig1=(\"@method\",\"@path\")"),
        ("signature-input", "Sig1=()"),
        ("signature-input", "sig1=(\"a\"),"),
        ("signature", "sig1=notbytes"),
        ("signature", "sig1=:unterminated"),
    ];
    for (name, value) in cases {
        let mut headers = good.clone();
        replace(&mut headers, name, value.to_owned());
        let outcome = check(&v, &headers, "/webhooks/payments", BODY, NOW);
        assert!(matches!(outcome, Err(VerifyError::Malformed(_))), "{name}: {value:?} gave {outcome:?}");
    }
}

#[test]
fn missing_signature_headers_are_named() {
    let v = http(&[HMAC_SECRET]);
    let good = signed(&v, BODY, NOW, None);
    for name in ["signature-input", "signature", "content-digest"] {
        let partial: Vec<(String, String)> =
            good.iter().filter(|(k, _)| !k.eq_ignore_ascii_case(name)).cloned().collect();
        assert_eq!(
            check(&v, &partial, "/webhooks/payments", BODY, NOW),
            Err(VerifyError::MissingHeader(name.into())),
            "without {name}"
        );
    }
}

#[test]
fn malformed_http_signature_secrets_are_rejected_when_the_verifier_is_built() {
    for bad in [
        "c2VjcmV0",
        "hmac-sha256:c2VjcmV0",
        "hmac-sha256::c2VjcmV0",
        "hmac-sha256:k:not*base64",
        "hmac-sha256:k:",
        "rsa-pss-sha512:k:c2VjcmV0",
        "ed25519:k:c2VjcmV0",
        "ed25519-private:k:c2VjcmV0",
        "hmac-sha256:payments-2024:c2VjcmV0",
    ] {
        let err = Verifier::new(Scheme::HttpMessageSignatures, &[Secret::new(HMAC_SECRET), Secret::new(bad)], 300)
            .unwrap_err();
        assert!(matches!(err, KeyError::Invalid { index: 1, .. }), "{bad}: {err:?}");
    }
}

#[test]
fn the_generic_sign_produces_no_headers_for_http_message_signatures() {
    assert!(http(&[HMAC_SECRET]).sign(BODY, NOW, "msg_1").is_empty());
    assert_eq!(Scheme::HttpMessageSignatures.name(), "http-message-signatures");
    assert_eq!(Scheme::Adyen.name(), "adyen");
}
