//! The documents sinks get, for comparing backends: one scenario that writes every kind of outbox document, and
//! what a dispatcher would claim afterwards. A backend-comparison test runs it on two stores and expects the same
//! bytes.

use super::billing::{invoice_event, subscription_event};
use super::{T0, claim, ingest, new_order, order_event, pay, refund, register_new, retry};
use crate::{Delivery, KeyOrder, Store};
use payhook_core::billing::{InvoiceAction, SubscriptionAction};
use payhook_core::event::{OrderAction, SourceName};

/// The sinks of [`super::test_routing`] whose documents the scenario compares (alerts are rendered for a person
/// by the dispatcher, from a count gathered in the row, and are not among them).
pub const DOCUMENT_SINKS: [&str; 4] = ["crm", "mail", "audit", "lake"];

/// Writes, under [`super::test_routing`]: an order paid then refunded; an order paid after a failed payment (the
/// guard's second state as the previous one); a payment before its order, retried once the order exists; a
/// subscription created, an invoice paid and one failed, the subscription ended (revoking the entitlement); and a
/// forwarded source's delivery.
pub async fn write_every_document<S: Store>(store: &S) {
    register_new(store, new_order("ord_doc_a", 1_000, T0)).await;
    ingest(store, pay("evt_doc_a1", "ord_doc_a", 1_000, T0 + 1_000)).await;
    ingest(store, refund("evt_doc_a2", "ord_doc_a", 1_000, T0 + 2_000)).await;
    register_new(store, new_order("ord_doc_b", 500, T0)).await;
    ingest(store, order_event("evt_doc_b1", OrderAction::Fail, "ord_doc_b", 500, "usd", T0 + 3_000)).await;
    ingest(store, pay("evt_doc_b2", "ord_doc_b", 500, T0 + 4_000)).await;
    ingest(store, pay("evt_doc_c1", "ord_doc_c", 700, T0 + 5_000)).await;
    register_new(store, new_order("ord_doc_c", 700, T0 + 6_000)).await;
    let due = store.claim_due(claim("worker", T0 + 7_000, 60_000)).await.expect("claim due");
    for claimed in due {
        retry(store, claimed, T0 + 7_000).await;
    }

    use SubscriptionAction::*;
    ingest(store, subscription_event("evt_doc_s1", "sub_doc", Created, "active", 100, true)).await;
    ingest(store, invoice_event("evt_doc_i1", "in_doc_1", Some("sub_doc"), InvoiceAction::Paid, 110)).await;
    ingest(store, invoice_event("evt_doc_i2", "in_doc_2", Some("sub_doc"), InvoiceAction::PaymentFailed, 120)).await;
    ingest(store, subscription_event("evt_doc_s2", "sub_doc", Deleted, "canceled", 300, true)).await;

    let mut forwarded: Delivery = pay("evt_doc_f1", "ord_doc_f", 100, T0 + 8_000);
    forwarded.parts_mut().source = SourceName::parse("fwd").expect("valid source");
    ingest(store, forwarded).await;
}

/// Every document of [`DOCUMENT_SINKS`] an unordered dispatcher claims (all of them at once, whatever their keys):
/// (sink, kind, the bytes it would send), sorted.
pub async fn claimed_documents<S: Store>(store: &S) -> Vec<(String, String, String)> {
    let mut documents = Vec::new();
    for sink in DOCUMENT_SINKS {
        let claim = claim("dispatcher", T0 + 3_600_000, 60_000);
        let jobs = store.claim_outbox_ordered(sink, claim, KeyOrder::Unordered).await.expect("claim");
        documents.extend(jobs.into_iter().map(|j| (j.sink, j.kind.as_str().to_owned(), j.payload)));
    }
    documents.sort();
    documents
}
