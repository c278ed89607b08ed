//! The one place where failures become HTTP status codes.
//!
//! Internal causes are logged here and never sent to the caller; the caller gets a stable machine code and a
//! sentence saying what was wrong.

use crate::runtime::confirm::Unconfirmed;
use crate::service::admin::AdminError;
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use payhook_store::StoreError;
use serde_json::json;

/// Every error the HTTP API can answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No source or object by that name.
    #[error("{0}")]
    NotFound(String),
    /// The signature is missing, malformed, stale or wrong.
    #[error("{message}")]
    Unauthorized {
        /// Stable reason code (`missing_header`, `malformed`, `stale`, `mismatch`, …).
        reason: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The `/v1` bearer token is missing or wrong, or no token is configured: 401 with `WWW-Authenticate: Bearer`.
    #[error("{message}")]
    TokenRequired {
        /// Stable reason code (`missing_token`, `api_disabled`).
        reason: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The client's address failed to give the API token too often: 429 with `Retry-After`, whatever it sent.
    /// An authenticated caller without the route's scope: 403, naming the scope needed.
    #[error("this route needs the {needed} scope; {actor} holds {}", held.map_or("none", |s| s.as_str()))]
    Forbidden {
        /// The route's scope.
        needed: crate::base::scope::Scope,
        /// The caller's: none for a proxy identity no rule names.
        held: Option<crate::base::scope::Scope>,
        /// Who the caller is (a token's name, an identity).
        actor: String,
    },
    #[error("too many failed attempts at the API token from this address; retry in {retry_after_secs} s")]
    TooManyAuthFailures {
        /// Seconds until the address may try again.
        retry_after_secs: u64,
    },
    /// The route exists but not with this method.
    #[error("method not allowed on this route")]
    MethodNotAllowed,
    /// The body is larger than the limit.
    #[error("body exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The client did not send its body within `server.body_timeout_ms`: 408, and the connection is closed.
    #[error("the request body did not arrive within server.body_timeout_ms ({0} ms)")]
    BodyTimeout(u64),
    /// The body could not be read (the client went away).
    #[error("the request body could not be read")]
    BodyUnreadable,
    /// Taking the body would have held more request body bytes than `server.body_buffer_bytes`: 503 with
    /// `Retry-After`, and the connection is closed.
    #[error("the server holds as many request bodies as server.body_buffer_bytes allows; retry later")]
    BodyBufferFull,
    /// The request was not answered within `server.request_timeout_ms` and was stopped: 503, and the connection is
    /// closed.
    #[error(
        "the request took longer than server.request_timeout_ms ({0} ms) and was stopped; retry later (a delivery \
         that was recorded meanwhile is answered duplicate)"
    )]
    RequestTimeout(u64),
    /// The request's content is not acceptable: a value out of its rules, or a JSON body that is not one object of
    /// the route's fields (an array, a string, null, an unknown field, a field of the wrong type). 422, before
    /// anything is done.
    #[error("{0}")]
    Invalid(String),
    /// The request conflicts with what is stored.
    #[error("{message}")]
    Conflict {
        /// What conflicts.
        message: String,
        /// The stored state, for the caller to compare.
        existing: serde_json::Value,
    },
    /// The object is not in a state the action applies to (replaying an event that is not a dead letter,
    /// re-queueing an outbox row that is not dead, a bulk replay while another runs); nothing changed.
    #[error("{message}")]
    WrongState {
        /// Stable code (`not_dead_letter`, `not_dead`, `replay_in_progress`).
        code: &'static str,
        /// What was refused and why.
        message: String,
        /// The object's current state, when it has one.
        status: Option<String>,
    },
    /// The provider's API could not confirm a delivery (`confirm = "api"`): 503, nothing recorded, the provider
    /// delivers again.
    #[error("{0}")]
    Unconfirmed(String),
    /// The event's source is no longer configured, so it cannot be re-parsed.
    #[error("{0}")]
    SourceNotConfigured(String),
    /// A configuration reload was refused (the file does not pass `payhook config check`, or changes a setting
    /// that needs a restart: 422), or this server has no file to reload (409). The configuration in force stays.
    #[error(transparent)]
    Reload(#[from] crate::service::reload::ReloadError),
    /// The store failed; the caller may retry (503) unless the data is corrupt (500). A read stopped at its time
    /// limit is `read_timeout`; one that found every read connection busy for that long is `readers_busy`.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<Unconfirmed> for ApiError {
    fn from(Unconfirmed(message): Unconfirmed) -> Self {
        ApiError::Unconfirmed(message)
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::Invalid(message) => ApiError::Invalid(message),
            AdminError::NotFound(message) => ApiError::NotFound(message),
            e @ AdminError::SourceNotConfigured(_) => ApiError::SourceNotConfigured(e.to_string()),
            AdminError::NotDeadLetter { status, .. } => ApiError::WrongState {
                code: "not_dead_letter",
                message: e.to_string(),
                status: Some(status.as_str().to_owned()),
            },
            AdminError::OutboxNotDead { ref status, .. } => {
                ApiError::WrongState { code: "not_dead", status: Some(status.clone()), message: e.to_string() }
            }
            AdminError::ReplayInProgress => {
                ApiError::WrongState { code: "replay_in_progress", message: e.to_string(), status: None }
            }
            AdminError::Store(e) => ApiError::Store(e),
        }
    }
}

impl ApiError {
    /// The error for a body that failed while it was read: the listener's deadline or buffer bound when one of them
    /// stopped it (the listener answers for those whatever the route does), else the client went away.
    pub(crate) fn from_body_error(e: &(dyn std::error::Error + 'static)) -> Self {
        match crate::runtime::body::BodyError::find(e) {
            Some(crate::runtime::body::BodyError::Deadline { timeout_ms }) => ApiError::BodyTimeout(*timeout_ms),
            Some(crate::runtime::body::BodyError::Budget) => ApiError::BodyBufferFull,
            Some(crate::runtime::body::BodyError::Read(_)) | None => ApiError::BodyUnreadable,
        }
    }
}

impl ApiError {
    /// A body an extractor could not read, whose route takes at most `limit` bytes: over it (413), or failed as
    /// [`ApiError::from_body_error`] says.
    pub(crate) fn from_bytes_rejection(rejection: axum::extract::rejection::BytesRejection, limit: usize) -> Self {
        use axum::extract::rejection::BytesRejection;
        match rejection {
            BytesRejection::FailedToBufferBody(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::TooLarge { limit }
            }
            BytesRejection::FailedToBufferBody(e) => ApiError::from_body_error(&e),
            _ => ApiError::BodyUnreadable,
        }
    }
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Unauthorized { reason, .. } => (StatusCode::UNAUTHORIZED, reason),
            ApiError::TokenRequired { reason, .. } => (StatusCode::UNAUTHORIZED, reason),
            ApiError::Forbidden { .. } => (StatusCode::FORBIDDEN, "insufficient_scope"),
            ApiError::TooManyAuthFailures { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_auth_failures"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::BodyUnreadable => (StatusCode::BAD_REQUEST, "body_unreadable"),
            ApiError::BodyBufferFull => (StatusCode::SERVICE_UNAVAILABLE, "body_buffer_full"),
            ApiError::RequestTimeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "request_timeout"),
            ApiError::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
            ApiError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
            ApiError::WrongState { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::SourceNotConfigured(_) => (StatusCode::CONFLICT, "source_not_configured"),
            ApiError::Unconfirmed(_) => (StatusCode::SERVICE_UNAVAILABLE, "unconfirmed"),
            ApiError::Reload(crate::service::reload::ReloadError::Refused(_)) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "config_refused")
            }
            ApiError::Reload(crate::service::reload::ReloadError::Unavailable) => {
                (StatusCode::CONFLICT, "reload_unavailable")
            }
            ApiError::Store(StoreError::Overloaded) => (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
            ApiError::Store(StoreError::ShuttingDown) => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            ApiError::Store(StoreError::Unavailable(_)) => (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable"),
            ApiError::Store(StoreError::Corrupt { .. }) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ApiError::Store(StoreError::ReadTimeout { .. }) => (StatusCode::SERVICE_UNAVAILABLE, "read_timeout"),
            ApiError::Store(StoreError::ReadersBusy { .. }) => (StatusCode::SERVICE_UNAVAILABLE, "readers_busy"),
        }
    }
}

impl ApiError {
    /// The status code and the sentence a caller is shown. A store failure is logged here with its cause; the
    /// caller only learns whether to retry.
    pub(crate) fn status_and_message(&self) -> (StatusCode, String) {
        let (status, _) = self.parts();
        let message = match self {
            ApiError::Store(e) => {
                tracing::warn!(error = %e, cause = ?std::error::Error::source(e), "store error answered {status}");
                match e {
                    StoreError::Corrupt { .. } => "internal error".to_owned(),
                    // Named after the setting, so that the caller (often the operator) knows which bound it hit.
                    StoreError::ReadTimeout { timeout_ms } => {
                        format!("the query took longer than storage.read_timeout_ms ({timeout_ms} ms) and was stopped")
                    }
                    StoreError::ReadersBusy { timeout_ms } => format!(
                        "every read connection stayed busy for storage.read_timeout_ms ({timeout_ms} ms); retry later"
                    ),
                    _ => format!("{e}; retry later"),
                }
            }
            other => other.to_string(),
        };
        (status, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (_, code) = self.parts();
        let (status, message) = self.status_and_message();
        let mut body = json!({ "error": code, "message": message });
        // The request's id (`X-Request-Id`), to find its log lines.
        if let Some(id) = crate::base::trace::current_request_id() {
            body["request_id"] = id.into();
        }
        if let ApiError::Conflict { existing, .. } = &self {
            body["existing"] = existing.clone();
        }
        if let ApiError::WrongState { status: Some(current), .. } = &self {
            body["status"] = current.clone().into();
        }
        if let ApiError::Forbidden { needed, held, .. } = &self {
            body["scope_needed"] = needed.as_str().into();
            if let Some(held) = held {
                body["scope_held"] = held.as_str().into();
            }
        }
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        match self {
            ApiError::TokenRequired { .. } => {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::Forbidden { needed, .. } => {
                // RFC 6750's answer to a token without the scope a resource needs.
                let value = format!("Bearer error=\"insufficient_scope\", scope=\"{needed}\"");
                if let Ok(value) = HeaderValue::from_str(&value) {
                    response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
                }
            }
            ApiError::TooManyAuthFailures { retry_after_secs } => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            _ => {}
        }
        response
    }
}
