//! `payhook serve` on PostgreSQL reporting the primary's replication: `/readyz`'s `replication` part, the
//! `payhook_postgres_sync_standbys` gauge and the start-up log, with and without `storage.require_sync_standby`.
//! The server named by `PAYHOOK_TEST_POSTGRES_URL` is shared and has no standby (and its `postgres` is
//! superuser, so it sees that there is none); each test works in a schema of its own. Without the variable, each
//! test says it was skipped and passes.

use crate::helpers::*;
use crate::postgres::{TestDb, test_url};
use reqwest::StatusCode;
use serde_json::Value;

/// `payhook serve` on `db` with `require_sync_standby` as given.
async fn serve(dir: &TestDir, db: &TestDb, required: bool) -> Server {
    let storage = format!("url = \"{}\"\nrequire_sync_standby = {required}", db.url);
    Server::start_edited(dir, |config| config.replace(&format!("url = \"sqlite://{DB_FILE}\""), &storage)).await
}

/// `/readyz` with the API token: with its parts, not only the status.
async fn readyz(server: &Server) -> (StatusCode, Value) {
    let resp = server.client.get(server.url("/readyz")).bearer_auth(API_TOKEN).send().await.expect("GET /readyz");
    let status = resp.status();
    (status, resp.json().await.expect("/readyz answers JSON"))
}

async fn metrics(server: &Server) -> String {
    let resp = server.client.get(server.url("/metrics")).bearer_auth(API_TOKEN).send().await.expect("GET /metrics");
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.expect("metrics text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_synchronous_standby_required_and_none_connected_readyz_answers_503_and_says_why() {
    let Some(url) = test_url() else { return };
    let schema = TestDb::schema(&url).await;
    let dir = TestDir::new();
    let server = serve(&dir, &schema, true).await;
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    // Everything else is well: the replication alone makes it not ready.
    for part in ["database", "writer", "worker", "dispatcher"] {
        assert!(body[part] == "ok" || body[part] == "disabled", "{part}: {body}");
    }
    let r = &body["replication"];
    assert_eq!((&r["sync_standbys"], &r["streaming_standbys"]), (&Value::from(0), &Value::from(0)), "{body}");
    assert_eq!((&r["required"], &r["acknowledged_on_standby"]), (&Value::Bool(true), &Value::Bool(false)), "{body}");
    assert_eq!(r["synchronous_commit"], "on", "{body}");
    let problem = r["problem"].as_str().unwrap_or_default();
    assert!(problem.starts_with("no synchronous standby is connected"), "{body}");
    assert!(metrics(&server).await.lines().any(|l| l == "payhook_postgres_sync_standbys 0"));
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_requirement_readyz_answers_200_and_reports_no_synchronous_standby() {
    let Some(url) = test_url() else { return };
    let schema = TestDb::schema(&url).await;
    let dir = TestDir::new();
    let server = serve(&dir, &schema, false).await;
    let (status, body) = readyz(&server).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let r = &body["replication"];
    assert_eq!(r["sync_standbys"], 0, "{body}");
    assert_eq!((&r["required"], &r["acknowledged_on_standby"]), (&Value::Bool(false), &Value::Bool(false)), "{body}");
    assert!(r["problem"].is_null(), "nothing makes it not ready: {body}");
    // Said once at start, so that nobody takes a 2xx for more than it is.
    let log = server.log();
    assert!(log.contains("a 2xx survives the loss of this database machine only with a synchronous standby"), "{log}");
    server.stop();
}
