//! A database written by the previous schema version is upgraded in place: its outbox rows become the record of
//! their effects (`unrouted`, no sink), and the store goes on with routing from there. Rows written in an older
//! form (headers as an object of strings) read as they are. A version 6 inbox becomes the held partition of the
//! partitioned inbox without being copied.

use crate::{TempSchema, TempStore, test_url};
use payhook_postgres::PgStore;
use payhook_store::contract::{
    SOURCE, T0, event_view, ignored, new_order, order_view, pay, processed, register_new, test_policy, test_routing,
};
use payhook_store::{Stats, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_with_outbox_rows_is_upgraded_and_its_rows_become_unrouted() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let side = schema.side().await;
    // What a payhook of schema version 1 left behind: a paid order with its (pending, never sent) receipt.
    side.batch_execute(include_str!("../../migrations/0001_init.sql")).await.expect("schema version 1");
    side.batch_execute(
        "CREATE TABLE payhook_schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO payhook_schema_version (version) VALUES (1);
         INSERT INTO orders (id, amount, currency, status, created_at, updated_at)
         VALUES ('ord_v1', 100, 'usd', 'paid', 1, 2);
         INSERT INTO outbox (kind, order_id, source, event_id, payload, created_at)
         VALUES ('order.paid', 'ord_v1', 'shop', 'evt_v1', '{\"kind\": \"order.paid\", \"order_id\": \"ord_v1\"}', 2);",
    )
    .await
    .expect("version 1 rows");

    let mut options = schema.options(test_policy());
    options.routing = test_routing();
    let store = PgStore::open(options).await.expect("open and upgrade");
    let versions: Vec<i32> = side
        .query("SELECT version FROM payhook_schema_version ORDER BY version", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=PgStore::schema_version() as i32).collect::<Vec<_>>());
    let old = order_view(&store, "ord_v1").await;
    assert_eq!(old.outbox.len(), 1, "{old:?}");
    let row = &old.outbox[0];
    assert_eq!((row.sink.as_deref(), row.status.as_str(), row.next_attempt_at_ms), (None, "unrouted", None), "{row:?}");
    assert_eq!((row.source.as_deref(), row.event_id.as_deref()), (Some("shop"), Some("evt_v1")));
    assert!(store.claim_outbox("", payhook_store::contract::claim("d", T0, 1_000)).await.unwrap().is_empty());

    // New effects are routed per sink, next to the old rows.
    register_new(&store, new_order("ord_v2", 100, T0)).await;
    assert_eq!(store.ingest(pay("evt_v2", "ord_v2", 100, T0 + 1)).await.expect("ingest"), processed());
    let s = store.stats().await.expect("stats");
    assert_eq!(
        (Stats::count(&s.outbox_by_status, "unrouted"), Stats::count(&s.outbox_by_status, "pending")),
        (1, 3),
        "{s:?}"
    );
    // The counters stats read started from a full count of the version 1 rows.
    assert_eq!(Stats::count(&s.orders, "paid"), 2, "{s:?}");
    assert_eq!(store.recount().await.expect("recount").drift, [], "{s:?}");
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_headers_are_an_object_of_strings_reads_every_duplicate_key_as_a_value_in_order() {
    let Some(url) = test_url() else { return };
    let store = TempStore::open(&url, test_policy()).await;
    // What payhook wrote before headers were lists: a repeated header as a duplicate key of one object.
    let old = r#"{"x-signature":"t=1,v1=aa","content-type":"application/json","x-signature":"t=1,v1=bb"}"#;
    store
        .schema()
        .side()
        .await
        .execute(
            "INSERT INTO inbox (source, event_id, status, received_at, updated_at, verification, headers, body)
             VALUES ($1, 'evt_old', 'ignored', 1, 1, 'hmac (secret #0)', $2, '\\x7b7d'::bytea)",
            &[&SOURCE, &old],
        )
        .await
        .expect("an old-format row");

    let event = event_view(&store, "evt_old").await;
    assert_eq!(event.headers.get_all("x-signature"), ["t=1,v1=aa", "t=1,v1=bb"]);
    assert_eq!(event.headers.get_all("content-type"), ["application/json"]);
    assert_eq!(
        event.headers.to_json(),
        r#"{"x-signature":["t=1,v1=aa","t=1,v1=bb"],"content-type":["application/json"]}"#
    );
    assert_eq!(event.raw_body, b"{}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_inbox_becomes_the_held_partition_in_place_and_keeps_deduplicating() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let side = schema.side().await;
    migrate_to(&side, 6).await;
    // What a payhook of schema version 6 left behind: a processed, an ignored and a dead-lettered event.
    side.batch_execute(
        "CREATE TABLE payhook_schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO payhook_schema_version (version) SELECT generate_series(1, 6);
         INSERT INTO inbox (source, event_id, status, received_at, updated_at, verification, headers, body)
         VALUES ('shop', 'evt_v6_a', 'ignored', 1000, 1000, 'v', '{}', '\\x7b7d'::bytea),
                ('shop', 'evt_v6_b', 'ignored', 2000, 2000, 'v', '{}', '\\x7b7d'::bytea),
                ('shop', 'evt_v6_dead', 'dead_lettered', 3000, 3000, 'v', '{}', '\\x7b'::bytea);",
    )
    .await
    .expect("version 6 rows");
    let file: u32 = side.query_one("SELECT pg_relation_filenode('inbox')::oid", &[]).await.unwrap().get(0);
    let last_id: i64 = side.query_one("SELECT max(id) FROM inbox", &[]).await.unwrap().get(0);

    let store = PgStore::open(schema.options(test_policy())).await.expect("open and upgrade");
    let held: u32 = side.query_one("SELECT pg_relation_filenode('inbox_held')::oid", &[]).await.unwrap().get(0);
    assert_eq!(held, file, "the old table is attached as it is, not copied");
    let kind: String =
        side.query_one("SELECT relkind::text FROM pg_class WHERE oid = 'inbox'::regclass", &[]).await.unwrap().get(0);
    assert_eq!(kind, "p", "inbox is partitioned");
    let in_held: i64 =
        side.query_one("SELECT count(*) FROM inbox WHERE tableoid = 'inbox_held'::regclass", &[]).await.unwrap().get(0);
    assert_eq!(in_held, 3);

    // The old keys still deduplicate; a new delivery gets the next row id, in the partition of its day.
    let again = store.ingest(ignored("evt_v6_a", "customer.updated", T0)).await.expect("ingest");
    assert_eq!(again.outcome, payhook_store::Outcome::Duplicate, "{again:?}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let new = store.ingest(ignored("evt_v7", "customer.updated", now)).await.expect("ingest");
    assert_eq!(new.outcome, payhook_store::Outcome::Ignored);
    let row = side
        .query_one(
            "SELECT id, tableoid::regclass::text, payhook_day_partition($1) FROM inbox WHERE event_id = 'evt_v7'",
            &[&((now / 86_400_000) as i32)],
        )
        .await
        .expect("the new row");
    assert!(row.get::<_, i64>(0) > last_id, "row ids go on from the old table's");
    assert_eq!(row.get::<_, String>(1), row.get::<_, String>(2), "today's partition was made when the store opened");

    // The held rows are pruned row by row, as before; the dead letter stays.
    let pruned = store
        .prune(payhook_store::PruneRequest {
            keys_before_ms: 2_500,
            payloads_from_ms: 0,
            payloads_before_ms: 2_500,
            orders_before_ms: 0,
            limit: 10,
            now_ms: now,
        })
        .await
        .expect("prune");
    assert_eq!(pruned.events_deleted, 2, "{pruned:?}");
    let redelivered = store.ingest(ignored("evt_v6_a", "customer.updated", now)).await.expect("ingest");
    assert_eq!(redelivered.outcome, payhook_store::Outcome::Ignored, "its key went with its row");
    assert_eq!(event_view(&store, "evt_v6_dead").await.status, payhook_store::Outcome::DeadLettered);
    assert_eq!(store.recount().await.expect("recount").drift, []);
    store.shutdown().await;
}

/// A version 9 database (its batch functions taking one array per column) is upgraded: the positional versions
/// are gone, each function has the one definition of `sql/functions/`, and a function changed by hand is put
/// back by the next migrate of a build whose functions differ from what was recorded. Opening again with the same
/// build applies nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_9_schema_gets_the_functions_of_sql_functions_and_no_overloads() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let side = schema.side().await;
    migrate_to(&side, 9).await;
    side.batch_execute(
        "CREATE TABLE payhook_schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO payhook_schema_version (version) SELECT generate_series(1, 9);",
    )
    .await
    .expect("version 9");
    let arguments = |name: &'static str| {
        let side = &side;
        async move {
            let rows = side
                .query(
                    "SELECT pg_get_function_identity_arguments(p.oid) FROM pg_proc p
                     WHERE p.proname = $1 AND p.pronamespace = current_schema()::regnamespace",
                    &[&name],
                )
                .await
                .expect("pg_proc");
            rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>()
        }
    };
    assert_eq!(arguments("payhook_ingest_batch").await[0].matches("[]").count(), 23, "positional before");

    let mut options = schema.options(test_policy());
    options.routing = test_routing();
    let store = PgStore::open(options.clone()).await.expect("open and upgrade");
    assert_eq!(arguments("payhook_ingest_batch").await, ["p_deliveries payhook_delivery[], p_route_sinks text[]"]);
    assert_eq!(arguments("payhook_settle_batch").await.len(), 1, "one definition, no overload");
    register_new(&store, new_order("ord_v9", 100, T0)).await;
    assert_eq!(store.ingest(pay("evt_v9", "ord_v9", 100, T0 + 1)).await.expect("ingest"), processed());
    let checksum = || async {
        side.query_one("SELECT checksum FROM payhook_functions", &[]).await.expect("checksum").get::<_, String>(0)
    };
    let recorded = checksum().await;
    drop(store);

    // Opening again applies nothing: a function changed by hand stays changed while the checksum matches ...
    side.batch_execute(
        "CREATE OR REPLACE FUNCTION payhook_claim_key(p_source text, p_key text, p_event_id text, p_now bigint)
         RETURNS text LANGUAGE sql AS $$ SELECT 'changed' $$",
    )
    .await
    .expect("change a function");
    let store = PgStore::open(options.clone()).await.expect("open again");
    let claim = "SELECT payhook_claim_key('shop', 'key_v9', 'evt_key_v9', 1)";
    let claimed: Option<String> = side.query_one(claim, &[]).await.unwrap().get(0);
    assert_eq!((claimed.as_deref(), checksum().await), (Some("changed"), recorded.clone()));
    drop(store);
    // ... and a build whose functions differ from the recorded ones (here: a recorded checksum that is not this
    // build's) applies them all again.
    side.batch_execute("UPDATE payhook_functions SET checksum = 'another build'").await.expect("checksum");
    let store = PgStore::open(options).await.expect("open with other functions recorded");
    let claimed: Option<String> = side.query_one(claim, &[]).await.unwrap().get(0);
    assert_eq!((claimed, checksum().await), (None, recorded), "the file's definition: a free key is claimed");
    assert_eq!(
        store.ingest(pay("evt_v9", "ord_v9", 100, T0 + 1)).await.expect("ingest").outcome,
        payhook_store::Outcome::Duplicate
    );
}

/// The migrations of the schema's first `version` versions, as a payhook of that version left them (its
/// functions as those migrations defined them).
async fn migrate_to(side: &tokio_postgres::Client, version: usize) {
    let migrations = [
        include_str!("../../migrations/0001_init.sql"),
        include_str!("../../migrations/0002_outbox_dispatch.sql"),
        include_str!("../../migrations/0003_billing.sql"),
        include_str!("../../migrations/0004_retention.sql"),
        include_str!("../../migrations/0005_billing_audit_by_event.sql"),
        include_str!("../../migrations/0006_counters.sql"),
        include_str!("../../migrations/0007_inbox_partitions.sql"),
        include_str!("../../migrations/0008_listing_indexes.sql"),
        include_str!("../../migrations/0009_order_retention.sql"),
    ];
    for (i, sql) in migrations.iter().take(version).enumerate() {
        side.batch_execute(sql).await.unwrap_or_else(|e| panic!("migration {}: {e}", i + 1));
    }
}
