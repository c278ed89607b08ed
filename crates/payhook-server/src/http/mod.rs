//! What speaks HTTP: the listener with its bounds, the webhook route, the `/v1` API, the operations routes, the
//! dashboard, the OpenAPI document, and [`error::ApiError`], where failures become status codes.

pub mod admin_api;
pub mod api;
pub mod error;
pub mod ingest;
pub mod json_body;
pub mod listener;
pub mod openapi;
pub mod operations;
pub mod routes;
pub mod ui;
