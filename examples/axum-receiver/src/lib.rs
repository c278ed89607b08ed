//! An axum service receiving Stripe and Standard Webhooks deliveries with payhook-verify: the `Verified`
//! extractor verifies each request on its raw bytes (a forged or stale one is answered 401 with a JSON body before
//! the handler runs), and the handler records the event id in its own table, acting on an event only the first
//! time it arrives. Providers deliver at least once, so the second delivery of an event is answered 200
//! `duplicate` and changes nothing.
//!
//! ```text
//! POST /webhooks/stripe     Stripe's signature (Stripe-Signature), Stripe's events
//! POST /webhooks/standard   Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature), generic events
//! → 200 {"status": "processed" | "duplicate", "event_id": "…"}   401/422 {"error": "…", "message": "…"}
//! ```
//!
//! The dedup key is the table's primary key, `(provider, event_id)`: the insert that finds the row already there
//! is the duplicate, whatever the order concurrent deliveries arrive in. A real service records what it does with
//! the event in the same transaction as that row.

use std::sync::{Arc, Mutex};

use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use payhook_verify::Webhook;
use payhook_verify::axum::Verified;
use rusqlite::Connection;

/// The table of received events: one row per provider and event id.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS received_events (
    provider    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    event_type  TEXT NOT NULL,
    order_id    TEXT,
    amount      INTEGER,
    currency    TEXT,
    PRIMARY KEY (provider, event_id)
)";

/// The service's database: one SQLite connection, used from blocking tasks.
#[derive(Debug, Clone)]
pub struct Db(Arc<Mutex<Connection>>);

impl Db {
    /// Opens (or creates) the database at `path` (`:memory:` for one in memory) and its table.
    pub fn open(path: &str) -> rusqlite::Result<Self> {
        let conn = Connection::open(path)?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self(Arc::new(Mutex::new(conn))))
    }

    /// Records an event; `true` the first time its `(provider, event_id)` is seen, `false` for a duplicate.
    fn record(&self, provider: &str, event: &payhook_verify::Event) -> rusqlite::Result<bool> {
        let conn = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let money = event.money();
        let inserted = conn.execute(
            "INSERT INTO received_events (provider, event_id, event_type, order_id, amount, currency)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (provider, event_id) DO NOTHING",
            rusqlite::params![
                provider,
                event.event_id.as_str(),
                event.event_type,
                event.order_id().map(|o| o.as_str()),
                money.map(|m| m.amount_minor),
                money.map(|m| m.currency.as_str()),
            ],
        )?;
        Ok(inserted == 1)
    }

    /// How many events of `provider` were recorded.
    pub fn count(&self, provider: &str) -> rusqlite::Result<i64> {
        let conn = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        conn.query_row("SELECT count(*) FROM received_events WHERE provider = ?1", [provider], |r| r.get(0))
    }
}

/// What one route needs: its provider's webhook (which the extractor takes through `FromRef`) and the database.
#[derive(Debug, Clone)]
struct Receiver {
    provider: &'static str,
    webhook: Webhook,
    db: Db,
}

impl FromRef<Receiver> for Webhook {
    fn from_ref(receiver: &Receiver) -> Self {
        receiver.webhook.clone()
    }
}

/// The service: Stripe at `/webhooks/stripe`, Standard Webhooks at `/webhooks/standard`.
pub fn app(stripe: Webhook, standard: Webhook, db: Db) -> Router {
    let route = |path: &str, provider: &'static str, webhook: Webhook| {
        Router::new().route(path, post(receive)).with_state(Receiver { provider, webhook, db: db.clone() })
    };
    route("/webhooks/stripe", "stripe", stripe).merge(route("/webhooks/standard", "standard-webhooks", standard))
}

/// Records every event of a verified delivery (an Adyen batch would have several; these providers send one) and
/// answers whether it was new.
async fn receive(State(receiver): State<Receiver>, Verified(delivery): Verified) -> Response {
    let events = delivery.into_events();
    let Receiver { provider, db, .. } = receiver;
    let recorded = tokio::task::spawn_blocking(move || -> rusqlite::Result<Vec<serde_json::Value>> {
        let mut answers = Vec::with_capacity(events.len());
        for event in &events {
            // Here a service acts on a new event (pays the order, grants the subscription), in the same
            // transaction as its row.
            let status = if db.record(provider, event)? { "processed" } else { "duplicate" };
            answers.push(serde_json::json!({ "status": status, "event_id": event.event_id.as_str() }));
        }
        Ok(answers)
    })
    .await;
    match recorded {
        Ok(Ok(mut answers)) if answers.len() == 1 => Json(answers.remove(0)).into_response(),
        Ok(Ok(answers)) => Json(serde_json::json!({ "events": answers })).into_response(),
        // Not recorded: a non-2xx, so the provider delivers it again.
        Ok(Err(_)) | Err(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({ "error": "unavailable" }))).into_response()
        }
    }
}
