//! The `[retention]` table: how long settled events keep their payloads and dedup keys, how long settled orders
//! are kept, and the pace of pruning.

use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetention {
    enabled: bool,
    payloads_days: u32,
    keys_days: u32,
    orders_days: u32,
    audit_days: u32,
    interval_secs: u64,
    batch: u32,
    pause_percent: u32,
    cli_min_pause_ms: u64,
}

pub(super) fn resolve_retention(r: &RawRetention) -> Result<RetentionSettings> {
    const DAY_MS: i64 = 86_400_000;
    if r.keys_days < 3 {
        bail!("retention.keys_days: must be at least 3, as providers redeliver for up to 3 days");
    }
    if r.payloads_days == 0 || r.payloads_days > r.keys_days {
        bail!("retention.payloads_days: must be between 1 and retention.keys_days ({})", r.keys_days);
    }
    if r.orders_days < r.keys_days {
        bail!(
            "retention.orders_days: must be at least retention.keys_days ({}), so that no order is deleted while \
             a dedup key of one of its events is kept",
            r.keys_days
        );
    }
    if r.audit_days == 0 {
        bail!("retention.audit_days: must be at least 1");
    }
    if r.interval_secs == 0 || r.batch == 0 {
        bail!("retention.interval_secs and retention.batch must be positive");
    }
    Ok(RetentionSettings {
        enabled: r.enabled,
        payloads_ms: i64::from(r.payloads_days) * DAY_MS,
        keys_ms: i64::from(r.keys_days) * DAY_MS,
        orders_ms: i64::from(r.orders_days) * DAY_MS,
        audit_ms: i64::from(r.audit_days) * DAY_MS,
        interval_ms: r.interval_secs.saturating_mul(1000),
        batch: r.batch,
        pause_percent: r.pause_percent,
        cli_min_pause_ms: r.cli_min_pause_ms,
    })
}
