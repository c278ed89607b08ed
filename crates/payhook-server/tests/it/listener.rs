//! The public listener: operator surfaces off the public port (`/metrics`, `/openapi.json`), HTTPS with a
//! certificate read again on reload, and a client without the right CA refused.

use crate::helpers::{API_TOKEN, TestApp};
use payhook_server::TlsSettings;
use reqwest::StatusCode;
use std::path::Path;
use std::time::Duration;

#[tokio::test]
async fn metrics_and_openapi_take_the_api_token_on_the_public_port() {
    let app = TestApp::spawn().await;
    for path in ["/metrics", "/openapi.json"] {
        let (status, text) = app.get_text(path).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} without a token: {text}");
        let (status, _) = app.get_text_authorized(path).await;
        assert_eq!(status, StatusCode::OK, "{path} with the token");
    }
    // Probes stay open and say nothing secret.
    let (status, text) = app.get_text("/healthz").await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "ok"));
    let (status, text) = app.get_text("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(!text.contains(API_TOKEN) && !text.contains("payhook.db"), "{text}");
}

#[tokio::test]
async fn a_metrics_listener_serves_metrics_without_a_token_and_the_public_port_none() {
    let app = TestApp::spawn_with(|settings, _| {
        settings.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        settings.public_openapi = true;
    })
    .await;
    let metrics_addr = app.running.metrics_addr.expect("the metrics listener's address");
    let resp = app.client.get(format!("http://{metrics_addr}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let text = resp.text().await.unwrap();
    assert!(text.contains("payhook_connections_open"), "{text}");
    assert_eq!(
        app.client.get(format!("http://{metrics_addr}/v1/stats")).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    let (status, _) = app.get_text_authorized("/metrics").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "/metrics left the public port");
    let (status, _) = app.get_text("/openapi.json").await;
    assert_eq!(status, StatusCode::OK, "server.public_openapi = true opens the document");
}

/// A CA and a certificate for `localhost` and 127.0.0.1 signed by it, as PEM: (ca, cert, key).
fn issue(ca_name: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, ca_name);
    ca_params.distinguished_name = dn;
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

fn write_pair(dir: &Path, cert: &str, key: &str) -> TlsSettings {
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    TlsSettings { cert_path, key_path }
}

/// A client that trusts only `ca` and resolves `localhost` to the app.
fn client_trusting(ca: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test]
async fn https_serves_with_the_configured_certificate_refuses_other_cas_and_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = issue("payhook test CA one");
    let tls = write_pair(dir.path(), &cert, &key);
    let app = TestApp::spawn_with(|settings, _| settings.listener.tls = Some(tls.clone())).await;
    let url = format!("https://localhost:{}/healthz", app.addr.port());

    let resp = client_trusting(&ca).get(&url).send().await.expect("HTTPS with the right CA");
    assert_eq!(resp.status(), StatusCode::OK);
    let (other_ca, other_cert, other_key) = issue("payhook test CA two");
    let refused = client_trusting(&other_ca).get(&url).send().await.expect_err("a CA that did not sign it");
    let chain = format!("{refused:?}");
    assert!(chain.contains("UnknownIssuer") || chain.to_lowercase().contains("certificate"), "{chain}");
    // Plain HTTP on the HTTPS port gets no answer.
    let plain = app.client.get(format!("http://127.0.0.1:{}/healthz", app.addr.port())).send().await;
    assert!(plain.is_err() || plain.is_ok_and(|r| !r.status().is_success()));

    // Rotate: new files, reload; new connections present the new certificate.
    write_pair(dir.path(), &other_cert, &other_key);
    assert!(app.running.reload_tls().expect("reload"));
    let resp = client_trusting(&other_ca).get(&url).send().await.expect("HTTPS with the rotated certificate");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(client_trusting(&ca).get(&url).send().await.is_err(), "the old certificate is no longer served");

    // A broken file on reload keeps the current pair in use.
    std::fs::write(&tls.key_path, "not a key").unwrap();
    assert!(app.running.reload_tls().is_err());
    let resp = client_trusting(&other_ca).get(&url).send().await.expect("still served after a failed reload");
    assert_eq!(resp.status(), StatusCode::OK);
}
