//! The overview: counts of stored events and outbox rows, the last hour's throughput, deliveries by source
//! and orders by status; it reloads itself.

use super::*;

/// How often the overview reloads itself, in seconds.
const OVERVIEW_REFRESH_SECS: u32 = 15;

pub(super) async fn overview<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
) -> Result<Response, UiError> {
    let now = state.clock.now_ms();
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
    let live = state.live();
    let mut names: Vec<&String> = live.sources.keys().collect();
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
                        @let m = &live.sources[name.as_str()].metrics;
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
