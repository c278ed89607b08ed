//! Field readers, the event envelope, timestamps and decimal amounts shared by the formats.

use super::ParseError;
use crate::event::SubscriptionStatus;
use crate::event::{Currency, Effect, Event, EventId, InvalidValue, Money, OrderAction, OrderId};
use crate::time::parse_iso8601;
use serde_json::Value;

pub(super) fn str_at<'a>(v: &'a Value, pointer: &'static str) -> Result<&'a str, ParseError> {
    crate::json_pointer::get(v, pointer).and_then(Value::as_str).ok_or(ParseError::Missing(pointer))
}

pub(super) fn int_at(v: &Value, pointer: &'static str) -> Result<i64, ParseError> {
    crate::json_pointer::get(v, pointer).and_then(Value::as_i64).ok_or(ParseError::Missing(pointer))
}

/// A string that may be absent or null; any other JSON type is an error.
pub(super) fn opt_str_at<'a>(v: &'a Value, pointer: &'static str) -> Result<Option<&'a str>, ParseError> {
    match crate::json_pointer::get(v, pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ParseError::Missing(pointer)),
    }
}

/// An integer that may be absent or null; any other JSON type is an error.
pub(super) fn opt_int_at(v: &Value, pointer: &'static str) -> Result<Option<i64>, ParseError> {
    match crate::json_pointer::get(v, pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n.as_i64().map(Some).ok_or(ParseError::Missing(pointer)),
    }
}

/// An id sent either as a non-empty string or as an integer (Paystack's and Shopify's numeric ids).
pub(super) fn id_at(v: &Value, pointer: &str) -> Option<String> {
    match crate::json_pointer::get(v, pointer)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        _ => None,
    }
}

/// A reference that is either an id string or an expanded object with an `id` (Stripe's expandable fields).
pub(super) fn ref_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    match crate::json_pointer::get(v, pointer)? {
        Value::String(s) if !s.is_empty() => Some(s),
        Value::Object(o) => o.get("id")?.as_str(),
        _ => None,
    }
}

/// Reads `amount` and `currency` when both are there; neither there is `None`, one without the other an error.
pub(super) fn money_at(v: &Value, amount: &'static str, currency: &'static str) -> Result<Option<Money>, ParseError> {
    match (crate::json_pointer::get(v, amount), crate::json_pointer::get(v, currency)) {
        (None, None) => Ok(None),
        _ => {
            let amount = int_at(v, amount)?;
            let currency = Currency::parse(str_at(v, currency)?)?;
            Ok(Some(Money::new(amount, currency)?))
        }
    }
}

/// The status a deletion leaves: the event's own status when it is an ended one, `canceled` otherwise, so that a
/// deletion is always final for the billing rules.
pub(super) fn ended_status(status: Option<&str>) -> Result<SubscriptionStatus, ParseError> {
    match status {
        Some(s) => {
            let s = SubscriptionStatus::parse(s)?;
            Ok(if s.is_ended() { s } else { SubscriptionStatus::canceled() })
        }
        None => Ok(SubscriptionStatus::canceled()),
    }
}

pub(super) struct Envelope {
    pub event_id: EventId,
    pub event_type: String,
    pub occurred_at: i64,
}

pub(super) fn envelope(root: &Value) -> Result<Envelope, ParseError> {
    Ok(Envelope {
        event_id: EventId::parse(str_at(root, "/id")?)?,
        event_type: str_at(root, "/type")?.to_owned(),
        occurred_at: int_at(root, "/created")?,
    })
}

impl Envelope {
    pub(super) fn event(self, business_key: String, effect: Effect) -> Event {
        Event {
            event_id: self.event_id,
            event_type: self.event_type,
            occurred_at: self.occurred_at,
            business_key,
            effect,
        }
    }

    /// An event payhook does not act on, keyed on its type and event id.
    pub(super) fn ignored(self) -> Event {
        let business_key = format!("{}:{}", self.event_type, self.event_id);
        self.event(business_key, Effect::Ignored)
    }

    pub(super) fn order(
        self,
        business_key: String,
        order_id: OrderId,
        action: OrderAction,
        money: Option<Money>,
    ) -> Event {
        self.event(business_key, Effect::Order { order_id, action, money })
    }
}

/// The first of `pointers` that holds a string timestamp [`parse_iso8601`] reads. A present but unreadable
/// timestamp is an error rather than a reason to try the next one.
pub(super) fn timestamp_at(v: &Value, pointers: &[&'static str]) -> Result<Option<i64>, ParseError> {
    for &p in pointers {
        match crate::json_pointer::get(v, p) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => {
                return parse_iso8601(s).map(Some).ok_or(ParseError::Invalid(InvalidValue {
                    field: "timestamp",
                    reason: "must be an ISO 8601 date-time such as 2024-01-01T10:00:00Z",
                }));
            }
            Some(_) => return Err(ParseError::Missing(p)),
        }
    }
    Ok(None)
}

/// Digits of a currency's minor unit (ISO 4217): 0 for the yen, 3 for the dinars, 2 for most.
pub(super) fn currency_exponent(c: &Currency) -> u32 {
    match c.as_str() {
        "bif" | "clp" | "djf" | "gnf" | "isk" | "jpy" | "kmf" | "krw" | "pyg" | "rwf" | "ugx" | "uyi" | "vnd"
        | "vuv" | "xaf" | "xof" | "xpf" => 0,
        "bhd" | "iqd" | "jod" | "kwd" | "lyd" | "omr" | "tnd" => 3,
        "clf" | "uyw" => 4,
        _ => 2,
    }
}

const BAD_DECIMAL: InvalidValue = InvalidValue { field: "amount", reason: "must be a decimal such as 199.00" };

/// A decimal amount string (`"199.00"`) in minor units, given the currency's exponent.
///
/// Digits, then optionally `.` and digits; no sign, exponent or grouping. Fraction digits beyond the exponent are
/// accepted only when they are zeros (`"1000.00"` yen is 1000), so no value is ever rounded away.
pub(super) fn decimal_to_minor(s: &str, exponent: u32) -> Result<i64, InvalidValue> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !all_digits(int) || !all_digits(frac) || (s.contains('.') && frac.is_empty()) {
        return Err(BAD_DECIMAL);
    }
    let exponent = exponent as usize;
    if frac.len() > exponent && frac.bytes().skip(exponent).any(|b| b != b'0') {
        return Err(InvalidValue { field: "amount", reason: "has more decimals than the currency allows" });
    }
    let too_large = InvalidValue { field: "amount", reason: "is too large" };
    let mut minor: i64 = 0;
    let frac_digits = frac.bytes().chain(std::iter::repeat(b'0')).take(exponent);
    for d in int.bytes().chain(frac_digits) {
        minor = minor.checked_mul(10).and_then(|m| m.checked_add(i64::from(d - b'0'))).ok_or(too_large.clone())?;
    }
    Ok(minor)
}

/// Minor units as a decimal string with the currency's exponent (`42`, 2 → `"0.42"`), for encoding.
pub(super) fn minor_to_decimal(amount_minor: i64, exponent: u32) -> String {
    let sign = if amount_minor < 0 { "-" } else { "" };
    let abs = amount_minor.unsigned_abs();
    if exponent == 0 {
        return format!("{sign}{abs}");
    }
    let scale = 10u64.pow(exponent);
    format!("{sign}{}.{:0width$}", abs / scale, abs % scale, width = exponent as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_become_minor_units_by_the_currency_exponent() {
        let exp = |c: &str| currency_exponent(&Currency::parse(c).unwrap());
        assert_eq!((exp("USD"), exp("jpy"), exp("KRW"), exp("bhd"), exp("kwd"), exp("ngn")), (2, 0, 0, 3, 3, 2));
        assert_eq!(decimal_to_minor("199.00", 2), Ok(19_900));
        assert_eq!(decimal_to_minor("199.5", 2), Ok(19_950));
        assert_eq!(decimal_to_minor("199", 2), Ok(19_900));
        assert_eq!(decimal_to_minor("0.42", 2), Ok(42));
        assert_eq!(decimal_to_minor("1000", 0), Ok(1000));
        assert_eq!(decimal_to_minor("1000.00", 0), Ok(1000));
        assert_eq!(decimal_to_minor("12.345", 3), Ok(12_345));
        for bad in ["", ".5", "5.", "-1.00", "+1", "1e3", "1,000.00", "abc", "1.2.3", " 1", "99999999999999999999"] {
            assert!(decimal_to_minor(bad, 2).is_err(), "{bad}");
        }
        assert!(decimal_to_minor("1.001", 2).is_err());
        assert!(decimal_to_minor("1000.5", 0).is_err());
        assert!(decimal_to_minor("1.0001", 3).is_err());
        assert_eq!(minor_to_decimal(42, 2), "0.42");
        assert_eq!(minor_to_decimal(19_900, 2), "199.00");
        assert_eq!(minor_to_decimal(1000, 0), "1000");
        assert_eq!(minor_to_decimal(12_345, 3), "12.345");
    }
}
