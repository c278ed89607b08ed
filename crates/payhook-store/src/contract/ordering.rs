//! Per-key order: the claim's rules on the rows of one key, under each [`KeyOrder`].

use super::{T0, claim, finish, ingest, new_order, outbox_of, pay, refund, register_new};
use crate::{Dispatched, Held, KeyOrder, OutboxFilter, OutboxJob, OutboxKind, Store};

/// The sink of [`super::test_routing`] that takes every kind: an order's `order.paid` and `order.refunded` both
/// go to it.
const SINK: &str = "audit";

async fn claim_as<S: Store>(store: &S, owner: &str, now_ms: i64, order: KeyOrder) -> Vec<OutboxJob> {
    store.claim_outbox_ordered(SINK, claim(owner, now_ms, 60_000), order).await.expect("claim_outbox_ordered")
}

/// The `(order key, kind)` of each claimed row, in id order.
fn keys(jobs: &[OutboxJob]) -> Vec<(&str, &str)> {
    jobs.iter().map(|j| (j.key.as_deref().unwrap_or("-"), j.kind.as_str())).collect()
}

async fn held<S: Store>(store: &S, order: KeyOrder) -> Held {
    store.held_outbox(SINK, order, 100).await.expect("held_outbox")
}

async fn paid_and_refunded<S: Store>(store: &S, order: &str, at: i64) {
    register_new(store, new_order(order, 100, at)).await;
    ingest(store, pay(&format!("evt_{order}_p"), order, 100, at + 1)).await;
    ingest(store, refund(&format!("evt_{order}_r"), order, 100, at + 2)).await;
}

/// A key's later row is not claimed while its earlier row is leased, backing off or dead (under `hold`), by this
/// dispatcher or another; other keys are claimed meanwhile; re-queueing the dead row makes it the key's head
/// again, and its later row follows once it is delivered.
pub async fn a_keys_later_row_waits_for_its_earlier_row_and_a_dead_row_holds_it_until_requeued<S: Store>(store: S) {
    paid_and_refunded(&store, "ord_k1", T0).await;
    register_new(&store, new_order("ord_k2", 100, T0)).await;
    ingest(&store, pay("evt_ord_k2_p", "ord_k2", 100, T0 + 3)).await;
    let now = T0 + 10;

    let first = claim_as(&store, "a", now, KeyOrder::Hold).await;
    assert_eq!(keys(&first), [("order:ord_k1", "order.paid"), ("order:ord_k2", "order.paid")]);
    assert!(claim_as(&store, "b", now, KeyOrder::Hold).await.is_empty(), "the later row waits for the leased head");
    assert_eq!(held(&store, KeyOrder::Hold).await, Held { rows: 1, oldest_created_at_ms: Some(T0 + 2) });

    let retry = Dispatched::Retry { at_ms: now + 10_000, status: Some(503), error: "503".into() };
    assert!(finish(&store, &first[0], retry, now + 1).await);
    assert!(finish(&store, &first[1], Dispatched::Delivered { status: 200 }, now + 1).await);
    assert!(claim_as(&store, "a", now + 5_000, KeyOrder::Hold).await.is_empty(), "its head backs off");
    assert!(claim_as(&store, "a", now + 5_000, KeyOrder::Skip).await.is_empty(), "skip waits for a pending head");

    let again = claim_as(&store, "a", now + 10_000, KeyOrder::Hold).await;
    assert_eq!(keys(&again), [("order:ord_k1", "order.paid")]);
    let dead = Dispatched::Dead { status: Some(410), error: "410 Gone".into() };
    assert!(finish(&store, &again[0], dead, now + 10_001).await);
    assert!(claim_as(&store, "a", now + 20_000, KeyOrder::Hold).await.is_empty(), "the dead row holds its key");
    assert_eq!(held(&store, KeyOrder::Hold).await.rows, 1);
    assert_eq!(held(&store, KeyOrder::Skip).await.rows, 0, "under skip nothing waits behind a dead row");
    let alerts = outbox_of(&store, OutboxFilter { kind: Some(OutboxKind::Alert), ..OutboxFilter::default() }).await;
    let text = alerts[0].payload["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains("key order:ord_k1") && text.contains("held"), "{text}");

    assert!(store.retry_outbox(again[0].id, now + 20_000).await.expect("retry_outbox"));
    let head = claim_as(&store, "b", now + 20_000, KeyOrder::Hold).await;
    assert_eq!(keys(&head), [("order:ord_k1", "order.paid")], "the re-queued row is the key's head again");
    assert!(finish(&store, &head[0], Dispatched::Delivered { status: 200 }, now + 20_001).await);
    let last = claim_as(&store, "b", now + 20_001, KeyOrder::Hold).await;
    assert_eq!(keys(&last), [("order:ord_k1", "order.refunded")]);
    assert_eq!(held(&store, KeyOrder::Hold).await, Held::default());
}

/// Under `skip` a dead row lets its key's later rows pass, and the alert says so; unordered, a key's rows are
/// claimed together, as before per-key order.
pub async fn skip_lets_a_dead_rows_key_pass_and_an_unordered_claim_takes_a_keys_rows_together<S: Store>(store: S) {
    paid_and_refunded(&store, "ord_s1", T0).await;
    let now = T0 + 10;
    let first = claim_as(&store, "a", now, KeyOrder::Skip).await;
    assert_eq!(keys(&first), [("order:ord_s1", "order.paid")]);
    let dead = Dispatched::Dead { status: Some(410), error: "410 Gone".into() };
    assert!(finish(&store, &first[0], dead, now + 1).await);
    let next = claim_as(&store, "a", now + 2, KeyOrder::Skip).await;
    assert_eq!(keys(&next), [("order:ord_s1", "order.refunded")], "skip passes the dead row");
    let alerts = outbox_of(&store, OutboxFilter { kind: Some(OutboxKind::Alert), ..OutboxFilter::default() }).await;
    let text = alerts[0].payload["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains("key order:ord_s1") && text.contains("skip"), "{text}");
    assert!(finish(&store, &next[0], Dispatched::Delivered { status: 200 }, now + 3).await);

    paid_and_refunded(&store, "ord_s2", T0 + 100).await;
    let together = claim_as(&store, "a", now + 200, KeyOrder::Unordered).await;
    assert_eq!(keys(&together), [("order:ord_s2", "order.paid"), ("order:ord_s2", "order.refunded")]);
}
