//! The operator audit trail: entries appended alone or in the transaction of the action they record, listed newest
//! first through filters and a cursor, pruned oldest first.

use super::listings::{SCAN_BOUND, page_through};
use super::{T0, claim_outbox, event_id, finish, ingest, new_order, pay, processed, register_new, source, unparseable};
use crate::{
    AuditAction, AuditEntry, AuditFilter, AuditRecord, Dispatched, Listing, Outcome, Registered, Replayed, Store,
};

/// An entry of `actor` doing `action` on `target` at `at_ms`, from an address, with a detail naming its time. Its
/// outcome is `ok`, which an audited action replaces with its own.
pub fn audit_entry(at_ms: i64, actor: &str, action: AuditAction, target: Option<&str>) -> AuditEntry {
    AuditEntry {
        at_ms,
        actor: actor.to_owned(),
        address: Some("192.0.2.7".to_owned()),
        action,
        target: target.map(str::to_owned),
        outcome: "ok".to_owned(),
        detail: serde_json::json!({ "at": at_ms, "why": "a test" }),
    }
}

/// Every entry `filter` selects, newest first, in one page.
async fn trail<S: Store>(store: &S, filter: AuditFilter) -> Vec<AuditRecord> {
    let page = store.list_audit(AuditFilter { limit: 1_000, ..filter }).await.expect("list_audit");
    assert_eq!(page.scan_stopped_before, None, "a few entries never reach the scan bound");
    page.rows
}

async fn append<S: Store>(store: &S, entries: Vec<AuditEntry>) {
    store.audit(entries).await.expect("audit");
}

fn times(records: &[AuditRecord]) -> Vec<i64> {
    records.iter().map(|r| r.entry.at_ms).collect()
}

/// Whether `record` is one `filter` selects (every field but the cursor and the limit).
fn selects(filter: &AuditFilter, record: &AuditRecord) -> bool {
    let e = &record.entry;
    filter.actor.as_ref().is_none_or(|a| *a == e.actor)
        && filter.action.is_none_or(|a| a == e.action)
        && filter.target.as_ref().is_none_or(|t| Some(t) == e.target.as_ref())
        && filter.since_ms.is_none_or(|t| e.at_ms >= t)
        && filter.until_ms.is_none_or(|t| e.at_ms < t)
}

/// Entries appended in two calls come back newest first, whole (address, target, outcome and detail as given), and
/// each filter narrows them; filters combine with AND, and the cursor pages on below an id.
pub async fn audit_entries_are_listed_newest_first_and_narrowed_by_each_filter<S: Store>(store: S) {
    assert_eq!(trail(&store, AuditFilter::default()).await, Vec::new(), "an empty trail");
    let login = AuditEntry {
        address: None,
        detail: serde_json::Value::Null,
        ..audit_entry(T0 + 1, "ops", AuditAction::Login, None)
    };
    let refused = AuditEntry {
        outcome: "refused".to_owned(),
        detail: serde_json::json!({ "scope": "replay" }),
        ..audit_entry(T0 + 4, "ci", AuditAction::Refused, Some("shop/evt_1"))
    };
    let written = [
        login,
        audit_entry(T0 + 2, "ops", AuditAction::Replay, Some("shop/evt_1")),
        audit_entry(T0 + 3, "ci", AuditAction::Replay, Some("shop/evt_2")),
        refused,
        audit_entry(T0 + 5, "cli", AuditAction::OrderImport, None),
    ];
    append(&store, written[..3].to_vec()).await;
    append(&store, written[3..].to_vec()).await;
    append(&store, Vec::new()).await;

    let all = trail(&store, AuditFilter::default()).await;
    let entries: Vec<AuditEntry> = all.iter().map(|r| r.entry.clone()).collect();
    let newest_first: Vec<AuditEntry> = written.iter().rev().cloned().collect();
    assert_eq!(entries, newest_first, "every entry whole, newest first");
    assert!(all.windows(2).all(|w| w[0].id > w[1].id), "newest first by id: {all:?}");

    let cases = [
        (AuditFilter { actor: Some("ci".into()), ..AuditFilter::default() }, vec![T0 + 4, T0 + 3]),
        (AuditFilter { action: Some(AuditAction::Replay), ..AuditFilter::default() }, vec![T0 + 3, T0 + 2]),
        (AuditFilter { target: Some("shop/evt_1".into()), ..AuditFilter::default() }, vec![T0 + 4, T0 + 2]),
        (
            AuditFilter { since_ms: Some(T0 + 2), until_ms: Some(T0 + 4), ..AuditFilter::default() },
            vec![T0 + 3, T0 + 2],
        ),
        (AuditFilter { since_ms: Some(T0 + 5), ..AuditFilter::default() }, vec![T0 + 5]),
        (AuditFilter { since_ms: Some(T0 + 6), ..AuditFilter::default() }, vec![]),
        (AuditFilter { until_ms: Some(T0 + 2), ..AuditFilter::default() }, vec![T0 + 1]),
        (
            AuditFilter { actor: Some("ops".into()), action: Some(AuditAction::Replay), ..AuditFilter::default() },
            vec![T0 + 2],
        ),
        (
            AuditFilter { target: Some("shop/evt_1".into()), actor: Some("ci".into()), ..AuditFilter::default() },
            vec![T0 + 4],
        ),
        (AuditFilter { action: Some(AuditAction::Login), since_ms: Some(T0 + 2), ..AuditFilter::default() }, vec![]),
        (AuditFilter { actor: Some("nobody".into()), ..AuditFilter::default() }, vec![]),
        (AuditFilter { before: Some(all[2].id), ..AuditFilter::default() }, vec![T0 + 2, T0 + 1]),
    ];
    for (filter, expected) in cases {
        assert_eq!(times(&trail(&store, filter.clone()).await), expected, "{filter:?}");
    }
    let page = store.list_audit(AuditFilter { limit: 2, ..AuditFilter::default() }).await.expect("list_audit");
    assert_eq!((times(&page.rows), page.scan_stopped_before), (vec![T0 + 5, T0 + 4], None));
    assert_eq!(page.next_before(2, |r| r.id), Some(all[1].id));
}

/// Pages of two through each filter, with a scan bound of [`SCAN_BOUND`]: every selected entry comes once, newest
/// first; a filter no index serves whole (an action beside an actor, a time range) stops short pages at the bound
/// and says where; one an index serves whole (an actor, an action, a target) never stops.
pub async fn paging_the_audit_trail_visits_every_entry_once_whatever_the_scan_bound<S: Store>(store: S) {
    let actions = [AuditAction::Replay, AuditAction::Login, AuditAction::Refused, AuditAction::OutboxRetry];
    let entries: Vec<AuditEntry> = (0..24)
        .map(|i| {
            let actor = ["ops", "ci", "cli"][i % 3];
            let target = format!("shop/evt_{}", i % 5);
            audit_entry(T0 + i as i64, actor, actions[i % 4], (i % 2 == 0).then_some(target.as_str()))
        })
        .collect();
    for chunk in entries.chunks(5) {
        append(&store, chunk.to_vec()).await;
    }
    let all = store.list_audit(AuditFilter { limit: 1_000, ..AuditFilter::default() }).await.expect("list_audit");
    assert_eq!((all.rows.len(), all.scan_stopped_before), (24, None), "the id order serves an unfiltered listing");

    let bounded = [
        AuditFilter { actor: Some("ops".into()), action: Some(AuditAction::Refused), ..AuditFilter::default() },
        AuditFilter { since_ms: Some(T0 + 3), until_ms: Some(T0 + 20), ..AuditFilter::default() },
        AuditFilter { action: Some(AuditAction::Login), since_ms: Some(T0 + 2), ..AuditFilter::default() },
        AuditFilter { target: Some("shop/evt_2".into()), action: Some(AuditAction::Replay), ..AuditFilter::default() },
    ];
    let whole = [
        AuditFilter { actor: Some("ci".into()), ..AuditFilter::default() },
        AuditFilter { action: Some(AuditAction::Refused), ..AuditFilter::default() },
        AuditFilter { target: Some("shop/evt_4".into()), ..AuditFilter::default() },
    ];
    let mut stopped = 0;
    for (filter, served_whole) in bounded.iter().map(|f| (f, false)).chain(whole.iter().map(|f| (f, true))) {
        let expected: Vec<i64> = all.rows.iter().filter(|r| selects(filter, r)).map(|r| r.id).collect();
        let (rows, pages) = page_through(
            AuditFilter { limit: 2, ..filter.clone() },
            2,
            |f, before| f.before = before,
            async |f| store.list_audit(f).await.expect("list_audit"),
            |r: &AuditRecord| r.id,
        )
        .await;
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), expected, "every match once: {filter:?}");
        let stops =
            pages.iter().filter(|(_, p): &&(Option<i64>, Listing<AuditRecord>)| p.scan_stopped_before.is_some());
        for (_, page) in stops.clone() {
            assert!(page.rows.len() < 2, "only a short page says where the bound stopped it: {filter:?}");
        }
        if served_whole {
            assert_eq!(stops.count(), 0, "an index serves {filter:?} whole");
        } else {
            stopped += stops.count();
        }
    }
    assert!(stopped > 0, "sparse matches cross a bound of {SCAN_BOUND}");
}

/// An audited replay writes exactly one entry, in the replay's transaction, whose outcome is what the event came to
/// (or `not_dead_letter`); a replay of an event that does not exist, and a replay without an entry, write none.
pub async fn an_audited_replay_writes_one_entry_with_its_outcome_and_a_replay_of_nothing_writes_none<S: Store>(
    store: S,
) {
    let entry = |at_ms: i64, target: &str| audit_entry(at_ms, "ops", AuditAction::Replay, Some(target));
    register_new(&store, new_order("ord_a1", 999, T0)).await; // the wrong amount: the payment is dead-lettered
    let d = pay("evt_a1", "ord_a1", 100, T0);
    let parsed = d.parsed().clone();
    assert_eq!(ingest(&store, d).await.outcome, Outcome::DeadLettered);
    let replayed = store
        .replay_audited(&source(), &event_id("evt_a1"), parsed.clone(), T0 + 1, Some(entry(T0 + 1, "shop/evt_a1")))
        .await
        .expect("replay");
    assert!(matches!(&replayed, Replayed::Done(r) if r.outcome == Outcome::DeadLettered), "{replayed:?}");
    let written = trail(&store, AuditFilter::default()).await;
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0].entry, AuditEntry { outcome: "dead_lettered".into(), ..entry(T0 + 1, "shop/evt_a1") });

    // Bytes that did not parse, replayed once the format reads them: processed.
    register_new(&store, new_order("ord_a2", 100, T0)).await;
    let good = pay("evt_a2", "ord_a2", 100, T0);
    ingest(&store, unparseable("sha256:a2", good.raw_body(), "format was broken", T0)).await;
    let replayed = store
        .replay_audited(
            &source(),
            &event_id("sha256:a2"),
            good.parsed().clone(),
            T0 + 2,
            Some(entry(T0 + 2, "shop/sha256:a2")),
        )
        .await
        .expect("replay");
    assert_eq!(replayed, Replayed::Done(processed()));
    // A processed event is no dead letter: nothing changes, and the entry says so.
    let again = store
        .replay_audited(
            &source(),
            &event_id("evt_a2"),
            good.parsed().clone(),
            T0 + 3,
            Some(entry(T0 + 3, "shop/evt_a2")),
        )
        .await
        .expect("replay");
    assert_eq!(again, Replayed::NotDeadLetter(Outcome::Processed));
    // No such event: no entry.
    let missing = pay("evt_none", "ord_none", 100, T0).parsed().clone();
    let none = store
        .replay_audited(&source(), &event_id("evt_none"), missing, T0 + 4, Some(entry(T0 + 4, "shop/evt_none")))
        .await
        .expect("replay");
    assert_eq!(none, Replayed::NotFound);
    // Without an entry: none.
    store.replay(&source(), &event_id("evt_a1"), parsed, T0 + 5).await.expect("replay");

    let outcomes: Vec<(Option<String>, String)> =
        trail(&store, AuditFilter::default()).await.into_iter().map(|r| (r.entry.target, r.entry.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            (Some("shop/evt_a2".into()), "not_dead_letter".into()),
            (Some("shop/sha256:a2".into()), "processed".into()),
            (Some("shop/evt_a1".into()), "dead_lettered".into()),
        ]
    );
}

/// An audited re-queue writes `requeued` for a dead row, and `not_dead` for a row that is not dead (the same row
/// again, now pending) or does not exist; without an entry it writes none.
pub async fn an_audited_requeue_writes_requeued_for_a_dead_row_and_not_dead_for_any_other<S: Store>(store: S) {
    register_new(&store, new_order("ord_q1", 100, T0)).await;
    ingest(&store, pay("evt_q1", "ord_q1", 100, T0 + 1)).await;
    let job = claim_outbox(&store, "crm", "d", T0 + 2).await.pop().expect("a crm row is due");
    assert!(finish(&store, &job, Dispatched::Dead { status: Some(400), error: "400".into() }, T0 + 3).await);
    let target = format!("outbox/{}", job.id);
    let entry = |at_ms: i64| audit_entry(at_ms, "ops", AuditAction::OutboxRetry, Some(&target));
    let requeue = async |id: i64, at_ms: i64| {
        store.retry_outbox_audited(id, at_ms, Some(entry(at_ms))).await.expect("retry_outbox")
    };
    assert!(requeue(job.id, T0 + 4).await, "a dead row is re-queued");
    assert!(!requeue(job.id, T0 + 5).await, "a pending row is not dead");
    assert!(!requeue(job.id + 1_000, T0 + 6).await, "no such row");
    assert!(!store.retry_outbox(job.id, T0 + 7).await.expect("retry_outbox"));
    let written = trail(&store, AuditFilter::default()).await;
    assert_eq!(
        written.iter().map(|r| (r.entry.at_ms, r.entry.outcome.as_str())).collect::<Vec<_>>(),
        [(T0 + 6, "not_dead"), (T0 + 5, "not_dead"), (T0 + 4, "requeued")]
    );
    assert_eq!(written[2].entry, AuditEntry { outcome: "requeued".into(), ..entry(T0 + 4) });
}

/// An audited registration writes its entry with the registration's outcome: `created`, `already_exists`,
/// `conflict`; a registration without an entry writes none.
pub async fn an_audited_registration_writes_its_entry_with_the_registration_outcome<S: Store>(store: S) {
    let entry = |at_ms: i64| audit_entry(at_ms, "ops", AuditAction::OrderRegister, Some("order/ord_g1"));
    let register = async |amount: i64, at_ms: i64| {
        store.register_order_audited(new_order("ord_g1", amount, at_ms), Some(entry(at_ms))).await.expect("register")
    };
    assert_eq!(register(100, T0).await, Registered::Created);
    assert_eq!(register(100, T0 + 1).await, Registered::AlreadyExists);
    assert!(matches!(register(200, T0 + 2).await, Registered::Conflict { .. }));
    register_new(&store, new_order("ord_g2", 100, T0 + 3)).await;
    let written = trail(&store, AuditFilter::default()).await;
    assert_eq!(
        written.iter().map(|r| r.entry.clone()).collect::<Vec<_>>(),
        [
            AuditEntry { outcome: "conflict".into(), ..entry(T0 + 2) },
            AuditEntry { outcome: "already_exists".into(), ..entry(T0 + 1) },
            AuditEntry { outcome: "created".into(), ..entry(T0) },
        ]
    );
}

/// Registrations sent at once (batched together where the backend batches), some with an entry and some without:
/// each audited one writes its own entry with its own outcome, and the others write none.
pub async fn registrations_sent_at_once_write_the_entries_of_the_audited_ones_only<S: Store>(store: S) {
    let store = std::sync::Arc::new(store);
    register_new(&*store, new_order("ord_c0", 100, T0)).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24_i64 {
        let store = std::sync::Arc::clone(&store);
        tasks.spawn(async move {
            // Every third registers `ord_c0` again, with its amount or another; the others an order of their own.
            let (id, amount) =
                if i % 3 == 0 { ("ord_c0".to_owned(), 100 * (1 + i % 4 / 2)) } else { (format!("ord_c{i}"), 100) };
            let target = format!("order/{i}");
            let entry = (i % 2 == 0).then(|| audit_entry(T0 + i, "ops", AuditAction::OrderRegister, Some(&target)));
            let registered = store.register_order_audited(new_order(&id, amount, T0 + i), entry).await;
            (target, i % 2 == 0, registered.expect("register"))
        });
    }
    let mut expected = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (target, audited, registered) = joined.expect("a registration task panicked");
        if audited {
            expected.push((Some(target), crate::audit::registration_outcome(&registered).to_owned()));
        }
    }
    expected.sort();
    let mut written: Vec<(Option<String>, String)> =
        trail(&*store, AuditFilter::default()).await.into_iter().map(|r| (r.entry.target, r.entry.outcome)).collect();
    written.sort();
    assert_eq!(written, expected);
    for outcome in ["created", "already_exists", "conflict"] {
        assert!(written.iter().any(|(_, o)| o == outcome), "the mix has a {outcome}: {written:?}");
    }
}

/// A pruning step deletes at most its limit of the entries made before its time, oldest (by time) first, and never
/// one made at or after it.
pub async fn pruning_the_audit_trail_deletes_at_most_its_limit_of_the_oldest_entries_before_its_time<S: Store>(
    store: S,
) {
    // Appended out of time order: the oldest entry is not the one with the lowest id.
    let mut entries: Vec<AuditEntry> = (1..=10).map(|i| audit_entry(T0 + i, "ops", AuditAction::Login, None)).collect();
    entries.swap(0, 4);
    append(&store, entries).await;
    let remaining = async || {
        let mut at: Vec<i64> = times(&trail(&store, AuditFilter::default()).await);
        at.sort_unstable();
        at
    };
    assert_eq!(store.prune_audit(T0 + 6, 3).await.expect("prune"), 3);
    assert_eq!(remaining().await, [T0 + 4, T0 + 5, T0 + 6, T0 + 7, T0 + 8, T0 + 9, T0 + 10]);
    assert_eq!(store.prune_audit(T0 + 6, 3).await.expect("prune"), 2);
    assert_eq!(store.prune_audit(T0 + 6, 3).await.expect("prune"), 0, "nothing before the time is left");
    assert_eq!(remaining().await, [T0 + 6, T0 + 7, T0 + 8, T0 + 9, T0 + 10]);
    assert_eq!(store.prune_audit(T0 + 100, 0).await.expect("prune"), 0, "a limit of none deletes none");
    assert_eq!(store.prune_audit(T0 + 100, 100).await.expect("prune"), 5);
    assert_eq!(remaining().await, Vec::<i64>::new());
}
