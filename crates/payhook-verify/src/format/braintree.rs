//! Braintree's webhook notifications: a form body whose `bt_payload` is the base64 of an XML `<notification>`
//! with a `<timestamp>`, a `<kind>` and a `<subject>` (the transaction, dispute or subscription it is about).
//!
//! - **Subject id**: the transaction's id for `transaction_*` kinds and for `subscription_charged_*` (the charge
//!   is the fact, and a subscription is charged once per billing cycle: its newest transaction, the first of
//!   `<transactions>`), the dispute's for `dispute_*`, the subscription's for the other `subscription_*` kinds,
//!   else the `<id>` of the subject's first element, if any.
//! - **Event id**: `{kind}:{subject id}:{timestamp}`, the timestamp in unix seconds. Braintree sends no event id;
//!   a redelivery of one notification carries the same payload, hence the same id.
//! - **Business key**: `{kind}:{subject id}`: one fact per kind and subject. `subscription_went_active` and
//!   `subscription_went_past_due` can happen to one subscription again and again (past due, paid, past due…), so
//!   theirs also carries the timestamp.
//! - **occurred_at**: `<timestamp>`, required.
//! - **Effects**, money from the `<amount>` (a decimal in major units) and `<currency-iso-code>`:
//!   - `transaction_settled` and `transaction_disbursed` pay the transaction's `<order-id>`,
//!     `transaction_settlement_declined` fails it. A transaction without an order id that belongs to a
//!     subscription is ignored (its charge is `subscription_charged_*`'s); without either it is a parse error.
//!   - `dispute_opened` disputes the `<order-id>` of the dispute's `<transaction>`, for `<amount-disputed>`.
//!     Its later outcomes (`dispute_won`, `dispute_lost`, …) are ignored: the ledger has no state for them.
//!   - `subscription_charged_successfully` (`_unsuccessfully`) pays (fails) the newest transaction's
//!     `<order-id>` when it has one; Braintree usually sets none on renewals, and then it is an invoice paid
//!     (payment failed) whose invoice id is the transaction id, with the subscription id and the transaction's
//!     customer.
//!   - `subscription_canceled` and `subscription_expired` delete the subscription; `subscription_went_active` and
//!     `subscription_went_past_due` update it (with the whole subscription, so either may create it). Its status is
//!     Braintree's, lower-cased with `_` for spaces (`Past Due` is `past_due`); its period ends at the end of its
//!     `<billing-period-end-date>` (else `<paid-through-date>`), read as UTC.
//!   - Braintree has no webhook for a refund (a refund is a `credit` transaction of its own, and only a failed
//!     one is notified): every other kind is ignored.
//!
//! A payload that is not base64 of UTF-8 XML, or holds a DTD, is a parse error; so is a notification without its
//! timestamp, kind or the fields its effect needs. The signature (`bt_signature`) is the signature module's
//! business; this module neither reads nor writes it.

use super::ParseError;
use super::common::{currency_exponent, decimal_to_minor, minor_to_decimal};
use crate::event::{Currency, CustomerId, Effect, Event, EventId, InvalidValue, InvoiceId, Money, OrderAction};
use crate::event::{InvoiceAction, InvoiceChange, SubscriptionAction, SubscriptionChange, SubscriptionStatus};
use crate::event::{OrderId, SubscriptionId};
use crate::signature::braintree_payload;
use crate::time::{parse_iso8601, rfc3339};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use roxmltree::{Document, Node, ParsingOptions};

use super::Outgoing;

/// The most XML nodes a notification may have; Braintree's largest subjects have a few hundred.
const MAX_NODES: u32 = 20_000;

/// A day, in seconds: a period that ends on a date ends at the end of that day.
const DAY_SECS: i64 = 86_400;

pub(super) fn parse(body: &[u8]) -> Result<Event, ParseError> {
    let xml = notification_text(body)?;
    let options = ParsingOptions { allow_dtd: false, nodes_limit: MAX_NODES, ..ParsingOptions::default() };
    let doc = Document::parse_with_options(&xml, options).map_err(|e| ParseError::Xml(e.to_string()))?;
    let root = doc.root_element();
    if !root.has_tag_name("notification") {
        return Err(ParseError::Missing("notification"));
    }
    let timestamp = text(child(root, "timestamp")).ok_or(ParseError::Missing("notification/timestamp"))?;
    let occurred_at = parse_iso8601(timestamp).ok_or(ParseError::Invalid(InvalidValue {
        field: "timestamp",
        reason: "must be an ISO 8601 date-time such as 2024-01-01T10:00:00Z",
    }))?;
    let kind = text(child(root, "kind")).ok_or(ParseError::Missing("notification/kind"))?;
    let subject = child(root, "subject").ok_or(ParseError::Missing("notification/subject"))?;
    let notification = Notification { kind, occurred_at, subject };
    match kind {
        "transaction_settled" | "transaction_disbursed" => notification.transaction(OrderAction::Pay),
        "transaction_settlement_declined" => notification.transaction(OrderAction::Fail),
        "dispute_opened" => notification.dispute(),
        "subscription_charged_successfully" => notification.charge(OrderAction::Pay, InvoiceAction::Paid),
        "subscription_charged_unsuccessfully" => notification.charge(OrderAction::Fail, InvoiceAction::PaymentFailed),
        "subscription_canceled" => notification.subscription(SubscriptionAction::Deleted, "canceled"),
        "subscription_expired" => notification.subscription(SubscriptionAction::Deleted, "expired"),
        "subscription_went_active" => notification.subscription(SubscriptionAction::Updated, "active"),
        "subscription_went_past_due" => notification.subscription(SubscriptionAction::Updated, "past_due"),
        _ => notification.ignored(),
    }
}

/// The XML text of the form's `bt_payload`: base64, with the line breaks Braintree wraps it in.
fn notification_text(body: &[u8]) -> Result<String, ParseError> {
    let payload = form_urlencoded::parse(body)
        .find(|(name, _)| name == "bt_payload")
        .map(|(_, value)| value)
        .ok_or(ParseError::Missing("bt_payload"))?;
    let compact: String = payload.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let bytes = STANDARD
        .decode(compact)
        .map_err(|_| ParseError::Invalid(InvalidValue { field: "bt_payload", reason: "must be base64" }))?;
    String::from_utf8(bytes)
        .map_err(|_| ParseError::Invalid(InvalidValue { field: "bt_payload", reason: "must be the base64 of UTF-8" }))
}

/// The first child element of `node` called `name`.
fn child<'a, 'i>(node: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    node.children().find(|n| n.is_element() && n.has_tag_name(name))
}

/// The element at `path` under `node`.
fn at<'a, 'i>(node: Node<'a, 'i>, path: &[&str]) -> Option<Node<'a, 'i>> {
    path.iter().try_fold(node, |n, name| child(n, name))
}

/// An element's text, trimmed; `None` when it is absent, empty or `nil="true"` (Braintree's null).
fn text<'a>(node: Option<Node<'a, '_>>) -> Option<&'a str> {
    let node = node?;
    if node.attribute("nil") == Some("true") {
        return None;
    }
    node.text().map(str::trim).filter(|t| !t.is_empty())
}

/// A required text at `path` under `node`, reported as `what` when it is missing.
fn required<'a>(node: Node<'a, '_>, path: &[&str], what: &'static str) -> Result<&'a str, ParseError> {
    text(at(node, path)).ok_or(ParseError::Missing(what))
}

/// `<amount>` (a decimal in major units) and `<currency-iso-code>` as money.
fn money(amount: &str, currency: &str) -> Result<Money, ParseError> {
    let currency = Currency::parse(currency)?;
    let minor = decimal_to_minor(amount, currency_exponent(&currency))?;
    Ok(Money::new(minor, currency)?)
}

/// The end of a Braintree date (`YYYY-MM-DD`, read as UTC), unix seconds.
fn end_of_date(date: &str) -> Result<i64, ParseError> {
    let bad = InvalidValue { field: "billing-period-end-date", reason: "must be a date such as 2027-01-02" };
    if date.len() != 10 {
        return Err(ParseError::Invalid(bad));
    }
    let start = parse_iso8601(&format!("{date}T00:00:00Z")).ok_or(ParseError::Invalid(bad))?;
    Ok(start + DAY_SECS)
}

/// A parsed notification's envelope.
struct Notification<'a, 'i> {
    kind: &'a str,
    occurred_at: i64,
    subject: Node<'a, 'i>,
}

impl Notification<'_, '_> {
    /// The event for `subject_id`, keyed on `{kind}:{subject id}` unless `business_key` says otherwise.
    fn event(&self, subject_id: &str, business_key: Option<String>, effect: Effect) -> Result<Event, ParseError> {
        Ok(Event {
            event_id: EventId::parse(format!("{}:{subject_id}:{}", self.kind, self.occurred_at))?,
            event_type: self.kind.to_owned(),
            occurred_at: self.occurred_at,
            business_key: business_key.unwrap_or_else(|| format!("{}:{subject_id}", self.kind)),
            effect,
        })
    }

    fn order(&self, subject_id: &str, order_id: &str, action: OrderAction, money: Money) -> Result<Event, ParseError> {
        let effect = Effect::Order { order_id: OrderId::parse(order_id)?, action, money: Some(money) };
        self.event(subject_id, None, effect)
    }

    fn transaction(&self, action: OrderAction) -> Result<Event, ParseError> {
        let txn = child(self.subject, "transaction").ok_or(ParseError::Missing("subject/transaction"))?;
        let id = required(txn, &["id"], "subject/transaction/id")?;
        let Some(order_id) = text(child(txn, "order-id")) else {
            if text(child(txn, "subscription-id")).is_some() {
                return self.event(id, None, Effect::Ignored);
            }
            return Err(ParseError::Missing("subject/transaction/order-id"));
        };
        let amount = required(txn, &["amount"], "subject/transaction/amount")?;
        let currency = required(txn, &["currency-iso-code"], "subject/transaction/currency-iso-code")?;
        self.order(id, order_id, action, money(amount, currency)?)
    }

    fn dispute(&self) -> Result<Event, ParseError> {
        let dispute = child(self.subject, "dispute").ok_or(ParseError::Missing("subject/dispute"))?;
        let id = required(dispute, &["id"], "subject/dispute/id")?;
        let order_id = required(dispute, &["transaction", "order-id"], "subject/dispute/transaction/order-id")?;
        let amount = text(child(dispute, "amount-disputed")).or_else(|| text(child(dispute, "amount")));
        let amount = amount.ok_or(ParseError::Missing("subject/dispute/amount-disputed"))?;
        let currency = required(dispute, &["currency-iso-code"], "subject/dispute/currency-iso-code")?;
        self.order(id, order_id, OrderAction::Dispute, money(amount, currency)?)
    }

    fn charge(&self, order_action: OrderAction, invoice_action: InvoiceAction) -> Result<Event, ParseError> {
        let subscription = child(self.subject, "subscription").ok_or(ParseError::Missing("subject/subscription"))?;
        let subscription_id = required(subscription, &["id"], "subject/subscription/id")?;
        let txn = at(subscription, &["transactions", "transaction"])
            .ok_or(ParseError::Missing("subject/subscription/transactions/transaction"))?;
        let id = required(txn, &["id"], "subject/subscription/transactions/transaction/id")?;
        let amount = required(txn, &["amount"], "subject/subscription/transactions/transaction/amount")?;
        let currency =
            required(txn, &["currency-iso-code"], "subject/subscription/transactions/transaction/currency-iso-code")?;
        let money = money(amount, currency)?;
        if let Some(order_id) = text(child(txn, "order-id")) {
            return self.order(id, order_id, order_action, money);
        }
        let change = InvoiceChange {
            invoice_id: InvoiceId::parse(id)?,
            customer_id: text(at(txn, &["customer", "id"])).map(CustomerId::parse).transpose()?,
            subscription_id: Some(SubscriptionId::parse(subscription_id)?),
            action: invoice_action,
            money: Some(money),
        };
        self.event(id, None, Effect::Invoice(change))
    }

    fn subscription(&self, action: SubscriptionAction, default_status: &str) -> Result<Event, ParseError> {
        let subscription = child(self.subject, "subscription").ok_or(ParseError::Missing("subject/subscription"))?;
        let id = required(subscription, &["id"], "subject/subscription/id")?;
        let sent_status = text(child(subscription, "status")).map(|s| s.to_ascii_lowercase().replace(' ', "_"));
        let status = sent_status.as_deref().unwrap_or(default_status);
        let status = match action {
            SubscriptionAction::Deleted => super::common::ended_status(Some(status))?,
            SubscriptionAction::Created | SubscriptionAction::Updated => SubscriptionStatus::parse(status)?,
        };
        let period_end = text(child(subscription, "billing-period-end-date"))
            .or_else(|| text(child(subscription, "paid-through-date")));
        let change = SubscriptionChange {
            subscription_id: SubscriptionId::parse(id)?,
            customer_id: text(at(subscription, &["transactions", "transaction", "customer", "id"]))
                .map(CustomerId::parse)
                .transpose()?,
            action,
            status,
            current_period_end: period_end.map(end_of_date).transpose()?,
            full_object: sent_status.is_some(),
        };
        let business_key = match action {
            SubscriptionAction::Updated => Some(format!("{}:{id}:{}", self.kind, self.occurred_at)),
            SubscriptionAction::Created | SubscriptionAction::Deleted => None,
        };
        self.event(id, business_key, Effect::Subscription(change))
    }

    fn ignored(&self) -> Result<Event, ParseError> {
        let first = self.subject.children().find(Node::is_element);
        match first.and_then(|n| text(child(n, "id"))) {
            Some(id) => self.event(id, None, Effect::Ignored),
            None => {
                let key = format!("{}:{}", self.kind, self.occurred_at);
                Ok(Event {
                    event_id: EventId::parse(key.clone())?,
                    event_type: self.kind.to_owned(),
                    occurred_at: self.occurred_at,
                    business_key: key,
                    effect: Effect::Ignored,
                })
            }
        }
    }
}

/// Text escaped for an XML element.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The unsigned form body (`bt_payload=…`) of the notification Braintree sends for `e`: `transaction_settled` for a
/// payment, `transaction_settlement_declined` for a failure, `dispute_opened` for a dispute; the event id is the
/// transaction's (or the dispute's) id. `None` for a refund, which Braintree does not notify.
pub(super) fn encode(e: &Outgoing<'_>) -> Option<Vec<u8>> {
    let currency = e.currency.to_ascii_uppercase();
    let exponent = Currency::parse(e.currency).map_or(2, |c| currency_exponent(&c));
    let amount = minor_to_decimal(e.amount_minor, exponent);
    let (id, order_id) = (escape(e.event_id), escape(e.order_id));
    let (kind, subject) = match e.action {
        OrderAction::Pay | OrderAction::Fail => {
            let (kind, status) = match e.action {
                OrderAction::Pay => ("transaction_settled", "settled"),
                _ => ("transaction_settlement_declined", "settlement_declined"),
            };
            let subject = format!(
                "    <transaction>\n      <id>{id}</id>\n      <status>{status}</status>\n      <type>sale</type>\n      \
                 <currency-iso-code>{currency}</currency-iso-code>\n      <amount>{amount}</amount>\n      \
                 <order-id>{order_id}</order-id>\n      <payment-instrument-type>us_bank_account\
                 </payment-instrument-type>\n    </transaction>\n"
            );
            (kind, subject)
        }
        OrderAction::Dispute => {
            let subject = format!(
                "    <dispute>\n      <id>{id}</id>\n      <amount>{amount}</amount>\n      \
                 <amount-disputed>{amount}</amount-disputed>\n      <currency-iso-code>{currency}\
                 </currency-iso-code>\n      <kind>chargeback</kind>\n      <reason>fraud</reason>\n      \
                 <status>open</status>\n      <transaction>\n        <id>txn_{order_id}</id>\n        \
                 <amount>{amount}</amount>\n        <order-id>{order_id}</order-id>\n      </transaction>\n    \
                 </dispute>\n"
            );
            ("dispute_opened", subject)
        }
        OrderAction::Refund => return None,
    };
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<notification>\n  <timestamp type=\"datetime\">{}</timestamp>\n  \
         <kind>{kind}</kind>\n  <subject>\n{subject}  </subject>\n</notification>\n",
        rfc3339(e.created)
    );
    let payload = braintree_payload(xml.as_bytes());
    Some(form_urlencoded::Serializer::new(String::new()).append_pair("bt_payload", &payload).finish().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;

    const CHARGED: &str = include_str!("../../tests/data/braintree/subscription_charged_successfully.payload");
    const DISPUTED: &str = include_str!("../../tests/data/braintree/dispute_opened.payload");
    const SETTLED: &str = include_str!("../../tests/data/braintree/transaction_settled.payload");

    fn form(payload: &str) -> Vec<u8> {
        let signature = "payhook_public_key|0000";
        form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", signature)
            .append_pair("bt_payload", payload)
            .finish()
            .into_bytes()
    }

    fn parse_payload(payload: &str) -> Result<Event, ParseError> {
        Format::Braintree.parse(&form(payload))
    }

    /// A notification of `kind` about `subject`, as Braintree sends it.
    fn notification(kind: &str, subject: &str) -> Result<Event, ParseError> {
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<notification>\n  <timestamp type=\"datetime\">\
             2026-12-05T10:00:00Z</timestamp>\n  <kind>{kind}</kind>\n  <subject>{subject}</subject>\n</notification>\n"
        );
        parse_payload(&braintree_payload(xml.as_bytes()))
    }

    fn order_of(e: &Event) -> (&str, OrderAction, i64, &str) {
        let Effect::Order { order_id, action, money: Some(m) } = &e.effect else { panic!("not an order: {e:?}") };
        (order_id.as_str(), *action, m.amount_minor, m.currency.as_str())
    }

    #[test]
    fn a_settled_transaction_pays_its_order_id_in_major_units() {
        let e = parse_payload(SETTLED).unwrap();
        assert_eq!(e.event_id.as_str(), "transaction_settled:txn_8m3:1796378400");
        assert_eq!(e.business_key, "transaction_settled:txn_8m3");
        assert_eq!((e.event_type.as_str(), e.occurred_at), ("transaction_settled", 1_796_378_400));
        assert_eq!(order_of(&e), ("ord_1042", OrderAction::Pay, 1999, "eur"));
    }

    #[test]
    fn an_opened_dispute_disputes_the_order_of_its_transaction() {
        let e = parse_payload(DISPUTED).unwrap();
        assert_eq!(e.event_id.as_str(), "dispute_opened:dsp_5t1:1796896800");
        assert_eq!(e.business_key, "dispute_opened:dsp_5t1");
        assert_eq!(order_of(&e), ("ord_1042", OrderAction::Dispute, 1999, "eur"));
    }

    #[test]
    fn a_charged_subscription_pays_the_order_of_its_newest_transaction() {
        let e = parse_payload(CHARGED).unwrap();
        assert_eq!(e.event_id.as_str(), "subscription_charged_successfully:txn_8m3:1796292000");
        assert_eq!(e.business_key, "subscription_charged_successfully:txn_8m3");
        assert_eq!(order_of(&e), ("ord_1042", OrderAction::Pay, 1999, "eur"));
    }

    #[test]
    fn a_renewal_without_an_order_id_is_an_invoice_paid_on_its_transaction() {
        let subject = "<subscription><id>sub_4xq9</id><status>Active</status><transactions type=\"array\">\
            <transaction><id>txn_9p1</id><currency-iso-code>EUR</currency-iso-code><amount>19.99</amount>\
            <order-id nil=\"true\"/><customer><id>cus_91</id></customer></transaction>\
            <transaction><id>txn_8m3</id><currency-iso-code>EUR</currency-iso-code><amount>19.99</amount>\
            <order-id>ord_1042</order-id></transaction></transactions></subscription>";
        let e = notification("subscription_charged_successfully", subject).unwrap();
        assert_eq!(e.business_key, "subscription_charged_successfully:txn_9p1");
        let Effect::Invoice(c) = &e.effect else { panic!("{e:?}") };
        assert_eq!((c.invoice_id.as_str(), c.action), ("txn_9p1", InvoiceAction::Paid));
        assert_eq!(c.subscription_id.as_ref().map(SubscriptionId::as_str), Some("sub_4xq9"));
        assert_eq!(c.customer_id.as_ref().map(CustomerId::as_str), Some("cus_91"));
        assert_eq!(c.money.as_ref().map(|m| m.amount_minor), Some(1999));
        let e = notification("subscription_charged_unsuccessfully", subject).unwrap();
        let Effect::Invoice(c) = &e.effect else { panic!("{e:?}") };
        assert_eq!(c.action, InvoiceAction::PaymentFailed);
    }

    #[test]
    fn subscriptions_end_and_change_with_braintree_statuses() {
        let sub = |status: &str| {
            format!(
                "<subscription><id>sub_4xq9</id><status>{status}</status>\
                 <billing-period-end-date type=\"date\">2027-01-02</billing-period-end-date></subscription>"
            )
        };
        let e = notification("subscription_canceled", &sub("Canceled")).unwrap();
        let Effect::Subscription(c) = &e.effect else { panic!("{e:?}") };
        assert_eq!((c.action, c.status.as_str()), (SubscriptionAction::Deleted, "canceled"));
        assert_eq!(c.current_period_end, Some(1_798_934_400));
        assert_eq!(e.business_key, "subscription_canceled:sub_4xq9");
        let e = notification("subscription_expired", &sub("Expired")).unwrap();
        let Effect::Subscription(c) = &e.effect else { panic!("{e:?}") };
        assert_eq!((c.action, c.status.as_str()), (SubscriptionAction::Deleted, "expired"));
        let e = notification("subscription_went_past_due", &sub("Past Due")).unwrap();
        let Effect::Subscription(c) = &e.effect else { panic!("{e:?}") };
        assert_eq!((c.action, c.status.as_str(), c.full_object), (SubscriptionAction::Updated, "past_due", true));
        assert_eq!(e.business_key, "subscription_went_past_due:sub_4xq9:1796464800");
        let e = notification("subscription_went_active", &sub("Active")).unwrap();
        let Effect::Subscription(c) = &e.effect else { panic!("{e:?}") };
        assert_eq!((c.action, c.status.as_str()), (SubscriptionAction::Updated, "active"));
    }

    #[test]
    fn a_transaction_without_an_order_id_is_ignored_when_a_subscription_bills_it_and_an_error_otherwise() {
        let txn = |extra: &str| {
            format!(
                "<transaction><id>txn_1</id><amount>1.00</amount><currency-iso-code>USD</currency-iso-code>{extra}\
                 </transaction>"
            )
        };
        let e = notification("transaction_settled", &txn("<subscription-id>sub_1</subscription-id>")).unwrap();
        assert_eq!((e.effect, e.business_key.as_str()), (Effect::Ignored, "transaction_settled:txn_1"));
        let err = notification("transaction_settled", &txn("")).unwrap_err();
        assert_eq!(err, ParseError::Missing("subject/transaction/order-id"));
        let e = notification("transaction_settlement_declined", &txn("<order-id>o_1</order-id>")).unwrap();
        assert_eq!(order_of(&e), ("o_1", OrderAction::Fail, 100, "usd"));
    }

    #[test]
    fn other_kinds_are_ignored() {
        let e = notification("dispute_won", "<dispute><id>dsp_1</id></dispute>").unwrap();
        assert_eq!((e.effect, e.event_id.as_str()), (Effect::Ignored, "dispute_won:dsp_1:1796464800"));
        let e = notification("check", "<check type=\"boolean\">true</check>").unwrap();
        assert_eq!((e.effect, e.event_id.as_str()), (Effect::Ignored, "check:1796464800"));
    }

    #[test]
    fn an_undecodable_payload_is_a_parse_error() {
        let dtd = "<?xml version=\"1.0\"?><!DOCTYPE n [<!ENTITY x \"y\">]><notification>&x;</notification>";
        let cases = [
            (form("not base64!"), "bt_payload"),
            (form(&braintree_payload(&[0xff, 0xfe])), "bt_payload"),
            (form(&braintree_payload(b"<notification><kind>")), "XML"),
            (form(&braintree_payload(dtd.as_bytes())), "XML"),
            (form(&braintree_payload(b"<other/>")), "notification"),
            (b"{\"id\":\"evt_1\"}".to_vec(), "bt_payload"),
        ];
        for (body, what) in cases {
            let err = Format::Braintree.parse(&body).unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
        let no_subject = notification("transaction_settled", "").map(|_| ());
        assert_eq!(no_subject, Err(ParseError::Missing("subject/transaction")));
    }

    #[test]
    fn order_ids_with_markup_survive_encoding() {
        let out = Outgoing {
            event_id: "txn_<1>",
            action: OrderAction::Dispute,
            order_id: "a&b",
            amount_minor: 1000,
            currency: "jpy",
            created: 1_700_000_000,
        };
        let e = Format::Braintree.parse(&Format::Braintree.encode(&out)).unwrap();
        assert_eq!(order_of(&e), ("a&b", OrderAction::Dispute, 1000, "jpy"));
        assert_eq!(e.event_id.as_str(), "dispute_opened:txn_<1>:1700000000");
        assert!(!Format::Braintree.encodes(OrderAction::Refund));
    }
}
