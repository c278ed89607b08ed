//! The outbox dispatcher: delivers outbox rows to their sinks, never inside a database transaction.
//!
//! One loop per sink, so a slow or dead sink never stalls the others: it claims up to `max_in_flight` due rows
//! under a lease, POSTs them concurrently, and records each outcome. A dispatcher that dies mid-delivery loses
//! nothing: its lease expires and the row is sent again, with the same `webhook-id` and `Idempotency-Key` (the
//! outbox id), so the sink can tell it has seen it.
//!
//! A sink with a rate (`rate_per_second`, `burst`) takes a token per claimed row from its bucket
//! ([`crate::runtime::rate`]) before the claim, and gives back what the claim did not use; with no token it claims
//! nothing and its loop sleeps until the next one. A `Retry-After` from the sink still sets its row's next attempt.
//!
//! Classification: 2xx delivered; 408, 409, 425, 429, 5xx, timeouts and connection errors retried with the pure
//! `RetryPolicy` (honouring `Retry-After`); any other answer is permanent. Permanent, or the budget spent: dead,
//! with the last error kept, and an alert.
//!
//! Broker sinks (NATS JetStream, Redis Streams; see [`crate::runtime::broker`]) go through the same loop: only the send
//! differs. The broker's acknowledgement delivers the row (recorded with status 0, as there is no HTTP status);
//! any error is retried with the same policy, and the budget spent makes the row dead with an alert.
//!
//! A sink's URL may hold its credential, so every message about a send names it in its redacted form
//! ([`SecretUrl`]) and renders the HTTP client's errors without their URL: what is logged, stored as the row's
//! last error and put into an alert never holds the path, query or user info.

use crate::base::clock::Clock;
use crate::base::metrics::DispatchMetrics;
use crate::base::secret_url::{SecretUrl, redact_urls};
use crate::base::settings::{ALERTS_SINK, AlertSettings, DispatcherSettings, Settings, SinkSettings};
use crate::base::trace;
use crate::runtime::broker::{Broker, Published};
use crate::runtime::rate::Bucket;
use payhook_core::retry::Next;
use payhook_core::signature::Verifier;
use payhook_store::{Claim, Dispatched, KeyOrder, OutboxJob, Store, StoreError};
use reqwest::StatusCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Where one sink's rows go and how.
#[derive(Debug, Clone)]
struct Target {
    name: String,
    url: SecretUrl,
    signer: Option<Verifier>,
    timeout: Duration,
    max_in_flight: usize,
    /// Alerts are rendered as Slack-compatible `{"text": …}` documents.
    alerts: bool,
    /// The broker this sink publishes to; `None` for an HTTP sink.
    broker: Option<Arc<Broker>>,
    /// How the rows of one key are claimed: in commit order (a dead row holding or not), or in any order.
    order: KeyOrder,
    /// The sink's token bucket (`rate_per_second`, `burst`); `None`: only `max_in_flight` bounds it.
    bucket: Option<Arc<Bucket>>,
    /// The configuration generation that last defined this target: a loop runs one revision of its target, and
    /// a reload that changes the target replaces the loop.
    revision: u64,
}

impl Target {
    fn sink(s: &SinkSettings) -> Self {
        Self {
            name: s.name.clone(),
            url: s.url.clone(),
            signer: s.signer.clone(),
            timeout: Duration::from_millis(s.timeout_ms),
            max_in_flight: s.max_in_flight.max(1),
            alerts: false,
            broker: Broker::for_sink(&s.transport, &s.url, &s.name).map(Arc::new),
            order: s.order,
            bucket: s.rate.map(|rate| Arc::new(Bucket::new(rate))),
            revision: 0,
        }
    }

    fn alerts(a: &AlertSettings) -> Self {
        Self {
            name: ALERTS_SINK.to_owned(),
            url: a.url.clone(),
            signer: None,
            timeout: Duration::from_millis(a.timeout_ms),
            max_in_flight: 1,
            alerts: true,
            broker: None,
            order: KeyOrder::Unordered,
            bucket: None,
            revision: 0,
        }
    }
}

/// What one pass over the sinks did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DispatchPass {
    /// Rows the sinks acknowledged.
    pub delivered: usize,
    /// Rows rescheduled after a transient failure.
    pub retried: usize,
    /// Rows that died (permanent failure or budget spent).
    pub dead: usize,
    /// Outcomes not recorded because the lease had been lost.
    pub lease_lost: usize,
}

impl DispatchPass {
    fn add(&mut self, other: DispatchPass) {
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.dead += other.dead;
        self.lease_lost += other.lease_lost;
    }

    fn total(&self) -> usize {
        self.delivered + self.retried + self.dead + self.lease_lost
    }
}

/// The sinks in force, replaced whole by a reload; `changed` tells the running dispatcher to look again.
#[derive(Debug)]
struct Targets {
    current: payhook_store::Current<Vec<Target>>,
    changed: tokio::sync::watch::Sender<()>,
}

impl Targets {
    fn current(&self) -> Arc<Vec<Target>> {
        self.current.current()
    }
}

/// The dispatcher. Cheap to clone.
#[derive(Debug)]
pub struct Dispatcher<S> {
    store: Arc<S>,
    targets: Arc<Targets>,
    settings: DispatcherSettings,
    client: reqwest::Client,
    owner: String,
    wake: Arc<Notify>,
    metrics: Arc<DispatchMetrics>,
    clock: Clock,
}

impl<S> Clone for Dispatcher<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            targets: Arc::clone(&self.targets),
            settings: self.settings.clone(),
            client: self.client.clone(),
            owner: self.owner.clone(),
            wake: Arc::clone(&self.wake),
            metrics: Arc::clone(&self.metrics),
            clock: self.clock.clone(),
        }
    }
}

impl<S: Store> Dispatcher<S> {
    /// A dispatcher for every configured sink and the alerts endpoint.
    pub fn new(store: Arc<S>, settings: &Settings, wake: Arc<Notify>) -> Self {
        let mut targets: Vec<Target> = settings.sinks.iter().map(Target::sink).collect();
        targets.extend(settings.alerts.iter().map(Target::alerts));
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("payhook/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        let metrics = Arc::new(DispatchMetrics::new(targets.iter().map(|t| t.name.as_str())));
        let targets =
            Targets { current: payhook_store::Current::new(targets), changed: tokio::sync::watch::channel(()).0 };
        Self {
            store,
            metrics,
            targets: Arc::new(targets),
            settings: settings.dispatcher.clone(),
            client,
            owner: format!("dispatcher-{:016x}", fastrand::u64(..)),
            wake,
            clock: Clock::system(),
        }
    }

    /// The same dispatcher reading `clock` (a test's manual one) for its rounds, signatures and attempts.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The latency of its sends, by sink, for `/metrics`.
    pub(crate) fn metrics(&self) -> &Arc<DispatchMetrics> {
        &self.metrics
    }

    /// Puts the sinks and alerts endpoint of `settings` in force (a configuration reload of `generation`).
    /// A sink named in `changed`, or new, gets a new loop; the loop of a changed or removed sink finishes the sends
    /// it has in hand (and records them) under its old definition, then stops. A removed sink's rows stay in the
    /// outbox, pending, until a sink of that name is configured again.
    pub(crate) fn reconfigure(&self, settings: &Settings, changed: &[String], generation: u64) {
        let old = self.targets.current();
        let mut targets: Vec<Target> = settings.sinks.iter().map(Target::sink).collect();
        targets.extend(settings.alerts.iter().map(Target::alerts));
        for target in &mut targets {
            target.revision = match old.iter().find(|o| o.name == target.name) {
                Some(o) if !changed.contains(&target.name) => o.revision,
                _ => generation,
            };
        }
        self.metrics.add(targets.iter().map(|t| t.name.as_str()));
        self.targets.current.replace(targets);
        self.targets.changed.send_replace(());
    }

    /// One claim-and-send round for every sink at `now_ms`.
    pub async fn run_once(&self, now_ms: i64) -> Result<DispatchPass, StoreError> {
        let mut pass = DispatchPass::default();
        for target in self.targets.current().iter() {
            pass.add(self.sink_once(target, now_ms).await?);
        }
        Ok(pass)
    }

    /// Rounds at `now_ms` until nothing due is left (for tests and for draining).
    pub async fn run_until_idle(&self, now_ms: i64) -> Result<DispatchPass, StoreError> {
        let mut total = DispatchPass::default();
        loop {
            let pass = self.run_once(now_ms).await?;
            if pass.total() == 0 {
                return Ok(total);
            }
            total.add(pass);
        }
    }

    /// Runs one loop per sink until `cancel` fires, and follows reloads: a sink added or changed gets a new loop,
    /// the loop of a sink changed or removed is stopped. A loop in the middle of a send finishes it (bounded by the
    /// sink's timeout) and records the outcome before it stops. With no sink at all it idles until shutdown, a
    /// running dispatcher as far as `/readyz` is concerned.
    pub async fn run(self, cancel: CancellationToken) {
        let mut changed = self.targets.changed.subscribe();
        // Each running loop: its sink's name, the revision it runs, and the token that stops it alone.
        let mut running: Vec<(String, u64, CancellationToken)> = Vec::new();
        let mut loops = tokio::task::JoinSet::new();
        loop {
            changed.mark_unchanged();
            let targets = self.targets.current();
            running.retain(|(name, revision, stop)| {
                let keep = targets.iter().any(|t| &t.name == name && t.revision == *revision);
                if !keep {
                    tracing::info!(sink = name, "stopping the sink's loop: the configuration changed");
                    stop.cancel();
                }
                keep
            });
            for target in targets.iter() {
                if running.iter().any(|(name, _, _)| name == &target.name) {
                    continue;
                }
                tracing::info!(sink = target.name, url = %target.url, "delivering outbox rows");
                let stop = cancel.child_token();
                running.push((target.name.clone(), target.revision, stop.clone()));
                let (this, target) = (self.clone(), target.clone());
                loops.spawn(async move { this.sink_loop(target, stop).await });
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                result = changed.changed() => if result.is_err() { break },
                // Reap the loops that stopped, so the set does not grow with every reload.
                Some(_) = loops.join_next(), if !loops.is_empty() => {}
            }
        }
        while loops.join_next().await.is_some() {}
        tracing::debug!("dispatcher stopped");
    }

    async fn sink_loop(&self, target: Target, cancel: CancellationToken) {
        let poll = Duration::from_millis(self.settings.poll_interval_ms);
        while !cancel.is_cancelled() {
            let now = self.clock.now_ms();
            let sleep = match self.sink_once(&target, now).await {
                Ok(pass) if pass.total() > 0 => continue,
                // A row due already that this claim did not take waits behind an earlier row of its key (leased
                // by another instance, backing off, or dead): its head's outcome, recorded by this loop or by the
                // wake-up of a re-queue, frees it, so the loop sleeps the full poll instead of spinning on it.
                Ok(_) => match self.store.next_outbox_due_ms(&target.name).await {
                    Ok(Some(due)) if due > now => {
                        Duration::from_millis(u64::try_from(due - now).unwrap_or(0).max(10)).min(poll)
                    }
                    // Due rows the bucket had no token for: until its next token.
                    Ok(Some(_)) if target.bucket.as_ref().is_some_and(|b| b.wait_ms(now) > 0) => {
                        let wait = target.bucket.as_ref().map_or(0, |b| b.wait_ms(now));
                        Duration::from_millis(wait.max(1)).min(poll)
                    }
                    _ => poll,
                },
                Err(e) => {
                    tracing::warn!(sink = target.name, error = %e, "dispatcher could not claim outbox rows");
                    poll
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// Claims up to the sink's concurrency, sends everything concurrently, records each outcome.
    async fn sink_once(&self, target: &Target, now_ms: i64) -> Result<DispatchPass, StoreError> {
        let mut limit = u32::try_from(target.max_in_flight).unwrap_or(u32::MAX);
        if let Some(bucket) = &target.bucket {
            limit = bucket.take(limit, now_ms);
            if limit == 0 {
                return Ok(DispatchPass::default());
            }
        }
        let claim = Claim { now_ms, lease_ms: self.settings.lease_ms, limit, owner: self.owner.clone() };
        let jobs = match self.store.claim_outbox_ordered(&target.name, claim, target.order).await {
            Ok(jobs) => jobs,
            Err(e) => {
                if let Some(bucket) = &target.bucket {
                    bucket.give_back(limit);
                }
                return Err(e);
            }
        };
        if let Some(bucket) = &target.bucket {
            bucket.give_back(limit - u32::try_from(jobs.len()).unwrap_or(limit));
        }
        let mut sends = tokio::task::JoinSet::new();
        for job in jobs {
            let (this, target) = (self.clone(), target.clone());
            sends.spawn(async move {
                let started = std::time::Instant::now();
                let outcome = this.deliver(&target, &job).await;
                this.metrics.sent(&target.name, started.elapsed());
                if matches!(outcome, Dispatched::Delivered { .. })
                    && after_sink_2xx_fires(&target.name, target.url.expose().as_str())
                {
                    // A dispatcher that dies after the sink's 2xx and before recording it: the row stays leased
                    // and is sent again, with the same key, once the lease expires.
                    let lost = StoreError::Unavailable("failpoint dispatcher::after_sink_2xx".into());
                    return (job, outcome, Err(lost));
                }
                // Never before the claim, even on a clock that went back.
                let finished_ms = this.clock.now_ms().max(now_ms);
                let recorded = this.store.finish_outbox(&job, outcome.clone(), finished_ms).await;
                (job, outcome, recorded)
            });
        }
        let mut pass = DispatchPass::default();
        while let Some(joined) = sends.join_next().await {
            let Ok((job, outcome, recorded)) = joined else { continue };
            match recorded {
                Ok(false) => pass.lease_lost += 1,
                // The row stays leased and is sent again when the lease expires: at least once, same key.
                Err(e) => tracing::warn!(sink = target.name, id = job.id, error = %e, "could not record a delivery"),
                Ok(true) => match &outcome {
                    Dispatched::Delivered { status } => {
                        pass.delivered += 1;
                        tracing::debug!(
                            sink = target.name,
                            url = %target.url,
                            id = job.id,
                            kind = job.kind.as_str(),
                            outcome = "delivered",
                            status,
                            "outbox row delivered"
                        );
                    }
                    Dispatched::Retry { error, .. } => {
                        pass.retried += 1;
                        tracing::info!(
                            sink = target.name,
                            url = %target.url,
                            id = job.id,
                            kind = job.kind.as_str(),
                            outcome = "retry",
                            error,
                            "outbox row will be retried"
                        );
                    }
                    Dispatched::Dead { error, .. } => {
                        pass.dead += 1;
                        tracing::warn!(
                            sink = target.name,
                            url = %target.url,
                            id = job.id,
                            kind = job.kind.as_str(),
                            outcome = "dead",
                            error,
                            "outbox row is dead"
                        );
                    }
                },
            }
        }
        Ok(pass)
    }

    /// Sends one row and classifies the answer; with traces exported, in a `payhook.dispatch` span of its own trace,
    /// linked to the delivery's when this process recorded it, whose context the request or message carries.
    async fn deliver(&self, target: &Target, job: &OutboxJob) -> Dispatched {
        // Recorded when the delivery that wrote the row was (this process remembers it), else as a new root is.
        let delivery = job.key.as_deref().and_then(trace::recalled);
        if delivery.is_none() && !trace::sample_root() {
            return self.send(target, job, &[]).await;
        }
        let span = tracing::debug_span!(parent: None, "payhook.dispatch",
            otel.kind = if target.broker.is_some() { "producer" } else { "client" },
            otel.status_code = tracing::field::Empty,
            payhook.sink = %target.name, payhook.outbox.id = job.id, payhook.outbox.kind = job.kind.as_str(),
            payhook.attempt = job.attempts + 1, payhook.outcome = tracing::field::Empty,
            http.request.method = if target.broker.is_some() { None } else { Some("POST") },
            http.response.status_code = tracing::field::Empty);
        if let Some(delivery) = delivery {
            span.add_link(delivery);
        }
        let headers = trace::headers_of(&span);
        let outcome = self.send(target, job, &headers).instrument(span.clone()).await;
        let (word, status) = match &outcome {
            Dispatched::Delivered { status } => ("delivered", Some(*status)),
            Dispatched::Retry { status, .. } => ("retry", *status),
            Dispatched::Dead { status, .. } => ("dead", *status),
        };
        span.record("payhook.outcome", word);
        if let Some(status) = status.filter(|s| *s > 0) {
            span.record("http.response.status_code", status);
        }
        if word != "delivered" {
            span.record("otel.status_code", "ERROR");
        }
        outcome
    }

    /// Sends one row with the trace context `trace` (`traceparent`, `tracestate`; empty when not traced) and
    /// classifies the answer.
    async fn send(&self, target: &Target, job: &OutboxJob, trace: &[(String, String)]) -> Dispatched {
        if let Some(broker) = &target.broker {
            return self.publish(target, broker, job, trace).await;
        }
        let body = if target.alerts { render_alert(&job.payload) } else { job.payload.clone().into_bytes() };
        let msg_id = job.id.to_string();
        let mut req = self
            .client
            .post(target.url.expose().clone())
            .timeout(target.timeout)
            .header("content-type", "application/json")
            .header("idempotency-key", &msg_id);
        match &target.signer {
            Some(signer) => {
                for (name, value) in signer.sign(&body, self.clock.now_ms() / 1000, &msg_id) {
                    req = req.header(name, value);
                }
            }
            None => req = req.header("webhook-id", &msg_id),
        }
        for (name, value) in trace {
            req = req.header(name.as_str(), value.as_str());
        }
        let attempt = job.attempts + 1;
        let (status, retry_after, error) = match req.body(body).send().await {
            Ok(resp) if resp.status().is_success() => return Dispatched::Delivered { status: resp.status().as_u16() },
            Ok(resp) => {
                let status = resp.status();
                let retry_after = retry_after_ms(resp.headers());
                let error = match status.canonical_reason() {
                    Some(reason) => format!("{} {reason} from {}", status.as_u16(), target.url),
                    None => format!("{} from {}", status.as_u16(), target.url),
                };
                if !retryable(status) {
                    return Dispatched::Dead { status: Some(status.as_u16()), error };
                }
                (Some(status.as_u16()), retry_after, error)
            }
            Err(e) if e.is_timeout() => {
                (None, None, format!("no answer from {} within {} ms", target.url, target.timeout.as_millis()))
            }
            Err(e) => (None, None, format!("request to {} failed: {}", target.url, client_error(e))),
        };
        let now = self.clock.now_ms();
        match self.settings.retry.next(attempt, now, fastrand::f64()) {
            Next::RetryAt(at) => Dispatched::Retry { at_ms: at.max(now + retry_after.unwrap_or(0)), status, error },
            Next::DeadLetter => {
                Dispatched::Dead { status, error: format!("retry budget spent after {attempt} attempts: {error}") }
            }
        }
    }
}

impl<S: Store> Dispatcher<S> {
    /// Publishes one row to a broker sink: its acknowledgement delivers the row, anything else is retried.
    async fn publish(
        &self,
        target: &Target,
        broker: &Broker,
        job: &OutboxJob,
        trace: &[(String, String)],
    ) -> Dispatched {
        let error = match broker.publish(job, target.timeout, trace).await {
            Ok(published) => {
                if published == Published::Duplicate {
                    tracing::info!(sink = target.name, id = job.id, "the broker dropped a re-published outbox row");
                }
                self.metrics.published(&target.name, published == Published::Duplicate);
                return Dispatched::Delivered { status: 0 };
            }
            Err(e) => e.to_string(),
        };
        let attempt = job.attempts + 1;
        let now = self.clock.now_ms();
        match self.settings.retry.next(attempt, now, fastrand::f64()) {
            Next::RetryAt(at) => Dispatched::Retry { at_ms: at, status: None, error },
            Next::DeadLetter => Dispatched::Dead {
                status: None,
                error: format!("retry budget spent after {attempt} attempts: {error}"),
            },
        }
    }
}

/// Failpoint `dispatcher::after_sink_2xx` (feature `failpoints`, tests only): configured as `return(URL)`, it fires
/// for the sinks whose URL contains `URL` or whose name is `URL`, so that tests sharing the process do not trip each
/// other. For a broker sink it fires after the broker's acknowledgement.
#[cfg(feature = "failpoints")]
fn after_sink_2xx_fires(name: &str, url: &str) -> bool {
    match fail::eval("dispatcher::after_sink_2xx", |arg| arg) {
        Some(Some(only)) => url.contains(only.as_str()) || name == only,
        Some(None) => true,
        None => false,
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
fn after_sink_2xx_fires(_name: &str, _url: &str) -> bool {
    false
}

/// 408, 409, 425, 429 and 5xx are worth retrying; every other answer is final.
fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 409 | 425 | 429) || status.is_server_error()
}

/// `Retry-After` in seconds (the HTTP-date form is not used by webhook receivers in practice and is ignored),
/// capped at one day.
fn retry_after_ms(headers: &reqwest::header::HeaderMap) -> Option<i64> {
    let secs: i64 = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    Some(secs.clamp(0, 86_400) * 1000)
}

/// A client error as text, without the URL it was about: reqwest names the full URL in its message (`error
/// sending request for url (…)`), so the URL is dropped first, and anything URL-shaped left in the chain of causes
/// is redacted.
fn client_error(e: reqwest::Error) -> String {
    redact_urls(&error_chain(&e.without_url())).into_owned()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An alert row as a Slack-compatible document: `{"text": …}` with the count of collapsed repeats.
fn render_alert(payload: &str) -> Vec<u8> {
    let v: serde_json::Value = serde_json::from_str(payload).unwrap_or_default();
    let mut text = v["text"].as_str().unwrap_or("payhook alert").to_owned();
    let count = v["count"].as_u64().unwrap_or(1);
    if count > 1 {
        let window_min = v["window_ms"].as_i64().unwrap_or(0) / 60_000;
        text.push_str(&format!(" ({count} alerts like this one within {window_min} min; the last: "));
        text.push_str(v["last_text"].as_str().unwrap_or(""));
        text.push(')');
    }
    let suppressed = v["suppressed_before"].as_u64().unwrap_or(0);
    if suppressed > 0 {
        text.push_str(&format!(" [{suppressed} more were suppressed before this alert]"));
    }
    serde_json::json!({ "text": text, "key": v["key"], "count": count }).to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_timeouts_conflicts_throttling_and_server_errors_are_retried() {
        for code in [408u16, 409, 425, 429, 500, 502, 503, 504] {
            assert!(retryable(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [400u16, 401, 403, 404, 410, 422, 301] {
            assert!(!retryable(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }

    #[test]
    fn an_alert_is_rendered_with_its_count_and_suppressed_repeats() {
        let payload = r#"{"text":"payhook: event e1 dead","count":3,"last_text":"payhook: event e3 dead",
                          "window_ms":300000,"suppressed_before":2,"key":"s:dead_letter"}"#;
        let v: serde_json::Value = serde_json::from_slice(&render_alert(payload)).unwrap();
        let text = v["text"].as_str().unwrap();
        assert!(text.starts_with("payhook: event e1 dead (3 alerts"), "{text}");
        assert!(text.contains("e3") && text.contains("2 more were suppressed"), "{text}");
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_capped() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(reqwest::header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after_ms(&h), Some(7000));
        h.insert(reqwest::header::RETRY_AFTER, "99999999".parse().unwrap());
        assert_eq!(retry_after_ms(&h), Some(86_400_000));
        h.insert(reqwest::header::RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after_ms(&h), None);
    }
}
