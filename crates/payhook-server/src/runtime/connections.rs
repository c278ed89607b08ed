//! The public listener's counters (`http::listener` counts, `/metrics` renders): connections accepted, open,
//! refused by a cap and closed by a bound, and requests stopped by a deadline.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a connection was closed by payhook rather than by its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Its request head did not arrive in time.
    HeaderTimeout,
    /// It sat idle between requests for too long.
    Idle,
    /// The TLS handshake did not complete in time, or failed.
    Handshake,
    /// The shutdown's grace period ended with it still open.
    Shutdown,
}

/// Why a new connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `max_connections` were open.
    MaxConnections,
    /// Its client already held `max_connections_per_client`.
    PerClient,
}

impl Refused {
    fn label(self) -> &'static str {
        match self {
            Refused::MaxConnections => "max_connections",
            Refused::PerClient => "max_connections_per_client",
        }
    }
}

/// The listener's instruments, rendered at `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct ConnectionMetrics {
    pub(crate) accepted: AtomicU64,
    pub(crate) open: AtomicU64,
    pub(crate) refused_max_connections: AtomicU64,
    pub(crate) refused_per_client: AtomicU64,
    pub(crate) header_timeouts: AtomicU64,
    pub(crate) idle_closed: AtomicU64,
    pub(crate) handshake_failures: AtomicU64,
    pub(crate) shutdown_closed: AtomicU64,
    pub(crate) max: AtomicU64,
    pub(crate) max_per_client: AtomicU64,
    /// Client addresses with a connection open (the per-client table's size).
    pub(crate) clients: Arc<AtomicU64>,
    pub(crate) body_timeouts: AtomicU64,
    pub(crate) request_timeouts: AtomicU64,
}

impl ConnectionMetrics {
    pub(crate) fn closed(&self, why: Closed) {
        let counter = match why {
            Closed::HeaderTimeout => &self.header_timeouts,
            Closed::Idle => &self.idle_closed,
            Closed::Handshake => &self.handshake_failures,
            Closed::Shutdown => &self.shutdown_closed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, why: Refused) -> &AtomicU64 {
        match why {
            Refused::MaxConnections => &self.refused_max_connections,
            Refused::PerClient => &self.refused_per_client,
        }
    }

    /// Appends the connection families in the Prometheus text format.
    pub(crate) fn render_into(&self, out: &mut String) {
        let families: [(&str, &str, &str, &AtomicU64); 9] = [
            (
                "payhook_connections_accepted_total",
                "counter",
                "Connections accepted on the public listener.",
                &self.accepted,
            ),
            ("payhook_connections_open", "gauge", "Connections open on the public listener.", &self.open),
            ("payhook_connections_max", "gauge", "The connection cap (server.max_connections).", &self.max),
            (
                "payhook_connections_per_client_max",
                "gauge",
                "The connection cap per client address (server.max_connections_per_client).",
                &self.max_per_client,
            ),
            (
                "payhook_connections_clients",
                "gauge",
                "Client addresses with a connection open (IPv6 by /64; trusted proxies not counted).",
                &self.clients,
            ),
            (
                "payhook_connections_header_timeout_total",
                "counter",
                "Connections closed because a request head took longer than server.header_read_timeout_ms.",
                &self.header_timeouts,
            ),
            (
                "payhook_connections_idle_closed_total",
                "counter",
                "Keep-alive connections closed after server.keep_alive_idle_ms without a request.",
                &self.idle_closed,
            ),
            (
                "payhook_connections_tls_handshake_failures_total",
                "counter",
                "TLS handshakes that failed or did not finish within server.header_read_timeout_ms.",
                &self.handshake_failures,
            ),
            (
                "payhook_connections_shutdown_closed_total",
                "counter",
                "Connections still open when the shutdown's grace period (server.shutdown_grace_ms) ended.",
                &self.shutdown_closed,
            ),
        ];
        for (name, kind, help, value) in families {
            let _ =
                writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}", value.load(Ordering::Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP payhook_connections_refused_total Connections closed at once: server.max_connections were open, \
             or the client address held server.max_connections_per_client.\n\
             # TYPE payhook_connections_refused_total counter"
        );
        for why in [Refused::MaxConnections, Refused::PerClient] {
            let _ = writeln!(
                out,
                "payhook_connections_refused_total{{reason=\"{}\"}} {}",
                why.label(),
                self.refused(why).load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP payhook_requests_timed_out_total Requests answered by a deadline and closed: their body took longer \
             than server.body_timeout_ms (408), or the whole request longer than server.request_timeout_ms (503).\n\
             # TYPE payhook_requests_timed_out_total counter\n\
             payhook_requests_timed_out_total{{deadline=\"body\"}} {}\n\
             payhook_requests_timed_out_total{{deadline=\"request\"}} {}",
            self.body_timeouts.load(Ordering::Relaxed),
            self.request_timeouts.load(Ordering::Relaxed)
        );
    }
}
