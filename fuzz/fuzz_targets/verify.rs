//! Every scheme's `verify` on arbitrary headers and bodies: it returns, and a forged delivery never verifies.
//! Half the inputs are signed properly first (then optionally tampered with), so the fuzzer also reaches the code
//! after a signature parses: what a provider signs verifies, and a changed body never does.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use payhook_core::preset::{Preset, test_secret};
use payhook_core::signature::{Encoding, HmacAlgorithm, RequestContext, RequestParts, Scheme, Secret, Verifier};
use std::sync::OnceLock;

/// The header names the schemes read, so arbitrary values land where a parser looks.
const NAMES: &[&str] = &[
    "stripe-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "x-sig",
    "x-hub-signature-256",
    "x-github-delivery",
    "x-paystack-signature",
    "x-shopify-hmac-sha256",
    "x-shopify-webhook-id",
    "signature",
    "signature-input",
    "content-digest",
    "content-type",
    "paddle-signature",
    "x-signature",
    "x-request-id",
    "x-square-hmacsha256-signature",
    "x-razorpay-signature",
];

/// The URL the fuzzed requests are sent to (what a declared `{url}` covers).
const URL: &str = "https://payhook.example/webhooks/fuzz";

#[derive(Arbitrary, Debug)]
struct Input {
    scheme: u8,
    sign: bool,
    /// Flip this bit of the body after signing (index modulo the body's bits).
    tamper: Option<u32>,
    now: u32,
    msg_id: String,
    headers: Vec<(u8, String)>,
    body: Vec<u8>,
}

fn verifiers() -> &'static [Verifier] {
    static V: OnceLock<Vec<Verifier>> = OnceLock::new();
    V.get_or_init(|| {
        let hmac = |algorithm, encoding, prefix: Option<&str>| Scheme::Hmac {
            header: "x-sig".into(),
            algorithm,
            encoding,
            prefix: prefix.map(str::to_owned),
        };
        [
            (Scheme::Stripe, "whsec_fuzz"),
            (Scheme::StandardWebhooks, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            (Scheme::StandardWebhooks, "whsk_n0bKmWz4kzIcY3Nw2NfQHs0qWD6XR2tBtr5DdKUrWLY="),
            (Scheme::Github, "k"),
            (Scheme::Paystack, "k"),
            (Scheme::Shopify, "k"),
            (hmac(HmacAlgorithm::Sha256, Encoding::Hex, Some("sha256=")), "k"),
            (hmac(HmacAlgorithm::Sha512, Encoding::Base64, None), "k"),
            (Scheme::Adyen, "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"),
            (Scheme::HttpMessageSignatures, "hmac-sha256:fuzz:c2VjcmV0LWtleS1vZi10aGUtcHJvdmlkZXItMDEyMzQ1Njc4OQ=="),
            (Scheme::Braintree, "fuzz_public_key:fuzz_private_key"),
        ]
        .into_iter()
        .map(|(scheme, secret)| (scheme, secret.to_owned()))
        // Every preset's declared rule, with a key in the form it decodes.
        .chain(Preset::names().filter_map(|name| {
            let preset = Preset::get(name)?.ok()?;
            let secret = test_secret(preset.signature.as_ref()?);
            Some((preset.scheme(None).ok()??, secret))
        }))
        .map(|(scheme, secret)| Verifier::new(scheme, &[Secret::new(secret)], 300).expect("fuzz secret"))
        .collect()
    })
}

fuzz_target!(|input: Input| {
    let verifier = &verifiers()[usize::from(input.scheme) % verifiers().len()];
    let now = i64::from(input.now);
    let mut headers: Vec<(String, String)> =
        input.headers.iter().map(|(n, v)| (NAMES[usize::from(*n) % NAMES.len()].to_owned(), v.clone())).collect();
    let mut body = input.body.clone();
    let parts = |headers: &[(String, String)], f: &mut dyn FnMut(&RequestParts<'_>)| {
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        f(&RequestParts {
            method: "POST",
            scheme: "https",
            authority: "payhook.example",
            path: "/webhooks/fuzz",
            query: None,
            headers: &pairs,
        })
    };
    let mut signed = false;
    if input.sign {
        let made = match verifier.scheme() {
            Scheme::Adyen => match verifier.adyen_sign_body(&body) {
                Ok(b) => {
                    body = b;
                    true
                }
                Err(_) => false,
            },
            Scheme::Braintree => match verifier.braintree_sign_body(&body) {
                Ok(b) => {
                    body = b;
                    true
                }
                Err(_) => false,
            },
            Scheme::HttpMessageSignatures => {
                let mut out = Vec::new();
                parts(&headers, &mut |p| out = verifier.sign_request(p, &body, now, None));
                let made = !out.is_empty();
                headers = out.into_iter().chain(headers.clone()).collect();
                made
            }
            _ => {
                let context = RequestContext { url: Some(URL), headers: &headers };
                let out = verifier.sign_with(&body, now, &input.msg_id, &context);
                let made = !out.is_empty();
                // The provider's headers first: a verifier reads the first of repeated names.
                headers = out.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).chain(headers.clone()).collect();
                made
            }
        };
        signed = made;
    }
    let mut tampered = false;
    if let (true, Some(bit)) = (signed, input.tamper) {
        if !body.is_empty() {
            let i = bit as usize % (body.len() * 8);
            body[i / 8] ^= 1 << (i % 8);
            tampered = true;
        }
    }
    let mut result = None;
    parts(&headers, &mut |p| result = Some(verifier.verify(p, &body, now)));
    let result = result.expect("verified");
    if signed && !tampered {
        // What the provider's own signing produced verifies (an id a header cannot carry aside: the verifier
        // refuses that, which is right).
        let odd_id = input.msg_id.is_empty() || !input.msg_id.chars().all(|c| c.is_ascii_graphic());
        // A rule that does not sign the body refuses one that does not repeat the signed id (`body_must_match`).
        let unbound = matches!(&result, Err(e) if e.code() == "body_mismatch");
        assert!(result.is_ok() || odd_id || unbound, "{:?} did not verify what it signed: {result:?}", verifier.scheme());
    }
    // Forgery: nothing unsigned verifies, and neither does a signed body with a flipped bit (except Adyen's,
    // whose MAC covers some of an item's fields, not the body's bytes).
    // Braintree's MAC covers the decoded form value: `%2B` and `%2b` are one byte, so a flipped case bit may not
    // change what is signed.
    let adyen = matches!(verifier.scheme(), Scheme::Adyen | Scheme::Braintree);
    // A declared rule that knowingly signs no body (Mercado Pago's) is not expected to notice a changed one.
    let unsigned_body = matches!(verifier.scheme(), Scheme::Declared(d) if d.spec().unsigned_body);
    assert!(signed || result.is_err(), "{:?} verified an unsigned delivery", verifier.scheme());
    assert!(!tampered || adyen || unsigned_body || result.is_err(), "{:?} verified a tampered body", verifier.scheme());
});
