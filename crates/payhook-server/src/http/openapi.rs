//! The OpenAPI document of the HTTP API, generated from the handlers' `#[utoipa::path]` annotations and served at
//! `/openapi.json`. [`crate::ROUTES`] lists every route the router registers; a test checks that the document
//! describes each of them with its method.

use crate::base::schema::{ErrorBody, Id, Readiness, ReplicationPart, Source, WebhookAnswer};
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The document.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "payhook", description = "Payment webhooks, applied exactly once."),
    paths(
        crate::http::ingest::handle,
        crate::http::api::register_order,
        crate::http::api::get_order,
        crate::http::api::get_subscription,
        crate::http::api::get_entitlements,
        crate::http::admin_api::list_events,
        crate::http::admin_api::show_event,
        crate::http::admin_api::replay_event,
        crate::http::admin_api::list_dead_letters,
        crate::http::admin_api::bulk_replay,
        crate::http::admin_api::list_outbox,
        crate::http::admin_api::retry_outbox,
        crate::http::admin_api::stats,
        crate::http::admin_api::reload,
        crate::http::operations::healthz,
        crate::http::operations::readyz,
        crate::http::operations::metrics_text,
        openapi_json,
    ),
    components(schemas(Id, Source, ErrorBody, WebhookAnswer, Readiness, ReplicationPart, crate::service::admin::EventDetail, crate::service::admin::BodyEncoding,
        crate::service::admin::EventPage, crate::service::admin::OutboxPage, crate::service::reload::ReloadReport)),
    modifiers(&BearerToken),
)]
pub(crate) struct ApiDoc;

/// `/v1` takes `Authorization: Bearer <token>`.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document as JSON.
pub(crate) fn json() -> String {
    ApiDoc::openapi().to_json().unwrap_or_else(|e| {
        tracing::error!(error = %e, "the OpenAPI document does not serialize");
        "{}".to_owned()
    })
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", security(("bearer" = [])), responses(
    (status = 200, description = "This document", content_type = "application/json"),
    (status = 401, description = "Missing or wrong bearer token (unless `server.public_openapi = true`)", body = crate::base::schema::ErrorBody),
    (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn openapi_json() -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/json")], json())
}
