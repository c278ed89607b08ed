//! Whether OpenTelemetry traces are exported: one flag for the whole process, set once at start-up by the binary
//! when an OTLP endpoint is configured (docs/tracing.md). Every span the hot path makes is made only when it is on,
//! so that with export off (the default) a delivery creates no span and allocates nothing for one.

use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);

/// Turns span creation on for the rest of the process's life (there is no turning it off: the exporter's pipeline
/// is built once).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether spans are made: a relaxed load, nothing more.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

tokio::task_local! {
    /// Whether the trace of the request this task serves is sampled: set by the listener for each request.
    static SAMPLED: bool;
}

/// Runs `fut` as part of a trace that is (`sampled`) or is not recorded: [`traced`] reads it.
pub async fn scope<F: Future>(sampled: bool, fut: F) -> F::Output {
    SAMPLED.scope(sampled, fut).await
}

/// Whether spans are made here: export is on and the request this task serves (if any) is sampled. A request
/// whose trace is not sampled makes no span at all.
#[inline]
pub fn traced() -> bool {
    on() && SAMPLED.try_with(|s| *s).unwrap_or(true)
}

/// The span the work in progress belongs to (an ingest's, a retry's), when it is traced; else none. A store links
/// it to the span of the writer batch the work commits in.
pub fn current() -> tracing::Span {
    if traced() { tracing::Span::current() } else { tracing::Span::none() }
}
