//! Listings of events, dead letters and outbox rows: the query parameters, the pages, and how a store listing
//! becomes a page (`next_cursor`, and `partial` when the scan bound stopped it short).

use super::*;
use payhook_store::{AuditAction, AuditFilter, AuditRecord, OutboxKind, OutboxStatus};

/// Filters of an event listing, as the API's query string and the CLI's flags give them.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// Only this source.
    #[param(value_type = Option<crate::base::schema::Source>)]
    pub source: Option<String>,
    /// Only this status (`processed`, `duplicate`, `deferred`, `ignored`, `dead_lettered`).
    #[param(pattern = "^(processed|duplicate|deferred|ignored|dead_lettered)$")]
    pub status: Option<String>,
    /// Only this provider type.
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// Only events whose reason contains this text.
    pub reason: Option<String>,
    /// Received at or after, unix milliseconds.
    pub since: Option<i64>,
    /// Received before, unix milliseconds.
    pub until: Option<i64>,
    /// Rows per page ([`DEFAULT_LIMIT`] when absent; more than [`MAX_LIMIT`] is lowered to it).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 4294967295_u64)]
    pub limit: Option<u32>,
    /// Cursor: the `next_cursor` of the previous page.
    pub before: Option<i64>,
}

/// The filters of `GET /v1/dead-letters`: an event listing whose status can only be `dead_lettered`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadLetterQuery {
    /// Only this source.
    #[param(value_type = Option<crate::base::schema::Source>)]
    pub source: Option<String>,
    /// Dead letters have the status `dead_lettered`; it may be given, no other.
    #[param(pattern = "^dead_lettered$")]
    pub status: Option<String>,
    /// Only this provider type.
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// Only dead letters whose reason contains this text.
    pub reason: Option<String>,
    /// Received at or after, unix milliseconds.
    pub since: Option<i64>,
    /// Received before, unix milliseconds.
    pub until: Option<i64>,
    /// Rows per page ([`DEFAULT_LIMIT`] when absent; more than [`MAX_LIMIT`] is lowered to it).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 4294967295_u64)]
    pub limit: Option<u32>,
    /// Cursor: the `next_cursor` of the previous page.
    pub before: Option<i64>,
}

impl From<DeadLetterQuery> for EventQuery {
    fn from(q: DeadLetterQuery) -> Self {
        let DeadLetterQuery { source, status, event_type, reason, since, until, limit, before } = q;
        Self { source, status, event_type, reason, since, until, limit, before }
    }
}

impl EventQuery {
    /// The store filter these parameters describe.
    pub fn filter(&self) -> Result<EventFilter, AdminError> {
        let status = match self.status.as_deref() {
            None => None,
            Some(s) => Some(Outcome::parse(s).ok_or_else(|| {
                AdminError::Invalid(format!(
                    "status {s:?} is not one of processed, duplicate, deferred, ignored, dead_lettered"
                ))
            })?),
        };
        Ok(EventFilter {
            source: parse_source(self.source.as_deref())?,
            status,
            event_type: self.event_type.clone(),
            reason_contains: self.reason.clone(),
            since_ms: self.since,
            until_ms: self.until,
            before: self.before,
            limit: page_limit(self.limit)?,
        })
    }
}

/// One page of events, newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventPage {
    /// The events: `row_id`, `source`, `event_id`, `event_type`, `status`, `reason`, `attempts`,
    /// `next_attempt_at_ms`, `received_at_ms`.
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<EventSummary>,
    /// Pass as `before` to get the next page; `null` on the last page.
    pub next_cursor: Option<i64>,
    /// `true` when the page stopped at `storage.list_scan_rows` examined rows before it found `limit` events (a
    /// filter no index serves whole): it may hold fewer rows, even none, and `next_cursor` continues the listing.
    pub partial: bool,
}

/// Filters of an outbox listing.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OutboxQuery {
    /// Only this status (`pending`, `delivered`, `dead`, `unrouted`).
    #[param(pattern = "^(pending|delivered|dead|unrouted)$")]
    pub status: Option<String>,
    /// Only this kind (`order.paid`, `order.failed`, `order.refunded`, `order.disputed`, `subscription.updated`,
    /// `entitlement.granted`, `entitlement.revoked`, `invoice.payment_failed`, `event.received`, `alert`).
    #[param(
        pattern = r"^(order\.paid|order\.failed|order\.refunded|order\.disputed|subscription\.updated|entitlement\.granted|entitlement\.revoked|invoice\.payment_failed|event\.received|alert)$"
    )]
    pub kind: Option<String>,
    /// Only this sink.
    pub sink: Option<String>,
    /// Only this order's rows.
    pub order_id: Option<String>,
    /// Rows per page ([`DEFAULT_LIMIT`] when absent; more than [`MAX_LIMIT`] is lowered to it).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 4294967295_u64)]
    pub limit: Option<u32>,
    /// Cursor: the `next_cursor` of the previous page.
    pub before: Option<i64>,
}

/// One page of outbox rows, newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct OutboxPage {
    /// The rows (sink URLs redacted).
    #[schema(value_type = Vec<Object>)]
    pub outbox: Vec<OutboxView>,
    /// Pass as `before` to get the next page; `null` on the last page.
    pub next_cursor: Option<i64>,
    /// `true` when the page stopped at `storage.list_scan_rows` examined rows before it found `limit` rows (a
    /// filter no index serves whole): it may hold fewer rows, even none, and `next_cursor` continues the listing.
    pub partial: bool,
}

/// Filters of the audit trail's listing.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this actor's entries (a token's name, an identity, `cli:USER`, `signal:SIGHUP`).
    pub actor: Option<String>,
    /// Only this action (`replay`, `bulk_replay`, `outbox_retry`, `order_register`, `order_import`, `reload`,
    /// `prune`, `login`, `logout`, `refused`).
    #[param(
        pattern = "^(replay|bulk_replay|outbox_retry|order_register|order_import|reload|prune|login|logout|refused)$"
    )]
    pub action: Option<String>,
    /// Only entries on this target (`stripe/evt_1`, `outbox/42`, `order/ord_1`, `POST /v1/reload`).
    pub target: Option<String>,
    /// Made at or after, unix milliseconds.
    pub since: Option<i64>,
    /// Made before, unix milliseconds.
    pub until: Option<i64>,
    /// Entries per page ([`DEFAULT_LIMIT`] when absent; more than [`MAX_LIMIT`] is lowered to it).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 4294967295_u64)]
    pub limit: Option<u32>,
    /// Cursor: the `next_cursor` of the previous page.
    pub before: Option<i64>,
}

/// One page of the audit trail, newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    /// The entries: `id`, `at_ms`, `actor`, `address`, `action`, `target`, `outcome`, `detail`.
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<AuditRecord>,
    /// Pass as `before` to get the next page; `null` on the last page.
    pub next_cursor: Option<i64>,
    /// `true` when the page stopped at `storage.list_scan_rows` examined entries before it found `limit` (a filter
    /// no index serves whole): it may hold fewer entries, even none, and `next_cursor` continues the listing.
    pub partial: bool,
}

/// Lists the audit trail, newest first.
pub async fn list_audit<S: Store>(store: &S, query: &AuditQuery) -> Result<AuditPage, AdminError> {
    let action = match query.action.as_deref() {
        None => None,
        Some(a) => Some(a.parse::<AuditAction>().map_err(|e| AdminError::Invalid(e.to_string()))?),
    };
    let limit = page_limit(query.limit)?;
    let filter = AuditFilter {
        actor: query.actor.clone(),
        action,
        target: query.target.clone(),
        since_ms: query.since,
        until_ms: query.until,
        before: query.before,
        limit: limit + 1,
    };
    let (entries, next_cursor, partial) = page_of(store.list_audit(filter).await?, limit as usize, |r| r.id);
    Ok(AuditPage { entries, next_cursor, partial })
}

/// Lists events, newest first.
pub async fn list_events<S: Store>(store: &S, query: &EventQuery) -> Result<EventPage, AdminError> {
    page_of_events(store, query.filter()?).await
}

/// Lists dead letters, newest first: the events listing with its status fixed to `dead_lettered`.
pub async fn list_dead_letters<S: Store>(store: &S, query: &EventQuery) -> Result<EventPage, AdminError> {
    let mut filter = query.filter()?;
    match filter.status {
        None | Some(Outcome::DeadLettered) => filter.status = Some(Outcome::DeadLettered),
        Some(other) => {
            return Err(AdminError::Invalid(format!(
                "dead letters have the status dead_lettered; status {:?} selects nothing here",
                other.as_str()
            )));
        }
    }
    page_of_events(store, filter).await
}

async fn page_of_events<S: Store>(store: &S, mut filter: EventFilter) -> Result<EventPage, AdminError> {
    let limit = filter.limit as usize;
    // One row more than asked says whether another page exists, so the last page carries no cursor.
    filter.limit += 1;
    let (events, next_cursor, partial) = page_of(store.list_events(filter).await?, limit, |e| e.row_id);
    Ok(EventPage { events, next_cursor, partial })
}

/// Lists outbox rows, newest first.
pub async fn list_outbox<S: Store>(store: &S, query: &OutboxQuery) -> Result<OutboxPage, AdminError> {
    let status = match query.status.as_deref() {
        None => None,
        Some(s) => Some(OutboxStatus::parse(s).ok_or_else(|| {
            AdminError::Invalid(format!("status {s:?} is not one of {}", OUTBOX_STATUSES.join(", ")))
        })?),
    };
    let kind = match query.kind.as_deref() {
        None => None,
        Some(k) => Some(OutboxKind::parse(k).ok_or_else(|| {
            AdminError::Invalid(format!("kind {k:?} is not one of {}", OutboxKind::NAMES.join(", ")))
        })?),
    };
    let limit = page_limit(query.limit)?;
    let filter = OutboxFilter {
        status,
        kind,
        sink: query.sink.clone(),
        order_id: query.order_id.clone(),
        before: query.before,
        limit: limit + 1,
    };
    let (mut outbox, next_cursor, partial) = page_of(store.list_outbox(filter).await?, limit as usize, |r| r.id);
    outbox.iter_mut().for_each(redact_outbox_row);
    Ok(OutboxPage { outbox, next_cursor, partial })
}

/// A page of at most `limit` rows from a listing asked for `limit + 1` (one row more says whether another page
/// exists), the cursor of the next page, and whether the scan bound cut the page short.
fn page_of<T>(listing: Listing<T>, limit: usize, id: impl Fn(&T) -> i64) -> (Vec<T>, Option<i64>, bool) {
    let mut rows = listing.rows;
    if rows.len() > limit {
        rows.truncate(limit);
        let cursor = rows.last().map(id);
        (rows, cursor, false)
    } else {
        let stopped = listing.scan_stopped_before;
        (rows, stopped, stopped.is_some())
    }
}

fn page_limit(limit: Option<u32>) -> Result<u32, AdminError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(0) => Err(AdminError::Invalid("limit must be at least 1".into())),
        Some(n) => Ok(n.min(MAX_LIMIT)),
    }
}
