//! The dashboard under `/ui`: its session and CSRF rules over plain HTTP, and an operator's walk through it in
//! headless Chromium (skipped, saying why, when chromedriver is not installed and `PAYHOOK_TEST_BROWSER` is unset).

use crate::helpers::{API_TOKEN, TestApp, event};
use crate::webdriver::{Browser, ChromeDriver, chromedriver_path};
use payhook_core::event::OrderAction::Pay;
use payhook_core::retry::RetryPolicy;
use payhook_store::Outcome;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use std::path::PathBuf;

/// A payhook whose retry budget is two attempts, with one dead letter: a payment for `ord_late`, which was never
/// registered.
async fn app_with_a_dead_letter() -> TestApp {
    let app = TestApp::spawn_with(|_, options| {
        options.retry = RetryPolicy { base_ms: 1, factor: 1, cap_ms: 1, jitter: 0.0, max_attempts: 2 };
    })
    .await;
    let (status, body) = app.deliver("payments", &event("evt_late", Pay, "ord_late", 1999)).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("deferred")), "{body}");
    app.running.worker.run_until_idle(app.clock.advance(60_000)).await.unwrap();
    assert_eq!(app.event("payments", "evt_late").await.unwrap().status, Outcome::DeadLettered);
    app
}

/// A client that shows redirects instead of following them, and keeps no cookies.
pub(crate) fn plain_client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// The fields of a form.
type Form<'a> = Vec<(&'a str, &'a str)>;

/// A logged-in session: its cookie (`name=value`) and its CSRF token.
pub(crate) struct Login {
    pub(crate) cookie: String,
    pub(crate) csrf: String,
}

pub(crate) async fn login(app: &TestApp) -> Login {
    login_with(app, API_TOKEN).await
}

/// Logs in to the dashboard with `token`: the session's cookie and CSRF token.
pub(crate) async fn login_with(app: &TestApp, token: &str) -> Login {
    let client = plain_client();
    let resp = client.post(app.url("/ui/login")).form(&[("token", token)]).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[LOCATION], "/ui");
    let set_cookie = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let overview = client.get(app.url("/ui")).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(overview.status(), StatusCode::OK);
    let html = overview.text().await.unwrap();
    let csrf = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no CSRF field in {html}"))
        .to_owned();
    Login { cookie, csrf }
}

pub(crate) async fn get(app: &TestApp, path: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut req = plain_client().get(app.url(path));
    if let Some(cookie) = cookie {
        req = req.header(COOKIE, cookie);
    }
    req.send().await.unwrap()
}

pub(crate) async fn post_form(
    app: &TestApp,
    path: &str,
    cookie: Option<&str>,
    form: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = plain_client().post(app.url(path)).form(form);
    if let Some(cookie) = cookie {
        req = req.header(COOKIE, cookie);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn ui_pages_send_a_browser_without_a_session_to_the_login_page() {
    let app = TestApp::spawn().await;
    for path in ["/ui", "/ui/events", "/ui/dead-letters", "/ui/outbox", "/ui/orders?id=ord_1"] {
        for cookie in [None, Some("payhook_session=00ff"), Some("payhook_session=")] {
            let resp = get(&app, path, cookie).await;
            assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{path} with {cookie:?}");
            assert_eq!(resp.headers()[LOCATION], "/ui/login", "{path}");
        }
    }
    let page = get(&app, "/ui/login", None).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.headers()[CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    assert!(page.text().await.unwrap().contains("name=\"token\""));
}

#[tokio::test]
async fn ui_login_refuses_a_wrong_token_and_opens_no_session() {
    let app = TestApp::spawn().await;
    let wrong = format!("{API_TOKEN}x");
    for token in ["", "wrong", &API_TOKEN[..API_TOKEN.len() - 1], wrong.as_str()] {
        let resp = post_form(&app, "/ui/login", None, &[("token", token)]).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "token {token:?}");
        assert!(resp.headers().get(SET_COOKIE).is_none(), "token {token:?} got a cookie");
        assert!(resp.text().await.unwrap().contains("Wrong token"));
    }
}

#[tokio::test]
async fn ui_login_sets_an_http_only_same_site_strict_cookie_that_is_not_the_token() {
    let app = TestApp::spawn().await;
    let resp = post_form(&app, "/ui/login", None, &[("token", API_TOKEN)]).await;
    let cookie = resp.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("payhook_session="), "{cookie}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui", "Max-Age="] {
        assert!(cookie.contains(attribute), "{attribute} missing from {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP cannot send a Secure cookie back: {cookie}");
    assert!(!cookie.contains(API_TOKEN), "the cookie carries the token: {cookie}");

    // Behind a TLS proxy the cookie is Secure.
    let resp = plain_client()
        .post(app.url("/ui/login"))
        .header("x-forwarded-proto", "https")
        .form(&[("token", API_TOKEN)])
        .send()
        .await
        .unwrap();
    assert!(resp.headers()[SET_COOKIE].to_str().unwrap().contains("; Secure"));
}

#[tokio::test]
async fn ui_posts_without_a_session_or_with_a_wrong_csrf_token_are_refused_and_change_nothing() {
    let app = app_with_a_dead_letter().await;
    app.register_order("ord_late", 1999, "usd").await;
    let session = login(&app).await;
    let cookie = Some(session.cookie.as_str());
    let other = login(&app).await;
    let replay = "/ui/events/payments/evt_late/replay";
    let confirm = [("step", "confirm"), ("max", "10")];
    let attempts: Vec<(&str, Option<&str>, Form<'_>)> = vec![
        (replay, cookie, vec![]),
        (replay, cookie, vec![("csrf", "")]),
        (replay, cookie, vec![("csrf", "0123")]),
        (replay, cookie, vec![("csrf", other.csrf.as_str())]),
        ("/ui/dead-letters/replay", cookie, confirm.to_vec()),
        ("/ui/dead-letters/replay", cookie, [confirm.as_slice(), &[("csrf", "nope")]].concat()),
        ("/ui/outbox/1/retry", cookie, vec![("csrf", "nope")]),
        ("/ui/logout", cookie, vec![]),
    ];
    for (path, cookie, form) in &attempts {
        let resp = post_form(&app, path, *cookie, form).await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "POST {path} with {form:?}");
    }
    // Without a session at all, the POST is not authenticated: 401.
    let resp = post_form(&app, replay, None, &[("csrf", session.csrf.as_str())]).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let stored = app.event("payments", "evt_late").await.unwrap();
    assert_eq!((stored.status, stored.attempts), (Outcome::DeadLettered, 2), "a refused POST changed the event");
    assert_eq!(app.order("ord_late").await["status"], "pending");
    assert_eq!(get(&app, "/ui", cookie).await.status(), StatusCode::OK, "a refused logout ended the session");

    // The same replay with the session's token goes through, as the API's replay does.
    let resp = post_form(&app, replay, cookie, &[("csrf", session.csrf.as_str())]).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[LOCATION], "/ui/events/payments/evt_late");
    assert_eq!(app.event("payments", "evt_late").await.unwrap().status, Outcome::Processed);
    assert_eq!(app.order("ord_late").await["status"], "paid");
    let page = get(&app, "/ui/events/payments/evt_late", cookie).await.text().await.unwrap();
    assert!(page.contains("Replayed payments/evt_late: processed"), "no flash: {page}");

    // Logging out with the token ends the session.
    let resp = post_form(&app, "/ui/logout", cookie, &[("csrf", session.csrf.as_str())]).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert!(resp.headers()[SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(get(&app, "/ui", cookie).await.status(), StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn ui_pages_render_after_login() {
    let app = app_with_a_dead_letter().await;
    app.register_order("ord_paid", 500, "usd").await;
    assert_eq!(app.deliver("payments", &event("evt_paid", Pay, "ord_paid", 500)).await.1["status"], "processed");
    let not_json = app.deliver_bytes("payments", b"not json".to_vec()).await.1;
    let billing = [
        serde_json::json!({"id": "evt_sub", "type": "subscription.created", "created": 100,
            "data": {"subscription_id": "sub_ui", "customer_id": "cus_ui", "status": "active"}}),
        serde_json::json!({"id": "evt_inv", "type": "invoice.paid", "created": 110,
            "data": {"invoice_id": "in_ui", "customer_id": "cus_ui", "subscription_id": "sub_ui",
                     "amount": 900, "currency": "usd"}}),
    ];
    for body in billing {
        assert_eq!(app.deliver_bytes("payments", body.to_string().into_bytes()).await.1["status"], "processed");
    }
    let session = login(&app).await;
    let cookie = Some(session.cookie.as_str());
    let unparseable = format!("/ui/events/payments/{}", not_json["event_id"].as_str().unwrap());
    let pages: [(&str, &[&str]); 16] = [
        ("/ui", &["id=\"count-dead_lettered\"", "<svg", "Deliveries by source"]),
        ("/ui/events", &["evt_late", "evt_paid"]),
        ("/ui/events?source=payments&status=dead_lettered&type=", &["evt_late"]),
        ("/ui/events?source=&status=processed&type=payment.succeeded", &["evt_paid"]),
        ("/ui/events/payments/evt_late", &["Replay this dead letter", "x-webhook-signature", "&quot;order_id&quot;"]),
        ("/ui/events/payments/evt_paid", &["order.paid", "ord_paid"]),
        ("/ui/events/payments/evt_inv", &["Billing changes", "entitlement", "in_ui", "granted"]),
        (&unparseable, &["not json", "Replay this dead letter"]),
        ("/ui/dead-letters", &["evt_late", "bulk-preview"]),
        ("/ui/outbox", &["order.paid"]),
        ("/ui/outbox?status=dead&kind=&sink=&order_id=", &["No outbox rows"]),
        ("/ui/orders?id=ord_paid", &["order-status", "evt_paid"]),
        ("/ui/orders?id=ord_nope", &["No order ord_nope"]),
        ("/ui/billing?subscription=sub_ui&customer=", &["subscription-status", "active", "in_ui", "evt_inv"]),
        ("/ui/billing?subscription=&customer=cus_ui", &["1 granted", "in_ui", "granted"]),
        ("/ui/billing?subscription=sub_nope&customer=", &["No subscription sub_nope"]),
    ];
    for (path, wanted) in pages {
        let resp = get(&app, path, cookie).await;
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let csp = resp.headers()["content-security-policy"].to_str().unwrap().to_owned();
        assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        let html = resp.text().await.unwrap();
        assert!(!html.contains("<script"), "{path} carries a script");
        for w in wanted {
            assert!(html.contains(w), "{path} lacks {w:?}:\n{html}");
        }
    }
    assert!(!get(&app, "/ui/events", cookie).await.text().await.unwrap().contains("evt_other"));

    // The bulk replay's first step only counts: nothing changes.
    let dry_run = post_form(&app, "/ui/dead-letters/replay", cookie, &[("csrf", &session.csrf), ("step", "preview")])
        .await
        .text()
        .await
        .unwrap();
    assert!(dry_run.contains("<strong id=\"dry-run-count\">2</strong>"), "{dry_run}");
    assert_eq!(app.event("payments", "evt_late").await.unwrap().status, Outcome::DeadLettered);
}

/// Where screenshots go: `ui-screenshots/` in the target directory.
fn screenshot_dir() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace.join("target"), PathBuf::from);
    let target = if target.is_absolute() { target } else { workspace.join(target) };
    target.join("ui-screenshots")
}

#[tokio::test]
async fn ui_in_a_browser_an_operator_logs_in_and_replays_a_dead_letter_in_bulk() {
    let required = std::env::var("PAYHOOK_TEST_BROWSER").is_ok_and(|v| v == "1");
    let Some(chromedriver) = chromedriver_path() else {
        assert!(
            !required,
            "PAYHOOK_TEST_BROWSER=1 but chromedriver is not installed (bash scripts/install-browser.sh)"
        );
        println!(
            "skipped: chromedriver not found (PAYHOOK_CHROMEDRIVER, PATH, /usr/bin; bash scripts/install-browser.sh installs it; \
             PAYHOOK_TEST_BROWSER=1 makes its absence a failure)"
        );
        return;
    };
    let app = app_with_a_dead_letter().await;
    let shots = screenshot_dir();
    let driver = ChromeDriver::start(&chromedriver).await;
    let browser = Browser::open(&driver, 1280, 800).await;

    // Without a session the dashboard sends the browser to the login form.
    browser.goto(&app.url("/ui")).await;
    let token = browser.find("#token").await;
    assert!(browser.current_url().await.ends_with("/ui/login"));
    browser.screenshot(&shots.join("01-login.png")).await;
    browser.send_keys(&token, API_TOKEN).await;
    browser.click(&browser.find("#login").await).await;

    let dead = browser.find("#count-dead_lettered").await;
    assert!(browser.text(&dead).await.starts_with('1'), "{}", browser.text(&dead).await);
    browser.screenshot(&shots.join("02-overview.png")).await;

    // The dead letter is listed, with its reason.
    browser.click(&browser.find("header a[href='/ui/dead-letters']").await).await;
    let row = browser.find("tr[data-event-id='evt_late']").await;
    assert!(browser.text(&row).await.contains("dead lettered"), "{}", browser.text(&row).await);
    browser.screenshot(&shots.join("03-dead-letters.png")).await;

    // Bulk replay: a dry run first, which counts it and changes nothing.
    browser.click(&browser.find("#bulk-preview").await).await;
    let count = browser.find("#dry-run-count").await;
    assert_eq!(browser.text(&count).await, "1");
    assert_eq!(app.event("payments", "evt_late").await.unwrap().status, Outcome::DeadLettered);
    browser.screenshot(&shots.join("04-bulk-dry-run.png")).await;

    // The order is registered at last; confirming replays the payment onto it.
    app.register_order("ord_late", 1999, "usd").await;
    browser.click(&browser.find("#confirm-replay").await).await;
    let flash = browser.text(&browser.find("#flash").await).await;
    assert!(flash.contains("Replayed 1 dead letter: processed 1"), "{flash}");
    browser.screenshot(&shots.join("05-replayed.png")).await;
    assert_eq!(app.event("payments", "evt_late").await.unwrap().status, Outcome::Processed);

    browser.goto(&app.url("/ui/events/payments/evt_late")).await;
    assert_eq!(browser.text(&browser.find("#event-status").await).await, "processed");
    browser.screenshot(&shots.join("06-event.png")).await;

    browser.goto(&app.url("/ui/orders?id=ord_late")).await;
    assert_eq!(browser.text(&browser.find("#order-status").await).await, "paid");
    browser.screenshot(&shots.join("07-order.png")).await;

    // At a phone's width the overview fits without sideways scrolling.
    browser.set_window_size(390, 844).await;
    browser.goto(&app.url("/ui")).await;
    browser.find("#count-received").await;
    let overflow = browser.execute("return document.documentElement.scrollWidth - window.innerWidth;").await;
    assert!(overflow.as_i64().is_some_and(|px| px <= 0), "the overview overflows a phone's width by {overflow} px");
    browser.screenshot(&shots.join("08-overview-phone.png")).await;
    browser.goto(&app.url("/ui/dead-letters")).await;
    browser.find("#bulk-preview").await;
    browser.screenshot(&shots.join("09-dead-letters-phone.png")).await;
}
