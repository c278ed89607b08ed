//! The named body-HMAC providers: GitHub, Paystack and Shopify.

use payhook_verify::signature::{Scheme, VerifyError};

use crate::{github_scheme, header, paystack_scheme, shopify_scheme, verifier};

const BODY: &[u8] = br#"{"id":"evt_1","object":"event"}"#;

#[test]
fn named_schemes_sign_exactly_like_their_generic_hmac_configuration() {
    for (named, generic) in
        [(Scheme::Github, github_scheme()), (Scheme::Paystack, paystack_scheme()), (Scheme::Shopify, shopify_scheme())]
    {
        let a = verifier(named.clone(), &["s3cret"]).sign(BODY, 0, "msg_1");
        let b = verifier(generic, &["s3cret"]).sign(BODY, 0, "msg_1");
        let (name, value) = &b[0];
        assert_eq!(header(&a, name), value, "{named:?}");
    }
}

#[test]
fn sign_uses_the_providers_header_names_and_carries_the_delivery_id() {
    let names = |scheme| -> Vec<String> {
        verifier(scheme, &["s"]).sign(BODY, 0, "msg_1").into_iter().map(|(k, _)| k).collect()
    };
    assert_eq!(names(Scheme::Github), ["X-Hub-Signature-256", "X-GitHub-Delivery"]);
    assert_eq!(names(Scheme::Paystack), ["x-paystack-signature"]);
    assert_eq!(names(Scheme::Shopify), ["X-Shopify-Hmac-Sha256", "X-Shopify-Webhook-Id"]);
}

#[test]
fn github_and_shopify_report_their_delivery_header_as_the_delivery_id() {
    for scheme in [Scheme::Github, Scheme::Shopify] {
        let v = verifier(scheme.clone(), &["s"]);
        let headers = v.sign(BODY, 0, "d-42");
        assert_eq!(
            crate::seen(v.verify(&headers, BODY, 0)),
            Ok(crate::Seen { secret_index: 0, delivery_id: Some("d-42".into()), timestamp: None, nonce: None }),
            "{scheme:?}"
        );
        let signature_only = &headers[..1];
        assert_eq!(
            v.verify(signature_only, BODY, 0).map(|ok| ok.delivery_id().map(str::to_owned)),
            Ok(None),
            "{scheme:?}"
        );
    }
}

#[test]
fn named_schemes_name_their_signature_header_when_it_is_missing() {
    for (scheme, name) in [
        (Scheme::Github, "x-hub-signature-256"),
        (Scheme::Paystack, "x-paystack-signature"),
        (Scheme::Shopify, "x-shopify-hmac-sha256"),
    ] {
        let v = verifier(scheme, &["s"]);
        assert_eq!(v.verify(&[("x-other", "1")], BODY, 0), Err(VerifyError::MissingHeader(name.into())));
    }
}

#[test]
fn github_requires_the_sha256_prefix_and_paystack_requires_sha512_length() {
    let github = verifier(Scheme::Github, &["s"]);
    let signed = github.sign(BODY, 0, "d");
    let bare = header(&signed, "x-hub-signature-256").trim_start_matches("sha256=").to_owned();
    assert!(matches!(
        github.verify(&[("X-Hub-Signature-256", bare.as_str())], BODY, 0),
        Err(VerifyError::Malformed(_))
    ));
    let paystack = verifier(Scheme::Paystack, &["s"]);
    assert_eq!(paystack.verify(&[("x-paystack-signature", bare.as_str())], BODY, 0), Err(VerifyError::Mismatch));
}

#[test]
fn every_scheme_has_a_short_stable_name() {
    let schemes =
        [Scheme::Stripe, Scheme::StandardWebhooks, github_scheme(), Scheme::Github, Scheme::Paystack, Scheme::Shopify];
    let names: Vec<&str> = schemes.iter().map(Scheme::name).collect();
    assert_eq!(names, ["stripe", "standard-webhooks", "hmac", "github", "paystack", "shopify"]);
}
