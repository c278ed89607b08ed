//! The `axum` feature: [`Verified`], an extractor that verifies the request, and [`VerifyLayer`], a tower layer
//! that verifies every request of the routes it wraps. Both answer a refused delivery with its status
//! ([`Error::status`]) and JSON body ([`Error::json`]), and read at most a body limit of bytes (2 MiB, as axum's
//! own default, unless the layer is told otherwise).
//!
//! The extractor takes its [`Webhook`] from the router's state (`Webhook: FromRef<S>`: the state itself, or a
//! field of it with `#[derive(FromRef)]` or a `FromRef` impl); a router of several providers gives each route a
//! state of its own, or wraps each in a [`VerifyLayer`]:
//!
//! ```
//! use axum::{Extension, Router, routing::post};
//! use payhook_verify::{Delivery, Webhook, axum::{Verified, VerifyLayer}};
//!
//! async fn stripe(Verified(delivery): Verified) -> String {
//!     format!("stripe {}", delivery.event().event_id)
//! }
//!
//! async fn paddle(Extension(delivery): Extension<Delivery>) -> String {
//!     format!("paddle {}", delivery.event().event_id)
//! }
//!
//! # fn main() -> Result<(), payhook_verify::ConfigError> {
//! let app: Router = Router::new()
//!     .route("/webhooks/stripe", post(stripe))
//!     .with_state(Webhook::preset("stripe", ["whsec_stripe_secret"])?)
//!     .merge(
//!         Router::new()
//!             .route("/webhooks/paddle", post(paddle))
//!             .layer(VerifyLayer::new(Webhook::preset("paddle", ["pdl_ntfset_secret"])?)),
//!     );
//! # let _ = app;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::axum::body::{Body, Bytes};
use ::axum::extract::{FromRef, FromRequest, Request};
use ::axum::http::{HeaderValue, StatusCode, header};
use ::axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use crate::error::Error;
use crate::http_request::target;
use crate::webhook::{Delivery, Webhook};

/// The most body bytes read unless a [`VerifyLayer`] is told otherwise: axum's own default limit.
pub const DEFAULT_BODY_LIMIT_BYTES: usize = 2 * 1024 * 1024;

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::BAD_REQUEST);
        let mut response = (status, self.json()).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// A verified delivery, extracted from the request: its raw body verified with the [`Webhook`] of the router's
/// state (or taken from a [`VerifyLayer`] that already did). A refused request is answered with the error's status
/// and JSON body, and the handler does not run.
///
/// It reads the body, so it is the handler's last argument.
#[derive(Debug, Clone)]
pub struct Verified(pub Delivery);

impl<S> FromRequest<S> for Verified
where
    S: Send + Sync,
    Webhook: FromRef<S>,
{
    type Rejection = Error;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(delivery) = request.extensions().get::<Delivery>() {
            return Ok(Self(delivery.clone()));
        }
        let webhook = Webhook::from_ref(state);
        let (parts, body) = request.into_parts();
        let body = read_body(&parts.headers, body, DEFAULT_BODY_LIMIT_BYTES).await?;
        webhook.verify(parts.method.as_str(), target(&parts.uri), &parts.headers, &body).map(Self)
    }
}

/// Reads `body` whole, refusing it as soon as it passes `limit` (whatever `Content-Length` claimed).
async fn read_body(headers: &::axum::http::HeaderMap, body: Body, limit: usize) -> Result<Bytes, Error> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(Error::BodyTooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(Error::BodyTooLarge { limit }),
        Err(_) => Err(Error::Body),
    }
}

/// A tower layer that verifies every request of the routes it wraps with one [`Webhook`]: a refused request is
/// answered with the error's status and JSON body; a verified one goes on with its body as received and the
/// [`Delivery`] in its extensions (`Extension<Delivery>`, or [`Verified`]).
#[derive(Debug, Clone)]
pub struct VerifyLayer {
    webhook: Webhook,
    limit: usize,
}

impl VerifyLayer {
    /// Verifies with `webhook`, reading at most [`DEFAULT_BODY_LIMIT_BYTES`].
    pub fn new(webhook: Webhook) -> Self {
        Self { webhook, limit: DEFAULT_BODY_LIMIT_BYTES }
    }

    /// Reads at most `limit` bytes of a body; a longer one is answered `413`.
    #[must_use]
    pub fn body_limit_bytes(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
}

impl<S> tower_layer::Layer<S> for VerifyLayer {
    type Service = VerifyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        VerifyService { inner, webhook: self.webhook.clone(), limit: self.limit }
    }
}

/// The service [`VerifyLayer`] wraps a route in.
#[derive(Debug, Clone)]
pub struct VerifyService<S> {
    inner: S,
    webhook: Webhook,
    limit: usize,
}

impl<S> tower_service::Service<Request> for VerifyService<S>
where
    S: tower_service::Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The clone that was polled ready serves this request; the fresh one waits for the next poll_ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let webhook = self.webhook.clone();
        let limit = self.limit;
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let body = match read_body(&parts.headers, body, limit).await {
                Ok(body) => body,
                Err(refused) => return Ok(refused.into_response()),
            };
            match webhook.verify(parts.method.as_str(), target(&parts.uri), &parts.headers, &body) {
                Ok(delivery) => {
                    parts.extensions.insert(delivery);
                    inner.call(Request::from_parts(parts, Body::from(body))).await
                }
                Err(refused) => Ok(refused.into_response()),
            }
        })
    }
}
