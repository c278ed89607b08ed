//! Provider presets: a provider's signature rule, payload format and example deliveries, written in the same
//! declarative language a user writes in a source's `[signature]` and `[format]` tables.
//!
//! Each preset is one file, `presets/NAME.toml`, compiled into the crate (see `build.rs`): its `[signature]` is a
//! [`SignatureSpec`], its `[format]` a [`FormatSpec`], its `[[examples]]` deliveries shaped like the provider's
//! documented ones (what `payhook trigger` sends and the tests deliver), and four lines of prose for the preset
//! table of docs/providers.md (the provider, its documentation, where its secret is, where its order id is). A preset
//! is parsed when it is asked for; a test parses and compiles them all.

use std::sync::Arc;

use serde::Deserialize;

use crate::confirm::{Confirm, ConfirmSpec};
use crate::format::{DeclaredFormat, ExampleSpec, Format, FormatSpec, FormatSpecError};
use crate::signature::{DeclaredScheme, Scheme, SignatureSpec, SpecError};

include!(concat!(env!("OUT_DIR"), "/presets.rs"));

/// A preset file as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    description: String,
    docs: String,
    secret: String,
    order_id: String,
    signature: Option<SignatureSpec>,
    format: Option<FormatSpec>,
    #[serde(default)]
    examples: Vec<ExampleSpec>,
    confirm: Option<ConfirmSpec>,
}

/// One provider's preset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preset {
    /// Its name: `scheme = "NAME"`, `format = "NAME"`.
    pub name: &'static str,
    /// The provider, as people write it.
    pub description: String,
    /// Where the provider documents its signature.
    pub docs: String,
    /// Where a merchant finds the secret.
    pub secret: String,
    /// Where the merchant's order id travels.
    pub order_id: String,
    /// Its signature rule, when it has one (a format-only preset signs with a built-in scheme).
    pub signature: Option<SignatureSpec>,
    /// Its payload format, when it has one.
    pub format: Option<FormatSpec>,
    /// Deliveries shaped like the provider's documented examples.
    pub examples: Vec<ExampleSpec>,
    /// How the provider's API confirms a delivery whose body its signature does not cover.
    pub confirm: Option<ConfirmSpec>,
}

/// Why a preset cannot be used; a test keeps every shipped preset free of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PresetError {
    /// The file is not a preset.
    #[error("presets/{0}.toml: {1}")]
    File(&'static str, String),
    /// Its signature rule is unusable.
    #[error("presets/{0}.toml: signature.{1}")]
    Signature(&'static str, SpecError),
    /// Its format is unusable.
    #[error("presets/{0}.toml: format.{1}")]
    Format(&'static str, FormatSpecError),
}

impl Preset {
    /// The names of every preset, sorted.
    pub fn names() -> impl Iterator<Item = &'static str> {
        FILES.iter().map(|(name, _)| *name)
    }

    /// The preset called `name`, parsed; `None` when there is none.
    pub fn get(name: &str) -> Option<Result<Self, PresetError>> {
        let (name, text) = FILES.iter().find(|(n, _)| *n == name)?;
        Some(Self::parse(name, text))
    }

    fn parse(name: &'static str, text: &str) -> Result<Self, PresetError> {
        let file: PresetFile = toml::from_str(text).map_err(|e| PresetError::File(name, e.message().to_owned()))?;
        Ok(Self {
            name,
            description: file.description,
            docs: file.docs,
            secret: file.secret,
            order_id: file.order_id,
            signature: file.signature,
            format: file.format,
            examples: file.examples,
            confirm: file.confirm,
        })
    }

    /// Its signature rule compiled (`notification_url` is what `{url}` stands for), or `None` without one.
    pub fn scheme(&self, notification_url: Option<String>) -> Result<Option<Scheme>, PresetError> {
        let Some(spec) = &self.signature else { return Ok(None) };
        let scheme = DeclaredScheme::new(self.name, spec.clone(), notification_url)
            .map_err(|e| PresetError::Signature(self.name, e))?;
        Ok(Some(Scheme::Declared(Arc::new(scheme))))
    }

    /// Its format compiled, with its examples, or `None` without one.
    pub fn format(&self) -> Result<Option<Format>, PresetError> {
        let Some(spec) = &self.format else { return Ok(None) };
        let format = DeclaredFormat::new(self.name, spec).map_err(|e| PresetError::Format(self.name, e))?;
        Ok(Some(Format::Declared(Arc::new(format.with_examples(self.examples.clone())))))
    }
}

impl Preset {
    /// Its `[confirm]` table compiled, or `None` without one.
    pub fn confirm(&self) -> Result<Option<Confirm>, PresetError> {
        let Some(spec) = &self.confirm else { return Ok(None) };
        Confirm::new(self.name, spec).map(Some).map_err(|e| PresetError::Format(self.name, e))
    }
}

/// A secret a preset's rule accepts, for its tests and for `payhook trigger` examples: its key decoding's form of
/// a fixed test key, behind its key prefix.
pub fn test_secret(spec: &SignatureSpec) -> String {
    use crate::signature::{Algorithm, KeyDecoding};
    use base64::Engine as _;
    let key: Vec<u8> = match spec.algorithm {
        // A 64-byte Ed25519 key pair (seed, then its public key), which signs and verifies.
        Algorithm::Ed25519 => {
            let seed = [7u8; 32];
            let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key().to_bytes();
            [seed.as_slice(), public.as_slice()].concat()
        }
        _ => b"payhook-preset-test-secret-0123456789".to_vec(),
    };
    let text = match spec.key {
        KeyDecoding::Raw => String::from_utf8(key).unwrap_or_default(),
        KeyDecoding::Base64 => base64::engine::general_purpose::STANDARD.encode(&key),
        KeyDecoding::Hex => hex::encode(&key),
    };
    format!("{}{text}", spec.key_prefix.as_deref().unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Effect;
    use crate::format::{EffectSpec, ExampleVars, RenderedExample};
    use crate::signature::{Headers, RequestContext, Secret, Verifier, VerifyError};
    use std::borrow::Cow;

    /// A request as the verifier sees it: headers and the URL it was sent to.
    struct Request<'a> {
        headers: &'a [(String, String)],
        url: &'a str,
    }

    impl Headers for Request<'_> {
        fn get(&self, name: &str) -> Option<&str> {
            <[(String, String)] as Headers>::get(self.headers, name)
        }

        fn derived(&self, component: &str) -> Option<Cow<'_, str>> {
            match component {
                "@target-uri" => Some(Cow::Borrowed(self.url)),
                "@query" => Some(Cow::Owned(self.url.find('?').map_or("?".into(), |at| self.url[at..].to_owned()))),
                _ => None,
            }
        }
    }

    fn all() -> Vec<Preset> {
        Preset::names().map(|n| Preset::get(n).expect("listed").unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    #[test]
    fn every_preset_parses_and_its_rule_and_format_compile() {
        for preset in all() {
            preset.scheme(None).unwrap_or_else(|e| panic!("{e}"));
            preset.format().unwrap_or_else(|e| panic!("{e}"));
            assert!(
                preset.signature.is_some() || preset.format.is_some(),
                "{}: neither signature nor format",
                preset.name
            );
            for text in [&preset.description, &preset.docs, &preset.secret, &preset.order_id] {
                assert!(!text.trim().is_empty(), "{}: an empty description line", preset.name);
            }
        }
    }

    /// No preset's format reads a part its own signature leaves unsigned without naming it in `unsigned`, and
    /// every `[confirm]` reads only signed parts.
    #[test]
    fn every_preset_reads_unsigned_parts_only_by_name() {
        for preset in all() {
            let (Some(Format::Declared(format)), Some(scheme)) =
                (preset.format().expect("compiles"), preset.scheme(None).expect("compiles"))
            else {
                continue;
            };
            let spec = preset.signature.as_ref().expect("has a rule");
            let verifier = Verifier::new(scheme, &[Secret::new(test_secret(spec))], 300).expect("test key");
            let signed = verifier.signed_parts();
            format.check_signed(&signed).unwrap_or_else(|e| panic!("{}: format.{e}", preset.name));
            if let Some(confirm) = preset.confirm().unwrap_or_else(|e| panic!("{e}")) {
                let Scheme::Declared(d) = verifier.scheme() else { panic!("{}: confirm needs a rule", preset.name) };
                for part in confirm.reads() {
                    let covered = d.signed_parts().iter().any(|p| match p {
                        crate::signature::SignedPart::Query(q) => part == format!("query:{q}"),
                        crate::signature::SignedPart::Header(h) => part == format!("header:{h}"),
                        _ => false,
                    });
                    assert!(covered, "{}: confirm reads {part}, which the signature does not cover", preset.name);
                }
            }
        }
    }

    /// A format that reads an unsigned header is refused until it names the field, and a rule without a signed
    /// body cannot read the body unnoticed.
    #[test]
    fn a_field_read_from_an_unsigned_part_is_refused_unless_named() {
        let spec: crate::format::FormatSpec = toml::from_str(
            "event_id = \"/id\"\nevent_type = \"header:x-topic\"\norder_id = \"/order\"\n\
             [[events]]\ntype = \"paid\"\neffect = \"pay\"",
        )
        .expect("a format");
        let format = DeclaredFormat::new("declared", &spec).expect("compiles");
        let body_only = crate::request::SignedParts { body: true, headers: Vec::new() };
        let err = format.check_signed(&body_only).expect_err("the topic header is not signed");
        assert_eq!(err.key, "event_type");
        assert!(err.reason.contains("header:x-topic"), "{err}");
        let signed_topic = crate::request::SignedParts { body: true, headers: vec!["x-topic".into()] };
        format.check_signed(&signed_topic).expect("a signed header is fine");
        let no_body = crate::request::SignedParts { body: false, headers: vec!["x-topic".into()] };
        assert_eq!(format.check_signed(&no_body).expect_err("the body is not signed").key, "event_id");
        let named = crate::format::FormatSpec { unsigned: vec!["event_type".into()], ..spec };
        DeclaredFormat::new("declared", &named).expect("compiles").check_signed(&body_only).expect("named");
    }

    /// Every example renders to JSON that the preset's format reads to its rule's effect, with the order, amount
    /// and currency it was rendered with.
    #[test]
    fn every_preset_example_parses_to_its_effect() {
        for preset in all() {
            let Some(Format::Declared(format)) = preset.format().expect("compiles") else { continue };
            let effects: Vec<EffectSpec> = preset.examples.iter().filter_map(|e| format.effect_of(&e.event)).collect();
            let orders = effects.contains(&EffectSpec::Pay)
                && effects.iter().any(|e| matches!(e, EffectSpec::Refund | EffectSpec::Fail | EffectSpec::Dispute));
            let subscriptions = effects.contains(&EffectSpec::SubscriptionCreated)
                && effects.contains(&EffectSpec::SubscriptionDeleted);
            // A preset confirmed from the provider's API takes no effect from its notifications.
            assert!(
                orders
                    || subscriptions
                    || (preset.confirm.is_some() && effects.iter().all(|e| *e == EffectSpec::Ignore)),
                "{}: needs pay + refund/fail/dispute examples, or subscription created + deleted",
                preset.name
            );
            for example in &preset.examples {
                let name = format!("{} {}", preset.name, example.event);
                let effect = format.effect_of(&example.event).unwrap_or_else(|| panic!("{name}: no rule maps it"));
                let vars = ExampleVars::for_order("evt_0001", "ord_1042", 1999, "eur", 1_764_000_000);
                let rendered = example.render(&vars).unwrap_or_else(|e| panic!("{name}: {e}"));
                // The format reads the headers the delivery travels with, the signature's (a delivery id) included.
                let mut headers = rendered.headers.clone();
                if let Some(Ok(Some(scheme))) = preset.signature.as_ref().map(|_| preset.scheme(None)) {
                    let spec = preset.signature.as_ref().expect("has a rule");
                    let verifier = Verifier::new(scheme, &[Secret::new(test_secret(spec))], 300).expect("test key");
                    let url = "https://merchant.example/webhooks/test";
                    let context = RequestContext { url: Some(url), headers: &rendered.headers };
                    headers.extend(verifier.sign_with(&rendered.body, 1_764_000_000, "msg_0001", &context));
                }
                let events = Format::Declared(format.clone())
                    .parse_delivery(&headers, &rendered.body)
                    .unwrap_or_else(|e| panic!("{name}: {e}\n{}", String::from_utf8_lossy(&rendered.body)));
                let event = &events[0];
                match (&event.effect, effect.order_action()) {
                    (Effect::Order { order_id, action, money }, Some(expected)) => {
                        assert_eq!((order_id.as_str(), *action), ("ord_1042", expected), "{name}");
                        if let Some(money) = money {
                            assert_eq!((money.amount_minor, money.currency.as_str()), (1999, "eur"), "{name}");
                        }
                    }
                    (Effect::Subscription(_), None) if effect.name().starts_with("subscription") => {}
                    (Effect::Invoice(_), None) if effect.name().starts_with("invoice") => {}
                    (Effect::Ignored, None) if effect == EffectSpec::Ignore => {}
                    (got, _) => panic!("{name}: parsed to {got:?}, its rule says {}", effect.name()),
                }
                assert_eq!(event.event_type, example.event, "{name}");
            }
        }
    }

    /// Every rule signs and verifies its examples; another key, another body or a stale timestamp does not.
    #[test]
    fn every_preset_rule_verifies_what_it_signs_and_nothing_else() {
        for preset in all() {
            let Some(scheme) = preset.scheme(None).expect("compiles") else { continue };
            let spec = preset.signature.as_ref().expect("has a rule");
            let verifier = Verifier::new(scheme.clone(), &[Secret::new(test_secret(spec))], 300).expect("test key");
            let other = format!("{}x", test_secret(spec));
            let body_only = preset.examples.is_empty();
            let examples: Vec<RenderedExample> = if body_only {
                vec![RenderedExample { body: b"{\"id\":\"evt_1\"}".to_vec(), headers: Vec::new(), query: None }]
            } else {
                let vars = ExampleVars::for_order("evt_0002", "ord_7", 500, "usd", 1_764_000_000);
                preset.examples.iter().map(|e| e.render(&vars).expect("renders")).collect()
            };
            let now = 1_764_000_100;
            for RenderedExample { body, headers, query } in examples {
                let url = match &query {
                    Some(q) => format!("https://merchant.example/webhooks/{}?{q}", preset.name),
                    None => format!("https://merchant.example/webhooks/{}", preset.name),
                };
                let context = RequestContext { url: Some(&url), headers: &headers };
                let mut sent = headers.clone();
                sent.extend(verifier.sign_with(&body, now, "msg_2v9", &context));
                let request = Request { headers: &sent, url: &url };
                verifier.verify(&request, &body, now).unwrap_or_else(|e| panic!("{}: {e} {sent:?}", preset.name));
                let mut tampered = body.clone();
                tampered.push(b' ');
                let body_signed = !spec.unsigned_body && spec.algorithm != crate::signature::Algorithm::SharedSecret;
                let verdict = verifier.verify(&request, &tampered, now).is_err();
                assert_eq!(verdict, body_signed, "{}: a changed body (refused: {verdict})", preset.name);
                let forger = Verifier::new(scheme.clone(), &[Secret::new(other.clone())], 300);
                if let Ok(forger) = forger {
                    let mut forged = headers.clone();
                    forged.extend(forger.sign_with(&body, now, "msg_2v9", &context));
                    let request = Request { headers: &forged, url: &url };
                    assert_eq!(
                        verifier.verify(&request, &body, now).err(),
                        Some(VerifyError::Mismatch),
                        "{}: another key verified",
                        preset.name
                    );
                }
                if spec.timestamp_key.is_some() || spec.timestamp_header.is_some() {
                    let request = Request { headers: &sent, url: &url };
                    let err = verifier.verify(&request, &body, now + 301).unwrap_err();
                    assert!(matches!(err, VerifyError::Stale { .. }), "{}: {err}", preset.name);
                }
            }
        }
    }
}
