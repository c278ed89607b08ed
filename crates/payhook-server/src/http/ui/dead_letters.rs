//! Dead letters: the list with its filters, and the bulk replay of those matching (a dry run first, then a
//! confirmation bounded by the count the dry run showed).

use super::*;

pub(super) async fn dead_letters<S: Store>(
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
        @if session.may(Scope::Operate) { form method="post" action="/ui/dead-letters/replay" style="margin-bottom:.75rem" {
            (csrf_field(&session.csrf))
            (hidden("source", source.as_deref()))
            (hidden("type", event_type.as_deref()))
            (hidden("reason", reason.as_deref()))
            input type="hidden" name="step" value="preview";
            button type="submit" id="bulk-preview" { "Replay all matching… (dry run first)" }
        } }
        (events_table(&page.events, session.may(Scope::Operate).then_some(session.csrf.as_str())))
        (older_link("/ui/dead-letters", &f, page.next_cursor, page.partial))
    };
    Ok(html_page(&state, &session, "Dead letters", Section::DeadLetters, content))
}

#[derive(Debug, Deserialize)]
pub(super) struct BulkForm {
    source: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    reason: Option<String>,
    /// `preview` (a dry run) or `confirm`.
    step: String,
    /// On confirm: at most this many, the count the dry run showed.
    max: Option<u32>,
}

pub(super) async fn bulk_replay<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    Form(form): Form<BulkForm>,
) -> Result<Response, UiError> {
    let f = Filters { source: form.source, event_type: form.event_type, reason: form.reason, ..Filters::default() };
    let filter = f.replay_filter();
    let back = with_query("/ui/dead-letters", &f.query_string(None));
    if form.step == "confirm" {
        let max = form.max.ok_or_else(|| UiError::new(StatusCode::UNPROCESSABLE_ENTITY, "max is missing"))?;
        let message = match replay_many(&state, &filter, Some(max), &Actor::of(&session.principal)).await {
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
            Err(e) => format!("Bulk replay refused: {}", ApiError::from(e).status_and_message().1),
        };
        state.ui_sessions.set_flash(&session, message);
        return Ok(Redirect::to(&back).into_response());
    }
    let preview = admin::preview_replay(&*state.store, &state.live().settings, &filter, None).await?;
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
