//! The generic format: `{"id","type","created","data":{...}}`.

use super::ParseError;
use super::common::{envelope, money_at, str_at};
use crate::event::{Event, OrderAction, OrderId};
use serde_json::Value;

pub(super) fn parse(root: &Value) -> Result<Event, ParseError> {
    let env = envelope(root)?;
    let action = match env.event_type.as_str() {
        "payment.succeeded" => OrderAction::Pay,
        "payment.failed" => OrderAction::Fail,
        "payment.refunded" => OrderAction::Refund,
        "payment.disputed" => OrderAction::Dispute,
        _ => return Ok(env.ignored()),
    };
    let order_id = OrderId::parse(str_at(root, "/data/order_id")?)?;
    let money = money_at(root, "/data/amount", "/data/currency")?;
    if action == OrderAction::Pay && money.is_none() {
        return Err(ParseError::Missing("/data/amount"));
    }
    let key = format!("{}:{}", env.event_type, order_id);
    Ok(env.order(key, order_id, action, money))
}
