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
use crate::billing::{InvoiceAction, InvoiceChange, SubscriptionAction, SubscriptionChange, SubscriptionStatus};
use crate::event::{CustomerId, Effect, Event, InvoiceId, OrderAction, OrderId, SubscriptionId};
use serde_json::Value;

pub(super) fn parse(root: &Value) -> Result<Event, ParseError> {
    let env = envelope(root)?;
    let object = root.pointer("/data/object").ok_or(ParseError::Missing("/data/object"))?;
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
    charge.pointer("/metadata/order_id").and_then(Value::as_str).is_none() && ref_at(charge, "/invoice").is_some()
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
