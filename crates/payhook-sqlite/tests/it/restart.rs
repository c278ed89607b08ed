//! Durability across a restart, migrations, and two stores (processes) sharing one file.

use crate::{TempStore, side_connection};
use payhook_core::ledger::OrderStatus;
use payhook_sqlite::{SqliteOptions, SqliteStore};
use payhook_store::contract::{
    BASE_MS, T0, audit_entry, claim, claim_due, event_id, event_view, headers, ingest, new_order, order_view, pay,
    processed, register_new, retry, source, stats, test_policy, unparseable,
};
use payhook_store::{AuditAction, AuditFilter, Outcome, PruneRequest, Registered, Replayed, Retried, Stats, Store};
use std::path::Path;

fn reopen(path: &Path) -> SqliteStore {
    SqliteStore::open(SqliteOptions { retry: test_policy(), ..SqliteOptions::new(path) }).expect("reopen")
}

/// A database file as an older build left it: the first `version` migrations applied, then `rows` inserted.
fn file_at_schema(version: usize, rows: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    const OLD: [&str; 9] = [
        include_str!("../../migrations/0001_init.sql"),
        include_str!("../../migrations/0002_outbox_dispatch.sql"),
        include_str!("../../migrations/0003_billing.sql"),
        include_str!("../../migrations/0004_retention.sql"),
        include_str!("../../migrations/0005_history_in_orders.sql"),
        include_str!("../../migrations/0006_outbox_ids_in_orders.sql"),
        include_str!("../../migrations/0007_billing_audit_by_event.sql"),
        include_str!("../../migrations/0008_counters.sql"),
        include_str!("../../migrations/0009_retention_cursor.sql"),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("old.db");
    let conn = rusqlite::Connection::open(&path).expect("open");
    for sql in &OLD[..version] {
        conn.execute_batch(sql).expect("old migration");
    }
    conn.pragma_update(None, "user_version", version).expect("version");
    conn.execute_batch(rows).expect("old rows");
    (dir, path)
}

fn user_version(path: &Path) -> usize {
    side_connection(path).query_row("PRAGMA user_version", [], |r| r.get(0)).expect("user_version")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_committed_survives_a_reopen_and_migrations_run_once() {
    let store = TempStore::open(test_policy());
    assert_eq!(user_version(store.path()), SqliteStore::schema_version());
    register_new(&store, new_order("ord_r1", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_r1", "ord_r1", 100, T0 + 1)).await, processed());
    assert_eq!(ingest(&store, pay("evt_r2", "ord_r2", 200, T0 + 2)).await.outcome, Outcome::Deferred);
    let body = b"\x00\xffnot json";
    assert_eq!(ingest(&store, unparseable("evt_r3", body, "not json", T0 + 3)).await.outcome, Outcome::DeadLettered);
    let order = order_view(&store, "ord_r1").await;
    let events =
        [event_view(&store, "evt_r1").await, event_view(&store, "evt_r2").await, event_view(&store, "evt_r3").await];
    let counts = stats(&store).await;

    let (_dir, path) = store.close();
    for _ in 0..2 {
        let store = reopen(&path);
        assert_eq!(user_version(&path), SqliteStore::schema_version(), "migrations are applied once");
        assert_eq!(order_view(&store, "ord_r1").await, order);
        for event in &events {
            assert_eq!(&event_view(&store, event.event_id.as_str()).await, event);
        }
        assert_eq!(stats(&store).await, counts);
        // A redelivery after the restart is still a duplicate.
        assert_eq!(ingest(&store, pay("evt_r1", "ord_r1", 100, T0 + 10)).await.outcome, Outcome::Duplicate);
    }

    // The deferred event is still waiting, and the reopened store can finish it.
    let store = reopen(&path);
    assert_eq!(store.register_order(new_order("ord_r2", 200, T0 + 20)).await.expect("register"), Registered::Created);
    let c = claim_due(&store, claim("w", T0 + 20, 30_000)).await.pop().expect("the deferred event survived");
    assert_eq!(c.event_id.as_str(), "evt_r2");
    assert_eq!(retry(&store, c, T0 + 21).await, Retried::Done(processed()));
    assert_eq!(order_view(&store, "ord_r2").await.status, OrderStatus::Paid);
}

/// Audit entries, appended alone or with their action, read back whole after the store is closed and opened
/// again, and the entries appended after that take later ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_entries_survive_closing_and_reopening_the_store() {
    let store = TempStore::open(test_policy());
    store.audit(vec![audit_entry(T0, "ops", AuditAction::Login, None)]).await.expect("audit");
    let entry = audit_entry(T0 + 1, "ops", AuditAction::OrderRegister, Some("order/ord_a"));
    let registered = store.register_order_audited(new_order("ord_a", 100, T0 + 1), Some(entry)).await;
    assert_eq!(registered.expect("register"), Registered::Created);
    let all = AuditFilter { limit: 10, ..AuditFilter::default() };
    let before = store.list_audit(all.clone()).await.expect("list").rows;
    assert_eq!(before.iter().map(|r| r.entry.outcome.as_str()).collect::<Vec<_>>(), ["created", "ok"]);

    let (_dir, path) = store.close();
    let store = reopen(&path);
    assert_eq!(store.list_audit(all.clone()).await.expect("list").rows, before);
    store.audit(vec![audit_entry(T0 + 2, "ops", AuditAction::Logout, None)]).await.expect("audit");
    let after = store.list_audit(all).await.expect("list").rows;
    assert_eq!((after.len(), &after[1..]), (3, &before[..]));
    assert!(after[0].id > before[0].id, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_migrate_once_and_deduplicate_together() {
    let first = TempStore::open(test_policy());
    let second = reopen(first.path());
    assert_eq!(user_version(first.path()), SqliteStore::schema_version());

    register_new(&first, new_order("ord_s", 100, T0)).await;
    assert_eq!(second.register_order(new_order("ord_s", 100, T0)).await.expect("register"), Registered::AlreadyExists);
    let delivery = pay("evt_s", "ord_s", 100, T0 + 1);
    let (a, b) = tokio::join!(first.ingest(delivery.clone()), second.ingest(delivery));
    let mut outcomes = [a.expect("first").outcome, b.expect("second").outcome];
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [Outcome::Duplicate, Outcome::Processed]);
    assert_eq!(order_view(&second, "ord_s").await.outbox.len(), 1);

    // A deferred event is leased by one of them only.
    assert_eq!(ingest(&first, pay("evt_s2", "ord_s2", 100, T0)).await.outcome, Outcome::Deferred);
    let (a, b) = tokio::join!(
        first.claim_due(claim("proc-1", T0 + BASE_MS, 30_000)),
        second.claim_due(claim("proc-2", T0 + BASE_MS, 30_000)),
    );
    assert_eq!(a.expect("claim").len() + b.expect("claim").len(), 1);
}

/// A file written before order histories moved into the orders' rows (schema 4) keeps every order's history, in
/// order, after the migration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_histories_survive_the_move_into_the_orders_rows() {
    let (_dir, path) = file_at_schema(
        4,
        "INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
             VALUES ('ord_m', 100, 'usd', 'refunded', 1, 3), ('ord_n', 5, 'usd', 'pending', 1, 1);
         INSERT INTO order_audit (order_id, source, event_id, event_type, from_status, to_status, at)
             VALUES ('ord_m', 'shop', 'evt_b', 'payment.refunded', 'paid', 'refunded', 3),
                    ('ord_m', 'shop', 'evt_a', 'payment.succeeded', 'pending', 'paid', 2);",
    );
    let store = reopen(&path);
    assert_eq!(user_version(&path), SqliteStore::schema_version());
    let m = order_view(&store, "ord_m").await;
    let history: Vec<(&str, OrderStatus, OrderStatus, i64)> =
        m.history.iter().map(|h| (h.event_id.as_str(), h.from, h.to, h.at_ms)).collect();
    assert_eq!(
        history,
        [("evt_a", OrderStatus::Pending, OrderStatus::Paid, 2), ("evt_b", OrderStatus::Paid, OrderStatus::Refunded, 3)]
    );
    assert!(order_view(&store, "ord_n").await.history.is_empty());
    // New transitions append to it.
    register_new(&store, new_order("ord_o", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_o", "ord_o", 100, T0 + 1)).await, processed());
    assert_eq!(order_view(&store, "ord_o").await.history.len(), 1);
    store.shutdown().await;
}

/// A file written while the outbox was found through its `(order_id, kind, sink)` index (schema 5) lists every
/// order's outbox rows, in order, after the move into `orders.outbox_ids`; every new row with an order is added to
/// its list, whoever inserts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_rows_stay_with_their_orders_after_the_index_is_dropped() {
    let (_dir, path) = file_at_schema(
        5,
        "INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
             VALUES ('ord_m', 100, 'usd', 'refunded', 1, 3), ('ord_n', 5, 'usd', 'pending', 1, 1);
         INSERT INTO outbox (id, kind, sink, order_id, source, event_id, payload, status, created_at)
             VALUES (7, 'order.paid', 'crm', 'ord_m', 'shop', 'evt_a', '{}', 'delivered', 2),
                    (9, 'order.refunded', 'crm', 'ord_m', 'shop', 'evt_b', '{}', 'pending', 3),
                    (8, '_alert', '_alerts', NULL, NULL, NULL, '{}', 'pending', 2);",
    );
    let store = reopen(&path);
    assert_eq!(user_version(&path), SqliteStore::schema_version());
    let m = order_view(&store, "ord_m").await;
    let rows: Vec<(i64, &str, &str)> = m.outbox.iter().map(|o| (o.id, o.kind.as_str(), o.status.as_str())).collect();
    assert_eq!(rows, [(7, "order.paid", "delivered"), (9, "order.refunded", "pending")]);
    assert!(order_view(&store, "ord_n").await.outbox.is_empty());
    // New transitions add their rows to the order's list.
    register_new(&store, new_order("ord_o", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_o", "ord_o", 100, T0 + 1)).await, processed());
    let o = order_view(&store, "ord_o").await;
    assert_eq!(o.outbox.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(), ["order.paid"]);
    assert!(o.outbox[0].id > 9, "ids keep growing after the table rebuild");
    // A row inserted by another process that knows nothing of `outbox_ids` (an older payhook on the same file) is
    // listed too: the database keeps the list.
    side_connection(&path)
        .execute_batch(
            "INSERT INTO outbox (kind, sink, order_id, source, event_id, payload, status, created_at)
                 VALUES ('order.failed', 'crm', 'ord_n', 'shop', 'evt_c', '{}', 'pending', 4)",
        )
        .expect("an older process's insert");
    let n = order_view(&store, "ord_n").await;
    assert_eq!(n.outbox.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(), ["order.failed"]);
    store.shutdown().await;
}

/// A file written before the row counters existed (schema 7) gets them from one full count in the migration: the
/// stats equal its rows at once, a recount finds nothing to correct, and later writes keep them right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_start_from_a_full_count_of_an_older_file() {
    let (_dir, path) = file_at_schema(
        7,
        "INSERT INTO inbox (source, event_id, status, received_at, updated_at, verification, headers, body)
             VALUES ('shop', 'evt_a', 'processed', 1, 1, 'hmac', '{}', x''),
                    ('shop', 'evt_b', 'dead_lettered', 2, 2, 'hmac', '{}', x''),
                    ('bank', 'evt_c', 'processed', 3, 3, 'hmac', '{}', x''),
                    ('bank', 'evt_d', 'deferred', 4, 4, 'hmac', '{}', x'');
         INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
             VALUES ('ord_m', 100, 'usd', 'paid', 1, 3), ('ord_n', 5, 'usd', 'pending', 1, 1);
         INSERT INTO outbox (kind, sink, order_id, source, event_id, payload, status, created_at)
             VALUES ('order.paid', 'crm', 'ord_m', 'shop', 'evt_a', '{}', 'delivered', 2),
                    ('order.paid', 'mail', 'ord_m', 'shop', 'evt_a', '{}', 'pending', 2);",
    );
    let store = reopen(&path);
    let s = stats(&store).await;
    let owned = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect::<Vec<_>>();
    assert_eq!(s.events, owned(&[("dead_lettered", 1), ("deferred", 1), ("processed", 2)]));
    assert_eq!(s.orders, owned(&[("paid", 1), ("pending", 1)]));
    assert_eq!(s.outbox, owned(&[("order.paid", 2)]));
    assert_eq!(s.outbox_by_status, owned(&[("delivered", 1), ("pending", 1)]));
    assert_eq!((s.oldest_deferred_event_ms, s.oldest_pending_outbox_ms), (Some(4), Some(2)));
    assert_eq!(store.recount().await.expect("recount").drift, []);
    register_new(&store, new_order("ord_o", 100, T0)).await;
    assert_eq!(Stats::count(&stats(&store).await.orders, "pending"), 2);
    store.shutdown().await;
}

/// A file written before payloads moved out of the inbox rows (schema 9) is not rewritten: its rows keep their
/// payloads where they are, and are read, replayed and cleared there, while new deliveries put theirs in
/// `inbox_payloads`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_stored_in_the_inbox_rows_are_read_replayed_and_cleared_in_place() {
    let paid = pay("evt_p1", "ord_p", 100, T0);
    let (_dir, path) = file_at_schema(
        9,
        &format!(
            "INSERT INTO inbox (source, event_id, status, received_at, updated_at, verification, headers, body)
                 VALUES ('shop', 'evt_old', 'processed', {T0}, {T0}, 'hmac', '{headers}', x'6f6c6420626f6479'),
                        ('shop', 'sha256:p1', 'dead_lettered', {T0}, {T0}, 'hmac', '{headers}', x'{body}');",
            headers = headers().to_json(),
            body = paid.raw_body().iter().map(|b| format!("{b:02x}")).collect::<String>(),
        ),
    );
    let store = reopen(&path);
    assert_eq!(user_version(&path), SqliteStore::schema_version());
    let side = side_connection(&path);
    let moved: i64 = side.query_row("SELECT count(*) FROM inbox_payloads", [], |r| r.get(0)).expect("count");
    assert_eq!(moved, 0, "the migration moves nothing");
    let old = event_view(&store, "evt_old").await;
    assert_eq!((old.raw_body.as_slice(), &old.headers), (&b"old body"[..], &headers()));

    // A new delivery keeps its payload apart from its inbox row.
    register_new(&store, new_order("ord_n", 100, T0)).await;
    let new = pay("evt_new", "ord_n", 100, T0 + 1);
    assert_eq!(ingest(&store, new.clone()).await, processed());
    let view = event_view(&store, "evt_new").await;
    assert_eq!((view.raw_body.as_slice(), &view.headers), (new.raw_body(), &headers()));
    let (apart, inline): (i64, i64) = side
        .query_row(
            "SELECT (SELECT length(body) FROM inbox_payloads WHERE inbox_id = i.id), length(i.body)
             FROM inbox i WHERE event_id = 'evt_new'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("row");
    assert_eq!((apart, inline), (new.raw_body().len() as i64, 0));
    // An older process on the same file deletes inbox rows knowing nothing of `inbox_payloads`: the payload goes
    // with its row all the same.
    register_new(&store, new_order("ord_d", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_gone", "ord_d", 100, T0 + 1)).await, processed());
    side.execute("DELETE FROM inbox WHERE event_id = 'evt_gone'", []).expect("an older process's delete");
    let payloads: i64 = side.query_row("SELECT count(*) FROM inbox_payloads", [], |r| r.get(0)).expect("count");
    assert_eq!(payloads, 1, "only evt_new's payload is left");

    // An old dead letter replayed under its real id keeps its bytes.
    register_new(&store, new_order("ord_p", 100, T0)).await;
    let replayed =
        store.replay(&source(), &event_id("sha256:p1"), paid.parsed().clone(), T0 + 2).await.expect("replay");
    assert_eq!(replayed, Replayed::Done(processed()));
    assert_eq!(event_view(&store, "evt_p1").await.raw_body, paid.raw_body());

    // Payload retention clears both kinds.
    let request = PruneRequest {
        keys_before_ms: 0,
        payloads_from_ms: 0,
        payloads_before_ms: T0 + 10,
        orders_before_ms: 0,
        limit: 100,
        now_ms: T0 + 10,
    };
    let pruned = store.prune(request).await.expect("prune");
    assert_eq!(pruned.payloads_cleared, 4, "{pruned:?}");
    for id in ["evt_old", "evt_new", "evt_p1", "sha256:p1"] {
        let view = event_view(&store, id).await;
        assert!(view.raw_body.is_empty() && view.headers.is_empty(), "{id}: {view:?}");
    }
    let left: i64 = side.query_row("SELECT count(*) FROM inbox_payloads", [], |r| r.get(0)).expect("count");
    assert_eq!(left, 0);
    store.shutdown().await;
}

/// A payment deferred while its source's orders were registered stays deferred after the source is switched to
/// implicit orders: only a payment's first arrival creates its order (retries and replays do not, as on
/// PostgreSQL); registering the order applies it.
#[tokio::test]
async fn switching_a_source_to_implicit_orders_does_not_create_the_orders_of_payments_already_deferred() {
    use payhook_store::contract::{claim, implicit_routing, new_order, order_id, pay, register_new, retry};
    use payhook_store::{Outcome, Retried, Store};
    let store = crate::TempStore::open(test_policy());
    assert_eq!(store.ingest(pay("evt_sw", "ord_sw", 100, T0)).await.expect("ingest").outcome, Outcome::Deferred);
    let (_dir, path) = store.close();
    let store = SqliteStore::open(SqliteOptions {
        retry: test_policy(),
        routing: implicit_routing(),
        ..SqliteOptions::new(&path)
    })
    .expect("reopen with implicit orders");
    let due = store.claim_due(claim("w", T0 + 3_600_000, 60_000)).await.expect("claim");
    assert_eq!(due.len(), 1, "{due:?}");
    let retried = retry(&store, due.into_iter().next().expect("one"), T0 + 3_600_000).await;
    assert!(matches!(&retried, Retried::Done(r) if r.outcome == Outcome::Deferred), "{retried:?}");
    assert!(store.order(&order_id("ord_sw")).await.expect("read").is_none(), "a retry created no order");
    register_new(&store, new_order("ord_sw", 100, T0 + 3_600_001)).await;
    let due = store.claim_due(claim("w", T0 + 3_600_002, 60_000)).await.expect("claim");
    let retried = retry(&store, due.into_iter().next().expect("due once registered"), T0 + 3_600_002).await;
    assert!(matches!(&retried, Retried::Done(r) if r.outcome == Outcome::Processed), "{retried:?}");
    store.shutdown().await;
}
