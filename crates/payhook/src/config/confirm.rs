//! A source's `confirm = "api"` and its keys: how a preset whose signature does not cover the body (Mercado Pago)
//! reads its effects from the provider's API.

use super::sources::{RawFormat, RawSource};
use anyhow::{Context, Result, bail};
use payhook_core::preset::Preset;
use payhook_core::signature::Secret;
use payhook_server::settings::ConfirmSettings;

/// `confirm = "api"` and its keys: required by a preset with a `[confirm]` table (its signature does not cover the
/// body, so its effects come from the provider's API), refused elsewhere.
pub(super) fn resolve_confirm(s: &mut RawSource) -> Result<Option<ConfirmSettings>> {
    let preset = match &s.format {
        RawFormat::Named(name) => Preset::get(name).transpose()?,
        RawFormat::Declared(_) => None,
    };
    let confirm = preset.as_ref().map(Preset::confirm).transpose()?.flatten();
    let keys_without_confirm =
        s.confirm_token.is_some() || s.confirm_token_env.is_some() || s.confirm_base_url.is_some();
    match (s.confirm.as_deref(), confirm) {
        (None, None) if keys_without_confirm => {
            bail!("confirm: confirm_token, confirm_token_env and confirm_base_url go with confirm = \"api\"")
        }
        (None, None) => Ok(None),
        (Some(other), _) if other != "api" => bail!("confirm: {other:?} is not \"api\""),
        (Some(_), None) => {
            bail!("confirm: only a preset with a [confirm] table (mercado-pago) is confirmed from its provider's API")
        }
        (None, Some(_)) => {
            let name = preset.as_ref().map_or("", |p| p.name);
            bail!(
                "confirm: the {name} preset's signature does not cover the body, so its effects are read from the \
                 provider's API: set confirm = \"api\" and confirm_token_env = \"…\" (the account's access token)"
            )
        }
        (Some(_), Some(confirm)) => {
            let token = match (s.confirm_token.take(), &s.confirm_token_env) {
                (Some(_), Some(_)) => bail!("confirm_token: give the token or confirm_token_env, not both"),
                (Some(token), None) => token,
                (None, Some(var)) => std::env::var(var)
                    .with_context(|| format!("confirm_token_env: environment variable {var} is not set"))?,
                (None, None) => bail!("confirm_token_env: confirm = \"api\" needs the provider's access token"),
            };
            if token.trim().is_empty() {
                bail!("confirm_token: the access token is empty");
            }
            let base_url = match s.confirm_base_url.take() {
                Some(url) => {
                    let parsed = reqwest::Url::parse(&url)
                        .ok()
                        .filter(|u| matches!(u.scheme(), "https" | "http") && u.host().is_some());
                    if parsed.is_none() {
                        bail!("confirm_base_url: {url:?} is not an http(s) URL");
                    }
                    url.trim_end_matches('/').to_owned()
                }
                None => confirm.base_url().to_owned(),
            };
            if s.confirm_timeout_ms == 0 || s.confirm_max_in_flight == 0 {
                bail!("confirm_timeout_ms and confirm_max_in_flight must be positive");
            }
            Ok(Some(ConfirmSettings {
                confirm: std::sync::Arc::new(confirm),
                base_url,
                token: Secret::new(token.trim().to_owned()),
                timeout_ms: s.confirm_timeout_ms,
                max_in_flight: s.confirm_max_in_flight,
            }))
        }
    }
}
