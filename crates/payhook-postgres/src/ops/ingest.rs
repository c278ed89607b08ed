//! An ingest as the batch sends it: a [`Delivery`] prepared by the caller's task ([`IngestCall`]), what
//! `payhook_ingest_batch` answered for it ([`Landed`]), its billing step and its follow-ups (forwarded copies, the
//! alert of a dead letter).

use super::settle::{Forward, decide, snapshot};
use super::*;

pub(crate) const INGEST_SQL: &str =
    "SELECT outcome, detail, row_id, order_status, order_amount, order_currency FROM payhook_ingest_batch($1, $2)";

/// The status that asks `payhook_ingest_batch` to record a billing delivery without applying it (its outcome).
pub(super) const BILLING: &str = "billing";
pub(super) const DELETE_INBOX_SQL: &str = "DELETE FROM inbox WHERE source = $1 AND event_id = $2 AND id = $3";

/// An `event.received` row per forwarding sink of a source, drafted by the caller's task; the outcome is added
/// once the batch knows it.
#[derive(Debug)]
pub(super) struct ForwardDraft {
    /// The document, its `outcome` and `detail` filled in once the batch knows them.
    pub(super) document: payload::EventReceived<'static>,
}

/// An ingest, prepared from its [`Delivery`] by the caller's task, so that serialization stays off the batcher.
#[derive(Debug)]
pub(crate) struct IngestCall {
    pub(super) source: String,
    pub(super) event_id: String,
    pub(super) event_type: Option<String>,
    pub(super) occurred_at: Option<i64>,
    pub(super) business_key: Option<String>,
    pub(super) effect: Option<String>,
    pub(super) status: &'static str,
    pub(super) reason: Option<String>,
    pub(super) received_at_ms: i64,
    pub(super) verification: String,
    pub(super) headers: String,
    pub(super) body: Vec<u8>,
    pub(super) change: Option<Change>,
    /// A subscription or invoice event: applied after the batch function recorded it (see `crate::billing`).
    pub(super) billing: Option<Box<Event>>,
    pub(super) forward: Option<Box<ForwardDraft>>,
    /// A payment of a source whose orders are implicit: a missing order is created from it.
    pub(super) create_order: bool,
}

impl IngestCall {
    /// Mirrors the SQLite backend: an ignored type is recorded `ignored`, an unparseable body `dead_lettered`
    /// with its reason, an order event `processed` unless applying its effect says otherwise; a billing event is
    /// recorded by the batch function and applied after it, in the same transaction.
    pub(crate) fn new(d: Delivery, routing: &Routing) -> Result<Self, StoreError> {
        let d = d.into_parts();
        let forward = routing.forwards.get(d.source.as_str()).filter(|sinks| !sinks.is_empty()).map(|_| {
            let event = match &d.parsed {
                Parsed::Event(e) => Some(e),
                Parsed::Unparseable { .. } => None,
            };
            let document = payload::EventReceived {
                kind: FORWARD_KIND.into(),
                source: d.source.as_str().to_owned().into(),
                event_id: d.parsed.event_id().as_str().to_owned().into(),
                event_type: event.map(|e| e.event_type.clone().into()),
                occurred_at: event.map(|e| e.occurred_at),
                business_key: event.map(|e| e.business_key.clone().into()),
                effect: event.map(|e| std::borrow::Cow::Owned(e.effect.clone())),
                outcome: "".into(),
                detail: None,
                received_at_ms: d.received_at_ms,
            };
            Box::new(ForwardDraft { document })
        });
        let mut call = Self {
            source: d.source.as_str().to_owned(),
            event_id: d.parsed.event_id().as_str().to_owned(),
            event_type: None,
            occurred_at: None,
            business_key: None,
            effect: None,
            status: Outcome::DeadLettered.as_str(),
            reason: None,
            received_at_ms: d.received_at_ms,
            verification: d.verification,
            headers: d.headers.to_json(),
            body: d.raw_body,
            change: None,
            billing: None,
            forward,
            create_order: false,
        };
        match d.parsed {
            Parsed::Unparseable { reason, .. } => call.reason = Some(reason),
            Parsed::Event(event) => {
                call.status = match event.effect {
                    Effect::Ignored => Outcome::Ignored.as_str(),
                    Effect::Order { .. } => Outcome::Processed.as_str(),
                    Effect::Subscription(_) | Effect::Invoice(_) => BILLING,
                };
                if event.effect != Effect::Ignored {
                    let json = serde_json::to_string(&event.effect)
                        .map_err(|e| StoreError::corrupt("an effect that does not encode", e))?;
                    call.effect = Some(json);
                }
                call.change = ledger::plan(&event.effect).map(|plan| Change::new(plan, d.source.as_str(), &event));
                call.create_order =
                    routing.implicit_order(d.source.as_str(), &event.effect, d.received_at_ms).is_some();
                call.event_type = Some(event.event_type.clone());
                call.occurred_at = Some(event.occurred_at);
                call.business_key = Some(event.business_key.clone());
                if billing::is_billing(&event.effect) {
                    call.billing = Some(Box::new(event));
                }
            }
        }
        Ok(call)
    }

    /// The key a batch sorts its deliveries by, so that concurrent batches take their locks in one global order:
    /// deliveries without an order first (they lock only their inbox key), then by order lock (taken before any
    /// other key of that order), then by order and event.
    pub(crate) fn lock_key(&self) -> (bool, i64, &str, &str, &str) {
        match &self.change {
            Some(c) => (true, c.lock, c.plan.order_id.as_str(), &self.source, &self.event_id),
            None => (false, 0, "", &self.source, &self.event_id),
        }
    }

    /// What `payhook_ingest_batch` answered for this delivery, and the settlement it still needs (a guard miss).
    pub(crate) fn landed(&self, row: &Row, policy: &RetryPolicy) -> Result<Landed, StoreError> {
        let outcome: String = row.try_get(0).map_err(|e| StoreError::corrupt("payhook_ingest_batch outcome", e))?;
        let detail: Option<String> =
            row.try_get(1).map_err(|e| StoreError::corrupt("payhook_ingest_batch detail", e))?;
        let row_id: Option<i64> = row.try_get(2).map_err(|e| StoreError::corrupt("payhook_ingest_batch row id", e))?;
        match outcome.as_str() {
            "failed" => Ok(Landed::Failed(detail.unwrap_or_default())),
            "billing" => match (&self.billing, row_id) {
                (Some(_), Some(row_id)) => Ok(Landed::Billing { row_id }),
                _ => Err(StoreError::inconsistent(
                    "payhook_ingest_batch: a billing outcome without a billing event or a row",
                )),
            },
            "unapplied" => {
                let change = self
                    .change
                    .as_ref()
                    .ok_or_else(|| StoreError::inconsistent("payhook_ingest_batch: a miss without a plan"))?;
                let row_id =
                    row_id.ok_or_else(|| StoreError::inconsistent("payhook_ingest_batch: a miss without a row"))?;
                let snapshot = snapshot(row, 3)?;
                let target = Settle::new(&self.source, &self.event_id, row_id, 1, self.received_at_ms);
                let (recorded, settle) = decide(&change.plan, snapshot.as_ref(), target, policy);
                Ok(Landed::Settle(recorded, settle))
            }
            other => match Outcome::parse(other) {
                Some(outcome) => {
                    Ok(Landed::Done { recorded: Recorded { outcome, detail }, inserted: row_id.is_some() })
                }
                None => Err(StoreError::inconsistent(format!("payhook_ingest_batch outcome {other:?}"))),
            },
        }
    }

    /// Applies a billing delivery that landed as [`Landed::Billing`] (row `row_id`), in a savepoint of its own; the
    /// caller holds its billing locks (see `crate::billing`). A failure other than a deadlock, a serialization
    /// failure or a broken connection rolls back the savepoint and deletes the delivery's inbox row, so that
    /// nothing of it is stored, as when the batch function's own savepoint fails; its batch-mates go on.
    pub(crate) async fn apply_billing(&self, client: &Object, ctx: &Ctx, row_id: i64) -> Result<Landed, Failure> {
        let event =
            self.billing.as_deref().ok_or_else(|| StoreError::inconsistent("billing delivery: no billing event"))?;
        match billing::apply(client, ctx, &self.source, event, self.received_at_ms, true).await {
            Ok(raw) if raw.outcome == Outcome::Processed && raw.detail.is_none() => {
                // The row was recorded as processed: the common path costs no second write.
                Ok(Landed::Done { recorded: raw, inserted: true })
            }
            Ok(raw) => {
                let target = Settle::new(&self.source, &self.event_id, row_id, 1, self.received_at_ms);
                let (recorded, settle) = settle_billing(raw, target, &ctx.retry);
                Ok(Landed::Settle(recorded, settle))
            }
            Err(Failure::Pg(e)) if !e.is_conflict() && !e.breaks_connection() => {
                let detail = match &e {
                    PgError::Db(db) => match db.as_db_error() {
                        Some(d) => format!("{}: {}", d.code().code(), d.message()),
                        None => db.to_string(),
                    },
                    other => other.to_string(),
                };
                client.batch_execute("ROLLBACK TO SAVEPOINT billing; RELEASE SAVEPOINT billing").await?;
                let delete = client.prepare_cached(DELETE_INBOX_SQL).await?;
                client.execute(&delete, &[&self.source, &self.event_id, &row_id]).await?;
                Ok(Landed::Failed(detail))
            }
            Err(e) => Err(e),
        }
    }

    /// The billing locks of this delivery (none for anything but a billing event).
    pub(crate) fn billing_locks(&self) -> Vec<i64> {
        self.billing.as_ref().map(|e| billing::locks(&e.effect)).unwrap_or_default()
    }

    /// What a delivery that landed still writes in its batch's second statement: its forwarded copies (a new
    /// delivery of a forwarded source) and the alert of a dead letter.
    pub(crate) fn follow_ups(&self, landed: &Landed, routing: &Routing, out: &mut FollowUps) {
        let recorded = match landed {
            Landed::Done { recorded, inserted: true } | Landed::Settle(recorded, _) => recorded,
            Landed::Done { inserted: false, .. } | Landed::Failed(_) | Landed::Billing { .. } => return,
        };
        if let Some(draft) = &self.forward {
            let payload = payload::render(&payload::EventReceived {
                outcome: recorded.outcome.as_str().into(),
                detail: recorded.detail.as_deref().map(std::borrow::Cow::Borrowed),
                ..draft.document.clone()
            });
            for sink in routing.forwards_for(&self.source, &payload) {
                out.forwards.push(Forward {
                    sink: sink.to_owned(),
                    source: self.source.clone(),
                    event_id: self.event_id.clone(),
                    payload: payload.clone(),
                    now_ms: self.received_at_ms,
                });
            }
        }
        out.dead_letter(routing, &self.source, &self.event_id, recorded, self.received_at_ms);
    }
}

/// The first answer to an ingest.
#[derive(Debug)]
pub(crate) enum Landed {
    /// Final as it is; `inserted` is false for a delivery whose event id was seen before (nothing was written).
    Done { recorded: Recorded, inserted: bool },
    /// Final once the settlement is written in the same transaction.
    Settle(Recorded, Settle),
    /// The delivery's savepoint rolled back; nothing of it is stored.
    Failed(String),
    /// A billing event recorded as row `row_id` and not applied yet: [`IngestCall::apply_billing`] turns it into
    /// one of the others before the batch settles anything.
    Billing { row_id: i64 },
}
