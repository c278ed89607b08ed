//! The OpenAPI document of the HTTP API, generated from the handlers' `#[utoipa::path]` annotations and served at
//! `/openapi.json`. [`crate::http::routes::ROUTES`] lists every route the router registers with its scope; a test
//! checks that the document describes each of them with its method and scope.

use crate::base::schema::{ErrorBody, Id, Readiness, ReplicationPart, Source, WebhookAnswer};
use crate::base::scope::Need;
use crate::http::routes::ROUTES;
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
        crate::http::admin_api::list_audit,
        crate::http::operations::healthz,
        crate::http::operations::readyz,
        crate::http::operations::metrics_text,
        openapi_json,
    ),
    components(schemas(Id, Source, ErrorBody, WebhookAnswer, Readiness, ReplicationPart, crate::service::admin::EventDetail, crate::service::admin::BodyEncoding,
        crate::service::admin::EventPage, crate::service::admin::OutboxPage, crate::service::admin::AuditPage, crate::service::reload::ReloadReport)),
    modifiers(&BearerToken, &Scopes),
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

/// Each operation's scope, from the route table ([`crate::http::routes::ROUTES`]): the bearer requirement lists
/// it (OpenAPI 3.1 lets a requirement name roles for any scheme), and `x-payhook-scope` states it plainly.
struct Scopes;

impl Modify for Scopes {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::SecurityRequirement;
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        for route in ROUTES {
            let Need::Scope(scope) = route.need else { continue };
            let Some(item) = doc.paths.paths.get_mut(route.path) else { continue };
            let operation = match route.method {
                "GET" => item.get.as_mut(),
                "POST" => item.post.as_mut(),
                _ => None,
            };
            let Some(operation) = operation else { continue };
            operation.security = Some(vec![SecurityRequirement::new("bearer", [scope.as_str()])]);
            let forbidden = ResponseBuilder::new()
                .description(format!(
                    "The token or identity does not hold the {scope} scope (`insufficient_scope`, naming the scope \
                     needed)"
                ))
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build(),
                )
                .build();
            operation.responses.responses.insert("403".to_owned(), RefOr::T(forbidden));
            let extensions = operation.extensions.get_or_insert_with(Default::default);
            extensions.merge(
                utoipa::openapi::extensions::ExtensionsBuilder::new().add("x-payhook-scope", scope.as_str()).build(),
            );
        }
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
