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
