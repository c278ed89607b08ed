//! The audit trail: who did what, newest first, with its filters (admin only, as `GET /v1/audit`).

use super::*;

pub(super) async fn audit<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Response, UiError> {
    let f = filters(q)?;
    let query = admin::AuditQuery {
        actor: set(&f.actor),
        action: set(&f.action),
        before: f.before()?,
        ..admin::AuditQuery::default()
    };
    let page = admin::list_audit(&*state.store, &query).await?;
    let content = html! {
        h1 { "Audit trail" }
        form.filters method="get" action="/ui/audit" {
            (text_filter("Actor", "actor", query.actor.as_deref()))
            label { "Action"
                select name="action" id="filter-action" {
                    option value="" { "any" }
                    @for a in AuditAction::ALL {
                        option value=(a.as_str()) selected[query.action.as_deref() == Some(a.as_str())] { (a.as_str()) }
                    }
                }
            }
            button type="submit" { "Filter" }
        }
        div.scroll {
            table.audit {
                thead { tr { th { "When" } th { "Actor" } th.hide-narrow { "Address" } th { "Action" } th { "Target" } th { "Outcome" } th.hide-narrow { "Detail" } } }
                tbody {
                    @if page.entries.is_empty() {
                        tr { td colspan="7" .muted { "Nothing matches." } }
                    }
                    @for r in &page.entries {
                        tr data-audit-id=(r.id) {
                            td.mono { (time(r.entry.at_ms)) }
                            td { (r.entry.actor) }
                            td.hide-narrow.mono { (r.entry.address.as_deref().unwrap_or("—")) }
                            td { (r.entry.action.as_str()) }
                            td.mono.wrap { (r.entry.target.as_deref().unwrap_or("—")) }
                            td { (badge(&r.entry.outcome)) }
                            td.hide-narrow.wrap.mono { @if !r.entry.detail.is_null() { (r.entry.detail.to_string()) } }
                        }
                    }
                }
            }
        }
        (older_link("/ui/audit", &f, page.next_cursor, page.partial))
    };
    Ok(html_page(&state, &session, "Audit", Section::Audit, content))
}
