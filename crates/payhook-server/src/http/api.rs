//! The `/v1` API: orders (register, show), subscriptions and customers' entitlements; and [`require_scope`], the
//! check every `/v1` and operator route passes first.

use crate::base::scope::Scope;
use crate::http::error::ApiError;
use crate::http::json_body::JsonBody;
use crate::http::routes::scope_needed;
use crate::runtime::access::{Principal, Via, Vouched};
use crate::runtime::auth::{Client, Refusal, Surface};
use crate::service::audit::{self, Actor};
use crate::state::AppState;
use axum::Json;
use axum::extract::{ConnectInfo, MatchedPath, OriginalUri, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use payhook_core::event::{Currency, CustomerId, Money, OrderId, SubscriptionId};
use payhook_store::{AuditAction, AuditEntry, NewOrder, OrderView, Registered, Store};
use serde::Deserialize;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

/// Lets a request through when its caller holds the scope its route needs ([`crate::http::routes`]): 401 without a
/// valid token or trusted identity, 403 below the scope (naming the scope needed). The caller goes on as the
/// request's [`Principal`] extension.
pub(crate) async fn require_scope<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let path = request.extensions().get::<MatchedPath>().map_or_else(|| request.uri().path(), MatchedPath::as_str);
    let needed = scope_needed(request.method().as_str(), path);
    let refused = match authenticate(&state, request.headers(), peer) {
        Ok(principal) => match permit(&state, &principal, needed) {
            Ok(()) => {
                request.extensions_mut().insert(principal);
                return Ok(next.run(request).await);
            }
            Err(refused) => refused,
        },
        Err(refused @ ApiError::Forbidden { .. }) => refused,
        Err(e) => return Err(e),
    };
    let address = Client::of(peer, request.headers(), &state.settings.auth.trusted_proxies).addr;
    let address = address.map(|a| a.to_string());
    record_refusal(&state, &refused, address, request.method().as_str(), full_path(&request)).await;
    Err(refused)
}

/// The request's path as the client sent it, before a nested router took its prefix off.
pub(crate) fn full_path(request: &Request) -> &str {
    request.extensions().get::<OriginalUri>().map_or_else(|| request.uri().path(), |uri| uri.0.path())
}

/// Records a 403 in the audit trail: who was refused what (`METHOD /path`), with the scopes needed and held.
pub(crate) async fn record_refusal<S: Store>(
    state: &AppState<S>,
    refused: &ApiError,
    address: Option<String>,
    method: &str,
    path: &str,
) {
    let ApiError::Forbidden { needed, held, actor } = refused else { return };
    let by = Actor { name: actor.clone(), address };
    let detail = json!({ "scope_needed": needed.as_str(), "scope_held": held.map(Scope::as_str) });
    let entry =
        by.entry(AuditAction::Refused, Some(format!("{method} {path}")), "refused", detail, state.clock.now_ms());
    let _ = audit::record(&*state.store, entry).await;
}

/// `principal` may do what `needed` guards, or the 403 that says it may not (counted).
pub(crate) fn permit<S>(state: &AppState<S>, principal: &Principal, needed: Scope) -> Result<(), ApiError> {
    if principal.scope.allows(needed) {
        return Ok(());
    }
    state.auth.forbidden();
    tracing::warn!(actor = %principal.actor, held = %principal.scope, needed = %needed, "refused: the caller lacks the route's scope");
    Err(ApiError::Forbidden { needed, held: Some(principal.scope), actor: principal.actor.clone() })
}

/// Who a request's caller is: its bearer token, checked through [`crate::runtime::auth::AuthGate`] (the throttle
/// included), or, without one, the identity a trusted proxy put in `server.identity_header`. `/v1`'s check, and
/// `/readyz`'s when a caller asks for its detail.
pub(crate) fn authenticate<S: Store>(
    state: &AppState<S>,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Result<Principal, ApiError> {
    let live = state.live();
    let credentials = &live.credentials;
    let trusted = &state.settings.auth.trusted_proxies;
    let client = Client::of(peer, headers, trusted);
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    if given.is_none() {
        match credentials.vouched(headers, peer.map(|p| p.ip()), trusted) {
            Vouched::Known(actor, scope) => {
                let address = client.addr.map(|a| a.to_string());
                return Ok(Principal { actor, scope, via: Via::Identity, address });
            }
            Vouched::Unknown(actor) => {
                state.auth.forbidden();
                tracing::warn!(%actor, "refused: no server.identities rule gives this identity a scope");
                return Err(ApiError::Forbidden { needed: Scope::Read, held: None, actor });
            }
            Vouched::Untrusted => state.auth.identity_ignored(client),
            Vouched::Nothing => {}
        }
    }
    if credentials.is_closed() {
        return Err(ApiError::TokenRequired {
            reason: "api_disabled",
            message: "no API token is configured (set server.api_token_env, server.api_token or server.tokens)".into(),
        });
    }
    match state.auth.authenticate(Surface::Api, client, credentials, given, state.clock.now_ms()) {
        Ok(principal) => Ok(principal),
        Err(Refusal::Throttled { retry_after_secs }) => Err(ApiError::TooManyAuthFailures { retry_after_secs }),
        Err(Refusal::Expired { name }) => Err(ApiError::TokenRequired {
            reason: "token_expired",
            message: format!("the token {name} has expired (its not_after has passed)"),
        }),
        Err(Refusal::Missing | Refusal::Wrong) => {
            Err(ApiError::TokenRequired { reason: "missing_token", message: "a valid bearer token is required".into() })
        }
    }
}

/// An order to register before its customer pays.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrderRequest {
    /// The order id the provider's events will carry.
    #[schema(value_type = crate::base::schema::Id)]
    id: String,
    /// Amount in minor units (cents), from 0 to 2^53 - 1 (so that every JSON reader, JavaScript's too, reads the
    /// amounts payhook sends back exactly).
    #[serde(deserialize_with = "crate::base::json_int::i64")]
    #[schema(minimum = 0, maximum = 9007199254740991_i64)]
    amount: i64,
    /// ISO 4217 code: three letters, lower or upper case.
    #[schema(pattern = "^[A-Za-z]{3}$")]
    currency: String,
}

/// The largest amount an order may have: 2^53 - 1 minor units, the largest integer every JSON reader (JavaScript's
/// numbers are doubles) reads exactly.
pub const MAX_AMOUNT: i64 = crate::base::json_int::MAX_SAFE;

/// Checks an order as the API and the importer receive it.
pub fn parse_order(id: String, amount: i64, currency: &str, now_ms: i64) -> Result<NewOrder, ApiError> {
    let invalid = |e: payhook_core::event::InvalidValue| ApiError::Invalid(e.to_string());
    let id = OrderId::parse(id).map_err(invalid)?;
    if amount > MAX_AMOUNT {
        return Err(ApiError::Invalid(format!("amount: must be at most {MAX_AMOUNT} (2^53 - 1) minor units")));
    }
    let money = Money::new(amount, Currency::parse(currency).map_err(invalid)?).map_err(invalid)?;
    Ok(NewOrder { id, money, now_ms })
}

#[utoipa::path(post, path = "/v1/orders", tag = "orders", request_body = OrderRequest, security(("bearer" = [])),
    responses((status = 201, description = "Registered"),
        (status = 200, description = "The identical order was already registered"),
        (status = 409, description = "Same id with another amount or currency", body = crate::base::schema::ErrorBody),
        (status = 413, description = "The body is over `server.body_limit_bytes`", body = crate::base::schema::ErrorBody),
        (status = 422, description = "Invalid order, or a body that is not one JSON object of the documented fields \
            (an array, a string, null, an unknown field, a field of the wrong type); nothing is registered", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn register_order<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    axum::Extension(caller): axum::Extension<Principal>,
    JsonBody(req): JsonBody<OrderRequest>,
) -> Result<Response, ApiError> {
    let Some(req) = req else {
        return Err(ApiError::Invalid("a JSON body is required: {\"id\", \"amount\", \"currency\"}".into()));
    };
    let order = parse_order(req.id, req.amount, &req.currency, state.clock.now_ms())?;
    let id = order.id.clone();
    let detail = json!({ "amount": order.money.amount_minor, "currency": order.money.currency.as_str() });
    let entry =
        Actor::of(&caller).entry(AuditAction::OrderRegister, Some(format!("order/{id}")), "", detail, order.now_ms);
    let registered = state.store.register_order_audited(order.clone(), Some(entry.clone())).await?;
    audit::log(&AuditEntry { outcome: payhook_store::audit::registration_outcome(&registered).to_owned(), ..entry });
    let status = match registered {
        Registered::Created => {
            // Events that arrived before this order can be applied now.
            state.worker_wake.notify_one();
            StatusCode::CREATED
        }
        Registered::AlreadyExists => StatusCode::OK,
        Registered::Conflict { existing } => {
            return Err(ApiError::Conflict {
                message: format!("order {id} is already registered with another amount or currency"),
                existing: json!({ "amount": existing.amount_minor, "currency": existing.currency.as_str() }),
            });
        }
    };
    let view = state.store.order(&id).await?.ok_or_else(|| ApiError::NotFound(format!("order {id}")))?;
    Ok((status, Json(order_json(&view))).into_response())
}

#[utoipa::path(get, path = "/v1/orders/{id}", tag = "orders", security(("bearer" = [])),
    params(("id" = crate::base::schema::Id, Path, description = "Order id")),
    responses((status = 200, description = "Status, amount, currency, timestamps, audit history, outbox rows"),
        (status = 422, description = "Not a valid id (see the `Id` schema)", body = crate::base::schema::ErrorBody),
        (status = 404, description = "No such order", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn get_order<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = OrderId::parse(id).map_err(|e| ApiError::Invalid(e.to_string()))?;
    match state.store.order(&id).await? {
        Some(view) => Ok(Json(order_json(&view)).into_response()),
        None => Err(ApiError::NotFound(format!("no order {id}"))),
    }
}

fn order_json(v: &OrderView) -> serde_json::Value {
    json!({
        "id": v.id.as_str(),
        "status": v.status.as_str(),
        "amount": v.money.amount_minor,
        "currency": v.money.currency.as_str(),
        "created_at_ms": v.created_at_ms,
        "updated_at_ms": v.updated_at_ms,
        "history": v.history.iter().map(|h| json!({
            "source": h.source,
            "event_id": h.event_id,
            "type": h.event_type,
            "from": h.from.as_str(),
            "to": h.to.as_str(),
            "at_ms": h.at_ms,
        })).collect::<Vec<_>>(),
        "outbox": v.outbox.iter().cloned().map(|mut row| { crate::service::admin::redact_outbox_row(&mut row); row }).collect::<Vec<_>>(),
    })
}

#[utoipa::path(get, path = "/v1/subscriptions/{id}", tag = "billing", security(("bearer" = [])),
    params(("id" = crate::base::schema::Id, Path, description = "The provider's subscription id")),
    responses((status = 200, description = "Provider status, period end, history, the entitlements of its invoices"),
        (status = 422, description = "Not a valid id (see the `Id` schema)", body = crate::base::schema::ErrorBody),
        (status = 404, description = "No such subscription", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn get_subscription<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = SubscriptionId::parse(id).map_err(|e| ApiError::Invalid(e.to_string()))?;
    match state.store.subscription(&id).await? {
        Some(view) => Ok(Json(view).into_response()),
        None => Err(ApiError::NotFound(format!("no subscription {id}"))),
    }
}

/// A customer's entitlements; a customer payhook has never heard of simply has none.
#[utoipa::path(get, path = "/v1/customers/{id}/entitlements", tag = "billing", security(("bearer" = [])),
    params(("id" = crate::base::schema::Id, Path, description = "The provider's customer id")),
    responses((status = 200, description = "The customer's entitlements with their history, and how many are granted"),
        (status = 422, description = "Not a valid id (see the `Id` schema)", body = crate::base::schema::ErrorBody), (status = 401, description = "Missing or wrong bearer token (`WWW-Authenticate: Bearer`)", body = crate::base::schema::ErrorBody),
        (status = 429, description = "Too many failed attempts at the token from this address: retry after `Retry-After`", body = crate::base::schema::ErrorBody),
        (status = 503, description = "Storage unavailable: retry later", body = crate::base::schema::ErrorBody)))]
pub(crate) async fn get_entitlements<S: Store>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = CustomerId::parse(id).map_err(|e| ApiError::Invalid(e.to_string()))?;
    let entitlements = state.store.entitlements(&id).await?;
    let granted = entitlements.iter().filter(|e| e.status == payhook_core::billing::EntitlementStatus::Granted).count();
    Ok(Json(json!({ "customer_id": id.as_str(), "granted": granted, "entitlements": entitlements })).into_response())
}
