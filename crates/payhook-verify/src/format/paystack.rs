//! Paystack's `{"event","data"}` bodies. Paystack sends no event id, so payhook makes one from the event name and
//! the id of the object in `data`.
//!
//! **Object id**: `data.id`; when it is absent (refunds, subscriptions and invoices often have none), the first of
//! `refund_reference`, `transaction_reference`, `subscription_code`, `invoice_code` and `reference`. An event
//! payhook ignores and that has none of them is keyed on a SHA-256 of its `data`, so a redelivery still collides.
//!
//! **Event id and business key**: both `{event}:{object id}`, with two exceptions:
//!
//! - `invoice.update` adds the invoice's state to the event id (`invoice.update:{id}:paid`, else `:{status}`),
//!   so that the update that pays an invoice is not taken for a redelivery of an earlier, unpaid update of the
//!   same invoice; the paid one is keyed `invoice.paid:{invoice_code}`, one entitlement per invoice as with the
//!   other formats.
//! - amounts are in the minor unit (kobo, pesewas, cents), as integers or numeric strings.
//!
//! **Effects**:
//!
//! - `charge.success`: pays order `data.reference` with `data.amount` and `data.currency`.
//! - `refund.processed`: refunds order `data.transaction_reference` (money when both amount and currency are
//!   there); other `refund.*` events are ignored.
//! - `charge.dispute.create`: disputes order `data.transaction.reference` (money `refund_amount`, else the
//!   transaction's amount).
//! - `subscription.create` (created), `subscription.not_renew` (updated, `non-renewing`) and `subscription.disable`
//!   (deleted; `data.status` when it is an ended one, else `canceled`): subscription `data.subscription_code`,
//!   customer `data.customer.customer_code`, period end `data.next_payment_date`. They carry the whole
//!   subscription when they name its customer.
//! - `invoice.update`: paid when `data.paid` is true or `data.status` is `success`, else ignored.
//!   `invoice.payment_failed`: a failed payment. Invoice `data.invoice_code`, customer
//!   `data.customer.customer_code`, subscription `data.subscription.subscription_code`, money `data.amount` with
//!   the currency of `data.transaction` or `data`.
//!
//! **occurred_at** (ISO 8601 strings, camelCase or snake_case): charges `paid_at`, then `created_at`; refunds
//! `refunded_at`, `updated_at`, `created_at`; disputes `created_at`; subscription creations `created_at`; other
//! subscription events and invoices `updated_at`, then `created_at` (paid invoices `paid_at` first). Orders do not
//! depend on event time, so charges, refunds and disputes without any timestamp get 0; subscription and invoice
//! events without one are a [`ParseError`], because the billing rules order them by time.

use super::common::{id_at, opt_str_at, str_at, timestamp_at};
use super::{Outgoing, ParseError};
use crate::event::{Currency, CustomerId, Effect, Event, EventId, InvoiceId, Money, OrderAction, OrderId};
use crate::event::{InvalidValue, SubscriptionId};
use crate::event::{InvoiceAction, InvoiceChange, SubscriptionAction, SubscriptionChange, SubscriptionStatus};
use crate::time::rfc3339;
use serde_json::Value;
use sha2::{Digest, Sha256};

const ID_FIELDS: [&str; 6] =
    ["/id", "/refund_reference", "/transaction_reference", "/subscription_code", "/invoice_code", "/reference"];

const CHARGE_TIMES: &[&str] = &["/paid_at", "/paidAt", "/created_at", "/createdAt"];
const REFUND_TIMES: &[&str] =
    &["/refunded_at", "/refundedAt", "/updated_at", "/updatedAt", "/created_at", "/createdAt"];
const CREATED_TIMES: &[&str] = &["/created_at", "/createdAt"];
const UPDATED_TIMES: &[&str] = &["/updated_at", "/updatedAt", "/created_at", "/createdAt"];
const PAID_TIMES: &[&str] = &["/paid_at", "/paidAt", "/updated_at", "/updatedAt", "/created_at", "/createdAt"];

/// What the event does, decided from its name before anything else is read.
enum Kind {
    Order(OrderAction),
    Subscription(SubscriptionAction),
    Invoice,
    Ignored,
}

pub(super) fn parse(root: &Value) -> Result<Event, ParseError> {
    let event = str_at(root, "/event")?;
    let data = root.get("data").filter(|d| d.is_object()).ok_or(ParseError::Missing("/data"))?;
    let kind = match event {
        "charge.success" => Kind::Order(OrderAction::Pay),
        "refund.processed" => Kind::Order(OrderAction::Refund),
        "charge.dispute.create" => Kind::Order(OrderAction::Dispute),
        "subscription.create" => Kind::Subscription(SubscriptionAction::Created),
        "subscription.not_renew" => Kind::Subscription(SubscriptionAction::Updated),
        "subscription.disable" => Kind::Subscription(SubscriptionAction::Deleted),
        "invoice.update" | "invoice.payment_failed" => Kind::Invoice,
        _ => Kind::Ignored,
    };
    let object_id = match ID_FIELDS.iter().find_map(|p| id_at(data, p)) {
        Some(id) => id,
        None if matches!(kind, Kind::Ignored) => {
            format!("sha256:{}", hex::encode(&Sha256::digest(data.to_string())[..8]))
        }
        None => return Err(ParseError::Missing("/data/id")),
    };
    let key = format!("{event}:{object_id}");
    match kind {
        Kind::Order(action) => order(event, key, data, action),
        Kind::Subscription(action) => subscription(event, key, data, action),
        Kind::Invoice => invoice(event, &object_id, data),
        Kind::Ignored => {
            let occurred_at = timestamp_at(data, UPDATED_TIMES)?.unwrap_or(0);
            Ok(Event {
                event_id: EventId::parse(key.clone())?,
                event_type: event.to_owned(),
                occurred_at,
                business_key: key,
                effect: Effect::Ignored,
            })
        }
    }
}

/// An amount in minor units, sent as an integer or a numeric string; `None` when absent or null.
fn amount_at(v: &Value, pointer: &'static str) -> Result<Option<i64>, ParseError> {
    match crate::json_pointer::get(v, pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or(ParseError::Missing(pointer)),
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().map(Some).map_err(|_| InvalidValue { field: "amount", reason: "is too large" }.into())
        }
        Some(_) => Err(ParseError::Missing(pointer)),
    }
}

/// Money from an amount and the first currency found; `None` unless both are there.
fn money(v: &Value, amount: &'static str, currencies: &[&'static str]) -> Result<Option<Money>, ParseError> {
    let Some(amount) = amount_at(v, amount)? else { return Ok(None) };
    for &c in currencies {
        if let Some(c) = opt_str_at(v, c)? {
            return Ok(Some(Money::new(amount, Currency::parse(c)?)?));
        }
    }
    Ok(None)
}

fn event(event: &str, event_id: String, key: String, occurred_at: i64, effect: Effect) -> Result<Event, ParseError> {
    Ok(Event {
        event_id: EventId::parse(event_id)?,
        event_type: event.to_owned(),
        occurred_at,
        business_key: key,
        effect,
    })
}

fn order(name: &str, key: String, data: &Value, action: OrderAction) -> Result<Event, ParseError> {
    let (order_id, money, times) = match action {
        OrderAction::Pay => {
            let money = money(data, "/amount", &["/currency"])?.ok_or(ParseError::Missing("/data/amount"))?;
            (id_at(data, "/reference").ok_or(ParseError::Missing("/data/reference"))?, Some(money), CHARGE_TIMES)
        }
        OrderAction::Refund => {
            let order =
                id_at(data, "/transaction_reference").ok_or(ParseError::Missing("/data/transaction_reference"))?;
            (order, money(data, "/amount", &["/currency"])?, REFUND_TIMES)
        }
        OrderAction::Dispute | OrderAction::Fail => {
            let order =
                id_at(data, "/transaction/reference").ok_or(ParseError::Missing("/data/transaction/reference"))?;
            let money = match money(data, "/refund_amount", &["/currency", "/transaction/currency"])? {
                Some(m) => Some(m),
                None => money(data, "/transaction/amount", &["/transaction/currency", "/currency"])?,
            };
            (order, money, CREATED_TIMES)
        }
    };
    let occurred_at = timestamp_at(data, times)?.unwrap_or(0);
    let effect = Effect::Order { order_id: OrderId::parse(order_id)?, action, money };
    event(name, key.clone(), key, occurred_at, effect)
}

fn customer(data: &Value) -> Result<Option<CustomerId>, ParseError> {
    Ok(opt_str_at(data, "/customer/customer_code")?.map(CustomerId::parse).transpose()?)
}

fn subscription(name: &str, key: String, data: &Value, action: SubscriptionAction) -> Result<Event, ParseError> {
    let subscription_id = SubscriptionId::parse(str_at(data, "/subscription_code")?)?;
    let status = opt_str_at(data, "/status")?;
    let (status, times) = match action {
        SubscriptionAction::Created => {
            (SubscriptionStatus::parse(status.ok_or(ParseError::Missing("/data/status"))?)?, CREATED_TIMES)
        }
        SubscriptionAction::Updated => (SubscriptionStatus::parse(status.unwrap_or("non-renewing"))?, UPDATED_TIMES),
        SubscriptionAction::Deleted => (super::common::ended_status(status)?, UPDATED_TIMES),
    };
    let occurred_at = timestamp_at(data, times)?.ok_or(ParseError::Missing("/data/created_at"))?;
    let current_period_end = timestamp_at(data, &["/next_payment_date", "/nextPaymentDate"])?;
    let customer_id = customer(data)?;
    let full_object = customer_id.is_some();
    let change = SubscriptionChange { subscription_id, customer_id, action, status, current_period_end, full_object };
    event(name, key.clone(), key, occurred_at, Effect::Subscription(change))
}

fn invoice(name: &str, object_id: &str, data: &Value) -> Result<Event, ParseError> {
    let invoice_id = InvoiceId::parse(str_at(data, "/invoice_code")?)?;
    let status = opt_str_at(data, "/status")?;
    let (action, event_id, key, times) = if name == "invoice.payment_failed" {
        let key = format!("{name}:{object_id}");
        (Some(InvoiceAction::PaymentFailed), key.clone(), key, UPDATED_TIMES)
    } else if data.get("paid") == Some(&Value::Bool(true)) || status == Some("success") {
        (
            Some(InvoiceAction::Paid),
            format!("{name}:{object_id}:paid"),
            format!("invoice.paid:{invoice_id}"),
            PAID_TIMES,
        )
    } else {
        let event_id = format!("{name}:{object_id}:{}", status.unwrap_or("unpaid"));
        (None, event_id.clone(), event_id, UPDATED_TIMES)
    };
    let occurred_at = timestamp_at(data, times)?.ok_or(ParseError::Missing("/data/created_at"))?;
    let Some(action) = action else { return event(name, event_id, key, occurred_at, Effect::Ignored) };
    let change = InvoiceChange {
        invoice_id,
        customer_id: customer(data)?,
        subscription_id: opt_str_at(data, "/subscription/subscription_code")?.map(SubscriptionId::parse).transpose()?,
        action,
        money: money(data, "/amount", &["/transaction/currency", "/currency"])?,
    };
    event(name, event_id, key, occurred_at, Effect::Invoice(change))
}

/// Paystack has no event for a failed charge: `Fail` gives `None`.
pub(super) fn encode(e: &Outgoing<'_>) -> Option<Value> {
    let at = rfc3339(e.created);
    let currency = e.currency.to_ascii_uppercase();
    let customer = serde_json::json!({
        "id": 68324, "first_name": "Ada", "last_name": "Obi", "email": "ada@example.com",
        "customer_code": "CUS_qo38as2hpsgk2r0", "phone": null, "metadata": null, "risk_action": "default",
    });
    let (event, data) = match e.action {
        OrderAction::Pay => (
            "charge.success",
            serde_json::json!({
                "id": e.event_id, "domain": "live", "status": "success", "reference": e.order_id,
                "amount": e.amount_minor, "message": null, "gateway_response": "Approved by Financial Institution",
                "paid_at": at, "created_at": at, "channel": "card", "currency": currency, "metadata": 0,
                "fees": null, "customer": customer, "plan": {},
            }),
        ),
        OrderAction::Fail => return None,
        OrderAction::Refund => (
            "refund.processed",
            serde_json::json!({
                "status": "processed", "transaction_reference": e.order_id, "refund_reference": e.event_id,
                "amount": e.amount_minor, "currency": currency, "processor": "mpgs_zen", "customer": customer,
                "integration": 412829, "domain": "live", "refunded_at": at,
            }),
        ),
        OrderAction::Dispute => (
            "charge.dispute.create",
            serde_json::json!({
                "id": e.event_id, "refund_amount": e.amount_minor, "currency": currency,
                "status": "awaiting-merchant-feedback", "resolution": null, "domain": "live", "category": "chargeback",
                "transaction": {
                    "id": 896467688, "domain": "live", "status": "success", "reference": e.order_id,
                    "amount": e.amount_minor, "currency": currency, "paid_at": at, "created_at": at,
                },
                "transaction_reference": null, "customer": customer, "created_at": at, "updated_at": at,
            }),
        ),
    };
    Some(serde_json::json!({ "event": event, "data": data }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;
    use serde_json::json;

    fn parse(v: Value) -> Result<Event, ParseError> {
        Format::Paystack.parse(v.to_string().as_bytes())
    }

    fn order_of(e: &Event) -> (&str, OrderAction, Option<i64>) {
        let Effect::Order { order_id, action, money } = &e.effect else { panic!("not an order: {e:?}") };
        (order_id.as_str(), *action, money.as_ref().map(|m| m.amount_minor))
    }

    /// Paystack's documented `charge.success` example, trimmed.
    fn charge_success() -> Value {
        json!({"event":"charge.success","data":{
            "id":302961,"domain":"live","status":"success","reference":"qTPrJoy9Bx","amount":10000,"message":null,
            "gateway_response":"Approved by Financial Institution","paid_at":"2016-09-30T21:10:19.000Z",
            "created_at":"2016-09-30T21:09:56.000Z","channel":"card","currency":"NGN","ip_address":"41.242.49.37",
            "metadata":0,"fees":null,
            "customer":{"id":68324,"first_name":"BoJack","last_name":"Horseman","email":"bojack@horsinaround.com",
                        "customer_code":"CUS_qo38as2hpsgk2r0","phone":null,"metadata":null,"risk_action":"default"},
            "authorization":{"authorization_code":"AUTH_f5rnfq9p","bin":"539999","last4":"8877","exp_month":"08",
                             "exp_year":"2020","card_type":"mastercard DEBIT","bank":"Guaranty Trust Bank",
                             "country_code":"NG","brand":"mastercard"},
            "plan":{}}})
    }

    #[test]
    fn charge_success_pays_the_reference_and_is_keyed_on_the_transaction_id() {
        let e = parse(charge_success()).unwrap();
        assert_eq!(e.event_id.as_str(), "charge.success:302961");
        assert_eq!(e.business_key, "charge.success:302961");
        assert_eq!(e.occurred_at, 1_475_269_819);
        assert_eq!(order_of(&e), ("qTPrJoy9Bx", OrderAction::Pay, Some(10_000)));
        let Effect::Order { money: Some(m), .. } = e.effect else { panic!() };
        assert_eq!(m.currency.as_str(), "ngn");
    }

    #[test]
    fn charge_success_without_amount_is_an_error_and_without_timestamps_happens_at_zero() {
        let mut v = charge_success();
        v["data"].as_object_mut().unwrap().remove("amount");
        assert_eq!(parse(v), Err(ParseError::Missing("/data/amount")));
        let mut v = charge_success();
        for k in ["paid_at", "created_at"] {
            v["data"].as_object_mut().unwrap().remove(k);
        }
        assert_eq!(parse(v).unwrap().occurred_at, 0);
    }

    #[test]
    fn refund_processed_refunds_the_transaction_and_is_keyed_on_the_refund_reference() {
        let e = parse(json!({"event":"refund.processed","data":{
            "status":"processed","transaction_reference":"qTPrJoy9Bx","refund_reference":"132013318360",
            "amount":"10000","currency":"NGN","processor":"mpgs_zen",
            "customer":{"first_name":"Damilola","last_name":"Odujoko","email":"damilola@example.com"},
            "integration":412829,"domain":"live"}}))
        .unwrap();
        assert_eq!(e.event_id.as_str(), "refund.processed:132013318360");
        assert_eq!(e.business_key, "refund.processed:132013318360");
        assert_eq!(order_of(&e), ("qTPrJoy9Bx", OrderAction::Refund, Some(10_000)));
        assert_eq!(e.occurred_at, 0);
        let pending = json!({"event":"refund.pending","data":{"transaction_reference":"t","refund_reference":"r"}});
        assert_eq!(parse(pending).unwrap().effect, Effect::Ignored);
    }

    #[test]
    fn charge_dispute_create_disputes_the_transaction_reference() {
        let e = parse(json!({"event":"charge.dispute.create","data":{
            "id":358950,"refund_amount":5800,"currency":"NGN","status":"awaiting-merchant-feedback",
            "resolution":null,"domain":"live","category":"chargeback",
            "transaction":{"id":896467688,"status":"success","reference":"v3vj2m1j8o","amount":5800,"currency":"NGN"},
            "transaction_reference":null,"created_at":"2020-11-20T11:36:31.000Z"}}))
        .unwrap();
        assert_eq!(e.business_key, "charge.dispute.create:358950");
        assert_eq!(order_of(&e), ("v3vj2m1j8o", OrderAction::Dispute, Some(5800)));
        assert_eq!(e.occurred_at, 1_605_872_191);
    }

    fn subscription_create() -> Value {
        json!({"event":"subscription.create","data":{
            "domain":"test","status":"active","subscription_code":"SUB_vsyqdmlzble3uii","amount":50000,
            "cron_expression":"0 0 28 * *","next_payment_date":"2016-05-19T07:00:00.000Z","open_invoice":null,
            "createdAt":"2016-03-20T00:23:24.000Z",
            "plan":{"name":"Monthly retainer","plan_code":"PLN_gx2wn530m0i3w3m","interval":"monthly",
                    "amount":50000,"currency":"NGN"},
            "authorization":{"authorization_code":"AUTH_96xphygz","last4":"4081","brand":"visa"},
            "customer":{"first_name":"BoJack","last_name":"Horseman","email":"bojack@horsinaround.com",
                        "customer_code":"CUS_xnxdt6s1zg1f4nx","phone":"","metadata":{},"risk_action":"default"},
            "created_at":"2016-03-20T00:23:24.000Z"}})
    }

    #[test]
    fn subscription_create_is_a_full_creation_timed_by_its_creation() {
        let e = parse(subscription_create()).unwrap();
        assert_eq!(e.event_id.as_str(), "subscription.create:SUB_vsyqdmlzble3uii");
        assert_eq!(e.occurred_at, 1_458_433_404);
        let Effect::Subscription(c) = e.effect else { panic!() };
        assert_eq!(
            (c.subscription_id.as_str(), c.action, c.status.as_str()),
            ("SUB_vsyqdmlzble3uii", SubscriptionAction::Created, "active")
        );
        assert_eq!(c.customer_id.unwrap().as_str(), "CUS_xnxdt6s1zg1f4nx");
        assert_eq!(c.current_period_end, Some(1_463_641_200));
        assert!(c.full_object);
    }

    #[test]
    fn a_subscription_event_without_any_timestamp_is_an_error() {
        let mut v = subscription_create();
        for k in ["createdAt", "created_at"] {
            v["data"].as_object_mut().unwrap().remove(k);
        }
        assert_eq!(parse(v), Err(ParseError::Missing("/data/created_at")));
    }

    #[test]
    fn subscription_disable_ends_the_subscription() {
        let mut v = subscription_create();
        v["event"] = json!("subscription.disable");
        v["data"]["status"] = json!("complete");
        v["data"]["updated_at"] = json!("2016-06-20T00:00:00.000Z");
        let e = parse(v.clone()).unwrap();
        assert_eq!(e.occurred_at, 1_466_380_800);
        let Effect::Subscription(c) = e.effect else { panic!() };
        assert_eq!((c.action, c.status.as_str()), (SubscriptionAction::Deleted, "complete"));
        v["data"]["status"] = json!("active");
        let Effect::Subscription(c) = parse(v).unwrap().effect else { panic!() };
        assert_eq!(c.status.as_str(), "canceled");
    }

    fn invoice_update() -> Value {
        json!({"event":"invoice.update","data":{
            "domain":"test","invoice_code":"INV_kdt7xlsw7ifidm5","amount":50000,
            "period_start":"2018-12-20T15:00:00.000Z","period_end":"2018-12-20T15:59:59.000Z","status":"success",
            "paid":true,"paid_at":"2018-12-20T15:00:00.000Z","description":null,
            "authorization":{"authorization_code":"AUTH_trvshlcaxg","last4":"4081","brand":"visa"},
            "subscription":{"status":"active","subscription_code":"SUB_p5k4ot5l4xpv8uy","amount":50000,
                            "next_payment_date":"2018-12-20T00:00:00.000Z","open_invoice":null},
            "customer":{"id":46,"first_name":"Asample","last_name":"Personpaying","email":"asam@ple.com",
                        "customer_code":"CUS_00w4ath3e2ukno4","phone":"","metadata":null,"risk_action":"default"},
            "transaction":{"reference":"9cfbae6e-bbf3-5b41-8aef-d72c1a17650g","status":"success","amount":50000,
                           "currency":"NGN"},
            "created_at":"2018-12-20T15:00:02.000Z"}})
    }

    #[test]
    fn a_paid_invoice_update_grants_keyed_on_the_invoice() {
        let e = parse(invoice_update()).unwrap();
        assert_eq!(e.event_id.as_str(), "invoice.update:INV_kdt7xlsw7ifidm5:paid");
        assert_eq!(e.business_key, "invoice.paid:INV_kdt7xlsw7ifidm5");
        assert_eq!(e.occurred_at, 1_545_318_000);
        let Effect::Invoice(c) = e.effect else { panic!() };
        assert_eq!((c.invoice_id.as_str(), c.action), ("INV_kdt7xlsw7ifidm5", InvoiceAction::Paid));
        assert_eq!(c.customer_id.unwrap().as_str(), "CUS_00w4ath3e2ukno4");
        assert_eq!(c.subscription_id.unwrap().as_str(), "SUB_p5k4ot5l4xpv8uy");
        let m = c.money.unwrap();
        assert_eq!((m.amount_minor, m.currency.as_str()), (50_000, "ngn"));
    }

    #[test]
    fn an_unpaid_invoice_update_is_ignored_under_its_own_event_id() {
        let mut v = invoice_update();
        v["data"]["paid"] = json!(false);
        v["data"]["status"] = json!("pending");
        let e = parse(v).unwrap();
        assert_eq!(e.effect, Effect::Ignored);
        assert_eq!(e.event_id.as_str(), "invoice.update:INV_kdt7xlsw7ifidm5:pending");
    }

    #[test]
    fn invoice_payment_failed_reports_the_invoice() {
        let mut v = invoice_update();
        v["event"] = json!("invoice.payment_failed");
        v["data"]["paid"] = json!(false);
        v["data"]["status"] = json!("pending");
        v["data"]["paid_at"] = Value::Null;
        v["data"]["transaction"] = json!({});
        let e = parse(v).unwrap();
        assert_eq!(e.business_key, "invoice.payment_failed:INV_kdt7xlsw7ifidm5");
        assert_eq!(e.occurred_at, 1_545_318_002);
        let Effect::Invoice(c) = e.effect else { panic!() };
        assert_eq!(c.action, InvoiceAction::PaymentFailed);
        assert!(c.money.is_none(), "no currency anywhere: no money");
    }

    #[test]
    fn unknown_events_are_ignored_even_without_an_id() {
        let v = json!({"event":"customeridentification.success","data":{"customer_code":"CUS_x","email":"a@b.c"}});
        let a = parse(v.clone()).unwrap();
        assert_eq!(a.effect, Effect::Ignored);
        assert!(a.event_id.as_str().starts_with("customeridentification.success:sha256:"));
        assert_eq!(parse(v).unwrap().event_id, a.event_id);
        assert_eq!(parse(json!({"event":"charge.success"})), Err(ParseError::Missing("/data")));
    }
}
