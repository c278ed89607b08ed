//! Example deliveries of the presets: a provider's documented payload with `{{placeholders}}`, rendered with fresh
//! ids, an order, an amount and a time. `payhook trigger` sends them, `Format::encode` writes them for a declared
//! format, and the presets' tests deliver them.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::common::currency_exponent;
use crate::event::Currency;

/// An example delivery of a preset, shaped like the provider's documented one, with `{{placeholders}}` (see
/// [`ExampleVars`]): what `payhook trigger` sends and the presets' tests deliver.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExampleSpec {
    /// The provider's event type.
    pub event: String,
    /// Unsigned headers the provider also sends.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The query string the provider appends to the notification URL.
    pub query: Option<String>,
    /// The body.
    pub body: String,
}

/// The values an example is rendered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExampleVars {
    /// `{{event_id}}`.
    pub event_id: String,
    /// `{{order_id}}`.
    pub order_id: String,
    /// `{{amount}}` (minor units) and `{{amount_major}}` (by the currency's exponent).
    pub amount_minor: i64,
    /// `{{currency}}` (lower case) and `{{CURRENCY}}` (upper case).
    pub currency: String,
    /// `{{created}}` (unix seconds), `{{created_ms}}` and `{{created_iso}}` (RFC 3339).
    pub created: i64,
    /// `{{object_id}}`: the provider's payment or charge.
    pub object_id: String,
    /// `{{customer_id}}`.
    pub customer_id: String,
    /// `{{subscription_id}}`.
    pub subscription_id: String,
    /// `{{invoice_id}}`.
    pub invoice_id: String,
}

impl ExampleVars {
    /// Values for an event about `order_id`: the provider's object, customer, subscription and invoice ids are
    /// derived from the order id, so that every event of one order names the same objects, as a provider's do.
    pub fn for_order(event_id: &str, order_id: &str, amount_minor: i64, currency: &str, created: i64) -> Self {
        use sha2::{Digest as _, Sha256};
        let tag = hex::encode(&Sha256::digest(order_id.as_bytes())[..8]);
        Self {
            event_id: event_id.to_owned(),
            order_id: order_id.to_owned(),
            amount_minor,
            currency: currency.to_ascii_lowercase(),
            created,
            object_id: format!("{tag}01"),
            customer_id: format!("{tag}02"),
            subscription_id: format!("{tag}03"),
            invoice_id: format!("{tag}04"),
        }
    }

    fn value(&self, name: &str) -> Option<String> {
        let exponent = Currency::parse(&self.currency).map_or(2, |c| currency_exponent(&c));
        Some(match name {
            "event_id" => self.event_id.clone(),
            "order_id" => self.order_id.clone(),
            "amount" => self.amount_minor.to_string(),
            "amount_major" => super::common::minor_to_decimal(self.amount_minor, exponent),
            "currency" => self.currency.clone(),
            "CURRENCY" => self.currency.to_ascii_uppercase(),
            "created" => self.created.to_string(),
            "created_ms" => (self.created * 1000).to_string(),
            "created_iso" => crate::time::rfc3339(self.created),
            "object_id" => self.object_id.clone(),
            "customer_id" => self.customer_id.clone(),
            "subscription_id" => self.subscription_id.clone(),
            "invoice_id" => self.invoice_id.clone(),
            _ => return None,
        })
    }
}

/// An example rendered: what a provider would send, signature aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedExample {
    /// The body.
    pub body: Vec<u8>,
    /// The unsigned headers.
    pub headers: Vec<(String, String)>,
    /// The query string, without `?`.
    pub query: Option<String>,
}

/// Replaces every `{{name}}` in `text`; `escape` writes values as the inside of a JSON string. An unknown name is
/// an error naming it.
fn fill(text: &str, vars: &ExampleVars, escape: bool) -> Result<String, String> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after.find("}}").ok_or_else(|| format!("unclosed {{{{ at {:?}", &rest[at..]))?;
        let name = &after[..end];
        let value = vars.value(name).ok_or_else(|| format!("unknown placeholder {{{{{name}}}}}"))?;
        if escape {
            let quoted = serde_json::to_string(&value).map_err(|e| e.to_string())?;
            out.push_str(&quoted[1..quoted.len() - 1]);
        } else {
            out.push_str(&value);
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

impl ExampleSpec {
    /// The example with `vars` filled in.
    pub fn render(&self, vars: &ExampleVars) -> Result<RenderedExample, String> {
        let headers = self
            .headers
            .iter()
            .map(|(k, v)| Ok((k.to_ascii_lowercase(), fill(v, vars, false)?)))
            .collect::<Result<Vec<_>, String>>()?;
        let query = self.query.as_deref().map(|q| fill(q, vars, false)).transpose()?;
        Ok(RenderedExample { body: fill(self.body.trim(), vars, true)?.into_bytes(), headers, query })
    }
}
