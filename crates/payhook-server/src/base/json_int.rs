//! Integers in request bodies as JSON defines them. JSON has one number type, and JSON Schema's `integer` (which
//! the OpenAPI document uses) is any number with a zero fractional part: `5.0` is the integer 5. serde reads
//! `5.0` as a float and refuses it where an integer is expected; these readers take both forms and refuse a
//! fraction with a message that says so.
//!
//! Only integers of at most 2^53 - 1 in magnitude are taken: RFC 8259 (section 6) calls that range the one JSON
//! readers agree on, and outside it a number written with a fraction (or in exponent form) no longer names one
//! integer exactly, so `-9223372036854775809` would silently become `i64::MIN`.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;

/// The largest magnitude taken: 2^53 - 1.
pub(crate) const MAX_SAFE: i64 = (1 << 53) - 1;

fn out_of_range<E: de::Error>(v: impl fmt::Display) -> E {
    E::custom(format!("{v} is out of range: integers are taken from -(2^53 - 1) to 2^53 - 1"))
}

struct I64Visitor;

impl Visitor<'_> for I64Visitor {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        if v.unsigned_abs() > MAX_SAFE as u64 { Err(out_of_range(v)) } else { Ok(v) }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        if v > MAX_SAFE as u64 { Err(out_of_range(v)) } else { Ok(v as i64) }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i64, E> {
        if !v.is_finite() || v.abs() > MAX_SAFE as f64 {
            return Err(out_of_range(v));
        }
        if v.fract() != 0.0 {
            return Err(E::custom(format!("{v} is not an integer")));
        }
        // Integral and within 2^53: the conversion is exact.
        Ok(v as i64)
    }
}

/// An `i64`, written `5` or `5.0`.
pub(crate) fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    d.deserialize_any(I64Visitor)
}

/// An optional `i64` (`null` or absent: `None`), written `5` or `5.0`.
pub(crate) fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    struct Opt;
    impl<'de> Visitor<'de> for Opt {
        type Value = Option<i64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer or null")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            i64(d).map(Some)
        }
    }
    d.deserialize_option(Opt)
}

/// An optional `u32`, written `5` or `5.0`.
pub(crate) fn opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match opt_i64(d)? {
        None => Ok(None),
        Some(v) => {
            u32::try_from(v).map(Some).map_err(|_| de::Error::custom(format!("{v} is out of range: 0 to {}", u32::MAX)))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Body {
        #[serde(deserialize_with = "super::i64")]
        amount: i64,
        #[serde(default, deserialize_with = "super::opt_i64")]
        since: Option<i64>,
        #[serde(default, deserialize_with = "super::opt_u32")]
        max: Option<u32>,
    }

    fn parse(json: &str) -> Result<Body, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn integers_are_read_whether_written_with_or_without_a_zero_fraction() {
        assert_eq!(parse(r#"{"amount": 1999}"#), Ok(Body { amount: 1999, since: None, max: None }));
        assert_eq!(
            parse(r#"{"amount": 1999.0, "since": -5.0, "max": 7.0}"#),
            Ok(Body { amount: 1999, since: Some(-5), max: Some(7) })
        );
        assert_eq!(parse(r#"{"amount": 1, "since": null}"#), Ok(Body { amount: 1, since: None, max: None }));
    }

    #[test]
    fn fractions_and_values_out_of_range_are_refused_with_a_reason() {
        assert!(parse(r#"{"amount": 19.99}"#).unwrap_err().contains("19.99 is not an integer"));
        assert!(parse(r#"{"amount": 9223372036854775808}"#).unwrap_err().contains("out of range"));
        assert!(parse(r#"{"amount": 9007199254740992}"#).unwrap_err().contains("out of range"));
        assert!(parse(r#"{"amount": 1, "since": -9223372036854775809}"#).unwrap_err().contains("out of range"));
        assert_eq!(parse(r#"{"amount": 9007199254740991.0}"#).map(|b| b.amount), Ok(9_007_199_254_740_991));
        assert!(parse(r#"{"amount": 1e300}"#).unwrap_err().contains("out of range"));
        assert!(parse(r#"{"amount": 1, "max": 4294967296}"#).unwrap_err().contains("out of range"));
        assert!(parse(r#"{"amount": 1, "max": -1}"#).unwrap_err().contains("out of range"));
        assert!(parse(r#"{"amount": "5"}"#).is_err());
    }
}
