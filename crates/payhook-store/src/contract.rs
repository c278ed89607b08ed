//! The store contract: the behaviour every [`Store`] backend must show, as a test suite they all run.
//!
//! Why one file of about 1,400 lines: the fixtures and checked calls every case uses, and the core ledger cases
//! that use nothing else; the audit trail, billing, counters, documents, listings and order-retention cases are in
//! `contract/`.
//!
//! Each case is a `pub async fn` generic over `S: Store` that takes a freshly created, empty store and panics
//! when the backend misbehaves. A backend runs the whole suite with one macro call in its integration tests:
//!
//! ```text
//! payhook_store::store_contract_tests!(|setup| open_fresh_store(setup.retry, setup.routing, setup.list_scan_rows));
//! ```
//!
//! The expression after `|setup|` is evaluated inside an `async fn(setup: Setup) -> impl Store`, so it may
//! `.await`; it must return a new, empty store that applies `setup.retry` to deferred events and routes outbox
//! rows by `setup.routing`. The calling crate needs `tokio` with the `macros` and `rt-multi-thread` features.
//!
//! Time is always passed explicitly (`received_at_ms`, `now_ms`), so the cases control the clock and never sleep.
//! The policies they use have no jitter, so retry times are exact.

use crate::{
    Alert, AlertRouting, Claim, Claimed, Delivery, Dispatched, EventView, NewOrder, OrderView, OutboxFilter, OutboxJob,
    OutboxView, Outcome, Parsed, ReceivedHeaders, Recorded, Registered, Replayed, Retried, Routing, Stats, Store,
};
use payhook_core::event::{Currency, EventId, Money, OrderAction, OrderId, SourceName};
use payhook_core::format::Format;
use payhook_core::ledger::OrderStatus;
use std::sync::Arc;

pub use payhook_core::retry::RetryPolicy;

mod audit;
mod billing;
mod counters;
mod documents;
mod filters;
mod implicit_orders;
mod listings;
mod order_retention;
mod ordering;
pub use audit::*;
pub use billing::*;
pub use counters::*;
pub use documents::*;
pub use filters::*;
pub use implicit_orders::*;
pub use listings::*;
pub use order_retention::*;
pub use ordering::*;

/// What a contract case needs its fresh store to be configured with.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The retry policy of deferred events.
    pub retry: RetryPolicy,
    /// The sink routing.
    pub routing: Routing,
    /// Rows a listing page examines at most when no index serves its whole filter (`storage.list_scan_rows`).
    pub list_scan_rows: u32,
}

/// Expands to one `#[tokio::test]` per contract case, each on a fresh store made by the factory.
///
/// `store_contract_tests!(|setup| make(setup))`: the factory expression is the body of an
/// `async fn(setup: Setup) -> impl Store`, so it may `.await`.
#[macro_export]
macro_rules! store_contract_tests {
    (|$setup:ident| $make:expr $(,)?) => {
        /// A fresh, empty store configured by `setup`: the factory given to `store_contract_tests!`.
        async fn __contract_store($setup: $crate::contract::Setup) -> impl $crate::Store {
            $make
        }

        $crate::__store_contract_cases! {
            __contract_store;
            $crate::contract::setup(
                $crate::contract::test_policy(), $crate::contract::test_routing()
            ) => [
                outbox_rows_are_written_per_matching_sink_and_delivered_once,
                a_routing_set_while_running_routes_the_next_effects_and_leaves_written_rows_alone,
                a_failing_sink_is_retried_then_dead_and_a_dead_row_can_be_requeued,
                an_outbox_lease_keeps_other_dispatchers_away_and_a_lost_lease_changes_nothing,
                a_hundred_dead_letters_in_a_minute_raise_one_alert_with_the_count,
                a_dead_outbox_row_raises_an_alert_and_an_alert_row_never_alerts,
                forwarded_sources_write_one_event_row_per_sink_for_new_events_only,
                a_dead_letter_is_replayed_once_its_order_exists_and_a_second_replay_changes_nothing,
                an_unparseable_dead_letter_that_now_parses_is_recorded_under_its_own_id,
                events_and_outbox_rows_are_listed_newest_first_with_filters_and_cursors,
                stats_equal_a_full_count_after_a_mixed_workload,
                an_audited_requeue_writes_requeued_for_a_dead_row_and_not_dead_for_any_other,
                a_keys_later_row_waits_for_its_earlier_row_and_a_dead_row_holds_it_until_requeued,
                skip_lets_a_dead_rows_key_pass_and_an_unordered_claim_takes_a_keys_rows_together,
            ],
            $crate::contract::setup($crate::contract::test_policy(), $crate::Routing::default()) => [
                an_empty_store_answers_and_holds_nothing,
                a_delivery_seen_twice_is_recorded_once,
                concurrent_copies_of_one_delivery_are_processed_exactly_once,
                a_second_event_for_the_same_business_fact_is_a_duplicate,
                concurrent_events_for_the_same_business_fact_are_applied_once,
                a_payment_after_a_refund_is_processed_as_a_no_op,
                a_payment_before_its_order_is_deferred_and_applied_once_the_order_is_registered,
                a_deferred_event_retried_too_early_waits_longer_each_time,
                two_early_payments_for_one_order_settle_as_one_payment_and_one_duplicate,
                a_payment_of_another_amount_is_dead_lettered_and_leaves_the_business_fact_free,
                a_payment_in_another_currency_is_dead_lettered,
                an_unparseable_delivery_is_kept_byte_for_byte_as_a_dead_letter,
                an_event_of_an_ignored_type_is_recorded_as_ignored,
                a_lease_keeps_other_workers_away_until_it_expires_and_a_lost_lease_changes_nothing,
                claims_take_the_earliest_due_events_up_to_the_limit,
                registering_an_order_is_idempotent_and_reports_conflicts,
                a_dispute_before_its_payment_waits_for_the_payment,
                a_failed_payment_followed_by_a_successful_one_pays_the_order,
                stats_count_events_orders_and_outbox_rows,
                subscription_events_in_every_order_end_in_the_same_state,
                a_partial_update_before_its_subscription_is_deferred_then_applied,
                two_events_for_one_paid_invoice_grant_one_entitlement,
                a_refund_revokes_and_a_refund_before_payment_grants_nothing,
                the_end_of_a_subscription_revokes_its_entitlements,
                a_signature_nonce_is_claimed_once_and_forgotten_after_its_window,
                pruning_removes_only_settled_events_older_than_the_retention,
                audit_entries_are_listed_newest_first_and_narrowed_by_each_filter,
                an_audited_replay_writes_one_entry_with_its_outcome_and_a_replay_of_nothing_writes_none,
                an_audited_registration_writes_its_entry_with_the_registration_outcome,
                registrations_sent_at_once_write_the_entries_of_the_audited_ones_only,
                pruning_the_audit_trail_deletes_at_most_its_limit_of_the_oldest_entries_before_its_time,
            ],
            $crate::contract::setup($crate::contract::test_policy(), $crate::contract::implicit_routing()) => [
                orders_of_an_implicit_source_are_created_by_their_first_payment,
            ],
            $crate::contract::setup($crate::contract::test_policy(), $crate::contract::filter_routing()) => [
                a_sinks_filter_decides_which_documents_become_its_rows,
                billing_documents_are_filtered_and_an_effect_no_filter_takes_is_recorded_unrouted,
            ],
            $crate::contract::setup($crate::contract::test_policy(), $crate::contract::retention_routing()) => [
                settled_orders_are_pruned_with_their_outbox_rows_unless_something_still_waits_on_them,
            ],
            $crate::contract::setup($crate::contract::two_attempt_policy(), $crate::contract::test_routing()) => [
                a_deferred_event_is_dead_lettered_when_its_retry_budget_is_spent,
                a_replayed_event_still_without_its_order_is_dead_lettered_again,
            ],
            $crate::contract::setup_with_scan_bound(
                $crate::contract::test_policy(), $crate::contract::test_routing(), $crate::contract::SCAN_BOUND
            ) => [
                a_filter_no_index_serves_stops_at_the_scan_bound_and_pages_on_to_every_match,
                filters_an_index_serves_whole_never_stop_at_the_scan_bound,
                paging_the_audit_trail_visits_every_entry_once_whatever_the_scan_bound,
            ],
        }
    };
}

/// Implements [`Store`] for a test wrapper by handing every call to one of its fields, so that a backend's tests can
/// keep a guard (a temporary directory, a schema to drop) beside the store without restating the trait:
/// `payhook_store::delegate_store!(TempStore => store);` (a generic wrapper: `delegate_store!(impl<S> Wrapper<S> => store)`).
#[macro_export]
macro_rules! delegate_store {
    (impl<$($generic:ident),*> $ty:ty => $field:ident) => {
        impl<$($generic: $crate::Store),*> $crate::Store for $ty {
            fn ingest(
                &self,
                delivery: $crate::Delivery,
            ) -> impl ::std::future::Future<Output = Result<$crate::Recorded, $crate::StoreError>> + Send {
                self.$field.ingest(delivery)
            }

            fn register_order(
                &self,
                order: $crate::NewOrder,
            ) -> impl ::std::future::Future<Output = Result<$crate::Registered, $crate::StoreError>> + Send {
                self.$field.register_order(order)
            }

            fn register_order_audited(
                &self,
                order: $crate::NewOrder,
                audit: Option<$crate::AuditEntry>,
            ) -> impl ::std::future::Future<Output = Result<$crate::Registered, $crate::StoreError>> + Send {
                self.$field.register_order_audited(order, audit)
            }

            fn order(
                &self,
                id: &::payhook_core::event::OrderId,
            ) -> impl ::std::future::Future<Output = Result<Option<$crate::OrderView>, $crate::StoreError>> + Send
            {
                self.$field.order(id)
            }

            fn event(
                &self,
                source: &::payhook_core::event::SourceName,
                event_id: &::payhook_core::event::EventId,
            ) -> impl ::std::future::Future<Output = Result<Option<$crate::EventView>, $crate::StoreError>> + Send
            {
                self.$field.event(source, event_id)
            }

            fn claim_due(
                &self,
                claim: $crate::Claim,
            ) -> impl ::std::future::Future<Output = Result<Vec<$crate::Claimed>, $crate::StoreError>> + Send {
                self.$field.claim_due(claim)
            }

            fn retry(
                &self,
                claimed: $crate::Claimed,
                now_ms: i64,
            ) -> impl ::std::future::Future<Output = Result<$crate::Retried, $crate::StoreError>> + Send {
                self.$field.retry(claimed, now_ms)
            }

            fn stats(&self) -> impl ::std::future::Future<Output = Result<$crate::Stats, $crate::StoreError>> + Send {
                self.$field.stats()
            }

            fn recount(
                &self,
            ) -> impl ::std::future::Future<Output = Result<$crate::Recounted, $crate::StoreError>> + Send {
                self.$field.recount()
            }

            fn next_due_ms(&self) -> impl ::std::future::Future<Output = Result<Option<i64>, $crate::StoreError>> + Send {
                self.$field.next_due_ms()
            }

            fn claim_outbox_ordered(
                &self,
                sink: &str,
                claim: $crate::Claim,
                order: $crate::KeyOrder,
            ) -> impl ::std::future::Future<Output = Result<Vec<$crate::OutboxJob>, $crate::StoreError>> + Send {
                self.$field.claim_outbox_ordered(sink, claim, order)
            }

            fn held_outbox(
                &self,
                sink: &str,
                order: $crate::KeyOrder,
                scan_rows: u32,
            ) -> impl ::std::future::Future<Output = Result<$crate::Held, $crate::StoreError>> + Send {
                self.$field.held_outbox(sink, order, scan_rows)
            }

            fn finish_outbox(
                &self,
                job: &$crate::OutboxJob,
                outcome: $crate::Dispatched,
                now_ms: i64,
            ) -> impl ::std::future::Future<Output = Result<bool, $crate::StoreError>> + Send {
                self.$field.finish_outbox(job, outcome, now_ms)
            }

            fn retry_outbox(
                &self,
                id: i64,
                now_ms: i64,
            ) -> impl ::std::future::Future<Output = Result<bool, $crate::StoreError>> + Send {
                self.$field.retry_outbox(id, now_ms)
            }

            fn retry_outbox_audited(
                &self,
                id: i64,
                now_ms: i64,
                audit: Option<$crate::AuditEntry>,
            ) -> impl ::std::future::Future<Output = Result<bool, $crate::StoreError>> + Send {
                self.$field.retry_outbox_audited(id, now_ms, audit)
            }

            fn next_outbox_due_ms(
                &self,
                sink: &str,
            ) -> impl ::std::future::Future<Output = Result<Option<i64>, $crate::StoreError>> + Send {
                self.$field.next_outbox_due_ms(sink)
            }

            fn list_outbox(
                &self,
                filter: $crate::OutboxFilter,
            ) -> impl ::std::future::Future<Output = Result<$crate::Listing<$crate::OutboxView>, $crate::StoreError>> + Send {
                self.$field.list_outbox(filter)
            }

            fn outbox_row(
                &self,
                id: i64,
            ) -> impl ::std::future::Future<Output = Result<Option<$crate::OutboxView>, $crate::StoreError>> + Send {
                self.$field.outbox_row(id)
            }

            fn list_events(
                &self,
                filter: $crate::EventFilter,
            ) -> impl ::std::future::Future<Output = Result<$crate::Listing<$crate::EventSummary>, $crate::StoreError>> + Send {
                self.$field.list_events(filter)
            }

            fn replay(
                &self,
                source: &::payhook_core::event::SourceName,
                event_id: &::payhook_core::event::EventId,
                parsed: $crate::Parsed,
                now_ms: i64,
            ) -> impl ::std::future::Future<Output = Result<$crate::Replayed, $crate::StoreError>> + Send {
                self.$field.replay(source, event_id, parsed, now_ms)
            }

            fn replay_audited(
                &self,
                source: &::payhook_core::event::SourceName,
                event_id: &::payhook_core::event::EventId,
                parsed: $crate::Parsed,
                now_ms: i64,
                audit: Option<$crate::AuditEntry>,
            ) -> impl ::std::future::Future<Output = Result<$crate::Replayed, $crate::StoreError>> + Send {
                self.$field.replay_audited(source, event_id, parsed, now_ms, audit)
            }

            fn audit(
                &self,
                entries: Vec<$crate::AuditEntry>,
            ) -> impl ::std::future::Future<Output = Result<(), $crate::StoreError>> + Send {
                self.$field.audit(entries)
            }

            fn list_audit(
                &self,
                filter: $crate::AuditFilter,
            ) -> impl ::std::future::Future<Output = Result<$crate::Listing<$crate::AuditRecord>, $crate::StoreError>> + Send {
                self.$field.list_audit(filter)
            }

            fn prune_audit(
                &self,
                before_ms: i64,
                limit: u32,
            ) -> impl ::std::future::Future<Output = Result<u64, $crate::StoreError>> + Send {
                self.$field.prune_audit(before_ms, limit)
            }

            fn raise_alert(
                &self,
                alert: $crate::Alert,
            ) -> impl ::std::future::Future<Output = Result<(), $crate::StoreError>> + Send {
                self.$field.raise_alert(alert)
            }

            fn subscription(
                &self,
                id: &::payhook_core::event::SubscriptionId,
            ) -> impl ::std::future::Future<Output = Result<Option<$crate::SubscriptionView>, $crate::StoreError>> + Send
            {
                self.$field.subscription(id)
            }

            fn entitlements(
                &self,
                customer: &::payhook_core::event::CustomerId,
            ) -> impl ::std::future::Future<Output = Result<Vec<$crate::EntitlementView>, $crate::StoreError>> + Send {
                self.$field.entitlements(customer)
            }

            fn claim_nonce(
                &self,
                claim: $crate::NonceClaim,
            ) -> impl ::std::future::Future<Output = Result<$crate::NonceClaimed, $crate::StoreError>> + Send {
                self.$field.claim_nonce(claim)
            }

            fn prune(
                &self,
                request: $crate::PruneRequest,
            ) -> impl ::std::future::Future<Output = Result<$crate::Pruned, $crate::StoreError>> + Send {
                self.$field.prune(request)
            }

            fn ping(&self) -> impl ::std::future::Future<Output = Result<(), $crate::StoreError>> + Send {
                self.$field.ping()
            }

            fn replication(
                &self,
            ) -> impl ::std::future::Future<Output = Result<Option<$crate::Replication>, $crate::StoreError>> + Send {
                self.$field.replication()
            }

            fn requires_sync_standby(&self) -> bool {
                self.$field.requires_sync_standby()
            }

            fn writer_metrics(&self) -> $crate::metrics::WriterMetrics {
                self.$field.writer_metrics()
            }

            fn set_routing(&self, routing: $crate::Routing) {
                self.$field.set_routing(routing)
            }

            fn read_metrics(&self) -> $crate::metrics::ReadMetrics {
                self.$field.read_metrics()
            }
        }
    };
    ($ty:ty => $field:ident) => {
        $crate::delegate_store!(impl<> $ty => $field);
    };
}

/// A case's store, shared with the check that runs after the case ([`counters_equal_a_full_count`]).
#[derive(Debug)]
pub struct Shared<S> {
    /// The store the case was given.
    pub store: Arc<S>,
}

delegate_store!(impl<S> Shared<S> => store);

/// After every case: the row counters behind `stats` equal a full count of the rows, whatever the case did (the
/// counters are kept apart from the rows they count, by triggers or by the writer, and a write path that forgets
/// to count shows up here).
pub async fn counters_equal_a_full_count<S: Store>(store: &S) {
    let recounted = store.recount().await.expect("recount");
    assert_eq!(recounted.drift, [], "the counters drifted from a full count");
}

/// Implementation detail of [`store_contract_tests!`]: one test per case, each with its policy.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_contract_cases {
    ($make:ident; $($policy:expr => [$($case:ident),* $(,)?]),* $(,)?) => {
        $($(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store = ::std::sync::Arc::new($make($policy).await);
                $crate::contract::$case($crate::contract::Shared { store: ::std::sync::Arc::clone(&store) }).await;
                $crate::contract::counters_equal_a_full_count(&*store).await;
            }
        )*)*
    };
}

// ---------------------------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------------------------

/// The source every contract delivery arrives on.
pub const SOURCE: &str = "shop";

/// The contract's epoch, unix milliseconds. Every time in the cases is an offset from it.
pub const T0: i64 = 1_700_000_000_000;

/// The first retry delay of [`test_policy`] and [`two_attempt_policy`]: a deferred event is due this long after
/// its first attempt.
pub const BASE_MS: i64 = 1_000;

/// The policy most cases run with: 1 s doubling, no jitter (retry times are exact), 5 attempts.
pub fn test_policy() -> RetryPolicy {
    RetryPolicy { base_ms: BASE_MS as u64, factor: 2, cap_ms: 60_000, jitter: 0.0, max_attempts: 5 }
}

/// Like [`test_policy`] but with a budget of two attempts: the first retry is the last.
pub fn two_attempt_policy() -> RetryPolicy {
    RetryPolicy { max_attempts: 2, ..test_policy() }
}

/// A [`Setup`].
pub fn setup(retry: RetryPolicy, routing: Routing) -> Setup {
    Setup { retry, routing, list_scan_rows: 10_000 }
}

/// A [`Setup`] whose listing pages examine at most `list_scan_rows` rows when no index serves their whole filter.
pub fn setup_with_scan_bound(retry: RetryPolicy, routing: Routing, list_scan_rows: u32) -> Setup {
    Setup { list_scan_rows, ..setup(retry, routing) }
}

/// The alert suppression window of [`test_routing`].
pub const ALERT_WINDOW_MS: i64 = 300_000;
/// How long an alert of [`test_routing`] gathers repeats before it is due.
pub const ALERT_GATHER_MS: i64 = 10_000;
/// The alerts sink of [`test_routing`].
pub const ALERTS_SINK: &str = "_alerts";

/// Receipts go to sinks `crm` and `mail`, everything to `audit`; source `fwd` is forwarded to `lake`; alerts are
/// on.
pub fn test_routing() -> Routing {
    let mut routing = Routing::default();
    routing.by_kind.insert("order.paid".into(), vec!["crm".into(), "mail".into()]);
    routing.all_kinds.push("audit".into());
    routing.forwards.insert("fwd".into(), vec!["lake".into()]);
    routing.alerts =
        Some(AlertRouting { sink: ALERTS_SINK.into(), window_ms: ALERT_WINDOW_MS, gather_ms: ALERT_GATHER_MS });
    routing
}

/// The contract's source name.
pub fn source() -> SourceName {
    SourceName::parse(SOURCE).expect("valid source")
}

/// A checked order id.
pub fn order_id(id: &str) -> OrderId {
    OrderId::parse(id).expect("valid order id")
}

/// A checked event id.
pub fn event_id(id: &str) -> EventId {
    EventId::parse(id).expect("valid event id")
}

/// An amount in a currency (`"usd"`, `"eur"`).
pub fn money(amount_minor: i64, currency: &str) -> Money {
    Money::new(amount_minor, Currency::parse(currency).expect("valid currency")).expect("valid amount")
}

/// An amount in US cents.
pub fn usd(amount_minor: i64) -> Money {
    money(amount_minor, "usd")
}

/// An order of `amount_minor` US cents registered at `now_ms`.
pub fn new_order(id: &str, amount_minor: i64, now_ms: i64) -> NewOrder {
    NewOrder { id: order_id(id), money: usd(amount_minor), now_ms }
}

/// The headers every contract delivery carries: one of them sent twice, so that every backend is seen to keep
/// both values, in order.
pub fn headers() -> ReceivedHeaders {
    [("content-type", "application/json"), ("x-signature", "t=1,v1=00"), ("x-signature", "t=1,v1=ff")]
        .into_iter()
        .collect()
}

/// The verification note every contract delivery carries.
pub const VERIFICATION: &str = "hmac-sha256 (secret #0)";

/// A delivery of `body`, parsed by the generic payload format as the pipeline would.
pub fn generic_delivery(body: Vec<u8>, received_at_ms: i64) -> Delivery {
    let event = Format::Generic.parse(&body).expect("the fixture body parses");
    Delivery::unverified_for_tests(crate::DeliveryParts {
        source: source(),
        received_at_ms,
        parsed: Parsed::Event(event),
        raw_body: body,
        headers: headers(),
        verification: VERIFICATION.to_owned(),
    })
}

/// A generic-format event (`payment.succeeded`, …) about `order` for `amount` in `currency`.
pub fn order_event(
    event_id: &str,
    action: OrderAction,
    order: &str,
    amount_minor: i64,
    currency: &str,
    received_at_ms: i64,
) -> Delivery {
    let body = serde_json::json!({
        "id": event_id,
        "type": generic_type(action),
        "created": received_at_ms / 1000,
        "data": { "order_id": order, "amount": amount_minor, "currency": currency },
    });
    generic_delivery(body.to_string().into_bytes(), received_at_ms)
}

/// The generic format's type for an action.
fn generic_type(action: OrderAction) -> &'static str {
    match action {
        OrderAction::Pay => "payment.succeeded",
        OrderAction::Fail => "payment.failed",
        OrderAction::Refund => "payment.refunded",
        OrderAction::Dispute => "payment.disputed",
    }
}

/// `payment.succeeded` for `order`, in US cents.
pub fn pay(event_id: &str, order: &str, amount_minor: i64, received_at_ms: i64) -> Delivery {
    order_event(event_id, OrderAction::Pay, order, amount_minor, "usd", received_at_ms)
}

/// `payment.failed` for `order`, in US cents.
pub fn fail(event_id: &str, order: &str, amount_minor: i64, received_at_ms: i64) -> Delivery {
    order_event(event_id, OrderAction::Fail, order, amount_minor, "usd", received_at_ms)
}

/// `payment.refunded` for `order`, in US cents.
pub fn refund(event_id: &str, order: &str, amount_minor: i64, received_at_ms: i64) -> Delivery {
    order_event(event_id, OrderAction::Refund, order, amount_minor, "usd", received_at_ms)
}

/// `payment.disputed` for `order`, in US cents.
pub fn dispute(event_id: &str, order: &str, amount_minor: i64, received_at_ms: i64) -> Delivery {
    order_event(event_id, OrderAction::Dispute, order, amount_minor, "usd", received_at_ms)
}

/// A generic-format event of a type payhook does not act on.
pub fn ignored(event_id: &str, event_type: &str, received_at_ms: i64) -> Delivery {
    let body = serde_json::json!({
        "id": event_id, "type": event_type, "created": received_at_ms / 1000, "data": { "customer": "cus_1" },
    });
    generic_delivery(body.to_string().into_bytes(), received_at_ms)
}

/// A verified body that no format understands, kept under `event_id`.
pub fn unparseable(event_id: &str, body: &[u8], reason: &str, received_at_ms: i64) -> Delivery {
    Delivery::unverified_for_tests(crate::DeliveryParts {
        source: source(),
        received_at_ms,
        parsed: Parsed::Unparseable { event_id: self::event_id(event_id), reason: reason.to_owned() },
        raw_body: body.to_vec(),
        headers: headers(),
        verification: VERIFICATION.to_owned(),
    })
}

/// The business key the payload format gave a delivery.
pub fn business_key(delivery: &Delivery) -> String {
    match delivery.parsed() {
        Parsed::Event(e) => e.business_key.clone(),
        Parsed::Unparseable { .. } => panic!("an unparseable delivery has no business key"),
    }
}

/// A claim of up to 100 rows by `owner` at `now_ms`, leased for `lease_ms`.
pub fn claim(owner: &str, now_ms: i64, lease_ms: i64) -> Claim {
    Claim { now_ms, lease_ms, limit: 100, owner: owner.to_owned() }
}

/// The answer of an event that was applied with nothing to explain.
pub fn processed() -> Recorded {
    Recorded { outcome: Outcome::Processed, detail: None }
}

// ---------------------------------------------------------------------------------------------------------------
// Checked store calls: every error is a test failure.
// ---------------------------------------------------------------------------------------------------------------

/// Ingests `delivery`, failing the test on a store error.
pub async fn ingest<S: Store>(store: &S, delivery: Delivery) -> Recorded {
    let id = delivery.parsed().event_id().clone();
    match store.ingest(delivery).await {
        Ok(recorded) => recorded,
        Err(e) => panic!("ingest of {id} failed: {e} ({e:?})"),
    }
}

/// Registers `order`, failing the test on a store error.
pub async fn register<S: Store>(store: &S, order: NewOrder) -> Registered {
    store.register_order(order).await.expect("register_order")
}

/// Registers `order` and checks that it is new.
pub async fn register_new<S: Store>(store: &S, order: NewOrder) {
    let id = order.id.clone();
    assert_eq!(register(store, order).await, Registered::Created, "registering order {id}");
}

/// The order `id`, which must exist.
pub async fn order_view<S: Store>(store: &S, id: &str) -> OrderView {
    store.order(&order_id(id)).await.expect("order").unwrap_or_else(|| panic!("order {id} does not exist"))
}

/// The recorded delivery `id` of the contract source, which must exist.
pub async fn event_view<S: Store>(store: &S, id: &str) -> EventView {
    store.event(&source(), &event_id(id)).await.expect("event").unwrap_or_else(|| panic!("event {id} is not stored"))
}

/// Claims due rows, failing the test on a store error.
pub async fn claim_due<S: Store>(store: &S, claim: Claim) -> Vec<Claimed> {
    store.claim_due(claim).await.expect("claim_due")
}

/// Retries a claimed row, failing the test on a store error.
pub async fn retry<S: Store>(store: &S, claimed: Claimed, now_ms: i64) -> Retried {
    store.retry(claimed, now_ms).await.expect("retry")
}

/// Row counts, failing the test on a store error.
pub async fn stats<S: Store>(store: &S) -> Stats {
    store.stats().await.expect("stats")
}

/// The outbox kinds of an order, oldest first.
pub fn outbox_kinds(order: &OrderView) -> Vec<&str> {
    order.outbox.iter().map(|o| o.kind.as_str()).collect()
}

/// An order's history as `(from, to, event id)`, oldest first.
pub fn transitions(order: &OrderView) -> Vec<(OrderStatus, OrderStatus, &str)> {
    order.history.iter().map(|h| (h.from, h.to, h.event_id.as_str())).collect()
}

/// The `order.paid` rows in the whole store.
pub async fn paid_rows<S: Store>(store: &S) -> u64 {
    Stats::count(&stats(store).await.outbox, "order.paid")
}

fn detail_of(recorded: &Recorded) -> &str {
    recorded.detail.as_deref().unwrap_or_else(|| panic!("{recorded:?} should explain itself"))
}

/// Spawns `n` concurrent ingests on a shared store and returns their outcomes.
async fn ingest_concurrently<S: Store>(store: &Arc<S>, deliveries: Vec<Delivery>) -> Vec<Recorded> {
    let mut tasks = tokio::task::JoinSet::new();
    for delivery in deliveries {
        let store = Arc::clone(store);
        tasks.spawn(async move { ingest(&*store, delivery).await });
    }
    let mut results = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        results.push(joined.expect("ingest task panicked"));
    }
    results
}

fn count(results: &[Recorded], outcome: Outcome) -> usize {
    results.iter().filter(|r| r.outcome == outcome).count()
}

// ---------------------------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------------------------

/// A new store answers, has nothing due and knows no order or event.
pub async fn an_empty_store_answers_and_holds_nothing<S: Store>(store: S) {
    store.ping().await.expect("ping");
    assert_eq!(store.next_due_ms().await.expect("next_due_ms"), None);
    assert!(claim_due(&store, claim("w", T0, 1_000)).await.is_empty());
    assert_eq!(store.order(&order_id("ord_none")).await.expect("order"), None);
    assert_eq!(store.event(&source(), &event_id("evt_none")).await.expect("event"), None);
    let s = stats(&store).await;
    assert!(s.events.iter().chain(&s.orders).chain(&s.outbox).all(|(_, n)| *n == 0), "{s:?}");
}

/// The same delivery twice: processed once, then a duplicate; one receipt, one transition, the first receipt kept.
pub async fn a_delivery_seen_twice_is_recorded_once<S: Store>(store: S) {
    register_new(&store, new_order("ord_1", 1999, T0)).await;
    let first = pay("evt_1", "ord_1", 1999, T0 + 1);
    let mut again = first.clone();
    again.parts_mut().received_at_ms = T0 + 2;
    again.parts_mut().headers = [("retry", "1")].into_iter().collect();

    assert_eq!(ingest(&store, first.clone()).await, processed());
    let second = ingest(&store, again).await;
    assert_eq!(second.outcome, Outcome::Duplicate, "{second:?}");

    let order = order_view(&store, "ord_1").await;
    assert_eq!(order.status, OrderStatus::Paid);
    assert_eq!(order.money, usd(1999));
    assert_eq!((order.created_at_ms, order.updated_at_ms), (T0, T0 + 1));
    assert_eq!(transitions(&order), [(OrderStatus::Pending, OrderStatus::Paid, "evt_1")]);
    let audit = &order.history[0];
    assert_eq!((audit.source.as_str(), audit.event_type.as_str(), audit.at_ms), (SOURCE, "payment.succeeded", T0 + 1));
    assert_eq!(outbox_kinds(&order), ["order.paid"]);
    let receipt = &order.outbox[0];
    assert_eq!((receipt.status.as_str(), receipt.created_at_ms), ("unrouted", T0 + 1));
    for (field, value) in [
        ("kind", "order.paid"),
        ("order_id", "ord_1"),
        ("status", "paid"),
        ("previous_status", "pending"),
        ("source", SOURCE),
        ("event_id", "evt_1"),
        ("event_type", "payment.succeeded"),
    ] {
        assert_eq!(receipt.payload[field], value, "outbox payload field {field}: {}", receipt.payload);
    }
    assert_eq!(paid_rows(&store).await, 1);

    // The stored delivery is the first one, untouched by its redelivery.
    let event = event_view(&store, "evt_1").await;
    assert_eq!(event.status, Outcome::Processed);
    assert_eq!((event.attempts, event.next_attempt_at_ms, event.received_at_ms), (1, None, T0 + 1));
    assert_eq!(event.event_type.as_deref(), Some("payment.succeeded"));
    assert_eq!(event.business_key, Some(business_key(&first)));
    assert_eq!((&event.headers, event.verification.as_str()), (&headers(), VERIFICATION));
    assert_eq!(event.raw_body, first.raw_body());
    let Parsed::Event(parsed) = first.parsed() else { unreachable!() };
    assert_eq!(event.effect.as_ref(), Some(&parsed.effect));
}

/// Sixteen concurrent copies of one delivery: exactly one is processed, the others are duplicates.
pub async fn concurrent_copies_of_one_delivery_are_processed_exactly_once<S: Store>(store: S) {
    let store = Arc::new(store);
    register_new(&*store, new_order("ord_2", 500, T0)).await;
    let delivery = pay("evt_2", "ord_2", 500, T0 + 1);

    let results = ingest_concurrently(&store, vec![delivery; 16]).await;
    assert_eq!(count(&results, Outcome::Processed), 1, "{results:?}");
    assert_eq!(count(&results, Outcome::Duplicate), 15, "{results:?}");

    let order = order_view(&*store, "ord_2").await;
    assert_eq!(order.status, OrderStatus::Paid);
    assert_eq!(outbox_kinds(&order), ["order.paid"]);
    assert_eq!(order.history.len(), 1);
    assert_eq!(paid_rows(&*store).await, 1);
    let event = event_view(&*store, "evt_2").await;
    assert_eq!((event.status, event.reason, event.attempts), (Outcome::Processed, None, 1), "the copies leave it be");
}

/// Another event id for a business fact already applied is a duplicate, and says which key it collided on.
pub async fn a_second_event_for_the_same_business_fact_is_a_duplicate<S: Store>(store: S) {
    register_new(&store, new_order("ord_3", 700, T0)).await;
    let first = pay("evt_3a", "ord_3", 700, T0 + 1);
    let second = pay("evt_3b", "ord_3", 700, T0 + 2);
    let key = business_key(&first);
    assert_eq!(key, business_key(&second), "the fixture events share a business key");

    assert_eq!(ingest(&store, first).await, processed());
    let dup = ingest(&store, second).await;
    assert_eq!(dup.outcome, Outcome::Duplicate, "{dup:?}");
    assert!(detail_of(&dup).contains(&key), "the detail {dup:?} should name the business key {key}");

    // The duplicate is stored (it is a distinct delivery) with its reason.
    let event = event_view(&store, "evt_3b").await;
    assert_eq!(event.status, Outcome::Duplicate);
    assert_eq!(event.reason, dup.detail);
    assert_eq!(event.business_key.as_deref(), Some(key.as_str()));

    let order = order_view(&store, "ord_3").await;
    assert_eq!(transitions(&order), [(OrderStatus::Pending, OrderStatus::Paid, "evt_3a")]);
    assert_eq!(outbox_kinds(&order), ["order.paid"]);
    assert_eq!(paid_rows(&store).await, 1);
}

/// Sixteen concurrent events with distinct ids but one business fact: applied once, fifteen duplicates.
pub async fn concurrent_events_for_the_same_business_fact_are_applied_once<S: Store>(store: S) {
    let store = Arc::new(store);
    register_new(&*store, new_order("ord_4", 900, T0)).await;
    let deliveries = (0..16).map(|i| pay(&format!("evt_4_{i}"), "ord_4", 900, T0 + 1 + i)).collect();

    let results = ingest_concurrently(&store, deliveries).await;
    assert_eq!(count(&results, Outcome::Processed), 1, "{results:?}");
    assert_eq!(count(&results, Outcome::Duplicate), 15, "{results:?}");
    assert!(results.iter().filter(|r| r.outcome == Outcome::Processed).all(|r| r.detail.is_none()));

    let order = order_view(&*store, "ord_4").await;
    assert_eq!(order.status, OrderStatus::Paid);
    assert_eq!(order.history.len(), 1);
    assert_eq!(outbox_kinds(&order), ["order.paid"]);
    let s = stats(&*store).await;
    assert_eq!((Stats::count(&s.events, "processed"), Stats::count(&s.events, "duplicate")), (1, 15), "{s:?}");
}

/// A refund that arrives before its payment refunds the order; the late payment is processed as a no-op.
pub async fn a_payment_after_a_refund_is_processed_as_a_no_op<S: Store>(store: S) {
    register_new(&store, new_order("ord_5", 1200, T0)).await;
    assert_eq!(ingest(&store, refund("evt_5r", "ord_5", 1200, T0 + 1)).await, processed());
    let before = order_view(&store, "ord_5").await;
    assert_eq!(before.status, OrderStatus::Refunded);
    assert_eq!(transitions(&before), [(OrderStatus::Pending, OrderStatus::Refunded, "evt_5r")]);
    assert_eq!(outbox_kinds(&before), ["order.refunded"]);

    let late = ingest(&store, pay("evt_5p", "ord_5", 1200, T0 + 2)).await;
    assert_eq!(late.outcome, Outcome::Processed, "{late:?}");
    detail_of(&late);

    assert_eq!(order_view(&store, "ord_5").await, before, "a no-op changes nothing");
    assert_eq!(paid_rows(&store).await, 0);
    let event = event_view(&store, "evt_5p").await;
    assert_eq!((event.status, event.reason.clone()), (Outcome::Processed, late.detail));
}

/// A payment for an order that does not exist yet is deferred; registering the order makes it due at once, and
/// the retry applies it exactly once.
pub async fn a_payment_before_its_order_is_deferred_and_applied_once_the_order_is_registered<S: Store>(store: S) {
    let early = ingest(&store, pay("evt_6", "ord_6", 300, T0)).await;
    assert_eq!(early.outcome, Outcome::Deferred, "{early:?}");
    detail_of(&early);
    assert_eq!(store.order(&order_id("ord_6")).await.expect("order"), None, "deferral creates no order");

    let event = event_view(&store, "evt_6").await;
    assert_eq!(event.status, Outcome::Deferred);
    assert_eq!(event.attempts, 1);
    assert_eq!(event.next_attempt_at_ms, Some(T0 + BASE_MS), "the policy's first delay");
    assert_eq!(event.reason, early.detail);
    assert_eq!(store.next_due_ms().await.expect("next_due_ms"), Some(T0 + BASE_MS));
    assert!(claim_due(&store, claim("w1", T0 + 10, 30_000)).await.is_empty(), "not due yet");

    let registered_at = T0 + 20;
    register_new(&store, new_order("ord_6", 300, registered_at)).await;
    let due = store.next_due_ms().await.expect("next_due_ms").expect("the deferred event is still waiting");
    assert!(due <= registered_at, "registering the order makes its events due at once, next due {due}");

    let mut claimed = claim_due(&store, claim("w1", registered_at, 30_000)).await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let c = claimed.pop().expect("one event is due");
    assert_eq!((c.source.as_str(), c.event_id.as_str(), c.attempts, c.owner.as_str()), (SOURCE, "evt_6", 1, "w1"));

    assert_eq!(retry(&store, c, registered_at + 1).await, Retried::Done(processed()));
    let order = order_view(&store, "ord_6").await;
    assert_eq!(order.status, OrderStatus::Paid);
    assert_eq!(transitions(&order), [(OrderStatus::Pending, OrderStatus::Paid, "evt_6")]);
    assert_eq!(order.history[0].at_ms, registered_at + 1);
    assert_eq!(outbox_kinds(&order), ["order.paid"]);
    assert_eq!(paid_rows(&store).await, 1);

    let event = event_view(&store, "evt_6").await;
    assert_eq!((event.status, event.attempts, event.next_attempt_at_ms), (Outcome::Processed, 2, None));
    assert!(claim_due(&store, claim("w2", T0 + 10_000_000, 30_000)).await.is_empty(), "nothing left to claim");
    assert_eq!(store.next_due_ms().await.expect("next_due_ms"), None);
}

/// A deferred event retried while its order is still missing is deferred again, with the next backoff step.
pub async fn a_deferred_event_retried_too_early_waits_longer_each_time<S: Store>(store: S) {
    assert_eq!(ingest(&store, pay("evt_7", "ord_7", 100, T0)).await.outcome, Outcome::Deferred);
    let first_due = T0 + BASE_MS;

    let c = claim_due(&store, claim("w", first_due, 30_000)).await.pop().expect("due");
    let Retried::Done(again) = retry(&store, c, first_due).await else { panic!("lease lost") };
    assert_eq!(again.outcome, Outcome::Deferred, "{again:?}");
    let event = event_view(&store, "evt_7").await;
    assert_eq!((event.status, event.attempts), (Outcome::Deferred, 2));
    let second_due = first_due + 2 * BASE_MS;
    assert_eq!(event.next_attempt_at_ms, Some(second_due), "the second delay doubles the first");
    assert_eq!(store.next_due_ms().await.expect("next_due_ms"), Some(second_due));
    assert!(claim_due(&store, claim("w", second_due - 1, 30_000)).await.is_empty(), "the old lease is released");

    let c = claim_due(&store, claim("w", second_due, 30_000)).await.pop().expect("due again");
    assert_eq!(c.attempts, 2);
    assert!(matches!(retry(&store, c, second_due).await, Retried::Done(Recorded { outcome: Outcome::Deferred, .. })));
    let event = event_view(&store, "evt_7").await;
    assert_eq!((event.attempts, event.next_attempt_at_ms), (3, Some(second_due + 4 * BASE_MS)));
}

/// Two payments with distinct ids arrive before their order: once it exists, one pays it, the other is a
/// duplicate of the same business fact.
pub async fn two_early_payments_for_one_order_settle_as_one_payment_and_one_duplicate<S: Store>(store: S) {
    assert_eq!(ingest(&store, pay("evt_8a", "ord_8", 100, T0)).await.outcome, Outcome::Deferred);
    assert_eq!(ingest(&store, pay("evt_8b", "ord_8", 100, T0 + 1)).await.outcome, Outcome::Deferred);
    register_new(&store, new_order("ord_8", 100, T0 + 2)).await;

    let claimed = claim_due(&store, claim("w", T0 + 2, 30_000)).await;
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    let mut outcomes = Vec::new();
    for c in claimed {
        let Retried::Done(r) = retry(&store, c, T0 + 3).await else { panic!("lease lost") };
        outcomes.push(r.outcome);
    }
    outcomes.sort_by_key(|o| o.as_str());
    assert_eq!(outcomes, [Outcome::Duplicate, Outcome::Processed]);
    let order = order_view(&store, "ord_8").await;
    assert_eq!((order.status, order.history.len()), (OrderStatus::Paid, 1));
    assert_eq!(outbox_kinds(&order), ["order.paid"]);
    assert_eq!(store.next_due_ms().await.expect("next_due_ms"), None);
}

/// A payment whose amount differs from the order's is dead-lettered; the order stays pending and the business
/// fact stays free for a correct payment.
pub async fn a_payment_of_another_amount_is_dead_lettered_and_leaves_the_business_fact_free<S: Store>(store: S) {
    register_new(&store, new_order("ord_9", 1999, T0)).await;
    let wrong = ingest(&store, pay("evt_9a", "ord_9", 1000, T0 + 1)).await;
    assert_eq!(wrong.outcome, Outcome::DeadLettered, "{wrong:?}");
    detail_of(&wrong);

    let order = order_view(&store, "ord_9").await;
    assert_eq!(order.status, OrderStatus::Pending);
    assert!(order.history.is_empty() && order.outbox.is_empty(), "{order:?}");
    let event = event_view(&store, "evt_9a").await;
    assert_eq!(
        (event.status, event.reason.clone(), event.next_attempt_at_ms),
        (Outcome::DeadLettered, wrong.detail, None)
    );
    assert!(claim_due(&store, claim("w", T0 + 10_000_000, 1_000)).await.is_empty(), "a dead letter is never retried");

    assert_eq!(ingest(&store, pay("evt_9b", "ord_9", 1999, T0 + 2)).await, processed());
    let order = order_view(&store, "ord_9").await;
    assert_eq!(transitions(&order), [(OrderStatus::Pending, OrderStatus::Paid, "evt_9b")]);
    assert_eq!(paid_rows(&store).await, 1);
}

/// The currency counts as much as the amount.
pub async fn a_payment_in_another_currency_is_dead_lettered<S: Store>(store: S) {
    register_new(&store, new_order("ord_10", 500, T0)).await;
    let wrong = ingest(&store, order_event("evt_10", OrderAction::Pay, "ord_10", 500, "eur", T0 + 1)).await;
    assert_eq!(wrong.outcome, Outcome::DeadLettered, "{wrong:?}");
    assert_eq!(order_view(&store, "ord_10").await.status, OrderStatus::Pending);
    assert_eq!(paid_rows(&store).await, 0);
}

/// A verified body that cannot be parsed is dead-lettered with its exact bytes; its redelivery is a duplicate.
pub async fn an_unparseable_delivery_is_kept_byte_for_byte_as_a_dead_letter<S: Store>(store: S) {
    let body: &[u8] = b"\xff\xfe{\"id\":\x00 not json\r\n\xc3\x28 \xe2\x82";
    let reason = "body is not valid JSON: expected value at line 1 column 1";
    let delivery = unparseable("sha256_0f1e2d", body, reason, T0);

    let recorded = ingest(&store, delivery.clone()).await;
    assert_eq!(recorded, Recorded { outcome: Outcome::DeadLettered, detail: Some(reason.to_owned()) });

    let event = event_view(&store, "sha256_0f1e2d").await;
    assert_eq!(event.raw_body, body, "the body is stored byte for byte");
    assert_eq!((event.status, event.reason.as_deref()), (Outcome::DeadLettered, Some(reason)));
    assert_eq!((event.event_type, event.business_key, event.effect), (None, None, None));
    assert_eq!((event.received_at_ms, event.next_attempt_at_ms), (T0, None));
    assert_eq!((&event.headers, event.verification.as_str()), (&headers(), VERIFICATION));

    assert_eq!(ingest(&store, delivery).await.outcome, Outcome::Duplicate);
    assert_eq!(Stats::count(&stats(&store).await.events, "dead_lettered"), 1);
    assert!(claim_due(&store, claim("w", T0 + 10_000_000, 1_000)).await.is_empty());
}

/// An event of a type payhook does not act on is recorded as ignored and touches no order.
pub async fn an_event_of_an_ignored_type_is_recorded_as_ignored<S: Store>(store: S) {
    let delivery = ignored("evt_11", "customer.created", T0);
    assert_eq!(ingest(&store, delivery.clone()).await, Recorded { outcome: Outcome::Ignored, detail: None });

    let event = event_view(&store, "evt_11").await;
    assert_eq!(event.status, Outcome::Ignored);
    assert_eq!(event.event_type.as_deref(), Some("customer.created"));
    assert_eq!(event.raw_body, delivery.raw_body());
    assert_eq!(ingest(&store, delivery).await.outcome, Outcome::Duplicate);

    let s = stats(&store).await;
    assert_eq!(Stats::count(&s.events, "ignored"), 1, "{s:?}");
    assert!(s.orders.iter().chain(&s.outbox).all(|(_, n)| *n == 0), "{s:?}");
}

/// A claimed row is leased: another worker cannot claim it before the lease expires, may take it afterwards, and
/// the first worker's stale claim then changes nothing, even once the event could be applied.
pub async fn a_lease_keeps_other_workers_away_until_it_expires_and_a_lost_lease_changes_nothing<S: Store>(store: S) {
    const LEASE: i64 = 5_000;
    assert_eq!(ingest(&store, pay("evt_12", "ord_12", 100, T0)).await.outcome, Outcome::Deferred);
    let t = T0 + BASE_MS;

    let a = claim_due(&store, claim("worker-a", t, LEASE)).await.pop().expect("due at t");
    assert_eq!(a.owner, "worker-a");
    assert!(claim_due(&store, claim("worker-b", t, LEASE)).await.is_empty(), "leased to a");
    assert!(claim_due(&store, claim("worker-b", t + LEASE - 1, LEASE)).await.is_empty(), "still leased to a");
    let due = store.next_due_ms().await.expect("next_due_ms").expect("still deferred");
    assert!(due <= t + LEASE, "a worker must not sleep past the lease expiry, next due {due}");

    let b = claim_due(&store, claim("worker-b", t + LEASE, LEASE)).await.pop().expect("the lease expired");
    assert_eq!((b.event_id.as_str(), b.owner.as_str(), b.attempts), ("evt_12", "worker-b", 1));

    let before = event_view(&store, "evt_12").await;
    assert_eq!(retry(&store, a.clone(), t + LEASE + 1).await, Retried::LeaseLost);
    assert_eq!(event_view(&store, "evt_12").await, before, "a lost lease changes nothing");

    // Even when the event could now be applied, the stale lease must not apply it.
    register_new(&store, new_order("ord_12", 100, t + LEASE + 2)).await;
    assert_eq!(retry(&store, a.clone(), t + LEASE + 3).await, Retried::LeaseLost);
    let order = order_view(&store, "ord_12").await;
    assert_eq!((order.status, order.outbox.len()), (OrderStatus::Pending, 0));

    assert_eq!(retry(&store, b, t + LEASE + 4).await, Retried::Done(processed()));
    assert_eq!(order_view(&store, "ord_12").await.status, OrderStatus::Paid);
    assert_eq!(retry(&store, a, t + LEASE + 5).await, Retried::LeaseLost, "a finished row is nobody's");
    assert_eq!(paid_rows(&store).await, 1);
}

/// A claim takes the rows that are due, earliest first, and no more than its limit.
pub async fn claims_take_the_earliest_due_events_up_to_the_limit<S: Store>(store: S) {
    for (i, at) in [(0, T0 + 20), (1, T0), (2, T0 + 10)] {
        let outcome = ingest(&store, pay(&format!("evt_13_{i}"), &format!("ord_13_{i}"), 100, at)).await.outcome;
        assert_eq!(outcome, Outcome::Deferred);
    }
    assert!(claim_due(&store, claim("w", T0 + BASE_MS - 1, 1_000)).await.is_empty());

    let first = claim_due(&store, Claim { limit: 2, ..claim("w1", T0 + BASE_MS + 15, 1_000) }).await;
    let ids: Vec<&str> = first.iter().map(|c| c.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_13_1", "evt_13_2"], "only the due rows, earliest first");

    let rest = claim_due(&store, claim("w2", T0 + BASE_MS + 20, 1_000)).await;
    let ids: Vec<&str> = rest.iter().map(|c| c.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_13_0"], "leased rows are not claimed twice");
}

/// Registering is idempotent for the same order and refuses another amount or currency under the same id.
pub async fn registering_an_order_is_idempotent_and_reports_conflicts<S: Store>(store: S) {
    assert_eq!(register(&store, new_order("ord_14", 2500, T0)).await, Registered::Created);
    assert_eq!(register(&store, new_order("ord_14", 2500, T0 + 1)).await, Registered::AlreadyExists);
    assert_eq!(register(&store, new_order("ord_14", 2600, T0 + 2)).await, Registered::Conflict { existing: usd(2500) });
    let other_currency = NewOrder { id: order_id("ord_14"), money: money(2500, "eur"), now_ms: T0 + 3 };
    assert_eq!(register(&store, other_currency).await, Registered::Conflict { existing: usd(2500) });

    let order = order_view(&store, "ord_14").await;
    assert_eq!((order.status, order.money.clone()), (OrderStatus::Pending, usd(2500)));
    assert_eq!((order.created_at_ms, order.updated_at_ms), (T0, T0));
    assert!(order.history.is_empty() && order.outbox.is_empty(), "{order:?}");
    assert_eq!(Stats::count(&stats(&store).await.orders, "pending"), 1);
}

/// A dispute for an order that is not paid yet waits; once the payment is processed, its retry disputes the order.
pub async fn a_dispute_before_its_payment_waits_for_the_payment<S: Store>(store: S) {
    register_new(&store, new_order("ord_15", 800, T0)).await;
    let early = ingest(&store, dispute("evt_15d", "ord_15", 800, T0 + 1)).await;
    assert_eq!(early.outcome, Outcome::Deferred, "{early:?}");
    detail_of(&early);
    assert_eq!(order_view(&store, "ord_15").await.status, OrderStatus::Pending);

    assert_eq!(ingest(&store, pay("evt_15p", "ord_15", 800, T0 + 2)).await, processed());
    let c = claim_due(&store, claim("w", T0 + 1 + BASE_MS, 30_000)).await.pop().expect("the dispute is due");
    assert_eq!(c.event_id.as_str(), "evt_15d");
    assert_eq!(retry(&store, c, T0 + 1 + BASE_MS).await, Retried::Done(processed()));

    let order = order_view(&store, "ord_15").await;
    assert_eq!(order.status, OrderStatus::Disputed);
    assert_eq!(
        transitions(&order),
        [(OrderStatus::Pending, OrderStatus::Paid, "evt_15p"), (OrderStatus::Paid, OrderStatus::Disputed, "evt_15d")]
    );
    assert_eq!(outbox_kinds(&order), ["order.paid", "order.disputed"]);
}

/// pending → failed → paid, with one outbox row for each transition.
pub async fn a_failed_payment_followed_by_a_successful_one_pays_the_order<S: Store>(store: S) {
    register_new(&store, new_order("ord_16", 450, T0)).await;
    assert_eq!(ingest(&store, fail("evt_16f", "ord_16", 450, T0 + 1)).await, processed());
    assert_eq!(order_view(&store, "ord_16").await.status, OrderStatus::Failed);
    assert_eq!(ingest(&store, pay("evt_16p", "ord_16", 450, T0 + 2)).await, processed());

    let order = order_view(&store, "ord_16").await;
    assert_eq!(order.status, OrderStatus::Paid);
    assert_eq!(
        transitions(&order),
        [(OrderStatus::Pending, OrderStatus::Failed, "evt_16f"), (OrderStatus::Failed, OrderStatus::Paid, "evt_16p")]
    );
    assert_eq!(outbox_kinds(&order), ["order.failed", "order.paid"]);
    assert_eq!(order.outbox[1].payload["previous_status"], "failed");
}

/// With a budget of two attempts, the first retry of an event whose order never appears dead-letters it.
pub async fn a_deferred_event_is_dead_lettered_when_its_retry_budget_is_spent<S: Store>(store: S) {
    assert_eq!(ingest(&store, pay("evt_17", "ord_17", 100, T0)).await.outcome, Outcome::Deferred);
    let c = claim_due(&store, claim("w", T0 + BASE_MS, 30_000)).await.pop().expect("due");

    let Retried::Done(last) = retry(&store, c, T0 + BASE_MS).await else { panic!("lease lost") };
    assert_eq!(last.outcome, Outcome::DeadLettered, "{last:?}");
    assert!(detail_of(&last).contains("retry budget spent"), "{last:?}");

    let event = event_view(&store, "evt_17").await;
    assert_eq!((event.status, event.attempts, event.next_attempt_at_ms), (Outcome::DeadLettered, 2, None));
    assert_eq!(event.reason, last.detail);
    assert_eq!(store.next_due_ms().await.expect("next_due_ms"), None);

    // The order appearing later does not revive a dead letter.
    register_new(&store, new_order("ord_17", 100, T0 + 2 * BASE_MS)).await;
    assert!(claim_due(&store, claim("w", T0 + 10_000_000, 30_000)).await.is_empty());
    assert_eq!(order_view(&store, "ord_17").await.status, OrderStatus::Pending);
}

/// The counts by status follow what the store recorded; a redelivery adds no row.
pub async fn stats_count_events_orders_and_outbox_rows<S: Store>(store: S) {
    register_new(&store, new_order("ord_18a", 100, T0)).await;
    register_new(&store, new_order("ord_18b", 200, T0)).await;
    let paid = pay("evt_18_paid", "ord_18a", 100, T0 + 1);
    assert_eq!(ingest(&store, paid.clone()).await.outcome, Outcome::Processed);
    assert_eq!(ingest(&store, paid).await.outcome, Outcome::Duplicate);
    assert_eq!(ingest(&store, pay("evt_18_dup", "ord_18a", 100, T0 + 2)).await.outcome, Outcome::Duplicate);
    assert_eq!(ingest(&store, pay("evt_18_early", "ord_18c", 100, T0 + 3)).await.outcome, Outcome::Deferred);
    assert_eq!(ingest(&store, ignored("evt_18_ign", "invoice.created", T0 + 4)).await.outcome, Outcome::Ignored);
    let bad = unparseable("evt_18_bad", b"<xml/>", "not json", T0 + 5);
    assert_eq!(ingest(&store, bad).await.outcome, Outcome::DeadLettered);

    let s = stats(&store).await;
    for outcome in [Outcome::Processed, Outcome::Duplicate, Outcome::Deferred, Outcome::Ignored, Outcome::DeadLettered]
    {
        assert_eq!(Stats::count(&s.events, outcome.as_str()), 1, "{outcome:?} in {s:?}");
    }
    assert_eq!(s.events.iter().map(|(_, n)| n).sum::<u64>(), 5, "{s:?}");
    assert_eq!((Stats::count(&s.orders, "paid"), Stats::count(&s.orders, "pending")), (1, 1), "{s:?}");
    assert_eq!(s.orders.iter().map(|(_, n)| n).sum::<u64>(), 2, "{s:?}");
    assert_eq!(s.outbox, [("order.paid".to_owned(), 1)], "{s:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// Outbox dispatch, alerts, forwarding, replay and listings (run with [`test_routing`])
// ---------------------------------------------------------------------------------------------------------------

pub(crate) async fn claim_outbox<S: Store>(store: &S, sink: &str, owner: &str, now_ms: i64) -> Vec<OutboxJob> {
    store.claim_outbox(sink, claim(owner, now_ms, 60_000)).await.expect("claim_outbox")
}

pub(crate) async fn finish<S: Store>(store: &S, job: &OutboxJob, outcome: Dispatched, now_ms: i64) -> bool {
    store.finish_outbox(job, outcome, now_ms).await.expect("finish_outbox")
}

pub(crate) async fn outbox_of<S: Store>(store: &S, filter: OutboxFilter) -> Vec<OutboxView> {
    store.list_outbox(OutboxFilter { limit: 1000, ..filter }).await.expect("list_outbox").rows
}

async fn alerts<S: Store>(store: &S) -> Vec<OutboxView> {
    outbox_of(store, OutboxFilter { kind: Some(crate::OutboxKind::Alert), ..OutboxFilter::default() }).await
}

/// A receipt goes to every sink that takes its kind, once each, and each is delivered exactly once.
pub async fn outbox_rows_are_written_per_matching_sink_and_delivered_once<S: Store>(store: S) {
    register_new(&store, new_order("ord_o1", 100, T0)).await;
    assert_eq!(ingest(&store, pay("evt_o1", "ord_o1", 100, T0 + 1)).await, processed());
    let order = order_view(&store, "ord_o1").await;
    let mut sinks: Vec<(&str, &str)> =
        order.outbox.iter().map(|r| (r.sink.as_deref().unwrap_or(""), r.status.as_str())).collect();
    sinks.sort();
    assert_eq!(sinks, [("audit", "pending"), ("crm", "pending"), ("mail", "pending")]);

    let jobs = claim_outbox(&store, "crm", "d1", T0 + 2).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = &jobs[0];
    assert_eq!((job.kind.as_str(), job.attempts), ("order.paid", 0));
    let payload: serde_json::Value = serde_json::from_str(&job.payload).expect("payload is JSON");
    assert_eq!(payload["order_id"], "ord_o1");
    assert!(claim_outbox(&store, "crm", "d2", T0 + 3).await.is_empty(), "a leased row is not claimed twice");
    assert!(finish(&store, job, Dispatched::Delivered { status: 204 }, T0 + 4).await);
    assert!(claim_outbox(&store, "crm", "d1", T0 + 10_000_000).await.is_empty(), "a delivered row is done");
    let crm = outbox_of(&store, OutboxFilter { sink: Some("crm".into()), ..OutboxFilter::default() }).await;
    assert_eq!(
        (crm[0].status.as_str(), crm[0].last_status, crm[0].delivered_at_ms, crm[0].attempts),
        ("delivered", Some(204), Some(T0 + 4), 1)
    );
    // The other sinks' rows are untouched by crm's dispatcher.
    assert_eq!(claim_outbox(&store, "mail", "d1", T0 + 5).await.len(), 1);
}

/// A reload's routing (`set_routing`) applies to the effects recorded after it; rows already written keep their sink.
pub async fn a_routing_set_while_running_routes_the_next_effects_and_leaves_written_rows_alone<S: Store>(store: S) {
    register_new(&store, new_order("ord_r1", 100, T0)).await;
    ingest(&store, pay("evt_r1", "ord_r1", 100, T0 + 1)).await;
    let mut routing = Routing::default();
    routing.by_kind.insert("order.paid".into(), vec!["ledger".into()]);
    store.set_routing(routing);
    register_new(&store, new_order("ord_r2", 100, T0 + 2)).await;
    ingest(&store, pay("evt_r2", "ord_r2", 100, T0 + 3)).await;
    let sinks = |order: OrderView| {
        let mut sinks: Vec<String> = order.outbox.iter().map(|r| r.sink.clone().unwrap_or_default()).collect();
        sinks.sort();
        sinks
    };
    assert_eq!(sinks(order_view(&store, "ord_r1").await), ["audit", "crm", "mail"]);
    assert_eq!(sinks(order_view(&store, "ord_r2").await), ["ledger"]);
    assert_eq!(claim_outbox(&store, "crm", "d", T0 + 4).await.len(), 1, "the earlier row still waits for crm");
}

/// Transient failures reschedule the row; a permanent one kills it; a dead row re-queued gets a fresh budget.
pub async fn a_failing_sink_is_retried_then_dead_and_a_dead_row_can_be_requeued<S: Store>(store: S) {
    register_new(&store, new_order("ord_o2", 100, T0)).await;
    ingest(&store, pay("evt_o2", "ord_o2", 100, T0 + 1)).await;
    let job = claim_outbox(&store, "mail", "d", T0 + 2).await.pop().expect("due");
    let retry = Dispatched::Retry { at_ms: T0 + 5_000, status: Some(503), error: "503 Service Unavailable".into() };
    assert!(finish(&store, &job, retry, T0 + 3).await);
    assert!(claim_outbox(&store, "mail", "d", T0 + 4_999).await.is_empty(), "not due before its time");
    assert_eq!(store.next_outbox_due_ms("mail").await.expect("next due"), Some(T0 + 5_000));
    let job = claim_outbox(&store, "mail", "d", T0 + 5_000).await.pop().expect("due again");
    assert_eq!((job.id, job.attempts), (job.id, 1));
    assert!(
        finish(&store, &job, Dispatched::Dead { status: Some(400), error: "400 Bad Request".into() }, T0 + 6).await
    );
    let row = outbox_of(&store, OutboxFilter { sink: Some("mail".into()), ..OutboxFilter::default() }).await.remove(0);
    assert_eq!((row.status.as_str(), row.attempts, row.last_status), ("dead", 2, Some(400)));
    assert_eq!(row.last_error.as_deref(), Some("400 Bad Request"));
    assert!(claim_outbox(&store, "mail", "d", T0 + 10_000_000).await.is_empty(), "a dead row is not sent");

    assert!(!store.retry_outbox(row.id + 1_000, T0 + 7).await.expect("retry_outbox"), "no such row");
    assert!(store.retry_outbox(row.id, T0 + 7).await.expect("retry_outbox"));
    assert!(!store.retry_outbox(row.id, T0 + 7).await.expect("retry_outbox"), "only a dead row is re-queued");
    let job = claim_outbox(&store, "mail", "d", T0 + 7).await.pop().expect("re-queued");
    assert_eq!((job.id, job.attempts), (row.id, 0), "a fresh budget");
}

/// A dispatcher whose lease expired cannot record an outcome for a row another dispatcher has claimed.
pub async fn an_outbox_lease_keeps_other_dispatchers_away_and_a_lost_lease_changes_nothing<S: Store>(store: S) {
    register_new(&store, new_order("ord_o3", 100, T0)).await;
    ingest(&store, pay("evt_o3", "ord_o3", 100, T0 + 1)).await;
    let stale = claim_outbox(&store, "crm", "a", T0 + 2).await.pop().expect("due");
    assert!(claim_outbox(&store, "crm", "b", T0 + 2 + 59_999).await.is_empty());
    let fresh = claim_outbox(&store, "crm", "b", T0 + 2 + 60_000).await.pop().expect("lease expired");
    assert_eq!(fresh.id, stale.id);
    assert!(!finish(&store, &stale, Dispatched::Delivered { status: 200 }, T0 + 70_000).await, "lost lease");
    let row = outbox_of(&store, OutboxFilter { sink: Some("crm".into()), ..OutboxFilter::default() }).await.remove(0);
    assert_eq!((row.status.as_str(), row.attempts), ("pending", 0));
    assert!(finish(&store, &fresh, Dispatched::Delivered { status: 200 }, T0 + 70_001).await);
}

/// A storm of dead letters from one source is one alert, gathered while it waits, with the count.
pub async fn a_hundred_dead_letters_in_a_minute_raise_one_alert_with_the_count<S: Store>(store: S) {
    for i in 0..100 {
        let at = T0 + i * 90; // 100 dead letters within 9 s, inside the gathering delay
        let bad = unparseable(&format!("evt_a{i}"), b"<xml/>", "not json", at);
        assert_eq!(ingest(&store, bad).await.outcome, Outcome::DeadLettered);
    }
    let rows = alerts(&store).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let alert = &rows[0];
    assert_eq!((alert.sink.as_deref(), alert.status.as_str()), (Some(ALERTS_SINK), "pending"));
    assert_eq!(alert.payload["count"], 100, "{}", alert.payload);
    assert!(alert.payload["text"].as_str().is_some_and(|t| t.contains("dead-lettered")), "{}", alert.payload);
    assert!(claim_outbox(&store, ALERTS_SINK, "d", T0 + ALERT_GATHER_MS - 1).await.is_empty(), "still gathering");
    let job = claim_outbox(&store, ALERTS_SINK, "d", T0 + ALERT_GATHER_MS).await.pop().expect("due");
    assert!(finish(&store, &job, Dispatched::Delivered { status: 200 }, T0 + ALERT_GATHER_MS).await);

    // More in the same window are counted, not sent; the next window's alert reports them.
    for i in 0..3 {
        let bad = unparseable(&format!("evt_b{i}"), b"<xml/>", "not json", T0 + 60_000 + i);
        ingest(&store, bad).await;
    }
    assert_eq!(alerts(&store).await.len(), 1, "suppressed within the window");
    ingest(&store, unparseable("evt_c", b"<xml/>", "not json", T0 + ALERT_WINDOW_MS)).await;
    let rows = alerts(&store).await;
    assert_eq!(rows.len(), 2, "a new window, a new alert");
    assert_eq!(rows[0].payload["suppressed_before"], 3, "{}", rows[0].payload);
}

/// A row that dies raises an alert for its sink; alerts themselves never alert (no loops).
pub async fn a_dead_outbox_row_raises_an_alert_and_an_alert_row_never_alerts<S: Store>(store: S) {
    register_new(&store, new_order("ord_o5", 100, T0)).await;
    ingest(&store, pay("evt_o5", "ord_o5", 100, T0 + 1)).await;
    let job = claim_outbox(&store, "crm", "d", T0 + 2).await.pop().expect("due");
    finish(&store, &job, Dispatched::Dead { status: Some(410), error: "410 Gone".into() }, T0 + 3).await;
    let rows = alerts(&store).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].payload["text"].as_str().is_some_and(|t| t.contains("crm")), "{}", rows[0].payload);
    let alert = claim_outbox(&store, ALERTS_SINK, "d", T0 + 3 + ALERT_GATHER_MS).await.pop().expect("due");
    finish(&store, &alert, Dispatched::Dead { status: Some(500), error: "500".into() }, T0 + 4 + ALERT_GATHER_MS).await;
    assert_eq!(alerts(&store).await.len(), 1, "a dead alert raises no alert");

    // Alerts raised directly (a source failing verification) collapse the same way.
    for i in 0..2 {
        let text = "payhook: source shop keeps failing signature verification".to_owned();
        store.raise_alert(Alert { key: "shop:verification".into(), text, now_ms: T0 + 10 + i }).await.expect("alert");
    }
    let rows = alerts(&store).await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].payload["count"], 2, "{}", rows[0].payload);
}

/// A forwarded source sends each new event once per forwarding sink; a redelivery forwards nothing.
pub async fn forwarded_sources_write_one_event_row_per_sink_for_new_events_only<S: Store>(store: S) {
    let mut d = ignored("evt_f1", "customer.created", T0);
    d.parts_mut().source = SourceName::parse("fwd").expect("source");
    assert_eq!(ingest(&store, d.clone()).await.outcome, Outcome::Ignored);
    assert_eq!(ingest(&store, d).await.outcome, Outcome::Duplicate);
    let rows =
        outbox_of(&store, OutboxFilter { kind: Some(crate::OutboxKind::EventReceived), ..OutboxFilter::default() })
            .await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].sink.as_deref(), rows[0].status.as_str()), (Some("lake"), "pending"));
    assert_eq!(rows[0].payload["event_id"], "evt_f1");
    assert_eq!(rows[0].payload["outcome"], "ignored");
    // The event's own view lists what it caused.
    let mut view = store
        .event(&SourceName::parse("fwd").expect("source"), &event_id("evt_f1"))
        .await
        .expect("event")
        .expect("stored");
    assert_eq!(view.outbox.pop().map(|r| r.kind), Some(crate::OutboxKind::EventReceived));
    // Another source is not forwarded.
    ingest(&store, ignored("evt_f2", "customer.created", T0 + 1)).await;
    assert_eq!(outbox_of(&store, OutboxFilter { sink: Some("lake".into()), ..OutboxFilter::default() }).await.len(), 1);
}

/// An event dead-lettered for an amount mismatch, replayed after the order is fixed, applies once; replaying it
/// again, or replaying a processed event, changes nothing.
pub async fn a_dead_letter_is_replayed_once_its_order_exists_and_a_second_replay_changes_nothing<S: Store>(store: S) {
    let d = pay("evt_r1", "ord_r1", 100, T0);
    let parsed = d.parsed().clone();
    register_new(&store, new_order("ord_r1", 999, T0)).await; // the merchant registered the wrong amount
    assert_eq!(ingest(&store, d).await.outcome, Outcome::DeadLettered);
    let view = event_view(&store, "evt_r1").await;
    assert_eq!(view.attempt_log.len(), 1, "{view:?}");
    assert_eq!(view.attempt_log[0].outcome, Outcome::DeadLettered);

    // Nothing was fixed: the replay goes through the ledger again and dead-letters again, one attempt later.
    let again = store.replay(&source(), &event_id("evt_r1"), parsed.clone(), T0 + 1).await.expect("replay");
    let Replayed::Done(r) = again else { panic!("{again:?}") };
    assert_eq!(r.outcome, Outcome::DeadLettered);
    assert_eq!(event_view(&store, "evt_r1").await.attempts, 2);

    // An early arrival dead-lettered after its budget, replayed after its order exists: processed, one receipt.
    let d = pay("evt_r2", "ord_r2", 100, T0);
    let parsed = d.parsed().clone();
    ingest(&store, d).await;
    let mut now = T0;
    loop {
        now += 10 * BASE_MS * 60;
        let Some(c) = claim_due(&store, claim("w", now, 30_000)).await.pop() else { break };
        retry(&store, c, now).await;
    }
    assert_eq!(event_view(&store, "evt_r2").await.status, Outcome::DeadLettered);
    register_new(&store, new_order("ord_r2", 100, now)).await;
    let first = store.replay(&source(), &event_id("evt_r2"), parsed.clone(), now + 1).await.expect("replay");
    assert_eq!(first, Replayed::Done(processed()));
    let order = order_view(&store, "ord_r2").await;
    assert_eq!(order.status, OrderStatus::Paid);
    assert_eq!(
        order.outbox.iter().filter(|r| r.kind == crate::OutboxKind::OrderPaid).count(),
        3,
        "one per sink: crm, mail, audit"
    );
    let second = store.replay(&source(), &event_id("evt_r2"), parsed, now + 2).await.expect("replay");
    assert_eq!(second, Replayed::NotDeadLetter(Outcome::Processed));
    assert_eq!(order_view(&store, "ord_r2").await, order, "nothing changed");
    let missing =
        store.replay(&source(), &event_id("evt_none"), pay("evt_none", "o", 1, T0).parsed().clone(), now).await;
    assert_eq!(missing.expect("replay"), Replayed::NotFound);
}

/// A body stored under a derived id that parses now (the format was fixed) is recorded under its real id, through
/// the event-id dedup.
pub async fn an_unparseable_dead_letter_that_now_parses_is_recorded_under_its_own_id<S: Store>(store: S) {
    register_new(&store, new_order("ord_u1", 100, T0)).await;
    let good = pay("evt_u1", "ord_u1", 100, T0);
    let bad = unparseable("sha256:abc", good.raw_body(), "format was broken", T0);
    assert_eq!(ingest(&store, bad).await.outcome, Outcome::DeadLettered);
    let replayed =
        store.replay(&source(), &event_id("sha256:abc"), good.parsed().clone(), T0 + 1).await.expect("replay");
    assert_eq!(replayed, Replayed::Done(processed()));
    let retired = event_view(&store, "sha256:abc").await;
    assert_eq!(retired.status, Outcome::Duplicate);
    assert!(retired.reason.as_deref().is_some_and(|r| r.contains("evt_u1")), "{retired:?}");
    assert_eq!(event_view(&store, "evt_u1").await.raw_body, good.raw_body());
    assert_eq!(order_view(&store, "ord_u1").await.status, OrderStatus::Paid);
    // The provider's own redelivery is now a duplicate.
    assert_eq!(ingest(&store, good).await.outcome, Outcome::Duplicate);
}

/// With a budget of two attempts, a replay of an event whose order still does not exist dead-letters it again.
pub async fn a_replayed_event_still_without_its_order_is_dead_lettered_again<S: Store>(store: S) {
    let d = pay("evt_r3", "ord_r3", 100, T0);
    let parsed = d.parsed().clone();
    ingest(&store, d).await;
    let c = claim_due(&store, claim("w", T0 + BASE_MS, 30_000)).await.pop().expect("due");
    retry(&store, c, T0 + BASE_MS).await;
    let replayed = store.replay(&source(), &event_id("evt_r3"), parsed, T0 + 2 * BASE_MS).await.expect("replay");
    let Replayed::Done(r) = replayed else { panic!("{replayed:?}") };
    assert_eq!(r.outcome, Outcome::DeadLettered, "{r:?}");
    let view = event_view(&store, "evt_r3").await;
    assert_eq!((view.status, view.attempts), (Outcome::DeadLettered, 3));
    assert_eq!(view.attempt_log.iter().map(|a| a.attempt).collect::<Vec<_>>(), [1, 2, 3]);
}
