//! Payload formats: a provider's delivery, already verified, becomes one or more [`Event`]s.
//!
//! A format decides the event id, the business key and the effect. Types a format does not know become
//! [`Effect::Ignored`]; a body that cannot be understood at all is a [`ParseError`], which the pipeline keeps as a
//! dead letter (the delivery verified, so payhook owns it).
//!
//! Layout: one file per provider ([`generic`](Format::Generic), [`stripe`](Format::Stripe),
//! [`paystack`](Format::Paystack), [`shopify`](Format::Shopify), [`adyen`](Format::Adyen),
//! [`braintree`](Format::Braintree)), each with its `parse` and `encode`, and `common` for the field readers, ISO 8601 timestamps and decimal amounts they share.
//! Each provider's file documents its event-id and business-key rules.
//!
//! [`Effect::Ignored`]: crate::event::Effect::Ignored

mod adyen;
mod braintree;
mod common;
mod declared;
mod example;
mod generic;
mod paystack;
mod shopify;
mod stripe;

pub use declared::{Accepted, AmountUnit, DeclaredFormat, EffectSpec, FormatSpec, FormatSpecError, ValueSpec};
pub use example::{ExampleSpec, ExampleVars, RenderedExample};

use crate::event::{Event, InvalidValue, OrderAction};
use crate::request::Headers;
use serde_json::Value;
use std::sync::Arc;

/// The payload formats payhook understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// `{"id","type","created","data":{...}}` with `payment.*`, `subscription.*` and `invoice.*` types.
    Generic,
    /// Stripe's event objects (`payment_intent.*`, `charge.*`, `checkout.session.completed`,
    /// `customer.subscription.*`, `invoice.*`).
    Stripe,
    /// Paystack's `{"event","data"}` bodies, which carry no event id (`charge.success`, `refund.processed`,
    /// `charge.dispute.create`, `subscription.*`, `invoice.*`).
    Paystack,
    /// Shopify's resource bodies; the topic and the event id travel in `X-Shopify-*` headers (`orders/paid`,
    /// `orders/cancelled`, `refunds/create`, `disputes/create`).
    Shopify,
    /// Adyen's standard notifications: a batch of `NotificationRequestItem`s, one event each (`AUTHORISATION`,
    /// `REFUND`, `CHARGEBACK`).
    Adyen,
    /// Braintree's notifications: a form body whose `bt_payload` is the base64 of an XML `<notification>`
    /// (`transaction_settled`, `dispute_opened`, `subscription_charged_successfully`, `subscription_canceled`, …).
    Braintree,
    /// A format written as data (a source's `[format]` table, or a preset's): see [`DeclaredFormat`].
    Declared(Arc<DeclaredFormat>),
}

/// Why a verified body could not be turned into an event. The message is stored as the dead letter's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The body is not JSON.
    #[error("body is not valid JSON: {0}")]
    Json(String),
    /// The payload is not well-formed XML, or holds a DTD (Braintree's notifications are XML).
    #[error("payload is not acceptable XML: {0}")]
    Xml(String),
    /// A field the format needs is absent or has the wrong JSON type.
    #[error("missing or mistyped field `{0}`")]
    Missing(&'static str),
    /// A field a declarative format needs is absent (named as the format writes it: a pointer, a header, …).
    #[error("missing or mistyped field `{0}`")]
    Field(String),
    /// A header the format needs is absent (Shopify sends its topic and event id in headers).
    #[error("missing header `{0}`")]
    MissingHeader(&'static str),
    /// The body holds several events (an Adyen batch) where exactly one was expected.
    #[error("the body holds {0} events where one was expected; read it with `Format::parse_delivery`")]
    NotSingle(usize),
    /// An unsigned header that decides the effect is not confirmed by the signed body (Shopify's topic: the body
    /// is not the kind of resource the header names). The delivery is kept as a dead letter, with no effect.
    #[error("the unsigned header `{header}` is not confirmed by the signed body, which is not {needs}")]
    Unconfirmed {
        /// The header.
        header: &'static str,
        /// What the body would have to be.
        needs: &'static str,
    },
    /// A field is present but its value is not acceptable.
    #[error("invalid value: {0}")]
    Invalid(#[from] InvalidValue),
}

impl Format {
    /// Every format written in code, for tests and listings.
    pub const ALL: [Format; 6] =
        [Format::Generic, Format::Stripe, Format::Paystack, Format::Shopify, Format::Adyen, Format::Braintree];

    /// The format written in code that is called `name` (`generic`, `stripe`, `paystack`, `shopify`, `adyen`,
    /// `braintree`).
    pub fn built_in(name: &str) -> Option<Format> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Its name: the built-in formats' kebab-case name, a declared format's preset name (or `declared`).
    pub fn name(&self) -> &str {
        match self {
            Format::Generic => "generic",
            Format::Stripe => "stripe",
            Format::Paystack => "paystack",
            Format::Shopify => "shopify",
            Format::Adyen => "adyen",
            Format::Braintree => "braintree",
            Format::Declared(d) => d.name(),
        }
    }

    /// Parses a verified delivery, its headers (looked up by lowercase name) and its body, into the events it
    /// carries: always at least one, several for an Adyen batch (or a declared format's `batch`), in the order of
    /// the body.
    pub fn parse_delivery(&self, headers: &(impl Headers + ?Sized), body: &[u8]) -> Result<Vec<Event>, ParseError> {
        let json = || serde_json::from_slice::<Value>(body).map_err(|e| ParseError::Json(e.to_string()));
        match self {
            Format::Generic => generic::parse(headers, &json()?).map(|e| vec![e]),
            Format::Stripe => stripe::parse(&json()?).map(|e| vec![e]),
            Format::Paystack => paystack::parse(&json()?).map(|e| vec![e]),
            Format::Shopify => shopify::parse(headers, &json()?).map(|e| vec![e]),
            Format::Adyen => adyen::parse(&json()?),
            // A form whose payload is XML.
            Format::Braintree => braintree::parse(body).map(|e| vec![e]),
            Format::Declared(d) => d.parse(headers, &json()?),
        }
    }

    /// Parses a verified body that carries exactly one event, without headers. Shopify always needs its headers
    /// ([`ParseError::MissingHeader`]); an Adyen batch of several items is [`ParseError::NotSingle`].
    pub fn parse(&self, body: &[u8]) -> Result<Event, ParseError> {
        let no_headers: [(&str, &str); 0] = [];
        let mut events = self.parse_delivery(&no_headers, body)?;
        match events.pop() {
            Some(event) if events.is_empty() => Ok(event),
            _ => Err(ParseError::NotSingle(events.len() + 1)),
        }
    }

    /// Whether the provider has an event for `action`, so that [`Format::encode`] writes this format's body.
    ///
    /// Paystack and Shopify send no webhook for a failed payment, Braintree none for a refund: for those they
    /// encode the generic format's body instead (which a source of that format rejects as unreadable), so that
    /// `payhook send` and the benchmark can still exercise the pipeline.
    /// A declared format encodes the actions its examples show.
    pub fn encodes(&self, action: OrderAction) -> bool {
        match self {
            Format::Declared(d) => d.example_for(EffectSpec::from(action)).is_some(),
            _ => !matches!(
                (self, action),
                (Format::Paystack | Format::Shopify, OrderAction::Fail) | (Format::Braintree, OrderAction::Refund)
            ),
        }
    }
}

/// An event to encode the way a provider would send it: for `payhook send`, the benchmark and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing<'a> {
    /// The provider's event id.
    pub event_id: &'a str,
    /// What happened.
    pub action: OrderAction,
    /// The merchant's order id.
    pub order_id: &'a str,
    /// Amount in minor units.
    pub amount_minor: i64,
    /// Currency code.
    pub currency: &'a str,
    /// Provider time, unix seconds.
    pub created: i64,
}

impl OrderAction {
    /// The generic format's name for the action (`payment.succeeded`, …), also accepted by `payhook send`.
    pub fn generic_type(self) -> &'static str {
        match self {
            Self::Pay => "payment.succeeded",
            Self::Fail => "payment.failed",
            Self::Refund => "payment.refunded",
            Self::Dispute => "payment.disputed",
        }
    }

    /// The inverse of [`OrderAction::generic_type`].
    pub fn from_generic_type(name: &str) -> Option<Self> {
        [Self::Pay, Self::Fail, Self::Refund, Self::Dispute].into_iter().find(|a| a.generic_type() == name)
    }
}

impl Format {
    /// Encodes `e` as this format's body (JSON; Braintree's is a form), the way the provider would send it;
    /// [`Format::parse_delivery`] with [`Format::encode_headers`] reads it back to the same order effect. Adyen and
    /// Braintree bodies come out unsigned (signing them is the signature module's job). An action the provider has no event for (see
    /// [`Format::encodes`]) is encoded in the generic format.
    pub fn encode(&self, e: &Outgoing<'_>) -> Vec<u8> {
        let v = match self {
            Format::Generic => Some(generic::encode(e)),
            Format::Stripe => Some(stripe::encode(e)),
            Format::Paystack => paystack::encode(e),
            Format::Shopify => shopify::encode(e),
            Format::Adyen => Some(adyen::encode(e)),
            Format::Braintree => match braintree::encode(e) {
                Some(form) => return form,
                None => None,
            },
            Format::Declared(d) => match d.example_for(EffectSpec::from(e.action)).map(|x| x.render(&e.vars())) {
                Some(Ok(rendered)) => return rendered.body,
                _ => None,
            },
        };
        v.unwrap_or_else(|| generic::encode(e)).to_string().into_bytes()
    }

    /// The headers the provider would send with [`Format::encode`]'s body, signature aside: Shopify's topic, event
    /// id and trigger time, a declared format's example headers; nothing for the other formats.
    pub fn encode_headers(&self, e: &Outgoing<'_>) -> Vec<(String, String)> {
        match self {
            Format::Shopify if self.encodes(e.action) => shopify::encode_headers(e),
            Format::Declared(d) => match d.example_for(EffectSpec::from(e.action)).map(|x| x.render(&e.vars())) {
                Some(Ok(rendered)) => rendered.headers,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}

impl Outgoing<'_> {
    /// The example placeholders' values for this event.
    pub fn vars(&self) -> ExampleVars {
        ExampleVars::for_order(self.event_id, self.order_id, self.amount_minor, self.currency, self.created)
    }
}

impl From<OrderAction> for EffectSpec {
    fn from(action: OrderAction) -> Self {
        match action {
            OrderAction::Pay => Self::Pay,
            OrderAction::Refund => Self::Refund,
            OrderAction::Fail => Self::Fail,
            OrderAction::Dispute => Self::Dispute,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Effect;
    use serde_json::json;

    fn parse(format: Format, v: Value) -> Result<Event, ParseError> {
        format.parse(v.to_string().as_bytes())
    }

    #[test]
    fn encode_then_parse_delivery_gives_back_the_same_effect_in_every_format() {
        for format in Format::ALL {
            for action in OrderAction::ALL {
                let out = Outgoing {
                    event_id: "evt_x",
                    action,
                    order_id: "ord_x",
                    amount_minor: 42,
                    currency: "usd",
                    created: 1_700_000_007,
                };
                let headers = format.encode_headers(&out);
                let parsed = format.parse_delivery(&headers, &format.encode(&out));
                if !format.encodes(action) {
                    assert!(headers.is_empty(), "{format:?} {action:?}");
                    assert!(parsed.is_err(), "{format:?} has no {action:?} event: its source rejects the body");
                    continue;
                }
                let events = parsed.unwrap_or_else(|err| panic!("{format:?} {action:?}: {err}"));
                let [e] = &events[..] else { panic!("{format:?} {action:?}: {events:?}") };
                assert!(e.event_id.as_str().contains("evt_x"), "{format:?} {action:?}: {}", e.event_id);
                assert_eq!(e.occurred_at, 1_700_000_007, "{format:?} {action:?}");
                let Effect::Order { order_id, action: got, money } = &e.effect else { panic!("{format:?} {action:?}") };
                assert_eq!((order_id.as_str(), *got), ("ord_x", action), "{format:?}");
                let money = money.as_ref().unwrap_or_else(|| panic!("{format:?} {action:?}: no money"));
                assert_eq!((money.amount_minor, money.currency.as_str()), (42, "usd"), "{format:?} {action:?}");
            }
        }
    }

    #[test]
    fn shopify_encodes_numeric_order_ids_as_shopify_does() {
        let out = Outgoing {
            event_id: "evt_y",
            action: OrderAction::Pay,
            order_id: "820982911946154508",
            amount_minor: 1980,
            currency: "jpy",
            created: 7,
        };
        let body: Value = serde_json::from_slice(&Format::Shopify.encode(&out)).unwrap();
        assert_eq!(body["id"], serde_json::json!(820982911946154508_u64));
        assert_eq!(body["current_total_price"], "1980");
        let e = Format::Shopify.parse_delivery(&Format::Shopify.encode_headers(&out), &Format::Shopify.encode(&out));
        let Effect::Order { order_id, money, .. } = &e.unwrap()[0].effect else { panic!() };
        assert_eq!((order_id.as_str(), money.as_ref().unwrap().amount_minor), ("820982911946154508", 1980));
    }

    #[test]
    fn formats_are_named_in_kebab_case() {
        let names: Vec<&str> = Format::ALL.iter().map(Format::name).collect();
        assert_eq!(names, ["generic", "stripe", "paystack", "shopify", "adyen", "braintree"]);
        assert_eq!(Format::built_in("shopify"), Some(Format::Shopify));
        assert_eq!(Format::built_in("paddle"), None);
    }

    #[test]
    fn generic_payment_succeeded_becomes_a_pay_effect_keyed_on_the_order() {
        let e = parse(
            Format::Generic,
            json!({"id":"evt_1","type":"payment.succeeded","created":1700000000,
                   "data":{"order_id":"ord_1","amount":1999,"currency":"EUR"}}),
        )
        .unwrap();
        assert_eq!(e.event_id.as_str(), "evt_1");
        assert_eq!(e.business_key, "payment.succeeded:ord_1");
        assert_eq!(e.occurred_at, 1_700_000_000);
        let Effect::Order { order_id, action, money } = e.effect else { panic!("not an order effect") };
        assert_eq!(order_id.as_str(), "ord_1");
        assert_eq!(action, OrderAction::Pay);
        let money = money.unwrap();
        assert_eq!(money.amount_minor, 1999);
        assert_eq!(money.currency.as_str(), "eur");
    }

    #[test]
    fn generic_unknown_type_is_ignored_not_an_error() {
        let e = parse(Format::Generic, json!({"id":"evt_2","type":"customer.created","created":1,"data":"x"})).unwrap();
        assert_eq!(e.effect, Effect::Ignored);
    }

    #[test]
    fn generic_payment_without_amount_is_a_parse_error() {
        let err = parse(
            Format::Generic,
            json!({"id":"evt_3","type":"payment.succeeded","created":1,"data":{"order_id":"o"}}),
        )
        .unwrap_err();
        assert_eq!(err, ParseError::Missing("/data/amount"));
    }

    #[test]
    fn a_body_that_is_not_json_is_a_parse_error() {
        assert!(matches!(Format::Generic.parse(b"{not json"), Err(ParseError::Json(_))));
        assert!(matches!(Format::Stripe.parse(&[0xff, 0xfe]), Err(ParseError::Json(_))));
    }

    #[test]
    fn negative_amounts_and_bad_currencies_are_rejected() {
        let neg = json!({"id":"e","type":"payment.succeeded","created":1,
                          "data":{"order_id":"o","amount":-1,"currency":"usd"}});
        assert!(matches!(parse(Format::Generic, neg), Err(ParseError::Invalid(_))));
        let cur = json!({"id":"e","type":"payment.succeeded","created":1,
                          "data":{"order_id":"o","amount":1,"currency":"dollars"}});
        assert!(matches!(parse(Format::Generic, cur), Err(ParseError::Invalid(_))));
    }

    #[test]
    fn stripe_payment_intent_succeeded_reads_metadata_and_amount_received() {
        let e = parse(
            Format::Stripe,
            json!({"id":"evt_s1","type":"payment_intent.succeeded","created":1700000001,
                   "data":{"object":{"id":"pi_1","amount":500,"amount_received":500,"currency":"usd",
                                     "metadata":{"order_id":"ord_9"}}}}),
        )
        .unwrap();
        assert_eq!(e.business_key, "payment_intent.succeeded:pi_1");
        assert!(matches!(e.effect, Effect::Order { action: OrderAction::Pay, .. }));
    }

    #[test]
    fn stripe_dispute_takes_the_order_from_the_expanded_charge() {
        let e = parse(
            Format::Stripe,
            json!({"id":"evt_s2","type":"charge.dispute.created","created":1,
                   "data":{"object":{"id":"dp_1","amount":500,"currency":"usd",
                                     "charge":{"id":"ch_1","metadata":{"order_id":"ord_7"}}}}}),
        )
        .unwrap();
        let Effect::Order { order_id, action, .. } = e.effect else { panic!() };
        assert_eq!((order_id.as_str(), action), ("ord_7", OrderAction::Dispute));
        assert_eq!(e.business_key, "charge.dispute.created:dp_1");
    }

    #[test]
    fn stripe_checkout_session_uses_client_reference_id_and_skips_unpaid_sessions() {
        let paid = json!({"id":"evt_s3","type":"checkout.session.completed","created":1,
                   "data":{"object":{"id":"cs_1","client_reference_id":"ord_3","amount_total":900,
                                     "currency":"GBP","payment_status":"paid"}}});
        let e = parse(Format::Stripe, paid).unwrap();
        let Effect::Order { order_id, money, .. } = e.effect else { panic!() };
        assert_eq!(order_id.as_str(), "ord_3");
        assert_eq!(money.unwrap().currency.as_str(), "gbp");
        let unpaid = json!({"id":"evt_s4","type":"checkout.session.completed","created":1,
                   "data":{"object":{"id":"cs_2","client_reference_id":"ord_4","amount_total":900,
                                     "currency":"gbp","payment_status":"unpaid"}}});
        assert_eq!(parse(Format::Stripe, unpaid).unwrap().effect, Effect::Ignored);
    }

    #[test]
    fn stripe_refund_without_order_metadata_is_a_parse_error() {
        let err = parse(
            Format::Stripe,
            json!({"id":"evt_s5","type":"charge.refunded","created":1,
                   "data":{"object":{"id":"ch_1","amount_refunded":5,"currency":"usd","metadata":{}}}}),
        )
        .unwrap_err();
        assert_eq!(err, ParseError::Missing("/metadata/order_id"));
    }
}
