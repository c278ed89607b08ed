//! `payhook reload`: asks the running server to read its configuration file again (`POST /v1/reload`).

use crate::config::Config;
use anyhow::{Context, Result, bail};
use clap::Args;

#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// payhook's base URL (default: the configured listen address).
    #[arg(long)]
    pub url: Option<String>,
    /// Print the server's JSON answer instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// The environment variable that holds an admin token (one of `[[server.tokens]]`) to reload with, instead
    /// of `server.api_token`. A variable, not the token: a command line is visible to every user of the machine.
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
}

pub async fn run(cfg: &Config, args: ReloadArgs) -> Result<()> {
    let named = match &args.token_env {
        Some(var) => match std::env::var(var) {
            Ok(token) if !token.trim().is_empty() => Some(token),
            _ => bail!("--token-env: environment variable {var} is not set or empty"),
        },
        None => None,
    };
    let configured = cfg.settings.api_token.as_ref().map(|t| t.expose().to_owned());
    let Some(token) = named.or(configured).filter(|t| !t.trim().is_empty()) else {
        bail!(
            "no API token is configured: give --token-env VAR (a variable holding an admin token), set \
             server.api_token_env (or server.api_token), or send SIGHUP instead"
        );
    };
    // With `[server.tls]`, the configured address over HTTPS; its certificate must verify against the public
    // roots (else give `--url` with the name the certificate carries, or send SIGHUP).
    let base = match (&args.url, &cfg.settings.listener.tls) {
        (None, Some(_)) => format!("https://{}", cfg.listen),
        _ => cfg.base_url(args.url.as_deref()),
    };
    let url = format!("{base}/v1/reload");
    let client = reqwest::Client::builder().build().context("cannot build the HTTP client")?;
    let answer =
        client.post(&url).bearer_auth(token.trim()).send().await.with_context(|| format!("cannot reach {url}"))?;
    let status = answer.status();
    let body: serde_json::Value = answer.json().await.with_context(|| format!("{url} answered {status}, not JSON"))?;
    if !status.is_success() {
        let message = body["message"].as_str().unwrap_or("(no message)");
        bail!("reload refused ({status}); the configuration in force is unchanged:\n{message}");
    }
    if args.json {
        println!("{body}");
        return Ok(());
    }
    println!("reloaded: generation {}", body["generation"]);
    let mut unchanged = true;
    for (key, label) in [
        ("sources_added", "sources added"),
        ("sources_removed", "sources removed"),
        ("sources_changed", "sources changed"),
        ("sinks_added", "sinks added"),
        ("sinks_removed", "sinks removed"),
        ("sinks_changed", "sinks changed"),
    ] {
        let names: Vec<&str> = body[key].as_array().into_iter().flatten().filter_map(|n| n.as_str()).collect();
        if !names.is_empty() {
            unchanged = false;
            println!("  {label:<16} {}", names.join(", "));
        }
    }
    if body["alerts_changed"] == serde_json::Value::Bool(true) {
        unchanged = false;
        println!("  alerts changed");
    }
    if unchanged {
        println!("  nothing changed");
    }
    Ok(())
}
