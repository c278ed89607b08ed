//! The worked example of docs/providers.md of a provider declared in configuration (`examples/declared-provider.toml`), run as
//! written: its deliveries, signed by hand the way the made-up provider documents it, are processed, deduplicated
//! and refunded; a stale or tampered one is refused.

use crate::helpers::{API_TOKEN, Server, TestDir};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::Value;

const EXAMPLE: &str = include_str!("../../../../examples/declared-provider.toml");
const PROVIDERS: &str = include_str!("../../../../docs/providers.md");
/// The endpoint secret, as the provider's dashboard shows it: 64 hex digits.
const SECRET: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const NOTIFICATION_URL: &str = "https://pay.example.com/webhooks/acme";

/// The example configuration with this test's port and database file (the lines the standard test configuration
/// has for them).
fn with_test_server_lines(standard: String) -> String {
    let line = |prefix: &str| standard.lines().find(|l| l.starts_with(prefix)).expect("a line").to_owned();
    EXAMPLE
        .replace("listen = \"127.0.0.1:8080\"", &line("listen = "))
        .replace("url = \"sqlite://payhook.db\"", &line("url = \"sqlite://"))
}

/// Signs `body` as the provider documents: base64 HMAC-SHA512 of `{t}.{url}.{body}`, keyed with the hex secret.
fn acme_signature(t: i64, body: &str, secret: &str) -> String {
    let key = hex::decode(secret).expect("a hex secret");
    let mut mac = Hmac::<sha2::Sha512>::new_from_slice(&key).expect("any key length");
    mac.update(format!("{t}.{NOTIFICATION_URL}.{body}").as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!("t={t};s={signature}")
}

fn body(event_id: &str, kind: &str, order: &str) -> String {
    serde_json::json!({
        "event": {"id": event_id, "kind": kind, "at": "2026-12-03T10:00:00Z"},
        "payment": {"ref": order, "id": format!("pay_{order}"), "total": "19.99", "currency": "EUR"},
    })
    .to_string()
}

async fn deliver(server: &Server, body: &str, signature: &str) -> (StatusCode, Value) {
    let resp = server
        .client
        .post(server.url("/webhooks/acme"))
        .header("acme-signature", signature)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("POST");
    let status = resp.status();
    (status, resp.json().await.expect("a JSON answer"))
}

#[test]
fn docs_providers_shows_the_example_as_it_is() {
    let start = EXAMPLE.find("[[sources]]").expect("the example declares a source");
    assert!(PROVIDERS.contains(EXAMPLE[start..].trim()), "docs/providers.md must show examples/declared-provider.toml");
}

#[tokio::test]
async fn a_provider_declared_in_configuration_is_verified_recorded_and_applied() {
    let dir = TestDir::new();
    let env = [("PAYHOOK_API_TOKEN", API_TOKEN), ("ACME_WEBHOOK_SECRET", SECRET)];
    let server = Server::start_edited_with_env(&dir, with_test_server_lines, &env).await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;

    let captured = body("ev_1", "payment.captured", "ord_acme_1");
    let (status, answer) = deliver(&server, &captured, &acme_signature(now, &captured, SECRET)).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("processed")), "{answer}");
    // The provider's retry of the same event, signed again later.
    let (status, answer) = deliver(&server, &captured, &acme_signature(now + 1, &captured, SECRET)).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("duplicate")), "{answer}");
    let (status, order) = server.order("ord_acme_1").await;
    assert_eq!(status, StatusCode::OK, "{order}");
    assert_eq!(
        (order["status"].as_str(), order["amount"].as_i64(), order["currency"].as_str()),
        (Some("paid"), Some(1999), Some("eur")),
        "{order}"
    );

    let refunded = body("ev_2", "payment.refunded", "ord_acme_1");
    let (status, answer) = deliver(&server, &refunded, &acme_signature(now, &refunded, SECRET)).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("processed")), "{answer}");
    assert_eq!(server.order("ord_acme_1").await.1["status"], "refunded");

    // A retryable failure is not final: the rule's `when` leaves it ignored.
    let retryable = body("ev_3", "payment.failed", "ord_acme_2").replace("\"total\"", "\"retryable\":true,\"total\"");
    let (status, answer) = deliver(&server, &retryable, &acme_signature(now, &retryable, SECRET)).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("ignored")), "{answer}");

    // Stale, tampered, or signed with another secret: refused, with the reason.
    let (status, answer) = deliver(&server, &captured, &acme_signature(now - 3_600, &captured, SECRET)).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("stale")), "{answer}");
    let tampered = captured.replace("19.99", "0.01");
    let (status, answer) = deliver(&server, &tampered, &acme_signature(now, &captured, SECRET)).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("mismatch")), "{answer}");
    let other = "00".repeat(32);
    let (status, answer) = deliver(&server, &captured, &acme_signature(now, &captured, &other)).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("mismatch")), "{answer}");
}

#[test]
fn docs_providers_lists_every_preset_with_a_format() {
    for name in payhook_core::preset::Preset::names() {
        let preset = payhook_core::preset::Preset::get(name).expect("listed").expect("parses");
        if preset.format.is_some() {
            assert!(PROVIDERS.contains(&format!(" / `{name}` |")), "docs/providers.md's preset table lacks {name}");
        }
    }
}

/// `payhook trigger` against a running server: a preset's example deliveries, signed with the configured secret,
/// are processed and move the order; a mistyped event lists the preset's events; a provider without a source says
/// how to add one.
#[tokio::test]
async fn trigger_sends_a_presets_deliveries_signed_as_the_provider_signs() {
    let dir = TestDir::new();
    let paddle = "\n[[sources]]\nname = \"paddle\"\nscheme = \"paddle\"\nformat = \"paddle\"\n\
                  secrets = [\"pdl_ntfset_01hv8x_trigger_test_secret\"]\norders = \"implicit\"\n";
    let server = Server::start_with(&dir, paddle).await;
    let config = server.config.to_str().expect("a UTF-8 path").to_owned();
    let trigger = |args: &[&str]| {
        let mut all = vec!["--config", config.as_str(), "trigger"];
        all.extend_from_slice(args);
        dir.run(&all)
    };
    let order = "txn_01hv8wptq8987qeep44cyrewp9";
    let out = trigger(&["paddle", "transaction.completed", "--order", order]);
    let stdout = crate::helpers::text(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("200 OK") && stdout.contains("\"processed\""),
        "{stdout}{}",
        crate::helpers::text(&out.stderr)
    );
    let (_, answer) = server.order(order).await;
    assert_eq!(answer["status"], "paid", "{answer}");
    let out = trigger(&["paddle", "refund", "--order", order]);
    assert!(out.status.success(), "{}", crate::helpers::text(&out.stderr));
    assert_eq!(server.order(order).await.1["status"], "refunded");

    let printed = trigger(&["paddle", "pay", "--order", "txn_other", "--print"]);
    let request: Value = serde_json::from_slice(&printed.stdout).expect("--print writes JSON");
    assert!(request["headers"]["paddle-signature"].as_str().is_some_and(|s| s.starts_with("ts=")), "{request}");
    assert!(request["body"].as_str().is_some_and(|b| b.contains("txn_other")), "{request}");
    assert_eq!(server.order("txn_other").await.0, StatusCode::NOT_FOUND, "--print sends nothing");

    let out = trigger(&["paddle", "transaction.complete"]);
    let stderr = crate::helpers::text(&out.stderr);
    assert!(!out.status.success() && stderr.contains("transaction.completed (pay)"), "{stderr}");
    let out = trigger(&["square", "pay"]);
    let stderr = crate::helpers::text(&out.stderr);
    assert!(!out.status.success() && stderr.contains("no configured source has format = \"square\""), "{stderr}");
}
