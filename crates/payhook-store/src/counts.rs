//! Row counters: what one kept count counts ([`CounterKey`]), the [`Stats`] read from them, and what a recount
//! found. Backends store a key as four texts; this module is where they become types and back.

use crate::model::{OutboxKind, OutboxStatus, Outcome, Stats};
use payhook_core::ledger::OrderStatus;
use serde::Serialize;

/// What one kept row count counts: the inbox rows of one source with one outcome, the orders with one status, or
/// the outbox rows of one sink and kind with one status.
///
/// Backends keep one count per key, changed in the transaction of every insert, delete and status change, so that
/// [`Stats`] read a few counters instead of every row. They store a key as four texts (`table`, `group`, `kind`,
/// `status`; the parts a table lacks are empty), which is also how it is serialized and ordered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CounterKey {
    /// Inbox rows.
    Inbox {
        /// Their source.
        source: String,
        /// Their outcome.
        status: Outcome,
    },
    /// Orders.
    Orders {
        /// Their status.
        status: OrderStatus,
    },
    /// Outbox rows.
    Outbox {
        /// Their sink; empty for rows no sink takes.
        sink: String,
        /// What they carry.
        kind: OutboxKind,
        /// Where they are in their delivery.
        status: OutboxStatus,
    },
}

/// A table whose rows are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CountedTable {
    /// The received events.
    Inbox,
    /// The orders.
    Orders,
    /// The side effects.
    Outbox,
}

impl CountedTable {
    /// Every counted table.
    pub const ALL: [CountedTable; 3] = [Self::Inbox, Self::Orders, Self::Outbox];

    /// The stored name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Inbox => "inbox",
            Self::Orders => "orders",
            Self::Outbox => "outbox",
        }
    }

    /// The inverse of [`CountedTable::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// The tables whose rows are counted, by their stored names.
pub const COUNTED_TABLES: [&str; 3] =
    [CountedTable::Inbox.as_str(), CountedTable::Orders.as_str(), CountedTable::Outbox.as_str()];

impl CounterKey {
    /// The table it counts rows of.
    pub fn table(&self) -> CountedTable {
        match self {
            Self::Inbox { .. } => CountedTable::Inbox,
            Self::Orders { .. } => CountedTable::Orders,
            Self::Outbox { .. } => CountedTable::Outbox,
        }
    }

    /// The inbox rows' source or the outbox rows' sink; empty for orders.
    pub fn group(&self) -> &str {
        match self {
            Self::Inbox { source: group, .. } | Self::Outbox { sink: group, .. } => group,
            Self::Orders { .. } => "",
        }
    }

    /// The outbox rows' kind; empty for the other tables.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Outbox { kind, .. } => kind.as_str(),
            Self::Inbox { .. } | Self::Orders { .. } => "",
        }
    }

    /// The rows' status, as stored.
    pub fn status(&self) -> &'static str {
        match self {
            Self::Inbox { status, .. } => status.as_str(),
            Self::Orders { status } => status.as_str(),
            Self::Outbox { status, .. } => status.as_str(),
        }
    }

    /// A key from its four stored texts; a table, kind or status payhook does not know is inconsistent data.
    pub fn parse(table: &str, group: String, kind: &str, status: &str) -> Result<Self, crate::StoreError> {
        let unknown = |what: &str, value: &str| {
            crate::StoreError::inconsistent(format!("a counter of {table} rows with an unknown {what} {value:?}"))
        };
        let table = CountedTable::parse(table).ok_or_else(|| unknown("table", table))?;
        Ok(match table {
            CountedTable::Inbox => {
                Self::Inbox { source: group, status: Outcome::parse(status).ok_or_else(|| unknown("status", status))? }
            }
            CountedTable::Orders => {
                Self::Orders { status: OrderStatus::parse(status).ok_or_else(|| unknown("status", status))? }
            }
            CountedTable::Outbox => Self::Outbox {
                sink: group,
                kind: OutboxKind::parse(kind).ok_or_else(|| unknown("kind", kind))?,
                status: OutboxStatus::parse(status).ok_or_else(|| unknown("status", status))?,
            },
        })
    }

    /// The four stored texts, in the order keys sort by.
    fn texts(&self) -> (&'static str, &str, &'static str, &'static str) {
        (self.table().as_str(), self.group(), self.kind(), self.status())
    }
}

impl Ord for CounterKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.texts().cmp(&other.texts())
    }
}

impl PartialOrd for CounterKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for CounterKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let (table, group, kind, status) = self.texts();
        let mut s = serializer.serialize_struct("CounterKey", 4)?;
        s.serialize_field("table", table)?;
        s.serialize_field("group", group)?;
        s.serialize_field("kind", kind)?;
        s.serialize_field("status", status)?;
        s.end()
    }
}

/// Row counts by key: what the counters hold, or what a full count found.
pub type Counts = std::collections::BTreeMap<CounterKey, i64>;

impl Stats {
    /// The stats of `counts` (zero counts left out, each list sorted by key) with the given "oldest" gauges.
    /// A negative count, which only a counter out of step with its table can hold, is reported as corrupt.
    pub fn from_counts(
        counts: &Counts,
        oldest_pending_outbox_ms: Option<i64>,
        oldest_deferred_event_ms: Option<i64>,
    ) -> Result<Stats, crate::StoreError> {
        use std::collections::BTreeMap;
        let (mut events, mut orders, mut outbox, mut by_status) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for (key, n) in counts {
            let by_key = match key.table() {
                CountedTable::Inbox => &mut events,
                CountedTable::Orders => &mut orders,
                CountedTable::Outbox => {
                    *outbox.entry(key.kind().to_owned()).or_insert(0) += n;
                    &mut by_status
                }
            };
            *by_key.entry(key.status().to_owned()).or_insert(0) += n;
        }
        let list = |map: BTreeMap<String, i64>| -> Result<Vec<(String, u64)>, crate::StoreError> {
            map.into_iter()
                .filter(|(_, n)| *n != 0)
                .map(|(k, n)| {
                    let count = u64::try_from(n).map_err(|_| {
                        crate::StoreError::inconsistent(format!(
                            "the count of {k:?} is {n}: the counters are out of step, run `payhook stats --recount`"
                        ))
                    })?;
                    Ok((k, count))
                })
                .collect()
        };
        Ok(Stats {
            events: list(events)?,
            orders: list(orders)?,
            outbox: list(outbox)?,
            outbox_by_status: list(by_status)?,
            oldest_pending_outbox_ms,
            oldest_deferred_event_ms,
        })
    }
}

/// A counter that did not equal the full count of its rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    /// Which rows it counts.
    pub key: CounterKey,
    /// What the counter held.
    pub kept: i64,
    /// What the full count found, and what the counter holds now.
    pub counted: i64,
}

/// What [`crate::Store::recount`] found: the full count, and the counters it corrected to match it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Recounted {
    /// The full count, by key.
    #[serde(skip)]
    pub counted: Counts,
    /// The counters that differed from it, before they were corrected. Empty when the counters were right.
    pub drift: Vec<Drift>,
}

impl Recounted {
    /// The counters of `kept` that differ from `counted` (a key missing from either counts as zero), in key order.
    pub fn drift_between(counted: &Counts, kept: &Counts) -> Vec<Drift> {
        let keys: std::collections::BTreeSet<&CounterKey> = counted.keys().chain(kept.keys()).collect();
        keys.into_iter()
            .filter_map(|key| {
                let (kept, counted) = (kept.get(key).copied().unwrap_or(0), counted.get(key).copied().unwrap_or(0));
                (kept != counted).then(|| Drift { key: key.clone(), kept, counted })
            })
            .collect()
    }

    /// The full count as [`Stats`], without the "oldest" gauges.
    pub fn stats(&self) -> Result<Stats, crate::StoreError> {
        Stats::from_counts(&self.counted, None, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> [CounterKey; 3] {
        [
            CounterKey::Outbox { sink: "erp".into(), kind: OutboxKind::OrderPaid, status: OutboxStatus::Pending },
            CounterKey::Inbox { source: "shop".into(), status: Outcome::DeadLettered },
            CounterKey::Orders { status: OrderStatus::Paid },
        ]
    }

    #[test]
    fn a_key_reads_back_from_its_four_stored_texts() {
        for key in keys() {
            let parsed = CounterKey::parse(key.table().as_str(), key.group().to_owned(), key.kind(), key.status());
            assert_eq!(parsed.expect("a stored key"), key);
        }
        assert!(CounterKey::parse("inbox", "shop".into(), "", "billing").is_err(), "an unknown status");
        assert!(CounterKey::parse("outbox", "erp".into(), "order.shipped", "pending").is_err(), "an unknown kind");
        assert!(CounterKey::parse("refunds", String::new(), "", "paid").is_err(), "an unknown table");
    }

    #[test]
    fn keys_serialize_and_sort_as_their_stored_texts() {
        let json = serde_json::to_value(&keys()[0]).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"table": "outbox", "group": "erp", "kind": "order.paid", "status": "pending"})
        );
        let inbox = |status| CounterKey::Inbox { source: "shop".into(), status };
        // By text, "dead_lettered" < "processed", whatever the variants' order.
        assert!(inbox(Outcome::DeadLettered) < inbox(Outcome::Processed));
        let mut sorted = keys().to_vec();
        sorted.sort();
        let tables: Vec<&str> = sorted.iter().map(|k| k.table().as_str()).collect();
        assert_eq!(tables, ["inbox", "orders", "outbox"]);
    }
}
