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
