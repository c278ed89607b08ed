//! A compiled format at work: value expressions evaluated against one delivery's JSON and headers.

use serde_json::Value;

use super::super::ParseError;
use super::super::common::{currency_exponent, decimal_to_minor};
use super::AmountUnit;
use super::compile::{Expr, Field, Piece, Var, var_name};
use crate::event::{Currency, InvalidValue};
use crate::request::Headers;
use crate::time::parse_iso8601;

/// Where a value expression reads: the event's JSON and the request's headers.
pub(super) struct Input<'a, H: ?Sized> {
    pub(super) root: &'a Value,
    pub(super) headers: &'a H,
}

/// A JSON value as text: strings as they are, numbers and booleans as written; absent for null, "" and containers.
pub(super) fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl<H: Headers + ?Sized> Input<'_, H> {
    pub(super) fn piece(&self, piece: &Piece, vars: &dyn Fn(Var) -> Option<String>) -> Option<String> {
        match piece {
            Piece::Text(t) => Some(t.clone()),
            Piece::Pointer(p) => crate::json_pointer::get(self.root, p).and_then(text_of),
            Piece::Header(h) => self.headers.get(h).filter(|v| !v.is_empty()).map(str::to_owned),
            Piece::Var(v) => vars(*v),
        }
    }

    pub(super) fn render(&self, pieces: &[Piece], vars: &dyn Fn(Var) -> Option<String>) -> Option<String> {
        pieces.iter().map(|p| self.piece(p, vars)).collect::<Option<String>>()
    }

    /// [`Input::render`], or the placeholder that is absent.
    pub(super) fn render_or_absent(
        &self,
        pieces: &[Piece],
        vars: &dyn Fn(Var) -> Option<String>,
    ) -> Result<String, String> {
        let mut out = String::new();
        for piece in pieces {
            match self.piece(piece, vars) {
                Some(text) => out.push_str(&text),
                None => {
                    return Err(match piece {
                        Piece::Pointer(p) => p.clone(),
                        Piece::Header(h) => format!("header:{h}"),
                        Piece::Var(v) => format!("{{{}}} of business_key", var_name(*v)),
                        Piece::Text(t) => t.clone(),
                    });
                }
            }
        }
        Ok(out)
    }

    pub(super) fn eval(&self, field: &Field) -> Option<String> {
        field.exprs.iter().find_map(|e| match e {
            Expr::Pointer(p) => crate::json_pointer::get(self.root, p).and_then(text_of),
            Expr::Header(h) => self.headers.get(h).filter(|v| !v.is_empty()).map(str::to_owned),
            Expr::Literal(l) => Some(l.clone()),
            Expr::Template(pieces) => self.render(pieces, &|_| None),
        })
    }
}

pub(super) fn missing(field: &Field) -> ParseError {
    ParseError::Field(field.written.clone())
}

/// An amount in minor units from its text: digits (minor), or a decimal scaled by the currency's exponent (major).
pub(super) fn amount_minor(text: &str, unit: AmountUnit, currency: &Currency) -> Result<i64, ParseError> {
    let invalid = |reason| ParseError::Invalid(InvalidValue { field: "amount", reason });
    match unit {
        AmountUnit::Minor => {
            let digits = text.strip_suffix(".0").unwrap_or(text);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid("must be a whole number of minor units (amount_unit = \"minor\")"));
            }
            digits.parse().map_err(|_| invalid("is too large"))
        }
        AmountUnit::Major => Ok(decimal_to_minor(text, currency_exponent(currency))?),
    }
}

/// A time from its text: unix seconds, unix milliseconds (above 10^12), or an ISO 8601 date-time.
pub(super) fn time_of(text: &str) -> Option<i64> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let n: i64 = text.parse().ok()?;
        return Some(if n > 1_000_000_000_000 { n / 1000 } else { n });
    }
    parse_iso8601(text)
}
