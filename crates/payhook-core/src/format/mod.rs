//! Payload formats: a provider's JSON, already verified, becomes an [`Event`].
//!
//! A format decides the event id, the business key and the effect. Types a format does not know become
//! [`Effect::Ignored`]; a body that cannot be understood at all is a [`ParseError`], which the pipeline keeps as a
//! dead letter (the delivery verified, so payhook owns it).

mod common;
mod generic;
mod stripe;

use crate::event::{Event, InvalidValue, OrderAction};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The payload formats payhook understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `{"id","type","created","data":{"order_id","amount","currency"}}` with `payment.*` types.
    Generic,
    /// Stripe's event objects (`payment_intent.*`, `charge.*`, `checkout.session.completed`).
    Stripe,
}

/// Why a verified body could not be turned into an event. The message is stored as the dead letter's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The body is not JSON.
    #[error("body is not valid JSON: {0}")]
    Json(String),
    /// A field the format needs is absent or has the wrong JSON type.
    #[error("missing or mistyped field `{0}`")]
    Missing(&'static str),
    /// A field is present but its value is not acceptable.
    #[error("invalid value: {0}")]
    Invalid(#[from] InvalidValue),
}

impl Format {
    /// Parses a verified body.
    pub fn parse(self, body: &[u8]) -> Result<Event, ParseError> {
        let root: Value = serde_json::from_slice(body).map_err(|e| ParseError::Json(e.to_string()))?;
        match self {
            Format::Generic => generic::parse(&root),
            Format::Stripe => stripe::parse(&root),
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
    /// Encodes `e` as this format's JSON body; `parse` reads it back to the same effect.
    pub fn encode(self, e: &Outgoing<'_>) -> Vec<u8> {
        let v = match self {
            Format::Generic => serde_json::json!({
                "id": e.event_id,
                "type": e.action.generic_type(),
                "created": e.created,
                "data": { "order_id": e.order_id, "amount": e.amount_minor, "currency": e.currency },
            }),
            Format::Stripe => {
                let (ty, object) = match e.action {
                    OrderAction::Pay => (
                        "payment_intent.succeeded",
                        serde_json::json!({
                            "id": format!("pi_{}", e.order_id), "object": "payment_intent",
                            "amount": e.amount_minor, "amount_received": e.amount_minor, "currency": e.currency,
                            "metadata": { "order_id": e.order_id },
                        }),
                    ),
                    OrderAction::Fail => (
                        "payment_intent.payment_failed",
                        serde_json::json!({
                            "id": format!("pi_{}", e.order_id), "object": "payment_intent",
                            "amount": e.amount_minor, "currency": e.currency, "metadata": { "order_id": e.order_id },
                        }),
                    ),
                    OrderAction::Refund => (
                        "charge.refunded",
                        serde_json::json!({
                            "id": format!("ch_{}", e.order_id), "object": "charge",
                            "amount_refunded": e.amount_minor, "currency": e.currency,
                            "metadata": { "order_id": e.order_id },
                        }),
                    ),
                    OrderAction::Dispute => (
                        "charge.dispute.created",
                        serde_json::json!({
                            "id": format!("dp_{}", e.order_id), "object": "dispute",
                            "amount": e.amount_minor, "currency": e.currency,
                            "charge": { "id": format!("ch_{}", e.order_id), "metadata": { "order_id": e.order_id } },
                        }),
                    ),
                };
                serde_json::json!({
                    "id": e.event_id, "object": "event", "type": ty, "created": e.created,
                    "data": { "object": object },
                })
            }
        };
        v.to_string().into_bytes()
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
    fn encode_then_parse_gives_back_the_same_effect_in_every_format() {
        for format in [Format::Generic, Format::Stripe] {
            for action in [OrderAction::Pay, OrderAction::Fail, OrderAction::Refund, OrderAction::Dispute] {
                let out = Outgoing {
                    event_id: "evt_x",
                    action,
                    order_id: "ord_x",
                    amount_minor: 42,
                    currency: "usd",
                    created: 7,
                };
                let e = format.parse(&format.encode(&out)).unwrap();
                assert_eq!(e.event_id.as_str(), "evt_x");
                assert_eq!(e.occurred_at, 7);
                let Effect::Order { order_id, action: got, money } = e.effect else { panic!("{format:?} {action:?}") };
                assert_eq!((order_id.as_str(), got), ("ord_x", action));
                assert_eq!(money.map(|m| m.amount_minor), Some(42));
            }
        }
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
