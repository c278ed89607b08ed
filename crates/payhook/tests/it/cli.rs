//! The other commands: `send`, `orders import`, `config check|print-default`.

use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::Value;

#[tokio::test]
async fn payhook_send_delivers_a_signed_event_and_repeat_is_deduplicated() {
    let dir = TestDir::new();
    let server = Server::start(&dir).await;
    let (status, answer) = server.register_order("o1", AMOUNT).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");

    let config = server.config.to_str().unwrap();
    let out = dir.run(&["--config", config, "send", "--source", SOURCE, "--order", "o1", "--repeat", "3"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "payhook send failed: {}\n{stdout}{}", out.status, text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    // `#N EVENT_ID STATUS ANSWER`: the same signed event three times, answered 200 each time.
    let event_id = lines[0].split_whitespace().nth(1).unwrap_or("");
    assert!(event_id.starts_with("evt_"), "{stdout}");
    let expected = ["processed", "duplicate", "duplicate"];
    for (i, (line, outcome_expected)) in lines.iter().zip(expected).enumerate() {
        let mut parts = line.splitn(5, ' ');
        assert_eq!(parts.next(), Some(format!("#{}", i + 1).as_str()), "{stdout}");
        assert_eq!(parts.next(), Some(event_id), "{stdout}");
        assert_eq!(parts.next(), Some("200"), "{stdout}");
        let answer: Value = serde_json::from_str(parts.nth(1).unwrap_or("")).unwrap_or(Value::Null);
        assert_eq!(outcome(&answer), outcome_expected, "line {}: {line}", i + 1);
    }

    let (_, order) = server.order("o1").await;
    assert_eq!(order["status"], "paid", "{order}");
    assert_eq!(paid_receipts(&order), 1, "{order}");

    // An unknown source is refused before anything is sent, naming the configured ones.
    let out = dir.run(&["--config", config, "send", "--source", "nope", "--order", "o1"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("\"nope\"") && stderr.contains(SOURCE), "{stderr}");

    // Signed with a secret the server does not know: answered 401, and `send` says so with its exit status.
    let wrong = std::fs::read_to_string(config).unwrap().replace(SECRET, "not-the-configured-secret");
    let wrong = dir.write("wrong-secret.toml", &wrong);
    let out = dir.run(&["--config", wrong.to_str().unwrap(), "send", "--source", SOURCE, "--order", "o1"]);
    assert!(!out.status.success(), "a refused delivery must fail the command:\n{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(" 401 "), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("401"), "{}", text(&out.stderr));
    server.stop();
}

#[tokio::test]
async fn orders_import_reads_csv_and_json_lines() {
    let dir = TestDir::new();
    // The server is not running: the importer writes to the configured database itself. A short writer queue
    // (the default holds 4096) shows that a file longer than the queue is imported, not refused as overload.
    let config =
        dir.write("payhook.toml", &config_toml(free_port()).replace("[storage]\n", "[storage]\nqueue_depth = 16\n"));
    let config = config.to_str().unwrap();
    dir.write("x.csv", "id,amount,currency\nc-1,100,usd\nc-2,250,eur\nc-3,1999,usd\n");
    dir.write(
        "y.jsonl",
        "{\"id\":\"j-1\",\"amount\":500,\"currency\":\"usd\"}\n\n{\"id\":\"j-2\",\"amount\":7,\"currency\":\"gbp\"}\n",
    );
    let import = |file: &str| dir.run(&["--config", config, "orders", "import", file]);

    let out = import("x.csv");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("3 created, 0 already registered, 0 conflicts"), "{}", text(&out.stdout));
    let out = import("y.jsonl");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("2 created"), "{}", text(&out.stdout));
    let many: String =
        (0..1000).map(|i| format!("{{\"id\":\"m-{i}\",\"amount\":{i},\"currency\":\"usd\"}}\n")).collect();
    dir.write("many.jsonl", &many);
    let out = import("many.jsonl");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("1000 created"), "{}", text(&out.stdout));
    // Importing the same file again changes nothing.
    let out = import("x.csv");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("0 created, 3 already registered"), "{}", text(&out.stdout));

    // The same id with another amount is a conflict, named; the stored order is kept.
    dir.write("conflict.csv", "id,amount,currency\nc-9,10,usd\nc-2,999,eur\n");
    let out = import("conflict.csv");
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a conflicting import succeeded: {}", text(&out.stdout));
    assert!(stderr.contains("c-2"), "the conflicting order is not named: {stderr}");
    assert!(!stderr.contains("c-9"), "a non-conflicting order is named: {stderr}");

    // A malformed line is named, and nothing of that file is imported.
    dir.write(
        "bad.jsonl",
        "{\"id\":\"b-1\",\"amount\":1,\"currency\":\"usd\"}\n{\"id\":\"b-2\",\"amount\":2,\"currency\":\"usd\"}\n{\"id\":\"b-3\",\"amount\":\"three\"\n",
    );
    let out = import("bad.jsonl");
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a malformed file was imported: {}", text(&out.stdout));
    assert!(stderr.contains("bad.jsonl") && stderr.contains("line 3"), "the bad line is not named: {stderr}");
    // A CSV record with an invalid value is named by record number.
    dir.write("bad.csv", "id,amount,currency\nd-1,1,usd\nd-2,-5,usd\n");
    let out = import("bad.csv");
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "an invalid CSV record was imported: {}", text(&out.stdout));
    assert!(stderr.contains("bad.csv") && stderr.contains("record 2"), "the bad record is not named: {stderr}");

    let server = Server::start(&dir).await;
    for (id, amount, currency) in [("c-1", 100, "usd"), ("c-2", 250, "eur"), ("c-3", 1999, "usd"), ("j-2", 7, "gbp")] {
        let (status, order) = server.order(id).await;
        assert_eq!(status, StatusCode::OK, "{id}: {order}");
        assert_eq!(
            (order["status"].as_str(), order["amount"].as_i64(), order["currency"].as_str()),
            (Some("pending"), Some(amount), Some(currency)),
            "{id}: {order}"
        );
    }
    // c-9 came from the conflicting file but was itself fine: it was registered.
    assert_eq!(server.order("c-9").await.0, StatusCode::OK);
    let (_, order) = server.order("m-999").await;
    assert_eq!(order["amount"], 999, "{order}");
    for id in ["b-1", "b-2", "d-1"] {
        let (status, order) = server.order(id).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id} from a malformed file was imported: {order}");
    }
    // Imported orders are real orders: a payment applies.
    let (status, answer) = post(&server.client, &server.webhook_url(), &payment("evt-c3", "c-3")).await.unwrap();
    assert_eq!((status, outcome(&answer)), (StatusCode::OK, "processed"), "{answer}");
    server.stop();
    let db = dir.open_db();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders WHERE id LIKE 'm-%'"), 1000);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM orders"), 1000 + 6);
}

#[test]
fn config_check_names_the_file_line_and_key_of_a_problem() {
    let dir = TestDir::new();
    let check = |file: &str| dir.run(&["--config", file, "config", "check"]);

    // A TOML syntax error: the file and the line.
    let good = config_toml(8099);
    let broken = good.replace("api_token = ", "api_token ");
    let broken_line = broken.lines().position(|l| l.starts_with("api_token ")).unwrap() + 1;
    let path = dir.write("broken.toml", &broken);
    let out = check("broken.toml");
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a syntax error passed the check: {}", text(&out.stdout));
    assert!(stderr.contains("broken.toml"), "the file is not named: {stderr}");
    assert!(stderr.contains(&format!("line {broken_line}")), "line {broken_line} is not named: {stderr}");
    drop(path);

    // An unknown key: the key.
    dir.write("unknown.toml", &good.replace("[storage]\n", "[storage]\nbatch_maxx = 3\n"));
    let out = check("unknown.toml");
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "an unknown key passed the check: {}", text(&out.stdout));
    assert!(stderr.contains("unknown.toml") && stderr.contains("batch_maxx"), "the key is not named: {stderr}");

    // A bad value: the dotted key.
    dir.write("value.toml", &good.replace("[storage]\n", "[storage]\nfsync = \"sometimes\"\n"));
    let out = check("value.toml");
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a bad value passed the check: {}", text(&out.stdout));
    assert!(stderr.contains("storage.fsync") && stderr.contains("sometimes"), "the key is not named: {stderr}");

    // A good file: exit 0, the sources listed.
    dir.write("good.toml", &good);
    let out = check("good.toml");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "a good config failed the check: {}", text(&out.stderr));
    assert!(stdout.contains("good.toml: ok"), "{stdout}");
    assert!(stdout.contains("127.0.0.1:8099") && stdout.contains("token set"), "{stdout}");
    let source_line = stdout.lines().find(|l| l.trim_start().starts_with("source")).unwrap_or("");
    assert!(source_line.contains(SOURCE) && source_line.contains("/webhooks/payments"), "{stdout}");

    // A sink's filter is shown with it; one on a field no document of its kinds has is refused with its line.
    let sink = "\n[[sinks]]\nname = \"shop\"\nurl = \"https://shop.example/in\"\nkinds = [\"order.paid\"]\n";
    dir.write("filtered.toml", &format!("{good}{sink}when = {{ \"/source\" = \"{SOURCE}\" }}\n"));
    let out = check("filtered.toml");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sink_line = stdout.lines().find(|l| l.trim_start().starts_with("sink")).unwrap_or("");
    assert!(sink_line.ends_with(&format!("(order.paid) when /source = \"{SOURCE}\"")), "{stdout}");
    let bad = format!("{good}{sink}when = {{ \"/amount\" = \"100\" }}\n");
    let when_line = bad.lines().position(|l| l.starts_with("when")).unwrap() + 1;
    dir.write("unfiltered.toml", &bad);
    let stderr = text(&check("unfiltered.toml").stderr);
    assert!(stderr.contains(&format!("unfiltered.toml:{when_line}: sinks[0] (shop): when: /amount")), "{stderr}");

    // The documented defaults, byte for byte, and valid TOML that passes the check itself.
    let out = dir.run(&["config", "print-default"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let file = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/payhook.default.toml")).unwrap();
    assert_eq!(printed, file);
    let parsed: toml::Table = toml::from_str(&printed).expect("print-default is TOML");
    assert_eq!(parsed, toml::from_str::<toml::Table>(&file).unwrap());
    assert!(parsed.contains_key("server") && parsed.contains_key("storage"), "{parsed:?}");
    dir.write("defaults.toml", &printed);
    let out = check("defaults.toml");
    assert!(out.status.success(), "the printed defaults fail the check: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no token"), "{}", text(&out.stdout));
}

/// `payhook send` speaks each provider's dialect: Shopify's topic headers, Adyen's signature inside the body (and
/// its `[accepted]` answer), RFC 9421 signatures over the request with a nonce; all configured from TOML.
#[tokio::test]
async fn payhook_send_signs_the_way_each_configured_provider_does() {
    let dir = TestDir::new();
    let extra = r#"
[[sources]]
name = "shopify"
scheme = "shopify"
format = "shopify"
secrets = ["shpss_cli_secret"]

[[sources]]
name = "adyen"
scheme = "adyen"
format = "adyen"
secrets = ["DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"]

[[sources]]
name = "signed"
scheme = "http-message-signatures"
format = "generic"
secrets = ["hmac-sha256:cli-key:c2VjcmV0LWtleS1vZi10aGUtcHJvdmlkZXItMDEyMzQ1Njc4OQ=="]
"#;
    let server = Server::start_with(&dir, extra).await;
    let config = server.config.to_str().unwrap();
    for (source, order, expected) in [
        ("shopify", "1001", "\"processed\""),
        ("adyen", "o-adyen", "[accepted]"),
        ("signed", "o-signed", "\"processed\""),
    ] {
        let (status, answer) = server.register_order(order, AMOUNT).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let out = dir.run(&["--config", config, "send", "--source", source, "--order", order, "--repeat", "2"]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "send to {source}: {}\n{stdout}{}", out.status, text(&out.stderr));
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{stdout}");
        assert!(lines.iter().all(|l| l.contains(" 200 OK ")), "{source}: {stdout}");
        assert!(lines[0].contains(expected), "{source}: {stdout}");
        let (_, view) = server.order(order).await;
        assert_eq!(view["status"], "paid", "{source}: {view}\n{}", server.log());
        assert_eq!(paid_receipts(&view), 1, "{source}: {view}");
    }
}

/// `payhook demo --exit` plays every case to the end on a fresh temporary database and explains each outcome.
#[test]
fn payhook_demo_runs_to_completion_and_explains_each_case() {
    let dir = TestDir::new();
    let out = dir.run(&["demo", "--listen", "127.0.0.1:0", "--exit"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "payhook demo failed: {}\n{stdout}{}", out.status, text(&out.stderr));
    for expected in [
        "→ 200 processed\n   → 200 duplicate",
        "{\"duplicate\": 15, \"processed\": 1}",
        "order ord_3 is refunded",
        "200 deferred",
        "order ord_4 is paid",
        "401 mismatch",
        "401 stale",
        "200 dead_lettered",
        "ord_1  paid      1",
        "ord_3  refunded  0",
        "ord_4  paid      1",
    ] {
        assert!(stdout.contains(expected), "the demo's output lacks {expected:?}:\n{stdout}");
    }
    assert_eq!(stdout.matches("   why: ").count(), 8, "every case says why:\n{stdout}");
    assert!(stdout.contains("attempts per row") && !stdout.contains("\"error\""), "{stdout}");
}

/// A token from `openssl rand -hex 20`: 40 characters.
const ENV_TOKEN: &str = "5f1c0e9a7b3d2c4e6f8a0b1c2d3e4f5a6b7c8d9e";

/// The standard configuration with its inline token taken out, so that `server.api_token_env` decides.
fn without_inline_token(config: String) -> String {
    config.lines().filter(|l| !l.starts_with("api_token =")).map(|l| format!("{l}\n")).collect()
}

#[tokio::test]
async fn the_api_token_from_the_environment_is_trimmed_and_a_short_or_missing_one_is_refused() {
    let dir = TestDir::new();
    dir.write("env.toml", &without_inline_token(config_toml(free_port())));
    let run = |args: &[&str], token: Option<&str>| {
        let mut cmd = dir.payhook();
        if let Some(token) = token {
            cmd.env("PAYHOOK_API_TOKEN", token);
        }
        cmd.args(["--config", "env.toml"]).args(args).stdin(std::process::Stdio::null()).output().unwrap()
    };

    // Ten characters: `config check` and `serve` both refuse, naming the setting and never the token.
    for args in [&["config", "check"][..], &["serve"]] {
        let out = run(args, Some("0123456789"));
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted a 10-character token: {}", text(&out.stdout));
        assert!(
            stderr.contains("server.api_token_env (PAYHOOK_API_TOKEN): the API token must be at least 24 characters"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("0123456789"), "the token is echoed: {stderr}");
    }

    // With a trailing newline (as `$(cat token-file)` in some shells, or a secrets mount, leaves it).
    let out = run(&["config", "check"], Some(&format!("{ENV_TOKEN}\n")));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("token set (from PAYHOOK_API_TOKEN, 40 characters)"), "{stdout}");
    assert!(!stdout.contains(ENV_TOKEN), "config check prints the token: {stdout}");
    let server =
        Server::start_edited_with_env(&dir, without_inline_token, &[("PAYHOOK_API_TOKEN", &format!("{ENV_TOKEN}\n"))])
            .await;
    let resp = server.client.get(server.url("/v1/orders/ord_none")).bearer_auth(ENV_TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND, "the trimmed token is not accepted: {}", server.log());
    drop(server);

    // A variable that is named but unset is an error; the default one unset closes the API with a warning.
    let unset = without_inline_token(config_toml(8099));
    dir.write("unset.toml", &unset.replacen("[server]\n", "[server]\napi_token_env = \"SOME_UNSET_VAR\"\n", 1));
    let out = dir.run(&["--config", "unset.toml", "config", "check"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "an unset variable passed: {}", text(&out.stdout));
    assert!(
        stderr.contains("server.api_token_env (SOME_UNSET_VAR): the environment variable SOME_UNSET_VAR is not set"),
        "{stderr}"
    );
    let out = run(&["config", "check"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no token: /v1 and the dashboard are closed (PAYHOOK_API_TOKEN is not set)"));
    let server = Server::start_edited(&dir, without_inline_token).await;
    let resp = server.client.get(server.url("/v1/orders/ord_none")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(
        server.log().contains("no API token is configured") && server.log().contains("(set PAYHOOK_API_TOKEN)"),
        "{}",
        server.log()
    );
}
