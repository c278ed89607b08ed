//! One definition of every outbound document: the same scenario on SQLite and on PostgreSQL leaves sinks the
//! same bytes to send, document for document (`payhook_store::payload`).

use crate::{TempStore, test_url};
use payhook_sqlite::{SqliteOptions, SqliteStore};
use payhook_store::contract::{DOCUMENT_SINKS, claimed_documents, test_policy, test_routing, write_every_document};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_and_postgresql_send_byte_identical_documents_for_the_same_events() {
    let Some(url) = test_url() else { return };
    let pg = TempStore::open_with(&url, test_policy(), |o| o.routing = test_routing()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut options = SqliteOptions::new(dir.path().join("payhook.db"));
    options.retry = test_policy();
    options.routing = test_routing();
    let sqlite = SqliteStore::open(options).expect("open sqlite");

    write_every_document(&pg).await;
    write_every_document(&sqlite).await;
    let (from_pg, from_sqlite) = (claimed_documents(&pg).await, claimed_documents(&sqlite).await);
    sqlite.shutdown().await;

    let kinds: std::collections::BTreeSet<&str> = from_sqlite.iter().map(|(_, kind, _)| kind.as_str()).collect();
    let expected = [
        "entitlement.granted",
        "entitlement.revoked",
        "event.received",
        "invoice.payment_failed",
        "order.failed",
        "order.paid",
        "order.refunded",
        "subscription.updated",
    ];
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), expected, "the scenario writes every kind");
    let sinks: std::collections::BTreeSet<&str> = from_sqlite.iter().map(|(sink, ..)| sink.as_str()).collect();
    assert_eq!(sinks.len(), DOCUMENT_SINKS.len(), "{sinks:?}");
    assert!(
        from_sqlite.iter().any(|(_, kind, doc)| kind == "order.paid" && doc.contains(r#""previous_status":"failed""#))
    );
    for (pg_doc, sqlite_doc) in from_pg.iter().zip(&from_sqlite) {
        assert_eq!(pg_doc, sqlite_doc, "PostgreSQL's document, then SQLite's");
    }
    assert_eq!(from_pg.len(), from_sqlite.len());
}
