//! Checks the verifier against the provider-derived vectors in
//! `crates/payhook-verify/tests/data/signatures.json` (kept in the repository, so a fresh clone tests on its own).

use std::collections::BTreeMap;

use payhook_verify::signature::{Scheme, Secret, Verifier, adyen_signing_string};
use serde_json::Value;

use crate::header;

const VECTORS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/signatures.json");

/// Schemes of the vector file that this module covers; each must have at
/// least one vector so that a renamed scheme cannot silently skip everything,
/// and the file may hold no other scheme.
const COVERED: [&str; 8] = [
    "stripe",
    "standard-webhooks",
    "github",
    "paystack",
    "shopify",
    "adyen",
    "http-message-signatures",
    "content-digest",
];

fn scheme_for(name: &str) -> Option<Scheme> {
    match name {
        "stripe" => Some(Scheme::Stripe),
        "standard-webhooks" => Some(Scheme::StandardWebhooks),
        "github" => Some(Scheme::Github),
        "paystack" => Some(Scheme::Paystack),
        "shopify" => Some(Scheme::Shopify),
        _ => None,
    }
}

/// One vector of a covered scheme, decoded.
struct Vector {
    index: usize,
    scheme_name: String,
    scheme: Scheme,
    source: String,
    secret: String,
    headers: Vec<(String, String)>,
    body: String,
    now: i64,
    valid: bool,
}

impl Vector {
    fn label(&self) -> String {
        format!("#{} {} ({})", self.index, self.scheme_name, self.source)
    }
}

/// Every vector of the file as JSON.
fn raw() -> Vec<Value> {
    let text = std::fs::read_to_string(VECTORS_PATH)
        .unwrap_or_else(|e| panic!("cannot read the signature vectors at {VECTORS_PATH}: {e}"));
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{VECTORS_PATH} is not valid JSON: {e}"));
    doc["vectors"].as_array().unwrap_or_else(|| panic!("{VECTORS_PATH} has no `vectors` array")).clone()
}

/// The vectors of one scheme, as JSON; panics when there is none.
fn raw_of(scheme: &str) -> Vec<Value> {
    let found: Vec<Value> = raw().into_iter().filter(|v| v["scheme"] == scheme).collect();
    assert!(!found.is_empty(), "no `{scheme}` vector in {VECTORS_PATH}");
    found
}

fn load() -> Vec<Vector> {
    let vectors = raw();
    let mut out = Vec::new();
    for (index, v) in vectors.iter().enumerate() {
        let scheme_name = v["scheme"].as_str().unwrap_or_else(|| panic!("vector #{index} has no scheme"));
        let Some(scheme) = scheme_for(scheme_name) else {
            continue;
        };
        let source = v["source"].as_str().unwrap_or("<no source>").to_owned();
        let field = |name: &str| -> &Value {
            let value = &v[name];
            assert!(!value.is_null(), "vector #{index} {scheme_name} ({source}) lacks `{name}`");
            value
        };
        let headers = field("headers")
            .as_object()
            .unwrap_or_else(|| panic!("vector #{index}: headers is not an object"))
            .iter()
            .map(|(k, x)| {
                let x = x.as_str().unwrap_or_else(|| panic!("vector #{index}: header {k} is not a string"));
                (k.clone(), x.to_owned())
            })
            .collect();
        out.push(Vector {
            index,
            scheme_name: scheme_name.to_owned(),
            scheme,
            secret: field("secret").as_str().expect("secret is a string").to_owned(),
            headers,
            body: field("body").as_str().expect("body is a string").to_owned(),
            now: field("now").as_i64().expect("now is an integer"),
            valid: field("valid").as_bool().expect("valid is a boolean"),
            source,
        });
    }
    out
}

fn verifier_for(v: &Vector) -> Verifier {
    Verifier::new(v.scheme.clone(), &[Secret::new(v.secret.as_str())], 300)
        .unwrap_or_else(|e| panic!("{}: cannot build a verifier: {e}", v.label()))
}

#[test]
fn every_shared_vector_of_a_covered_scheme_verifies_as_its_valid_flag_says() {
    let mut checked: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for v in load() {
        let outcome = verifier_for(&v).verify(&v.headers[..], v.body.as_bytes(), v.now);
        if outcome.is_ok() != v.valid {
            failures.push(format!("{}: expected valid = {}, got {outcome:?}", v.label(), v.valid));
        }
        *checked.entry(v.scheme_name.clone()).or_default() += 1;
    }
    assert!(failures.is_empty(), "vectors with the wrong outcome:\n{}", failures.join("\n"));
    for scheme in COVERED.iter().filter(|s| scheme_for(s).is_some()) {
        assert!(
            checked.get(*scheme).copied().unwrap_or(0) > 0,
            "no `{scheme}` vector was checked (checked: {checked:?})"
        );
    }
}

#[test]
fn every_scheme_in_the_vector_file_is_covered() {
    for v in raw() {
        let scheme = v["scheme"].as_str().unwrap_or("<none>");
        assert!(COVERED.contains(&scheme), "vectors of scheme `{scheme}` are not checked by any test");
    }
    for scheme in COVERED {
        raw_of(scheme);
    }
}

fn strings(value: &Value) -> Vec<&str> {
    value.as_array().expect("an array").iter().map(|x| x.as_str().expect("a string")).collect()
}

#[test]
fn adyen_vectors_sign_their_fields_as_expected_and_verify_as_a_notification() {
    for v in raw_of("adyen") {
        let fields: [&str; 8] = strings(&v["signed_fields"]).try_into().expect("eight signed fields");
        let expected = v["expected_signature"].as_str().expect("expected_signature");
        let secret = v["secret"].as_str().expect("secret");
        let valid = v["valid"].as_bool().expect("valid");
        let item = crate::adyen::item(fields);
        assert_eq!(adyen_signing_string(&item), fields.join(":"));
        let verifier = Verifier::new(Scheme::Adyen, &[Secret::new(secret)], 300).expect("valid Adyen key");
        let signed =
            verifier.adyen_sign_body(&crate::adyen::notification(std::slice::from_ref(&item))).expect("signable");
        let doc: Value = serde_json::from_slice(&signed).expect("JSON");
        let produced = &doc["notificationItems"][0]["NotificationRequestItem"]["additionalData"]["hmacSignature"];
        assert_eq!(produced.as_str() == Some(expected), valid, "{}", v["source"]);
        // The same notification carrying the vector's signature verifies as the valid flag says.
        let mut carried = item;
        carried["additionalData"] = serde_json::json!({ "hmacSignature": expected });
        let body = crate::adyen::notification(&[carried]);
        assert_eq!(verifier.verify(&[("content-type", "application/json")], &body, 0).is_ok(), valid);
    }
}

/// Number of signatures in a vector's signature header, so that rotation
/// vectors (several signatures) are not compared with our single signature.
fn signature_count(v: &Vector, name: &str, value: &str) -> usize {
    match v.scheme {
        Scheme::Stripe => value.split(',').filter(|e| e.starts_with("v1=")).count(),
        Scheme::StandardWebhooks if name.eq_ignore_ascii_case("webhook-signature") => {
            value.split(' ').filter(|e| !e.is_empty()).count()
        }
        _ => 1,
    }
}

#[test]
fn signing_reproduces_the_headers_of_every_valid_single_signature_vector() {
    let mut reproduced = 0;
    for v in load().into_iter().filter(|v| v.valid) {
        let msg_id = match v.scheme {
            Scheme::StandardWebhooks => header(&v.headers, "webhook-id"),
            _ => "unused",
        };
        let timestamp = match v.scheme {
            Scheme::StandardWebhooks => header(&v.headers, "webhook-timestamp").parse().expect("numeric timestamp"),
            Scheme::Stripe => header(&v.headers, "stripe-signature")
                .split(',')
                .find_map(|e| e.strip_prefix("t="))
                .expect("t= entry")
                .parse()
                .expect("numeric timestamp"),
            _ => v.now,
        };
        let mut signed = verifier_for(&v).sign(v.body.as_bytes(), timestamp, msg_id);
        // Unsigned delivery-id headers (GitHub, Shopify) are not part of the vectors.
        signed.retain(|(name, _)| {
            !["x-github-delivery", "x-shopify-webhook-id"].iter().any(|d| name.eq_ignore_ascii_case(d))
        });
        let single = signed.iter().all(|(name, _)| signature_count(&v, name, header(&v.headers, name)) == 1);
        if !single {
            continue;
        }
        for (name, value) in &signed {
            assert_eq!(
                header(&v.headers, name),
                value,
                "{}: header {name} differs from what sign() produces",
                v.label()
            );
        }
        reproduced += 1;
    }
    assert!(reproduced > 0, "no valid single-signature vector was found");
}

fn header_pairs(v: &Value) -> Vec<(String, String)> {
    v["headers"]
        .as_object()
        .expect("headers object")
        .iter()
        .map(|(k, x)| (k.clone(), x.as_str().expect("string header").to_owned()))
        .collect()
}

#[test]
fn http_message_signature_vectors_rebuild_their_signature_base_and_verify_as_their_valid_flag_says() {
    use payhook_verify::signature::{Headers, RequestParts, parse_signature, parse_signature_input, signature_base};
    for v in raw_of("http-message-signatures") {
        let valid = v["valid"].as_bool().expect("valid");
        let key = v["secret_base64"].as_str().expect("secret_base64");
        let expected_base = v["signature_base"].as_str().expect("signature_base");
        let given = header_pairs(&v);
        // The vector's headers plus the RFC test request's fields (Appendix B.2).
        let mut all: Vec<(&str, &str)> = crate::http_signatures::RFC_HEADERS.to_vec();
        all.extend(given.iter().map(|(k, x)| (k.as_str(), x.as_str())));
        let request = RequestParts {
            method: "POST",
            scheme: "https",
            authority: "example.com",
            path: "/foo",
            query: Some("param=Value&Pet=dog"),
            headers: &all,
        };
        let input = parse_signature_input(request.get("signature-input").expect("Signature-Input"))
            .expect("parsable Signature-Input")
            .remove(0);
        assert_eq!(signature_base(&input, &request).expect("signature base"), expected_base, "{}", v["source"]);
        let keyid = input.keyid().expect("keyid");
        // The vector is about the signature base, not payhook's policy: it is checked requiring its own components
        // (RFC 9421's examples cover fewer than payhook's defaults).
        let verifier =
            Verifier::new(Scheme::HttpMessageSignatures, &[Secret::new(format!("hmac-sha256:{keyid}:{key}"))], 300)
                .expect("valid key")
                .with_required_components(input.components())
                .expect("well-formed components");
        let signatures = parse_signature(request.get("signature").expect("Signature")).expect("parsable Signature");
        let (_, signature) = signatures.iter().find(|(label, _)| label == input.label()).expect("signature for label");
        assert_eq!(verifier.verify_http_signature(&input, signature, &request).is_ok(), valid, "{}", v["source"]);
    }
}

#[test]
fn content_digest_vectors_match_their_body_as_their_valid_flag_says() {
    for v in raw_of("content-digest") {
        let body = v["body"].as_str().expect("body");
        let headers = header_pairs(&v);
        let digest = &headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-digest")).expect("Content-Digest").1;
        let valid = v["valid"].as_bool().expect("valid");
        assert_eq!(
            payhook_verify::signature::check_content_digest(digest, body.as_bytes()).is_ok(),
            valid,
            "{}",
            v["source"]
        );
    }
}

/// The built-in schemes written as presets (`presets/stripe.toml`, …) agree with the code on every vector the
/// declarative language can express: Standard Webhooks' `svix-` headers and Ed25519 keys stay the code's.
#[test]
fn the_presets_of_the_built_in_schemes_verify_every_vector_as_the_code_does() {
    use payhook_verify::preset::Preset;
    let mut checked: BTreeMap<String, usize> = BTreeMap::new();
    for v in load() {
        let Some(preset) = Preset::get(&v.scheme_name) else { continue };
        let preset = preset.expect("the preset parses");
        let scheme = preset.scheme(None).expect("its rule compiles").expect("it has a rule");
        let svix = v.headers.iter().any(|(k, _)| k.to_ascii_lowercase().starts_with("svix-"));
        let asymmetric = v.secret.starts_with("whpk_") || v.secret.starts_with("whsk_");
        if svix || asymmetric {
            continue;
        }
        let declared = Verifier::new(scheme, &[Secret::new(v.secret.as_str())], 300)
            .unwrap_or_else(|e| panic!("{}: the preset refuses the secret: {e}", v.label()));
        let code = verifier_for(&v).verify(&v.headers[..], v.body.as_bytes(), v.now);
        let data = declared.verify(&v.headers[..], v.body.as_bytes(), v.now);
        assert_eq!(data.is_ok(), v.valid, "{}: the preset says {data:?}", v.label());
        assert_eq!(data.is_ok(), code.is_ok(), "{}: code {code:?}, preset {data:?}", v.label());
        *checked.entry(v.scheme_name.clone()).or_default() += 1;
    }
    for scheme in ["stripe", "standard-webhooks", "paystack", "shopify", "github"] {
        assert!(checked.get(scheme).copied().unwrap_or(0) > 0, "no `{scheme}` vector checked ({checked:?})");
    }
}
