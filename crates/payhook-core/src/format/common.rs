//! Field readers and the event envelope shared by the formats.

use super::ParseError;
use crate::event::{Currency, Effect, Event, EventId, Money, OrderAction, OrderId};
use serde_json::Value;

pub(super) fn str_at<'a>(v: &'a Value, pointer: &'static str) -> Result<&'a str, ParseError> {
    v.pointer(pointer).and_then(Value::as_str).ok_or(ParseError::Missing(pointer))
}

pub(super) fn int_at(v: &Value, pointer: &'static str) -> Result<i64, ParseError> {
    v.pointer(pointer).and_then(Value::as_i64).ok_or(ParseError::Missing(pointer))
}

/// Reads `amount` and `currency` when both are there; neither there is `None`, one without the other an error.
pub(super) fn money_at(v: &Value, amount: &'static str, currency: &'static str) -> Result<Option<Money>, ParseError> {
    match (v.pointer(amount), v.pointer(currency)) {
        (None, None) => Ok(None),
        _ => {
            let amount = int_at(v, amount)?;
            let currency = Currency::parse(str_at(v, currency)?)?;
            Ok(Some(Money::new(amount, currency)?))
        }
    }
}

pub(super) struct Envelope {
    pub event_id: EventId,
    pub event_type: String,
    pub occurred_at: i64,
}

pub(super) fn envelope(root: &Value) -> Result<Envelope, ParseError> {
    Ok(Envelope {
        event_id: EventId::parse(str_at(root, "/id")?)?,
        event_type: str_at(root, "/type")?.to_owned(),
        occurred_at: int_at(root, "/created")?,
    })
}

impl Envelope {
    pub(super) fn ignored(self) -> Event {
        let business_key = format!("{}:{}", self.event_type, self.event_id);
        Event {
            event_id: self.event_id,
            event_type: self.event_type,
            occurred_at: self.occurred_at,
            business_key,
            effect: Effect::Ignored,
        }
    }

    pub(super) fn order(
        self,
        business_key: String,
        order_id: OrderId,
        action: OrderAction,
        money: Option<Money>,
    ) -> Event {
        Event {
            event_id: self.event_id,
            event_type: self.event_type,
            occurred_at: self.occurred_at,
            business_key,
            effect: Effect::Order { order_id, action, money },
        }
    }
}
