//! Events: the list with its filters, and one event's page (its body as received, headers, attempts, effects).

use super::*;
use payhook_store::OutboxStatus;

pub(super) fn events_table(events: &[EventSummary], replay_csrf: Option<&str>) -> Markup {
    html! {
        div.scroll {
            table.events {
                thead { tr {
                    th { "Received (UTC)" } th { "Source" } th { "Event" } th.hide-narrow { "Type" } th { "Status" }
                    th.hide-narrow { "Attempts" } th { "Reason" }
                    @if replay_csrf.is_some() { th {} }
                } }
                tbody {
                    @if events.is_empty() {
                        tr { td colspan="8" .muted { "Nothing matches." } }
                    }
                    @for e in events {
                        tr data-event-id=(e.event_id) {
                            td.mono { (time(e.received_at_ms)) }
                            td { (e.source) }
                            td.mono.wrap { a href=(event_href(&e.source, &e.event_id)) { (e.event_id) } }
                            td.hide-narrow { (e.event_type.as_deref().unwrap_or("—")) }
                            td { (badge(e.status.as_str())) }
                            td.hide-narrow { (e.attempts) }
                            td.wrap { (e.reason.as_deref().unwrap_or("")) }
                            @if let Some(csrf) = replay_csrf {
                                td {
                                    form.inline method="post" action={ (event_href(&e.source, &e.event_id)) "/replay" } {
                                        (csrf_field(csrf))
                                        button.quiet type="submit" { "Replay" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The link to the next page. A page the scan bound stopped short (`partial`) says so, so that few rows, or none,
/// are not taken for the end of the list.
pub(super) fn older_link(path: &str, f: &Filters, next_cursor: Option<i64>, partial: bool) -> Markup {
    html! {
        @if let Some(cursor) = next_cursor {
            @if partial {
                p.muted id="partial" {
                    "This page stopped after the most rows one page examines (storage.list_scan_rows); older rows may \
                     match."
                }
            }
            p { a href=(with_query(path, &f.query_string(Some(cursor)))) id="older" { "Older →" } }
        }
    }
}

pub(super) async fn events<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Response, UiError> {
    let f = filters(q)?;
    let page = admin::list_events(&*state.store, &f.event_query()?).await?;
    let status = set(&f.status);
    let content = html! {
        h1 { "Events" }
        form.filters method="get" action="/ui/events" {
            (source_select(&state, set(&f.source).as_deref()))
            label { "Status"
                select name="status" id="filter-status" {
                    option value="" { "any" }
                    @for s in STATUSES {
                        option value=(s.as_str()) selected[status.as_deref() == Some(s.as_str())] { (s.as_str()) }
                    }
                }
            }
            (text_filter("Type", "type", set(&f.event_type).as_deref()))
            button type="submit" { "Filter" }
        }
        (events_table(&page.events, None))
        (older_link("/ui/events", &f, page.next_cursor, page.partial))
    };
    Ok(html_page(&state, &session, "Events", Section::Events, content))
}

/// The rows, with a retry button on dead ones when `retry_csrf` is given (the caller may operate).
pub(super) fn outbox_table(rows: &[OutboxView], retry_csrf: Option<&str>) -> Markup {
    html! {
        div.scroll {
            table.outbox {
                thead { tr {
                    th { "Id" } th { "Kind" } th { "Sink" } th { "Status" } th.hide-narrow { "Attempts" }
                    th.hide-narrow { "Next attempt" } th { "Last error" } th { "Order / event" } th {}
                } }
                tbody {
                    @if rows.is_empty() {
                        tr { td colspan="9" .muted { "No outbox rows." } }
                    }
                    @for r in rows {
                        tr data-outbox-id=(r.id) {
                            td.mono { (r.id) }
                            td { (r.kind) }
                            td { @if let Some(sink) = &r.sink { (sink) } @else { span.muted { "none" } } }
                            td { (badge(r.status.as_str())) }
                            td.hide-narrow { (r.attempts) }
                            td.hide-narrow.mono { (r.next_attempt_at_ms.map(time).unwrap_or_default()) }
                            td.wrap {
                                @if let Some(s) = r.last_status { "HTTP " (s) " " }
                                // Rows recorded before errors were redacted at the source may hold a sink's URL.
                                (crate::base::secret_url::redact_urls(r.last_error.as_deref().unwrap_or("")).as_ref())
                            }
                            td.wrap {
                                @if let Some(o) = &r.order_id { a href=(order_href(o)) { (o) } br; }
                                @if let (Some(s), Some(e)) = (&r.source, &r.event_id) {
                                    a.mono href=(event_href(s, e)) { (e) }
                                }
                            }
                            td {
                                @if let (OutboxStatus::Dead, Some(csrf)) = (r.status, retry_csrf) {
                                    form.inline method="post" action={ "/ui/outbox/" (r.id) "/retry" } {
                                        (csrf_field(csrf))
                                        button.quiet type="submit" { "Retry" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// How the event page shows the body: as received (the default) or re-indented.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum BodyView {
    #[default]
    Raw,
    Pretty,
}

/// The event page's query string.
#[derive(Debug, Default, Deserialize)]
pub(super) struct EventPageQuery {
    #[serde(default)]
    view: BodyView,
}

pub(super) async fn event<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    Path((source, event_id)): Path<(String, String)>,
    q: Result<Query<EventPageQuery>, QueryRejection>,
) -> Result<Response, UiError> {
    let view = q.map(|Query(q)| q.view).map_err(|e| UiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.body_text()))?;
    let d = admin::event_detail(&*state.store, &source, &event_id).await?;
    let raw = d.body_bytes();
    let pretty = match view {
        BodyView::Pretty => d.body.as_deref().and_then(render::pretty_json),
        BodyView::Raw => None,
    };
    let here = event_href(&d.source, &d.event_id);
    // With trace export on: the delivery's trace id, while this process still holds it (docs/tracing.md).
    let trace_id =
        crate::base::trace::recalled(&format!("event:{}:{}", d.source, d.event_id)).map(|sc| sc.trace_id().to_string());
    let content = html! {
        h1 { "Event " span.mono { (d.event_id) } }
        @if d.status == Outcome::DeadLettered && session.may(Scope::Operate) {
            form method="post" action={ (event_href(&d.source, &d.event_id)) "/replay" } style="margin-bottom:1rem" {
                (csrf_field(&session.csrf))
                button type="submit" id="replay" { "Replay this dead letter" }
            }
        }
        dl.kv {
            dt { "Status" } dd id="event-status" { (badge(d.status.as_str())) }
            dt { "Reason" } dd { (d.reason.as_deref().unwrap_or("—")) }
            dt { "Source" } dd { a href={ "/ui/events?source=" (segment(&d.source)) } { (d.source) } }
            dt { "Type" } dd { (d.event_type.as_deref().unwrap_or("— (not parsed)")) }
            dt { "Business key" } dd.mono { (d.business_key.as_deref().unwrap_or("—")) }
            dt { "Received (UTC)" } dd { (time(d.received_at_ms)) }
            dt { "Verification" } dd id="verification" { "verified: " (d.verification) }
            dt { "Attempts" } dd { (d.attempts)
                @if let Some(at) = d.next_attempt_at_ms { " · next at " (time(at)) " UTC" }
            }
            @if let Some(effect) = &d.effect {
                dt { "Effect" } dd.mono { (serde_json::to_string(effect).unwrap_or_default()) }
            }
            @if let Some(trace_id) = &trace_id {
                dt { "Trace" } dd.mono id="trace-id" { (trace_id) }
            }
        }
        h2 { "Attempts" }
        div.scroll { table {
            thead { tr { th { "#" } th { "At (UTC)" } th { "Outcome" } th { "Detail" } } }
            tbody {
                @if d.attempt_log.is_empty() { tr { td colspan="4" .muted { "No attempt left it waiting." } } }
                @for a in &d.attempt_log {
                    tr { td { (a.attempt) } td.mono { (time(a.at_ms)) } td { (badge(a.outcome.as_str())) }
                         td.wrap { (a.detail.as_deref().unwrap_or("")) } }
                }
            }
        } }
        h2 { "Ledger changes" }
        div.scroll { table {
            thead { tr { th { "Order" } th { "From" } th { "To" } th { "At (UTC)" } } }
            tbody {
                @if d.changes.is_empty() { tr { td colspan="4" .muted { "No order changed." } } }
                @for c in &d.changes {
                    tr {
                        td { @if let Some(order) = d.effect.as_ref().and_then(order_of) {
                            a href=(order_href(&order)) { (order) } } @else { "—" } }
                        td { (badge(c.from.as_str())) } td { (badge(c.to.as_str())) } td.mono { (time(c.at_ms)) }
                    }
                }
            }
        } }
        @if !d.billing_changes.is_empty() {
            h2 { "Billing changes" }
            div.scroll { table {
                thead { tr { th { "Object" } th { "Id" } th { "From" } th { "To" } th { "At (UTC)" } } }
                tbody {
                    @for c in &d.billing_changes {
                        tr {
                            td { (c.object) } td.mono { (c.object_id) }
                            td { @if let Some(from) = &c.from { (badge(from)) } @else { span.muted { "new" } } }
                            td { (badge(&c.to)) } td.mono { (time(c.at_ms)) }
                        }
                    }
                }
            } }
        }
        h2 { "Outbox rows" }
        (outbox_table(&d.outbox, session.may(Scope::Operate).then_some(session.csrf.as_str())))
        h2 { "Headers" }
        div.scroll { table id="headers" {
            tbody {
                @if d.headers.is_empty() { tr { td .muted { "No headers kept (pruned, or none were sent)." } } }
                @for (name, values) in d.headers.iter() {
                    @for (i, value) in values.iter().enumerate() {
                        tr {
                            td.mono { (name) @if values.len() > 1 { span.muted { " (" (i + 1) " of " (values.len()) ")" } } }
                            td.mono.wrap { (value) }
                        }
                    }
                }
            }
        } }
        div.tabs {
            h2 { "Body" }
            span.muted { (raw.len()) " bytes" @if d.body.is_none() { ", not UTF-8" } }
            @if view == BodyView::Raw {
                strong { "as received" } a href={ (here) "?view=pretty" } id="body-pretty" { "pretty-printed" }
            } @else {
                a href=(here) id="body-raw" { "as received" } strong { "pretty-printed" }
            }
        }
        @if let Some(pretty) = &pretty {
            p.muted { "Re-indented: only the whitespace between tokens differs from what was received." }
            pre id="pretty-body" { (pretty) }
        } @else {
            @if view == BodyView::Pretty {
                p.muted { "Not JSON, so shown as received." }
            }
            pre id="raw-body" { (render::raw_bytes(&raw)) }
        }
    };
    Ok(html_page(&state, &session, &format!("Event {}", d.event_id), Section::Events, content))
}

/// The order an effect concerns, if it concerns one.
pub(super) fn order_of(effect: &payhook_core::event::Effect) -> Option<String> {
    serde_json::to_value(effect).ok()?.get("order_id")?.as_str().map(str::to_owned)
}

pub(super) async fn replay<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    Path((source, event_id)): Path<(String, String)>,
) -> Response {
    let back = event_href(&source, &event_id);
    let message = match replay_one(&state, &source, &event_id, &Actor::of(&session.principal)).await {
        Ok(report) => {
            let mut m = format!("Replayed {source}/{event_id}: {}", report.status.as_str());
            if let Some(detail) = &report.detail {
                m.push_str(&format!(" ({detail})"));
            }
            if let Some(id) = &report.replayed_as {
                m.push_str(&format!("; it now lives under {id}"));
            }
            m
        }
        Err(e) => format!("Not replayed: {}", ApiError::from(e).status_and_message().1),
    };
    state.ui_sessions.set_flash(&session, message);
    Redirect::to(&back).into_response()
}
