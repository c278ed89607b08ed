//! The schema of a database that the releases before the baseline migrated (the eleven migrations kept under
//! `tests/fixtures/before_baseline/`) is the baseline's: opening it applies only the migrations after the baseline,
//! and its catalog then equals that of a schema this build creates. A database older than that is refused and left as it is. Rows
//! written in an older form (headers as an object of strings) read as they are. The functions are applied again
//! only when the recorded ones are not this build's.

use crate::{TempSchema, TempStore, catalog, test_url};
use payhook_postgres::PgStore;
use payhook_store::Store;
use payhook_store::contract::{
    SOURCE, T0, event_view, new_order, order_view, pay, processed, register_new, test_policy, test_routing,
};

/// The migrations the releases before the baseline applied, in order (version 1 to 11).
const BEFORE_BASELINE: &[&str] = &[
    include_str!("../fixtures/before_baseline/0001_init.sql"),
    include_str!("../fixtures/before_baseline/0002_outbox_dispatch.sql"),
    include_str!("../fixtures/before_baseline/0003_billing.sql"),
    include_str!("../fixtures/before_baseline/0004_retention.sql"),
    include_str!("../fixtures/before_baseline/0005_billing_audit_by_event.sql"),
    include_str!("../fixtures/before_baseline/0006_counters.sql"),
    include_str!("../fixtures/before_baseline/0007_inbox_partitions.sql"),
    include_str!("../fixtures/before_baseline/0008_listing_indexes.sql"),
    include_str!("../fixtures/before_baseline/0009_order_retention.sql"),
    include_str!("../fixtures/before_baseline/0010_batch_composites.sql"),
    include_str!("../fixtures/before_baseline/0011_status_indexes_without_the_bulk.sql"),
];

/// Applies the first `version` migrations of [`BEFORE_BASELINE`] with their version rows, as the releases before
/// the baseline did.
async fn migrate_before_baseline(side: &tokio_postgres::Client, version: usize) {
    side.batch_execute(
        "CREATE TABLE payhook_schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await
    .expect("the version table");
    for (i, sql) in BEFORE_BASELINE.iter().take(version).enumerate() {
        side.batch_execute(sql).await.unwrap_or_else(|e| panic!("migration {}: {e}", i + 1));
        side.execute("INSERT INTO payhook_schema_version (version) VALUES ($1)", &[&(i as i32 + 1)])
            .await
            .expect("version row");
    }
}

async fn versions(side: &tokio_postgres::Client) -> Vec<i32> {
    let rows = side.query("SELECT version FROM payhook_schema_version ORDER BY version", &[]).await.expect("versions");
    rows.iter().map(|r| r.get(0)).collect()
}

/// A database at schema version 11, with the rows a payhook of that version wrote, is at the baseline: opening it
/// applies only the migrations after the baseline, its rows read and count as before, and its catalog (tables, columns, indexes,
/// constraints, triggers, types, sequences, the functions' definitions, seeded rows) is the catalog of a schema
/// this build creates from the baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_the_migrations_before_the_baseline_is_at_the_baseline_and_has_its_catalog() {
    let Some(url) = test_url() else { return };
    let fresh = TempSchema::create(&url).await;
    PgStore::open(fresh.options(test_policy())).await.expect("create from the baseline").shutdown().await;
    let fresh_side = fresh.side().await;
    let after_baseline: Vec<i32> = (12..=PgStore::schema_version() as i32).collect();
    let fresh_steps: Vec<i32> = std::iter::once(11).chain(after_baseline.iter().copied()).collect();
    assert_eq!(versions(&fresh_side).await, fresh_steps, "the baseline is one step, then each migration after it");

    let old = TempSchema::create(&url).await;
    let side = old.side().await;
    migrate_before_baseline(&side, BEFORE_BASELINE.len()).await;
    let store = PgStore::open(old.options(test_policy())).await.expect("open at the baseline");
    store.shutdown().await;
    let old_steps: Vec<i32> = (1..=11).chain(after_baseline.iter().copied()).collect();
    assert_eq!(versions(&side).await, old_steps, "only the migrations after the baseline applied");
    let (only_old, only_fresh) =
        catalog::difference(&catalog::dump(&side, old.name()).await, &catalog::dump(&fresh_side, fresh.name()).await);
    assert!(
        only_old.is_empty() && only_fresh.is_empty(),
        "only after the old migrations:\n{}\n\nonly from the baseline:\n{}",
        only_old.join("\n"),
        only_fresh.join("\n")
    );

    // What a payhook of version 11 left behind: a paid order, its receipt, and the counters of both.
    side.batch_execute(
        "INSERT INTO orders (id, amount, currency, status, created_at, updated_at) VALUES ('ord_v11', 100, 'usd', 'paid', 1, 2);
         INSERT INTO outbox (kind, sink, order_id, source, event_id, payload, status, next_attempt_at, created_at)
         VALUES ('order.paid', '', 'ord_v11', 'shop', 'evt_v11', '{\"kind\": \"order.paid\"}', 'unrouted', NULL, 2);",
    )
    .await
    .expect("version 11 rows");
    let mut options = old.options(test_policy());
    options.routing = test_routing();
    let store = PgStore::open(options).await.expect("open again");
    let order = order_view(&store, "ord_v11").await;
    assert_eq!((order.outbox.len(), order.outbox[0].status.as_str()), (1, "unrouted"), "{order:?}");
    register_new(&store, new_order("ord_new", 100, T0)).await;
    assert_eq!(store.ingest(pay("evt_new", "ord_new", 100, T0 + 1)).await.expect("ingest"), processed());
    assert_eq!(store.recount().await.expect("recount").drift, []);
    store.shutdown().await;
}

/// A database that the migrations before the baseline left at version 6 is refused with a message that says what
/// to do, and nothing is written to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_older_than_the_baseline_is_refused_and_left_as_it_is() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let side = schema.side().await;
    migrate_before_baseline(&side, 6).await;
    let before = catalog::dump(&side, schema.name()).await;
    let Err(refused) = PgStore::open(schema.options(test_policy())).await else { panic!("a version 6 schema opened") };
    let message =
        format!("{refused}: {}", std::error::Error::source(&refused).map(|e| e.to_string()).unwrap_or_default());
    assert!(message.contains("schema version 6") && message.contains("version 11"), "{message}");
    assert_eq!(versions(&side).await, (1..=6).collect::<Vec<i32>>());
    assert_eq!(catalog::dump(&side, schema.name()).await, before, "the refused schema was changed");
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

/// The functions of `sql/functions/` are applied when the recorded checksum is not this build's: a function
/// changed by hand stays changed while the checksum matches (opening again applies nothing), and is put back by a
/// build whose functions differ from the recorded ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_functions_are_applied_again_only_when_the_recorded_ones_are_not_this_builds() {
    let Some(url) = test_url() else { return };
    let schema = TempSchema::create(&url).await;
    let side = schema.side().await;
    let mut options = schema.options(test_policy());
    options.routing = test_routing();
    let store = PgStore::open(options.clone()).await.expect("open");
    register_new(&store, new_order("ord_fn", 100, T0)).await;
    assert_eq!(store.ingest(pay("evt_fn", "ord_fn", 100, T0 + 1)).await.expect("ingest"), processed());
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
    let claim = "SELECT payhook_claim_key('shop', 'key_fn', 'evt_key_fn', 1)";
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
        store.ingest(pay("evt_fn", "ord_fn", 100, T0 + 1)).await.expect("ingest").outcome,
        payhook_store::Outcome::Duplicate
    );
}
