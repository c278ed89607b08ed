//! Stripe's event objects: `{"id","type","created","data":{"object":{...}}}`.
//!
//! Event id: `id`. Business keys:
//!
//! - order effects (`payment_intent.succeeded|payment_failed`, `charge.refunded`, `charge.dispute.created`,
//!   `checkout.session.completed`): `{type}:{object id}`; the order is `metadata.order_id` (the checkout
//!   session's `client_reference_id`).
//! - `customer.subscription.created|updated|deleted`: `{type}:{subscription id}:{created}`. The object is the
//!   whole subscription; `current_period_end` is read from the object or, in API versions from 2025-03-31 on,
//!   from `items.data[0]`. A deletion keeps the object's status when it is an ended one, else `canceled`.
//! - `invoice.paid` and `invoice.payment_succeeded`: `invoice.paid:{invoice id}`: Stripe sends both for one
//!   invoice, and they are one fact. Money is `amount_paid`; the subscription is `subscription`, or
//!   `parent.subscription_details.subscription` in newer API versions.
//! - `invoice.payment_failed`: `invoice.payment_failed:{invoice id}:{attempt_count}` (each attempt is reported
//!   once; the event id stands in when `attempt_count` is absent). Money is `amount_due`.
//! - `charge.refunded` of a charge with no `metadata.order_id` but an `invoice`: an invoice refund keyed
//!   `invoice.refunded:{invoice id}` (one revocation per invoice); with `metadata.order_id` it refunds the order.
//! - anything else is ignored, keyed `{type}:{id}`.

use super::common::{Envelope, ended_status, envelope, money_at, opt_int_at, ref_at, str_at};
use super::{Outgoing, ParseError};
use crate::event::{CustomerId, Effect, Event, InvoiceId, OrderAction, OrderId, SubscriptionId};
use crate::event::{InvoiceAction, InvoiceChange, SubscriptionAction, SubscriptionChange, SubscriptionStatus};
use serde_json::Value;

pub(super) fn parse(root: &Value) -> Result<Event, ParseError> {
    let env = envelope(root)?;
    let object = crate::json_pointer::get(root, "/data/object").ok_or(ParseError::Missing("/data/object"))?;
    let (action, order_id, money) = match env.event_type.as_str() {
        "customer.subscription.created" => return subscription(object, env, SubscriptionAction::Created),
        "customer.subscription.updated" => return subscription(object, env, SubscriptionAction::Updated),
        "customer.subscription.deleted" => return subscription(object, env, SubscriptionAction::Deleted),
        "invoice.paid" | "invoice.payment_succeeded" => return invoice(object, env, InvoiceAction::Paid),
        "invoice.payment_failed" => return invoice(object, env, InvoiceAction::PaymentFailed),
        "charge.refunded" if is_invoice_refund(object) => return invoice(object, env, InvoiceAction::Refunded),
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

/// A refund of a charge that paid an invoice rather than a registered order.
fn is_invoice_refund(charge: &Value) -> bool {
    crate::json_pointer::get(charge, "/metadata/order_id").and_then(Value::as_str).is_none()
        && ref_at(charge, "/invoice").is_some()
}

fn customer(object: &Value) -> Result<Option<CustomerId>, ParseError> {
    Ok(ref_at(object, "/customer").map(CustomerId::parse).transpose()?)
}

fn subscription(object: &Value, env: Envelope, action: SubscriptionAction) -> Result<Event, ParseError> {
    let subscription_id = SubscriptionId::parse(str_at(object, "/id")?)?;
    let status = match action {
        SubscriptionAction::Deleted => ended_status(object.get("status").and_then(Value::as_str))?,
        _ => SubscriptionStatus::parse(str_at(object, "/status")?)?,
    };
    let current_period_end = match opt_int_at(object, "/current_period_end")? {
        Some(t) => Some(t),
        None => opt_int_at(object, "/items/data/0/current_period_end")?,
    };
    let key = format!("{}:{}:{}", env.event_type, subscription_id, env.occurred_at);
    let change = SubscriptionChange {
        subscription_id,
        customer_id: customer(object)?,
        action,
        status,
        current_period_end,
        full_object: true,
    };
    Ok(env.event(key, Effect::Subscription(change)))
}

fn invoice(object: &Value, env: Envelope, action: InvoiceAction) -> Result<Event, ParseError> {
    let (invoice_id, money, subscription_id) = match action {
        InvoiceAction::Refunded => {
            let invoice = ref_at(object, "/invoice").ok_or(ParseError::Missing("/invoice"))?;
            (InvoiceId::parse(invoice)?, money_at(object, "/amount_refunded", "/currency")?, None)
        }
        InvoiceAction::Paid | InvoiceAction::PaymentFailed => {
            let amount = if action == InvoiceAction::Paid { "/amount_paid" } else { "/amount_due" };
            let subscription =
                ref_at(object, "/subscription").or_else(|| ref_at(object, "/parent/subscription_details/subscription"));
            let subscription = subscription.map(SubscriptionId::parse).transpose()?;
            (InvoiceId::parse(str_at(object, "/id")?)?, money_at(object, amount, "/currency")?, subscription)
        }
    };
    let key = match action {
        InvoiceAction::Paid => format!("invoice.paid:{invoice_id}"),
        InvoiceAction::Refunded => format!("invoice.refunded:{invoice_id}"),
        InvoiceAction::PaymentFailed => match opt_int_at(object, "/attempt_count")? {
            Some(n) => format!("invoice.payment_failed:{invoice_id}:{n}"),
            None => format!("invoice.payment_failed:{invoice_id}:{}", env.event_id),
        },
    };
    let change = InvoiceChange { invoice_id, customer_id: customer(object)?, subscription_id, action, money };
    Ok(env.event(key, Effect::Invoice(change)))
}

pub(super) fn encode(e: &Outgoing<'_>) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use serde_json::json;

    fn event(ty: &str, id: &str, created: i64, object: Value) -> Result<Event, ParseError> {
        let v = json!({"id":id,"object":"event","api_version":"2024-06-20","created":created,"livemode":false,
                       "pending_webhooks":1,"type":ty,"data":{"object":object}});
        Format::Stripe.parse(v.to_string().as_bytes())
    }

    /// A subscription object as Stripe documents it, trimmed; `current_period_end` on the object (API versions
    /// before 2025-03-31).
    fn subscription_object(status: &str) -> Value {
        json!({"id":"sub_1MowQVLkdIwHu7ixeRlqHVzs","object":"subscription","billing_cycle_anchor":1679609767,
               "cancel_at_period_end":false,"collection_method":"charge_automatically","created":1679609767,
               "currency":"usd","current_period_end":1682288167,"current_period_start":1679609767,
               "customer":"cus_Na6dX7aXxi11N4","items":{"object":"list","data":[{"id":"si_Na6dzxczY5fwHx",
               "object":"subscription_item","price":{"id":"price_1MowQULkdIwHu7ixraBm864M"},"quantity":1}]},
               "latest_invoice":"in_1MowQWLkdIwHu7ixuzkSPfKd","livemode":false,"status":status})
    }

    fn subscription_of(e: &Event) -> &SubscriptionChange {
        let Effect::Subscription(c) = &e.effect else { panic!("not a subscription: {e:?}") };
        c
    }

    fn invoice_of(e: &Event) -> &InvoiceChange {
        let Effect::Invoice(c) = &e.effect else { panic!("not an invoice: {e:?}") };
        c
    }

    #[test]
    fn subscription_created_and_updated_carry_the_whole_subscription() {
        let e = event("customer.subscription.created", "evt_1", 1679609768, subscription_object("incomplete")).unwrap();
        assert_eq!(e.business_key, "customer.subscription.created:sub_1MowQVLkdIwHu7ixeRlqHVzs:1679609768");
        let c = subscription_of(&e);
        assert_eq!((c.action, c.status.as_str(), c.full_object), (SubscriptionAction::Created, "incomplete", true));
        assert_eq!(c.customer_id.as_ref().unwrap().as_str(), "cus_Na6dX7aXxi11N4");
        assert_eq!(c.current_period_end, Some(1_682_288_167));
        let e = event("customer.subscription.updated", "evt_2", 1679609790, subscription_object("active")).unwrap();
        assert_eq!(
            (subscription_of(&e).action, subscription_of(&e).status.as_str()),
            (SubscriptionAction::Updated, "active")
        );
    }

    #[test]
    fn newer_api_versions_put_the_period_end_on_the_items() {
        let mut object = subscription_object("active");
        object.as_object_mut().unwrap().remove("current_period_end");
        object["items"]["data"][0]["current_period_end"] = json!(1_700_000_000);
        let e = event("customer.subscription.updated", "evt_3", 5, object).unwrap();
        assert_eq!(subscription_of(&e).current_period_end, Some(1_700_000_000));
        let mut object = subscription_object("active");
        object["status"] = Value::Null;
        assert_eq!(event("customer.subscription.updated", "evt_4", 5, object), Err(ParseError::Missing("/status")));
    }

    #[test]
    fn subscription_deleted_keeps_an_ended_status_and_defaults_to_canceled() {
        let e = event("customer.subscription.deleted", "evt_5", 9, subscription_object("incomplete_expired")).unwrap();
        assert_eq!(subscription_of(&e).status.as_str(), "incomplete_expired");
        assert_eq!(subscription_of(&e).action, SubscriptionAction::Deleted);
        let mut object = subscription_object("canceled");
        object.as_object_mut().unwrap().remove("status");
        let e = event("customer.subscription.deleted", "evt_6", 9, object).unwrap();
        assert_eq!(subscription_of(&e).status.as_str(), "canceled");
    }

    /// An invoice object as Stripe documents it, trimmed.
    fn invoice_object() -> Value {
        json!({"id":"in_1MtHbELkdIwHu7ixl4OzzPMv","object":"invoice","account_country":"US","amount_due":2000,
               "amount_paid":2000,"amount_remaining":0,"attempt_count":1,"attempted":true,
               "billing_reason":"subscription_cycle","currency":"usd","customer":"cus_NeZwdNtLEOXuvB",
               "paid":true,"status":"paid","subscription":"sub_1MowQVLkdIwHu7ixeRlqHVzs"})
    }

    #[test]
    fn invoice_paid_and_payment_succeeded_are_one_fact() {
        let a = event("invoice.paid", "evt_a", 10, invoice_object()).unwrap();
        let b = event("invoice.payment_succeeded", "evt_b", 10, invoice_object()).unwrap();
        assert_eq!(a.business_key, "invoice.paid:in_1MtHbELkdIwHu7ixl4OzzPMv");
        assert_eq!(a.business_key, b.business_key);
        assert_eq!(a.effect, b.effect);
        let c = invoice_of(&a);
        assert_eq!(c.action, InvoiceAction::Paid);
        assert_eq!(c.customer_id.as_ref().unwrap().as_str(), "cus_NeZwdNtLEOXuvB");
        assert_eq!(c.subscription_id.as_ref().unwrap().as_str(), "sub_1MowQVLkdIwHu7ixeRlqHVzs");
        assert_eq!(c.money.as_ref().unwrap().amount_minor, 2000);
    }

    #[test]
    fn newer_invoices_name_their_subscription_under_parent() {
        let mut object = invoice_object();
        object.as_object_mut().unwrap().remove("subscription");
        object["parent"] = json!({"type":"subscription_details","quote_details":null,
            "subscription_details":{"metadata":{},"subscription":"sub_new"}});
        let e = event("invoice.paid", "evt_c", 10, object).unwrap();
        assert_eq!(invoice_of(&e).subscription_id.as_ref().unwrap().as_str(), "sub_new");
    }

    #[test]
    fn invoice_payment_failed_is_keyed_per_attempt() {
        let mut object = invoice_object();
        object["attempt_count"] = json!(2);
        object["amount_paid"] = json!(0);
        let e = event("invoice.payment_failed", "evt_f", 10, object).unwrap();
        assert_eq!(e.business_key, "invoice.payment_failed:in_1MtHbELkdIwHu7ixl4OzzPMv:2");
        let c = invoice_of(&e);
        assert_eq!((c.action, c.money.as_ref().unwrap().amount_minor), (InvoiceAction::PaymentFailed, 2000));
    }

    #[test]
    fn a_refunded_invoice_charge_revokes_the_invoice_and_an_order_charge_refunds_the_order() {
        let charge = json!({"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":2000,"amount_refunded":2000,
                            "currency":"usd","customer":"cus_NeZwdNtLEOXuvB","invoice":"in_1MtHbELkdIwHu7ixl4OzzPMv",
                            "metadata":{},"paid":true,"refunded":true});
        let e = event("charge.refunded", "evt_r", 20, charge.clone()).unwrap();
        assert_eq!(e.business_key, "invoice.refunded:in_1MtHbELkdIwHu7ixl4OzzPMv");
        let c = invoice_of(&e);
        assert_eq!((c.invoice_id.as_str(), c.action), ("in_1MtHbELkdIwHu7ixl4OzzPMv", InvoiceAction::Refunded));
        assert_eq!(c.money.as_ref().unwrap().amount_minor, 2000);
        let mut with_order = charge;
        with_order["metadata"] = json!({"order_id":"ord_1"});
        let e = event("charge.refunded", "evt_o", 20, with_order).unwrap();
        assert_eq!(e.business_key, "charge.refunded:ch_3MmlLrLkdIwHu7ix0snN0B15");
        assert!(matches!(e.effect, Effect::Order { action: OrderAction::Refund, .. }));
    }
}
