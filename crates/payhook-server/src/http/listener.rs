//! The public listener: an accept loop with a connection cap, HTTP/1.1 over hyper with header limits, a header
//! read timeout and a keep-alive idle timeout, optional TLS (rustls, reloadable), and a shutdown with a grace period.
//!
//! `axum::serve` has none of these bounds: a socket that never finishes its headers, or an idle keep-alive
//! connection, would hold a file descriptor forever, and a graceful shutdown would wait for it. Here every
//! connection is in exactly one of three phases, each with a bound:
//!
//! - *waiting for a request head* (a fresh connection, or bytes of the next request after a response): closed when
//!   the head is not complete within `header_read_timeout_ms` of its first byte (of the accept for a new one);
//! - *idle between requests* (keep-alive, no byte received since the last answer): closed after `keep_alive_idle_ms`;
//! - *serving a request*: the whole request must be answered within `request_timeout_ms` of its head (503, or 408
//!   while its body is still arriving), and its body must be complete within `body_timeout_ms` (408), on every route
//!   (`crate::runtime::body`: the body wrapper, which also charges the body's bytes to the process's `body_buffer_bytes`;
//!   503 with `Retry-After` beyond it). A request stopped by a deadline or the buffer bound is answered by the
//!   service wrapper here, and its connection is closed.
//!
//! A client address holds at most `max_connections_per_client` of the `max_connections` (`clients`); beyond either
//! cap a new connection is closed at once.
//!
//! hyper's own `header_read_timeout` starts counting as soon as the connection waits for a head, idle keep-alive
//! included, so it cannot give an idle connection longer than a slow head; the phases are therefore tracked here, by
//! a wrapper around the socket that notes when bytes arrive and a service wrapper that notes when a request starts
//! and ends.

mod clients;

use crate::base::ip_range::IpRange;
use crate::base::settings::{ListenerSettings, TlsSettings};
use crate::base::trace;
use crate::http::error::ApiError;
use crate::runtime::body::{BodyBudget, BodyState, BodyWatch, GuardedBody};
use crate::runtime::connections::{Closed, ConnectionMetrics, Refused};
use axum::Router;
use axum::extract::ConnectInfo;
use axum::response::{IntoResponse as _, Response};
use clients::Clients;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// How often a refused connection is logged at most: a flood must not flood the log too.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The TLS configuration in use, swapped whole on reload so that a connection uses either the old or the new one.
pub(crate) struct TlsReloader {
    settings: TlsSettings,
    current: RwLock<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for TlsReloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsReloader").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// Why the certificate or key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// A file holds no usable PEM item.
    #[error("{path} holds no {what} in PEM form")]
    Empty {
        /// The file.
        path: String,
        /// What was expected.
        what: &'static str,
    },
    /// rustls refused the pair.
    #[error("the certificate and key cannot be used: {0}")]
    Rustls(#[from] rustls::Error),
}

impl TlsReloader {
    pub(crate) fn load(settings: TlsSettings) -> Result<Self, TlsError> {
        let acceptor = acceptor(&settings)?;
        Ok(Self { settings, current: RwLock::new(acceptor) })
    }

    /// Reads the certificate and key again; on failure the current ones stay in use.
    pub(crate) fn reload(&self) -> Result<(), TlsError> {
        let fresh = acceptor(&self.settings)?;
        if let Ok(mut current) = self.current.write() {
            *current = fresh;
        }
        Ok(())
    }

    fn acceptor(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.current.read().ok().map(|a| a.clone())
    }
}

fn acceptor(settings: &TlsSettings) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| TlsError::Read { path: path.display().to_string(), source })
    };
    let cert_pem = read(&settings.cert_path)?;
    let key_pem = read(&settings.key_path)?;
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&cert_pem).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::Empty { path: settings.cert_path.display().to_string(), what: "certificate" });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|_| TlsError::Empty { path: settings.key_path.display().to_string(), what: "private key" })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The public listener, ready to run.
pub(crate) struct Listener {
    pub(crate) tcp: TcpListener,
    pub(crate) settings: ListenerSettings,
    pub(crate) tls: Option<Arc<TlsReloader>>,
    pub(crate) metrics: Arc<ConnectionMetrics>,
    /// The process's budget of request body bytes, shared by every listener.
    pub(crate) body_budget: Arc<BodyBudget>,
    /// Peers not held to `max_connections_per_client` (`server.trusted_proxies`).
    pub(crate) trusted_proxies: Vec<IpRange>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("tcp", &self.tcp).field("tls", &self.tls.is_some()).finish_non_exhaustive()
    }
}

impl Listener {
    /// Accepts and serves connections until `stop` is cancelled; then stops accepting, closes the connections
    /// without a request in progress, lets those with one finish for up to `shutdown_grace_ms`, and closes the rest.
    pub(crate) async fn run(self, app: Router, stop: CancellationToken) -> io::Result<()> {
        let Listener { tcp, settings, tls, metrics, body_budget, trusted_proxies } = self;
        let settings = Arc::new(settings);
        metrics.max.store(settings.max_connections as u64, Ordering::Relaxed);
        metrics.max_per_client.store(settings.max_connections_per_client as u64, Ordering::Relaxed);
        let permits = Arc::new(Semaphore::new(settings.max_connections));
        let trusted: Arc<[IpRange]> = trusted_proxies.clone().into();
        let clients =
            Arc::new(Clients::new(settings.max_connections_per_client, trusted_proxies, Arc::clone(&metrics.clients)));
        let bounds = Arc::new(RequestBounds {
            body_timeout_ms: settings.body_timeout_ms,
            request_timeout_ms: settings.request_timeout_ms,
            budget: body_budget,
            metrics: Arc::clone(&metrics),
        });
        // Closed at the end of the grace period: every connection still open is dropped.
        let hard = CancellationToken::new();
        let mut connections = JoinSet::new();
        let mut refusals = RefusalLog::default();
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => break,
                Some(joined) = connections.join_next(), if !connections.is_empty() => {
                    crate::base::task::log_if_panicked("connection", joined);
                    continue;
                }
                accepted = tcp.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(pair) => pair,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to be closed rather than spin.
                    tracing::error!(error = %e, "accept failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            // The cap first, so that a full listener is counted as such whoever asks; then the client's share.
            let admitted = match Arc::clone(&permits).try_acquire_owned() {
                Ok(permit) => clients.admit(peer.ip()).map(|slot| (permit, slot)).map_err(|()| Refused::PerClient),
                Err(_) => Err(Refused::MaxConnections),
            };
            let (permit, client_slot) = match admitted {
                Ok(admitted) => admitted,
                Err(why) => {
                    drop(stream);
                    metrics.refused(why).fetch_add(1, Ordering::Relaxed);
                    refusals.refused(why, peer, &settings);
                    continue;
                }
            };
            metrics.accepted.fetch_add(1, Ordering::Relaxed);
            metrics.open.fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_nodelay(true);
            let peer_ip = peer.ip().to_canonical();
            let connection = Connection {
                app: app.clone(),
                peer,
                trusted_proxy: trusted.iter().any(|range| range.contains(peer_ip)),
                settings: Arc::clone(&settings),
                metrics: Arc::clone(&metrics),
                bounds: Arc::clone(&bounds),
                graceful: stop.clone(),
                hard: hard.clone(),
            };
            let tls = tls.as_ref().and_then(|t| t.acceptor());
            connections.spawn(async move {
                connection.serve(stream, tls).await;
                drop(client_slot);
                drop(permit);
            });
        }
        drop(tcp);
        let grace = Duration::from_millis(settings.shutdown_grace_ms);
        let drained = tokio::time::timeout(grace, async {
            while let Some(joined) = connections.join_next().await {
                crate::base::task::log_if_panicked("connection", joined);
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                open = connections.len(),
                grace_ms = settings.shutdown_grace_ms,
                "shutdown: the grace period ended; closing the connections still open"
            );
            hard.cancel();
            while let Some(joined) = connections.join_next().await {
                crate::base::task::log_if_panicked("connection", joined);
            }
        }
        Ok(())
    }
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Logs refused connections at most every [`REFUSAL_LOG_INTERVAL`], with how many were refused since.
#[derive(Debug, Default)]
struct RefusalLog {
    since_log: [u64; 2],
    last_log: Option<Instant>,
}

impl RefusalLog {
    fn refused(&mut self, why: Refused, peer: SocketAddr, settings: &ListenerSettings) {
        self.since_log[usize::from(why == Refused::PerClient)] += 1;
        if self.last_log.is_some_and(|t| t.elapsed() < REFUSAL_LOG_INTERVAL) {
            return;
        }
        let [max_connections, per_client] = self.since_log;
        tracing::warn!(
            refused = max_connections + per_client,
            refused_max_connections = max_connections,
            refused_per_client = per_client,
            max_connections = settings.max_connections,
            max_connections_per_client = settings.max_connections_per_client,
            last_peer = %peer,
            "connections refused: {}",
            match why {
                Refused::MaxConnections => "server.max_connections are open",
                Refused::PerClient => "the client address holds server.max_connections_per_client",
            }
        );
        self.since_log = [0, 0];
        self.last_log = Some(Instant::now());
    }
}

/// What every request is held to while it is served: its body's deadline and the budget its bytes are charged to,
/// and the whole request's deadline.
#[derive(Debug)]
struct RequestBounds {
    body_timeout_ms: u64,
    request_timeout_ms: u64,
    budget: Arc<BodyBudget>,
    metrics: Arc<ConnectionMetrics>,
}

impl RequestBounds {
    /// `request` with its body under its deadline and the budget, and the watch that tells how the body ended.
    fn guard(&self, request: hyper::Request<Incoming>) -> (axum::extract::Request, Arc<BodyWatch>) {
        let (parts, body) = request.into_parts();
        let deadline = Instant::now() + Duration::from_millis(self.body_timeout_ms);
        let (body, watch) = GuardedBody::new(body, Arc::clone(&self.budget), deadline, self.body_timeout_ms);
        (axum::extract::Request::from_parts(parts, axum::body::Body::new(body)), watch)
    }

    /// Serves `request` on `app` within the request deadline; the application's answer, unless a bound stopped
    /// the request: then the bound's own answer, which closes the connection.
    ///
    /// Stopping a request drops the handler's future wherever it waits. That is safe on every route because every
    /// write is a job the store queued when it was called (the writer's bounded queue, `Store::ingest` and the rest)
    /// and runs to its end without the caller: a webhook stopped after its commit, or with its job still queued,
    /// is answered 503 and not 2xx (the invariant that a 2xx follows the durable commit holds), and the provider's
    /// retry finds it recorded (`duplicate`) or records it then; a body stopped by its deadline or the buffer bound
    /// was never complete, so nothing was verified, stored or done with it. An operator's bulk replay stopped half
    /// way has replayed each of its events whole or not at all (one store call each); the rest are still dead
    /// letters for the next call.
    async fn serve(&self, app: Router, request: axum::extract::Request, watch: &BodyWatch) -> Response {
        // Kept for the log line of a stopped request: both are cheap clones of what hyper parsed.
        let (method, uri) = (request.method().clone(), request.uri().clone());
        let answered = tokio::time::timeout(Duration::from_millis(self.request_timeout_ms), app.oneshot(request)).await;
        let stopped = match (answered, watch.state()) {
            (Ok(Ok(response)), BodyState::Reading | BodyState::Complete) => return response,
            (Ok(Err(never)), _) => match never {},
            (_, BodyState::Refused) => ApiError::BodyBufferFull,
            (Ok(Ok(_)), BodyState::TimedOut) | (Err(_), BodyState::Reading | BodyState::TimedOut) => {
                self.metrics.body_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%method, path = uri.path(), timeout_ms = self.body_timeout_ms, "request body timed out");
                ApiError::BodyTimeout(self.body_timeout_ms)
            }
            (Err(_), BodyState::Complete) => {
                self.metrics.request_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    %method, path = uri.path(), timeout_ms = self.request_timeout_ms,
                    "request stopped: it took longer than server.request_timeout_ms"
                );
                ApiError::RequestTimeout(self.request_timeout_ms)
            }
        };
        let mut response = stopped.into_response();
        response.headers_mut().insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
        response
    }
}

/// One accepted connection and what it needs to serve itself.
struct Connection {
    app: Router,
    peer: SocketAddr,
    /// Whether the peer is one of `server.trusted_proxies`, whose `X-Request-Id` is kept.
    trusted_proxy: bool,
    settings: Arc<ListenerSettings>,
    metrics: Arc<ConnectionMetrics>,
    bounds: Arc<RequestBounds>,
    graceful: CancellationToken,
    hard: CancellationToken,
}

impl Connection {
    async fn serve(self, stream: TcpStream, tls: Option<tokio_rustls::TlsAcceptor>) {
        let header_timeout = Duration::from_millis(self.settings.header_read_timeout_ms);
        match tls {
            None => self.serve_io(stream, false).await,
            Some(acceptor) => {
                let handshake = tokio::select! {
                    () = self.graceful.cancelled() => None,
                    done = tokio::time::timeout(header_timeout, acceptor.accept(stream)) => Some(done),
                };
                match handshake {
                    Some(Ok(Ok(tls_stream))) => self.serve_io(tls_stream, true).await,
                    Some(Ok(Err(e))) => {
                        tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed");
                        self.metrics.closed(Closed::Handshake);
                    }
                    Some(Err(_)) => self.metrics.closed(Closed::Handshake),
                    None => {}
                }
            }
        }
        self.metrics.open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Serves HTTP/1.1 on `io` until the client closes it, a phase's deadline passes or the shutdown closes it.
    /// Over TLS (`https`), every request says so in `X-Forwarded-Proto`, whatever the client sent, so that the
    /// dashboard's session cookie is `Secure`.
    async fn serve_io<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, io: T, https: bool) {
        let clock = Arc::new(PhaseClock::new());
        let io = TokioIo::new(TimedIo { inner: io, clock: Arc::clone(&clock) });
        let app = self.app.clone();
        let peer = self.peer;
        let service_clock = Arc::clone(&clock);
        let bounds = Arc::clone(&self.bounds);
        let trusted_proxy = self.trusted_proxy;
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            if https {
                request.headers_mut().insert("x-forwarded-proto", hyper::header::HeaderValue::from_static("https"));
            }
            let in_request = InRequest::start(Arc::clone(&service_clock));
            let id = trace::request_id(request.headers().get(trace::REQUEST_ID_HEADER), trusted_proxy);
            let cx = request_span(&request, &id);
            let id_header = hyper::header::HeaderValue::from_str(&id).ok();
            let (request, watch) = bounds.guard(request);
            let (app, bounds) = (app.clone(), Arc::clone(&bounds));
            let recorded = cx.clone();
            let serve = async move {
                let mut response = bounds.serve(app, request, &watch).await;
                drop(in_request);
                if let Some(cx) = recorded {
                    trace::end_request(&cx, response.status().as_u16());
                }
                if let Some(value) = id_header {
                    response.headers_mut().insert(trace::REQUEST_ID_HEADER, value);
                }
                Ok::<_, Infallible>(response)
            };
            let sampled = cx.is_some();
            let served = trace::Served { id, cx };
            async move {
                if trace::on() {
                    trace::with_request(served, trace::sampled_scope(sampled, serve)).await
                } else {
                    trace::with_request(served, serve).await
                }
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .max_headers(self.settings.max_headers)
            .max_buf_size(self.settings.max_header_bytes.max(8192))
            .keep_alive(true);
        let conn = builder.serve_connection(io, service);
        tokio::pin!(conn);
        let header_timeout = Duration::from_millis(self.settings.header_read_timeout_ms);
        let idle_timeout = Duration::from_millis(self.settings.keep_alive_idle_ms);
        let mut shutting_down = false;
        loop {
            let deadline = clock.deadline(header_timeout, idle_timeout);
            let sleep = tokio::time::sleep_until(deadline.map_or_else(far_future, |(at, _)| at));
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = sleep => {
                    // The phase may have changed since the deadline was computed: look again.
                    if let Some((at, why)) = clock.deadline(header_timeout, idle_timeout)
                        && at <= Instant::now()
                    {
                        self.metrics.closed(why);
                        tracing::debug!(peer = %peer, reason = ?why, "connection closed by its timeout");
                        return;
                    }
                }
                () = clock.changed.notified() => {}
                () = self.graceful.cancelled(), if !shutting_down => {
                    shutting_down = true;
                    if clock.serving() {
                        // Let the request in progress commit and be answered; the connection closes after it.
                        conn.as_mut().graceful_shutdown();
                    } else {
                        // Nothing was handed to the application: nothing to finish.
                        return;
                    }
                }
                () = self.hard.cancelled() => {
                    self.metrics.closed(Closed::Shutdown);
                    return;
                }
            }
        }
    }
}

/// The span a request is served in, when its trace is recorded (`trace::request_span`): an API request's incoming
/// `traceparent` is its parent (a webhook's is not: a provider's trace is not payhook's to join). Otherwise none: a
/// request outside the sample makes no span at all (roots are sampled before any span is made,
/// `trace::sample_request`; a parent's decision is read when its span starts).
fn request_span<B>(request: &hyper::Request<B>, id: &str) -> Option<opentelemetry::Context> {
    if !trace::on() {
        return None;
    }
    let path = request.uri().path();
    let may_join = !path.starts_with("/webhooks/");
    if !trace::sample_request(request.headers(), may_join) {
        return None;
    }
    trace::request_span(may_join.then(|| request.headers()), request.method().as_str(), path, id)
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Where a connection is in its request cycle, as told by its reads and its service.
#[derive(Debug)]
struct PhaseClock {
    state: Mutex<Phase>,
    /// Woken when the phase changes, so that the connection's deadline is recomputed.
    changed: Notify,
}

#[derive(Debug, Clone, Copy)]
struct Phase {
    /// Requests being served (more than one only with pipelining).
    serving: u32,
    /// When the current wait began: the accept, or the end of the last answer.
    since: Instant,
    /// When the first byte of the next head arrived, if one did since `since`.
    head_started: Option<Instant>,
    /// Whether a request was ever served: a fresh connection owes its first head within the header timeout.
    served_any: bool,
}

impl PhaseClock {
    fn new() -> Self {
        Self {
            state: Mutex::new(Phase { serving: 0, since: Instant::now(), head_started: None, served_any: false }),
            changed: Notify::new(),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Phase) -> R) -> R {
        let mut guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    fn serving(&self) -> bool {
        self.with(|p| p.serving > 0)
    }

    /// Bytes arrived: if no request is being served, they begin the next head.
    fn read_some(&self) {
        let started = self.with(|p| {
            let starts = p.serving == 0 && p.head_started.is_none();
            if starts {
                p.head_started = Some(Instant::now());
            }
            starts
        });
        if started {
            self.changed.notify_one();
        }
    }

    /// When this connection is to be closed if nothing changes, and why; none while a request is served.
    fn deadline(&self, header_timeout: Duration, idle_timeout: Duration) -> Option<(Instant, Closed)> {
        self.with(|p| {
            if p.serving > 0 {
                None
            } else if let Some(started) = p.head_started {
                Some((started + header_timeout, Closed::HeaderTimeout))
            } else if p.served_any {
                Some((p.since + idle_timeout, Closed::Idle))
            } else {
                Some((p.since + header_timeout, Closed::HeaderTimeout))
            }
        })
    }
}

/// Marks a request as being served for as long as it lives.
struct InRequest(Arc<PhaseClock>);

impl InRequest {
    fn start(clock: Arc<PhaseClock>) -> Self {
        clock.with(|p| {
            p.serving += 1;
            p.head_started = None;
            p.served_any = true;
        });
        clock.changed.notify_one();
        Self(clock)
    }
}

impl Drop for InRequest {
    fn drop(&mut self) {
        self.0.with(|p| {
            p.serving = p.serving.saturating_sub(1);
            p.since = Instant::now();
            p.head_started = None;
        });
        self.0.changed.notify_one();
    }
}

/// A socket that tells its [`PhaseClock`] when bytes arrive.
struct TimedIo<T> {
    inner: T,
    clock: Arc<PhaseClock>,
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.read_some();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Serves `app` on a plain listener (the separate metrics listener) with the same bounds, until `stop`.
pub(crate) fn spawn_plain(
    tcp: TcpListener,
    settings: ListenerSettings,
    body_budget: Arc<BodyBudget>,
    app: Router,
    stop: CancellationToken,
) -> crate::base::task::Task<io::Result<()>> {
    let listener = Listener {
        tcp,
        settings,
        tls: None,
        metrics: Arc::new(ConnectionMetrics::default()),
        body_budget,
        trusted_proxies: Vec::new(),
    };
    crate::base::task::Task::spawn("metrics listener", listener.run(app, stop))
}
