//! Adyen's standard notifications: `{"live","notificationItems":[{"NotificationRequestItem":{...}}]}`, one event
//! per item, in the order of the batch.
//!
//! - **Event id**: `{eventCode}:{pspReference}:{success}`. Adyen has no event id, and it may notify the same
//!   payment reference with a different outcome, which is a different event.
//! - **Business key**: `{eventCode}:{pspReference}`: one fact per operation, whatever its outcome says.
//! - **occurred_at**: `eventDate` (ISO 8601 with offset), required.
//! - **Effects** on the order `merchantReference`, money `amount.value` (already in minor units) in
//!   `amount.currency`: `AUTHORISATION` pays when `success` is `"true"` and fails otherwise; a successful `REFUND`
//!   refunds (a failed one is ignored); `CHARGEBACK` disputes. Every other event code is ignored.
//!
//! The HMAC signature in `additionalData.hmacSignature` is the signature module's business; this module neither
//! reads nor writes it.

use super::common::{int_at, str_at, timestamp_at};
use super::{Outgoing, ParseError};
use crate::event::{Currency, Effect, Event, EventId, Money, OrderAction, OrderId};
use crate::time::rfc3339;
use serde_json::Value;

pub(super) fn parse(root: &Value) -> Result<Vec<Event>, ParseError> {
    let items =
        root.get("notificationItems").and_then(Value::as_array).ok_or(ParseError::Missing("/notificationItems"))?;
    if items.is_empty() {
        return Err(ParseError::Missing("/notificationItems/0"));
    }
    items.iter().map(item).collect()
}

fn item(wrapper: &Value) -> Result<Event, ParseError> {
    let n = wrapper.get("NotificationRequestItem").ok_or(ParseError::Missing("/NotificationRequestItem"))?;
    let code = str_at(n, "/eventCode")?;
    let psp = str_at(n, "/pspReference")?;
    let success = match n.get("success") {
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
        Some(Value::Bool(b)) => *b,
        _ => return Err(ParseError::Missing("/success")),
    };
    let occurred_at = timestamp_at(n, &["/eventDate"])?.ok_or(ParseError::Missing("/eventDate"))?;
    let event_id = EventId::parse(format!("{code}:{psp}:{success}"))?;
    let business_key = format!("{code}:{psp}");
    let action = match (code, success) {
        ("AUTHORISATION", true) => Some(OrderAction::Pay),
        ("AUTHORISATION", false) => Some(OrderAction::Fail),
        ("REFUND", true) => Some(OrderAction::Refund),
        ("CHARGEBACK", _) => Some(OrderAction::Dispute),
        _ => None,
    };
    let effect = match action {
        None => Effect::Ignored,
        Some(action) => {
            let order_id = OrderId::parse(str_at(n, "/merchantReference")?)?;
            let money = match n.get("amount") {
                None | Some(Value::Null) => None,
                Some(_) => {
                    let currency = Currency::parse(str_at(n, "/amount/currency")?)?;
                    Some(Money::new(int_at(n, "/amount/value")?, currency)?)
                }
            };
            if action == OrderAction::Pay && money.is_none() {
                return Err(ParseError::Missing("/amount"));
            }
            Effect::Order { order_id, action, money }
        }
    };
    Ok(Event { event_id, event_type: code.to_owned(), occurred_at, business_key, effect })
}

/// One notification item, unsigned; the payment's `pspReference` is the outgoing event id.
pub(super) fn encode(e: &Outgoing<'_>) -> Value {
    let (code, success, reason) = match e.action {
        OrderAction::Pay => ("AUTHORISATION", "true", "058705:1111:03/2030"),
        OrderAction::Fail => ("AUTHORISATION", "false", "Refused"),
        OrderAction::Refund => ("REFUND", "true", ""),
        OrderAction::Dispute => ("CHARGEBACK", "true", "Fraud"),
    };
    let mut item = serde_json::json!({
        "additionalData": {},
        "amount": { "currency": e.currency.to_ascii_uppercase(), "value": e.amount_minor },
        "eventCode": code,
        "eventDate": rfc3339(e.created),
        "merchantAccountCode": "PayhookTestAccount",
        "merchantReference": e.order_id,
        "paymentMethod": "visa",
        "pspReference": e.event_id,
        "reason": reason,
        "success": success,
    });
    if e.action != OrderAction::Pay && e.action != OrderAction::Fail {
        item["originalReference"] = Value::from(format!("psp_{}", e.order_id));
    }
    if e.action == OrderAction::Pay {
        item["operations"] = serde_json::json!(["CANCEL", "CAPTURE", "REFUND"]);
    }
    serde_json::json!({ "live": "false", "notificationItems": [{ "NotificationRequestItem": item }] })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use serde_json::json;

    fn item(code: &str, success: &str, psp: &str) -> Value {
        json!({"NotificationRequestItem":{
            "additionalData":{"authCode":"058705","cardSummary":"1111","expiryDate":"03/2030"},
            "amount":{"currency":"EUR","value":1000},
            "eventCode":code,"eventDate":"2019-06-28T18:03:50+01:00","merchantAccountCode":"YOUR_MERCHANT_ACCOUNT",
            "merchantReference":"YOUR_MERCHANT_REFERENCE","operations":["CANCEL","CAPTURE","REFUND"],
            "paymentMethod":"visa","pspReference":psp,"reason":"058705:1111:03/2030","success":success}})
    }

    fn batch(items: Vec<Value>) -> Vec<u8> {
        json!({"live":"false","notificationItems":items}).to_string().into_bytes()
    }

    fn delivery(items: Vec<Value>) -> Result<Vec<Event>, ParseError> {
        let none: [(&str, &str); 0] = [];
        Format::Adyen.parse_delivery(&none, &batch(items))
    }

    fn order_of(e: &Event) -> (&str, OrderAction, Option<i64>) {
        let Effect::Order { order_id, action, money } = &e.effect else { panic!("not an order: {e:?}") };
        (order_id.as_str(), *action, money.as_ref().map(|m| m.amount_minor))
    }

    #[test]
    fn a_successful_authorisation_pays_the_merchant_reference() {
        let e = Format::Adyen.parse(&batch(vec![item("AUTHORISATION", "true", "7914073381342284")])).unwrap();
        assert_eq!(e.event_id.as_str(), "AUTHORISATION:7914073381342284:true");
        assert_eq!(e.business_key, "AUTHORISATION:7914073381342284");
        assert_eq!(e.event_type, "AUTHORISATION");
        assert_eq!(e.occurred_at, 1_561_741_430);
        assert_eq!(order_of(&e), ("YOUR_MERCHANT_REFERENCE", OrderAction::Pay, Some(1000)));
    }

    #[test]
    fn a_refused_authorisation_fails_and_a_failed_refund_is_ignored() {
        let e = &delivery(vec![item("AUTHORISATION", "false", "8814073381342284")]).unwrap()[0];
        assert_eq!(e.event_id.as_str(), "AUTHORISATION:8814073381342284:false");
        assert_eq!(order_of(e).1, OrderAction::Fail);
        let e = &delivery(vec![item("REFUND", "false", "9914073381342284")]).unwrap()[0];
        assert_eq!(e.effect, Effect::Ignored);
        assert_eq!(e.business_key, "REFUND:9914073381342284");
    }

    #[test]
    fn refund_and_chargeback_change_the_order_and_other_codes_are_ignored() {
        let mut refund = item("REFUND", "true", "8515131751004933");
        refund["NotificationRequestItem"]["originalReference"] = json!("7914073381342284");
        let events = delivery(vec![
            refund,
            item("CHARGEBACK", "true", "9915131751004933"),
            item("REPORT_AVAILABLE", "true", "r1"),
        ])
        .unwrap();
        assert_eq!(order_of(&events[0]), ("YOUR_MERCHANT_REFERENCE", OrderAction::Refund, Some(1000)));
        assert_eq!(order_of(&events[1]).1, OrderAction::Dispute);
        assert_eq!(events[2].effect, Effect::Ignored);
    }

    #[test]
    fn a_batch_of_three_items_gives_three_events_with_distinct_ids() {
        let events = delivery(vec![
            item("AUTHORISATION", "true", "1111111111111111"),
            item("AUTHORISATION", "false", "2222222222222222"),
            item("REFUND", "true", "3333333333333333"),
        ])
        .unwrap();
        assert_eq!(events.len(), 3);
        let ids: std::collections::HashSet<_> = events.iter().map(|e| e.event_id.clone()).collect();
        assert_eq!(ids.len(), 3);
        let err = Format::Adyen.parse(&batch(vec![item("AUTHORISATION", "true", "a"), item("REFUND", "true", "b")]));
        assert_eq!(err, Err(ParseError::NotSingle(2)));
    }

    #[test]
    fn an_empty_or_malformed_batch_is_an_error() {
        assert_eq!(delivery(vec![]), Err(ParseError::Missing("/notificationItems/0")));
        assert_eq!(delivery(vec![json!({"x":1})]), Err(ParseError::Missing("/NotificationRequestItem")));
        let mut no_date = item("AUTHORISATION", "true", "p");
        no_date["NotificationRequestItem"].as_object_mut().unwrap().remove("eventDate");
        assert_eq!(delivery(vec![no_date]), Err(ParseError::Missing("/eventDate")));
        let mut bad = item("AUTHORISATION", "maybe", "p");
        assert_eq!(delivery(vec![bad.clone()]), Err(ParseError::Missing("/success")));
        bad["NotificationRequestItem"]["success"] = json!("true");
        bad["NotificationRequestItem"].as_object_mut().unwrap().remove("amount");
        assert_eq!(delivery(vec![bad]), Err(ParseError::Missing("/amount")));
    }
}
