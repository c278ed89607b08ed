//! The operator dashboard under `/ui`: server-rendered pages behind the API token.
//!
//! - `login`: the login page, login and logout.
//! - `events`: the events list and one event's page.
//! - `orders`: orders with their history, and billing.
//! - `session`: login sessions in memory, the cookie, CSRF tokens.
//! - `render`: layout, stylesheet, badges, times, the throughput chart.
//!
//! Pages read through [`crate::admin`] and act through the same functions as the `/v1` admin API
//! (`admin_api::replay_one`, `replay_many`, `retry_one_outbox`), so a replay from the dashboard is exactly a replay
//! from the API or the CLI. Every state-changing request is a POST carrying the session's CSRF token, checked by
//! [`require_session`] before any handler runs.

mod events;
mod login;
mod orders;
mod render;
mod session;

use events::*;
use login::*;
use orders::*;

pub(crate) use session::Sessions;

use crate::admin::{self, EventQuery, OutboxQuery, ReplayFilter};
use crate::admin_api::{replay_many, replay_one, retry_one_outbox};
use crate::app::{AppState, now_ms};
use crate::auth::{Client, Refusal, Surface};
use crate::error::ApiError;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Extension, Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use payhook_core::event::OrderId;
use payhook_store::{EventSummary, OutboxView, Outcome, Store};
use render::{Frame, Section, badge, csrf_field, time};
use serde::Deserialize;
use session::Session;
use std::net::SocketAddr;
use std::sync::Arc;

/// The largest form the dashboard reads; its forms are a few short fields.
const FORM_LIMIT_BYTES: usize = 16 * 1024;
/// How often the overview reloads itself, in seconds.
const OVERVIEW_REFRESH_SECS: u32 = 15;
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

/// Lets through requests of a live session: a read goes on, a POST only with the session's CSRF token in its form.
/// A read without a session is sent to the login page; a POST without one, or with a missing or wrong token, is
/// refused with 403 and reaches no handler.
async fn require_session<S: Store>(State(state): State<Arc<AppState<S>>>, request: Request, next: Next) -> Response {
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    let Some(session) = state.ui_sessions.get(request.headers(), now_ms()) else {
        if reads {
            return Redirect::to("/ui/login").into_response();
        }
        return UiError::new(StatusCode::FORBIDDEN, "not logged in, or the session expired: log in again")
            .into_response();
    };
    let mut request = if reads {
        request
    } else {
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, FORM_LIMIT_BYTES).await else {
            return UiError::new(StatusCode::PAYLOAD_TOO_LARGE, "the form is larger than the dashboard reads")
                .into_response();
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
    request.extensions_mut().insert(session);
    next.run(request).await
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
    let frame =
        Frame { title, section, csrf: &session.csrf, flash: state.ui_sessions.take_flash(session), refresh_secs };
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

fn source_select<S>(state: &AppState<S>, current: Option<&str>) -> Markup {
    let mut names: Vec<&str> = state.sources.keys().map(String::as_str).collect();
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

// ---- overview ----

async fn overview<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
) -> Result<Response, UiError> {
    let now = now_ms();
    let stats = admin::stats(&*state.store, now).await?;
    let event = |status: Outcome| stats.events.get(status.as_str()).copied().unwrap_or(0);
    let outbox = |status: &str| stats.outbox.by_status.get(status).copied().unwrap_or(0);
    let received: u64 = stats.events.values().sum();
    let cards = [
        ("received", "Received", received, "/ui/events".to_owned()),
        ("processed", "Processed", event(Outcome::Processed), "/ui/events?status=processed".to_owned()),
        ("duplicate", "Duplicates", event(Outcome::Duplicate), "/ui/events?status=duplicate".to_owned()),
        ("deferred", "Deferred", event(Outcome::Deferred), "/ui/events?status=deferred".to_owned()),
        ("dead_lettered", "Dead letters", event(Outcome::DeadLettered), "/ui/dead-letters".to_owned()),
        ("outbox_pending", "Outbox pending", outbox("pending"), "/ui/outbox?status=pending".to_owned()),
        ("outbox_dead", "Outbox dead", outbox("dead"), "/ui/outbox?status=dead".to_owned()),
    ];
    let mut names: Vec<&String> = state.sources.keys().collect();
    names.sort();
    let minutes = state.throughput.last_hour(now);
    let content = html! {
        h1 { "Overview" }
        div.cards {
            @for (id, label, n, href) in &cards {
                a.card href=(href) id={ "count-" (id) } style="text-decoration:none;color:inherit" {
                    div.n { (n) }
                    div.l { (label) }
                }
            }
        }
        p.muted {
            "Stored events and outbox rows. "
            @if let Some(age) = stats.oldest_pending_outbox_age_secs { "Oldest pending outbox row: " (age) " s. " }
            @if let Some(age) = stats.oldest_deferred_event_age_secs { "Oldest deferred event: " (age) " s. " }
            "Reloads every " (OVERVIEW_REFRESH_SECS) " s."
        }
        h2 { "Last hour" }
        div.chart {
            (render::throughput_chart(&minutes))
            div.muted style="font-size:.8rem" {
                span style="color:#2458c6" { "■ deliveries answered 2xx per minute" } " · "
                span style="color:#d9822b" { "— mean latency" } " (this process)"
            }
        }
        h2 { "Deliveries by source since this process started" }
        div.scroll {
            table id="sources" {
                thead { tr {
                    th { "Source" }
                    @for status in STATUSES { th { (status.as_str().replace('_', " ")) } }
                    th { "Refused (signature)" }
                } }
                tbody {
                    @for name in names {
                        @let m = &state.sources[name.as_str()].metrics;
                        tr {
                            td { a href={ "/ui/events?source=" (segment(name)) } { (name) } }
                            @for status in STATUSES { td { (m.outcome_count(status)) } }
                            td { (m.verification_failures()) }
                        }
                    }
                }
            }
        }
        h2 { "Orders by status" }
        div.cards {
            @for (status, n) in &stats.orders {
                div.card { div.n { (n) } div.l { (badge(status)) } }
            }
        }
    };
    Ok(html_page_refreshing(&state, &session, "Overview", Section::Overview, Some(OVERVIEW_REFRESH_SECS), content))
}

// ---- dead letters ----

async fn dead_letters<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Response, UiError> {
    let f = filters(q)?;
    let page = admin::list_dead_letters(&*state.store, &f.event_query()?).await?;
    let (source, event_type, reason) = (set(&f.source), set(&f.event_type), set(&f.reason));
    let content = html! {
        h1 { "Dead letters" }
        form.filters method="get" action="/ui/dead-letters" {
            (source_select(&state, source.as_deref()))
            (text_filter("Type", "type", event_type.as_deref()))
            (text_filter("Reason contains", "reason", reason.as_deref()))
            button type="submit" { "Filter" }
        }
        form method="post" action="/ui/dead-letters/replay" style="margin-bottom:.75rem" {
            (csrf_field(&session.csrf))
            (hidden("source", source.as_deref()))
            (hidden("type", event_type.as_deref()))
            (hidden("reason", reason.as_deref()))
            input type="hidden" name="step" value="preview";
            button type="submit" id="bulk-preview" { "Replay all matching… (dry run first)" }
        }
        (events_table(&page.events, Some(&session.csrf)))
        (older_link("/ui/dead-letters", &f, page.next_cursor, page.partial))
    };
    Ok(html_page(&state, &session, "Dead letters", Section::DeadLetters, content))
}

#[derive(Debug, Deserialize)]
struct BulkForm {
    source: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    reason: Option<String>,
    /// `preview` (a dry run) or `confirm`.
    step: String,
    /// On confirm: at most this many, the count the dry run showed.
    max: Option<u32>,
}

async fn bulk_replay<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    Form(form): Form<BulkForm>,
) -> Result<Response, UiError> {
    let f = Filters { source: form.source, event_type: form.event_type, reason: form.reason, ..Filters::default() };
    let filter = f.replay_filter();
    let back = with_query("/ui/dead-letters", &f.query_string(None));
    if form.step == "confirm" {
        let max = form.max.ok_or_else(|| UiError::new(StatusCode::UNPROCESSABLE_ENTITY, "max is missing"))?;
        let message = match replay_many(&state, &filter, Some(max)).await {
            Ok(report) => {
                let outcomes: Vec<String> =
                    report.outcomes.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k} {n}")).collect();
                format!(
                    "Replayed {} dead letter{}: {}{}",
                    report.matched,
                    if report.matched == 1 { "" } else { "s" },
                    if outcomes.is_empty() { "nothing".to_owned() } else { outcomes.join(", ") },
                    if report.more { ". More match: run it again for the rest." } else { "." }
                )
            }
            Err(e) => format!("Bulk replay refused: {}", e.status_and_message().1),
        };
        state.ui_sessions.set_flash(&session, message);
        return Ok(Redirect::to(&back).into_response());
    }
    let preview = admin::preview_replay(&*state.store, &state.settings, &filter, None).await?;
    let content = html! {
        h1 { "Replay dead letters: dry run" }
        p {
            "Nothing was changed. "
            strong id="dry-run-count" { (preview.matched) }
            " dead letter" @if preview.matched != 1 { "s" } " match"
            @if preview.matched == 1 { "es" }
            @if preview.more { " (the cap of " (preview.max) " per call; more match beyond it)" }
            "."
        }
        @if preview.matched > 0 {
            form method="post" action="/ui/dead-letters/replay" style="margin-bottom:1rem" {
                (csrf_field(&session.csrf))
                (hidden("source", set(&f.source).as_deref()))
                (hidden("type", set(&f.event_type).as_deref()))
                (hidden("reason", set(&f.reason).as_deref()))
                input type="hidden" name="step" value="confirm";
                input type="hidden" name="max" value=(preview.matched);
                button.danger type="submit" id="confirm-replay" { "Replay " (preview.matched) " now" }
                " "
                a href=(back) { "Cancel" }
            }
            h2 { "The first " (preview.sample.len()) }
            (events_table(&preview.sample, None))
        } @else {
            p { a href=(back) { "Back to the dead letters" } }
        }
    };
    Ok(html_page(&state, &session, "Replay dead letters", Section::DeadLetters, content))
}

// ---- outbox ----

async fn outbox<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Response, UiError> {
    let f = filters(q)?;
    let query = OutboxQuery {
        status: set(&f.status),
        kind: set(&f.kind),
        sink: set(&f.sink),
        order_id: set(&f.order_id),
        before: f.before()?,
        ..OutboxQuery::default()
    };
    let page = admin::list_outbox(&*state.store, &query).await?;
    let content = html! {
        h1 { "Outbox" }
        form.filters method="get" action="/ui/outbox" {
            label { "Status"
                select name="status" id="filter-status" {
                    option value="" { "any" }
                    @for s in admin::OUTBOX_STATUSES {
                        option value=(s) selected[query.status.as_deref() == Some(s)] { (s) }
                    }
                }
            }
            (text_filter("Kind", "kind", query.kind.as_deref()))
            (text_filter("Sink", "sink", query.sink.as_deref()))
            (text_filter("Order", "order_id", query.order_id.as_deref()))
            button type="submit" { "Filter" }
        }
        (outbox_table(&page.outbox, &session.csrf))
        (older_link("/ui/outbox", &f, page.next_cursor, page.partial))
    };
    Ok(html_page(&state, &session, "Outbox", Section::Outbox, content))
}

async fn retry_outbox<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    Path(id): Path<i64>,
) -> Response {
    let message = match retry_one_outbox(&state, id).await {
        Ok(row) => format!("Outbox row {id} ({} to {}) is queued again", row.kind, row.sink),
        Err(e) => format!("Not re-queued: {}", e.status_and_message().1),
    };
    state.ui_sessions.set_flash(&session, message);
    Redirect::to("/ui/outbox").into_response()
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
