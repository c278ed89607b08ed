//! Operator actions on recorded events and the outbox: list, show, replay, bulk replay, re-queue, stats.
//!
//! The `/v1` admin API and the `payhook` CLI both call these functions, so an action taken over HTTP and the same
//! action taken from a shell go through the same store operations and answer the same JSON. Every function is
//! generic over [`Store`] and takes the store and the settings by reference; none of them knows HTTP.
//!
//! Replay re-parses an event's stored raw bytes with its source's *current* format, so a dead letter caused by a
//! format bug is fixed by deploying the fix and replaying. [`Store::replay`] then runs the event through the same
//! dedup and ledger path as a new delivery, which is what makes replaying twice, or replaying an event whose effect
//! was applied meanwhile, change nothing.

pub use crate::base::secret_url::redact_outbox_row;
use crate::base::settings::{Settings, SourceSettings};
use crate::service::audit::{self, Actor};
use base64::Engine;
use payhook_core::event::{Effect, EventId, SourceName};
use payhook_store::{
    AttemptEntry, BillingChange, EventFilter, EventSummary, EventView, Listing, OrderChange, OutboxFilter, OutboxView,
    Outcome, Parsed, ReceivedHeaders, Replayed, Stats, Store, StoreError,
};
use payhook_store::{AuditAction, AuditEntry};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

/// Rows in a listing when the caller does not say.
pub const DEFAULT_LIMIT: u32 = 50;
/// Rows in a listing at most; a larger `limit` is lowered to this.
pub const MAX_LIMIT: u32 = 500;
/// Events shown by a dry run.
pub const SAMPLE_SIZE: usize = 10;
/// The statuses an outbox row can have.
pub const OUTBOX_STATUSES: [&str; 4] = payhook_store::OutboxStatus::NAMES;
/// How often a replay refused because the writer's queue is full is tried again before the bulk replay stops.
const OVERLOAD_RETRIES: u32 = 3;

mod listings;
pub use listings::*;

/// Why an operator action was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A parameter is malformed or out of range.
    #[error("{0}")]
    Invalid(String),
    /// No such event or outbox row.
    #[error("{0}")]
    NotFound(String),
    /// The event's source is no longer in the configuration, so there is no format to re-parse it with.
    #[error("source {0:?} is not configured, so its events cannot be re-parsed; add it back to replay them")]
    SourceNotConfigured(String),
    /// Only dead letters are replayed; this event is in another state and nothing changed.
    #[error("{event} is {}, not a dead letter: nothing was replayed", status.as_str())]
    NotDeadLetter {
        /// `source/event_id`.
        event: String,
        /// Its current state.
        status: Outcome,
    },
    /// A bulk replay is already running in this process (two at once would double the rate meant to protect live
    /// traffic); nothing was replayed.
    #[error("another bulk replay is running in this process; try again when it has finished")]
    ReplayInProgress,
    /// Only dead outbox rows are re-queued; this one is in another state and nothing changed.
    #[error("outbox row {id} is {status}, not dead: nothing was re-queued")]
    OutboxNotDead {
        /// The row.
        id: i64,
        /// Its current state.
        status: String,
    },
    /// The store failed; nothing of the failed step was recorded.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AdminError {
    /// The audit trail's outcome for an action refused with this error.
    pub fn word(&self) -> &'static str {
        match self {
            AdminError::Invalid(_) => "invalid",
            AdminError::NotFound(_) => "not_found",
            AdminError::SourceNotConfigured(_) => "source_not_configured",
            AdminError::NotDeadLetter { .. } => payhook_store::audit::NOT_DEAD_LETTER,
            AdminError::ReplayInProgress => "replay_in_progress",
            AdminError::OutboxNotDead { .. } => payhook_store::audit::NOT_DEAD,
            AdminError::Store(_) => "store_error",
        }
    }
}

/// Which field carries an event's raw body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BodyEncoding {
    /// The bytes are UTF-8: `body` is them, exactly, as text.
    Utf8,
    /// The bytes are not UTF-8: `body_base64` is them in standard base64, and `body` is `null`.
    Base64,
}

/// Everything recorded about one event.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventDetail {
    /// Its source.
    pub source: String,
    /// Its id.
    pub event_id: String,
    /// Its provider type, when it parsed.
    pub event_type: Option<String>,
    /// Its business key, when it parsed.
    pub business_key: Option<String>,
    /// Its effect, when it parsed: what payhook made of the body, not the body.
    #[schema(value_type = Option<Object>)]
    pub effect: Option<Effect>,
    /// Current state: `processed`, `duplicate`, `deferred`, `ignored` or `dead_lettered`.
    #[schema(value_type = String)]
    pub status: Outcome,
    /// Why it is in that state.
    pub reason: Option<String>,
    /// Application attempts so far.
    pub attempts: u32,
    /// For deferred events, the next attempt, unix milliseconds.
    pub next_attempt_at_ms: Option<i64>,
    /// When it arrived, unix milliseconds.
    pub received_at_ms: i64,
    /// How it verified (scheme and secret).
    pub verification: String,
    /// The request's headers (credentials left out): lower-case name → every value received, in arrival order,
    /// so a header sent twice has two. The signature was checked against the first. A value that was not UTF-8
    /// has U+FFFD in place of each invalid sequence.
    #[schema(value_type = HashMap<String, Vec<String>>)]
    pub headers: ReceivedHeaders,
    /// The body exactly as received, when it is UTF-8 (whitespace, key order and duplicate keys as sent); `null`
    /// when it is not, and then `body_base64` carries it.
    pub body: Option<String>,
    /// The body in standard base64, when it is not UTF-8; `null` when `body` carries it.
    pub body_base64: Option<String>,
    /// Which of `body` and `body_base64` carries the body.
    pub body_encoding: BodyEncoding,
    /// Attempts that did not end the event, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub attempt_log: Vec<AttemptEntry>,
    /// The order changes it made.
    #[schema(value_type = Vec<Object>)]
    pub changes: Vec<OrderChange>,
    /// The subscription and entitlement changes it made.
    #[schema(value_type = Vec<Object>)]
    pub billing_changes: Vec<BillingChange>,
    /// The outbox rows it caused.
    #[schema(value_type = Vec<Object>)]
    pub outbox: Vec<OutboxView>,
}

impl EventDetail {
    /// The raw body's bytes, whichever field carries them.
    pub fn body_bytes(&self) -> Cow<'_, [u8]> {
        match (&self.body, &self.body_base64) {
            (Some(text), _) => Cow::Borrowed(text.as_bytes()),
            // Encoded by `From<EventView>` just above, so it decodes.
            (None, Some(encoded)) => {
                Cow::Owned(base64::engine::general_purpose::STANDARD.decode(encoded).unwrap_or_default())
            }
            (None, None) => Cow::Borrowed(&[]),
        }
    }
}

impl From<EventView> for EventDetail {
    fn from(v: EventView) -> Self {
        let (body, body_base64, body_encoding) = match String::from_utf8(v.raw_body) {
            Ok(text) => (Some(text), None, BodyEncoding::Utf8),
            Err(e) => {
                (None, Some(base64::engine::general_purpose::STANDARD.encode(e.as_bytes())), BodyEncoding::Base64)
            }
        };
        Self {
            source: v.source.as_str().to_owned(),
            event_id: v.event_id.as_str().to_owned(),
            event_type: v.event_type,
            business_key: v.business_key,
            effect: v.effect,
            status: v.status,
            reason: v.reason,
            attempts: v.attempts,
            next_attempt_at_ms: v.next_attempt_at_ms,
            received_at_ms: v.received_at_ms,
            verification: v.verification,
            headers: v.headers,
            body,
            body_base64,
            body_encoding,
            attempt_log: v.attempt_log,
            changes: v.changes,
            billing_changes: v.billing_changes,
            outbox: v.outbox,
        }
    }
}

/// What replaying one event came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// Its source.
    pub source: String,
    /// Its id.
    pub event_id: String,
    /// The state it ended in.
    pub status: Outcome,
    /// Why, for deferred, dead-lettered, duplicate-by-key and no-op events.
    pub detail: Option<String>,
    /// The id the event now lives under, when its bytes were stored under a derived id (`sha256:…`) and the
    /// current format reads the provider's own id from them; the stored row is then retired as a duplicate.
    pub replayed_as: Option<String>,
}

/// Which dead letters a bulk replay takes. Every field narrows the selection.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayFilter {
    /// Only this source.
    #[schema(value_type = Option<crate::base::schema::Source>)]
    pub source: Option<String>,
    /// Only this provider type.
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// Only dead letters whose reason contains this text.
    pub reason: Option<String>,
    /// Received at or after, unix milliseconds.
    #[serde(default, deserialize_with = "crate::base::json_int::opt_i64")]
    #[schema(minimum = -9007199254740991_i64, maximum = 9007199254740991_i64)]
    pub since: Option<i64>,
    /// Received before, unix milliseconds.
    #[serde(default, deserialize_with = "crate::base::json_int::opt_i64")]
    #[schema(minimum = -9007199254740991_i64, maximum = 9007199254740991_i64)]
    pub until: Option<i64>,
}

/// What a dry run found.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayPreview {
    /// Always `true`: nothing was changed.
    pub dry_run: bool,
    /// Dead letters a real run with the same parameters would replay (at most `max`).
    pub matched: usize,
    /// More dead letters match beyond `max`; a later call takes them.
    pub more: bool,
    /// The cap that applied: the request's `max`, lowered to the configured `max_per_call`.
    pub max: u32,
    /// The first few of them, newest first.
    pub sample: Vec<EventSummary>,
}

/// What a bulk replay did.
#[derive(Debug, Clone, Serialize)]
pub struct BulkReport {
    /// Always `false`: the events were replayed.
    pub dry_run: bool,
    /// Dead letters selected (at most `max`).
    pub matched: usize,
    /// More dead letters matched beyond `max`; a later call takes them.
    pub more: bool,
    /// The cap that applied.
    pub max: u32,
    /// How many ended in each state, plus `not_dead_letter` (its state changed since it was selected) and
    /// `source_not_configured` (no format to re-parse it with; left as it was).
    pub outcomes: BTreeMap<&'static str, usize>,
}

impl BulkReport {
    /// The report of a bulk replay that selected nothing: every outcome listed, with zero.
    pub fn empty(max: u32) -> Self {
        let outcomes =
            [Outcome::Processed, Outcome::Duplicate, Outcome::Deferred, Outcome::Ignored, Outcome::DeadLettered]
                .into_iter()
                .map(Outcome::as_str)
                .chain(["not_dead_letter", "source_not_configured"])
                .map(|name| (name, 0))
                .collect();
        Self { dry_run: false, matched: 0, more: false, max, outcomes }
    }
}

/// Counts and ages for an operator's dashboard.
#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    /// Events by status (every status is listed, zeros included).
    pub events: BTreeMap<String, u64>,
    /// Orders by status (every status is listed, zeros included).
    pub orders: BTreeMap<String, u64>,
    /// Outbox rows by status and by kind.
    pub outbox: OutboxStats,
    /// Age of the oldest pending outbox row, in seconds; `null` when none is pending.
    pub oldest_pending_outbox_age_secs: Option<i64>,
    /// Age of the oldest deferred event, in seconds; `null` when none is deferred.
    pub oldest_deferred_event_age_secs: Option<i64>,
}

/// Outbox counts.
#[derive(Debug, Clone, Serialize)]
pub struct OutboxStats {
    /// By status (every status is listed, zeros included).
    pub by_status: BTreeMap<String, u64>,
    /// By kind (only kinds that have rows).
    pub by_kind: BTreeMap<String, u64>,
}

/// Everything recorded about one event.
pub async fn event_detail<S: Store>(store: &S, source: &str, event_id: &str) -> Result<EventDetail, AdminError> {
    let (source, event_id) = parse_key(source, event_id)?;
    match store.event(&source, &event_id).await? {
        Some(view) => {
            let mut detail = EventDetail::from(view);
            detail.outbox.iter_mut().for_each(redact_outbox_row);
            Ok(detail)
        }
        None => Err(AdminError::NotFound(format!("no event {event_id:?} from source {source}"))),
    }
}

/// Replays one dead letter: re-parses its stored bytes with its source's current format and runs it through the
/// same dedup and ledger path as a new delivery. The audit trail records it for `by`: in the replay's own
/// transaction when it got that far, on its own when it was refused before (no such event, not a dead letter, no
/// source).
pub async fn replay_event<S: Store>(
    store: &S,
    settings: &Settings,
    source: &str,
    event_id: &str,
    now_ms: i64,
    by: &Actor,
) -> Result<ReplayReport, AdminError> {
    let entry = by.entry(AuditAction::Replay, Some(format!("{source}/{event_id}")), "", Value::Null, now_ms);
    let trail = &mut Trail::Own;
    let (source, event_id) = match parse_key(source, event_id) {
        Ok(key) => key,
        Err(e) => return trail.refused(store, entry, e).await,
    };
    let Some(view) = store.event(&source, &event_id).await? else {
        let e = AdminError::NotFound(format!("no event {event_id:?} from source {source}"));
        return trail.refused(store, entry, e).await;
    };
    replay_view(store, settings, view, now_ms, entry, trail).await
}

/// Entries of a bulk replay's events gathered before they are appended, one transaction per this many.
const GATHERED_ENTRIES: usize = 256;

/// Where the audit entries of replays go: each into its replay's own transaction (a replay on its own), or
/// gathered and appended [`GATHERED_ENTRIES`] at a time (the events of a bulk replay: one more row in each
/// replay's transaction cost the bulk replay more than a tenth of its time, mostly in the index pages each commit
/// wrote; the bulk replay's own entries, written before and after, stand for it if a crash loses a gathered few).
enum Trail {
    Own,
    Gathered(Vec<AuditEntry>),
}

impl Trail {
    /// Records `entry` as refused with `e`'s word and returns `e`.
    async fn refused<S: Store, T>(&mut self, store: &S, entry: AuditEntry, e: AdminError) -> Result<T, AdminError> {
        let entry = AuditEntry { outcome: e.word().to_owned(), ..entry };
        match self {
            Trail::Own => {
                let _ = audit::record(store, entry).await;
            }
            Trail::Gathered(entries) => {
                audit::log(&entry);
                entries.push(entry);
            }
        }
        Err(e)
    }

    /// The entry the replay's own transaction takes, if it takes one.
    fn in_transaction(&self, entry: &AuditEntry) -> Option<AuditEntry> {
        matches!(self, Trail::Own).then(|| entry.clone())
    }

    /// Logs the entry of a replay that was done (with its outcome), and gathers it when it is not stored yet.
    fn done(&mut self, entry: AuditEntry) {
        audit::log(&entry);
        if let Trail::Gathered(entries) = self {
            entries.push(entry);
        }
    }

    /// Appends the gathered entries once there are at least `at_least`.
    async fn flush<S: Store>(&mut self, store: &S, at_least: usize) {
        if let Trail::Gathered(entries) = self
            && !entries.is_empty()
            && entries.len() >= at_least
            && let Err(e) = store.audit(std::mem::take(entries)).await
        {
            tracing::error!(error = %e, "the audit trail could not be written");
        }
    }
}

/// Replays `view` if it is a dead letter, its entry going where `trail` says (and logged with the outcome).
async fn replay_view<S: Store>(
    store: &S,
    settings: &Settings,
    view: EventView,
    now_ms: i64,
    entry: AuditEntry,
    trail: &mut Trail,
) -> Result<ReplayReport, AdminError> {
    let key = format!("{}/{}", view.source, view.event_id);
    if view.status != Outcome::DeadLettered {
        return trail.refused(store, entry, AdminError::NotDeadLetter { event: key, status: view.status }).await;
    }
    let config = match configured_source(settings, view.source.as_str()) {
        Ok(config) => config,
        Err(e) => return trail.refused(store, entry, e).await,
    };
    let parsed = reparse(config, &view.event_id, &view.headers, &view.raw_body);
    let replayed_as = Some(parsed.event_id()).filter(|id| **id != view.event_id).map(|id| id.as_str().to_owned());
    let mut entry = entry;
    if let Some(id) = &replayed_as {
        entry.detail = merged(entry.detail, json!({ "replayed_as": id }));
    }
    match store.replay_audited(&view.source, &view.event_id, parsed, now_ms, trail.in_transaction(&entry)).await? {
        Replayed::Done(recorded) => {
            trail.done(AuditEntry { outcome: recorded.outcome.as_str().to_owned(), ..entry });
            Ok(ReplayReport {
                source: view.source.as_str().to_owned(),
                event_id: view.event_id.as_str().to_owned(),
                status: recorded.outcome,
                detail: recorded.detail,
                replayed_as,
            })
        }
        // Another replay or worker got there between our read and the store's transaction (which recorded it).
        Replayed::NotDeadLetter(status) => {
            trail.done(AuditEntry { outcome: payhook_store::audit::NOT_DEAD_LETTER.to_owned(), ..entry });
            Err(AdminError::NotDeadLetter { event: key, status })
        }
        Replayed::NotFound => trail.refused(store, entry, AdminError::NotFound(format!("no event {key}"))).await,
    }
}

/// `extra`'s fields added to the object `detail` (or `extra` alone when `detail` is not an object).
fn merged(detail: Value, extra: Value) -> Value {
    match (detail, extra) {
        (Value::Object(mut a), Value::Object(b)) => {
            a.extend(b);
            Value::Object(a)
        }
        (_, extra) => extra,
    }
}

/// What the current format makes of stored bytes; a body it still cannot read stays under its stored id.
///
/// Formats that read headers (Shopify's topic) get the stored ones, the first value of a repeated header as on
/// arrival; of a batch (an Adyen notification), the event stored under this id is the one replayed. A source
/// confirmed from its provider's API stored the API's answer, which its `[confirm.format]` reads.
fn reparse(source: &SourceSettings, event_id: &EventId, headers: &ReceivedHeaders, raw: &[u8]) -> Parsed {
    let format = source.confirm.as_ref().map_or(&source.format, |c| c.confirm.format());
    match format.parse_delivery(headers, raw) {
        Ok(mut events) => {
            let index = events.iter().position(|e| e.event_id == *event_id).unwrap_or(0);
            Parsed::Event(events.swap_remove(index))
        }
        Err(e) => Parsed::Unparseable { event_id: event_id.clone(), reason: e.to_string() },
    }
}

/// What a bulk replay with these parameters would do, changing nothing.
pub async fn preview_replay<S: Store>(
    store: &S,
    settings: &Settings,
    filter: &ReplayFilter,
    max: Option<u32>,
) -> Result<ReplayPreview, AdminError> {
    let (filter, max) = bulk_selection(settings, filter, max)?;
    let (selected, more) = select_dead_letters(store, filter, max).await?;
    let matched = selected.len();
    let sample = selected.into_iter().take(SAMPLE_SIZE).collect();
    Ok(ReplayPreview { dry_run: true, matched, more, max, sample })
}

/// Replays the dead letters matching `filter` (at most `max`, itself capped by `replay.max_per_call`), oldest
/// first, no faster than `replay.per_second` so that live deliveries sharing the writer keep their latency.
///
/// `progress(done, total)` is called after each event. A store failure stops the run: every replay before it is
/// committed, and running the same call again continues, because replayed events are no longer dead letters.
///
/// The audit trail gets, for `by`: the bulk replay's entry as it starts (filter, cap, how many matched), each
/// event's entry (gathered, see [`Trail`]), and the bulk replay's entry as it ends (the outcomes counted).
pub async fn bulk_replay<S: Store>(
    store: &S,
    settings: &Settings,
    filter: &ReplayFilter,
    max: Option<u32>,
    now_ms: impl Fn() -> i64,
    mut progress: impl FnMut(usize, usize),
    by: &Actor,
) -> Result<BulkReport, AdminError> {
    let started_ms = now_ms();
    let (selection, max) = bulk_selection(settings, filter, max)?;
    let (selected, more) = select_dead_letters(store, selection, max).await?;
    let total = selected.len();
    let mut report = BulkReport { matched: total, more, ..BulkReport::empty(max) };
    let interval = Duration::from_secs(1) / settings.replay.per_second.max(1);
    let started = tokio::time::Instant::now();
    let filter_json = serde_json::to_value(filter).unwrap_or_default();
    let bulk = |outcome: &str, detail: Value, at: i64| by.entry(AuditAction::BulkReplay, None, outcome, detail, at);
    let start = json!({ "filter": filter_json, "max": max, "matched": total, "more": more });
    let _ = audit::record(store, bulk("started", start, started_ms)).await;
    // Each replay's entry names the bulk replay it belongs to by its start.
    let part_of = json!({ "bulk_started_ms": started_ms });
    let mut trail = Trail::Gathered(Vec::with_capacity(GATHERED_ENTRIES));
    // Oldest first, so that a payment is replayed before the refund that followed it.
    let mut failure = None;
    for (i, summary) in selected.iter().rev().enumerate() {
        tokio::time::sleep_until(started + interval * u32::try_from(i).unwrap_or(u32::MAX)).await;
        let outcome = match replay_summary(store, settings, summary, &now_ms, by, &part_of, &mut trail).await {
            Ok(report) => report.status.as_str(),
            Err(AdminError::NotDeadLetter { .. } | AdminError::NotFound(_)) => "not_dead_letter",
            Err(AdminError::SourceNotConfigured(_)) => "source_not_configured",
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        *report.outcomes.entry(outcome).or_default() += 1;
        trail.flush(store, GATHERED_ENTRIES).await;
        progress(i + 1, total);
    }
    trail.flush(store, 1).await;
    let detail = json!({
        "filter": filter_json,
        "max": max,
        "matched": report.matched,
        "more": report.more,
        "outcomes": report.outcomes,
        "started_ms": started_ms,
    });
    let outcome = failure.as_ref().map_or("ok", AdminError::word);
    let _ = audit::record(store, bulk(outcome, detail, now_ms())).await;
    match failure {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Replays one selected dead letter, waiting and trying again while the writer's queue is full: live traffic
/// comes first.
async fn replay_summary<S: Store>(
    store: &S,
    settings: &Settings,
    summary: &EventSummary,
    now_ms: &impl Fn() -> i64,
    by: &Actor,
    part_of: &Value,
    trail: &mut Trail,
) -> Result<ReplayReport, AdminError> {
    let (source, event_id) = parse_key(&summary.source, &summary.event_id)?;
    let target = Some(format!("{source}/{event_id}"));
    let mut overloaded = 0;
    loop {
        let at = now_ms();
        let entry = by.entry(AuditAction::Replay, target.clone(), "", part_of.clone(), at);
        let result = match store.event(&source, &event_id).await {
            Ok(Some(view)) => replay_view(store, settings, view, at, entry, trail).await,
            Ok(None) => Err(AdminError::NotFound(format!("no event {source}/{event_id}"))),
            Err(e) => Err(e.into()),
        };
        match result {
            Err(AdminError::Store(StoreError::Overloaded)) if overloaded < OVERLOAD_RETRIES => {
                overloaded += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            other => return other,
        }
    }
}

/// The store filter and the effective cap of a bulk replay.
fn bulk_selection(settings: &Settings, f: &ReplayFilter, max: Option<u32>) -> Result<(EventFilter, u32), AdminError> {
    let cap = settings.replay.max_per_call;
    let max = match max {
        Some(0) => return Err(AdminError::Invalid("max must be at least 1".into())),
        Some(n) => n.min(cap),
        None => cap,
    };
    let source = parse_source(f.source.as_deref())?;
    if let Some(name) = &source {
        configured_source(settings, name.as_str())?;
    }
    let filter = EventFilter {
        source,
        status: Some(Outcome::DeadLettered),
        event_type: f.event_type.clone(),
        reason_contains: f.reason.clone(),
        since_ms: f.since,
        until_ms: f.until,
        before: None,
        limit: 0,
    };
    Ok((filter, max))
}

/// Up to `max` matching dead letters, newest first, and whether more match.
async fn select_dead_letters<S: Store>(
    store: &S,
    mut filter: EventFilter,
    max: u32,
) -> Result<(Vec<EventSummary>, bool), AdminError> {
    let wanted = max as usize + 1;
    let mut selected: Vec<EventSummary> = Vec::new();
    // Page by page, each examining at most the store's scan bound: a page stopped by the bound continues below
    // the rows it examined, so a sparse match costs more pages, never one unbounded read.
    while selected.len() < wanted {
        filter.limit = u32::try_from(wanted - selected.len()).unwrap_or(MAX_LIMIT).min(MAX_LIMIT);
        let page = store.list_events(filter.clone()).await?;
        filter.before = page.next_before(filter.limit, |e| e.row_id);
        selected.extend(page.rows);
        if filter.before.is_none() {
            break;
        }
    }
    let more = selected.len() > max as usize;
    selected.truncate(max as usize);
    Ok((selected, more))
}

/// Re-queues a dead outbox row with a fresh budget and returns it as it is now; the audit trail records it for
/// `by` in the re-queue's transaction.
pub async fn retry_outbox<S: Store>(store: &S, id: i64, now_ms: i64, by: &Actor) -> Result<OutboxView, AdminError> {
    let entry = by.entry(AuditAction::OutboxRetry, Some(format!("outbox/{id}")), "", Value::Null, now_ms);
    let requeued = store.retry_outbox_audited(id, now_ms, Some(entry.clone())).await?;
    audit::log(&AuditEntry { outcome: payhook_store::audit::retry_outbox_outcome(requeued).to_owned(), ..entry });
    let row = outbox_row(store, id).await?.ok_or_else(|| AdminError::NotFound(format!("no outbox row {id}")))?;
    if requeued { Ok(row) } else { Err(AdminError::OutboxNotDead { id, status: row.status.to_string() }) }
}

/// One outbox row by id, as it is after the re-queue just made (never from a standby that may lag).
async fn outbox_row<S: Store>(store: &S, id: i64) -> Result<Option<OutboxView>, AdminError> {
    let mut row = store.outbox_row(id).await?;
    row.iter_mut().for_each(redact_outbox_row);
    Ok(row)
}

/// Counts by status and the ages of the oldest waiting work, at `now_ms`.
pub async fn stats<S: Store>(store: &S, now_ms: i64) -> Result<StatsReport, AdminError> {
    let s: Stats = store.stats().await?;
    let with_zeros = |known: &[&str], counted: &[(String, u64)]| -> BTreeMap<String, u64> {
        let mut map: BTreeMap<String, u64> = known.iter().map(|k| ((*k).to_owned(), 0)).collect();
        map.extend(counted.iter().cloned());
        map
    };
    let event_statuses =
        [Outcome::Processed, Outcome::Duplicate, Outcome::Deferred, Outcome::Ignored, Outcome::DeadLettered]
            .map(Outcome::as_str);
    let order_statuses = payhook_core::ledger::OrderStatus::ALL.map(|s| s.as_str());
    let age_secs = |at_ms: Option<i64>| at_ms.map(|at| (now_ms - at).max(0) / 1000);
    Ok(StatsReport {
        events: with_zeros(&event_statuses, &s.events),
        orders: with_zeros(&order_statuses, &s.orders),
        outbox: OutboxStats {
            by_status: with_zeros(&OUTBOX_STATUSES, &s.outbox_by_status),
            by_kind: s.outbox.iter().cloned().collect(),
        },
        oldest_pending_outbox_age_secs: age_secs(s.oldest_pending_outbox_ms),
        oldest_deferred_event_age_secs: age_secs(s.oldest_deferred_event_ms),
    })
}

/// Recounts every row and corrects the counters the stats are read from; reports the drift it corrected.
pub async fn recount<S: Store>(store: &S) -> Result<payhook_store::Recounted, AdminError> {
    Ok(store.recount().await?)
}

fn parse_source(source: Option<&str>) -> Result<Option<SourceName>, AdminError> {
    source.map(|s| SourceName::parse(s).map_err(|e| AdminError::Invalid(e.to_string()))).transpose()
}

fn parse_key(source: &str, event_id: &str) -> Result<(SourceName, EventId), AdminError> {
    let source = SourceName::parse(source).map_err(|e| AdminError::Invalid(e.to_string()))?;
    let event_id = EventId::parse(event_id).map_err(|e| AdminError::Invalid(e.to_string()))?;
    Ok((source, event_id))
}

fn configured_source<'a>(settings: &'a Settings, name: &str) -> Result<&'a SourceSettings, AdminError> {
    settings
        .sources
        .iter()
        .find(|s| s.name.as_str() == name)
        .ok_or_else(|| AdminError::SourceNotConfigured(name.to_owned()))
}
