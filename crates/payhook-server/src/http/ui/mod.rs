//! The operator dashboard under `/ui`: server-rendered pages behind the API token.
//!
//! - `overview`: the overview's counts, throughput chart and per-source table.
//! - `login`: the login page, login and logout.
//! - `events`: the events list and one event's page.
//! - `dead_letters`: the dead letters and their bulk replay.
//! - `outbox`: the outbox and re-queueing a dead row.
//! - `orders`: orders with their history, and billing.
//! - `audit`: the audit trail (admin only).
//! - `session`: login sessions in memory, the cookie, CSRF tokens.
//! - `render`: layout, stylesheet, badges, times, the throughput chart.
//!
//! Pages read through [`crate::service::admin`] and act through the same functions as the `/v1` admin API
//! (`admin_api::replay_one`, `replay_many`, `retry_one_outbox`), so a replay from the dashboard is exactly a replay
//! from the API or the CLI. Every state-changing request is a POST carrying the session's CSRF token, checked by
//! [`require_session`] before any handler runs.

mod audit;
mod dead_letters;
mod events;
mod login;
mod orders;
mod outbox;
mod overview;
mod render;

use audit::*;
use dead_letters::*;
use events::*;
use login::*;
use orders::*;
use outbox::*;
use overview::*;

use crate::base::scope::Scope;
use crate::http::api::{full_path, record_refusal};
use crate::http::error::ApiError;
use crate::http::routes::scope_needed;
use crate::runtime::access::{Principal, Via, Vouched};
use crate::runtime::auth::{Client, Refusal, Surface};
use crate::runtime::body::BodyError;
use crate::runtime::session::{self, Session};
use crate::service::actions::{replay_many, replay_one, retry_one_outbox};
use crate::service::admin::{self, EventQuery, OutboxQuery, ReplayFilter};
use crate::service::audit::Actor;
use crate::state::AppState;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Extension, Form, MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use payhook_core::event::OrderId;
use payhook_store::{AuditAction, EventSummary, OutboxView, Outcome, Store};
use render::{Frame, Section, badge, csrf_field, time};
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;

/// The largest form the dashboard reads; its forms are a few short fields.
const FORM_LIMIT_BYTES: usize = 16 * 1024;
const STATUSES: [Outcome; 5] =
    [Outcome::Processed, Outcome::Duplicate, Outcome::Deferred, Outcome::Ignored, Outcome::DeadLettered];

/// The dashboard's routes, nested under `/ui`.
pub(crate) fn router<S: Store>(state: Arc<AppState<S>>) -> Router<Arc<AppState<S>>> {
    let protected = Router::new()
        .route("/", get(overview::<S>))
        .route("/logout", post(logout::<S>))
        .route("/events", get(events::<S>))
        .route("/events/{source}/{event_id}", get(event::<S>))
        .route("/events/{source}/{event_id}/replay", post(replay::<S>))
        .route("/dead-letters", get(dead_letters::<S>))
        .route("/dead-letters/replay", post(bulk_replay::<S>))
        .route("/outbox", get(outbox::<S>))
        .route("/outbox/{id}/retry", post(retry_outbox::<S>))
        .route("/orders", get(orders::<S>))
        .route("/billing", get(billing::<S>))
        .route("/audit", get(audit::<S>))
        .route_layer(middleware::from_fn_with_state(state, require_session::<S>));
    Router::new()
        .route("/login", get(login_page::<S>).post(login::<S>))
        .merge(protected)
        .layer(middleware::from_fn(security_headers))
}

/// A failure shown as a page.
#[derive(Debug)]
pub(crate) struct UiError {
    status: StatusCode,
    message: String,
}

impl UiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }
}

impl From<ApiError> for UiError {
    fn from(e: ApiError) -> Self {
        let (status, message) = e.status_and_message();
        Self { status, message }
    }
}

impl From<admin::AdminError> for UiError {
    fn from(e: admin::AdminError) -> Self {
        ApiError::from(e).into()
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let body = render::bare(
            title,
            html! {
                main {
                    h1 { (self.status.as_u16()) " " (title) }
                    div.error id="error" { (self.message) }
                    p { a href="/ui" { "Back to the dashboard" } " · " a href="/ui/login" { "Log in" } }
                }
            },
        );
        (self.status, Html(body.into_string())).into_response()
    }
}

/// Headers on every dashboard answer: nothing cached, no framing, no script, no referrer, forms only to payhook.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

/// Lets through requests of a live session whose caller holds the route's scope ([`crate::http::routes`]): a read
/// goes on, a POST only with the session's CSRF token in its form. Without a session, a request that a trusted
/// proxy's identity header vouches for opens one (on a read); any other read is sent to the login page, and a POST
/// is refused with 401. A caller below the route's scope is refused with 403 naming the scope. Nothing refused
/// reaches a handler.
async fn require_session<S: Store>(State(state): State<Arc<AppState<S>>>, request: Request, next: Next) -> Response {
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    let now_ms = state.clock.now_ms();
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let trusted = &state.settings.auth.trusted_proxies;
    let live = state.live();
    let vouched = live.credentials.vouched(request.headers(), peer.map(|p| p.ip()), trusted);
    let client = Client::of(peer, request.headers(), trusted);
    if vouched == Vouched::Untrusted {
        state.auth.identity_ignored(client);
    }
    let standing = state
        .ui_sessions
        .get(request.headers(), now_ms)
        .and_then(|session| session.current(&live.credentials, &vouched, now_ms).map(|p| (session, p)));
    let (session, principal, opened) = match (standing, &vouched) {
        (Some((session, principal)), _) => (session, principal, None),
        (None, Vouched::Known(actor, scope)) if reads => {
            let principal = Principal {
                actor: actor.clone(),
                scope: *scope,
                via: Via::Identity,
                address: client.addr.map(|a| a.to_string()),
            };
            match open_session(&state, principal.clone(), request.headers(), now_ms) {
                Ok((session, cookie)) => {
                    let detail = serde_json::json!({ "via": "identity" });
                    let entry = Actor::of(&principal).entry(AuditAction::Login, None, "ok", detail, now_ms);
                    let _ = crate::service::audit::record(&*state.store, entry).await;
                    (session, principal, Some(cookie))
                }
                Err(refused) => return refused.into_response(),
            }
        }
        (None, Vouched::Unknown(actor)) => {
            state.auth.forbidden();
            let message = format!("{actor} holds no scope here (no server.identities rule names it)");
            let refused = ApiError::Forbidden { needed: Scope::Read, held: None, actor: actor.clone() };
            let address = client.addr.map(|a| a.to_string());
            record_refusal(&state, &refused, address, request.method().as_str(), full_path(&request)).await;
            return UiError::new(StatusCode::FORBIDDEN, message).into_response();
        }
        (None, _) if reads => return Redirect::to("/ui/login").into_response(),
        (None, _) => {
            return UiError::new(StatusCode::UNAUTHORIZED, "not logged in, or the session expired: log in again")
                .into_response();
        }
    };
    let path = request.extensions().get::<MatchedPath>().map_or_else(|| request.uri().path(), MatchedPath::as_str);
    let needed = scope_needed(request.method().as_str(), path);
    if let Err(refused) = crate::http::api::permit(&state, &principal, needed) {
        let (method, path) = (request.method().as_str(), full_path(&request));
        record_refusal(&state, &refused, principal.address.clone(), method, path).await;
        return UiError::from(refused).into_response();
    }
    let mut request = if reads {
        request
    } else {
        let (parts, body) = request.into_parts();
        let bytes = match axum::body::to_bytes(body, FORM_LIMIT_BYTES).await {
            Ok(bytes) => bytes,
            Err(e) if BodyError::find(&e).is_some() => {
                // Past its deadline or the body buffer bound: the listener answers for it.
                return UiError::from(ApiError::from_body_error(&e)).into_response();
            }
            Err(_) => {
                return UiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the form is larger than the dashboard reads, or did not arrive whole",
                )
                .into_response();
            }
        };
        let given = form_urlencoded::parse(&bytes).find(|(k, _)| k == "csrf").map(|(_, v)| v.into_owned());
        if !session.csrf_matches(given.as_deref().unwrap_or("")) {
            tracing::warn!(path = %parts.uri.path(), "dashboard POST refused: missing or wrong CSRF token");
            return UiError::new(
                StatusCode::FORBIDDEN,
                "this form's security token is missing or stale; reload the page and try again",
            )
            .into_response();
        }
        Request::from_parts(parts, Body::from(bytes))
    };
    let mut session = session;
    session.principal = principal.clone();
    request.extensions_mut().insert(session);
    request.extensions_mut().insert(principal);
    let mut response = next.run(request).await;
    if let Some(cookie) = opened {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// Opens a dashboard session for `principal`: the session and its `Set-Cookie` value, or the page that says why not.
fn open_session<S: Store>(
    state: &AppState<S>,
    principal: Principal,
    headers: &HeaderMap,
    now_ms: i64,
) -> Result<(Session, HeaderValue), UiError> {
    let unavailable = || UiError::new(StatusCode::SERVICE_UNAVAILABLE, "could not open a session; try again");
    let new = state.ui_sessions.create(now_ms, principal).map_err(|e| {
        tracing::error!(error = %e, "no randomness for a dashboard session");
        unavailable()
    })?;
    let cookie = session::set_cookie(&new.cookie_value, session::is_https(headers));
    let value = HeaderValue::from_str(&cookie).map_err(|_| unavailable())?;
    Ok((new.session, value))
}

fn html_page<S>(state: &AppState<S>, session: &Session, title: &str, section: Section, content: Markup) -> Response {
    html_page_refreshing(state, session, title, section, None, content)
}

fn html_page_refreshing<S>(
    state: &AppState<S>,
    session: &Session,
    title: &str,
    section: Section,
    refresh_secs: Option<u32>,
    content: Markup,
) -> Response {
    let frame = Frame { title, section, session, flash: state.ui_sessions.take_flash(session), refresh_secs };
    Html(render::page(frame, content).into_string()).into_response()
}

// ---- filters and links ----

/// The query string of every listing; an empty field (as an HTML form sends it) means no filter.
#[derive(Debug, Default, Deserialize)]
struct Filters {
    source: Option<String>,
    status: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    reason: Option<String>,
    kind: Option<String>,
    sink: Option<String>,
    order_id: Option<String>,
    id: Option<String>,
    subscription: Option<String>,
    customer: Option<String>,
    actor: Option<String>,
    action: Option<String>,
    before: Option<String>,
}

fn set(value: &Option<String>) -> Option<String> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
}

impl Filters {
    fn before(&self) -> Result<Option<i64>, UiError> {
        set(&self.before)
            .map(|b| b.parse().map_err(|_| UiError::new(StatusCode::UNPROCESSABLE_ENTITY, "before must be a number")))
            .transpose()
    }

    fn event_query(&self) -> Result<EventQuery, UiError> {
        Ok(EventQuery {
            source: set(&self.source),
            status: set(&self.status),
            event_type: set(&self.event_type),
            reason: set(&self.reason),
            before: self.before()?,
            ..EventQuery::default()
        })
    }

    fn replay_filter(&self) -> ReplayFilter {
        ReplayFilter {
            source: set(&self.source),
            event_type: set(&self.event_type),
            reason: set(&self.reason),
            ..ReplayFilter::default()
        }
    }

    /// The set filters as a query string, with `before` replaced.
    fn query_string(&self, before: Option<i64>) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        let fields = [
            ("source", &self.source),
            ("status", &self.status),
            ("type", &self.event_type),
            ("reason", &self.reason),
            ("kind", &self.kind),
            ("sink", &self.sink),
            ("order_id", &self.order_id),
            ("actor", &self.actor),
            ("action", &self.action),
        ];
        for (name, value) in fields {
            if let Some(v) = set(value) {
                q.append_pair(name, &v);
            }
        }
        if let Some(b) = before {
            q.append_pair("before", &b.to_string());
        }
        q.finish()
    }
}

fn filters(q: Result<Query<Filters>, QueryRejection>) -> Result<Filters, UiError> {
    q.map(|Query(f)| f).map_err(|e| UiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.body_text()))
}

/// A path segment, percent-encoded (event ids may hold any printable character).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn event_href(source: &str, event_id: &str) -> String {
    format!("/ui/events/{}/{}", segment(source), segment(event_id))
}

fn order_href(order_id: &str) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("id", order_id);
    format!("/ui/orders?{}", q.finish())
}

fn with_query(path: &str, query: &str) -> String {
    if query.is_empty() { path.to_owned() } else { format!("{path}?{query}") }
}

fn source_select<S: Store>(state: &AppState<S>, current: Option<&str>) -> Markup {
    let live = state.live();
    let mut names: Vec<&str> = live.sources.keys().map(String::as_str).collect();
    names.sort_unstable();
    html! {
        label { "Source"
            select name="source" id="filter-source" {
                option value="" { "any" }
                @for name in names {
                    option value=(name) selected[current == Some(name)] { (name) }
                }
            }
        }
    }
}

fn text_filter(label: &str, name: &str, value: Option<&str>) -> Markup {
    html! {
        label { (label)
            input type="text" name=(name) id={ "filter-" (name) } value=[value] size="14";
        }
    }
}

fn hidden(name: &str, value: Option<&str>) -> Markup {
    html! { @if let Some(v) = value { input type="hidden" name=(name) value=(v); } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(segment("evt_1"), "evt_1");
        assert_eq!(segment("sha256:ab"), "sha256:ab");
        assert_eq!(segment("a/b c?#%"), "a%2Fb%20c%3F%23%25");
    }
}
