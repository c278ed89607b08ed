//! Counters kept in memory and rendered in the Prometheus text format at `/metrics`.
//!
//! Plain atomics: the ingest hot path pays one relaxed increment per delivery.

use payhook_store::Outcome;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

const OUTCOMES: [Outcome; 5] =
    [Outcome::Processed, Outcome::Duplicate, Outcome::Deferred, Outcome::Ignored, Outcome::DeadLettered];
const REASONS: [&str; 4] = ["missing_header", "malformed", "stale", "mismatch"];

/// Per-source counters.
#[derive(Debug, Default)]
pub struct SourceMetrics {
    outcomes: [AtomicU64; 5],
    verification_failures: [AtomicU64; 4],
}

impl SourceMetrics {
    pub(crate) fn recorded(&self, outcome: Outcome) {
        if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
            self.outcomes[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn verification_failed(&self, reason: &str) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.verification_failures[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Deliveries recorded with `outcome`.
    pub fn outcome_count(&self, outcome: Outcome) -> u64 {
        OUTCOMES.iter().position(|o| *o == outcome).map_or(0, |i| self.outcomes[i].load(Ordering::Relaxed))
    }

    /// Deliveries refused because their signature failed to verify.
    pub fn verification_failures(&self) -> u64 {
        self.verification_failures.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// Renders every source's counters.
pub(crate) fn render<'a>(sources: impl Iterator<Item = (&'a str, &'a SourceMetrics)> + Clone) -> String {
    let mut out = String::new();
    out.push_str("# HELP payhook_deliveries_total Verified deliveries recorded, by source and outcome.\n");
    out.push_str("# TYPE payhook_deliveries_total counter\n");
    for (name, m) in sources.clone() {
        for (i, o) in OUTCOMES.iter().enumerate() {
            let n = m.outcomes[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "payhook_deliveries_total{{source=\"{name}\",outcome=\"{}\"}} {n}", o.as_str());
        }
    }
    out.push_str("# HELP payhook_verification_failures_total Deliveries refused with 401, by source and reason.\n");
    out.push_str("# TYPE payhook_verification_failures_total counter\n");
    for (name, m) in sources {
        for (i, r) in REASONS.iter().enumerate() {
            let n = m.verification_failures[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "payhook_verification_failures_total{{source=\"{name}\",reason=\"{r}\"}} {n}");
        }
    }
    out
}

/// Minutes the dashboard's chart covers.
pub(crate) const THROUGHPUT_MINUTES: usize = 60;

/// Deliveries answered 2xx and their latency, per minute over the last hour: a ring of one slot per minute that
/// the ingest path writes with three relaxed atomic operations and the dashboard reads.
///
/// A slot is reset by the first delivery of a new minute; a delivery of that minute counted by another thread
/// between the reset of the slot's minute and of its counts may be lost. That is the price of no lock on the hot
/// path, and a chart can pay it.
#[derive(Debug)]
pub(crate) struct Throughput {
    slots: [MinuteSlot; THROUGHPUT_MINUTES],
}

#[derive(Debug, Default)]
struct MinuteSlot {
    /// Unix minute the counts belong to.
    minute: std::sync::atomic::AtomicI64,
    count: AtomicU64,
    latency_us: AtomicU64,
}

/// One minute of the chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Minute {
    /// Unix minute.
    pub minute: i64,
    /// Deliveries answered 2xx.
    pub count: u64,
    /// Their summed latency, microseconds.
    pub latency_us: u64,
}

impl Default for Throughput {
    fn default() -> Self {
        Self { slots: std::array::from_fn(|_| MinuteSlot::default()) }
    }
}

impl Throughput {
    /// Counts one delivery answered at `now_ms` after `latency`.
    pub(crate) fn record(&self, now_ms: i64, latency: std::time::Duration) {
        let minute = now_ms.div_euclid(60_000);
        let slot = &self.slots[minute.rem_euclid(THROUGHPUT_MINUTES as i64) as usize];
        let seen = slot.minute.load(Ordering::Acquire);
        if seen != minute && slot.minute.compare_exchange(seen, minute, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            slot.count.store(0, Ordering::Relaxed);
            slot.latency_us.store(0, Ordering::Relaxed);
        }
        slot.count.fetch_add(1, Ordering::Relaxed);
        slot.latency_us.fetch_add(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The last [`THROUGHPUT_MINUTES`] minutes up to the one holding `now_ms`, oldest first; minutes without
    /// deliveries count zero.
    pub(crate) fn last_hour(&self, now_ms: i64) -> Vec<Minute> {
        let current = now_ms.div_euclid(60_000);
        (0..THROUGHPUT_MINUTES as i64)
            .rev()
            .map(|ago| {
                let minute = current - ago;
                let slot = &self.slots[minute.rem_euclid(THROUGHPUT_MINUTES as i64) as usize];
                if slot.minute.load(Ordering::Acquire) == minute {
                    Minute {
                        minute,
                        count: slot.count.load(Ordering::Relaxed),
                        latency_us: slot.latency_us.load(Ordering::Relaxed),
                    }
                } else {
                    Minute { minute, count: 0, latency_us: 0 }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn throughput_counts_per_minute_and_forgets_minutes_older_than_an_hour() {
        let t = Throughput::default();
        let start = 1_700_000_000_000 / 60_000 * 60_000;
        t.record(start, Duration::from_millis(2));
        t.record(start + 59_999, Duration::from_millis(4));
        t.record(start + 60_000, Duration::from_millis(1));
        let hour = t.last_hour(start + 60_000);
        assert_eq!(hour.len(), THROUGHPUT_MINUTES);
        assert_eq!(hour[THROUGHPUT_MINUTES - 2], Minute { minute: start / 60_000, count: 2, latency_us: 6_000 });
        assert_eq!(hour[THROUGHPUT_MINUTES - 1].count, 1);
        // An hour later the first minute's slot is reused and its old counts are gone.
        t.record(start + 3_600_000, Duration::from_millis(1));
        let later = t.last_hour(start + 3_600_000);
        assert_eq!(later.iter().map(|m| m.count).sum::<u64>(), 2, "{later:?}");
        assert_eq!(later[THROUGHPUT_MINUTES - 1].count, 1);
    }
}
