//! The generic format: `{"id","type","created","data":{...}}`, `created` in unix seconds; also the payload
//! structure of the Standard Webhooks specification, `{"type","timestamp","data"}`.
//!
//! Event id: `id`, else the delivery's `webhook-id` (or `svix-id`) header: Standard Webhooks names the message
//! there, the same on every redelivery, and its example payloads carry no id. Time: `created` (unix seconds),
//! else `timestamp` (ISO 8601), else the `webhook-timestamp` (or `svix-timestamp`) header. Business keys:
//!
//! - `payment.succeeded|failed|refunded|disputed` (`data: {order_id, amount?, currency?}`, amount required to
//!   pay): `{type}:{order_id}`.
//! - `subscription.created|updated|deleted` (`data: {subscription_id, customer_id?, status, current_period_end?}`):
//!   `{type}:{subscription_id}:{created}`. The event carries the whole subscription when it names both status and
//!   customer. A deletion without an ended status becomes `canceled`.
//! - `invoice.paid` and `invoice.refunded` (`data: {invoice_id, customer_id?, subscription_id?, amount?,
//!   currency?}`): `invoice.paid:{invoice_id}` and `invoice.refunded:{invoice_id}`, one fact per invoice.
//! - `invoice.payment_failed`: `invoice.payment_failed:{invoice_id}:{attempt}` with `data.attempt_count` when it
//!   is there, else the event id (every failed attempt is reported).
//! - anything else is ignored, keyed `{type}:{id}`.

use super::common::{Envelope, ended_status, int_at, money_at, opt_int_at, opt_str_at, str_at};
use super::{Outgoing, ParseError};
use crate::event::{CustomerId, Effect, Event, EventId, InvoiceId, OrderAction, OrderId, SubscriptionId};
use crate::event::{InvoiceAction, InvoiceChange, SubscriptionAction, SubscriptionChange, SubscriptionStatus};
use crate::request::Headers;
use serde_json::Value;

pub(super) fn parse(headers: &(impl Headers + ?Sized), root: &Value) -> Result<Event, ParseError> {
    let env = envelope(headers, root)?;
    let action = match env.event_type.as_str() {
        "payment.succeeded" => OrderAction::Pay,
        "payment.failed" => OrderAction::Fail,
        "payment.refunded" => OrderAction::Refund,
        "payment.disputed" => OrderAction::Dispute,
        "subscription.created" => return subscription(root, env, SubscriptionAction::Created),
        "subscription.updated" => return subscription(root, env, SubscriptionAction::Updated),
        "subscription.deleted" => return subscription(root, env, SubscriptionAction::Deleted),
        "invoice.paid" => return invoice(root, env, InvoiceAction::Paid),
        "invoice.payment_failed" => return invoice(root, env, InvoiceAction::PaymentFailed),
        "invoice.refunded" => return invoice(root, env, InvoiceAction::Refunded),
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

/// The event's id, type and time, from the body or, where it has none, the Standard Webhooks headers.
fn envelope(headers: &(impl Headers + ?Sized), root: &Value) -> Result<Envelope, ParseError> {
    let header = |names: [&str; 2]| names.into_iter().find_map(|n| headers.get(n));
    let event_id = match opt_str_at(root, "/id")? {
        Some(id) => id,
        None => header(["webhook-id", "svix-id"]).ok_or(ParseError::Missing("/id"))?,
    };
    let occurred_at = if crate::json_pointer::get(root, "/created").is_some() {
        int_at(root, "/created")?
    } else if let Some(at) = opt_str_at(root, "/timestamp")? {
        crate::time::parse_iso8601(at).ok_or(crate::event::InvalidValue {
            field: "timestamp",
            reason: "must be an ISO 8601 date-time such as 2022-11-03T20:26:10.344522Z",
        })?
    } else {
        let at = header(["webhook-timestamp", "svix-timestamp"]).ok_or(ParseError::Missing("/created"))?;
        at.trim().parse().map_err(|_| ParseError::MissingHeader("webhook-timestamp"))?
    };
    Ok(Envelope { event_id: EventId::parse(event_id)?, event_type: str_at(root, "/type")?.to_owned(), occurred_at })
}

fn subscription(root: &Value, env: Envelope, action: SubscriptionAction) -> Result<Event, ParseError> {
    let subscription_id = SubscriptionId::parse(str_at(root, "/data/subscription_id")?)?;
    let customer_id = opt_str_at(root, "/data/customer_id")?.map(CustomerId::parse).transpose()?;
    let status = opt_str_at(root, "/data/status")?;
    let full_object = status.is_some() && customer_id.is_some();
    let status = match (action, status) {
        (SubscriptionAction::Deleted, status) => ended_status(status)?,
        (_, Some(s)) => SubscriptionStatus::parse(s)?,
        (_, None) => return Err(ParseError::Missing("/data/status")),
    };
    let current_period_end = opt_int_at(root, "/data/current_period_end")?;
    let key = format!("{}:{}:{}", env.event_type, subscription_id, env.occurred_at);
    let change = SubscriptionChange { subscription_id, customer_id, action, status, current_period_end, full_object };
    Ok(env.event(key, Effect::Subscription(change)))
}

fn invoice(root: &Value, env: Envelope, action: InvoiceAction) -> Result<Event, ParseError> {
    let invoice_id = InvoiceId::parse(str_at(root, "/data/invoice_id")?)?;
    let customer_id = opt_str_at(root, "/data/customer_id")?.map(CustomerId::parse).transpose()?;
    let subscription_id = opt_str_at(root, "/data/subscription_id")?.map(SubscriptionId::parse).transpose()?;
    let money = money_at(root, "/data/amount", "/data/currency")?;
    let key = match action {
        InvoiceAction::Paid => format!("invoice.paid:{invoice_id}"),
        InvoiceAction::Refunded => format!("invoice.refunded:{invoice_id}"),
        InvoiceAction::PaymentFailed => match opt_int_at(root, "/data/attempt_count")? {
            Some(n) => format!("invoice.payment_failed:{invoice_id}:{n}"),
            None => format!("invoice.payment_failed:{invoice_id}:{}", env.event_id),
        },
    };
    let change = InvoiceChange { invoice_id, customer_id, subscription_id, action, money };
    Ok(env.event(key, Effect::Invoice(change)))
}

pub(super) fn encode(e: &Outgoing<'_>) -> Value {
    serde_json::json!({
        "id": e.event_id,
        "type": e.action.generic_type(),
        "created": e.created,
        "data": { "order_id": e.order_id, "amount": e.amount_minor, "currency": e.currency },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use serde_json::json;

    fn parse(v: Value) -> Result<Event, ParseError> {
        Format::Generic.parse(v.to_string().as_bytes())
    }

    /// The Standard Webhooks specification's example payload, as a Standard Webhooks sender delivers it.
    const SPEC_EXAMPLE: &str = r#"{
        "type": "contact.created",
        "timestamp": "2022-11-03T20:26:10.344522Z",
        "data": {"id": "1f81eb52-5198-4599-803e-771906343485", "type": "contact", "email": "example@example.com"}
    }"#;

    #[test]
    fn the_standard_webhooks_example_takes_its_id_from_webhook_id_and_its_time_from_timestamp() {
        let headers = [("webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"), ("webhook-timestamp", "1667507170")];
        let e = Format::Generic.parse_delivery(&headers, SPEC_EXAMPLE.as_bytes()).unwrap().remove(0);
        assert_eq!(e.event_id.as_str(), "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W");
        assert_eq!(
            (e.event_type.as_str(), e.occurred_at, &e.effect),
            ("contact.created", 1_667_507_170, &Effect::Ignored)
        );
        assert_eq!(e.business_key, "contact.created:msg_2KWPBgLlAfxdpx2AI54pPJ85f4W");
        // Svix's names for the same headers; a payment event in that shape is applied as any other.
        let svix = [("svix-id", "msg_p1"), ("svix-timestamp", "1667507170")];
        let pay = r#"{"type":"payment.succeeded","data":{"order_id":"ord_1","amount":100,"currency":"usd"}}"#;
        let e = Format::Generic.parse_delivery(&svix, pay.as_bytes()).unwrap().remove(0);
        assert_eq!((e.event_id.as_str(), e.occurred_at), ("msg_p1", 1_667_507_170), "the header's time");
        assert!(matches!(e.effect, Effect::Order { action: OrderAction::Pay, .. }), "{e:?}");
        // The body's own id and time win over the headers.
        let own = r#"{"id":"evt_own","type":"x","created":5}"#;
        let e = Format::Generic.parse_delivery(&headers, own.as_bytes()).unwrap().remove(0);
        assert_eq!((e.event_id.as_str(), e.occurred_at), ("evt_own", 5));
    }

    #[test]
    fn without_an_id_in_the_body_or_the_headers_the_event_is_refused() {
        assert_eq!(Format::Generic.parse(SPEC_EXAMPLE.as_bytes()).unwrap_err(), ParseError::Missing("/id"));
        let headers = [("webhook-id", "msg_1")];
        let bad_time = r#"{"type":"x","timestamp":"yesterday"}"#;
        let err = Format::Generic.parse_delivery(&headers, bad_time.as_bytes()).unwrap_err();
        assert!(matches!(err, ParseError::Invalid(_)), "{err:?}");
        let err = Format::Generic.parse_delivery(&headers, br#"{"type":"x"}"#).unwrap_err();
        assert_eq!(err, ParseError::Missing("/created"));
    }

    fn sub(v: Value) -> (Event, SubscriptionChange) {
        let e = parse(v).unwrap();
        let Effect::Subscription(c) = e.effect.clone() else { panic!("not a subscription: {e:?}") };
        (e, c)
    }

    fn inv(v: Value) -> (Event, InvoiceChange) {
        let e = parse(v).unwrap();
        let Effect::Invoice(c) = e.effect.clone() else { panic!("not an invoice: {e:?}") };
        (e, c)
    }

    #[test]
    fn subscription_created_with_status_and_customer_is_a_full_object() {
        let (e, c) = sub(json!({"id":"evt_1","type":"subscription.created","created":1700000000,
            "data":{"subscription_id":"sub_1","customer_id":"cus_1","status":"active","current_period_end":1702592000}}));
        assert_eq!(e.business_key, "subscription.created:sub_1:1700000000");
        assert_eq!(
            (c.subscription_id.as_str(), c.action, c.status.as_str()),
            ("sub_1", SubscriptionAction::Created, "active")
        );
        assert_eq!(c.customer_id.unwrap().as_str(), "cus_1");
        assert_eq!(c.current_period_end, Some(1_702_592_000));
        assert!(c.full_object);
    }

    #[test]
    fn subscription_updated_without_customer_is_partial_and_without_status_an_error() {
        let (_, c) = sub(json!({"id":"evt_2","type":"subscription.updated","created":5,
            "data":{"subscription_id":"sub_1","status":"past_due"}}));
        assert_eq!((c.action, c.status.as_str(), c.full_object), (SubscriptionAction::Updated, "past_due", false));
        let err = parse(json!({"id":"evt_3","type":"subscription.updated","created":5,
            "data":{"subscription_id":"sub_1","customer_id":"cus_1"}}));
        assert_eq!(err, Err(ParseError::Missing("/data/status")));
    }

    #[test]
    fn subscription_deleted_without_an_ended_status_is_canceled() {
        let (e, c) = sub(json!({"id":"evt_4","type":"subscription.deleted","created":9,
            "data":{"subscription_id":"sub_1"}}));
        assert_eq!(e.business_key, "subscription.deleted:sub_1:9");
        assert_eq!((c.action, c.status.as_str()), (SubscriptionAction::Deleted, "canceled"));
        let (_, c) = sub(json!({"id":"evt_5","type":"subscription.deleted","created":9,
            "data":{"subscription_id":"sub_1","status":"incomplete_expired"}}));
        assert_eq!(c.status.as_str(), "incomplete_expired");
    }

    #[test]
    fn invoice_paid_is_keyed_on_the_invoice_whatever_the_event_id() {
        let body = |id: &str| {
            json!({"id":id,"type":"invoice.paid","created":10,
                   "data":{"invoice_id":"in_1","customer_id":"cus_1","subscription_id":"sub_1",
                           "amount":2000,"currency":"usd"}})
        };
        let (a, c) = inv(body("evt_a"));
        let (b, _) = inv(body("evt_b"));
        assert_eq!((a.business_key.as_str(), b.business_key.as_str()), ("invoice.paid:in_1", "invoice.paid:in_1"));
        assert_eq!(c.action, InvoiceAction::Paid);
        assert_eq!(c.subscription_id.unwrap().as_str(), "sub_1");
        assert_eq!(c.money.unwrap().amount_minor, 2000);
    }

    #[test]
    fn invoice_payment_failed_and_refunded() {
        let (e, c) = inv(json!({"id":"evt_f","type":"invoice.payment_failed","created":10,
            "data":{"invoice_id":"in_1","attempt_count":2}}));
        assert_eq!(
            (e.business_key.as_str(), c.action),
            ("invoice.payment_failed:in_1:2", InvoiceAction::PaymentFailed)
        );
        let (e, _) =
            inv(json!({"id":"evt_g","type":"invoice.payment_failed","created":10,"data":{"invoice_id":"in_1"}}));
        assert_eq!(e.business_key, "invoice.payment_failed:in_1:evt_g");
        let (e, c) = inv(json!({"id":"evt_r","type":"invoice.refunded","created":11,
            "data":{"invoice_id":"in_1","amount":2000,"currency":"usd"}}));
        assert_eq!((e.business_key.as_str(), c.action), ("invoice.refunded:in_1", InvoiceAction::Refunded));
        assert!(c.customer_id.is_none() && c.money.is_some());
        let err = parse(json!({"id":"evt_x","type":"invoice.paid","created":1,"data":{"customer_id":"c"}}));
        assert_eq!(err, Err(ParseError::Missing("/data/invoice_id")));
    }
}
