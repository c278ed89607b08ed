//! The `[[sinks]]` tables: where outbox rows go. `type = "http"` (the default) POSTs them; `type = "nats"` publishes
//! them to JetStream, `type = "redis"` adds them to a Redis stream and `type = "amqp"` publishes them to RabbitMQ.

use super::*;
use payhook_core::format::Accepted;
use payhook_server::settings::SinkSettings;
use payhook_server::{SinkRate, SinkTransport};
use payhook_store::{Condition, KeyOrder, OutboxKind, SinkFilter};
use std::collections::BTreeMap;

/// How a sink's rows travel, as written in the file.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum SinkType {
    #[default]
    Http,
    Nats,
    Redis,
    Amqp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSink {
    pub(super) name: String,
    #[serde(default, rename = "type")]
    kind: SinkType,
    url: String,
    kinds: Vec<String>,
    secret: Option<String>,
    secret_env: Option<String>,
    /// `nats`: the subject template.
    subject: Option<String>,
    /// `redis`: the stream key template.
    stream: Option<String>,
    /// `redis`: how long a published outbox id is remembered, in seconds.
    dedup_window_secs: Option<u64>,
    /// `amqp`: the exchange (default: the default exchange, `""`).
    exchange: Option<String>,
    /// `amqp`: the routing key template.
    routing_key: Option<String>,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    #[serde(default = "default_max_in_flight")]
    max_in_flight: usize,
    /// `key` (the default): the rows of one ordering key in commit order; `none`: in no particular order.
    #[serde(default)]
    ordering: Ordering,
    /// With `ordering = "key"`: what a dead row does to its key's later rows (`hold`, the default, or `skip`).
    on_dead: Option<OnDead>,
    /// Attempts per second on average; unset: no rate, only `max_in_flight`.
    rate_per_second: Option<f64>,
    /// With `rate_per_second`: attempts at once after a quiet spell (default: `max_in_flight`).
    burst: Option<u32>,
    /// Which documents of its kinds it takes, by their fields (`{ "/source" = "stripe" }`); unset: all of them.
    #[serde(default)]
    when: BTreeMap<String, Accepted>,
}

/// `ordering`, as written in the file.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum Ordering {
    #[default]
    Key,
    None,
}

/// `on_dead`, as written in the file.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum OnDead {
    Hold,
    Skip,
}

fn default_max_in_flight() -> usize {
    4
}

/// A Redis sink remembers a published outbox id for a day unless told otherwise: far longer than any lease.
const DEFAULT_REDIS_DEDUP_WINDOW_SECS: u64 = 86_400;

/// Refuses a TLS URL scheme the broker's client is built without: redis-rs has no TLS feature here (`rediss://`
/// failed every row at its first connect) and lapin none either (`amqps://`). NATS's `tls://` is served: async-nats
/// always carries rustls, with the system's roots. Names the key and the way out, never the URL.
fn refuse_tls_the_client_lacks(kind: SinkType, url: &str) -> Result<()> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme.trim().to_ascii_lowercase());
    let broker = match (kind, scheme.as_deref()) {
        (SinkType::Redis, Some("rediss")) => "Redis (rediss://)",
        (SinkType::Amqp, Some("amqps")) => "RabbitMQ (amqps://)",
        _ => return Ok(()),
    };
    bail!(
        "url: TLS to {broker} is not supported; connect with a plain URL to a TLS-terminating proxy on localhost \
         (such as stunnel or spiped) that forwards to the broker"
    )
}

pub(super) fn resolve_sink(s: RawSink) -> Result<SinkSettings> {
    if s.name.is_empty() || s.name.starts_with('_') {
        bail!("name: must be non-empty and must not start with '_' (reserved)");
    }
    let only = |key: &str, present: bool, kind: &str| -> Result<()> {
        if present {
            bail!("{key}: only a type = \"{kind}\" sink takes this key");
        }
        Ok(())
    };
    only("subject", s.subject.is_some() && s.kind != SinkType::Nats, "nats")?;
    only("stream", s.stream.is_some() && s.kind != SinkType::Redis, "redis")?;
    only("dedup_window_secs", s.dedup_window_secs.is_some() && s.kind != SinkType::Redis, "redis")?;
    only("exchange", s.exchange.is_some() && s.kind != SinkType::Amqp, "amqp")?;
    only("routing_key", s.routing_key.is_some() && s.kind != SinkType::Amqp, "amqp")?;
    only("secret", (s.secret.is_some() || s.secret_env.is_some()) && s.kind != SinkType::Http, "http")?;
    refuse_tls_the_client_lacks(s.kind, &s.url)?;
    let order = match (s.ordering, s.on_dead) {
        (Ordering::Key, None | Some(OnDead::Hold)) => KeyOrder::Hold,
        (Ordering::Key, Some(OnDead::Skip)) => KeyOrder::Skip,
        (Ordering::None, None) => KeyOrder::Unordered,
        (Ordering::None, Some(_)) => {
            bail!("on_dead: only a sink with ordering = \"key\" holds or skips a dead row's key")
        }
    };
    let rate = match (s.rate_per_second, s.burst) {
        (None, None) => None,
        (None, Some(_)) => bail!("burst: only a sink with rate_per_second takes a burst"),
        (Some(per_second), _) if !(per_second.is_finite() && per_second > 0.0) => {
            bail!("rate_per_second: must be a positive number of attempts per second")
        }
        (Some(_), Some(0)) => bail!("burst: must be at least 1"),
        (Some(per_second), burst) => Some(SinkRate {
            per_second,
            burst: burst.unwrap_or(u32::try_from(s.max_in_flight.max(1)).unwrap_or(u32::MAX)),
        }),
    };
    // Never echo the URL: its path, query or user info may hold the sink's token or the broker's password.
    let (url, transport) = match s.kind {
        SinkType::Http => (SecretUrl::parse(&s.url).context("url")?, SinkTransport::Http),
        SinkType::Nats => {
            let url = SecretUrl::parse_broker(&s.url, SinkTransport::NATS_SCHEMES).context("url")?;
            let subject = s.subject.context("subject: a nats sink needs a subject template")?;
            if subject.is_empty() || subject.contains(char::is_whitespace) {
                bail!("subject: must be non-empty and without whitespace");
            }
            (url, SinkTransport::Nats { subject })
        }
        SinkType::Redis => {
            let url = SecretUrl::parse_broker(&s.url, SinkTransport::REDIS_SCHEMES).context("url")?;
            let stream = s.stream.context("stream: a redis sink needs a stream key template")?;
            if stream.is_empty() {
                bail!("stream: must be non-empty");
            }
            // The keys the script keeps beside the streams start with '#', which no filled-in value holds.
            if stream.contains('#') {
                bail!("stream: must not contain '#' (payhook's own keys beside the streams start with it)");
            }
            let dedup_window_secs = s.dedup_window_secs.unwrap_or(DEFAULT_REDIS_DEDUP_WINDOW_SECS);
            if dedup_window_secs == 0 {
                bail!("dedup_window_secs: must be at least 1");
            }
            (url, SinkTransport::Redis { stream, dedup_window_secs })
        }
        SinkType::Amqp => {
            let url = SecretUrl::parse_broker(&s.url, SinkTransport::AMQP_SCHEMES).context("url")?;
            let routing_key = s.routing_key.context("routing_key: an amqp sink needs a routing key template")?;
            if routing_key.len() > 255 {
                bail!("routing_key: at most 255 bytes");
            }
            (url, SinkTransport::Amqp { exchange: s.exchange.unwrap_or_default(), routing_key })
        }
    };
    if s.kinds.is_empty() {
        bail!("kinds: list the outbox kinds this sink takes (order.paid, order.refunded, …) or \"*\"");
    }
    if let Some(unknown) = s.kinds.iter().find(|k| *k != "*" && payhook_store::OutboxKind::parse(k).is_none()) {
        bail!(
            "kinds: {unknown:?} is not an outbox kind (one of {}, or \"*\"): a sink listening for it would never get a row",
            payhook_store::OutboxKind::NAMES.join(", ")
        );
    }
    let secret = match (s.secret, &s.secret_env) {
        (Some(secret), _) => Some(secret),
        (None, Some(var)) => {
            Some(std::env::var(var).with_context(|| format!("secret_env: environment variable {var} is not set"))?)
        }
        (None, None) => None,
    };
    let signer = secret
        .map(|secret| Verifier::new(Scheme::StandardWebhooks, &[Secret::new(secret)], 300))
        .transpose()
        .context("secret: a Standard Webhooks secret (whsec_ followed by base64)")?;
    let filter = SinkFilter {
        conditions: s
            .when
            .into_iter()
            .map(|(pointer, accepted)| {
                let accepted = match accepted {
                    Accepted::One(one) => vec![one],
                    Accepted::Any(any) => any,
                };
                Condition { pointer, accepted }
            })
            .collect(),
    };
    Ok(SinkSettings {
        name: s.name,
        filter,
        url,
        kinds: s.kinds,
        signer,
        timeout_ms: s.timeout_ms.max(1),
        max_in_flight: s.max_in_flight.max(1),
        transport,
        order,
        rate,
    })
}

/// The kinds of document a sink receives: those its `kinds` name (`*`: every kind routed by kind, which leaves out
/// forwarded events and alerts), and forwarded events when a source forwards to it.
pub(super) fn kinds_taken(sink: &SinkSettings, forwarded: bool) -> Vec<OutboxKind> {
    let mut kinds: Vec<OutboxKind> = if sink.kinds.iter().any(|k| k == "*") {
        OutboxKind::ALL.into_iter().filter(|k| !matches!(k, OutboxKind::EventReceived | OutboxKind::Alert)).collect()
    } else {
        sink.kinds.iter().filter_map(|k| OutboxKind::parse(k)).collect()
    };
    if forwarded && !kinds.contains(&OutboxKind::EventReceived) {
        kinds.push(OutboxKind::EventReceived);
    }
    kinds
}
