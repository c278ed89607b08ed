//! Reloading the configuration of a running `payhook serve` (SIGHUP and `payhook reload`): under load, with
//! sources added and removed and a secret rotated with `not_after`; and a file that cannot be applied, refused with
//! `config check`'s own message while the configuration in force keeps serving.

use crate::helpers::*;
use payhook_core::signature::{Encoding, HmacAlgorithm, Scheme, Secret, Verifier};
use reqwest::StatusCode;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// A source that comes and goes with the reloads.
const EXTRA: &str = "extra";
const EXTRA_SECRET: &str = "whsec_extra";
/// A source whose secret is rotated: `OLD_SECRET` stays accepted until its `not_after`, `NEW_SECRET` from the
/// reload on.
const ROTATING: &str = "rotating";
const OLD_SECRET: &str = "whsec_rotating_old";
const NEW_SECRET: &str = "whsec_rotating_new";

fn hmac_source(name: &str, secrets: &str) -> String {
    format!(
        "\n[[sources]]\nname = \"{name}\"\nscheme = \"hmac\"\nheader = \"X-Webhook-Signature\"\nalgorithm = \"sha256\"\n\
         encoding = \"hex\"\nformat = \"generic\"\nsecrets = {secrets}\n"
    )
}

/// A `payment.succeeded` for `source`, signed with `secret` alone.
fn payment_signed_with(secret: &str, event_id: &str) -> Signed {
    let mut d = payment(event_id, &format!("ord-{event_id}"));
    let scheme = Scheme::Hmac {
        header: "x-webhook-signature".into(),
        algorithm: HmacAlgorithm::Sha256,
        encoding: Encoding::Hex,
        prefix: None,
    };
    let now = payhook_server::now_ms() / 1000;
    d.headers = Verifier::new(scheme, &[Secret::new(secret)], 300).unwrap().sign(&d.body, now, event_id);
    d
}

async fn deliver(server: &Server, source: &str, d: &Signed) -> (StatusCode, Value) {
    post(&server.client, &server.url(&format!("/webhooks/{source}")), d).await.expect("POST /webhooks")
}

/// One sample of `/metrics` (with the API token), by its full name and labels.
async fn metric(server: &Server, sample: &str) -> Option<u64> {
    let text = server.client.get(server.url("/metrics")).bearer_auth(API_TOKEN).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until the server runs configuration generation `generation` (a SIGHUP is applied asynchronously).
async fn wait_for_generation(server: &Server, generation: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(server, "payhook_config_generation").await != Some(generation) {
        assert!(Instant::now() < deadline, "generation {generation} never came into force:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn sighup(server: &Server) {
    let status = std::process::Command::new("kill").arg("-HUP").arg(server.pid().to_string()).status().unwrap();
    assert!(status.success(), "kill -HUP failed");
}

/// `payhook --config FILE reload`.
fn reload_cli(dir: &TestDir, config: &Path) -> std::process::Output {
    dir.run(&["--config", config.to_str().unwrap(), "reload"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_reloads_under_load_lose_no_delivery_and_apply_added_removed_and_rotated_sources() {
    const WORKERS: usize = 6;
    const RELOADS: u64 = 20;
    let dir = TestDir::new();
    let server = Server::start_with(&dir, &hmac_source(ROTATING, &format!("[\"{OLD_SECRET}\"]"))).await;
    let base = std::fs::read_to_string(&server.config).unwrap();
    // The old secret is accepted for a few seconds after the rotation, then no longer.
    let not_after = payhook_server::now_ms() / 1000 + 6;
    let rotated = hmac_source(
        ROTATING,
        &format!(
            "[\"{NEW_SECRET}\", {{ value = \"{OLD_SECRET}\", not_after = \"{}\" }}]",
            payhook_core::time::rfc3339(not_after)
        ),
    );
    let base = base.replace(&hmac_source(ROTATING, &format!("[\"{OLD_SECRET}\"]")), &rotated);

    // Providers deliver to `payments` without pause, over several connections, through every reload.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut load = JoinSet::new();
    for w in 0..WORKERS {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        let (url, stop, ok, refused) = (server.webhook_url(), Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&refused));
        load.spawn(async move {
            let mut i = 0;
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let d = payment(&format!("evt-load-{w}-{i}"), &format!("ord-load-{w}-{i}"));
                match post(&client, &url, &d).await {
                    Ok((status, _)) if status.is_success() => ok.fetch_add(1, Ordering::Relaxed),
                    other => {
                        failures.push(format!("{}: {other:?}", d.event_id));
                        refused.fetch_add(1, Ordering::Relaxed)
                    }
                };
                i += 1;
            }
            failures
        });
    }

    for generation in 1..=RELOADS {
        // Odd generations serve `extra`, even ones do not; every one carries the rotation.
        let with_extra = generation % 2 == 1;
        let extra = if with_extra { hmac_source(EXTRA, &format!("[\"{EXTRA_SECRET}\"]")) } else { String::new() };
        std::fs::write(&server.config, format!("{base}{extra}")).unwrap();
        if generation % 2 == 0 {
            sighup(&server);
        } else {
            let out = reload_cli(&dir, &server.config);
            assert!(out.status.success(), "payhook reload failed: {}{}", text(&out.stdout), text(&out.stderr));
            let summary = text(&out.stdout);
            assert!(summary.contains(&format!("generation {generation}")), "{summary}");
            assert!(summary.contains(&format!("sources added    {EXTRA}")), "{summary}");
        }
        wait_for_generation(&server, generation).await;
        // Let deliveries run under this generation for a while, so that the next swap lands on requests in flight.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let d = payment_signed_with(EXTRA_SECRET, &format!("evt-extra-{generation}"));
        let (status, answer) = deliver(&server, EXTRA, &d).await;
        if with_extra {
            assert!(status.is_success(), "generation {generation}: the added source answered {status} {answer}");
        } else {
            assert_eq!(status, StatusCode::NOT_FOUND, "generation {generation}: the removed source answered {answer}");
        }
        if generation == 1 {
            // Rotated: both secrets are accepted until the old one's not_after.
            for (i, secret) in [NEW_SECRET, OLD_SECRET].into_iter().enumerate() {
                let d = payment_signed_with(secret, &format!("evt-rot-before-{i}"));
                let (status, answer) = deliver(&server, ROTATING, &d).await;
                assert!(status.is_success(), "{secret} before its not_after: {status} {answer}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    while let Some(r) = load.join_next().await {
        failures.extend(r.unwrap());
    }
    let (ok, refused) = (ok.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    eprintln!("reload under load: {ok} deliveries answered 2xx, {refused} not, across {RELOADS} reloads");
    assert_eq!(refused, 0, "deliveries to a source that stayed were not answered 2xx: {failures:?}");
    assert!(ok >= 100, "too little load to mean anything: {ok} deliveries");
    assert_eq!(metric(&server, "payhook_config_reloads_total{outcome=\"ok\"}").await, Some(RELOADS));
    // The counters of a source that stayed went on across every reload.
    let processed = metric(&server, "payhook_deliveries_total{source=\"payments\",outcome=\"deferred\"}").await;
    assert_eq!(processed, Some(ok as u64), "the counters of a source that stayed were reset by a reload");

    // Past its not_after, the old secret is refused without any reload; the new one still works.
    while payhook_server::now_ms() / 1000 <= not_after {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, answer) = deliver(&server, ROTATING, &payment_signed_with(OLD_SECRET, "evt-rot-after-old")).await;
    assert_eq!((status, answer["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("mismatch")), "{answer}");
    let (status, answer) = deliver(&server, ROTATING, &payment_signed_with(NEW_SECRET, "evt-rot-after-new")).await;
    assert!(status.is_success(), "the new secret after the rotation: {status} {answer}");
    let log = server.log();
    for secret in [SECRET, EXTRA_SECRET, OLD_SECRET, NEW_SECRET] {
        let line = log.lines().find(|l| l.contains(secret));
        assert!(line.is_none(), "a secret was logged: {line:?}");
    }
    server.stop();
}

#[tokio::test]
async fn a_file_that_fails_config_check_or_needs_a_restart_is_refused_and_the_old_configuration_serves_on() {
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let good = std::fs::read_to_string(&server.config).unwrap();
    let reload_api = || async {
        let resp = server.client.post(server.url("/v1/reload")).bearer_auth(API_TOKEN).send().await.unwrap();
        (resp.status(), resp.json::<Value>().await.unwrap())
    };

    // A file `config check` refuses: the same message, through the API, the CLI and SIGHUP.
    std::fs::write(&server.config, good.replace("scheme = \"hmac\"", "scheme = \"nope\"")).unwrap();
    let check = dir.run(&["--config", server.config.to_str().unwrap(), "config", "check"]);
    assert!(!check.status.success());
    let message = text(&check.stderr).trim().strip_prefix("payhook: ").expect("config check's message").to_owned();
    assert!(message.contains("sources[0] (payments)"), "{message}");
    let (status, answer) = reload_api().await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!((answer["error"].as_str(), answer["message"].as_str()), (Some("config_refused"), Some(&*message)));
    // `payhook reload` reads the same file for the address and the token: it refuses it before asking the server.
    let cli = reload_cli(&dir, &server.config);
    assert!(!cli.status.success());
    assert!(text(&cli.stderr).contains(&message), "{}", text(&cli.stderr));
    sighup(&server);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&server, "payhook_config_reloads_total{outcome=\"refused\"}").await != Some(2) {
        assert!(Instant::now() < deadline, "the SIGHUP was not refused:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let log = server.log();
    let line = log.lines().find(|l| l.contains("SIGHUP") && l.contains("refused")).expect("the refusal is logged");
    assert!(line.contains("ERROR") && line.contains("sources[0] (payments)"), "{line}");

    // A file that passes the check but moves the listener: refused as a whole, naming what needs a restart.
    let moved = good.replace(&format!("127.0.0.1:{}", server.port), &format!("127.0.0.1:{}", free_port()));
    let added = hmac_source(EXTRA, &format!("[\"{EXTRA_SECRET}\"]"));
    std::fs::write(&server.config, format!("{moved}{added}")).unwrap();
    let (status, answer) = reload_api().await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("server.listen changed, which takes effect only on restart"), "{message}");

    // Nothing of either file was applied: the first configuration serves on, and the added source does not exist.
    assert_eq!(metric(&server, "payhook_config_generation").await, Some(0));
    let (status, answer) =
        post(&server.client, &server.webhook_url(), &payment("evt-after-bad", "ord-1")).await.unwrap();
    assert!(status.is_success(), "{status} {answer}");
    let (status, _) = deliver(&server, EXTRA, &payment_signed_with(EXTRA_SECRET, "evt-extra")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Fixed, the same reload applies.
    std::fs::write(&server.config, format!("{good}{added}")).unwrap();
    let (status, answer) = reload_api().await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["sources_added"], serde_json::json!([EXTRA]));
    let (status, answer) = deliver(&server, EXTRA, &payment_signed_with(EXTRA_SECRET, "evt-extra-2")).await;
    assert!(status.is_success(), "{status} {answer}");
    server.stop();
}
