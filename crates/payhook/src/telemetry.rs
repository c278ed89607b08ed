//! Trace export (docs/tracing.md): the OpenTelemetry SDK's tracer provider, fed by OpenTelemetry's API and by
//! `tracing` through `tracing-opentelemetry`, exporting over OTLP: http/protobuf through payhook's own reqwest
//! client, or gRPC through tonic. The request is written by [`otlp::Encoder`] (decision 47: opentelemetry-otlp's
//! conversion and encoding were half of what a recorded delivery cost).
//!
//! Between the spans and the exporter sits `BoundedBatch`, payhook's batch processor: a queue of at most
//! `telemetry.export_queue` finished spans, a thread that exports them in batches of at most [`MAX_BATCH`] every
//! [`EXPORT_DELAY`] (or as soon as a batch is full), and a count of what the full queue dropped
//! (`payhook_trace_spans_dropped_total`). The SDK's own batch processor drops the same way but only logs how many,
//! once, at shutdown; `/metrics` needs the number while it runs.
//!
//! Invariant: with export off (the default) nothing here runs: no provider, no layer, and the server makes no span
//! (`payhook_server::trace::on` is false).

mod otlp;

use crate::config::{Export, ParentRoot, Protocol, Sampler};
use anyhow::{Context as _, Result};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanProcessor};
use payhook_server::trace::{EXPORT_FAILURES, SPANS_DROPPED, SPANS_EXPORTED};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// The most spans one export request carries.
pub const MAX_BATCH: usize = 512;
/// How long a finished span waits at most before its batch is exported.
pub const EXPORT_DELAY: Duration = Duration::from_secs(2);
/// How long one export may take before it counts as failed.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The gRPC method OTLP's trace export calls (`opentelemetry/proto/collector/trace/v1/trace_service.proto`).
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The running trace pipeline: flushed and stopped by [`Pipeline::shutdown`].
#[derive(Debug)]
pub struct Pipeline {
    provider: SdkTracerProvider,
}

impl Pipeline {
    /// Builds the exporter and the provider for `export`, and turns span creation on. Within a Tokio runtime: the
    /// export's HTTP client or gRPC channel is bound to it.
    pub fn start(export: &Export) -> Result<(Self, SdkTracer)> {
        let handle = tokio::runtime::Handle::try_current().context("trace export needs the Tokio runtime")?;
        let transport = Transport::new(export)?;
        let mut attributes: Vec<KeyValue> =
            export.resource.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())).collect();
        attributes.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        let resource = Resource::builder_empty()
            .with_attributes(attributes)
            .with_service_name(export.service_name.clone())
            .build();
        let exporter = Exporter { encoder: otlp::Encoder::new(&resource), transport };
        let processor = BoundedBatch::start(exporter, export.export_queue, handle);
        // Roots are sampled by payhook before any span is made (`payhook_server::trace::sample_root`); the SDK's
        // sampler follows a parent's decision or records what payhook chose to make.
        let (ratio, parent_based) = root_sampling(export.sampler);
        payhook_server::trace::set_sampling(ratio, parent_based);
        payhook_server::trace::set_recent_traces(export.recent_traces);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sdk_sampler(export.sampler))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("payhook");
        opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
        // The server's leaf spans (verification, parsing) are made through OpenTelemetry's API, by the global tracer.
        opentelemetry::global::set_tracer_provider(provider.clone());
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

/// The fraction of root traces payhook makes spans for, and whether a parent's decision is followed.
fn root_sampling(s: Sampler) -> (f64, bool) {
    match s {
        Sampler::AlwaysOn => (1.0, false),
        Sampler::AlwaysOff => (0.0, false),
        Sampler::TraceIdRatio(ratio) => (ratio, false),
        Sampler::ParentBased(ParentRoot::AlwaysOn) => (1.0, true),
        Sampler::ParentBased(ParentRoot::AlwaysOff) => (0.0, true),
        Sampler::ParentBased(ParentRoot::TraceIdRatio(ratio)) => (ratio, true),
    }
}

/// The SDK's sampler: every root payhook made a span for is recorded (it sampled already), and with a
/// parent-based sampler a parent's decision is followed.
fn sdk_sampler(s: Sampler) -> opentelemetry_sdk::trace::Sampler {
    use opentelemetry_sdk::trace::Sampler as S;
    match s {
        Sampler::AlwaysOff => S::AlwaysOff,
        Sampler::AlwaysOn | Sampler::TraceIdRatio(_) => S::AlwaysOn,
        Sampler::ParentBased(_) => S::ParentBased(Box::new(S::AlwaysOn)),
    }
}

/// Where export requests go, and how. Not `Debug`: its headers hold a collector's token.
enum Transport {
    /// POSTed to the traces URL through payhook's reqwest (0.12, rustls), so that no second HTTP stack is built.
    Http { client: reqwest::Client, url: String, headers: reqwest::header::HeaderMap },
    /// The `Export` call of OTLP's trace service.
    Grpc { channel: tonic::transport::Channel, metadata: tonic::metadata::MetadataMap },
}

impl Transport {
    /// Builds the client for `export`; a gRPC channel connects at its first call. Within a Tokio runtime.
    fn new(export: &Export) -> Result<Self> {
        Ok(match export.protocol {
            Protocol::HttpProtobuf => {
                let client = reqwest::Client::builder()
                    .timeout(EXPORT_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .context("the OTLP HTTP client")?;
                let mut headers = reqwest::header::HeaderMap::new();
                for (name, value) in export.headers.pairs() {
                    headers.insert(
                        reqwest::header::HeaderName::from_bytes(name.as_bytes())?,
                        reqwest::header::HeaderValue::from_str(value)?,
                    );
                }
                Self::Http { client, url: export.endpoint.clone(), headers }
            }
            Protocol::Grpc => {
                let channel = tonic::transport::Endpoint::from_shared(export.endpoint.clone())
                    .with_context(|| format!("cannot use {} as a gRPC endpoint", export.endpoint))?
                    .timeout(EXPORT_TIMEOUT)
                    .connect_lazy();
                let mut metadata = tonic::metadata::MetadataMap::new();
                for (name, value) in export.headers.pairs() {
                    metadata.insert(
                        tonic::metadata::MetadataKey::from_bytes(name.as_bytes())?,
                        tonic::metadata::MetadataValue::try_from(value.as_str())?,
                    );
                }
                Self::Grpc { channel, metadata }
            }
        })
    }

    /// Sends one encoded `ExportTraceServiceRequest`; a collector's refusal is an error, with its status.
    async fn send(&self, body: Vec<u8>) -> Result<(), String> {
        match self {
            Self::Http { client, url, headers } => {
                let answer = client
                    .post(url)
                    .headers(headers.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let status = answer.status();
                // Read to the end, so that the connection is kept for the next export.
                let _ = answer.bytes().await;
                if status.is_success() { Ok(()) } else { Err(format!("the collector answered {status}")) }
            }
            Self::Grpc { channel, metadata } => {
                let mut grpc = tonic::client::Grpc::new(channel.clone());
                grpc.ready().await.map_err(|e| e.to_string())?;
                let mut request = tonic::Request::new(body);
                *request.metadata_mut() = metadata.clone();
                let path = http::uri::PathAndQuery::from_static(GRPC_EXPORT);
                grpc.unary(request, path, Encoded).await.map(drop).map_err(|status| status.to_string())
            }
        }
    }
}

/// A gRPC codec for a request payhook encoded itself ([`otlp::Encoder`]), whose answer
/// (`ExportTraceServiceResponse`) is read past: a call's success is its status.
#[derive(Debug, Clone, Copy, Default)]
struct Encoded;

impl tonic::codec::Codec for Encoded {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = Encoded;
    type Decoder = Encoded;

    fn encoder(&mut self) -> Self::Encoder {
        Encoded
    }

    fn decoder(&mut self) -> Self::Decoder {
        Encoded
    }
}

impl tonic::codec::Encoder for Encoded {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Encoded {
    type Item = ();
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<()>, tonic::Status> {
        let rest = bytes::Buf::remaining(src);
        bytes::Buf::advance(src, rest);
        Ok(Some(()))
    }
}

/// The encoder and the transport: what the export thread sends batches with.
struct Exporter {
    encoder: otlp::Encoder,
    transport: Transport,
}

/// What the export thread shares with the spans' threads: the queue, and what it is asked to do.
#[derive(Debug, Default)]
struct Queue {
    spans: Vec<SpanData>,
    /// Flush requests waiting for the next export to finish: answered after it.
    flushes: Vec<SyncSender<()>>,
    /// Asked to stop: export what is queued, stop the exporter, answer, end.
    stop: Option<SyncSender<()>>,
}

/// The batch span processor with a bounded queue and a count of what it drops (see the module's comment). A span's
/// thread only pushes it under a short lock; the export thread is woken when a batch is full, asked to flush or to
/// stop, and otherwise wakes every [`EXPORT_DELAY`] by itself, so that a span costs no thread switch.
#[derive(Debug)]
struct BoundedBatch {
    shared: Arc<(Mutex<Queue>, Condvar)>,
    capacity: usize,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl BoundedBatch {
    fn start(exporter: Exporter, capacity: usize, runtime: tokio::runtime::Handle) -> Self {
        let shared = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("payhook-trace-export".into())
            .spawn(move || export_loop(exporter, &theirs, &runtime))
            .ok();
        if thread.is_none() {
            tracing::error!("cannot start the trace export thread; spans are dropped");
        }
        Self { shared, capacity, thread: Mutex::new(thread) }
    }

    /// Asks the export thread for `what` and waits for its answer, at most `timeout`.
    fn ask(&self, what: impl FnOnce(&mut Queue, SyncSender<()>), timeout: Duration) -> OTelSdkResult {
        let (ack, done) = mpsc::sync_channel(1);
        {
            let (queue, wake) = &*self.shared;
            let mut queue = queue.lock().unwrap_or_else(PoisonError::into_inner);
            what(&mut queue, ack);
            wake.notify_one();
        }
        done.recv_timeout(timeout).map_err(|_| OTelSdkError::Timeout(timeout))
    }
}

impl SpanProcessor for BoundedBatch {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let (queue, wake) = &*self.shared;
        let mut queue = queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.spans.len() >= self.capacity || queue.stop.is_some() {
            SPANS_DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        queue.spans.push(span);
        if queue.spans.len() == MAX_BATCH {
            wake.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(|q, ack| q.flushes.push(ack), EXPORT_TIMEOUT * 2)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let stopped = self.ask(|q, ack| q.stop = Some(ack), timeout);
        if let Some(thread) = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take()
            && stopped.is_ok()
        {
            let _ = thread.join();
        }
        stopped
    }
}

/// The export thread: every [`EXPORT_DELAY`], or as soon as a batch is full, a flush is asked for or the processor
/// stops, takes everything queued and exports it in batches of at most [`MAX_BATCH`].
fn export_loop(exporter: Exporter, shared: &(Mutex<Queue>, Condvar), runtime: &tokio::runtime::Handle) {
    let (queue, wake) = shared;
    loop {
        let (mut spans, flushes, stop) = {
            let mut q = queue.lock().unwrap_or_else(PoisonError::into_inner);
            if q.spans.len() < MAX_BATCH && q.flushes.is_empty() && q.stop.is_none() {
                q = wake.wait_timeout(q, EXPORT_DELAY).unwrap_or_else(PoisonError::into_inner).0;
            }
            // The next spans go into room for a full batch: a queue grown anew at every export copies each span
            // as often as it doubles.
            let room = Vec::with_capacity(MAX_BATCH);
            (std::mem::replace(&mut q.spans, room), std::mem::take(&mut q.flushes), q.stop.take())
        };
        export(&exporter, &spans, runtime);
        spans.clear();
        for ack in flushes {
            let _ = ack.send(());
        }
        if let Some(ack) = stop {
            let _ = ack.send(());
            return;
        }
    }
}

/// Exports `batch` in requests of at most [`MAX_BATCH`] spans, one after the other.
fn export(exporter: &Exporter, batch: &[SpanData], runtime: &tokio::runtime::Handle) {
    for spans in batch.chunks(MAX_BATCH) {
        let n = spans.len() as u64;
        SPANS_EXPORTED.fetch_add(n, Ordering::Relaxed);
        let mut body = Vec::with_capacity(spans.len() * 512);
        exporter.encoder.encode(spans, &mut body);
        let sent =
            runtime.block_on(async { tokio::time::timeout(EXPORT_TIMEOUT, exporter.transport.send(body)).await });
        if !matches!(sent, Ok(Ok(()))) {
            EXPORT_FAILURES.fetch_add(1, Ordering::Relaxed);
            match sent {
                Ok(Err(e)) => tracing::debug!(error = %e, spans = n, "trace export failed"),
                _ => tracing::debug!(spans = n, "trace export timed out"),
            }
        }
    }
}
