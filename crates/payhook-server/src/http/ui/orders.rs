//! Orders with their audit history, and billing: subscriptions and customers' entitlements.

use super::*;

// ---- orders ----

pub(super) async fn orders<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Response, UiError> {
    let f = filters(q)?;
    let id = set(&f.id);
    let order = match &id {
        None => None,
        Some(id) => {
            let id = OrderId::parse(id.clone())
                .map_err(|e| UiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
            Some(state.store.order(&id).await.map_err(ApiError::from)?)
        }
    };
    let content = html! {
        h1 { "Orders" }
        form.filters method="get" action="/ui/orders" {
            (text_filter("Order id", "id", id.as_deref()))
            button type="submit" { "Look up" }
        }
        @match (&id, &order) {
            (Some(id), Some(None)) => { div.error id="error" { "No order " (id) " is registered." } }
            (_, Some(Some(o))) => {
                dl.kv {
                    dt { "Order" } dd.mono { (o.id.as_str()) }
                    dt { "Status" } dd id="order-status" { (badge(o.status.as_str())) }
                    dt { "Amount" } dd { (o.money.amount_minor) " " (o.money.currency.as_str().to_uppercase())
                        span.muted { " (minor units)" } }
                    dt { "Registered (UTC)" } dd { (time(o.created_at_ms)) }
                    dt { "Last change (UTC)" } dd { (time(o.updated_at_ms)) }
                }
                h2 { "Audit history" }
                div.scroll { table id="audit" {
                    thead { tr { th { "At (UTC)" } th { "From" } th { "To" } th { "Event" } th.hide-narrow { "Type" } } }
                    tbody {
                        @if o.history.is_empty() { tr { td colspan="5" .muted { "No change since it was registered." } } }
                        @for h in &o.history {
                            tr {
                                td.mono { (time(h.at_ms)) } td { (badge(h.from.as_str())) } td { (badge(h.to.as_str())) }
                                td.mono.wrap { a href=(event_href(&h.source, &h.event_id)) { (h.source) "/" (h.event_id) } }
                                td.hide-narrow { (h.event_type) }
                            }
                        }
                    }
                } }
                h2 { "Outbox rows" }
                (outbox_table(&o.outbox, session.may(Scope::Operate).then_some(session.csrf.as_str())))
            }
            _ => { p.muted { "Enter an order id to see its state, its audit history and its outbox rows." } }
        }
    };
    Ok(html_page(&state, &session, "Orders", Section::Orders, content))
}

// ---- billing ----

/// A billing object's history (subscription or entitlement), oldest first.
pub(super) fn billing_history(history: &[payhook_store::BillingAuditEntry], table_id: &str) -> Markup {
    html! {
        div.scroll { table id=(table_id) {
            thead { tr { th { "At (UTC)" } th { "From" } th { "To" } th { "Event" } th.hide-narrow { "Type" } } }
            tbody {
                @for h in history {
                    tr {
                        td.mono { (time(h.at_ms)) }
                        td { @match &h.from { Some(f) => (badge(f)), None => span.muted { "new" } } }
                        td { (badge(&h.to)) }
                        td.mono.wrap { a href=(event_href(&h.source, &h.event_id)) { (h.source) "/" (h.event_id) } }
                        td.hide-narrow { (h.event_type) }
                    }
                }
            }
        } }
    }
}

pub(super) fn entitlements_table(entitlements: &[payhook_store::EntitlementView]) -> Markup {
    html! {
        @if entitlements.is_empty() { p.muted { "No entitlement." } }
        @for e in entitlements {
            h3.mono { "Invoice " (e.invoice_id) " " (badge(e.status.as_str())) }
            dl.kv {
                dt { "Customer" } dd.mono { (e.customer_id.as_deref().unwrap_or("—")) }
                dt { "Subscription" } dd.mono { (e.subscription_id.as_deref().unwrap_or("—")) }
                dt { "Amount" } dd { @match (e.amount_minor, &e.currency) {
                    (Some(a), Some(c)) => { (a) " " (c.to_uppercase()) }
                    _ => { "—" }
                } }
                @if let Some(reason) = &e.reason { dt { "Why" } dd { (reason) } }
            }
            (billing_history(&e.history, "entitlement-history"))
        }
    }
}

/// Subscriptions and customers' entitlements: the same reads as `GET /v1/subscriptions/{id}` and
/// `GET /v1/customers/{id}/entitlements`.
pub(super) async fn billing<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Extension(session): Extension<Session>,
    q: Result<Query<Filters>, QueryRejection>,
) -> Result<Response, UiError> {
    use payhook_core::event::{CustomerId, SubscriptionId};
    let invalid = |e: payhook_core::event::InvalidValue| UiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
    let f = filters(q)?;
    let (sub_id, customer_id) = (set(&f.subscription), set(&f.customer));
    let subscription = match &sub_id {
        None => None,
        Some(id) => {
            let id = SubscriptionId::parse(id.clone()).map_err(invalid)?;
            Some(state.store.subscription(&id).await.map_err(ApiError::from)?)
        }
    };
    let entitlements = match &customer_id {
        None => None,
        Some(id) => {
            let id = CustomerId::parse(id.clone()).map_err(invalid)?;
            Some(state.store.entitlements(&id).await.map_err(ApiError::from)?)
        }
    };
    let content = html! {
        h1 { "Billing" }
        form.filters method="get" action="/ui/billing" {
            (text_filter("Subscription id", "subscription", sub_id.as_deref()))
            (text_filter("Customer id", "customer", customer_id.as_deref()))
            button type="submit" { "Look up" }
        }
        @match (&sub_id, &subscription) {
            (Some(id), Some(None)) => { div.error id="error" { "No subscription " (id) " is known." } }
            (_, Some(Some(s))) => {
                h2 { "Subscription" }
                dl.kv {
                    dt { "Subscription" } dd.mono { (s.id) }
                    dt { "Status" } dd id="subscription-status" { (badge(&s.status)) }
                    dt { "Customer" } dd.mono { (s.customer_id.as_deref().unwrap_or("—")) }
                    dt { "Set by" } dd.mono.wrap { a href=(event_href(&s.source, &s.event_id)) { (s.source) "/" (s.event_id) } }
                    dt { "Provider time (unix s)" } dd.mono { (s.occurred_at) }
                    @if let Some(end) = s.current_period_end { dt { "Period ends (unix s)" } dd.mono { (end) } }
                }
                h3 { "History" }
                (billing_history(&s.history, "subscription-history"))
                h3 { "Entitlements of its invoices" }
                (entitlements_table(&s.entitlements))
            }
            _ => {}
        }
        @if let Some(list) = &entitlements {
            h2 { "Entitlements of customer " (customer_id.as_deref().unwrap_or("")) }
            p id="granted" { (list.iter().filter(|e| e.status == payhook_core::billing::EntitlementStatus::Granted).count()) " granted" }
            (entitlements_table(list))
        }
        @if sub_id.is_none() && customer_id.is_none() {
            p.muted { "Enter a subscription id to see its state and history, or a customer id to see its entitlements (one per paid invoice)." }
        }
    };
    Ok(html_page(&state, &session, "Billing", Section::Billing, content))
}
