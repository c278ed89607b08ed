//! What a declared format reads that its source's signature does not cover: every field is checked against the
//! parts the signature signs ([`SignedParts`]), and one that reads anything else must be named in `unsigned`.

use super::compile::{Expr, Field, Fields, Piece};
use super::{DeclaredFormat, FormatSpecError};
use crate::request::SignedParts;

/// The fields `unsigned` may name.
pub(super) const UNSIGNABLE: [&str; 15] = [
    "event_id",
    "event_type",
    "occurred_at",
    "object_id",
    "order_id",
    "amount",
    "currency",
    "customer_id",
    "subscription_id",
    "invoice_id",
    "status",
    "period_end",
    "business_key",
    "when",
    "batch",
];

impl Fields {
    /// Each compiled field with its name, for the signed-parts check.
    fn named(&self) -> [(&'static str, Option<&Field>); 12] {
        [
            ("event_id", self.event_id.as_ref()),
            ("event_type", self.event_type.as_ref()),
            ("occurred_at", self.occurred_at.as_ref()),
            ("object_id", self.object_id.as_ref()),
            ("order_id", self.order_id.as_ref()),
            ("amount", self.amount.as_ref()),
            ("currency", self.currency.as_ref()),
            ("customer_id", self.customer_id.as_ref()),
            ("subscription_id", self.subscription_id.as_ref()),
            ("invoice_id", self.invoice_id.as_ref()),
            ("status", self.status.as_ref()),
            ("period_end", self.period_end.as_ref()),
        ]
    }
}

/// The unsigned part a piece reads, if any.
fn unsigned_piece(piece: &Piece, signed: &SignedParts) -> Option<String> {
    match piece {
        Piece::Pointer(p) if !signed.body => Some(format!("the body's {p}")),
        Piece::Header(h) if !signed.headers.contains(h) => Some(format!("header:{h}")),
        _ => None,
    }
}

/// The unsigned part an expression reads, if any.
fn unsigned_expr(expr: &Expr, signed: &SignedParts) -> Option<String> {
    match expr {
        Expr::Pointer(p) => unsigned_piece(&Piece::Pointer(p.clone()), signed),
        Expr::Header(h) => unsigned_piece(&Piece::Header(h.clone()), signed),
        Expr::Literal(_) => None,
        Expr::Template(pieces) => pieces.iter().find_map(|p| unsigned_piece(p, signed)),
    }
}

impl DeclaredFormat {
    /// Every field that reads a part `signed` does not cover: its key as written (`event_type`,
    /// `events[3].order_id`), its name, and the part.
    pub fn unsigned_reads(&self, signed: &SignedParts) -> Vec<(String, &'static str, String)> {
        let mut found = Vec::new();
        let mut fields = |at: &str, fields: &Fields| {
            for (name, field) in fields.named() {
                if let Some(part) = field.and_then(|f| f.exprs.iter().find_map(|e| unsigned_expr(e, signed))) {
                    found.push((format!("{at}{name}"), name, part));
                }
            }
            if let Some(part) =
                fields.business_key.as_ref().and_then(|k| k.iter().find_map(|p| unsigned_piece(p, signed)))
            {
                found.push((format!("{at}business_key"), "business_key", part));
            }
        };
        fields("", &self.fields);
        for (i, rule) in self.rules.iter().enumerate() {
            fields(&format!("events[{i}]."), &rule.fields);
        }
        for (i, rule) in self.rules.iter().enumerate() {
            for (field, _) in &rule.when {
                if let Some(part) = field.exprs.iter().find_map(|e| unsigned_expr(e, signed)) {
                    found.push((format!("events[{i}].when"), "when", part));
                }
            }
        }
        if let Some(batch) = &self.batch
            && !signed.body
        {
            found.push(("batch".into(), "batch", format!("the body's {batch}")));
        }
        found
    }

    /// Refuses a format whose fields read parts `signed` does not cover, unless `unsigned` names them.
    pub fn check_signed(&self, signed: &SignedParts) -> Result<(), FormatSpecError> {
        match self.unsigned_reads(signed).into_iter().find(|(_, name, _)| !self.unsigned.iter().any(|u| u == name)) {
            None => Ok(()),
            Some((key, name, part)) => Err(FormatSpecError {
                key,
                reason: format!(
                    "reads {part}, which the signature does not cover, so anyone could change it; read it from                      signed bytes, or add \"{name}\" to [format] unsigned = [...] to accept that knowingly"
                ),
            }),
        }
    }

    /// The fields the format says read unsigned parts.
    pub fn unsigned(&self) -> &[String] {
        &self.unsigned
    }
}
