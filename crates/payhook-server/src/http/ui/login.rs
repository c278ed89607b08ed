//! The login page, logging in (through the API token's gate, throttled per client address) and logging out.

use super::*;

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
                p.muted { "The token is the one /v1 takes (server.api_token_env)." }
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
    // An empty token would let an empty form in: without a configured token the dashboard is closed, as /v1 is.
    let Some(expected) = state.settings.api_token.as_ref().filter(|t| !t.expose().trim().is_empty()) else {
        let page = login_form(Some("No API token is configured (server.api_token_env), so the dashboard is closed."));
        return (StatusCode::UNAUTHORIZED, Html(page.into_string())).into_response();
    };
    let peer = connect.map(|Extension(ConnectInfo(peer))| peer);
    let client = Client::of(peer, &headers, &state.settings.auth.trusted_proxies);
    match state.auth.authenticate(Surface::Ui, client, expected, Some(&form.token), state.clock.now_ms()) {
        Ok(()) => {}
        Err(Refusal::Throttled { retry_after_secs }) => {
            let (status, message) = ApiError::TooManyAuthFailures { retry_after_secs }.status_and_message();
            // "too many failed attempts …; retry in 6 s" as a sentence.
            let sentence = format!("{}{}.", message[..1].to_uppercase(), &message[1..]);
            let page = login_form(Some(&sentence));
            let mut response = (status, Html(page.into_string())).into_response();
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            return response;
        }
        Err(Refusal::Missing | Refusal::Wrong) => {
            return (StatusCode::UNAUTHORIZED, Html(login_form(Some("Wrong token.")).into_string())).into_response();
        }
    }
    let new = match state.ui_sessions.create(state.clock.now_ms()) {
        Ok(new) => new,
        Err(e) => {
            tracing::error!(error = %e, "no randomness for a dashboard session");
            return UiError::new(StatusCode::SERVICE_UNAVAILABLE, "could not open a session; try again")
                .into_response();
        }
    };
    let cookie = session::set_cookie(&new.cookie_value, session::is_https(&headers));
    let mut response = Redirect::to("/ui").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

pub(super) async fn logout<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
) -> Response {
    state.ui_sessions.remove(&session);
    let mut response = Redirect::to("/ui/login").into_response();
    if let Ok(value) = HeaderValue::from_str(&session::clear_cookie(session::is_https(&headers))) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
