//! Field readers, the event envelope, timestamps and decimal amounts shared by the formats.

use super::ParseError;
use crate::billing::SubscriptionStatus;
use crate::event::{Currency, Effect, Event, EventId, InvalidValue, Money, OrderAction, OrderId};
use serde_json::Value;

pub(super) fn str_at<'a>(v: &'a Value, pointer: &'static str) -> Result<&'a str, ParseError> {
    v.pointer(pointer).and_then(Value::as_str).ok_or(ParseError::Missing(pointer))
}

pub(super) fn int_at(v: &Value, pointer: &'static str) -> Result<i64, ParseError> {
    v.pointer(pointer).and_then(Value::as_i64).ok_or(ParseError::Missing(pointer))
}

/// A string that may be absent or null; any other JSON type is an error.
pub(super) fn opt_str_at<'a>(v: &'a Value, pointer: &'static str) -> Result<Option<&'a str>, ParseError> {
    match v.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ParseError::Missing(pointer)),
    }
}

/// An integer that may be absent or null; any other JSON type is an error.
pub(super) fn opt_int_at(v: &Value, pointer: &'static str) -> Result<Option<i64>, ParseError> {
    match v.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n.as_i64().map(Some).ok_or(ParseError::Missing(pointer)),
    }
}

/// An id sent either as a non-empty string or as an integer (Paystack's and Shopify's numeric ids).
pub(super) fn id_at(v: &Value, pointer: &str) -> Option<String> {
    match v.pointer(pointer)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        _ => None,
    }
}

/// A reference that is either an id string or an expanded object with an `id` (Stripe's expandable fields).
pub(super) fn ref_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    match v.pointer(pointer)? {
        Value::String(s) if !s.is_empty() => Some(s),
        Value::Object(o) => o.get("id")?.as_str(),
        _ => None,
    }
}

/// Reads `amount` and `currency` when both are there; neither there is `None`, one without the other an error.
pub(super) fn money_at(v: &Value, amount: &'static str, currency: &'static str) -> Result<Option<Money>, ParseError> {
    match (v.pointer(amount), v.pointer(currency)) {
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

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Reads a run of ASCII digits as a number; `None` if any byte is not a digit.
fn digits(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, d| d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0')))
}

/// Parses an ISO 8601 date-time, as providers send it, to unix seconds.
///
/// Accepted: `YYYY-MM-DDTHH:MM:SS`, then an optional fraction of any length (truncated: payhook orders events by
/// the second), then `Z`, `±HH:MM`, `±HHMM`, `±HH` or nothing (read as UTC: Paystack's older fields carry no zone).
/// The separator may also be `t` or a space. Out-of-range fields (`02-30`, `24:00`) are rejected; a leap second
/// (`:60`) is read as the next second.
///
/// Hand-written rather than a date crate: the core crate keeps its dependency tree minimal, and this one shape is
/// all the formats need.
pub(super) fn parse_timestamp(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = i64::from(digits(&b[0..4])?);
    let (month, day) = (digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, minute, second) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &b[19..];
    if let [b'.', tail @ ..] = rest {
        let n = tail.iter().take_while(|d| d.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        rest = &tail[n..];
    }
    let offset_secs = match rest {
        [] | [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), zone @ ..] => {
            let (h, m) = match zone {
                [h1, h2] => (digits(&[*h1, *h2])?, 0),
                [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?),
                _ => return None,
            };
            if h > 23 || m > 59 {
                return None;
            }
            let secs = i64::from(h * 3600 + m * 60);
            if *sign == b'+' { secs } else { -secs }
        }
        _ => return None,
    };
    let local = days_from_civil(year, month, day) * 86_400
        + i64::from(hour) * 3600
        + i64::from(minute) * 60
        + i64::from(second);
    Some(local - offset_secs)
}

/// The first of `pointers` that holds a string timestamp [`parse_timestamp`] reads. A present but unreadable
/// timestamp is an error rather than a reason to try the next one.
pub(super) fn timestamp_at(v: &Value, pointers: &[&'static str]) -> Result<Option<i64>, ParseError> {
    for &p in pointers {
        match v.pointer(p) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => {
                return parse_timestamp(s).map(Some).ok_or(ParseError::Invalid(InvalidValue {
                    field: "timestamp",
                    reason: "must be an ISO 8601 date-time such as 2024-01-01T10:00:00Z",
                }));
            }
            Some(_) => return Err(ParseError::Missing(p)),
        }
    }
    Ok(None)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`, for encoding.
pub(super) fn format_timestamp(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
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
    fn timestamps_in_every_shape_providers_send() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_timestamp("2016-03-29T10:47:12.000Z"), Some(1_459_248_432));
        assert_eq!(parse_timestamp("2016-03-29T10:47:12"), Some(1_459_248_432));
        assert_eq!(parse_timestamp("2016-03-29 10:47:12.123456789z"), Some(1_459_248_432));
        assert_eq!(parse_timestamp("2024-01-01T10:00:00-05:00"), Some(1_704_121_200));
        assert_eq!(parse_timestamp("2024-01-01T15:00:00+00:00"), Some(1_704_121_200));
        assert_eq!(parse_timestamp("2024-01-01T20:30:00+0530"), Some(1_704_121_200));
        assert_eq!(parse_timestamp("2019-06-28T18:03:50+01:00"), Some(1_561_741_430));
        assert_eq!(parse_timestamp("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(parse_timestamp("1969-12-31T23:59:59Z"), Some(-1));
    }

    #[test]
    fn malformed_timestamps_are_rejected() {
        for s in [
            "",
            "2024-01-01",
            "2024-01-01T10:00",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-00-10T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T10:60:00Z",
            "2024-01-01T10:00:00.Z",
            "2024-01-01T10:00:00+5",
            "2024-01-01T10:00:00+25:00",
            "2024-01-01T10:00:00 UTC",
            "2024/01/01T10:00:00Z",
            "+024-01-01T10:00:00Z",
            "2024-01-01T10:00:00ZZ",
            "1700000000",
        ] {
            assert_eq!(parse_timestamp(s), None, "{s}");
        }
    }

    #[test]
    fn civil_dates_round_trip_over_four_centuries() {
        for days in (-200_000..200_000).step_by(17) {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m));
            assert_eq!(days_from_civil(y, m, d), days);
        }
        for secs in [0, 7, 1_459_248_432, 1_704_121_200, 4_102_444_800] {
            assert_eq!(parse_timestamp(&format_timestamp(secs)), Some(secs));
        }
    }

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
