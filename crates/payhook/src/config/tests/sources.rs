//! The `[[sources]]` table's signed-parts checks: a field read from an unsigned part, a built-in format beside a
//! rule that does not sign the body, and Mercado Pago's `confirm = "api"`.

use super::*;

#[test]
fn a_declared_format_reading_an_unsigned_header_is_refused_with_its_field_and_line_unless_it_names_it() {
    let text = include_str!("../../../../../examples/declared-provider.toml");
    let inline = text.replace("secrets_env = \"ACME_WEBHOOK_SECRET\"", &format!("secrets = [\"{}\"]", "ab".repeat(32)));
    // The event type from a header the signature does not cover: anyone could turn a payment into a refund.
    let bad = inline.replace("event_type = \"/event/kind\"", "event_type = \"header:x-acme-kind\"");
    let err = format!("{:#}", Config::from_toml(&bad, "acme.toml", None).unwrap_err());
    assert!(err.contains("sources[0] (acme): format.event_type: reads header:x-acme-kind"), "{err}");
    assert!(err.contains("unsigned = [...]"), "{err}");
    let line = bad.lines().position(|l| l.starts_with("event_type = ")).unwrap() + 1;
    assert!(err.starts_with(&format!("acme.toml:{line}: ")), "{err}");
    // Named, it is accepted knowingly.
    let named = bad.replace(
        "event_type = \"header:x-acme-kind\"",
        "event_type = \"header:x-acme-kind\"\nunsigned = [\"event_type\"]",
    );
    Config::from_toml(&named, "acme.toml", None).unwrap();
    // A header the rule signs needs no name.
    let signed = bad
        .replace("signed = \"{timestamp}.{url}.{body}\"", "signed = \"{timestamp}.{url}.{header:x-acme-kind}.{body}\"");
    Config::from_toml(&signed, "acme.toml", None).unwrap();
}

#[test]
fn mercado_pago_needs_confirm_api_with_a_token_and_nothing_else_takes_it() {
    let source =
        "[[sources]]\nname = \"mp\"\nscheme = \"mercado-pago\"\nformat = \"mercado-pago\"\nsecrets = [\"s\"]\n";
    let err = format!("{:#}", Config::from_toml(source, "f.toml", None).unwrap_err());
    assert!(
        err.contains("sources[0] (mp): confirm: the mercado-pago preset's signature does not cover the body"),
        "{err}"
    );
    let err = format!("{:#}", Config::from_toml(&format!("{source}confirm = \"api\"\n"), "f.toml", None).unwrap_err());
    assert!(err.contains("confirm_token_env: confirm = \"api\" needs the provider's access token"), "{err}");
    let with_token = format!("{source}confirm = \"api\"\nconfirm_token = \"APP_USR-1\"\n");
    let c = Config::from_toml(&with_token, "f.toml", None).unwrap();
    let confirm = c.settings.sources[0].confirm.as_ref().expect("confirmed");
    assert_eq!(confirm.base_url, "https://api.mercadopago.com");
    assert_eq!((confirm.timeout_ms, confirm.max_in_flight), (5_000, 16));
    assert!(!format!("{confirm:?}").contains("APP_USR-1"), "the token is never printed");
    let c = Config::from_toml(&format!("{with_token}confirm_base_url = \"http://127.0.0.1:9/\"\n"), "f.toml", None)
        .unwrap();
    assert_eq!(c.settings.sources[0].confirm.as_ref().expect("confirmed").base_url, "http://127.0.0.1:9");
    let err = format!(
        "{:#}",
        Config::from_toml(&format!("{with_token}confirm_base_url = \"ftp://x\"\n"), "f.toml", None).unwrap_err()
    );
    assert!(err.contains("confirm_base_url: \"ftp://x\" is not an http(s) URL"), "{err}");
    let stripe =
        "[[sources]]\nname = \"s\"\nscheme = \"stripe\"\nformat = \"stripe\"\nsecrets = [\"s\"]\nconfirm = \"api\"\n";
    let err = format!("{:#}", Config::from_toml(stripe, "f.toml", None).unwrap_err());
    assert!(err.contains("confirm: only a preset with a [confirm] table"), "{err}");
}

#[test]
fn a_built_in_format_is_refused_with_a_scheme_that_does_not_sign_the_body() {
    let text = "[[sources]]\nname = \"mp\"\nscheme = \"mercado-pago\"\nformat = \"generic\"\nsecrets = [\"s\"]\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.contains("sources[0] (mp): format: generic reads the body, which the mercado-pago signature"), "{err}");
    let text = "[[sources]]\nname = \"a\"\nscheme = \"adyen\"\nformat = \"generic\"\nsecrets = [\"00\"]\n";
    let err = format!("{:#}", Config::from_toml(text, "f.toml", None).unwrap_err());
    assert!(err.contains("format: generic reads the body, which the adyen signature"), "{err}");
    let text = "[[sources]]\nname = \"a\"\nscheme = \"adyen\"\nformat = \"adyen\"\nsecrets = [\"00\"]\n";
    Config::from_toml(text, "f.toml", None).unwrap();
}
