//! The outbox: rows with their filters, and re-queueing a dead row.

use super::*;

pub(super) async fn outbox<S: Store>(
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
        (outbox_table(&page.outbox, session.may(Scope::Operate).then_some(session.csrf.as_str())))
        (older_link("/ui/outbox", &f, page.next_cursor, page.partial))
    };
    Ok(html_page(&state, &session, "Outbox", Section::Outbox, content))
}

pub(super) async fn retry_outbox<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    Path(id): Path<i64>,
) -> Response {
    let message = match retry_one_outbox(&state, id, &Actor::of(&session.principal)).await {
        Ok(row) => {
            format!("Outbox row {id} ({} to {}) is queued again", row.kind, row.sink.as_deref().unwrap_or("no sink"))
        }
        Err(e) => format!("Not re-queued: {}", ApiError::from(e).status_and_message().1),
    };
    state.ui_sessions.set_flash(&session, message);
    Redirect::to("/ui/outbox").into_response()
}
