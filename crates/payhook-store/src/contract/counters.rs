//! The row counters behind [`Store::stats`]: after any mix of writes they equal a full count.

use super::{
    T0, claim, claim_due, claim_outbox, event_id, finish, ingest, new_order, pay, refund, register_new, retry, source,
    stats, unparseable,
};
use crate::{Dispatched, Outcome, PruneRequest, Replayed, Stats, Store};

/// After a mixed workload (new, duplicate, deferred then applied, dead-lettered, replayed, outbox rows delivered,
/// dead and re-queued, retention pruning), the counts `stats` reads equal a full count of the rows, and a recount
/// finds nothing to correct.
pub async fn stats_equal_a_full_count_after_a_mixed_workload<S: Store>(store: S) {
    const DAY: i64 = 86_400_000;
    // New, then the same delivery again (no new row) and another event for the same business fact (a duplicate row).
    register_new(&store, new_order("ord_c1", 100, T0)).await;
    let paid = pay("evt_c1", "ord_c1", 100, T0 + 1);
    assert_eq!(ingest(&store, paid.clone()).await.outcome, Outcome::Processed);
    assert_eq!(ingest(&store, paid).await.outcome, Outcome::Duplicate);
    assert_eq!(ingest(&store, pay("evt_c1b", "ord_c1", 100, T0 + 2)).await.outcome, Outcome::Duplicate);
    ingest(&store, refund("evt_c1r", "ord_c1", 100, T0 + 3)).await;

    // Deferred, then applied once its order exists.
    assert_eq!(ingest(&store, pay("evt_c2", "ord_c2", 100, T0 + 4)).await.outcome, Outcome::Deferred);
    assert_eq!(ingest(&store, pay("evt_c5", "ord_c5", 100, T0 + 5)).await.outcome, Outcome::Deferred);
    register_new(&store, new_order("ord_c2", 100, T0 + 6)).await;
    let due = claim_due(&store, claim("w", T0 + 6, 30_000)).await;
    assert_eq!(due.len(), 1, "only the event whose order exists is due: {due:?}");
    for c in due {
        retry(&store, c, T0 + 6).await;
    }

    // Dead-lettered, and a dead letter whose bytes now parse replayed under its own id.
    register_new(&store, new_order("ord_c3", 999, T0)).await;
    assert_eq!(ingest(&store, pay("evt_c3", "ord_c3", 100, T0 + 7)).await.outcome, Outcome::DeadLettered);
    register_new(&store, new_order("ord_c4", 100, T0)).await;
    let good = pay("evt_c4", "ord_c4", 100, T0 + 8);
    ingest(&store, unparseable("sha256:c4", good.raw_body(), "format was broken", T0 + 8)).await;
    let replayed =
        store.replay(&source(), &event_id("sha256:c4"), good.parsed().clone(), T0 + 9).await.expect("replay");
    assert!(matches!(replayed, Replayed::Done(_)), "{replayed:?}");

    // Outbox rows delivered, dead, and a dead one re-queued.
    let job = claim_outbox(&store, "crm", "d", T0 + 10).await.pop().expect("a crm row is due");
    assert!(finish(&store, &job, Dispatched::Delivered { status: 204 }, T0 + 11).await);
    let mail = claim_outbox(&store, "mail", "d", T0 + 10).await;
    assert!(mail.len() >= 2, "{mail:?}");
    for job in &mail[..2] {
        assert!(finish(&store, job, Dispatched::Dead { status: Some(400), error: "400".into() }, T0 + 11).await);
    }
    let job = &mail[1];
    assert!(store.retry_outbox(job.id, T0 + 14).await.expect("retry_outbox"));

    // Retention deletes some settled events and clears payloads.
    let now = T0 + 40 * DAY;
    let request = PruneRequest {
        keys_before_ms: now - 30 * DAY,
        payloads_from_ms: 0,
        payloads_before_ms: now,
        orders_before_ms: 0,
        limit: 2,
        now_ms: now,
    };
    let pruned = store.prune(request).await.expect("prune");
    assert_eq!(pruned.events_deleted, 2, "{pruned:?}");

    let s = stats(&store).await;
    for (list, key) in [
        (&s.events, "processed"),
        (&s.events, "duplicate"),
        (&s.events, "deferred"),
        (&s.events, "dead_lettered"),
        (&s.orders, "paid"),
        (&s.outbox_by_status, "pending"),
        (&s.outbox_by_status, "delivered"),
        (&s.outbox_by_status, "dead"),
    ] {
        assert!(Stats::count(list, key) > 0, "the workload left a {key} row: {s:?}");
    }
    assert_eq!(s.oldest_deferred_event_ms, Some(T0 + 5));
    assert!(s.oldest_pending_outbox_ms.is_some(), "{s:?}");

    let recounted = store.recount().await.expect("recount");
    assert_eq!(recounted.drift, [], "the counters were out of step with the rows");
    let full = recounted.stats().expect("full count");
    assert_eq!(
        (&s.events, &s.orders, &s.outbox, &s.outbox_by_status),
        (&full.events, &full.orders, &full.outbox, &full.outbox_by_status),
        "stats differ from a full count"
    );
}
