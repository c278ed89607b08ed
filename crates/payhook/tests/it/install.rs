//! What installing payhook relies on: `payhook init`'s two files, `payhook healthcheck`, and the build the binary
//! reports (`--version`, `payhook_build_info`). The packages and the image themselves are checked by
//! `scripts/install-check.sh`.

use crate::helpers::*;
use payhook_core::preset::{Preset, test_secret};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

/// A secret each provider's scheme accepts, for `config check`.
fn secret_for(provider: &str) -> String {
    match provider {
        "adyen" => "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00".into(),
        "braintree" => "public_key_1:private_key_1".into(),
        "http-message-signatures" => "hmac-sha256:key-1:c2VjcmV0LWtleS1vZi10aGUtcHJvdmlkZXItMDEyMzQ1Njc4OQ==".into(),
        "hmac" => "a-shared-secret".into(),
        preset => {
            let preset = Preset::get(preset).and_then(Result::ok).unwrap_or_else(|| panic!("no preset {preset}"));
            test_secret(preset.signature.as_ref().expect("a preset that signs"))
        }
    }
}

/// Every provider `payhook init` knows, as its error for an unknown one lists them.
fn known_providers(dir: &TestDir) -> Vec<String> {
    let out = dir.run(&["init", "no-such-provider", "--out", "unknown.toml"]);
    assert_eq!(out.status.code(), Some(2), "an unknown provider is a usage error: {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(!dir.path().join("unknown.toml").exists() && !dir.path().join("unknown.env").exists(), "wrote files");
    let list = stderr.split("known providers: ").nth(1).unwrap_or_else(|| panic!("no list of providers: {stderr}"));
    list.trim().split(", ").map(str::to_owned).collect()
}

/// The variables a file written by `payhook init` leaves to fill in (`#NAME=`), and the ones it sets.
fn env_lines(text: &str) -> (Vec<String>, BTreeMap<String, String>) {
    let mut placeholders = Vec::new();
    let mut set = BTreeMap::new();
    for line in text.lines() {
        if let Some((name, "")) = line.strip_prefix('#').and_then(|l| l.split_once('='))
            && !name.contains(' ')
        {
            placeholders.push(name.to_owned());
        } else if let Some((name, value)) = line.split_once('=')
            && !line.starts_with('#')
        {
            set.insert(name.to_owned(), value.to_owned());
        }
    }
    (placeholders, set)
}

#[test]
fn payhook_init_writes_a_configuration_of_every_provider_that_passes_config_check_once_its_secrets_are_set() {
    let dir = TestDir::new();
    let providers = known_providers(&dir);
    assert!(providers.len() >= 20 && providers.iter().any(|p| p == "mercado-pago"), "{providers:?}");
    let mut args = vec!["init"];
    args.extend(providers.iter().map(String::as_str));
    let out = dir.run(&args);
    assert!(out.status.success(), "payhook init failed: {}{}", text(&out.stdout), text(&out.stderr));

    let config = std::fs::read_to_string(dir.path().join("payhook.toml")).expect("payhook.toml");
    let env = std::fs::read_to_string(dir.path().join("payhook.env")).expect("payhook.env");
    let (placeholders, set) = env_lines(&env);
    let token = set.get("PAYHOOK_API_TOKEN").expect("the env file sets the API token");
    assert!(token.len() >= 24 && token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert!(!config.contains(token.as_str()), "the configuration holds the token");
    let mode = std::fs::metadata(dir.path().join("payhook.env")).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "payhook.env is readable by others: {mode:o}");

    // Not checkable before the secrets are there: config check names the first missing one.
    let out = dir.payhook().args(["config", "check"]).env("PAYHOOK_API_TOKEN", token).output().expect("run payhook");
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("secrets_env: environment variable"), "{}", text(&out.stderr));

    // Every provider's secret (and Mercado Pago's access token) filled in, as a user fills in the file.
    let mut cmd = dir.payhook();
    cmd.args(["config", "check"]).env("PAYHOOK_API_TOKEN", token);
    for provider in &providers {
        let var = format!("{}_WEBHOOK_SECRET", provider.to_ascii_uppercase().replace('-', "_"));
        assert!(placeholders.contains(&var), "no line for {var} in payhook.env:\n{env}");
        cmd.env(&var, secret_for(provider));
    }
    assert!(placeholders.contains(&"MERCADO_PAGO_ACCESS_TOKEN".to_owned()), "{env}");
    cmd.env("MERCADO_PAGO_ACCESS_TOKEN", "APP_USR-access-token");
    let out = cmd.output().expect("run payhook config check");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "config check of the initial configuration failed: {}\n{config}", text(&out.stderr));
    for provider in &providers {
        assert!(stdout.contains(&format!("POST /webhooks/{provider} ")), "{provider} is not served:\n{stdout}");
    }
    assert!(stdout.contains("token set (from PAYHOOK_API_TOKEN, 48 characters)"), "{stdout}");
}

#[test]
fn payhook_init_overwrites_nothing_and_says_so_with_exit_status_2() {
    let dir = TestDir::new();
    let out = dir.run(&["init", "paddle", "--out", "shop.toml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let env_file = dir.path().join("shop.env");
    let before = std::fs::read_to_string(&env_file).expect("the env file beside shop.toml is shop.env");

    // Either file existing stops it, before it writes anything.
    let out = dir.run(&["init", "stripe", "--out", "shop.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("shop.toml exists"), "{}", text(&out.stderr));
    let out = dir.run(&["init", "stripe", "--out", "other.toml", "--env-file", "shop.env"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("shop.env exists"), "{}", text(&out.stderr));
    assert!(!dir.path().join("other.toml").exists(), "wrote the configuration beside a refused env file");
    assert_eq!(std::fs::read_to_string(&env_file).expect("shop.env"), before, "the token was replaced");

    // A provider named twice is a mistake too.
    let out = dir.run(&["init", "stripe", "stripe", "--out", "twice.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!dir.path().join("twice.toml").exists());
}

#[tokio::test]
async fn payhook_healthcheck_exits_0_while_payhook_answers_and_1_once_it_is_gone() {
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let config = server.config.to_str().expect("utf-8 path").to_owned();
    let out = dir.run(&["--config", &config, "healthcheck"]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("/healthz: 200 OK"), "{}", text(&out.stdout));
    server.stop();
    let out = dir.run(&["--config", &config, "healthcheck", "--timeout-ms", "500"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stderr).contains("/healthz"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn the_version_and_the_metrics_name_the_same_build() {
    let dir = TestDir::new();
    let out = dir.run(&["--version"]);
    let version = text(&out.stdout);
    // `payhook 0.1.0 (commit 0123456789ab)`, or `(commit unknown)` outside a git checkout.
    let (release, commit) = version
        .trim()
        .strip_prefix("payhook ")
        .and_then(|v| v.strip_suffix(')'))
        .and_then(|v| v.split_once(" (commit "))
        .unwrap_or_else(|| panic!("payhook --version: {version}"));
    assert_eq!(release, env!("CARGO_PKG_VERSION"));
    assert!(commit == "unknown" || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())), "{commit}");

    let server = Server::start(&dir).await;
    let metrics = server
        .client
        .get(server.url("/metrics"))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text");
    let line = format!("payhook_build_info{{version=\"{release}\",commit=\"{commit}\"}} 1");
    assert!(metrics.lines().any(|l| l == line), "no {line} in /metrics:\n{metrics}");
    server.stop();
}
