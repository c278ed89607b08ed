//! Least privilege: every route answers as its scope says (walked from the route table, the API's and the
//! dashboard's alike), tokens added by a reload work at once, expired and removed ones are refused, and a trusted
//! proxy's identity header opens what its rule gives and nothing from anyone else.

use crate::helpers::{API_TOKEN, TestApp, read_json};
use crate::ui::{login_with, plain_client, post_form};
use payhook_server::settings::{IdentityMatch, IdentityRule, NamedToken};
use payhook_server::{IpRange, Need, ROUTES, Reloaded, Scope, Settings};
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use sha2::{Digest, Sha256};

const READ_TOKEN: &str = "read-token-0123456789abcdefghij";
const OPERATE_TOKEN: &str = "operate-token-0123456789abcdefghij";
const ADMIN_TOKEN: &str = "admin-token-0123456789abcdefghij";

fn named(name: &str, scope: Scope, token: &str, not_after_ms: Option<i64>) -> NamedToken {
    NamedToken { name: name.into(), scope, sha256: Sha256::digest(token.as_bytes()).into(), not_after_ms }
}

fn three_tokens(settings: &mut Settings) {
    settings.access.tokens = vec![
        named("grafana", Scope::Read, READ_TOKEN, None),
        named("oncall", Scope::Operate, OPERATE_TOKEN, None),
        named("platform", Scope::Admin, ADMIN_TOKEN, None),
    ];
    // The walk fails on purpose many times from one address: room for it in the throttle.
    settings.auth.failure_burst = 10_000;
}

fn token_of(scope: Scope) -> &'static str {
    match scope {
        Scope::Read => READ_TOKEN,
        Scope::Operate => OPERATE_TOKEN,
        Scope::Admin => ADMIN_TOKEN,
    }
}

fn url_of(path: &str) -> String {
    path.replace("{source}", "payments")
        .replace("{event_id}", "evt_none")
        .replace("/outbox/{id}", "/outbox/1")
        .replace("{id}", "none")
}

#[tokio::test]
async fn every_api_route_refuses_no_token_with_401_a_lower_scope_with_403_and_lets_its_scope_through() {
    let app = TestApp::spawn_with(|s, _| three_tokens(s)).await;
    let mut walked = 0;
    for route in ROUTES.iter().filter(|r| !r.path.starts_with("/ui")) {
        let Need::Scope(needed) = route.need else { continue };
        let method = reqwest::Method::from_bytes(route.method.as_bytes()).unwrap();
        let url = app.url(&url_of(route.path));
        let what = format!("{} {}", route.method, route.path);

        let bare = read_json(app.client.request(method.clone(), &url).send().await.unwrap()).await;
        assert_eq!(bare.status, StatusCode::UNAUTHORIZED, "{what} without a token: {}", bare.json);
        for held in Scope::ALL {
            let resp = app.client.request(method.clone(), &url).bearer_auth(token_of(held)).send().await.unwrap();
            if held >= needed {
                // Anything but a refusal (a metrics scrape is text, an unknown id a 404, an empty body a 422).
                let status = resp.status();
                assert!(
                    ![StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN].contains(&status),
                    "{what} with {held} answered {status}: {}",
                    resp.text().await.unwrap()
                );
                continue;
            }
            let reply = read_json(resp).await;
            {
                assert_eq!(reply.status, StatusCode::FORBIDDEN, "{what} with {held}: {}", reply.json);
                assert_eq!(reply.json["error"], "insufficient_scope", "{what}");
                assert_eq!(reply.json["scope_needed"], needed.as_str(), "{what}");
                assert_eq!(reply.json["scope_held"], held.as_str(), "{what}");
                let challenge = reply.headers["www-authenticate"].to_str().unwrap();
                assert!(challenge.contains(&format!("scope=\"{needed}\"")), "{what}: {challenge}");
            }
        }
        walked += 1;
    }
    assert!(walked >= 15, "only {walked} scoped API routes");
    // The api_token is an admin token.
    let reply = read_json(app.client.get(app.url("/v1/audit")).bearer_auth(API_TOKEN).send().await.unwrap()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json);
}

#[tokio::test]
async fn every_dashboard_route_sends_no_session_to_login_refuses_a_lower_scope_with_403_and_lets_its_scope_through() {
    let app = TestApp::spawn_with(|s, _| three_tokens(s)).await;
    let client = plain_client();
    let mut walked = 0;
    for route in ROUTES.iter().filter(|r| r.path.starts_with("/ui")) {
        let Need::Scope(needed) = route.need else { continue };
        let path = url_of(route.path);
        let what = format!("{} {}", route.method, route.path);
        let post = route.method == "POST";
        // Without a session: a page goes to the login form, a form is not authenticated.
        if post {
            let resp = post_form(&app, &path, None, &[]).await;
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{what}");
        } else {
            let resp = client.get(app.url(&path)).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{what}");
            assert_eq!(resp.headers()[LOCATION], "/ui/login", "{what}");
        }
        for held in Scope::ALL {
            // A fresh session each time: the walk includes logging out.
            let session = login_with(&app, token_of(held)).await;
            let resp = if post {
                let form = [("csrf", session.csrf.as_str()), ("step", "preview")];
                post_form(&app, &path, Some(&session.cookie), &form).await
            } else {
                client.get(app.url(&path)).header(COOKIE, &session.cookie).send().await.unwrap()
            };
            let status = resp.status();
            let page = resp.text().await.unwrap();
            if held < needed {
                assert_eq!(status, StatusCode::FORBIDDEN, "{what} with {held}: {page}");
                assert!(page.contains(&format!("needs the {needed} scope")), "{what}: {page}");
            } else {
                assert!(
                    ![StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN].contains(&status),
                    "{what} with {held}: {status} {page}"
                );
            }
        }
        walked += 1;
    }
    assert!(walked >= 12, "only {walked} scoped dashboard routes");
}

#[tokio::test]
async fn the_dashboard_shows_a_read_login_no_form_it_may_not_send() {
    let app = TestApp::spawn_with(|s, _| three_tokens(s)).await;
    let page = |token: &'static str, path: &'static str| {
        let app = &app;
        async move {
            let session = login_with(app, token).await;
            let resp = plain_client().get(app.url(path)).header(COOKIE, &session.cookie).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            resp.text().await.unwrap()
        }
    };
    let read = page(READ_TOKEN, "/ui/dead-letters").await;
    assert!(read.contains("grafana · read"), "{read}");
    assert!(!read.contains("bulk-preview") && !read.contains("/ui/audit"), "{read}");
    let operate = page(OPERATE_TOKEN, "/ui/dead-letters").await;
    assert!(operate.contains("bulk-preview") && !operate.contains("/ui/audit"), "{operate}");
    let admin = page(ADMIN_TOKEN, "/ui/dead-letters").await;
    assert!(admin.contains("bulk-preview") && admin.contains("/ui/audit"), "{admin}");
}

fn reloaded(settings: Settings) -> Reloaded {
    Reloaded { settings, changed_sources: Vec::new(), changed_sinks: Vec::new(), alerts_changed: false }
}

#[tokio::test]
async fn a_token_added_by_reload_works_at_once_and_an_expired_or_removed_one_is_refused_with_its_reason() {
    let app = TestApp::spawn().await;
    let events = |token: &'static str| {
        let app = &app;
        async move { read_json(app.client.get(app.url("/v1/events")).bearer_auth(token).send().await.unwrap()).await }
    };
    assert_eq!(events(READ_TOKEN).await.status, StatusCode::UNAUTHORIZED);

    let now = app.clock.now_ms();
    let mut settings = app.settings.clone();
    settings.access.tokens = vec![named("grafana", Scope::Read, READ_TOKEN, Some(now + 60_000))];
    let report = app.running.state.apply(reloaded(settings.clone()));
    assert_eq!(report.tokens_added, ["grafana"]);
    assert_eq!(events(READ_TOKEN).await.status, StatusCode::OK, "a token added by reload works at once");
    let session = login_with(&app, READ_TOKEN).await;
    let overview = |cookie: String| {
        let app = &app;
        async move { plain_client().get(app.url("/ui")).header(COOKIE, cookie).send().await.unwrap().status() }
    };
    assert_eq!(overview(session.cookie.clone()).await, StatusCode::OK);

    // Past its not_after: 401 with the reason, and its dashboard session ends with it.
    app.clock.advance(60_000);
    let expired = events(READ_TOKEN).await;
    assert_eq!(expired.status, StatusCode::UNAUTHORIZED);
    assert_eq!(expired.json["error"], "token_expired", "{}", expired.json);
    assert!(expired.json["message"].as_str().unwrap().contains("grafana"), "{}", expired.json);
    assert_eq!(overview(session.cookie.clone()).await, StatusCode::SEE_OTHER);

    // Renewed, then removed by the next reload: refused at once, its session too.
    settings.access.tokens = vec![named("grafana", Scope::Operate, READ_TOKEN, None)];
    let report = app.running.state.apply(reloaded(settings.clone()));
    assert_eq!(report.tokens_changed, ["grafana"]);
    let session = login_with(&app, READ_TOKEN).await;
    assert_eq!(overview(session.cookie.clone()).await, StatusCode::OK);
    settings.access.tokens.clear();
    let report = app.running.state.apply(reloaded(settings));
    assert_eq!(report.tokens_removed, ["grafana"]);
    assert_eq!(events(READ_TOKEN).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(overview(session.cookie).await, StatusCode::SEE_OTHER);
    assert_eq!(events(API_TOKEN).await.status, StatusCode::OK, "the api_token stays");
}

fn with_identities(settings: &mut Settings, proxies: &str) {
    settings.auth.trusted_proxies = vec![IpRange::parse(proxies).unwrap()];
    settings.access.identity_header = Some("X-Forwarded-Email".into());
    settings.access.identities = vec![
        IdentityRule { matches: IdentityMatch::Domain("example.com".into()), scope: Scope::Read },
        IdentityRule { matches: IdentityMatch::Exact("oncall@example.com".into()), scope: Scope::Operate },
    ];
}

#[tokio::test]
async fn a_trusted_proxys_identity_holds_the_scope_its_rule_gives_and_opens_a_dashboard_session() {
    let app = TestApp::spawn_with(|s, _| with_identities(s, "127.0.0.1")).await;
    let as_identity = |method: reqwest::Method, path: &'static str, who: &'static str| {
        let app = &app;
        async move {
            let req = app.client.request(method, app.url(path)).header("X-Forwarded-Email", who);
            read_json(req.send().await.unwrap()).await
        }
    };
    use reqwest::Method;
    assert_eq!(as_identity(Method::GET, "/v1/events", "ann@example.com").await.status, StatusCode::OK);
    let replay = as_identity(Method::POST, "/v1/dead-letters/replay", "ann@example.com").await;
    assert_eq!((replay.status, replay.json["scope_needed"].as_str()), (StatusCode::FORBIDDEN, Some("operate")));
    let replay = as_identity(Method::POST, "/v1/dead-letters/replay", "oncall@example.com").await;
    assert!(![StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN].contains(&replay.status), "{}", replay.json);
    let stranger = as_identity(Method::GET, "/v1/events", "eve@example.org").await;
    assert_eq!(stranger.status, StatusCode::FORBIDDEN, "{}", stranger.json);

    let resp = plain_client().get(app.url("/ui/events")).header("X-Forwarded-Email", "ann@example.com").send().await;
    let resp = resp.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().contains_key(SET_COOKIE), "a session opens for the identity");
    assert!(resp.text().await.unwrap().contains("ann@example.com · read"));
}

#[tokio::test]
async fn an_identity_header_from_a_peer_that_is_not_a_trusted_proxy_is_ignored_and_counted() {
    let app = TestApp::spawn_with(|s, _| with_identities(s, "10.0.0.0/8")).await;
    let req = app.client.get(app.url("/v1/events")).header("X-Forwarded-Email", "oncall@example.com");
    assert_eq!(read_json(req.send().await.unwrap()).await.status, StatusCode::UNAUTHORIZED);
    let resp = plain_client().get(app.url("/ui")).header("X-Forwarded-Email", "oncall@example.com").send().await;
    assert_eq!(resp.unwrap().status(), StatusCode::SEE_OTHER, "to the login form");
    let metrics = app.client.get(app.url("/metrics")).bearer_auth(API_TOKEN).send().await.unwrap().text().await;
    assert!(metrics.unwrap().contains("payhook_auth_identity_ignored_total 2"));
}
