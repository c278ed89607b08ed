//! payhook against the providers' own SDKs (`interop/`, run with Node).
//!
//! - What payhook signs, the provider's SDK accepts: every example event of every provider whose SDK verifies is
//!   rendered with `payhook trigger … --print` and checked by `interop/verify.mjs`, which must accept it (and, where
//!   the SDK also parses the event, as Paddle's and Polar's do, parse it as the event rendered) and refuse it once
//!   one signed byte changed or when it checks with another secret.
//! - What the provider's SDK signs, payhook accepts: `interop/sign.mjs` signs the same deliveries for the SDKs that
//!   can sign, and a running `payhook serve` answers them 2xx (and 401 when the SDK signed with another secret).
//!
//! The suite needs `node` and `interop/node_modules` (`npm ci --prefix interop`). Without them the tests print
//! `skipped: …`; with `PAYHOOK_TEST_INTEROP=1` (as CI sets it) their absence fails the tests.

use crate::helpers::{Server, TestDir, config_toml, free_port, outcome, text};
use payhook_core::event::OrderAction;
use payhook_core::format::{EffectSpec, Format};
use payhook_core::preset::Preset;
use reqwest::StatusCode;
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A provider as a source of its own in payhook's config, and as the SDK scripts know it.
pub(crate) struct Provider {
    /// The provider's name in `verify.mjs` and `sign.mjs`.
    pub(crate) sdk: &'static str,
    /// The source's name (and the last segment of its webhook URL).
    pub(crate) source: &'static str,
    scheme: &'static str,
    pub(crate) format: &'static str,
    /// A secret of the form the provider issues.
    pub(crate) secret: &'static str,
    /// Another secret of the same form, which must not verify what the first one signed.
    pub(crate) other_secret: &'static str,
    /// The source's `notification_url`, for a rule that signs the URL as registered with the provider.
    pub(crate) notification_url: Option<&'static str>,
}

/// Providers whose SDK verifies a delivery.
pub(crate) const VERIFIED_BY_SDK: [Provider; 11] = [
    Provider {
        sdk: "paddle",
        source: "paddle",
        scheme: "paddle",
        format: "paddle",
        secret: "pdl_ntfset_01jd8x3k5m2q7r9t4v6w8y0z1a_b3Kf9QmT2xVw7LpN4rZs8JcH5dYe1GuA",
        other_secret: "pdl_ntfset_01jd8x3k5m2q7r9t4v6w8y0z1b_Xc2Rt8LmQ4vWn7KpZ3sJ9dHf6YeA1GuB",
        notification_url: None,
    },
    Provider {
        sdk: "square",
        source: "square",
        scheme: "square",
        format: "square",
        secret: "qJ8vT3mXw2LpN5rZ9s4KcH",
        other_secret: "Lm4Rz8Vq2Tx6Np0Ks3WjYb",
        notification_url: Some("https://shop.example.com/webhooks/square?tenant=eu-1"),
    },
    Provider {
        sdk: "razorpay",
        source: "razorpay",
        scheme: "razorpay",
        format: "razorpay",
        secret: "rzp-webhook-secret-7Hq2Vn",
        other_secret: "rzp-webhook-secret-7Hq2Vm",
        notification_url: None,
    },
    Provider {
        sdk: "polar",
        source: "polar",
        scheme: "polar",
        format: "polar",
        secret: "polar_whs_4Kq9xT2mVw8LpN5rZs3JcH7dYe1GuAb6FoRi0XnC",
        other_secret: "polar_whs_Zp7Lc2Vn9Qx4Tm8Kr1Ws6JdH3bYe5GuAf0FoRi7XnD",
        notification_url: None,
    },
    Provider {
        sdk: "standard-webhooks",
        source: "standard",
        scheme: "standard-webhooks",
        format: "generic",
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        other_secret: "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        notification_url: None,
    },
    Provider {
        sdk: "coinbase-commerce",
        source: "coinbase",
        scheme: "coinbase-commerce",
        format: "coinbase-commerce",
        secret: "2f5e1f1a-8a7b-4e8c-9d1a-3c6e7f0b2a91",
        other_secret: "9b0c7d3e-1f2a-4b5c-8d6e-7f8a9b0c1d2e",
        notification_url: None,
    },
    Provider {
        sdk: "github",
        source: "github",
        scheme: "github",
        format: "github",
        secret: "gh-marketplace-hook-6c1f0e9d4b2a",
        other_secret: "gh-marketplace-hook-6c1f0e9d4b2b",
        notification_url: None,
    },
    Provider {
        sdk: "gocardless",
        source: "gocardless",
        scheme: "gocardless",
        format: "gocardless",
        secret: "Vq3kP9xTz2LmN8rWs5JcH7dYe1GuAb6FoRi0XnCt",
        other_secret: "Wt7nL2xQz9KmP4rVs8JcH1dYe6GuAb3FoRi5XnDu",
        notification_url: None,
    },
    Provider {
        sdk: "mercado-pago",
        source: "mercadopago",
        scheme: "mercado-pago",
        format: "mercado-pago",
        secret: "c9f3a1e4b7d2085f6e3a9c1b4d7e0f2a5c8b1e4d7a0f3c6b9e2d5a8f1c4b7e0d",
        other_secret: "0d7e4b1c8f5a2d9e6b3c0f7a4d1e8b5c2f9a6e3d0b7c4f1a8e5d2b9c6f3a0e7d",
        notification_url: None,
    },
    Provider {
        sdk: "braintree",
        source: "braintree",
        scheme: "braintree",
        format: "braintree",
        secret: "interop_public_key_7xq2:9f3c1a7e5b2d4f6a8c0e1b3d5f7a9c2e",
        other_secret: "interop_public_key_7xq2:0e2d4f6a8c1b3d5f7a9c2e4b6d8f0a1c",
        notification_url: None,
    },
    Provider {
        sdk: "stripe",
        source: "stripe",
        scheme: "stripe",
        format: "stripe",
        secret: "whsec_4eC39HqLyjWDarjtT1zdp7dcOm8x9q2V",
        other_secret: "whsec_8kP2sLq7VnXz3TcRw9YmB5dJh1GfA6uE",
        notification_url: None,
    },
];

/// The providers whose SDK signs a delivery (`sign.mjs`): the same sources.
pub(crate) const SIGNED_BY_SDK: [&str; 6] =
    ["standard-webhooks", "polar", "github", "coinbase-commerce", "braintree", "stripe"];

/// The order every rendered delivery is about.
pub(crate) const ORDER: &str = "ord_interop_1042";

/// The effects a built-in format's deliveries are triggered by.
const BUILT_IN_EVENTS: [&str; 4] = ["pay", "refund", "fail", "dispute"];

pub(crate) fn provider(sdk: &str) -> &'static Provider {
    VERIFIED_BY_SDK.iter().find(|p| p.sdk == sdk).unwrap_or_else(|| panic!("no provider {sdk}"))
}

/// `interop/`, when node and its installed packages are there; `None` (having said why) when the suite is skipped.
pub(crate) fn interop_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop");
    let required = std::env::var("PAYHOOK_TEST_INTEROP").is_ok_and(|v| v == "1");
    let node = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    let missing = if !node {
        Some("node not found on PATH")
    } else if !dir.join("node_modules").is_dir() {
        Some("interop/node_modules is missing (npm ci --prefix interop)")
    } else {
        None
    };
    match missing {
        None => Some(dir),
        Some(why) => {
            assert!(!required, "PAYHOOK_TEST_INTEROP=1 but {why}");
            println!("skipped: {why} (PAYHOOK_TEST_INTEROP=1 makes this a failure)");
            None
        }
    }
}

/// One of the SDK scripts as a child process: a JSON line in, a JSON line out, so that each delivery is checked
/// right after it was signed (Paddle's SDK refuses a signature more than 5 s old).
pub(crate) struct Script {
    name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Script {
    pub(crate) fn start(dir: &Path, name: &str) -> Self {
        let mut child = Command::new("node")
            .arg(dir.join(name))
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("node {name}: {e}"));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { name: name.to_owned(), child, stdin, stdout }
    }

    pub(crate) fn ask(&mut self, question: &Value) -> Value {
        writeln!(self.stdin, "{question}").unwrap_or_else(|e| panic!("{}: write: {e}", self.name));
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).unwrap_or_else(|e| panic!("{}: read: {e}", self.name));
        assert!(n > 0, "{} ended without answering {question}", self.name);
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: {e}: {line}", self.name))
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A provider's `[[sources]]` table.
fn source_toml(p: &Provider) -> String {
    let url = p.notification_url.map(|u| format!("notification_url = \"{u}\"\n")).unwrap_or_default();
    // A provider whose signature does not cover the body (Mercado Pago) is confirmed from its API; these tests
    // only sign and verify, so its API is never asked.
    let confirmed = Preset::get(p.format).and_then(Result::ok).is_some_and(|preset| preset.confirm.is_some());
    let confirm = if confirmed {
        "confirm = \"api\"\nconfirm_token = \"APP_USR-interop\"\nconfirm_base_url = \"http://127.0.0.1:9\"\n"
    } else {
        ""
    };
    format!(
        "\n[[sources]]\nname = \"{}\"\nscheme = \"{}\"\nformat = \"{}\"\nsecrets = [\"{}\"]\n{url}{confirm}",
        p.source, p.scheme, p.format, p.secret
    )
}

/// Every provider's source, to append to the standard test configuration.
fn sources_toml() -> String {
    VERIFIED_BY_SDK.iter().map(source_toml).collect()
}

/// The events `payhook trigger` renders for a provider: a preset's examples, or a built-in format's effects.
pub(crate) fn events(p: &Provider) -> Vec<String> {
    if let Some(format) = Format::built_in(p.format) {
        // The effects the provider sends an event for (Braintree has no refund webhook).
        return OrderAction::ALL
            .into_iter()
            .filter(|a| format.encodes(*a))
            .filter_map(|a| BUILT_IN_EVENTS.iter().find(|e| EffectSpec::from(a).name() == **e))
            .map(|e| (*e).to_owned())
            .collect();
    }
    let preset = Preset::get(p.format).unwrap_or_else(|| panic!("no preset {}", p.format)).expect("preset");
    match preset.format().expect("preset format") {
        Some(Format::Declared(format)) => format.examples().iter().map(|e| e.event.clone()).collect(),
        _ => panic!("{}: the preset has no format with examples", p.format),
    }
}

/// `payhook trigger FORMAT EVENT --print` for the provider's source: `{"method", "url", "headers", "body"}`.
fn trigger(dir: &TestDir, config: &Path, p: &Provider, event: &str) -> Value {
    let config = config.to_str().expect("config path");
    let args = ["--config", config, "trigger", p.format, event, "--source", p.source, "--order", ORDER, "--print"];
    let out = dir.run(&args);
    assert!(out.status.success(), "payhook trigger {} {event}: {}", p.format, text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("trigger {event} printed no JSON: {e}"))
}

/// The first ASCII digit at or after `from` raised by one (9 becomes 8), which keeps JSON and URLs well formed.
pub(crate) fn change_one_digit(s: &str, from: usize) -> String {
    let at = s[from..].find(|c: char| c.is_ascii_digit()).map(|i| from + i).expect("a digit to change");
    let digit = s.as_bytes()[at] - b'0';
    let changed = if digit == 9 { 8 } else { digit + 1 };
    format!("{}{changed}{}", &s[..at], &s[at + 1..])
}

/// The question `verify.mjs` answers about a delivery checked with `secret`.
pub(crate) fn verify_question(p: &Provider, delivery: &Value, secret: &str) -> Value {
    json!({
        "provider": p.sdk,
        "secret": secret,
        "url": delivery["url"],
        "headers": delivery["headers"],
        "body": delivery["body"],
        "notification_url": p.notification_url,
    })
}

#[test]
fn what_payhook_signs_the_providers_sdks_accept_and_a_changed_byte_they_refuse() {
    let Some(interop) = interop_dir() else { return };
    let dir = TestDir::new();
    let config = dir.write("payhook.toml", &format!("{}{}", config_toml(free_port()), sources_toml()));
    let mut verify = Script::start(&interop, "verify.mjs");
    let mut failures = Vec::new();
    let mut checked = 0;
    for p in &VERIFIED_BY_SDK {
        for event in events(p) {
            let delivery = trigger(&dir, &config, p, &event);
            let context = format!("{} {event}", p.sdk);

            let answer = verify.ask(&verify_question(p, &delivery, p.secret));
            if answer["valid"] != true {
                failures.push(format!("{context}: the SDK refused payhook's signature: {answer}\n  {delivery}"));
                continue;
            }
            // A verifier that parses (Paddle's, Polar's) must parse the body it accepted the signature of, and read
            // the event payhook rendered (a preset's event is the provider's). After a good signature, `error` says
            // what the SDK could not parse ("signature accepted, body not parsed: …", the fields its schema refuses).
            if let Some(error) = answer["error"].as_str() {
                failures.push(format!("{context}: {error}\n  {}", delivery["body"]));
            } else if let Some(read) = answer["event"].as_str()
                && Format::built_in(p.format).is_none()
                && read != event
            {
                failures.push(format!("{context}: the SDK read the event type {read}"));
            }

            // One changed byte of what is signed: the body, or (Mercado Pago signs no body) the data.id parameter.
            let mut tampered = delivery.clone();
            if p.sdk == "mercado-pago" {
                let url = delivery["url"].as_str().expect("url");
                let from = url.find("data.id=").expect("data.id in the URL");
                tampered["url"] = change_one_digit(url, from).into();
            } else {
                tampered["body"] = change_one_digit(delivery["body"].as_str().expect("body"), 0).into();
            }
            let answer = verify.ask(&verify_question(p, &tampered, p.secret));
            if answer["valid"] != false {
                failures.push(format!("{context}: the SDK accepted a changed byte: {answer}"));
            }

            let answer = verify.ask(&verify_question(p, &delivery, p.other_secret));
            if answer["valid"] != false {
                failures.push(format!("{context}: the SDK accepted the signature with another secret: {answer}"));
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{} of {checked} deliveries disagree:\n{}", failures.len(), failures.join("\n"));
    println!("{checked} deliveries signed by payhook, verified by the providers' SDKs");
}

/// The delivery with the signature headers `sign.mjs` made in place of payhook's (names compared ignoring case).
pub(crate) fn with_sdk_signature(delivery: &Value, signed: &Value) -> Vec<(String, String)> {
    let sdk_headers: &Map<String, Value> = signed["headers"].as_object().expect("signed headers");
    let mut headers: Vec<(String, String)> = delivery["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .filter(|(name, _)| !sdk_headers.keys().any(|k| k.eq_ignore_ascii_case(name)))
        .map(|(name, value)| (name.clone(), value.as_str().expect("header value").to_owned()))
        .collect();
    headers.extend(sdk_headers.iter().map(|(k, v)| (k.clone(), v.as_str().expect("header value").to_owned())));
    headers
}

async fn post(server: &Server, url: &str, headers: &[(String, String)], body: &str) -> (StatusCode, Value) {
    let mut req = server.client.post(url).body(body.to_owned());
    for (name, value) in headers {
        req = req.header(name, value);
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn what_the_providers_sdks_sign_payhook_accepts_and_another_secret_it_refuses() {
    let Some(interop) = interop_dir() else { return };
    let dir = TestDir::new();
    let server = Server::start_with(&dir, &sources_toml()).await;
    let mut sign = Script::start(&interop, "sign.mjs");
    let mut failures = Vec::new();
    let mut checked = 0;
    for sdk in SIGNED_BY_SDK {
        let p = provider(sdk);
        for event in events(p) {
            // payhook renders the provider's delivery; the SDK signs its body again, with its own headers.
            let delivery = trigger(&dir, &server.config, p, &event);
            let url = delivery["url"].as_str().expect("url");
            let body = delivery["body"].as_str().expect("body");
            let context = format!("{sdk} {event}");

            // A signer whose signature travels in the body (Braintree's) answers the body to send.
            let signed = sign.ask(&json!({ "provider": sdk, "secret": p.secret, "body": body }));
            let sent = signed["body"].as_str().unwrap_or(body);
            let (status, answer) = post(&server, url, &with_sdk_signature(&delivery, &signed), sent).await;
            let accepted = status.is_success() && ["processed", "ignored", "deferred"].contains(&outcome(&answer));
            if !accepted {
                failures.push(format!("{context}: payhook answered {status} {answer} to {signed}"));
            }

            let signed = sign.ask(&json!({ "provider": sdk, "secret": p.other_secret, "body": body }));
            let sent = signed["body"].as_str().unwrap_or(body);
            let (status, answer) = post(&server, url, &with_sdk_signature(&delivery, &signed), sent).await;
            if status != StatusCode::UNAUTHORIZED {
                failures.push(format!("{context}: signed with another secret, payhook answered {status} {answer}"));
            }
            checked += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} deliveries disagree:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        server.log()
    );
    println!("{checked} deliveries signed by the providers' SDKs, verified by payhook");
    server.stop();
}
