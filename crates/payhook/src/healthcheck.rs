//! `payhook healthcheck`: GET `/healthz` of the configured listener, exit 0 when it answers 200 within the time
//! limit, 1 otherwise. A container image without a shell or curl runs it as its `HEALTHCHECK`.

use crate::config::Config;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

#[derive(Debug, Args)]
pub struct HealthcheckArgs {
    /// payhook's base URL (default: the configured listen address; 0.0.0.0 and [::] are asked on loopback).
    #[arg(long)]
    pub url: Option<String>,
    /// How long the answer may take, connecting included.
    #[arg(long, default_value_t = 2000)]
    pub timeout_ms: u64,
}

/// Where a client on this machine reaches a listener bound to `listen`.
fn reachable(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port()),
        _ => listen,
    }
}

pub async fn run(cfg: &Config, args: HealthcheckArgs) -> Result<()> {
    let https = cfg.settings.listener.tls.is_some();
    let base = match &args.url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("{}://{}", if https { "https" } else { "http" }, reachable(cfg.listen)),
    };
    let url = format!("{base}/healthz");
    // The certificate is not checked: the question is whether this payhook answers, and a certificate for the
    // public name does not match the loopback address. Nothing secret is sent.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(args.timeout_ms.max(1)))
        .danger_accept_invalid_certs(true)
        .build()
        .context("cannot build the HTTP client")?;
    let resp = client.get(&url).send().await.with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    if !status.is_success() {
        bail!("GET {url} answered {status}");
    }
    println!("{url}: {status}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::reachable;

    #[test]
    fn a_listener_on_every_address_is_asked_on_loopback() {
        let at = |s: &str| s.parse::<std::net::SocketAddr>().expect("address");
        assert_eq!(reachable(at("0.0.0.0:8080")), at("127.0.0.1:8080"));
        assert_eq!(reachable(at("[::]:9000")), at("[::1]:9000"));
        assert_eq!(reachable(at("10.1.2.3:8080")), at("10.1.2.3:8080"));
    }
}
