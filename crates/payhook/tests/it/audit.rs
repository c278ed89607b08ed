//! Named tokens and the audit trail through the real binary: an operate token replays, an admin token reloads, the
//! operate token is refused a reload, and after a restart `GET /v1/audit` and `payhook audit` name each actor.

use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::Value;
use sha2::{Digest, Sha256};

const ONCALL: &str = "oncall-token-0123456789abcdefgh";
const PLATFORM: &str = "platform-token-0123456789abcdef";

fn tokens() -> String {
    format!(
        "\n[[server.tokens]]\nname = \"oncall\"\nscopes = [\"operate\"]\ntoken_env = \"PAYHOOK_TOKEN_ONCALL\"\n\
         [[server.tokens]]\nname = \"platform\"\nscopes = [\"admin\"]\ntoken_sha256 = \"{}\"\n",
        hex::encode(Sha256::digest(PLATFORM.as_bytes()))
    )
}

async fn start(dir: &TestDir) -> Server {
    let extra = tokens();
    Server::start_edited_with_env(dir, |c| format!("{c}{extra}"), &[("PAYHOOK_TOKEN_ONCALL", ONCALL)]).await
}

async fn call(server: &Server, method: reqwest::Method, path: &str, token: &str) -> (StatusCode, Value) {
    let resp = server.client.request(method, server.url(path)).bearer_auth(token).send().await.unwrap();
    (resp.status(), resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_audit_trail_names_who_replayed_and_who_reloaded_also_after_a_restart() {
    use reqwest::Method;
    let dir = TestDir::new();
    let server = start(&dir).await;
    // A verified body the format cannot read: a dead letter under a derived id.
    let body = b"not an event".to_vec();
    let headers = signer().sign(&body, now_secs(), "msg-dead");
    let (status, answer) =
        post(&server.client, &server.webhook_url(), &Signed { event_id: String::new(), body, headers }).await.unwrap();
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("dead_lettered")), "{answer}");
    let dead = answer["event_id"].as_str().unwrap().to_owned();

    let replay = format!("/v1/events/{SOURCE}/{dead}/replay");
    let (status, answer) = call(&server, Method::POST, &replay, ONCALL).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, answer) = call(&server, Method::POST, "/v1/reload", ONCALL).await;
    assert_eq!((status, answer["scope_needed"].as_str()), (StatusCode::FORBIDDEN, Some("admin")), "{answer}");
    // `payhook reload` with a named admin token, read from the variable `--token-env` names.
    let config = server.config.to_str().unwrap().to_owned();
    let reload = |var: &str, value: &str| {
        let mut cmd = dir.payhook();
        cmd.args(["--config", &config, "reload", "--token-env", "RELOAD_TOKEN"]).env(var, value);
        cmd.env("PAYHOOK_TOKEN_ONCALL", ONCALL);
        cmd.stdin(std::process::Stdio::null()).output().unwrap()
    };
    let out = reload("RELOAD_TOKEN", PLATFORM);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = reload("OTHER", PLATFORM);
    assert!(String::from_utf8_lossy(&out.stderr).contains("RELOAD_TOKEN is not set"), "{out:?}");
    let (status, _) = call(&server, Method::GET, "/v1/audit", ONCALL).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "the trail is the admin's");
    assert!(server.log().contains("payhook::audit"), "each entry is a log line:\n{}", server.log());
    server.stop();

    let server = start(&dir).await;
    let (status, answer) = call(&server, Method::GET, "/v1/audit", PLATFORM).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let entries: Vec<(&str, &str, &str, &str)> = answer["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap_or("");
            (field("actor"), field("action"), field("target"), field("outcome"))
        })
        .collect();
    let target = format!("{SOURCE}/{dead}");
    assert_eq!(
        entries,
        [
            ("oncall", "refused", "GET /v1/audit", "refused"),
            ("platform", "reload", "", "ok"),
            ("oncall", "refused", "POST /v1/reload", "refused"),
            ("oncall", "replay", target.as_str(), "dead_lettered"),
        ],
        "{answer}"
    );
    let reload = &answer["entries"][1];
    assert_eq!(reload["detail"]["generation"], 1, "the reload's report: {reload}");
    assert!(reload["address"].as_str().is_some_and(|a| a.starts_with("127.0.0.1")), "{reload}");
    server.stop();

    // The command line reads the same trail from the database.
    let config = dir.path().join("audit.toml");
    std::fs::write(&config, format!("[storage]\nurl = \"sqlite://{DB_FILE}\"\n")).unwrap();
    let out = dir.run(&["--config", config.to_str().unwrap(), "audit", "--actor", "oncall", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let actions: Vec<&str> =
        listed["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["refused", "refused", "replay"]);
}
