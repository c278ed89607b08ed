//! `/openapi.json` describes every route the router registers, with its method.

use crate::helpers::{API_TOKEN, TestApp, read_json};
use payhook_server::ROUTES;
use reqwest::{Method, StatusCode};

/// Routes someone else documents (the dashboard).
fn documented(path: &str) -> bool {
    !(path == "/ui" || path.starts_with("/ui/"))
}

#[tokio::test]
async fn the_openapi_document_describes_every_route_with_its_method() {
    let app = TestApp::spawn().await;
    let reply = read_json(app.client.get(app.url("/openapi.json")).bearer_auth(API_TOKEN).send().await.unwrap()).await;
    assert_eq!(reply.status, StatusCode::OK);
    let doc = reply.json;
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{doc}");
    let paths = doc["paths"].as_object().expect("paths");

    for (method, path) in ROUTES.iter().filter(|(_, p)| documented(p)) {
        let op = &paths.get(*path).unwrap_or_else(|| panic!("{path} is not in the document"))[method.to_lowercase()];
        assert!(op.is_object(), "{method} {path} is not in the document: {}", paths[*path]);
        assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path} has no responses");
        if path.starts_with("/v1/") {
            assert_eq!(op["security"][0]["bearer"], serde_json::json!([]), "{method} {path} needs the token");
        }
    }
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            let listed = ROUTES.iter().any(|(m, p)| p == path && m.eq_ignore_ascii_case(method));
            assert!(listed, "{method} {path} is documented but not in ROUTES");
        }
    }

    // The list is the router's: each route is served (whatever it answers to placeholder ids), none falls through.
    for (method, path) in ROUTES.iter().filter(|(_, p)| documented(p)) {
        let url = path
            .replace("{source}", "payments")
            .replace("{event_id}", "evt_none")
            .replace("/outbox/{id}", "/outbox/1")
            .replace("{id}", "none");
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let resp = app.client.request(method.clone(), app.url(&url)).bearer_auth(API_TOKEN).send().await.unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {url}");
        assert!(!body.contains("no such route"), "{method} {url} is not routed: {status} {body}");
    }
}
