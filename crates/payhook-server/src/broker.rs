//! Broker sinks: the send of one outbox row to NATS JetStream, Redis Streams or RabbitMQ, and what acknowledges it.
//!
//! The dispatcher owns everything else (leases, backoff, dead rows, alerts, metrics), so a broker sink only
//! publishes and answers [`Published`] or a [`BrokerError`]; every error is a failed attempt that the retry policy
//! reschedules. Each sink holds one long-lived connection, opened on its first send: async-nats reconnects on its
//! own with backoff, redis-rs's `ConnectionManager` reconnects on the next command after a broken one, and a RabbitMQ
//! sink opens a new connection and confirm channel on the attempt after it finds them closed (the retry policy is
//! its backoff). A broker
//! that is down leaves the rows pending until it is back or their budget is spent.
//!
//! Every publish carries the outbox id, which lets the broker drop a re-publish (after a dispatcher died between the
//! broker's ack and its record): JetStream by `Nats-Msg-Id` within the stream's duplicate window, Redis by a script
//! that adds a stream entry only for an id it has not added within `dedup_window_secs`. RabbitMQ cannot drop it: the
//! copy carries the same `message_id`, for the consumer to recognise.
//!
//! A broker's URL may hold its password: errors are rendered with the full URL replaced by its redacted form.

use crate::secret_url::SecretUrl;
use crate::settings::SinkTransport;
use payhook_store::OutboxJob;
use std::time::Duration;
use tokio::sync::OnceCell;

/// The header JetStream deduplicates on.
const NATS_MSG_ID: &str = "Nats-Msg-Id";

/// Adds one stream entry for an outbox id it has not added within the window; answers the entry's id, or nil for a
/// re-publish. The entry is added before the id is recorded, so an `XADD` that fails records nothing and the retry
/// adds it; a Redis script runs atomically, so a re-publish cannot slip between the check and the add.
const REDIS_XADD_ONCE: &str = r"
if redis.call('EXISTS', KEYS[2]) == 1 then
  return false
end
local entry = redis.call('XADD', KEYS[1], '*', 'id', ARGV[1], 'kind', ARGV[2], 'payload', ARGV[3])
redis.call('SET', KEYS[2], entry, 'EX', ARGV[4])
return entry
";

/// What the broker answered to an acknowledged publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    /// Stored for the first time.
    New,
    /// The broker had it already (same outbox id) and dropped this copy.
    Duplicate,
}

/// Why a publish was not acknowledged. The texts never hold the broker's full URL.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BrokerError {
    /// No connection to the broker.
    #[error("cannot connect to {url}: {cause}")]
    Connect { url: String, cause: String },
    /// The broker refused or failed the publish.
    #[error("{url} did not take the message: {cause}")]
    Publish { url: String, cause: String },
    /// No acknowledgement within the sink's timeout.
    #[error("no acknowledgement from {url} within {timeout_ms} ms")]
    Timeout { url: String, timeout_ms: u128 },
}

/// One broker sink's connection and destination.
#[derive(Debug)]
pub(crate) enum Broker {
    /// NATS JetStream.
    Nats(NatsSink),
    /// Redis Streams.
    Redis(RedisSink),
    /// RabbitMQ.
    Amqp(AmqpSink),
}

impl Broker {
    /// The broker behind a sink's transport, or `None` for an HTTP sink.
    pub(crate) fn for_sink(transport: &SinkTransport, url: &SecretUrl, sink: &str) -> Option<Self> {
        match transport {
            SinkTransport::Http => None,
            SinkTransport::Nats { subject } => Some(Self::Nats(NatsSink {
                url: url.clone(),
                sink: sink.to_owned(),
                subject: subject.clone(),
                context: OnceCell::new(),
            })),
            SinkTransport::Redis { stream, dedup_window_secs } => Some(Self::Redis(RedisSink {
                url: url.clone(),
                sink: sink.to_owned(),
                stream: stream.clone(),
                dedup_window_secs: (*dedup_window_secs).max(1),
                connection: OnceCell::new(),
                script: redis::Script::new(REDIS_XADD_ONCE),
            })),
            SinkTransport::Amqp { exchange, routing_key } => Some(Self::Amqp(AmqpSink {
                url: url.clone(),
                sink: sink.to_owned(),
                exchange: exchange.clone(),
                routing_key: routing_key.clone(),
                channel: tokio::sync::Mutex::new(None),
            })),
        }
    }

    /// Publishes one row and waits for the broker's acknowledgement, at most `timeout`.
    pub(crate) async fn publish(&self, job: &OutboxJob, timeout: Duration) -> Result<Published, BrokerError> {
        let url = match self {
            Self::Nats(n) => &n.url,
            Self::Redis(r) => &r.url,
            Self::Amqp(a) => &a.url,
        };
        let send = async {
            match self {
                Self::Nats(n) => n.publish(job).await,
                Self::Redis(r) => r.publish(job, timeout).await,
                Self::Amqp(a) => a.publish(job).await,
            }
        };
        match tokio::time::timeout(timeout, send).await {
            Ok(outcome) => outcome,
            Err(_) => Err(BrokerError::Timeout { url: url.to_string(), timeout_ms: timeout.as_millis() }),
        }
    }
}

/// A JetStream sink.
#[derive(Debug)]
pub(crate) struct NatsSink {
    url: SecretUrl,
    sink: String,
    subject: String,
    context: OnceCell<async_nats::jetstream::Context>,
}

impl NatsSink {
    async fn context(&self) -> Result<&async_nats::jetstream::Context, BrokerError> {
        self.context
            .get_or_try_init(|| async {
                // Fails while the server is down, so the first send is a failed attempt like any other; once
                // connected, the client reconnects by itself, with backoff, for as long as the process runs.
                let client = async_nats::ConnectOptions::new()
                    .name(format!("payhook sink {}", self.sink))
                    .connect(self.url.expose().as_str())
                    .await
                    .map_err(|e| BrokerError::Connect { url: self.url.to_string(), cause: cause(&self.url, &e) })?;
                Ok(async_nats::jetstream::new(client))
            })
            .await
    }

    async fn publish(&self, job: &OutboxJob) -> Result<Published, BrokerError> {
        let js = self.context().await?;
        let subject = render(&self.subject, job, &self.sink, nats_token);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(NATS_MSG_ID, job.id.to_string().as_str());
        headers.insert("Payhook-Kind", job.kind.as_str());
        let failed =
            |e: &dyn std::error::Error| BrokerError::Publish { url: self.url.to_string(), cause: cause(&self.url, e) };
        let ack = js
            .publish_with_headers(subject, headers, job.payload.clone().into_bytes().into())
            .await
            .map_err(|e| failed(&e))?
            .await
            .map_err(|e| failed(&e))?;
        Ok(if ack.duplicate { Published::Duplicate } else { Published::New })
    }
}

/// A Redis Streams sink.
pub(crate) struct RedisSink {
    url: SecretUrl,
    sink: String,
    stream: String,
    dedup_window_secs: u64,
    connection: OnceCell<redis::aio::ConnectionManager>,
    script: redis::Script,
}

impl std::fmt::Debug for RedisSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSink").field("url", &self.url).field("stream", &self.stream).finish_non_exhaustive()
    }
}

impl RedisSink {
    async fn connection(&self, timeout: Duration) -> Result<redis::aio::ConnectionManager, BrokerError> {
        let connection = self
            .connection
            .get_or_try_init(|| async {
                let failed = |e: redis::RedisError| BrokerError::Connect {
                    url: self.url.to_string(),
                    cause: cause(&self.url, &e),
                };
                let client = redis::Client::open(self.url.expose().as_str()).map_err(failed)?;
                // One try per attempt: the dispatcher's retry policy is the backoff between attempts. Once
                // connected, the manager reconnects on the command after a broken connection.
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(1))
                    .set_connection_timeout(Some(timeout));
                redis::aio::ConnectionManager::new_with_config(client, config).await.map_err(failed)
            })
            .await?;
        Ok(connection.clone())
    }

    async fn publish(&self, job: &OutboxJob, timeout: Duration) -> Result<Published, BrokerError> {
        let mut connection = self.connection(timeout).await?;
        let stream = render(&self.stream, job, &self.sink, |s| s.to_owned());
        let seen = format!("{stream}:payhook-id:{}", job.id);
        let entry: Option<String> = self
            .script
            .key(&stream)
            .key(&seen)
            .arg(job.id)
            .arg(job.kind.as_str())
            .arg(&job.payload)
            .arg(self.dedup_window_secs)
            .invoke_async(&mut connection)
            .await
            .map_err(|e| BrokerError::Publish { url: self.url.to_string(), cause: cause(&self.url, &e) })?;
        Ok(if entry.is_some() { Published::New } else { Published::Duplicate })
    }
}

/// A RabbitMQ sink: one connection and one channel in confirm mode, replaced when found closed.
pub(crate) struct AmqpSink {
    url: SecretUrl,
    sink: String,
    exchange: String,
    routing_key: String,
    channel: tokio::sync::Mutex<Option<(lapin::Connection, lapin::Channel)>>,
}

impl std::fmt::Debug for AmqpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpSink").field("url", &self.url).field("exchange", &self.exchange).finish_non_exhaustive()
    }
}

impl AmqpSink {
    async fn channel(&self) -> Result<lapin::Channel, BrokerError> {
        let mut held = self.channel.lock().await;
        if let Some((connection, channel)) = held.as_ref()
            && connection.status().connected()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        *held = None;
        let failed = |e: lapin::Error| BrokerError::Connect { url: self.url.to_string(), cause: cause(&self.url, &e) };
        let properties = lapin::ConnectionProperties::default()
            .with_connection_name(format!("payhook sink {}", self.sink).as_str().into());
        let connection = lapin::Connection::connect(self.url.expose().as_str(), properties).await.map_err(failed)?;
        let channel = connection.create_channel().await.map_err(failed)?;
        channel.confirm_select(lapin::options::ConfirmSelectOptions::default()).await.map_err(failed)?;
        *held = Some((connection, channel.clone()));
        Ok(channel)
    }

    async fn publish(&self, job: &OutboxJob) -> Result<Published, BrokerError> {
        let channel = self.channel().await?;
        let routing_key = render(&self.routing_key, job, &self.sink, |s| s.to_owned());
        let properties = lapin::BasicProperties::default()
            .with_message_id(job.id.to_string().as_str().into())
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_type(job.kind.as_str().into());
        let refused = |cause: String| BrokerError::Publish { url: self.url.to_string(), cause };
        let failed = |e: lapin::Error| refused(cause(&self.url, &e));
        // Mandatory: a message no queue takes comes back instead of vanishing.
        let options = lapin::options::BasicPublishOptions { mandatory: true, ..Default::default() };
        let confirmation = channel
            .basic_publish(
                self.exchange.as_str().into(),
                routing_key.as_str().into(),
                options,
                job.payload.as_bytes(),
                properties,
            )
            .await
            .map_err(failed)?
            .await
            .map_err(failed)?;
        match confirmation {
            lapin::Confirmation::Ack(None) => Ok(Published::New),
            lapin::Confirmation::Ack(Some(_)) => {
                Err(refused(format!("no queue is bound to routing key {routing_key:?}: the message was returned")))
            }
            lapin::Confirmation::Nack(_) => Err(refused("the broker nacked the message".into())),
            lapin::Confirmation::NotRequested => Err(refused("the channel is not in confirm mode".into())),
        }
    }
}

/// `template` with `{kind}`, `{order_id}` and `{sink}` filled in; the order id (from the payload; `_` when it has
/// none) goes through `escape`, as it comes from the payment provider.
fn render(template: &str, job: &OutboxJob, sink: &str, escape: impl Fn(&str) -> String) -> String {
    let order_id = serde_json::from_str::<serde_json::Value>(&job.payload)
        .ok()
        .and_then(|v| v.get("order_id").and_then(|o| o.as_str()).map(&escape))
        .unwrap_or_else(|| "_".to_owned());
    template.replace("{kind}", job.kind.as_str()).replace("{order_id}", &order_id).replace("{sink}", sink)
}

/// One NATS subject token: anything but ASCII letters, digits, `-` and `_` (a `.`, a wildcard, whitespace) becomes
/// `_`, so an order id can neither add tokens to the subject nor make it a wildcard.
fn nats_token(s: &str) -> String {
    let token: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if token.is_empty() { "_".to_owned() } else { token }
}

/// An error and its causes as text, with the broker's full URL (password included) replaced by its redacted form.
fn cause(url: &SecretUrl, e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        text.push_str(": ");
        text.push_str(&c.to_string());
        source = c.source();
    }
    let full = url.expose().as_str();
    let text = text.replace(full, url.redacted()).replace(full.trim_end_matches('/'), url.redacted());
    match url.expose().password() {
        Some(password) if !password.is_empty() => text.replace(password, "[redacted]"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(payload: &str) -> OutboxJob {
        OutboxJob {
            id: 7,
            sink: "shop".into(),
            kind: payhook_store::OutboxKind::OrderPaid,
            payload: payload.into(),
            attempts: 0,
            created_at_ms: 0,
            owner: "o".into(),
        }
    }

    #[test]
    fn an_order_id_fills_one_subject_token_and_cannot_add_tokens_or_wildcards() {
        let j = job(r#"{"order_id":"ord.1 >*"}"#);
        assert_eq!(render("payhook.{kind}.{order_id}", &j, "shop", nats_token), "payhook.order.paid.ord_1___");
        assert_eq!(render("{sink}.{order_id}", &job("{}"), "shop", nats_token), "shop._");
    }

    #[test]
    fn a_broker_error_never_shows_the_password() {
        let url = SecretUrl::parse_broker("redis://user:s3cr3t@cache:6379/0", SinkTransport::REDIS_SCHEMES).unwrap();
        let e = std::io::Error::other("refused by redis://user:s3cr3t@cache:6379/0 (s3cr3t)");
        let text = cause(&url, &e);
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains("redis://cache:6379"), "{text}");
    }
}
