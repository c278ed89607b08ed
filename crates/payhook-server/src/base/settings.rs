//! Resolved settings: what the binary's configuration becomes once it has been read, merged and validated.

use payhook_core::event::SourceName;
use payhook_core::format::Format;
use payhook_core::signature::{Secret, Verifier};

/// Everything the HTTP runtime needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configured sources, each served at `POST /webhooks/{name}`.
    pub sources: Vec<SourceSettings>,
    /// Largest accepted request body, in bytes (webhooks and `/v1`); larger ones are answered 413 while streaming.
    pub body_limit_bytes: usize,
    /// Bearer token for `/v1` and the dashboard's login, compared with surrounding whitespace trimmed; without one
    /// (or with an empty one) both answer 401 to everyone.
    pub api_token: Option<Secret>,
    /// The retry worker.
    pub worker: WorkerSettings,
    /// Where outbox rows are delivered.
    pub sinks: Vec<SinkSettings>,
    /// Where alerts are delivered, if anywhere.
    pub alerts: Option<AlertSettings>,
    /// How the outbox dispatcher runs.
    pub dispatcher: DispatcherSettings,
    /// Limits of bulk replay.
    pub replay: ReplaySettings,
    /// How long settled events keep their payloads and dedup keys.
    pub retention: RetentionSettings,
    /// The public listener's bounds, TLS and shutdown grace.
    pub listener: ListenerSettings,
    /// `/openapi.json` without the API token.
    pub public_openapi: bool,
    /// Serve `/metrics` on its own listener at this address (without a token) instead of on the public port
    /// (where it takes the API token).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Who the client of a request is, and how often a client may fail to give the API token.
    pub auth: AuthSettings,
    /// The named tokens and the proxy's identities, with their scopes (reloadable, as sources are).
    pub access: AccessSettings,
    /// The build that serves, shown on `/metrics` as `payhook_build_info`.
    pub build: BuildInfo,
}

/// Which build of payhook is running: what `payhook --version` prints, for `payhook_build_info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// The release version.
    pub version: String,
    /// The commit it was built from (12 hex digits), or `unknown`.
    pub commit: String,
}

impl Default for BuildInfo {
    /// This crate's version (the workspace's), from an unknown commit: the binary sets the real one.
    fn default() -> Self {
        Self { version: env!("CARGO_PKG_VERSION").to_owned(), commit: "unknown".to_owned() }
    }
}

/// The public listener's bounds: what an idle, slow or flooding client can hold, and for how long.
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    /// A request head (request line and headers) must be complete within this many milliseconds of its first byte
    /// (of the accept, for a connection's first request); the connection is closed otherwise.
    pub header_read_timeout_ms: u64,
    /// A keep-alive connection without a request for this many milliseconds is closed.
    pub keep_alive_idle_ms: u64,
    /// Connections open at once at most; beyond it a new connection is closed at once.
    pub max_connections: usize,
    /// Largest request head in bytes (hyper's read buffer; at least 8192); larger heads are answered 431.
    pub max_header_bytes: usize,
    /// Most headers in a request; more are answered 431.
    pub max_headers: usize,
    /// A request's body, on any route, must be complete within this many milliseconds of its head; a slower one is
    /// answered 408 and its connection closed.
    pub body_timeout_ms: u64,
    /// A request must be answered within this many milliseconds of its head; a longer one is stopped, answered 503
    /// (408 while its body is still arriving) and its connection closed.
    pub request_timeout_ms: u64,
    /// Connections one client address (IPv6: its /64) may hold at once; beyond it a new one is closed at once.
    /// Trusted proxies are not held to it.
    pub max_connections_per_client: usize,
    /// Request body bytes all requests in progress may hold at once; a body that would go beyond is answered 503
    /// with `Retry-After`.
    pub body_buffer_bytes: u64,
    /// On shutdown, requests in progress get this many milliseconds to finish; then what is left is closed.
    pub shutdown_grace_ms: u64,
    /// Serve HTTPS with this certificate and key instead of plain HTTP.
    pub tls: Option<TlsSettings>,
}

impl Default for ListenerSettings {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: 10_000,
            keep_alive_idle_ms: 60_000,
            max_connections: 2_048,
            max_header_bytes: 65_536,
            max_headers: 100,
            body_timeout_ms: 10_000,
            request_timeout_ms: 60_000,
            max_connections_per_client: 1_024,
            body_buffer_bytes: 64 * 1024 * 1024,
            shutdown_grace_ms: 30_000,
            tls: None,
        }
    }
}

/// The public listener's certificate chain and private key, in PEM files, read again on SIGHUP.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The certificate chain, leaf first.
    pub cert_path: std::path::PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key_path: std::path::PathBuf,
}

/// The client address of a request and the throttle on failed attempts at the API token (`/v1` and the dashboard's
/// login share it).
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Peers whose `X-Forwarded-For` is believed: from them, the client is the right-most forwarded address that is
    /// not itself in this list. Empty: the peer is always the client.
    pub trusted_proxies: Vec<crate::base::ip_range::IpRange>,
    /// Failed attempts a client address regains per minute.
    pub failures_per_minute: u32,
    /// Failed attempts a client address may make in a row before it is answered 429, whatever it sends.
    pub failure_burst: u32,
    /// Client addresses the throttle holds at most; when full, addresses whose allowance has refilled are
    /// forgotten first, else the least recently seen.
    pub max_addresses: usize,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self { trusted_proxies: Vec::new(), failures_per_minute: 10, failure_burst: 10, max_addresses: 10_000 }
    }
}

/// Who may call the operator surfaces besides `api_token` (an admin token): named tokens with scopes, and the
/// identities a trusted proxy vouches for in a header. Reloadable: a request runs under one generation's access.
#[derive(Debug, Clone, Default)]
pub struct AccessSettings {
    /// The named tokens.
    pub tokens: Vec<NamedToken>,
    /// The header a trusted proxy puts the signed-in user's identity in (`X-Forwarded-Email`); read only from a
    /// peer in [`AuthSettings::trusted_proxies`].
    pub identity_header: Option<String>,
    /// Which identities hold which scope; an identity no rule names holds none.
    pub identities: Vec<IdentityRule>,
}

/// A token with a name (its actor in the audit trail) and a scope, known by its SHA-256 only.
#[derive(Clone, PartialEq, Eq)]
pub struct NamedToken {
    /// The name, unique among the tokens.
    pub name: String,
    /// The highest scope it was given.
    pub scope: crate::base::scope::Scope,
    /// SHA-256 of the token (trimmed of surrounding whitespace).
    pub sha256: [u8; 32],
    /// Refused from this instant on (milliseconds since the epoch).
    pub not_after_ms: Option<i64>,
}

impl std::fmt::Debug for NamedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedToken")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .field("not_after_ms", &self.not_after_ms)
            .finish_non_exhaustive()
    }
}

/// Identities a rule matches: one name, or every name `…@domain`. Both compare ASCII case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityMatch {
    /// This identity exactly.
    Exact(String),
    /// Every identity ending in `@` and this domain.
    Domain(String),
}

/// Identities and the scope they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRule {
    /// Whom it names.
    pub matches: IdentityMatch,
    /// What they hold.
    pub scope: crate::base::scope::Scope,
}

impl IdentityRule {
    /// Whether this rule names `identity`.
    pub fn names(&self, identity: &str) -> bool {
        match &self.matches {
            IdentityMatch::Exact(name) => identity.eq_ignore_ascii_case(name),
            IdentityMatch::Domain(domain) => {
                identity.rsplit_once('@').is_some_and(|(local, d)| !local.is_empty() && d.eq_ignore_ascii_case(domain))
            }
        }
    }
}

/// How long settled events (processed, duplicate, ignored) keep their payloads and their dedup keys, and settled
/// orders their rows. Dead letters and deferred events are never pruned.
#[derive(Debug, Clone)]
pub struct RetentionSettings {
    /// Run the pruning task in this process.
    pub enabled: bool,
    /// Raw bodies and headers are cleared after this many milliseconds.
    pub payloads_ms: i64,
    /// Events and their event-id and business keys are deleted after this many milliseconds: a provider's
    /// redelivery older than this is no longer recognised by id (the ledger's guards still stop a second effect).
    pub keys_ms: i64,
    /// Orders in a final state (refunded, disputed) are deleted with their history and outbox rows this many
    /// milliseconds after their last change, unless one of their outbox rows is pending or dead or an event is
    /// deferred on them. At least `keys_ms` (the configuration checks it).
    pub orders_ms: i64,
    /// Audit trail entries are deleted this many milliseconds after they were made.
    pub audit_ms: i64,
    /// Time between two pruning runs, in milliseconds.
    pub interval_ms: u64,
    /// Events per pruning step (one short transaction).
    pub batch: u32,
    /// After each step, pruning pauses for this percentage of the step's duration (100: pruning takes at most
    /// about half of the writer's time).
    pub pause_percent: u32,
    /// The least pause between steps of `payhook prune`, which runs as a second process on a shared SQLite file:
    /// the server's writer polls for the lock (SQLite's busy handler sleeps up to 100 ms) and must find it free.
    pub cli_min_pause_ms: u64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        const DAY_MS: i64 = 86_400_000;
        Self {
            enabled: true,
            payloads_ms: 7 * DAY_MS,
            keys_ms: 30 * DAY_MS,
            orders_ms: 550 * DAY_MS,
            audit_ms: 400 * DAY_MS,
            interval_ms: 3_600_000,
            batch: 1_000,
            pause_percent: 100,
            cli_min_pause_ms: 150,
        }
    }
}

/// An HTTP endpoint of the merchant's that receives outbox rows.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    /// Its name, referenced by outbox rows and by sources' `forward`.
    pub name: String,
    /// Where rows are POSTed; shown only in its redacted form (it may hold a token).
    pub url: crate::base::secret_url::SecretUrl,
    /// The kinds it takes (`order.paid`, …; `*` for all).
    pub kinds: Vec<String>,
    /// Signs what is sent with Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
    pub signer: Option<payhook_core::signature::Verifier>,
    /// Per-request timeout, in milliseconds.
    pub timeout_ms: u64,
    /// Requests in flight to this sink at most.
    pub max_in_flight: usize,
    /// How rows travel: an HTTP POST to `url`, or a publish to the broker at `url`.
    pub transport: SinkTransport,
    /// How the rows of one ordering key are delivered: in commit order, a dead row holding the later ones
    /// (`ordering = "key"`, `on_dead = "hold"`: the default) or letting them pass (`on_dead = "skip"`), or in no
    /// particular order (`ordering = "none"`).
    pub order: payhook_store::KeyOrder,
    /// Attempts per second on average and at most at once (`rate_per_second`, `burst`); `None`: unbounded but
    /// for `max_in_flight`.
    pub rate: Option<SinkRate>,
    /// Which documents of its kinds it takes (`when`); empty: all of them. Applied when rows are written.
    pub filter: payhook_store::SinkFilter,
}

/// A sink's rate: at most `per_second` attempts a second on average, at most `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SinkRate {
    /// Attempts per second, on average (positive).
    pub per_second: f64,
    /// Attempts the bucket holds: how many may go at once after a quiet spell (at least 1).
    pub burst: u32,
}

/// How a sink's rows travel. Every transport shares the dispatcher's leases, backoff, dead rows and alerts; only
/// the send and what counts as its acknowledgement differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkTransport {
    /// A POST to the sink's `http(s)://` URL; a 2xx acknowledges it.
    Http,
    /// A JetStream publish (`nats://` URL) with `Nats-Msg-Id` = the outbox id; the stream's PubAck acknowledges it,
    /// and the stream's duplicate window drops a re-publish.
    Nats {
        /// The subject template: `{kind}`, `{order_id}` and `{sink}` are filled in per row.
        subject: String,
    },
    /// An `XADD` (`redis://` URL) through a script that skips an outbox id it has already added; the script's
    /// answer acknowledges it.
    Redis {
        /// The stream key template: `{kind}`, `{order_id}` and `{sink}` are filled in per row.
        stream: String,
        /// How long the script remembers an added outbox id, in seconds: a re-publish within it is dropped.
        dedup_window_secs: u64,
    },
    /// A RabbitMQ publish (`amqp://` URL) with publisher confirms: persistent, `message_id` = the outbox id,
    /// mandatory. The broker's ack delivers the row; a nack or a returned (unroutable) message is a failed attempt.
    /// AMQP has no deduplication: a re-publish arrives again, with the same `message_id`.
    Amqp {
        /// The exchange (`""`: the default exchange, which routes by queue name).
        exchange: String,
        /// The routing key template: `{kind}`, `{order_id}` and `{sink}` are filled in per row.
        routing_key: String,
    },
}

impl SinkTransport {
    /// The schemes a NATS sink's URL may have (`tls://`: TLS with the system's root certificates).
    pub const NATS_SCHEMES: &'static [&'static str] = &["nats", "tls"];
    /// The schemes a Redis sink's URL may have (plain Redis: TLS to Redis is not built in).
    pub const REDIS_SCHEMES: &'static [&'static str] = &["redis"];
    /// The schemes a RabbitMQ sink's URL may have (plain AMQP: TLS to RabbitMQ is not built in).
    pub const AMQP_SCHEMES: &'static [&'static str] = &["amqp"];
}

/// Where alerts go: a Slack-compatible incoming webhook (`{"text": …}`) or any HTTP endpoint.
#[derive(Debug, Clone)]
pub struct AlertSettings {
    /// Where alerts are POSTed; shown only in its redacted form (a Slack webhook's path is its secret).
    pub url: crate::base::secret_url::SecretUrl,
    /// Alerts with the same source and reason within this window collapse into one, with a count.
    pub window_ms: i64,
    /// How long an alert gathers its key's repeats before it is sent.
    pub gather_ms: i64,
    /// A source whose verification fails this many times within the window raises an alert.
    pub verification_failures: u32,
    /// Per-request timeout, in milliseconds.
    pub timeout_ms: u64,
}

/// The name under which alerts travel through the outbox.
pub const ALERTS_SINK: &str = "_alerts";

/// How the outbox dispatcher runs.
#[derive(Debug, Clone)]
pub struct DispatcherSettings {
    /// Run the dispatcher in this process. Tests turn it off and drive it step by step.
    pub enabled: bool,
    /// Longest sleep between two looks for due rows, in milliseconds.
    pub poll_interval_ms: u64,
    /// How long a claimed row stays leased to this dispatcher, in milliseconds.
    pub lease_ms: i64,
    /// Backoff between attempts, and the budget after which a row is dead.
    pub retry: payhook_core::retry::RetryPolicy,
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            poll_interval_ms: 500,
            lease_ms: 60_000,
            retry: payhook_core::retry::RetryPolicy {
                base_ms: 1_000,
                factor: 2,
                cap_ms: 3_600_000,
                jitter: 0.2,
                max_attempts: 30,
            },
        }
    }
}

/// Limits that keep bulk replay from starving live traffic.
#[derive(Debug, Clone)]
pub struct ReplaySettings {
    /// Events one bulk replay call touches at most.
    pub max_per_call: u32,
    /// Events replayed per second at most.
    pub per_second: u32,
}

impl Default for ReplaySettings {
    fn default() -> Self {
        Self { max_per_call: 1_000, per_second: 100 }
    }
}

/// One source of webhooks.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// Its name, the path segment of its endpoint.
    pub name: SourceName,
    /// Verifies its signatures (scheme, secrets, tolerance).
    pub verifier: Verifier,
    /// Turns its payloads into events.
    pub format: Format,
    /// Sinks that receive every verified, deduplicated event of this source (kind `event.received`).
    pub forward: Vec<String>,
    /// Whether its payments need a registered order.
    pub orders: Orders,
    /// Its effects read from the provider's API (`confirm = "api"`), for a provider that does not sign the body.
    pub confirm: Option<ConfirmSettings>,
}

/// How a source's deliveries are confirmed from the provider's API: the delivery's signature proves which resource
/// it is about, and the effect is what the provider's API answers about that resource, read with the preset's
/// `[confirm.format]`; the notification's unsigned body decides nothing.
#[derive(Debug, Clone)]
pub struct ConfirmSettings {
    /// The preset's confirmation: the resource's path and how its answer reads.
    pub confirm: std::sync::Arc<payhook_core::confirm::Confirm>,
    /// The API's base URL: the preset's, or the source's `confirm_base_url` (a sandbox, a test server).
    pub base_url: String,
    /// The provider's access token, sent as `Authorization: Bearer`.
    pub token: payhook_core::signature::Secret,
    /// How long one request to the API may take, in milliseconds; beyond it the delivery is answered 503.
    pub timeout_ms: u64,
    /// At most this many requests to the API at once for this source; beyond it 503 at once.
    pub max_in_flight: usize,
}

/// Where a source's orders come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Orders {
    /// Registered through `POST /v1/orders` (or `payhook orders import`): a payment for an unknown order waits
    /// for it (deferred, then dead-lettered), and its amount and currency are checked against it.
    #[default]
    Registered,
    /// Created by the first payment that names them, from its amount and currency; refunds, failures and disputes
    /// of an unknown order wait for that payment as they do for a registration.
    Implicit,
}

/// How the worker that retries deferred events runs.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Run the worker in this process. Tests turn it off and drive it step by step.
    pub enabled: bool,
    /// Longest sleep between two looks for due events, in milliseconds.
    pub poll_interval_ms: u64,
    /// How long a claimed event stays leased to this worker, in milliseconds.
    pub lease_ms: i64,
    /// At most this many events are claimed at once.
    pub claim_batch: u32,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self { enabled: true, poll_interval_ms: 1_000, lease_ms: 30_000, claim_batch: 128 }
    }
}

impl Settings {
    /// Settings with the documented defaults and the given sources.
    pub fn new(sources: Vec<SourceSettings>) -> Self {
        Self {
            sources,
            body_limit_bytes: 1024 * 1024,
            api_token: None,
            worker: WorkerSettings::default(),
            sinks: Vec::new(),
            alerts: None,
            dispatcher: DispatcherSettings::default(),
            replay: ReplaySettings::default(),
            retention: RetentionSettings::default(),
            listener: ListenerSettings::default(),
            public_openapi: false,
            metrics_listen: None,
            auth: AuthSettings::default(),
            access: AccessSettings::default(),
            build: BuildInfo::default(),
        }
    }
}

impl Settings {
    /// The routing table the store needs: which sinks take which kinds, forwards, and alerts.
    pub fn routing(&self) -> payhook_store::Routing {
        let mut routing = payhook_store::Routing::default();
        for sink in &self.sinks {
            if !sink.filter.conditions.is_empty() {
                routing.filters.insert(sink.name.clone(), sink.filter.clone());
            }
            for kind in &sink.kinds {
                if kind == "*" {
                    routing.all_kinds.push(sink.name.clone());
                } else {
                    routing.by_kind.entry(kind.clone()).or_default().push(sink.name.clone());
                }
            }
        }
        for source in &self.sources {
            if !source.forward.is_empty() {
                routing.forwards.insert(source.name.as_str().to_owned(), source.forward.clone());
            }
            if source.orders == Orders::Implicit {
                routing.implicit_orders.insert(source.name.as_str().to_owned());
            }
        }
        routing.alerts = self.alerts.as_ref().map(|a| payhook_store::AlertRouting {
            sink: ALERTS_SINK.to_owned(),
            window_ms: a.window_ms,
            gather_ms: a.gather_ms,
        });
        routing
    }
}

/// A request as a provider sends it: where to, body and headers.
#[derive(Debug, Clone)]
pub struct ProviderRequest {
    /// The URL, with the query string the provider appends (a declared format's example may have one).
    pub url: reqwest::Url,
    /// The body.
    pub body: Vec<u8>,
    /// The headers, signature included.
    pub headers: Vec<(String, String)>,
}

impl SourceSettings {
    /// The request this source's provider would send for `event` to `url`, signed at `now_unix`: the format's body
    /// and headers (Shopify's topic, a preset's example), then the scheme's signature — in the body for Adyen and
    /// Braintree (whose body is a form), over the request for HTTP Message Signatures (`msg_id` is its nonce) and
    /// for declared rules that cover the URL or other headers, in headers for the others.
    pub fn provider_delivery(
        &self,
        event: &payhook_core::format::Outgoing<'_>,
        url: &reqwest::Url,
        now_unix: i64,
        msg_id: &str,
    ) -> Result<ProviderRequest, payhook_core::signature::VerifyError> {
        use payhook_core::format::{EffectSpec, Format};
        let mut url = url.clone();
        if let Format::Declared(d) = &self.format
            && let Some(Ok(example)) = d.example_for(EffectSpec::from(event.action)).map(|x| x.render(&event.vars()))
        {
            url.set_query(example.query.as_deref());
            return self.sign_request(url, example.body, example.headers, now_unix, msg_id);
        }
        let body = self.format.encode(event);
        let headers = self.format.encode_headers(event);
        self.sign_request(url, body, headers, now_unix, msg_id)
    }

    /// Signs `body` for `url` the way this source's provider does, after `headers` (the unsigned ones it also sends):
    /// [`Verifier::sign_delivery`](payhook_core::signature::Verifier::sign_delivery).
    pub fn sign_request(
        &self,
        url: reqwest::Url,
        body: Vec<u8>,
        headers: Vec<(String, String)>,
        now_unix: i64,
        msg_id: &str,
    ) -> Result<ProviderRequest, payhook_core::signature::VerifyError> {
        let (body, headers) = self.verifier.sign_delivery(url.as_str(), body, headers, now_unix, msg_id)?;
        Ok(ProviderRequest { url, body, headers })
    }
}
