//! Checks the verifier against the shared vectors in
//! `shared/vectors/signatures.json` (next to the repository).

use std::collections::BTreeMap;

use payhook_core::signature::{Scheme, Secret, Verifier};
use serde_json::Value;

use crate::header;

const VECTORS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/vectors/signatures.json");

/// Schemes of the vector file that this module covers; each must have at
/// least one vector so that a renamed scheme cannot silently skip everything.
const COVERED: [&str; 5] = ["stripe", "standard-webhooks", "github", "paystack", "shopify"];

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

fn load() -> Vec<Vector> {
    let text = std::fs::read_to_string(VECTORS_PATH).unwrap_or_else(|e| {
        panic!(
            "cannot read the shared signature vectors at {VECTORS_PATH}: {e} \
             (the repository is expected to sit next to a `shared/` folder)"
        )
    });
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{VECTORS_PATH} is not valid JSON: {e}"));
    let vectors = doc["vectors"].as_array().unwrap_or_else(|| panic!("{VECTORS_PATH} has no `vectors` array"));
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
    for scheme in COVERED {
        assert!(
            checked.get(scheme).copied().unwrap_or(0) > 0,
            "no `{scheme}` vector was checked (checked: {checked:?})"
        );
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
