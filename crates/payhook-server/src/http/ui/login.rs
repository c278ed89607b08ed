//! The login page, logging in with a token (through the tokens' gate, throttled per client address) and logging
//! out.

use super::*;
use crate::service::audit;
use payhook_store::AuditAction;

#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
}

pub(super) fn login_form(error: Option<&str>) -> Markup {
    render::bare(
        "Log in",
        html! {
            div.login {
                h1 { "payhook" }
                @if let Some(error) = error {
                    div.error id="error" { (error) }
                }
                form method="post" action="/ui/login" {
                    label { "API token"
                        input type="password" name="token" id="token" autocomplete="current-password" required;
                    }
                    button type="submit" id="login" { "Log in" }
                }
                p.muted { "Any token /v1 takes (server.api_token_env, server.tokens); the dashboard shows what its scope allows." }
            }
        },
    )
}

pub(super) async fn login_page<S: Store>(State(state): State<Arc<AppState<S>>>, headers: HeaderMap) -> Response {
    if state.ui_sessions.get(&headers, state.clock.now_ms()).is_some() {
        return Redirect::to("/ui").into_response();
    }
    Html(login_form(None).into_string()).into_response()
}

pub(super) async fn login<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    connect: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let live = state.live();
    // Without a configured token the dashboard's login is closed, as /v1 is (an empty form never gets in).
    if live.credentials.token_names().next().is_none() {
        let page =
            login_form(Some("No token is configured (server.api_token_env, server.tokens), so logging in is closed."));
        return (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response();
    }
    let peer = connect.map(|Extension(ConnectInfo(peer))| peer);
    let client = Client::of(peer, &headers, &state.settings.auth.trusted_proxies);
    let now_ms = state.clock.now_ms();
    let principal = match state.auth.authenticate(Surface::Ui, client, &live.credentials, Some(&form.token), now_ms) {
        Ok(principal) => principal,
        Err(Refusal::Throttled { retry_after_secs }) => {
            let (status, message) = ApiError::TooManyAuthFailures { retry_after_secs }.status_and_message();
            // "too many failed attempts …; retry in 6 s" as a sentence.
            let sentence = format!("{}{}.", message[..1].to_uppercase(), &message[1..]);
            let page = login_form(Some(&sentence));
            let mut response = (status, Html(page.into_string())).into_response();
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            return response;
        }
        Err(Refusal::Expired { name }) => {
            let page = login_form(Some(&format!("The token {name} has expired.")));
            return (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response();
        }
        Err(Refusal::Missing | Refusal::Wrong) => {
            return (StatusCode::UNAUTHORIZED, Html(login_form(Some("Wrong token.")).into_string())).into_response();
        }
    };
    let entry = Actor::of(&principal).entry(AuditAction::Login, None, "ok", serde_json::Value::Null, now_ms);
    let _ = audit::record(&*state.store, entry).await;
    let mut response = Redirect::to("/ui").into_response();
    match open_session(&state, principal, &headers, now_ms) {
        Ok((_, cookie)) => {
            response.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        Err(refused) => return refused.into_response(),
    }
    response
}

pub(super) async fn logout<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
) -> Response {
    state.ui_sessions.remove(&session);
    let entry = Actor::of(&session.principal).entry(
        AuditAction::Logout,
        None,
        "ok",
        serde_json::Value::Null,
        state.clock.now_ms(),
    );
    let _ = audit::record(&*state.store, entry).await;
    let mut response = Redirect::to("/ui/login").into_response();
    if let Ok(value) = HeaderValue::from_str(&session::clear_cookie(session::is_https(&headers))) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
