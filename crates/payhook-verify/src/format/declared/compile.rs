//! A format table compiled: value expressions and templates parsed once, when the source is configured.

use super::{AmountUnit, FormatSpec, FormatSpecError, ValueSpec};
use crate::template::split_template;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Piece {
    Text(String),
    Pointer(String),
    Header(String),
    Var(Var),
}

/// The business key's own placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Var {
    Type,
    EventId,
    ObjectId,
    OrderId,
    InvoiceId,
    SubscriptionId,
}

/// One compiled expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expr {
    Pointer(String),
    Header(String),
    Literal(String),
    Template(Vec<Piece>),
}

/// A compiled value: the first of its expressions that gives something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Field {
    pub(super) written: String,
    pub(super) exprs: Vec<Expr>,
}

pub(super) fn compile_template(text: &str, vars: bool) -> Result<Vec<Piece>, String> {
    split_template(text)?
        .into_iter()
        .map(|(placeholder, t)| {
            if !placeholder {
                return Ok(Piece::Text(t));
            }
            if t.starts_with('/') {
                return Ok(Piece::Pointer(t));
            }
            if let Some(h) = t.strip_prefix("header:").filter(|h| !h.is_empty()) {
                return Ok(Piece::Header(h.to_ascii_lowercase()));
            }
            let var = match t.as_str() {
                "type" => Var::Type,
                "event_id" => Var::EventId,
                "object_id" => Var::ObjectId,
                "order_id" => Var::OrderId,
                "invoice_id" => Var::InvoiceId,
                "subscription_id" => Var::SubscriptionId,
                _ => return Err(format!("unknown placeholder {{{t}}} (expected {{/pointer}} or {{header:NAME}})")),
            };
            if vars { Ok(Piece::Var(var)) } else { Err(format!("{{{t}}} is only for business_key")) }
        })
        .collect()
}

pub(super) fn var_name(var: Var) -> &'static str {
    match var {
        Var::Type => "type",
        Var::EventId => "event_id",
        Var::ObjectId => "object_id",
        Var::OrderId => "order_id",
        Var::InvoiceId => "invoice_id",
        Var::SubscriptionId => "subscription_id",
    }
}

pub(super) fn compile_expr(text: &str) -> Result<Expr, String> {
    if text.contains('{') || text.contains('}') {
        return compile_template(text, false).map(Expr::Template);
    }
    if text.starts_with('/') {
        return Ok(Expr::Pointer(text.to_owned()));
    }
    if let Some(h) = text.strip_prefix("header:") {
        if h.is_empty() {
            return Err("header: needs a header name".into());
        }
        return Ok(Expr::Header(h.to_ascii_lowercase()));
    }
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    Ok(Expr::Literal(text.to_owned()))
}

pub(super) fn compile_field(spec: &ValueSpec) -> Result<Field, String> {
    let texts: Vec<&String> = match spec {
        ValueSpec::One(t) => vec![t],
        ValueSpec::FirstOf(list) if list.is_empty() => return Err("an empty list".into()),
        ValueSpec::FirstOf(list) => list.iter().collect(),
    };
    let exprs = texts.iter().map(|t| compile_expr(t)).collect::<Result<_, _>>()?;
    let written = texts.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(" or ");
    Ok(Field { written, exprs })
}

/// The fields of the table, or a rule's overrides.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Fields {
    pub(super) event_id: Option<Field>,
    pub(super) event_type: Option<Field>,
    pub(super) occurred_at: Option<Field>,
    pub(super) object_id: Option<Field>,
    pub(super) order_id: Option<Field>,
    pub(super) amount: Option<Field>,
    pub(super) amount_unit: Option<AmountUnit>,
    pub(super) currency: Option<Field>,
    pub(super) customer_id: Option<Field>,
    pub(super) subscription_id: Option<Field>,
    pub(super) invoice_id: Option<Field>,
    pub(super) status: Option<Field>,
    pub(super) period_end: Option<Field>,
    pub(super) business_key: Option<Vec<Piece>>,
}

impl Fields {
    pub(super) fn compile(spec: &FormatSpec, at: &str) -> Result<Self, FormatSpecError> {
        let err = |key: &str, reason: String| FormatSpecError { key: format!("{at}{key}"), reason };
        let field =
            |key: &str, v: &Option<ValueSpec>| v.as_ref().map(compile_field).transpose().map_err(|e| err(key, e));
        Ok(Self {
            event_id: field("event_id", &spec.event_id)?,
            event_type: field("event_type", &spec.event_type)?,
            occurred_at: field("occurred_at", &spec.occurred_at)?,
            object_id: field("object_id", &spec.object_id)?,
            order_id: field("order_id", &spec.order_id)?,
            amount: field("amount", &spec.amount)?,
            amount_unit: spec.amount_unit,
            currency: field("currency", &spec.currency)?,
            customer_id: field("customer_id", &spec.customer_id)?,
            subscription_id: field("subscription_id", &spec.subscription_id)?,
            invoice_id: field("invoice_id", &spec.invoice_id)?,
            status: field("status", &spec.status)?,
            period_end: field("period_end", &spec.period_end)?,
            business_key: spec
                .business_key
                .as_deref()
                .map(|t| compile_template(t, true))
                .transpose()
                .map_err(|e| err("business_key", e))?,
        })
    }
}
