//! The dashboard's chart: deliveries answered 2xx and their latency, per minute over the last hour.

use std::sync::atomic::{AtomicU64, Ordering};

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
