//! A sink's filter (`when`): which of the documents of its kinds it takes, decided by their fields with the
//! predicates of the declarative formats' `when` (one value, any of a list, `""` for absent, `"*"` for any present).
//!
//! A filter is part of the routing: it is read when an effect's outbox rows are written, in the effect's
//! transaction, so a document a sink's filter does not take never becomes a row of that sink (and an effect no sink
//! takes is recorded once, `unrouted`, as without filters).
//!
//! **Only what the event decides.** A filter reads the fields of a document that the delivery itself decides (its
//! source, ids, type, status, amount, …), never one the transaction reads from stored state (an order's previous
//! status, the invoice and customer a revocation finds in the store): PostgreSQL completes those in SQL, where no
//! filter runs, and a filter on them would answer differently on the two backends. [`FIELDS`] says which is which,
//! per kind; the configuration refuses a filter on a stored field or on a field no document of the sink has
//! ([`SinkFilter::check`]).

use crate::OutboxKind;
use payhook_core::json_pointer;
use serde_json::Value;

/// A document's fields, per kind: those a filter may read (decided by the event), then those it may not (read from
/// stored state in the transaction that writes the row). A unit test of `payload` holds them to the documents.
pub const FIELDS: &[(OutboxKind, &[&str], &[&str])] = {
    use OutboxKind::*;
    const ORDER: &[&str] = &["kind", "order_id", "status", "source", "event_id", "event_type", "occurred_at"];
    const SUBSCRIPTION: &[&str] = &[
        "kind",
        "subscription_id",
        "customer_id",
        "status",
        "current_period_end",
        "source",
        "event_id",
        "event_type",
        "occurred_at",
    ];
    const ENTITLEMENT: &[&str] = &[
        "kind",
        "invoice_id",
        "customer_id",
        "subscription_id",
        "amount",
        "currency",
        "reason",
        "source",
        "event_id",
        "event_type",
        "occurred_at",
    ];
    const REVOKED: &[&str] =
        &["kind", "amount", "currency", "reason", "source", "event_id", "event_type", "occurred_at"];
    const EVENT: &[&str] = &[
        "kind",
        "source",
        "event_id",
        "event_type",
        "occurred_at",
        "business_key",
        "effect",
        "outcome",
        "detail",
        "received_at_ms",
    ];
    &[
        (OrderPaid, ORDER, &["previous_status"]),
        (OrderFailed, ORDER, &["previous_status"]),
        (OrderRefunded, ORDER, &["previous_status"]),
        (OrderDisputed, ORDER, &["previous_status"]),
        (SubscriptionUpdated, SUBSCRIPTION, &["previous_status"]),
        (EntitlementGranted, ENTITLEMENT, &[]),
        (EntitlementRevoked, REVOKED, &["invoice_id", "customer_id", "subscription_id"]),
        (InvoicePaymentFailed, ENTITLEMENT, &[]),
        (EventReceived, EVENT, &[]),
    ]
};

/// One condition: the value at `pointer` must be one of `accepted` (`""`: absent, null or empty; `"*"`: any present
/// value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// A JSON pointer into the document (`/source`).
    pub pointer: String,
    /// The values it accepts, as text (numbers and booleans as written).
    pub accepted: Vec<String>,
}

/// A sink's `when`: every condition must hold. An empty filter takes everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkFilter {
    /// The conditions, in the order written.
    pub conditions: Vec<Condition>,
}

impl SinkFilter {
    /// Whether the sink takes `document`.
    pub fn admits(&self, document: &Value) -> bool {
        self.conditions.iter().all(|c| match json_pointer::get(document, &c.pointer).and_then(text_of) {
            None => c.accepted.iter().any(String::is_empty),
            Some(v) => c.accepted.iter().any(|a| *a == v || a == "*"),
        })
    }

    /// Checks the filter of a sink that takes the documents of `kinds`: each pointer is a JSON pointer whose first
    /// token is a field that some of them have and that none of them reads from stored state, and each condition
    /// accepts something. The error names the pointer and says why.
    pub fn check(&self, kinds: &[OutboxKind]) -> Result<(), String> {
        for c in &self.conditions {
            let Some(rest) = c.pointer.strip_prefix('/') else {
                return Err(format!("{:?} is not a JSON pointer (write \"/{}\")", c.pointer, c.pointer));
            };
            if c.accepted.is_empty() {
                return Err(format!("{}: an empty list accepts nothing", c.pointer));
            }
            let field = rest.split('/').next().unwrap_or_default();
            let fields = FIELDS.iter().filter(|(kind, ..)| kinds.contains(kind));
            if let Some((kind, ..)) = fields.clone().find(|(_, _, stored)| stored.contains(&field)) {
                return Err(format!(
                    "{}: the {kind} document's {field} is read from stored state in the transaction that writes \
                     the row, and a filter reads only what the delivery decides",
                    c.pointer
                ));
            }
            if !fields.clone().any(|(_, readable, _)| readable.contains(&field)) {
                let mut known: Vec<&str> = fields.flat_map(|(_, readable, _)| readable.iter().copied()).collect();
                known.sort_unstable();
                known.dedup();
                return Err(format!(
                    "{}: no document this sink takes has a field {field:?} (they have: {})",
                    c.pointer,
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// As `config check` shows it: `/source = "stripe", /status in ["paid", "refunded"]`.
impl std::fmt::Display for SinkFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, c) in self.conditions.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            match c.accepted.as_slice() {
                [one] => write!(f, "{sep}{} = {one:?}", c.pointer)?,
                many => write!(f, "{sep}{} in {many:?}", c.pointer)?,
            }
        }
        Ok(())
    }
}

/// A JSON value as a condition compares it: strings as they are, numbers and booleans as written; absent for null,
/// `""` and containers (as the declarative formats read values).
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(conditions: &[(&str, &[&str])]) -> SinkFilter {
        SinkFilter {
            conditions: conditions
                .iter()
                .map(|(p, a)| Condition { pointer: (*p).into(), accepted: a.iter().map(|s| (*s).into()).collect() })
                .collect(),
        }
    }

    #[test]
    fn conditions_take_one_value_a_list_absent_or_any() {
        let doc = json!({"source": "stripe", "amount": 1999, "currency": null, "customer_id": ""});
        assert!(filter(&[]).admits(&doc));
        assert!(filter(&[("/source", &["stripe"])]).admits(&doc));
        assert!(!filter(&[("/source", &["paddle"])]).admits(&doc));
        assert!(filter(&[("/source", &["paddle", "stripe"])]).admits(&doc));
        assert!(filter(&[("/amount", &["1999"])]).admits(&doc));
        assert!(filter(&[("/currency", &[""])]).admits(&doc), "null is absent");
        assert!(filter(&[("/customer_id", &[""])]).admits(&doc), "an empty string is absent");
        assert!(filter(&[("/missing", &[""])]).admits(&doc));
        assert!(!filter(&[("/currency", &["*"])]).admits(&doc));
        assert!(filter(&[("/source", &["*"])]).admits(&doc));
        assert!(!filter(&[("/source", &["stripe"]), ("/amount", &["1"])]).admits(&doc), "every condition holds");
        let shown = filter(&[("/source", &["stripe"]), ("/status", &["paid", "refunded"])]).to_string();
        assert_eq!(shown, r#"/source = "stripe", /status in ["paid", "refunded"]"#);
    }

    #[test]
    fn the_check_refuses_stored_fields_unknown_fields_and_empty_lists() {
        let orders = [OutboxKind::OrderPaid, OutboxKind::OrderRefunded];
        assert_eq!(filter(&[("/source", &["stripe"]), ("/order_id", &["*"])]).check(&orders), Ok(()));
        let err = filter(&[("/previous_status", &["pending"])]).check(&orders).unwrap_err();
        assert!(err.contains("stored state"), "{err}");
        let err = filter(&[("/currency", &["EUR"])]).check(&orders).unwrap_err();
        assert!(err.contains("no document this sink takes") && err.contains("order_id"), "{err}");
        let err = filter(&[("source", &["stripe"])]).check(&orders).unwrap_err();
        assert!(err.contains("\"/source\""), "{err}");
        assert!(filter(&[("/source", &[])]).check(&orders).unwrap_err().contains("accepts nothing"));
        // A field of one of its kinds is enough; a stored one in any of them is refused.
        let mixed = [OutboxKind::OrderPaid, OutboxKind::EntitlementGranted];
        assert_eq!(filter(&[("/currency", &["EUR"])]).check(&mixed), Ok(()));
        let revoked = [OutboxKind::EntitlementGranted, OutboxKind::EntitlementRevoked];
        assert!(filter(&[("/customer_id", &["c"])]).check(&revoked).unwrap_err().contains("entitlement.revoked"));
        // Nested pointers read a container field of the forwarded event.
        assert_eq!(filter(&[("/effect/order_id", &["*"])]).check(&[OutboxKind::EventReceived]), Ok(()));
    }
}
