//! The types of the HTTP API's schema that more than one layer names: ids and source names as the API accepts
//! them, the error body, the webhook answer and `/readyz`'s answer. The OpenAPI document (`http::openapi`) lists
//! them; they carry no behaviour.

use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// An id as payhook accepts it (orders, events, subscriptions, customers): 1 to 255 characters, none of them a
/// control character (`payhook_core::event`'s rule; anything else is answered 422).
#[derive(Debug)]
pub(crate) struct Id;

impl utoipa::PartialSchema for Id {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(255))
            .pattern(Some(r"^[^\u0000-\u001F\u007F-\u009F]*$"))
            .description(Some("1 to 255 characters, none of them a control character"))
            .into()
    }
}

impl ToSchema for Id {}

/// A configured source's name: 1 to 64 characters of `a-z`, `0-9`, `-` and `_` (anything else is answered 422).
#[derive(Debug)]
pub(crate) struct Source;

impl utoipa::PartialSchema for Source {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some("^[a-z0-9_-]{1,64}$"))
            .description(Some("1 to 64 characters of a-z, 0-9, '-' and '_'"))
            .into()
    }
}

impl ToSchema for Source {}

/// Every refusal: a stable code and a message for people.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// A stable code: `mismatch`, `stale`, `not_found`, `conflict`, `overloaded`, `storage_unavailable`, …
    error: String,
    /// What went wrong, for people.
    message: String,
    /// The request's id, as in its `X-Request-Id` header and its log lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
    /// With `insufficient_scope` (403): the scope the route needs (`read`, `operate`, `admin`).
    #[serde(skip_serializing_if = "Option::is_none")]
    scope_needed: Option<String>,
    /// With `insufficient_scope`: the scope the caller holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    scope_held: Option<String>,
}

/// The answer to a recorded delivery (a batching format's answer lists one per event under `events`). The handler
/// serializes this type itself, so the document and the answer cannot drift apart; the fields are in the order of
/// their names, the order the answer has always had.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WebhookAnswer {
    /// Why, when there is something to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
    /// The event's id (a derived one for an unparseable body).
    pub(crate) event_id: String,
    /// `processed`, `duplicate`, `deferred`, `ignored` or `dead_lettered`.
    pub(crate) status: &'static str,
}

/// The answer to a batching format's delivery of several events: `accepted`, and each event's own answer.
#[derive(Debug, Serialize)]
pub(crate) struct BatchAnswer {
    /// Each event's answer, in the order of the delivery.
    pub(crate) events: Vec<WebhookAnswer>,
    /// `accepted`.
    pub(crate) status: &'static str,
}

/// `/readyz`: `status` for anyone; each part, `ok` or what is wrong with it, only with the API token.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// `ready` or `not_ready`, as the status code says.
    #[schema(pattern = "^(ready|not_ready)$")]
    status: String,
    /// With the API token: `ok`, or the error the database answered.
    database: Option<String>,
    /// With the API token: `ok`, or `stopped`: writes are refused.
    writer: Option<String>,
    /// With the API token: `ok`, `disabled` or `stopped`.
    worker: Option<String>,
    /// With the API token: `ok`, `disabled` or `stopped`.
    dispatcher: Option<String>,
    /// With the API token: the database's replication (PostgreSQL); null for SQLite.
    replication: Option<ReplicationPart>,
}

/// `/readyz`'s `replication`: whether a 2xx is acknowledged on a synchronous standby. When it could not be read,
/// only `required`, `error` and `problem` are given.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReplicationPart {
    /// The session's `synchronous_commit`: `on`, `remote_apply`, `remote_write`, `local` or `off`.
    synchronous_commit: Option<String>,
    /// The primary's `synchronous_standby_names` (empty: no standby can be synchronous).
    synchronous_standby_names: Option<String>,
    /// Standbys the primary counts as synchronous; null when payhook's role may not see `pg_stat_replication`'s
    /// details (grant `pg_monitor`).
    sync_standbys: Option<u32>,
    /// Standbys streaming, synchronous or not; null as `sync_standbys`.
    streaming_standbys: Option<u32>,
    /// The server is a standby in recovery, not the primary.
    in_recovery: Option<bool>,
    /// A synchronous standby is connected and `synchronous_commit` waits for it: a 2xx survives the loss of the
    /// database machine.
    acknowledged_on_standby: Option<bool>,
    /// `storage.require_sync_standby`: without a 2xx acknowledged on a standby, `/readyz` answers 503.
    required: bool,
    /// Why this part makes `/readyz` not ready (only when `required`), e.g. `no synchronous standby is connected`.
    problem: Option<String>,
    /// The error reading the replication state, when it could not be read.
    error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_answer_has_its_fields_in_the_order_of_their_names_and_no_detail_when_there_is_none() {
        let answer = |detail: Option<&str>, event_id: &str, status| WebhookAnswer {
            detail: detail.map(str::to_owned),
            event_id: event_id.to_owned(),
            status,
        };
        let processed = answer(None, "evt_1", "processed");
        assert_eq!(serde_json::to_string(&processed).unwrap(), r#"{"event_id":"evt_1","status":"processed"}"#);
        let deferred = answer(Some("no order \"ord_1\" yet"), "evt_2", "deferred");
        assert_eq!(
            serde_json::to_string(&deferred).unwrap(),
            r#"{"detail":"no order \"ord_1\" yet","event_id":"evt_2","status":"deferred"}"#
        );
        let batch = BatchAnswer { events: vec![processed, deferred], status: "accepted" };
        assert_eq!(
            serde_json::to_string(&batch).unwrap(),
            r#"{"events":[{"event_id":"evt_1","status":"processed"},{"detail":"no order \"ord_1\" yet","event_id":"evt_2","status":"deferred"}],"status":"accepted"}"#
        );
    }
}
