//! Stripe's event objects.

use super::ParseError;
use super::common::{envelope, money_at, str_at};
use crate::event::{Event, OrderAction, OrderId};
use serde_json::Value;

pub(super) fn parse(root: &Value) -> Result<Event, ParseError> {
    let env = envelope(root)?;
    let object = root.pointer("/data/object").ok_or(ParseError::Missing("/data/object"))?;
    let (action, order_id, money) = match env.event_type.as_str() {
        "payment_intent.succeeded" => {
            let amount = if object.get("amount_received").is_some() { "/amount_received" } else { "/amount" };
            (OrderAction::Pay, str_at(object, "/metadata/order_id")?, money_at(object, amount, "/currency")?)
        }
        "payment_intent.payment_failed" => {
            (OrderAction::Fail, str_at(object, "/metadata/order_id")?, money_at(object, "/amount", "/currency")?)
        }
        "charge.refunded" => (
            OrderAction::Refund,
            str_at(object, "/metadata/order_id")?,
            money_at(object, "/amount_refunded", "/currency")?,
        ),
        "charge.dispute.created" => {
            // A dispute names its charge; the order id lives in the charge's metadata when the charge is
            // expanded, and in the dispute's own metadata when the merchant copied it there.
            let order_id = str_at(object, "/charge/metadata/order_id")
                .or_else(|_| str_at(object, "/metadata/order_id"))
                .map_err(|_| ParseError::Missing("/data/object/charge/metadata/order_id"))?;
            (OrderAction::Dispute, order_id, money_at(object, "/amount", "/currency")?)
        }
        "checkout.session.completed" => {
            // Delayed payment methods complete the session before the money arrives; only a paid session
            // (or one that needs no payment) pays the order.
            match object.get("payment_status").and_then(Value::as_str) {
                Some("paid") | Some("no_payment_required") | None => {}
                Some(_) => return Ok(env.ignored()),
            }
            (OrderAction::Pay, str_at(object, "/client_reference_id")?, money_at(object, "/amount_total", "/currency")?)
        }
        _ => return Ok(env.ignored()),
    };
    if action == OrderAction::Pay && money.is_none() {
        return Err(ParseError::Missing("/data/object/amount"));
    }
    let order_id = OrderId::parse(order_id)?;
    let object_id = str_at(object, "/id")?;
    let key = format!("{}:{}", env.event_type, object_id);
    Ok(env.order(key, order_id, action, money))
}
