//! [`Clock`]: where the server reads the time it writes (received, due, attempted, pruned) and compares (retry
//! schedules, session expiry, alert windows). Production reads the system clock; a test holds a manual one and
//! moves it, so events are ordered by the test rather than by sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// The time in milliseconds since the Unix epoch, from the system or from a test.
#[derive(Debug, Clone, Default)]
pub struct Clock(Source);

#[derive(Debug, Clone, Default)]
enum Source {
    #[default]
    System,
    Manual(Arc<AtomicI64>),
}

impl Clock {
    /// The system clock: what a running server uses.
    pub fn system() -> Self {
        Self(Source::System)
    }

    /// A clock that reads `start_ms` until it is moved by [`Clock::advance`] or [`Clock::set`]. Its clones share
    /// it, so a test keeps one and gives the server another.
    pub fn manual(start_ms: i64) -> Self {
        Self(Source::Manual(Arc::new(AtomicI64::new(start_ms))))
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        match &self.0 {
            Source::System => system_now_ms(),
            Source::Manual(at) => at.load(Ordering::SeqCst),
        }
    }

    /// Moves a manual clock forward by `ms` (backward when negative) and returns its new reading. The system
    /// clock cannot be moved: it returns its reading unchanged.
    pub fn advance(&self, ms: i64) -> i64 {
        match &self.0 {
            Source::System => system_now_ms(),
            Source::Manual(at) => at.fetch_add(ms, Ordering::SeqCst) + ms,
        }
    }

    /// Sets a manual clock to `ms`; the system clock ignores it.
    pub fn set(&self, ms: i64) {
        if let Source::Manual(at) = &self.0 {
            at.store(ms, Ordering::SeqCst);
        }
    }
}

/// The system clock's reading, in milliseconds since the Unix epoch: for the command line's own timestamps, outside
/// a running server. The server reads its [`Clock`].
pub fn system_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_its_clones_move_with_it() {
        let clock = Clock::manual(1_000);
        let server = clock.clone();
        assert_eq!(server.now_ms(), 1_000);
        assert_eq!(clock.advance(250), 1_250);
        assert_eq!(server.now_ms(), 1_250);
        clock.set(5);
        assert_eq!(server.now_ms(), 5);
    }

    #[test]
    fn the_system_clock_reads_the_time_of_day_and_cannot_be_moved() {
        let clock = Clock::system();
        let before = system_now_ms();
        let moved = clock.advance(3_600_000);
        assert!(moved >= before && moved < before + 60_000, "{before} {moved}");
        assert!(clock.now_ms() >= before);
    }
}
