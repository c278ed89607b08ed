//! The `[[sources]]` table: each source's scheme (a built-in one, a preset, or its own `[signature]`), its format
//! (likewise), its secrets and the checks between them: no field that decides an effect reads a part the signature
//! does not cover, unless the format names it.

use super::confirm::resolve_confirm;
use anyhow::{Context, Result, bail};
use payhook_core::event::SourceName;
use payhook_core::format::{DeclaredFormat, Format, FormatSpec};
use payhook_core::preset::Preset;
use payhook_core::signature::{
    DEFAULT_REQUIRED_COMPONENTS, DeclaredScheme, Encoding, HmacAlgorithm, Scheme, Secret, SignatureSpec, Verifier,
};
use payhook_server::SourceSettings;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    pub(super) name: String,
    /// A built-in scheme or a preset; absent (or `"declared"`) with a `signature` table.
    pub(super) scheme: Option<String>,
    /// The source's own signature rule.
    pub(super) signature: Option<SignatureSpec>,
    /// What `{url}` stands for in a declared rule: the notification URL as registered with the provider.
    pub(super) notification_url: Option<String>,
    pub(super) format: RawFormat,
    /// Each a string, or `{ value = "…", not_after = "RFC 3339" }` for a secret being rotated out.
    #[serde(default)]
    pub(super) secrets: Vec<toml::Value>,
    pub(super) secrets_env: Option<String>,
    pub(super) tolerance_secs: Option<u64>,
    pub(super) header: Option<String>,
    pub(super) algorithm: Option<HmacAlgorithm>,
    pub(super) encoding: Option<Encoding>,
    pub(super) prefix: Option<String>,
    /// `http-message-signatures` only: the components every signature must cover.
    pub(super) required_components: Option<Vec<String>>,
    #[serde(default)]
    pub(super) forward: Vec<String>,
    #[serde(default)]
    pub(super) orders: payhook_server::settings::Orders,
    /// `"api"`: the effect is read from the provider's API (presets whose signature does not cover the body).
    pub(super) confirm: Option<String>,
    /// The provider's access token for `confirm = "api"`, or the environment variable holding it.
    pub(super) confirm_token: Option<String>,
    pub(super) confirm_token_env: Option<String>,
    /// The API's base URL, when not the preset's (a sandbox, a test server).
    pub(super) confirm_base_url: Option<String>,
    #[serde(default = "default_confirm_timeout_ms")]
    pub(super) confirm_timeout_ms: u64,
    #[serde(default = "default_confirm_max_in_flight")]
    pub(super) confirm_max_in_flight: usize,
}

fn default_confirm_timeout_ms() -> u64 {
    5_000
}
fn default_confirm_max_in_flight() -> usize {
    16
}

/// A source's format: a built-in format or a preset by name, or the source's own `[format]` table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawFormat {
    Named(String),
    Declared(Box<FormatSpec>),
}

/// The names `scheme = …` takes besides the presets.
pub const BUILT_IN_SCHEMES: [&str; 9] = [
    "stripe",
    "standard-webhooks",
    "github",
    "paystack",
    "shopify",
    "adyen",
    "braintree",
    "http-message-signatures",
    "hmac",
];

/// The scheme a source names, or declares in its `signature` table.
fn resolve_scheme(s: &mut RawSource) -> Result<Scheme> {
    let hmac_only = |key: &str, present: bool| -> Result<()> {
        if present {
            bail!("{key}: only the hmac scheme takes this key");
        }
        Ok(())
    };
    let name = s.scheme.as_deref().unwrap_or(if s.signature.is_some() { "declared" } else { "" });
    if name != "hmac" {
        hmac_only("header", s.header.is_some())?;
        hmac_only("algorithm", s.algorithm.is_some())?;
        hmac_only("encoding", s.encoding.is_some())?;
        hmac_only("prefix", s.prefix.is_some())?;
    }
    if s.signature.is_some() && name != "declared" {
        bail!("signature: a source with its own signature table has no scheme (or scheme = \"declared\")");
    }
    if s.notification_url.is_some() && (BUILT_IN_SCHEMES.contains(&name) || name.is_empty()) {
        bail!("notification_url: only a declared rule or a preset takes this key (it is what {{url}} stands for)");
    }
    if let Some(spec) = s.signature.take() {
        let scheme = DeclaredScheme::new("declared", spec, s.notification_url.clone())
            .map_err(|e| anyhow::anyhow!("signature.{e}"))?;
        return Ok(Scheme::Declared(std::sync::Arc::new(scheme)));
    }
    Ok(match name {
        "stripe" => Scheme::Stripe,
        "standard-webhooks" => Scheme::StandardWebhooks,
        "github" => Scheme::Github,
        "paystack" => Scheme::Paystack,
        "shopify" => Scheme::Shopify,
        "adyen" => Scheme::Adyen,
        "braintree" => Scheme::Braintree,
        "http-message-signatures" => Scheme::HttpMessageSignatures,
        "hmac" => Scheme::Hmac {
            header: s
                .header
                .take()
                .context("header: the hmac scheme needs the signature header's name")?
                .to_ascii_lowercase(),
            algorithm: s.algorithm.unwrap_or(HmacAlgorithm::Sha256),
            encoding: s.encoding.unwrap_or(Encoding::Hex),
            prefix: s.prefix.take().filter(|p| !p.is_empty()),
        },
        "" => {
            bail!("scheme: a source needs a scheme (a built-in one or a preset) or its own [sources.signature] table")
        }
        "declared" => bail!("scheme: \"declared\" needs a [sources.signature] table"),
        other => match Preset::get(other) {
            Some(preset) => match preset?.scheme(s.notification_url.clone())? {
                Some(scheme) => scheme,
                None => {
                    bail!("scheme: the {other} preset describes a payload format only; sign with a built-in scheme")
                }
            },
            None => bail!(
                "scheme: unknown scheme {other:?} (expected one of {}, a preset ({}), or a [sources.signature] table)",
                BUILT_IN_SCHEMES.join(", "),
                Preset::names()
                    .filter(|n| Preset::get(n).and_then(Result::ok).is_some_and(|p| p.signature.is_some()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    })
}

/// The format a source names, or declares in its `format` table.
fn resolve_format(format: &RawFormat) -> Result<Format> {
    match format {
        RawFormat::Declared(spec) => {
            let format = DeclaredFormat::new("declared", spec).map_err(|e| anyhow::anyhow!("format.{e}"))?;
            Ok(Format::Declared(std::sync::Arc::new(format)))
        }
        RawFormat::Named(name) => {
            if let Some(format) = Format::built_in(name) {
                return Ok(format);
            }
            match Preset::get(name) {
                Some(preset) => match preset?.format()? {
                    Some(format) => Ok(format),
                    None => bail!("format: the {name} preset has no payload format (it describes a signature only)"),
                },
                None => bail!(
                    "format: unknown format {name:?} (expected one of {}, a preset ({}), or a [sources.format] table)",
                    Format::ALL.iter().map(Format::name).collect::<Vec<_>>().join(", "),
                    Preset::names()
                        .filter(|n| Preset::get(n).and_then(Result::ok).is_some_and(|p| p.format.is_some()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    }
}

pub(super) fn resolve_source(mut s: RawSource) -> Result<SourceSettings> {
    let name = SourceName::parse(s.name.clone()).context("name")?;
    let scheme = resolve_scheme(&mut s)?;
    let format = resolve_format(&s.format)?;
    let mut secrets: Vec<Secret> = std::mem::take(&mut s.secrets)
        .into_iter()
        .enumerate()
        .map(|(i, v)| resolve_secret(v).with_context(|| format!("secrets[{i}]")))
        .collect::<Result<_>>()?;
    let now = payhook_server::now_ms() / 1000;
    if !secrets.is_empty() && secrets.iter().all(|s| s.not_after().is_some_and(|t| t < now)) {
        bail!("secrets: every secret is past its not_after, so every delivery would be refused; add the new secret");
    }
    if let Some(var) = &s.secrets_env {
        let value =
            std::env::var(var).with_context(|| format!("secrets_env: environment variable {var} is not set"))?;
        secrets.extend(value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(|v| Secret::new(v.to_owned())));
    }
    let mut verifier = Verifier::new(scheme, &secrets, s.tolerance_secs.unwrap_or(300)).context("secrets")?;
    if let Some(components) = s.required_components.take() {
        if *verifier.scheme() != Scheme::HttpMessageSignatures {
            bail!("required_components: only the http-message-signatures scheme takes this key");
        }
        if !components.iter().any(|c| c == "content-digest") {
            bail!(
                "required_components: must include \"content-digest\", or the signature would not cover the body \
                 (the default is {DEFAULT_REQUIRED_COMPONENTS:?})"
            );
        }
        verifier = verifier.with_required_components(&components).context("required_components")?;
    }
    // No field that decides an effect may read a part the signature leaves out, unless the format says so by name.
    let signed = verifier.signed_parts();
    match &format {
        Format::Declared(d) => d.check_signed(&signed).map_err(|e| anyhow::anyhow!("format.{e}"))?,
        // Adyen's format reads only the fields each item's signature covers.
        Format::Adyen if *verifier.scheme() == Scheme::Adyen => {}
        built_in if !signed.body => bail!(
            "format: {} reads the body, which the {} signature does not cover, so anyone could change it; declare \
             a [sources.format] table instead, naming the fields it reads unsigned (unsigned = [...])",
            built_in.name(),
            verifier.scheme().name()
        ),
        _ => {}
    }
    let confirm = resolve_confirm(&mut s)?;
    Ok(SourceSettings { name, verifier, format, forward: s.forward, orders: s.orders, confirm })
}

/// One entry of a source's `secrets`: `"…"`, or `{ value = "…", not_after = "2026-12-31T00:00:00Z" }` for a secret
/// accepted until that second (RFC 3339, with its zone; a TOML date-time without quotes is read the same way).
fn resolve_secret(entry: toml::Value) -> Result<Secret> {
    let mut table = match entry {
        toml::Value::String(value) => return Ok(Secret::new(value)),
        toml::Value::Table(table) => table,
        other => bail!("expected a string or {{ value = \"…\", not_after = \"…\" }}, not a {}", other.type_str()),
    };
    let value = match table.remove("value") {
        Some(toml::Value::String(value)) => value,
        Some(_) => bail!("value: must be a string"),
        None => bail!("value: missing (a secret with a not_after is written {{ value = \"…\", not_after = \"…\" }})"),
    };
    let not_after = match table.remove("not_after") {
        Some(toml::Value::String(text)) => text,
        Some(toml::Value::Datetime(at)) => at.to_string(),
        Some(_) => bail!("not_after: must be an RFC 3339 date-time such as \"2026-12-31T00:00:00Z\""),
        None => bail!("not_after: missing (without one, write the secret as a plain string)"),
    };
    if let Some(key) = table.keys().next() {
        bail!("{key}: unknown key (expected value and not_after)");
    }
    let at = rfc3339_secs(&not_after).with_context(|| {
        format!("not_after: {not_after:?} is not an RFC 3339 date-time with a zone, such as \"2026-12-31T00:00:00Z\"")
    })?;
    Ok(Secret::new(value).with_not_after(at))
}

/// Unix seconds of an RFC 3339 date-time, which (unlike the ISO 8601 providers send) must state its zone.
pub(super) fn rfc3339_secs(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let zoned = matches!(b.last(), Some(b'Z' | b'z'))
        || (b.len() > 6 && matches!(b[b.len() - 6], b'+' | b'-') && b[b.len() - 3] == b':');
    if !zoned || b.len() < 20 {
        return None;
    }
    payhook_core::time::parse_iso8601(text)
}
