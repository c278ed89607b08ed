//! The per-key order gauges: rows a sink holds back because an earlier row of their key is still pending or dead,
//! and how long the oldest of them has waited. Read from the store at each scrape, a bounded read per sink.

use super::{escape, family, sample};
use payhook_store::Held;

/// How many pending rows of each sink a scrape reads at most to count its held rows.
pub(crate) const HELD_SCAN_ROWS: u32 = 1_000;

/// Renders the held rows and the oldest held row's age of each sink (`held`: the sink's name and what the store
/// read; `None` when it could not be read, rendered as no sample).
pub(crate) fn render_held(out: &mut String, held: &[(String, Option<Held>)], now_ms: i64) {
    family(
        out,
        "payhook_outbox_held_rows",
        "gauge",
        "Pending outbox rows waiting behind an earlier pending or dead row of their key, by sink (among the first \
         1000 pending rows of the sink).",
    );
    for (sink, h) in held {
        if let Some(h) = h {
            sample(out, "payhook_outbox_held_rows", &format!("sink=\"{}\"", escape(sink)), h.rows);
        }
    }
    family(
        out,
        "payhook_outbox_oldest_held_age_seconds",
        "gauge",
        "Age of the oldest outbox row held back by per-key order, by sink; 0 when none is held.",
    );
    for (sink, h) in held {
        if let Some(h) = h {
            let age_ms = h.oldest_created_at_ms.map_or(0, |at| now_ms.saturating_sub(at).max(0));
            let age = u64::try_from(age_ms / 1000).unwrap_or(0);
            sample(out, "payhook_outbox_oldest_held_age_seconds", &format!("sink=\"{}\"", escape(sink)), age);
        }
    }
}
