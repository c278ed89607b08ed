//! `/openapi.json` describes every route the router registers, with its method.

use crate::helpers::{API_TOKEN, TestApp, read_json};
use payhook_server::{Need, ROUTES};
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

    for route in ROUTES.iter().filter(|r| documented(r.path)) {
        let (method, path) = (route.method, route.path);
        let op = &paths.get(path).unwrap_or_else(|| panic!("{path} is not in the document"))[method.to_lowercase()];
        assert!(op.is_object(), "{method} {path} is not in the document: {}", paths[path]);
        assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path} has no responses");
        // The document states each operation's scope, from the same table the server checks.
        if let Need::Scope(scope) = route.need {
            assert_eq!(op["security"], serde_json::json!([{ "bearer": [scope.as_str()] }]), "{method} {path}");
            assert_eq!(op["x-payhook-scope"], scope.as_str(), "{method} {path}");
            assert!(op["responses"]["403"].is_object(), "{method} {path} does not document its 403");
        } else {
            assert!(op.get("x-payhook-scope").is_none(), "{method} {path} is public");
        }
    }
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            let listed = ROUTES.iter().any(|r| r.path == path && r.method.eq_ignore_ascii_case(method));
            assert!(listed, "{method} {path} is documented but not in ROUTES");
        }
    }

    // The list is the router's: each route is served (whatever it answers to placeholder ids), none falls through.
    for (method, path) in ROUTES.iter().filter(|r| documented(r.path)).map(|r| (r.method, r.path)) {
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

#[tokio::test]
async fn the_event_detail_schema_names_every_field_the_api_answers_and_says_which_carries_the_body() {
    let app = TestApp::spawn().await;
    let (status, answer) = app.deliver_bytes("payments", b"not json".to_vec()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let detail = app.api_get(&format!("/v1/events/payments/{}", answer["event_id"].as_str().unwrap())).await.json;
    let doc =
        read_json(app.client.get(app.url("/openapi.json")).bearer_auth(API_TOKEN).send().await.unwrap()).await.json;

    let ok = &doc["paths"]["/v1/events/{source}/{event_id}"]["get"]["responses"]["200"];
    assert_eq!(ok["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/EventDetail", "{ok}");
    let schema = &doc["components"]["schemas"]["EventDetail"];
    let properties = schema["properties"].as_object().expect("EventDetail properties");
    for field in detail.as_object().unwrap().keys() {
        assert!(properties.contains_key(field), "the answer's {field:?} is not in the schema: {schema}");
    }
    for field in properties.keys() {
        assert!(detail.get(field).is_some(), "the schema's {field:?} is not in the answer: {detail}");
    }
    let headers = &properties["headers"];
    assert_eq!(headers["additionalProperties"]["items"]["type"], "string", "{headers}");
    for field in ["body", "body_base64"] {
        let text = properties[field]["description"].as_str().unwrap_or_default();
        assert!(text.contains("UTF-8"), "{field} does not say when it is set: {}", properties[field]);
    }
}

/// The outbox listing's `status` and `kind` filters are documented as exactly the values the handler accepts, so
/// a client generated from the document sends nothing it refuses.
#[tokio::test]
async fn the_outbox_filters_patterns_list_exactly_the_statuses_and_kinds_there_are() {
    let app = TestApp::spawn().await;
    let doc =
        read_json(app.client.get(app.url("/openapi.json")).bearer_auth(API_TOKEN).send().await.unwrap()).await.json;
    let params = doc["paths"]["/v1/outbox"]["get"]["parameters"].as_array().expect("parameters").clone();
    let alternatives = |name: &str| -> Vec<String> {
        let param = params.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no parameter {name}"));
        let pattern = param["schema"]["pattern"].as_str().unwrap_or_else(|| panic!("{name} has no pattern: {param}"));
        let inner = pattern.strip_prefix("^(").and_then(|p| p.strip_suffix(")$")).expect("^(a|b)$");
        inner.split('|').map(|a| a.replace("\\.", ".")).collect()
    };
    assert_eq!(alternatives("status"), payhook_store::OutboxStatus::NAMES);
    assert_eq!(alternatives("kind"), payhook_store::OutboxKind::NAMES);
}

/// Every `POST` under `/v1` refuses a body that is not one object of its fields with 422, and says so; `/readyz`
/// takes the token optionally, and documents what a wrong one is answered.
#[tokio::test]
async fn the_document_describes_the_422_of_every_v1_post_and_the_optional_token_of_readyz() {
    let app = TestApp::spawn().await;
    let doc =
        read_json(app.client.get(app.url("/openapi.json")).bearer_auth(API_TOKEN).send().await.unwrap()).await.json;
    for path in ROUTES.iter().filter(|r| r.method == "POST" && r.path.starts_with("/v1/")).map(|r| r.path) {
        let refused = &doc["paths"][path]["post"]["responses"]["422"];
        let text = refused["description"].as_str().unwrap_or_default();
        assert!(text.contains("body"), "POST {path} does not document its refused bodies: {refused}");
    }
    let readyz = &doc["paths"]["/readyz"]["get"];
    assert_eq!(readyz["security"], serde_json::json!([{}, { "bearer": [] }]), "{readyz}");
    for status in ["200", "503", "401", "429"] {
        assert!(readyz["responses"][status].is_object(), "/readyz does not document {status}: {readyz}");
    }
    let readiness = &doc["components"]["schemas"]["Readiness"];
    assert_eq!(readiness["required"], serde_json::json!(["status"]), "only the status is always there: {readiness}");
}
