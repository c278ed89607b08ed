//! `payhook send`: sign and POST a test event for a configured source, exactly as its provider would.

use crate::config::Config;
use anyhow::{Context, Result, bail};
use clap::Args;
use payhook_core::event::OrderAction;
use payhook_core::format::Outgoing;

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The configured source to send to.
    #[arg(long)]
    pub source: String,
    /// payhook's base URL (default: the configured listen address).
    #[arg(long)]
    pub url: Option<String>,
    /// Event type: payment.succeeded, payment.failed, payment.refunded or payment.disputed (sent in the source's
    /// format, e.g. payment_intent.succeeded for a Stripe source).
    #[arg(long = "type", default_value = "payment.succeeded")]
    pub event_type: String,
    /// The order the event is about.
    #[arg(long)]
    pub order: String,
    /// Amount in minor units.
    #[arg(long, default_value_t = 1999)]
    pub amount: i64,
    /// Currency code.
    #[arg(long, default_value = "usd")]
    pub currency: String,
    /// Event id (default: a random evt_… id).
    #[arg(long)]
    pub event_id: Option<String>,
    /// Deliver the same signed event this many times, as a retrying provider does.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
}

pub async fn run(cfg: Config, args: SendArgs) -> Result<()> {
    let src = cfg.source(&args.source)?;
    let Some(action) = OrderAction::from_generic_type(&args.event_type) else {
        bail!("--type: expected payment.succeeded, payment.failed, payment.refunded or payment.disputed");
    };
    let event_id = args.event_id.clone().unwrap_or_else(|| format!("evt_{:016x}", fastrand::u64(..)));
    let now = payhook_server::now_ms() / 1000;
    let outgoing = Outgoing {
        event_id: &event_id,
        action,
        order_id: &args.order,
        amount_minor: args.amount,
        currency: &args.currency,
        created: now,
    };
    if !src.format.encodes(action) {
        bail!("--type: the {} format has no event for {}", src.format.name(), args.event_type);
    }
    let url = format!("{}/webhooks/{}", cfg.base_url(args.url.as_deref()), src.name);
    let parsed_url = reqwest::Url::parse(&url).with_context(|| format!("--url: {url} is not a URL"))?;
    let request = src.provider_delivery(&outgoing, &parsed_url, now, &event_id).context("signing the test event")?;
    let client = reqwest::Client::new();
    for attempt in 1..=args.repeat.max(1) {
        let mut req = client.post(request.url.clone()).body(request.body.clone());
        for (name, value) in &request.headers {
            req = req.header(name, value);
        }
        let resp = req.send().await.with_context(|| format!("POST {url}"))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        println!("#{attempt} {} {status} {text}", event_id);
        if !status.is_success() {
            // A script must see that the delivery was refused (a wrong secret, an unknown source, an outage).
            bail!("payhook answered {status} to delivery #{attempt} of {event_id}");
        }
    }
    Ok(())
}
