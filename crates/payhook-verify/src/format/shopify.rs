//! Shopify's webhooks: the body is the resource (an order, a refund, a dispute); what happened and the event id
//! travel in headers.
//!
//! - **Topic** (the event type): `X-Shopify-Topic`, required.
//! - **Event id**: `X-Shopify-Event-Id`, else `X-Shopify-Webhook-Id`; neither is a [`ParseError::MissingHeader`].
//! - **occurred_at**: `X-Shopify-Triggered-At`, else the body's `updated_at`, `created_at` or (disputes)
//!   `initiated_at`, all ISO 8601 with offsets (`2024-01-01T10:00:00-05:00`).
//! - **Order id**: Shopify's order id as a decimal string (`820982911946154508`): a merchant that takes payments
//!   through Shopify registers its orders in payhook under Shopify's order id.
//! - **Business key**: `{topic}:{object id}` (the order, refund or dispute id).
//!
//! Topics:
//!
//! - `orders/paid`: pays the order `id` with `current_total_price` (else `total_price`) in `currency`.
//! - `orders/cancelled`: refunds the order `id`, without money: a cancelled order is never to be fulfilled,
//!   whether or not money moved (a money refund comes with its own `refunds/create`).
//! - `refunds/create`: refunds `order_id`; money is the sum of its successful `refund` transactions, or none.
//! - `disputes/create`: disputes `order_id` with `amount` in `currency`.
//! - any other topic is ignored, keyed `{topic}:{event id}`.
//!
//! **The topic is not signed.** Shopify's HMAC covers the body only, so `X-Shopify-Topic` (like the event id and the
//! trigger time) could be changed by anyone holding a body Shopify once signed, and such a body never expires (no
//! timestamp is signed). The topic decides the effect, so the signed body must confirm it before it has one
//! ([`confirm_topic`]): `orders/paid` needs an order whose `financial_status` says it was paid (`paid`, or
//! `partially_refunded`/`refunded` later), `orders/cancelled` an order with a `cancelled_at`, `refunds/create` a
//! refund (`order_id`, and `refund_line_items` or `transactions`), `disputes/create` a dispute (`order_id` and `initiated_at`). A body
//! that does not confirm its topic is a [`ParseError::Unconfirmed`]: kept as a dead letter, with no effect. The
//! event id only labels the delivery: the business key is built from the topic and the signed object id, so a body
//! re-sent under a new event id is a duplicate of the first.
//!
//! Amounts are decimal strings (`"199.00"`) converted with the currency's exponent (0 for JPY, 3 for KWD, 2 for
//! most); a non-numeric string or more non-zero decimals than the currency has is an error.

use super::common::{currency_exponent, decimal_to_minor, id_at, minor_to_decimal, opt_str_at, str_at, timestamp_at};
use super::{Outgoing, ParseError};
use crate::event::{Currency, Effect, Event, EventId, InvalidValue, Money, OrderAction, OrderId};
use crate::request::Headers;
use crate::time::{parse_iso8601, rfc3339};
use serde_json::Value;

const TOPIC: &str = "x-shopify-topic";
const EVENT_ID: &str = "x-shopify-event-id";
const WEBHOOK_ID: &str = "x-shopify-webhook-id";
const TRIGGERED_AT: &str = "x-shopify-triggered-at";

pub(super) fn parse(headers: &(impl Headers + ?Sized), root: &Value) -> Result<Event, ParseError> {
    let topic = headers.get(TOPIC).ok_or(ParseError::MissingHeader(TOPIC))?;
    let event_id =
        headers.get(EVENT_ID).or_else(|| headers.get(WEBHOOK_ID)).ok_or(ParseError::MissingHeader(EVENT_ID))?;
    let event_id = EventId::parse(event_id)?;
    let occurred_at = match headers.get(TRIGGERED_AT) {
        Some(s) => parse_iso8601(s).ok_or(InvalidValue {
            field: "x-shopify-triggered-at",
            reason: "must be an ISO 8601 date-time such as 2024-01-01T10:00:00Z",
        })?,
        None => timestamp_at(root, &["/updated_at", "/created_at", "/initiated_at"])?
            .ok_or(ParseError::MissingHeader(TRIGGERED_AT))?,
    };
    let event = |business_key: String, effect: Effect| Event {
        event_id: event_id.clone(),
        event_type: topic.to_owned(),
        occurred_at,
        business_key,
        effect,
    };
    let (action, order_pointer) = match topic {
        "orders/paid" => (OrderAction::Pay, "/id"),
        "orders/cancelled" => (OrderAction::Refund, "/id"),
        "refunds/create" => (OrderAction::Refund, "/order_id"),
        "disputes/create" => (OrderAction::Dispute, "/order_id"),
        _ => return Ok(event(format!("{topic}:{event_id}"), Effect::Ignored)),
    };
    confirm_topic(topic, root)?;
    let object_id = id_at(root, "/id").ok_or(ParseError::Missing("/id"))?;
    let order_id = OrderId::parse(id_at(root, order_pointer).ok_or(ParseError::Missing(order_pointer))?)?;
    let money = match topic {
        "orders/paid" => {
            let price = if root.get("current_total_price").is_some() { "/current_total_price" } else { "/total_price" };
            Some(decimal_money(str_at(root, price)?, str_at(root, "/currency")?)?)
        }
        "refunds/create" => refunded(root)?,
        "disputes/create" => Some(decimal_money(str_at(root, "/amount")?, str_at(root, "/currency")?)?),
        _ => None,
    };
    Ok(event(format!("{topic}:{object_id}"), Effect::Order { order_id, action, money }))
}

/// Checks that the signed body is the kind of resource the unsigned topic header says it is (see the module's doc).
fn confirm_topic(topic: &str, root: &Value) -> Result<(), ParseError> {
    let present = |pointer: &str| root.pointer(pointer).is_some_and(|v| !v.is_null());
    let (confirmed, needs) = match topic {
        "orders/paid" => (
            matches!(
                root.get("financial_status").and_then(Value::as_str),
                Some("paid" | "partially_refunded" | "refunded")
            ),
            "an order whose financial_status is paid",
        ),
        "orders/cancelled" => (present("/cancelled_at") && !present("/order_id"), "an order with a cancelled_at"),
        "refunds/create" => (
            present("/order_id")
                && !present("/initiated_at")
                && ["refund_line_items", "transactions"].iter().any(|k| root.get(k).is_some_and(Value::is_array)),
            "a refund (order_id, and refund_line_items or transactions)",
        ),
        "disputes/create" => {
            (present("/order_id") && present("/initiated_at"), "a dispute (order_id and initiated_at)")
        }
        _ => (true, ""),
    };
    if confirmed { Ok(()) } else { Err(ParseError::Unconfirmed { header: TOPIC, needs }) }
}

fn decimal_money(amount: &str, currency: &str) -> Result<Money, ParseError> {
    let currency = Currency::parse(currency)?;
    let minor = decimal_to_minor(amount, currency_exponent(&currency))?;
    Ok(Money::new(minor, currency)?)
}

/// The sum of a refund's successful `refund` transactions; `None` when it has none.
fn refunded(refund: &Value) -> Result<Option<Money>, ParseError> {
    let Some(transactions) = refund.get("transactions").and_then(Value::as_array) else { return Ok(None) };
    let mut total: Option<Money> = None;
    for t in transactions {
        if opt_str_at(t, "/kind")? != Some("refund") || opt_str_at(t, "/status")? != Some("success") {
            continue;
        }
        let m = decimal_money(str_at(t, "/amount")?, str_at(t, "/currency")?)?;
        total = Some(match total {
            None => m,
            Some(sum) if sum.currency == m.currency => {
                let amount = sum.amount_minor.checked_add(m.amount_minor);
                let amount = amount.ok_or(InvalidValue { field: "amount", reason: "is too large" })?;
                Money::new(amount, sum.currency)?
            }
            Some(_) => {
                return Err(
                    InvalidValue { field: "currency", reason: "refund transactions in several currencies" }.into()
                );
            }
        });
    }
    Ok(total)
}

fn topic(action: OrderAction) -> Option<&'static str> {
    match action {
        OrderAction::Pay => Some("orders/paid"),
        OrderAction::Fail => None,
        OrderAction::Refund => Some("refunds/create"),
        OrderAction::Dispute => Some("disputes/create"),
    }
}

/// Shopify's ids are integers: an all-digit order id is written as one.
fn id_value(id: &str) -> Value {
    id.parse::<u64>().map(Value::from).unwrap_or_else(|_| Value::from(id))
}

/// Shopify has no webhook for a failed payment: `Fail` gives `None`.
pub(super) fn encode(e: &Outgoing<'_>) -> Option<Value> {
    let at = rfc3339(e.created);
    let currency = e.currency.to_ascii_uppercase();
    let amount = match Currency::parse(e.currency) {
        Ok(c) => minor_to_decimal(e.amount_minor, currency_exponent(&c)),
        Err(_) => minor_to_decimal(e.amount_minor, 2),
    };
    let order_id = id_value(e.order_id);
    let body = match e.action {
        OrderAction::Pay => serde_json::json!({
            "id": order_id, "admin_graphql_api_id": format!("gid://shopify/Order/{}", e.order_id),
            "name": "#1001", "email": "jon@example.com", "created_at": at, "updated_at": at, "processed_at": at,
            "currency": currency, "presentment_currency": currency, "financial_status": "paid",
            "fulfillment_status": null, "current_total_price": amount, "total_price": amount,
            "subtotal_price": amount, "total_tax": "0.00", "test": false, "line_items": [],
        }),
        OrderAction::Fail => return None,
        OrderAction::Refund => serde_json::json!({
            "id": id_value(e.event_id), "order_id": order_id, "created_at": at, "processed_at": at,
            "note": "Things were damaged", "restock": false, "refund_line_items": [], "order_adjustments": [],
            "transactions": [{
                "id": 389404469, "order_id": order_id, "kind": "refund", "gateway": "bogus", "status": "success",
                "message": null, "created_at": at, "test": false, "parent_id": null, "amount": amount,
                "currency": currency,
            }],
        }),
        OrderAction::Dispute => serde_json::json!({
            "id": id_value(e.event_id), "order_id": order_id, "type": "chargeback", "amount": amount,
            "currency": currency, "reason": "fraudulent", "network_reason_code": "4837", "status": "needs_response",
            "evidence_due_by": null, "evidence_sent_on": null, "finalized_on": null, "initiated_at": at,
        }),
    };
    Some(body)
}

pub(super) fn encode_headers(e: &Outgoing<'_>) -> Vec<(String, String)> {
    let Some(topic) = topic(e.action) else { return Vec::new() };
    [
        (TOPIC, topic.to_owned()),
        (EVENT_ID, e.event_id.to_owned()),
        (TRIGGERED_AT, rfc3339(e.created)),
        ("x-shopify-shop-domain", "payhook-test.myshopify.com".to_owned()),
        ("x-shopify-api-version", "2024-07".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use serde_json::json;

    fn headers(topic: &str) -> Vec<(String, String)> {
        vec![
            ("x-shopify-topic".into(), topic.into()),
            ("x-shopify-hmac-sha256".into(), "XWmrwMey6OsLMeiZKwP4FppHH3cmAiiJJAweH5Jo4bM=".into()),
            ("x-shopify-shop-domain".into(), "johns-apparel.myshopify.com".into()),
            ("x-shopify-webhook-id".into(), "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".into()),
            ("x-shopify-event-id".into(), "98880550-7158-44d4-b7cd-2c97c8a091b5".into()),
            ("x-shopify-triggered-at".into(), "2023-03-29T18:00:27.877041743Z".into()),
            ("x-shopify-api-version".into(), "2024-07".into()),
        ]
    }

    fn parse(h: &[(String, String)], v: Value) -> Result<Event, ParseError> {
        let mut events = Format::Shopify.parse_delivery(h, v.to_string().as_bytes())?;
        assert_eq!(events.len(), 1);
        Ok(events.remove(0))
    }

    fn order_of(e: &Event) -> (&str, OrderAction, Option<(i64, &str)>) {
        let Effect::Order { order_id, action, money } = &e.effect else { panic!("not an order: {e:?}") };
        (order_id.as_str(), *action, money.as_ref().map(|m| (m.amount_minor, m.currency.as_str())))
    }

    /// Shopify's `orders/paid` example body, trimmed.
    fn order() -> Value {
        json!({"id":820982911946154508_u64,"admin_graphql_api_id":"gid://shopify/Order/820982911946154508",
               "app_id":null,"browser_ip":null,"buyer_accepts_marketing":true,"cancel_reason":"customer",
               "cancelled_at":"2021-12-31T19:00:00-05:00","created_at":"2021-12-31T19:00:00-05:00","currency":"USD",
               "current_subtotal_price":"398.00","current_total_price":"398.00","current_total_tax":"0.00",
               "email":"jon@example.com","financial_status":"paid","name":"#9999",
               "total_price":"403.00","updated_at":"2021-12-31T19:00:00-05:00","line_items":[]})
    }

    #[test]
    fn orders_paid_pays_shopifys_order_id_with_the_current_total_in_minor_units() {
        let e = parse(&headers("orders/paid"), order()).unwrap();
        assert_eq!(e.event_id.as_str(), "98880550-7158-44d4-b7cd-2c97c8a091b5");
        assert_eq!(e.event_type, "orders/paid");
        assert_eq!(e.business_key, "orders/paid:820982911946154508");
        assert_eq!(e.occurred_at, 1_680_112_827);
        assert_eq!(order_of(&e), ("820982911946154508", OrderAction::Pay, Some((39_800, "usd"))));
    }

    #[test]
    fn without_trigger_time_and_event_id_the_body_time_and_webhook_id_serve() {
        let h: Vec<_> =
            headers("orders/paid").into_iter().filter(|(k, _)| k != EVENT_ID && k != TRIGGERED_AT).collect();
        let e = parse(&h, order()).unwrap();
        assert_eq!(e.event_id.as_str(), "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043");
        assert_eq!(e.occurred_at, 1_640_995_200, "2021-12-31T19:00:00-05:00 is 2022-01-01T00:00:00Z");
    }

    #[test]
    fn missing_topic_or_ids_are_header_errors_and_plain_parse_names_the_topic() {
        let h: Vec<_> = headers("orders/paid").into_iter().filter(|(k, _)| k != EVENT_ID && k != WEBHOOK_ID).collect();
        assert_eq!(parse(&h, order()), Err(ParseError::MissingHeader(EVENT_ID)));
        assert_eq!(Format::Shopify.parse(order().to_string().as_bytes()), Err(ParseError::MissingHeader(TOPIC)));
    }

    #[test]
    fn amounts_follow_the_currency_exponent() {
        let mut v = order();
        v["currency"] = json!("JPY");
        v["current_total_price"] = json!("1980");
        assert_eq!(order_of(&parse(&headers("orders/paid"), v.clone()).unwrap()).2, Some((1980, "jpy")));
        v["current_total_price"] = json!("1980.5");
        assert!(matches!(parse(&headers("orders/paid"), v.clone()), Err(ParseError::Invalid(_))));
        v["currency"] = json!("KWD");
        v["current_total_price"] = json!("12.345");
        assert_eq!(order_of(&parse(&headers("orders/paid"), v.clone()).unwrap()).2, Some((12_345, "kwd")));
        v["current_total_price"] = json!("twelve");
        assert!(matches!(parse(&headers("orders/paid"), v.clone()), Err(ParseError::Invalid(_))));
        v.as_object_mut().unwrap().remove("current_total_price");
        v["currency"] = json!("USD");
        assert_eq!(order_of(&parse(&headers("orders/paid"), v).unwrap()).2, Some((40_300, "usd")));
    }

    #[test]
    fn orders_cancelled_refunds_the_order_without_money() {
        let e = parse(&headers("orders/cancelled"), order()).unwrap();
        assert_eq!(e.business_key, "orders/cancelled:820982911946154508");
        assert_eq!(order_of(&e), ("820982911946154508", OrderAction::Refund, None));
    }

    /// Shopify's `refunds/create` example body, trimmed.
    fn refund() -> Value {
        json!({"id":890088186047892319_u64,"order_id":820982911946154508_u64,"created_at":"2021-12-31T19:00:00-05:00",
               "note":"Things were damaged","user_id":548380009,"processed_at":"2021-12-31T19:00:00-05:00",
               "restock":false,"duties":[],"admin_graphql_api_id":"gid://shopify/Refund/890088186047892319",
               "refund_line_items":[],"order_adjustments":[],
               "transactions":[
                 {"id":389404469,"order_id":820982911946154508_u64,"kind":"refund","gateway":"bogus",
                  "status":"success","amount":"110.00","currency":"USD"},
                 {"id":389404470,"order_id":820982911946154508_u64,"kind":"refund","gateway":"bogus",
                  "status":"failure","amount":"5.00","currency":"USD"},
                 {"id":389404471,"order_id":820982911946154508_u64,"kind":"refund","gateway":"gift_card",
                  "status":"success","amount":"9.99","currency":"USD"}]})
    }

    #[test]
    fn refunds_create_refunds_the_order_with_its_successful_transactions() {
        let e = parse(&headers("refunds/create"), refund()).unwrap();
        assert_eq!(e.business_key, "refunds/create:890088186047892319");
        assert_eq!(order_of(&e), ("820982911946154508", OrderAction::Refund, Some((11_999, "usd"))));
        let mut v = refund();
        v["transactions"] = json!([]);
        assert_eq!(order_of(&parse(&headers("refunds/create"), v).unwrap()).2, None);
    }

    #[test]
    fn disputes_create_disputes_the_order_and_other_topics_are_ignored() {
        let v = dispute();
        let e = parse(&headers("disputes/create"), v).unwrap();
        assert_eq!(e.business_key, "disputes/create:1052608616");
        assert_eq!(order_of(&e), ("820982911946154508", OrderAction::Dispute, Some((1150, "usd"))));
        let e = parse(&headers("customers/create"), json!({"id":1})).unwrap();
        assert_eq!(e.effect, Effect::Ignored);
        assert_eq!(e.business_key, "customers/create:98880550-7158-44d4-b7cd-2c97c8a091b5");
    }

    /// A signed body re-sent under another topic has no effect: each body confirms only its own kind.
    #[test]
    fn a_topic_the_signed_body_does_not_confirm_has_no_effect() {
        let mut unpaid = order();
        unpaid["financial_status"] = json!("pending");
        unpaid["cancelled_at"] = Value::Null;
        let mut paid = order();
        paid["cancelled_at"] = Value::Null;
        let unconfirmed = |topic: &str, body: Value| {
            let got = parse(&headers(topic), body);
            assert!(matches!(got, Err(ParseError::Unconfirmed { header: TOPIC, .. })), "{topic}: {got:?}");
        };
        // The attack: a paid order's body re-sent as a cancellation would refund it.
        unconfirmed("orders/cancelled", paid.clone());
        unconfirmed("orders/paid", unpaid.clone());
        unconfirmed("refunds/create", paid.clone());
        unconfirmed("disputes/create", paid.clone());
        unconfirmed("orders/paid", refund());
        unconfirmed("orders/cancelled", refund());
        unconfirmed("disputes/create", refund());
        unconfirmed("orders/paid", dispute());
        unconfirmed("refunds/create", dispute());
        let mut voided = order();
        voided["financial_status"] = json!("voided");
        unconfirmed("orders/paid", voided);
        // Each body still confirms its own topic.
        assert!(parse(&headers("orders/paid"), paid).is_ok());
        assert!(parse(&headers("refunds/create"), refund()).is_ok());
        assert!(parse(&headers("disputes/create"), dispute()).is_ok());
    }

    /// Shopify's `disputes/create` example body.
    fn dispute() -> Value {
        json!({"id":1052608616,"order_id":820982911946154508_u64,"type":"chargeback","amount":"11.50",
                       "currency":"USD","reason":"fraudulent","network_reason_code":"4837","status":"needs_response",
                       "evidence_due_by":"2013-07-03T19:00:00-04:00","evidence_sent_on":null,"finalized_on":null,
                       "initiated_at":"2013-05-03T20:00:00-04:00"})
    }
}
