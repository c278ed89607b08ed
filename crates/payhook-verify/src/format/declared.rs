//! Declarative payload formats: where a provider's event keeps its id, type, time, order, amount and billing ids,
//! written as JSON pointers, headers and templates (a `[format]` table), with a table from the provider's event
//! types to payhook's effects.
//!
//! **Values.** Each field is a value expression: a JSON pointer (`/data/id`; numbers read as their decimal text),
//! a header (`header:x-github-event`), a template mixing both with literal text (`{header:x-github-event}.{/action}`),
//! a literal (`active`), or a list of those, of which the first that is present (not absent, null or empty) counts.
//!
//! **Rules.** `[[format.events]]` are tried in order: the first whose `type` is the event's type and whose `when`
//! conditions hold decides the effect, and may override any field for that event. An event no rule matches is
//! recorded as ignored. A rule's effect needs its ids: an order effect its order id (and a payment its amount and
//! currency, when the format reads amounts at all), a subscription its subscription id, an invoice its invoice id;
//! a missing one is a [`ParseError`], kept as a dead letter.
//!
//! **Keys.** The event id is the `event_id` value (build one from stable fields when the provider sends none); the
//! business key is the `business_key` template (default `{type}:{object_id}`, where an absent object id stands for
//! the event id).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::ParseError;
use super::common::ended_status;
use crate::event::SubscriptionId;
use crate::event::{
    Currency, CustomerId, Effect, Event, EventId, InvalidValue, InvoiceId, Money, OrderAction, OrderId,
};
use crate::event::{InvoiceAction, InvoiceChange, SubscriptionAction, SubscriptionChange, SubscriptionStatus};
use crate::request::Headers;

use super::example::ExampleSpec;

mod compile;
mod read;
mod signed;

use compile::{Field, Fields, Var, compile_field};
use read::{Input, amount_minor, missing, time_of};

use signed::UNSIGNABLE;

/// A value expression as written: one, or a list whose first present value counts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ValueSpec {
    /// One expression.
    One(String),
    /// The first present of several.
    FirstOf(Vec<String>),
}

/// What a `when` condition accepts: one string or any of a list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Accepted {
    /// Exactly this.
    One(String),
    /// Any of these.
    Any(Vec<String>),
}

/// The effect a rule gives an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum EffectSpec {
    /// The order is paid.
    #[serde(rename = "pay")]
    Pay,
    /// The order is refunded.
    #[serde(rename = "refund")]
    Refund,
    /// The order's payment failed.
    #[serde(rename = "fail")]
    Fail,
    /// The order's payment is disputed.
    #[serde(rename = "dispute")]
    Dispute,
    /// A subscription was created.
    #[serde(rename = "subscription.created")]
    SubscriptionCreated,
    /// A subscription changed.
    #[serde(rename = "subscription.updated")]
    SubscriptionUpdated,
    /// A subscription ended.
    #[serde(rename = "subscription.deleted")]
    SubscriptionDeleted,
    /// An invoice was paid: its entitlement is granted.
    #[serde(rename = "invoice.paid")]
    InvoicePaid,
    /// An invoice's payment failed.
    #[serde(rename = "invoice.failed")]
    InvoiceFailed,
    /// An invoice's payment was refunded: its entitlement is revoked.
    #[serde(rename = "invoice.refunded")]
    InvoiceRefunded,
    /// Recorded and answered `ignored`.
    #[serde(rename = "ignore")]
    Ignore,
}

impl EffectSpec {
    /// The order action, for the order effects.
    pub fn order_action(self) -> Option<OrderAction> {
        Some(match self {
            Self::Pay => OrderAction::Pay,
            Self::Refund => OrderAction::Refund,
            Self::Fail => OrderAction::Fail,
            Self::Dispute => OrderAction::Dispute,
            _ => return None,
        })
    }

    /// The name it is written with.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pay => "pay",
            Self::Refund => "refund",
            Self::Fail => "fail",
            Self::Dispute => "dispute",
            Self::SubscriptionCreated => "subscription.created",
            Self::SubscriptionUpdated => "subscription.updated",
            Self::SubscriptionDeleted => "subscription.deleted",
            Self::InvoicePaid => "invoice.paid",
            Self::InvoiceFailed => "invoice.failed",
            Self::InvoiceRefunded => "invoice.refunded",
            Self::Ignore => "ignore",
        }
    }
}

/// How amounts are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AmountUnit {
    /// In the currency's minor unit (cents): an integer, or a string of digits.
    #[default]
    Minor,
    /// In major units (`"24.00"`, `24.5`), scaled by the currency's exponent (2 for most, 0 for the yen, 3 for the
    /// dinars).
    Major,
}

/// A `[format]` table as written, or one of its `[[format.events]]` rules (which take `type`, `effect` and `when`,
/// and override the fields; the table takes `batch` and `events`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatSpec {
    /// A pointer to an array of events, for providers that send several in one body.
    pub batch: Option<String>,
    /// The event id.
    pub event_id: Option<ValueSpec>,
    /// The event type, matched against the rules' `type`.
    pub event_type: Option<ValueSpec>,
    /// When it happened: unix seconds (or milliseconds, above 10^12) or an ISO 8601 date-time.
    pub occurred_at: Option<ValueSpec>,
    /// The provider object it is about (the business key's `{object_id}`).
    pub object_id: Option<ValueSpec>,
    /// The merchant's order id.
    pub order_id: Option<ValueSpec>,
    /// The amount.
    pub amount: Option<ValueSpec>,
    /// The amount's unit.
    pub amount_unit: Option<AmountUnit>,
    /// The currency.
    pub currency: Option<ValueSpec>,
    /// The customer.
    pub customer_id: Option<ValueSpec>,
    /// The subscription.
    pub subscription_id: Option<ValueSpec>,
    /// The invoice.
    pub invoice_id: Option<ValueSpec>,
    /// A subscription's status after the event.
    pub status: Option<ValueSpec>,
    /// A subscription's current period end.
    pub period_end: Option<ValueSpec>,
    /// The business key template.
    pub business_key: Option<String>,
    /// The rules, in order.
    #[serde(default)]
    pub events: Vec<FormatSpec>,
    /// A rule's event type.
    #[serde(rename = "type")]
    pub event: Option<String>,
    /// A rule's effect.
    pub effect: Option<EffectSpec>,
    /// A rule's conditions: each value expression must give the string, or one of the list; `""` stands for an
    /// absent value (absent, null or empty) and `"*"` for any present one.
    #[serde(default)]
    pub when: BTreeMap<String, Accepted>,
    /// The `[format]` table only: the fields (`event_id`, `event_type`, `order_id`, …, `when`) that knowingly read
    /// parts the source's signature does not cover. A field that does, and is not named here, is refused when the
    /// source is configured ([`DeclaredFormat::check_signed`]), so that no unsigned byte decides an effect unnoticed.
    #[serde(default)]
    pub unsigned: Vec<String>,
}

/// Why a format table cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct FormatSpecError {
    /// The key at fault (`event_id`, `events[2].effect`, …).
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

/// One compiled rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    event: String,
    effect: EffectSpec,
    when: Vec<(Field, Vec<String>)>,
    fields: Fields,
}

/// A checked, compiled payload format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredFormat {
    name: String,
    unsigned: Vec<String>,
    batch: Option<String>,
    fields: Fields,
    rules: Vec<Rule>,
    examples: Vec<ExampleSpec>,
}

impl DeclaredFormat {
    /// Checks `spec` and compiles it under `name` (a preset's name, or `declared`).
    pub fn new(name: &str, spec: &FormatSpec) -> Result<Self, FormatSpecError> {
        let top = |key: &str, reason: &str| FormatSpecError { key: key.to_owned(), reason: reason.to_owned() };
        if spec.event.is_some() || spec.effect.is_some() || !spec.when.is_empty() {
            return Err(top("type", "type, effect and when belong in a [[format.events]] rule"));
        }
        if spec.event_id.is_none() {
            return Err(top("event_id", "is required: where the event's id is (or a template that builds one)"));
        }
        if spec.event_type.is_none() {
            return Err(top("event_type", "is required: where the event's type is"));
        }
        if let Some(batch) = &spec.batch
            && !batch.starts_with('/')
        {
            return Err(top("batch", "must be a JSON pointer such as /events"));
        }
        let fields = Fields::compile(spec, "")?;
        let mut rules = Vec::with_capacity(spec.events.len());
        for (i, rule) in spec.events.iter().enumerate() {
            let at = format!("events[{i}].");
            let err =
                |key: &str, reason: &str| FormatSpecError { key: format!("{at}{key}"), reason: reason.to_owned() };
            if rule.batch.is_some() || !rule.events.is_empty() {
                return Err(err("batch", "batch and events belong in the [format] table, not in a rule"));
            }
            let event = rule.event.clone().ok_or_else(|| err("type", "is required: the provider's event type"))?;
            let effect = rule.effect.ok_or_else(|| err("effect", "is required"))?;
            let when = rule
                .when
                .iter()
                .map(|(k, accepted)| {
                    let field = compile_field(&ValueSpec::One(k.clone())).map_err(|e| err("when", &e))?;
                    let values = match accepted {
                        Accepted::One(v) => vec![v.clone()],
                        Accepted::Any(list) => list.clone(),
                    };
                    Ok((field, values))
                })
                .collect::<Result<Vec<_>, FormatSpecError>>()?;
            let fields = Fields::compile(rule, &at)?;
            rules.push(Rule { event, effect, when, fields });
        }
        for (i, rule) in spec.events.iter().enumerate() {
            if !rule.unsigned.is_empty() {
                return Err(top(&format!("events[{i}].unsigned"), "belongs in the [format] table, not in a rule"));
            }
        }
        for field in &spec.unsigned {
            if !UNSIGNABLE.contains(&field.as_str()) {
                return Err(FormatSpecError {
                    key: "unsigned".into(),
                    reason: format!("{field:?} is not a field (expected any of {})", UNSIGNABLE.join(", ")),
                });
            }
        }
        let format = Self {
            name: name.to_owned(),
            unsigned: spec.unsigned.clone(),
            batch: spec.batch.clone(),
            fields,
            rules,
            examples: Vec::new(),
        };
        for (i, rule) in format.rules.iter().enumerate() {
            let need = |present: bool, key: &str| {
                if present {
                    Ok(())
                } else {
                    Err(FormatSpecError {
                        key: format!("events[{i}].{key}"),
                        reason: format!("a {} rule needs it, here or in [format]", rule.effect.name()),
                    })
                }
            };
            let f = |get: fn(&Fields) -> bool| get(&rule.fields) || get(&format.fields);
            if rule.effect.order_action().is_some() {
                need(f(|x| x.order_id.is_some()), "order_id")?;
            }
            if rule.effect == EffectSpec::Pay && f(|x| x.amount.is_some()) {
                need(f(|x| x.currency.is_some()), "currency")?;
            }
            if matches!(
                rule.effect,
                EffectSpec::SubscriptionCreated | EffectSpec::SubscriptionUpdated | EffectSpec::SubscriptionDeleted
            ) {
                need(f(|x| x.subscription_id.is_some()), "subscription_id")?;
            }
            if matches!(rule.effect, EffectSpec::InvoicePaid | EffectSpec::InvoiceFailed | EffectSpec::InvoiceRefunded)
            {
                need(f(|x| x.invoice_id.is_some()), "invoice_id")?;
            }
        }
        Ok(format)
    }

    /// The name it was compiled under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The provider event types its rules map, with their effects, in rule order.
    pub fn mapped(&self) -> impl Iterator<Item = (&str, EffectSpec)> {
        self.rules.iter().map(|r| (r.event.as_str(), r.effect))
    }

    /// The events of one delivery, in the order of the body.
    pub fn parse(&self, headers: &(impl Headers + ?Sized), root: &Value) -> Result<Vec<Event>, ParseError> {
        match &self.batch {
            None => Ok(vec![self.parse_one(headers, root)?]),
            Some(pointer) => {
                let items = crate::json_pointer::get(root, pointer)
                    .and_then(Value::as_array)
                    .ok_or_else(|| ParseError::Field(pointer.clone()))?;
                if items.is_empty() {
                    return Err(ParseError::Field(format!("{pointer}/0")));
                }
                items.iter().map(|item| self.parse_one(headers, item)).collect()
            }
        }
    }

    fn parse_one(&self, headers: &(impl Headers + ?Sized), root: &Value) -> Result<Event, ParseError> {
        let input = Input { root, headers };
        let base = &self.fields;
        let type_field = base.event_type.as_ref().ok_or(ParseError::Missing("event_type"))?;
        let event_type = input.eval(type_field).ok_or_else(|| missing(type_field))?;
        let rule = self.rules.iter().find(|r| {
            r.event == event_type
                && r.when.iter().all(|(field, accepted)| match input.eval(field) {
                    // `""` accepts an absent value, `"*"` any present one.
                    None => accepted.iter().any(String::is_empty),
                    Some(v) => accepted.iter().any(|a| *a == v || a == "*"),
                })
        });
        let pick =
            |get: fn(&Fields) -> &Option<Field>| rule.and_then(|r| get(&r.fields).as_ref()).or(get(base).as_ref());
        let value = |get: fn(&Fields) -> &Option<Field>| pick(get).and_then(|f| input.eval(f));
        let required = |get: fn(&Fields) -> &Option<Field>| match pick(get) {
            Some(f) => input.eval(f).ok_or_else(|| missing(f)),
            None => Err(ParseError::Missing("a field the rule needs")),
        };
        let id_field = pick(|f| &f.event_id).ok_or(ParseError::Missing("event_id"))?;
        let event_id = EventId::parse(input.eval(id_field).ok_or_else(|| missing(id_field))?)?;
        let occurred_at = match pick(|f| &f.occurred_at) {
            Some(f) => match input.eval(f) {
                Some(text) => Some(time_of(&text).ok_or(ParseError::Invalid(InvalidValue {
                    field: "occurred_at",
                    reason: "must be unix seconds, unix milliseconds or an ISO 8601 date-time",
                }))?),
                None => None,
            },
            None => None,
        };
        let object_id = value(|f| &f.object_id);
        let effect_spec = rule.map_or(EffectSpec::Ignore, |r| r.effect);
        let money = || -> Result<Option<Money>, ParseError> {
            // A payment of a format that reads amounts must carry one; other effects may go without.
            let (amount, currency) = if effect_spec == EffectSpec::Pay && pick(|f| &f.amount).is_some() {
                (required(|f| &f.amount)?, required(|f| &f.currency)?)
            } else {
                match (value(|f| &f.amount), value(|f| &f.currency)) {
                    (Some(amount), Some(currency)) => (amount, currency),
                    _ => return Ok(None),
                }
            };
            let currency = Currency::parse(&currency)?;
            let unit = rule.and_then(|r| r.fields.amount_unit).or(base.amount_unit).unwrap_or_default();
            Ok(Some(Money::new(amount_minor(&amount, unit, &currency)?, currency)?))
        };
        let effect = match effect_spec {
            EffectSpec::Ignore => Effect::Ignored,
            e if e.order_action().is_some() => Effect::Order {
                order_id: OrderId::parse(required(|f| &f.order_id)?)?,
                action: e.order_action().unwrap_or(OrderAction::Pay),
                money: money()?,
            },
            EffectSpec::SubscriptionCreated | EffectSpec::SubscriptionUpdated | EffectSpec::SubscriptionDeleted => {
                let action = match effect_spec {
                    EffectSpec::SubscriptionCreated => SubscriptionAction::Created,
                    EffectSpec::SubscriptionUpdated => SubscriptionAction::Updated,
                    _ => SubscriptionAction::Deleted,
                };
                let customer_id = value(|f| &f.customer_id).map(CustomerId::parse).transpose()?;
                let stated = value(|f| &f.status);
                let status = match action {
                    SubscriptionAction::Deleted => ended_status(stated.as_deref())?,
                    _ => SubscriptionStatus::parse(stated.as_deref().unwrap_or("active"))?,
                };
                if occurred_at.is_none() {
                    // The billing rules order a subscription's events by their time.
                    return Err(pick(|f| &f.occurred_at).map_or(ParseError::Missing("occurred_at"), missing));
                }
                let current_period_end = value(|f| &f.period_end).and_then(|t| time_of(&t));
                Effect::Subscription(SubscriptionChange {
                    subscription_id: SubscriptionId::parse(required(|f| &f.subscription_id)?)?,
                    full_object: customer_id.is_some() && stated.is_some(),
                    customer_id,
                    action,
                    status,
                    current_period_end,
                })
            }
            _ => {
                let action = match effect_spec {
                    EffectSpec::InvoicePaid => InvoiceAction::Paid,
                    EffectSpec::InvoiceFailed => InvoiceAction::PaymentFailed,
                    _ => InvoiceAction::Refunded,
                };
                Effect::Invoice(InvoiceChange {
                    invoice_id: InvoiceId::parse(required(|f| &f.invoice_id)?)?,
                    customer_id: value(|f| &f.customer_id).map(CustomerId::parse).transpose()?,
                    subscription_id: value(|f| &f.subscription_id).map(SubscriptionId::parse).transpose()?,
                    action,
                    money: money()?,
                })
            }
        };
        let business_key = {
            let vars = |v: Var| match v {
                Var::Type => Some(event_type.clone()),
                Var::EventId => Some(event_id.as_str().to_owned()),
                Var::ObjectId => Some(object_id.clone().unwrap_or_else(|| event_id.as_str().to_owned())),
                Var::OrderId => value(|f| &f.order_id),
                Var::InvoiceId => value(|f| &f.invoice_id),
                Var::SubscriptionId => value(|f| &f.subscription_id),
            };
            let template = rule.and_then(|r| r.fields.business_key.as_ref()).or(base.business_key.as_ref());
            match template {
                Some(pieces) => input.render_or_absent(pieces, &vars).map_err(ParseError::Field)?,
                None => format!("{event_type}:{}", object_id.as_deref().unwrap_or(event_id.as_str())),
            }
        };
        Ok(Event { event_id, event_type, occurred_at: occurred_at.unwrap_or(0), business_key, effect })
    }
}

impl DeclaredFormat {
    /// The same format with example deliveries, which `Format::encode` then writes.
    pub fn with_examples(mut self, examples: Vec<ExampleSpec>) -> Self {
        self.examples = examples;
        self
    }

    /// Its examples.
    pub fn examples(&self) -> &[ExampleSpec] {
        &self.examples
    }

    /// The effect the rules give an example's event type (its first rule; `when` conditions aside).
    pub fn effect_of(&self, event: &str) -> Option<EffectSpec> {
        self.rules.iter().find(|r| r.event == event).map(|r| r.effect)
    }

    /// The first example whose event has `effect`.
    pub fn example_for(&self, effect: EffectSpec) -> Option<&ExampleSpec> {
        self.examples.iter().find(|e| self.effect_of(&e.event) == Some(effect))
    }
}
