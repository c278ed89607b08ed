//! `payhook trigger PROVIDER EVENT`: a realistic, correctly signed delivery shaped like the provider's own, to the
//! configured source of that provider — the way `stripe trigger` exercises an endpoint.
//!
//! A preset's delivery is one of its examples (shaped like the provider's documented example payload) with fresh
//! ids, the order, amount, currency and time filled in, signed with the source's first secret exactly as the
//! provider signs. A built-in format encodes the event as `payhook send` does.

use crate::config::Config;
use anyhow::{Context, Result, bail};
use clap::Args;
use payhook_core::event::OrderAction;
use payhook_core::format::{EffectSpec, ExampleVars, Format, Outgoing};
use payhook_server::SourceSettings;
use payhook_server::settings::ProviderRequest;

#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The provider: a preset (paddle, square, …) or a built-in format (stripe, paystack, shopify, adyen, braintree,
    /// generic).
    pub provider: String,
    /// The provider's event type (such as transaction.completed), or the effect it has (pay, refund, fail, dispute,
    /// subscription.created, …); an unknown one lists the provider's events.
    pub event: String,
    /// The order the event is about (default: a random ord_… id).
    #[arg(long)]
    pub order: Option<String>,
    /// The configured source to deliver to (default: the one source whose format is PROVIDER).
    #[arg(long)]
    pub source: Option<String>,
    /// payhook's base URL (default: the configured listen address).
    #[arg(long)]
    pub url: Option<String>,
    /// Amount in minor units.
    #[arg(long, default_value_t = 1999)]
    pub amount: i64,
    /// Currency code.
    #[arg(long, default_value = "usd")]
    pub currency: String,
    /// Deliver the same signed event this many times, as a retrying provider does.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Print the delivery (method, URL, headers, body) as JSON instead of sending it.
    #[arg(long)]
    pub print: bool,
}

/// The source that takes `provider`'s deliveries: `--source`, else the only one with that format.
fn source_for<'a>(cfg: &'a Config, provider: &str, name: Option<&str>) -> Result<&'a SourceSettings> {
    if let Some(name) = name {
        return cfg.source(name);
    }
    let matching: Vec<&SourceSettings> = cfg.settings.sources.iter().filter(|s| s.format.name() == provider).collect();
    match matching[..] {
        [one] => Ok(one),
        [] => bail!(
            "no configured source has format = {provider:?}; add one, for example:\n\n[[sources]]\nname = \
             \"{provider}\"\nscheme = \"{provider}\"\nformat = \"{provider}\"\nsecrets_env = \"{}_SECRET\"",
            provider.to_ascii_uppercase().replace('-', "_")
        ),
        _ => {
            let names: Vec<&str> = matching.iter().map(|s| s.name.as_str()).collect();
            bail!("several sources have format = {provider:?} ({}): choose one with --source", names.join(", "))
        }
    }
}

/// The delivery `args` asks for, signed at `now` for `base` (payhook's base URL).
pub fn delivery(cfg: &Config, args: &TriggerArgs, base: &str, now: i64) -> Result<ProviderRequest> {
    let src = source_for(cfg, &args.provider, args.source.as_deref())?;
    let event_id = format!("evt_{:016x}", fastrand::u64(..));
    let order = args.order.clone().unwrap_or_else(|| format!("ord_{:08x}", fastrand::u32(..)));
    let url = reqwest::Url::parse(&format!("{base}/webhooks/{}", src.name))
        .with_context(|| format!("--url: {base} is not a URL"))?;
    if let Format::Declared(format) = &src.format {
        let example = format
            .examples()
            .iter()
            .find(|e| e.event == args.event)
            .or_else(|| {
                let effect = format.examples().iter().filter_map(|e| format.effect_of(&e.event));
                effect.clone().find(|e| e.name() == args.event).and_then(|e| format.example_for(e))
            })
            .with_context(|| {
                let events: Vec<String> = format
                    .examples()
                    .iter()
                    .map(|e| format!("{} ({})", e.event, format.effect_of(&e.event).map_or("?", EffectSpec::name)))
                    .collect();
                format!("{}: no example for {:?}; it has: {}", args.provider, args.event, events.join(", "))
            })?;
        let vars = ExampleVars::for_order(&event_id, &order, args.amount, &args.currency, now);
        let rendered = example.render(&vars).map_err(anyhow::Error::msg)?;
        let mut url = url;
        url.set_query(rendered.query.as_deref());
        return src.sign_request(url, rendered.body, rendered.headers, now, &event_id).context("signing the delivery");
    }
    let action = OrderAction::ALL
        .into_iter()
        .find(|a| EffectSpec::from(*a).name() == args.event)
        .or_else(|| OrderAction::from_generic_type(&args.event))
        .with_context(|| format!("{}: expected pay, refund, fail or dispute", args.provider))?;
    if !src.format.encodes(action) {
        bail!("{}: the provider sends no event for {}", args.provider, args.event);
    }
    let outgoing = Outgoing {
        event_id: &event_id,
        action,
        order_id: &order,
        amount_minor: args.amount,
        currency: &args.currency,
        created: now,
    };
    src.provider_delivery(&outgoing, &url, now, &event_id).context("signing the delivery")
}

pub async fn run(cfg: Config, args: TriggerArgs) -> Result<()> {
    let base = cfg.base_url(args.url.as_deref());
    let request = delivery(&cfg, &args, &base, payhook_server::now_ms() / 1000)?;
    if args.print {
        let headers: serde_json::Map<String, serde_json::Value> =
            request.headers.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
        let printed = serde_json::json!({
            "method": "POST",
            "url": request.url.as_str(),
            "headers": headers,
            "body": String::from_utf8_lossy(&request.body),
        });
        println!("{printed}");
        return Ok(());
    }
    let client = reqwest::Client::new();
    for attempt in 1..=args.repeat.max(1) {
        let mut req = client.post(request.url.clone()).body(request.body.clone());
        for (name, value) in &request.headers {
            req = req.header(name, value);
        }
        let resp = req.send().await.with_context(|| format!("POST {}", request.url))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        println!("#{attempt} {} {} {status} {text}", args.provider, args.event);
        if !status.is_success() {
            bail!("payhook answered {status} to delivery #{attempt}");
        }
    }
    Ok(())
}
