//! The normalized event every payload format produces, and the newtypes that carry its checks.
//!
//! Parse, don't validate: a value of these types is known to be well formed, so the store and the ledger never
//! re-check it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a value could not become one of the checked types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidValue {
    /// The field that was rejected, as the caller named it.
    pub field: &'static str,
    /// What was wrong with it.
    pub reason: &'static str,
}

fn check_id(field: &'static str, s: &str) -> Result<(), InvalidValue> {
    if s.is_empty() {
        return Err(InvalidValue { field, reason: "must not be empty" });
    }
    // Characters, not bytes: a limit a client can check (JSON Schema's `maxLength` counts characters too).
    if s.chars().count() > 255 {
        return Err(InvalidValue { field, reason: "must be at most 255 characters" });
    }
    if s.chars().any(char::is_control) {
        return Err(InvalidValue { field, reason: "must not contain control characters" });
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Checks `s`: non-empty, at most 255 characters, no control characters.
            pub fn parse(s: impl Into<String>) -> Result<Self, InvalidValue> {
                let s = s.into();
                check_id($field, &s)?;
                Ok(Self(s))
            }

            /// The checked string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidValue;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::parse(s)
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A provider's event id (`evt_…`, `msg_…`), unique per source.
    EventId,
    "event_id"
);
id_type!(
    /// A merchant's order id, as registered with `POST /v1/orders`.
    OrderId,
    "order_id"
);
id_type!(
    /// A provider's subscription id (`sub_…`, Paystack's `SUB_…` code).
    SubscriptionId,
    "subscription_id"
);
id_type!(
    /// A provider's customer id (`cus_…`, Paystack's `CUS_…` code).
    CustomerId,
    "customer_id"
);
id_type!(
    /// A provider's invoice id (`in_…`, Paystack's `INV_…` code): one entitlement per invoice.
    InvoiceId,
    "invoice_id"
);

/// The name of a configured source; it is the last path segment of `POST /webhooks/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SourceName(String);

impl SourceName {
    /// Checks `s`: 1 to 64 characters of `a-z`, `0-9`, `-` and `_`.
    pub fn parse(s: impl Into<String>) -> Result<Self, InvalidValue> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if ok {
            Ok(Self(s))
        } else {
            Err(InvalidValue { field: "source", reason: "must be 1 to 64 characters of a-z, 0-9, '-' and '_'" })
        }
    }

    /// The checked name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SourceName {
    type Error = InvalidValue;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl From<SourceName> for String {
    fn from(v: SourceName) -> String {
        v.0
    }
}

impl fmt::Display for SourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An ISO 4217 currency code, stored lower-cased (`usd`, `eur`) as providers like Stripe send it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Currency(String);

impl Currency {
    /// Accepts three ASCII letters in any case and lower-cases them.
    pub fn parse(s: &str) -> Result<Self, InvalidValue> {
        if s.len() == 3 && s.bytes().all(|b| b.is_ascii_alphabetic()) {
            Ok(Self(s.to_ascii_lowercase()))
        } else {
            Err(InvalidValue { field: "currency", reason: "must be a three-letter ISO 4217 code" })
        }
    }

    /// The lower-cased code.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Currency {
    type Error = InvalidValue;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<Currency> for String {
    fn from(v: Currency) -> String {
        v.0
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An amount in the currency's minor unit (cents), never negative.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Money {
    /// Amount in minor units.
    pub amount_minor: i64,
    /// Currency of the amount.
    pub currency: Currency,
}

impl Money {
    /// Checks that the amount is not negative.
    pub fn new(amount_minor: i64, currency: Currency) -> Result<Self, InvalidValue> {
        if amount_minor < 0 {
            return Err(InvalidValue { field: "amount", reason: "must not be negative" });
        }
        Ok(Self { amount_minor, currency })
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.amount_minor, self.currency)
    }
}

/// What an event asks of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderAction {
    /// The payment succeeded: the order becomes paid (and a receipt is due).
    Pay,
    /// The payment attempt failed.
    Fail,
    /// The payment was refunded.
    Refund,
    /// The payment was disputed (chargeback).
    Dispute,
}

impl OrderAction {
    /// Every action, for rules and tests that must cover them all.
    pub const ALL: [OrderAction; 4] = [Self::Pay, Self::Fail, Self::Refund, Self::Dispute];
}

/// The business effect an event carries, independent of the provider's vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Effect {
    /// A change to a registered order.
    Order {
        /// The order the event is about.
        order_id: OrderId,
        /// What happened to it.
        action: OrderAction,
        /// The amount the event carries, when it carries one.
        money: Option<Money>,
    },
    /// A subscription was created, changed or ended.
    Subscription(SubscriptionChange),
    /// An invoice was paid, failed or refunded: grants and revokes entitlements.
    Invoice(InvoiceChange),
    /// A type payhook does not act on: recorded and answered `ignored`.
    Ignored,
}

/// A provider's subscription status, lower-cased (`active`, `past_due`, `canceled`, Paystack's `non-renewing`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SubscriptionStatus(String);

/// Statuses after which a subscription never changes again.
const ENDED: [&str; 8] =
    ["canceled", "cancelled", "incomplete_expired", "complete", "completed", "ended", "expired", "disabled"];

impl SubscriptionStatus {
    /// Accepts 1 to 64 characters of letters, digits, `_` and `-`, and lower-cases them.
    pub fn parse(s: &str) -> Result<Self, InvalidValue> {
        let ok =
            !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(Self(s.to_ascii_lowercase()))
        } else {
            Err(InvalidValue { field: "status", reason: "must be 1 to 64 characters of letters, digits, '_' and '-'" })
        }
    }

    /// The status a deleted subscription gets when its event does not say.
    pub fn canceled() -> Self {
        Self("canceled".to_owned())
    }

    /// The lower-cased status.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for statuses after which the subscription never changes again.
    pub fn is_ended(&self) -> bool {
        ENDED.contains(&self.0.as_str())
    }
}

impl TryFrom<String> for SubscriptionStatus {
    type Error = InvalidValue;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<SubscriptionStatus> for String {
    fn from(v: SubscriptionStatus) -> String {
        v.0
    }
}

impl fmt::Display for SubscriptionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a subscription event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubscriptionAction {
    /// The subscription was created.
    Created,
    /// Its status, period or plan changed.
    Updated,
    /// It ended.
    Deleted,
}

/// A subscription event, normalized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionChange {
    /// The provider's subscription id.
    pub subscription_id: SubscriptionId,
    /// Its customer, when the event names one.
    pub customer_id: Option<CustomerId>,
    /// What happened.
    pub action: SubscriptionAction,
    /// The provider's status after the event.
    pub status: SubscriptionStatus,
    /// End of the current billing period, unix seconds, when known.
    pub current_period_end: Option<i64>,
    /// The event carries the whole subscription (status and customer), so it may create the row when it is the
    /// first event of the subscription to arrive; a partial update for an unknown subscription waits instead.
    pub full_object: bool,
}

/// What an invoice event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvoiceAction {
    /// The invoice was paid: its entitlement is granted.
    Paid,
    /// A payment attempt failed: reported, nothing is granted or revoked.
    PaymentFailed,
    /// The invoice's payment was refunded: its entitlement is revoked.
    Refunded,
}

/// An invoice event, normalized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceChange {
    /// The provider's invoice id: the entitlement's key.
    pub invoice_id: InvoiceId,
    /// The customer the entitlement belongs to, when the event names one.
    pub customer_id: Option<CustomerId>,
    /// The subscription the invoice bills, if any: its end revokes the entitlement.
    pub subscription_id: Option<SubscriptionId>,
    /// What happened.
    pub action: InvoiceAction,
    /// The amount paid or refunded, when the event carries one.
    pub money: Option<Money>,
}

/// A verified delivery, normalized by its source's payload format.
///
/// Non-exhaustive: it may gain fields; [`Event::new`] makes one outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// The provider's event id: the first dedup key.
    pub event_id: EventId,
    /// The provider's event type, verbatim (`payment_intent.succeeded`).
    pub event_type: String,
    /// When the provider says the event happened, unix seconds.
    pub occurred_at: i64,
    /// The second dedup key: one effect per business fact, whatever the event id
    /// (`payment.succeeded:{order_id}`).
    pub business_key: String,
    /// What the event asks of the ledger.
    pub effect: Effect,
}

impl Event {
    /// An event with these fields: for a store that reads one back, and for tests.
    pub fn new(event_id: EventId, event_type: String, occurred_at: i64, business_key: String, effect: Effect) -> Self {
        Self { event_id, event_type, occurred_at, business_key, effect }
    }

    /// The order the event is about, for an order's effect (a payment, a failure, a refund, a dispute).
    pub fn order_id(&self) -> Option<&OrderId> {
        match &self.effect {
            Effect::Order { order_id, .. } => Some(order_id),
            _ => None,
        }
    }

    /// The amount the event carries: an order's payment or refund, an invoice's.
    pub fn money(&self) -> Option<&Money> {
        match &self.effect {
            Effect::Order { money, .. } => money.as_ref(),
            Effect::Invoice(invoice) => invoice.money.as_ref(),
            Effect::Subscription(_) | Effect::Ignored => None,
        }
    }
}
