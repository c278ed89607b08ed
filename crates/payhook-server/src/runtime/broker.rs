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
//! A template's `{order_id}` and `{sink}` are escaped as they are filled in ([`escape`]: every byte but ASCII
//! letters, digits, `-` and `_` written `%XX`), so a value from a payment provider fills one subject token, one
//! routing word or one piece of a stream key, and never reaches the keys the Redis script keeps for itself.
//!
//! A broker's URL may hold its password: errors are rendered with the full URL replaced by its redacted form.

use crate::base::secret_url::SecretUrl;
use crate::base::settings::SinkTransport;
use payhook_store::OutboxJob;
use std::time::Duration;
use tokio::sync::OnceCell;

/// The header JetStream deduplicates on.
const NATS_MSG_ID: &str = "Nats-Msg-Id";

/// Starts the key under which the Redis script remembers a published row id: `#payhook-id:STREAM:ID`. No stream
/// key a template renders holds a `#` (the values it fills in are [`escape`]d, which always replaces it, and the
/// configuration refuses a stream template holding one), so no stream is ever one of these keys, whatever the
/// order ids. It has no `{`, so a hash tag in the stream's name puts the key in the stream's Redis Cluster slot.
const REDIS_SEEN_PREFIX: &str = "#payhook-id:";

/// Adds one stream entry for an outbox id it has not added within the window; answers the entry's id, or nil for a
/// re-publish. The entry is added before the id is recorded, so an `XADD` that fails records nothing and the retry
/// adds it; a Redis script runs atomically, so a re-publish cannot slip between the check and the add.
const REDIS_XADD_ONCE: &str = r"
if redis.call('EXISTS', KEYS[2]) == 1 then
  return false
end
local entry = redis.call('XADD', KEYS[1], '*', 'id', ARGV[1], 'kind', ARGV[2], 'payload', ARGV[3], unpack(ARGV, 5))
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

    /// Publishes one row and waits for the broker's acknowledgement, at most `timeout`. `trace` is the W3C trace
    /// context of the dispatch (`traceparent`, `tracestate`; empty when traces are not exported): in the NATS and
    /// RabbitMQ message headers and as fields of the Redis entry, so that the consumer's trace joins payhook's.
    pub(crate) async fn publish(
        &self,
        job: &OutboxJob,
        timeout: Duration,
        trace: &[(String, String)],
    ) -> Result<Published, BrokerError> {
        let url = match self {
            Self::Nats(n) => &n.url,
            Self::Redis(r) => &r.url,
            Self::Amqp(a) => &a.url,
        };
        let send = async {
            match self {
                Self::Nats(n) => n.publish(job, trace).await,
                Self::Redis(r) => r.publish(job, timeout, trace).await,
                Self::Amqp(a) => a.publish(job, trace).await,
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

    async fn publish(&self, job: &OutboxJob, trace: &[(String, String)]) -> Result<Published, BrokerError> {
        let js = self.context().await?;
        let subject = render(&self.subject, job, &self.sink);
        let headers = nats_headers(job, trace);
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

    async fn publish(
        &self,
        job: &OutboxJob,
        timeout: Duration,
        trace: &[(String, String)],
    ) -> Result<Published, BrokerError> {
        let mut connection = self.connection(timeout).await?;
        let stream = render(&self.stream, job, &self.sink);
        let seen = seen_key(&stream, job.id);
        let mut invocation = self.script.key(&stream);
        invocation.key(&seen).arg(job.id).arg(job.kind.as_str()).arg(&job.payload).arg(self.dedup_window_secs);
        // After the four arguments the script reads, field and value pairs it adds to the entry as they are.
        for (name, value) in trace {
            invocation.arg(name).arg(value);
        }
        let entry: Option<String> = invocation
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

    async fn publish(&self, job: &OutboxJob, trace: &[(String, String)]) -> Result<Published, BrokerError> {
        let channel = self.channel().await?;
        let routing_key = render(&self.routing_key, job, &self.sink);
        let properties = amqp_properties(job, trace);
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

/// `template` with `{kind}`, `{order_id}` and `{sink}` filled in. The kind is one of payhook's kind names, as is
/// (`order.paid`: its `.` separates two subject tokens or routing words); the order id (from the payload, which
/// comes from the payment provider; `_` when it has none) and the sink's name are [`escape`]d.
/// A JetStream message's headers: the outbox id JetStream deduplicates on, the kind, and the trace context.
fn nats_headers(job: &OutboxJob, trace: &[(String, String)]) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(NATS_MSG_ID, job.id.to_string().as_str());
    headers.insert("Payhook-Kind", job.kind.as_str());
    for (name, value) in trace {
        headers.insert(name.as_str(), value.as_str());
    }
    headers
}

/// A RabbitMQ message's properties: persistent, the outbox id as `message_id`, the kind as `type`, and the trace
/// context in its headers table.
fn amqp_properties(job: &OutboxJob, trace: &[(String, String)]) -> lapin::BasicProperties {
    let properties = lapin::BasicProperties::default()
        .with_message_id(job.id.to_string().as_str().into())
        .with_delivery_mode(2)
        .with_content_type("application/json".into())
        .with_type(job.kind.as_str().into());
    if trace.is_empty() {
        return properties;
    }
    let mut headers = lapin::types::FieldTable::default();
    for (name, value) in trace {
        headers.insert(name.as_str().into(), lapin::types::AMQPValue::LongString(value.as_str().into()));
    }
    properties.with_headers(headers)
}

fn render(template: &str, job: &OutboxJob, sink: &str) -> String {
    let order_id = serde_json::from_str::<serde_json::Value>(&job.payload)
        .ok()
        .and_then(|v| v.get("order_id").and_then(|o| o.as_str()).map(escape))
        .unwrap_or_else(|| "_".to_owned());
    template.replace("{kind}", job.kind.as_str()).replace("{order_id}", &order_id).replace("{sink}", &escape(sink))
}

/// A value as it goes into a subject, a stream key or a routing key: ASCII letters, digits, `-` and `_` as they
/// are, every other byte of its UTF-8 as `%` and two uppercase hex digits (`ord.1` is `ord%2E1`), so that it is
/// read back by percent-decoding. One rule for every broker: what it writes holds no NATS token separator or
/// wildcard (`.`, `*`, `>`) and no whitespace (one subject token), no AMQP word separator (`.`: one routing word),
/// and no `:`, `{`, `}` or `#` (a Redis key cannot reach another key's namespace, a hash tag or payhook's own keys,
/// [`REDIS_SEEN_PREFIX`]). An empty value is `_`, so that a token is never empty.
fn escape(value: &str) -> String {
    if value.is_empty() {
        return "_".to_owned();
    }
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The key under which the Redis script remembers that row `id` was added to `stream`.
fn seen_key(stream: &str, id: i64) -> String {
    format!("{REDIS_SEEN_PREFIX}{stream}:{id}")
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
            key: Some("order:ord_1".into()),
            order: payhook_store::KeyOrder::Hold,
        }
    }

    /// Percent-decoding, the inverse of [`escape`].
    fn unescape(text: &str) -> String {
        let bytes = text.as_bytes();
        let (mut out, mut i) = (Vec::new(), 0);
        while i < bytes.len() {
            if bytes[i] == b'%' {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).expect("two hex digits"));
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn an_order_id_fills_one_subject_token_and_cannot_add_tokens_or_wildcards() {
        let j = job(r#"{"order_id":"ord.1 >*"}"#);
        let subject = render("payhook.{kind}.{order_id}", &j, "shop");
        assert_eq!(subject, "payhook.order.paid.ord%2E1%20%3E%2A");
        assert_eq!(subject.split('.').count(), 4, "{subject}");
        assert_eq!(render("{sink}.{order_id}", &job("{}"), "shop"), "shop._");
        assert_eq!(render("{sink}.{order_id}", &j, "a.b c"), "a%2Eb%20c.ord%2E1%20%3E%2A");
    }

    #[test]
    fn escaping_keeps_plain_ids_reads_back_by_percent_decoding_and_writes_no_separator() {
        assert_eq!(escape("ord_123-A"), "ord_123-A");
        for value in ["ord.1 >*", "a:payhook-id:7", "{tag}#x", "50%", "naïve ✓", "tab\there", "..", "%2E"] {
            let escaped = escape(value);
            assert_eq!(unescape(&escaped), value, "{escaped}");
            assert!(
                escaped.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'%')),
                "{value:?} became {escaped:?}"
            );
        }
        assert_ne!(escape("ord.1"), escape("ord_1"), "two ids never share a token");
    }

    /// An order id shaped like the script's key of another row of the same stream template used to name that key
    /// (`orders:a:payhook-id:7`), so row 7 of order `a` was taken for a re-publish and never added.
    #[test]
    fn no_order_id_makes_a_stream_key_that_is_one_of_the_scripts_keys() {
        let template = "orders:{order_id}";
        let plain = render(template, &job(r#"{"order_id":"a"}"#), "shop");
        let shaped = render(template, &job(r#"{"order_id":"a:payhook-id:7"}"#), "shop");
        assert_eq!(shaped, "orders:a%3Apayhook-id%3A7");
        for stream in [&plain, &shaped] {
            for id in [7, 8] {
                let seen = seen_key(stream, id);
                assert!(seen.starts_with('#') && seen != plain && seen != shaped, "{seen}");
            }
            assert!(!stream.contains('#'), "{stream}");
        }
        assert_eq!(seen_key(&plain, 7), "#payhook-id:orders:a:7");
    }

    #[test]
    fn the_trace_context_travels_in_nats_and_rabbitmq_headers() {
        let job = job(r#"{"order_id":"o1"}"#);
        let trace = vec![
            ("traceparent".to_owned(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned()),
            ("tracestate".to_owned(), "vendor=1".to_owned()),
        ];
        let nats = nats_headers(&job, &trace);
        assert_eq!(
            nats.get("traceparent").map(|v| v.as_str()),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert_eq!(nats.get("tracestate").map(|v| v.as_str()), Some("vendor=1"));
        assert!(nats.get(NATS_MSG_ID).is_some(), "the dedup id stays");
        assert!(nats_headers(&job, &[]).get("traceparent").is_none());

        let amqp = amqp_properties(&job, &trace);
        let headers = amqp.headers().as_ref().expect("a headers table");
        let value = headers.inner().get("traceparent").expect("traceparent");
        assert_eq!(value.as_long_string().map(ToString::to_string).as_deref(), Some(trace[0].1.as_str()));
        assert!(amqp_properties(&job, &[]).headers().is_none(), "no table without a trace");
    }

    /// Against the machine's Redis (`PAYHOOK_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`): the entry carries
    /// the trace context as fields after its own, and one without a trace has only its own. Skipped when no Redis
    /// answers, unless `PAYHOOK_TEST_BROKERS=1`.
    #[tokio::test]
    async fn the_redis_entry_carries_the_trace_context_as_fields() {
        let url = std::env::var("PAYHOOK_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        let addr = url.trim_start_matches("redis://").split('/').next().unwrap_or_default().to_owned();
        if tokio::net::TcpStream::connect(&addr).await.is_err() {
            assert!(std::env::var("PAYHOOK_TEST_BROKERS").as_deref() != Ok("1"), "no Redis at {url}");
            eprintln!("skipped: no Redis at {url}");
            return;
        }
        let stream = format!("payhook-trace-{:012x}", fastrand::u64(..) >> 16);
        let transport = SinkTransport::Redis { stream: stream.clone(), dedup_window_secs: 60 };
        let secret = SecretUrl::parse_broker(&url, SinkTransport::REDIS_SCHEMES).expect("redis url");
        let broker = Broker::for_sink(&transport, &secret, "shop").expect("a redis broker");
        let trace =
            vec![("traceparent".to_owned(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned())];
        let mut traced = job("{}");
        traced.id = i64::from(fastrand::u32(..));
        broker.publish(&traced, Duration::from_secs(3), &trace).await.expect("published");
        let mut plain = job("{}");
        plain.id = traced.id + 1;
        broker.publish(&plain, Duration::from_secs(3), &[]).await.expect("published");
        let client = redis::Client::open(url.as_str()).expect("client");
        let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
        let entries: Vec<(String, Vec<String>)> =
            redis::cmd("XRANGE").arg(&stream).arg("-").arg("+").query_async(&mut conn).await.expect("XRANGE");
        let _: Result<(), _> = redis::cmd("DEL").arg(&stream).query_async(&mut conn).await;
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(&entries[0].1[6..], ["traceparent", trace[0].1.as_str()], "{entries:?}");
        assert_eq!(entries[1].1.len(), 6, "no trace, no extra field: {entries:?}");
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
