//! Trace export (docs/tracing.md): the OpenTelemetry SDK's tracer provider, fed by `tracing` through
//! `tracing-opentelemetry`, exporting over OTLP (http/protobuf through payhook's own reqwest client, or gRPC
//! through tonic).
//!
//! Between the spans and the exporter sits [`BoundedBatch`], payhook's batch processor: a queue of at most
//! `telemetry.export_queue` finished spans, a thread that exports them in batches of at most [`MAX_BATCH`] every
//! [`EXPORT_DELAY`] (or as soon as a batch is full), and a count of what the full queue dropped
//! (`payhook_trace_spans_dropped_total`). The SDK's own batch processor drops the same way but only logs how many,
//! once, at shutdown; `/metrics` needs the number while it runs.
//!
//! Invariant: with export off (the default) nothing here runs: no provider, no layer, and the server makes no span
//! (`payhook_server::trace::on` is false).

use crate::config::{Export, ParentRoot, Protocol, Sampler};
use anyhow::{Context as _, Result};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter as _, SpanProcessor};
use payhook_server::trace::{EXPORT_FAILURES, SPANS_DROPPED, SPANS_EXPORTED};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most spans one export request carries.
pub const MAX_BATCH: usize = 512;
/// How long a finished span waits at most before its batch is exported.
pub const EXPORT_DELAY: Duration = Duration::from_secs(2);
/// How long one export may take before it counts as failed.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The running trace pipeline: flushed and stopped by [`Pipeline::shutdown`].
#[derive(Debug)]
pub struct Pipeline {
    provider: SdkTracerProvider,
}

impl Pipeline {
    /// Builds the exporter and the provider for `export`, and turns span creation on. Within a Tokio runtime: the
    /// exporters' clients are bound to it.
    pub fn start(export: &Export) -> Result<(Self, SdkTracer)> {
        let handle = tokio::runtime::Handle::try_current().context("trace export needs the Tokio runtime")?;
        let mut exporter = match export.protocol {
            Protocol::HttpProtobuf => {
                let client = reqwest::Client::builder()
                    .timeout(EXPORT_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .context("the OTLP HTTP client")?;
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_http_client(OtlpHttpClient(client))
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(export.endpoint.clone())
                    .with_timeout(EXPORT_TIMEOUT)
                    .build()
            }
            Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(export.endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .build(),
        }
        .with_context(|| format!("cannot build the OTLP exporter for {}", export.endpoint))?;
        let mut attributes: Vec<KeyValue> =
            export.resource.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())).collect();
        attributes.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        let resource = Resource::builder_empty()
            .with_attributes(attributes)
            .with_service_name(export.service_name.clone())
            .build();
        exporter.set_resource(&resource);
        let processor = BoundedBatch::start(exporter, export.export_queue, handle);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler(export.sampler))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("payhook");
        opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
        payhook_server::trace::enable();
        Ok((Self { provider }, tracer))
    }

    /// Exports what is queued and stops the exporter: at the end of `serve`, after the last request was answered.
    /// Blocks, so it runs on a blocking thread.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let stopped = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match stopped {
            Ok(Ok(())) => tracing::debug!("trace export flushed and stopped"),
            Ok(Err(e)) => tracing::warn!(error = %e, "trace export did not stop cleanly"),
            Err(e) => tracing::warn!(error = %e, "trace export shutdown panicked"),
        }
    }
}

fn sampler(s: Sampler) -> opentelemetry_sdk::trace::Sampler {
    use opentelemetry_sdk::trace::Sampler as S;
    let root = |r: ParentRoot| match r {
        ParentRoot::AlwaysOn => S::AlwaysOn,
        ParentRoot::AlwaysOff => S::AlwaysOff,
        ParentRoot::TraceIdRatio(ratio) => S::TraceIdRatioBased(ratio),
    };
    match s {
        Sampler::AlwaysOn => S::AlwaysOn,
        Sampler::AlwaysOff => S::AlwaysOff,
        Sampler::TraceIdRatio(ratio) => S::TraceIdRatioBased(ratio),
        Sampler::ParentBased(r) => S::ParentBased(Box::new(root(r))),
    }
}

/// The OTLP exporter's HTTP client: payhook's reqwest (0.12, rustls), so that no second HTTP stack is built.
#[derive(Debug)]
struct OtlpHttpClient(reqwest::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpHttpClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let answer =
            self.0.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body).send().await?;
        let status = answer.status();
        let headers = answer.headers().clone();
        let body = answer.bytes().await?;
        let mut response = opentelemetry_http::Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

enum Msg {
    Span(Box<SpanData>),
    /// Export everything queued, then answer.
    Flush(SyncSender<()>),
    /// Export everything queued, stop the exporter, answer and end.
    Stop(SyncSender<()>),
}

/// The batch span processor with a bounded queue and a count of what it drops (see the module's comment).
#[derive(Debug)]
struct BoundedBatch {
    queue: SyncSender<Msg>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Msg::Span(_) => "Span",
            Msg::Flush(_) => "Flush",
            Msg::Stop(_) => "Stop",
        })
    }
}

impl BoundedBatch {
    fn start(exporter: opentelemetry_otlp::SpanExporter, queue: usize, runtime: tokio::runtime::Handle) -> Self {
        let (tx, rx) = mpsc::sync_channel(queue);
        let thread = std::thread::Builder::new()
            .name("payhook-trace-export".into())
            .spawn(move || export_loop(exporter, &rx, &runtime))
            .ok();
        if thread.is_none() {
            tracing::error!("cannot start the trace export thread; spans are dropped");
        }
        Self { queue: tx, thread: Mutex::new(thread) }
    }

    fn control(&self, make: impl FnOnce(SyncSender<()>) -> Msg, timeout: Duration) -> OTelSdkResult {
        let (ack, done) = mpsc::sync_channel(1);
        // Waits for room: the thread drains the queue.
        self.queue.send(make(ack)).map_err(|_| OTelSdkError::AlreadyShutdown)?;
        done.recv_timeout(timeout).map_err(|_| OTelSdkError::Timeout(timeout))
    }
}

impl SpanProcessor for BoundedBatch {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.queue.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                SPANS_DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.control(Msg::Flush, EXPORT_TIMEOUT * 2)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let stopped = self.control(Msg::Stop, timeout);
        if let Some(thread) = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take()
            && stopped.is_ok()
        {
            let _ = thread.join();
        }
        stopped
    }
}

/// The export thread: batches of at most [`MAX_BATCH`], sent when full or [`EXPORT_DELAY`] after the first span
/// of the batch arrived; on a flush or a stop, everything queued before it.
fn export_loop(exporter: opentelemetry_otlp::SpanExporter, rx: &mpsc::Receiver<Msg>, runtime: &tokio::runtime::Handle) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(MAX_BATCH);
    let mut due: Option<Instant> = None;
    loop {
        let received = match due {
            Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(Msg::Span(span)) => {
                batch.push(*span);
                due.get_or_insert_with(|| Instant::now() + EXPORT_DELAY);
                if batch.len() >= MAX_BATCH {
                    export(&exporter, &mut batch, runtime);
                    due = None;
                }
            }
            Ok(Msg::Flush(ack)) => {
                export(&exporter, &mut batch, runtime);
                due = None;
                let _ = ack.send(());
            }
            Ok(Msg::Stop(ack)) => {
                export(&exporter, &mut batch, runtime);
                let _ = exporter.shutdown();
                let _ = ack.send(());
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                export(&exporter, &mut batch, runtime);
                due = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                export(&exporter, &mut batch, runtime);
                let _ = exporter.shutdown();
                return;
            }
        }
    }
}

fn export(exporter: &opentelemetry_otlp::SpanExporter, batch: &mut Vec<SpanData>, runtime: &tokio::runtime::Handle) {
    while !batch.is_empty() {
        let take = batch.len().min(MAX_BATCH);
        let spans: Vec<SpanData> = batch.drain(..take).collect();
        let n = spans.len() as u64;
        SPANS_EXPORTED.fetch_add(n, Ordering::Relaxed);
        let sent = runtime.block_on(async { tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(spans)).await });
        if !matches!(sent, Ok(Ok(()))) {
            EXPORT_FAILURES.fetch_add(1, Ordering::Relaxed);
            match sent {
                Ok(Err(e)) => tracing::debug!(error = %e, spans = n, "trace export failed"),
                _ => tracing::debug!(spans = n, "trace export timed out"),
            }
        }
    }
}
