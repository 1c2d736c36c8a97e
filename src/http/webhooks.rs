//! Webhook endpoints over HTTP: a tenant registers URLs for event types, and lists, reads and
//! deletes them, and an endpoint's deliveries with their attempts. The signing secret is in the
//! answer to the registration only. A webhook reports what happened; it can never answer a
//! question (an approval still needs an authenticated answer).

use std::sync::Arc;

use actix_web::{delete, get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::lists::page_limit;
use super::{ApiError, Code, State};
use crate::auth::Caller;
use crate::domain::webhooks::{Delivery, WebhookEvent};
use crate::limits::tenant_name;
use crate::service::idempotency;
use crate::service::ServiceError;
use crate::store::redis::is_position;
use crate::store::webhooks::{Created, Endpoint};
use crate::store::{now_ms, WebhookStore};
use crate::webhooks::{destination, sign};

/// Endpoints one tenant may have.
pub const MAX_ENDPOINTS: usize = 16;
/// The longest description kept.
const MAX_DESCRIPTION: usize = 256;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where deliveries are POSTed: http or https, at most 2048 bytes, no credentials, a
    /// public address (unless the server sets `DSH_WEBHOOK_ALLOW_PRIVATE=true`).
    pub url: String,
    /// The event types to deliver, at least one: `plan.review_requested`, `plan.approved`,
    /// `plan.revising`, `plan.dismissed`, `turn.ended`.
    #[schema(value_type = Vec<WebhookEvent>)]
    pub events: Vec<String>,
    /// Free text for people, at most 256 characters.
    pub description: Option<String>,
}

/// A registered endpoint (never its secret, after the registration's answer).
#[derive(Debug, Serialize, ToSchema)]
pub struct Webhook {
    #[schema(example = "wh_5f0c8a1e2b3d4c6e7f8091a2")]
    pub id: String,
    #[schema(example = "https://hooks.example.com/dsh")]
    pub url: String,
    pub events: Vec<WebhookEvent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(with = "crate::domain::event::rfc3339_ms")]
    #[schema(value_type = String, example = "2026-12-02T10:23:53.123Z")]
    pub created_at: u64,
}

/// A new endpoint and its signing secret, shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedWebhook {
    #[serde(flatten)]
    pub webhook: Webhook,
    /// The key of every delivery's `webhook-signature` (`whsec_` and base64): store it now,
    /// no other answer shows it.
    #[schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwJq3z0f1xYw8=")]
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookList {
    /// Oldest first.
    pub webhooks: Vec<Webhook>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// Deliveries per page, 1-200 (default 50).
    #[param(minimum = 1, maximum = 200, example = 50)]
    pub limit: Option<u32>,
    /// Opaque: the `next_cursor` of the previous page. Omit it for the newest deliveries.
    pub cursor: Option<String>,
}

/// A page of an endpoint's deliveries, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<Delivery>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    pub has_more: bool,
}

fn view(e: &Endpoint) -> Webhook {
    Webhook {
        id: e.id.clone(),
        url: e.url.clone(),
        events: e.events.clone(),
        description: e.description.clone(),
        created_at: e.created_at,
    }
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::new(Code::InvalidWebhook, detail)
}

/// The store and the caller's tenant: an API key's tenant, `_open` on an open server.
fn scope(state: &State, caller: &Caller) -> Result<(Arc<dyn WebhookStore>, String), ApiError> {
    state.require_key(caller)?;
    let store = state.webhooks.clone().ok_or_else(|| {
        ApiError::new(
            Code::FeatureDisabled,
            "webhooks need a Redis store (REDIS_URL); this server runs in memory",
        )
    })?;
    Ok((store, tenant_name(caller.tenant()).to_owned()))
}

fn store_error(e: crate::store::StoreError) -> ApiError {
    ServiceError::from(e).into()
}

/// The caller's endpoint `id`, or 404 (another tenant's endpoint does not exist either).
async fn endpoint(store: &dyn WebhookStore, tenant: &str, id: &str) -> Result<Endpoint, ApiError> {
    let well_formed = id.len() <= 64 && id.starts_with("wh_");
    let found = match well_formed {
        true => store.endpoint(tenant, id).await.map_err(store_error)?,
        false => None,
    };
    found.ok_or_else(|| {
        let shown: String = id.chars().take(64).collect();
        ApiError::new(
            Code::WebhookNotFound,
            format!("no webhook endpoint `{shown}`"),
        )
    })
}

/// Register a webhook endpoint.
///
/// Deliveries of the chosen event types in the tenant's sessions are POSTed to `url` as JSON
/// `{type, timestamp, data}`, signed per Standard Webhooks (`webhook-id`, `webhook-timestamp`,
/// `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` keyed with the
/// secret's bytes). The answer holds the secret; it is never shown again. Delivery is at least
/// once: de-duplicate on `webhook-id`. A failed delivery is retried with exponential backoff
/// for 24 hours. At most 16 endpoints per tenant (429 `webhook-quota`). A webhook never
/// answers a question: approving a plan still takes an authenticated answer.
#[utoipa::path(
    tag = "webhooks",
    operation_id = "createWebhook",
    request_body(content = CreateWebhook, example = json!({
        "url": "https://hooks.example.com/dsh",
        "events": ["plan.review_requested", "plan.approved"],
        "description": "Plan reviews to the team channel"
    })),
    responses(
        (status = 201, description = "The endpoint, with its signing secret (shown only here)", body = CreatedWebhook),
    )
)]
#[post("/v1/webhooks")]
pub async fn create_webhook(
    state: State,
    caller: Caller,
    body: web::Json<CreateWebhook>,
) -> Result<HttpResponse, ApiError> {
    let (store, tenant) = scope(&state, &caller)?;
    let body = body.into_inner();
    let url = destination::parse(&body.url, state.webhook_allow_private).map_err(invalid)?;
    if body.events.is_empty() {
        return Err(invalid("name at least one event type"));
    }
    let mut events = Vec::new();
    for raw in &body.events {
        let event = WebhookEvent::parse(raw).ok_or_else(|| {
            let known: Vec<_> = WebhookEvent::ALL.iter().map(|e| e.as_str()).collect();
            let shown: String = raw.chars().take(64).collect();
            invalid(format!(
                "unknown event type `{shown}`; known: {}",
                known.join(", ")
            ))
        })?;
        if !events.contains(&event) {
            events.push(event);
        }
    }
    if body
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION)
    {
        return Err(invalid(format!(
            "the description is longer than {MAX_DESCRIPTION} characters"
        )));
    }
    // A keyed request (`Idempotency-Key`) names the same endpoint on every attempt.
    let id = match idempotency::drawn("webhook") {
        Some(bits) => bits[..12].iter().map(|b| format!("{b:02x}")).collect(),
        None => crate::auth::credentials::random_hex(12)
            .map_err(|e| ApiError::new(Code::Internal, e))?,
    };
    let secret = sign::new_secret().map_err(|e| ApiError::new(Code::Internal, e))?;
    let endpoint = Endpoint {
        id: format!("wh_{id}"),
        url: url.to_string(),
        events,
        description: body.description,
        secret,
        created_at: now_ms(),
    };
    let created = store.create(&tenant, &endpoint, MAX_ENDPOINTS);
    let endpoint = match created.await.map_err(store_error)? {
        Created::Stored => endpoint,
        // An earlier attempt of this keyed request made it: answer as that attempt did.
        Created::Exists => {
            if let Some(k) = idempotency::current() {
                k.committed(true);
            }
            self::endpoint(store.as_ref(), &tenant, &endpoint.id).await?
        }
        Created::Full => {
            return Err(ApiError::new(
                Code::WebhookQuota,
                format!("this tenant has {MAX_ENDPOINTS} webhook endpoints, the most it may have; delete one first"),
            ))
        }
    };
    // Not kept for a replay (so the secret stays in one place): a retry is answered from the
    // endpoint its first attempt made.
    Ok(HttpResponse::Created()
        .insert_header(("Cache-Control", "no-store"))
        .json(CreatedWebhook {
            webhook: view(&endpoint),
            secret: endpoint.secret,
        }))
}

/// List webhook endpoints.
///
/// The tenant's endpoints, oldest first (at most 16), without their secrets.
#[utoipa::path(
    tag = "webhooks",
    operation_id = "listWebhooks",
    responses((status = 200, description = "The tenant's webhook endpoints", body = WebhookList))
)]
#[get("/v1/webhooks")]
pub async fn list_webhooks(
    state: State,
    caller: Caller,
) -> Result<web::Json<WebhookList>, ApiError> {
    let (store, tenant) = scope(&state, &caller)?;
    let all = store.endpoints(&tenant).await.map_err(store_error)?;
    Ok(web::Json(WebhookList {
        webhooks: all.iter().map(view).collect(),
    }))
}

/// Get a webhook endpoint.
///
/// One of the tenant's endpoints, without its secret; another tenant's is 404.
#[utoipa::path(
    tag = "webhooks",
    operation_id = "getWebhook",
    params(("id" = String, Path, description = "Webhook endpoint id")),
    responses((status = 200, description = "The endpoint", body = Webhook))
)]
#[get("/v1/webhooks/{id}")]
pub async fn get_webhook(
    state: State,
    caller: Caller,
    path: web::Path<String>,
) -> Result<web::Json<Webhook>, ApiError> {
    let (store, tenant) = scope(&state, &caller)?;
    Ok(web::Json(view(
        &endpoint(store.as_ref(), &tenant, &path).await?,
    )))
}

/// Delete a webhook endpoint.
///
/// Removes the endpoint and its delivery records; deliveries not yet sent are dropped.
#[utoipa::path(
    tag = "webhooks",
    operation_id = "deleteWebhook",
    params(("id" = String, Path, description = "Webhook endpoint id")),
    responses((status = 204, description = "Deleted"))
)]
#[delete("/v1/webhooks/{id}")]
pub async fn delete_webhook(
    state: State,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (store, tenant) = scope(&state, &caller)?;
    let found = endpoint(store.as_ref(), &tenant, &path).await?;
    store
        .remove(&tenant, &found.id)
        .await
        .map_err(store_error)?;
    Ok(HttpResponse::NoContent().finish())
}

/// List an endpoint's deliveries.
///
/// Newest first, a page at a time: each delivery's id (its `webhook-id`), event type, session,
/// status (`pending`, `succeeded`, `failed`), its latest attempts (when, the endpoint's status
/// or the error, how long it took) and when the next attempt is due. The newest 1000
/// deliveries of an endpoint are kept.
#[utoipa::path(
    tag = "webhooks",
    operation_id = "listWebhookDeliveries",
    params(("id" = String, Path, description = "Webhook endpoint id"), DeliveriesQuery),
    responses((status = 200, description = "A page of the endpoint's deliveries, newest first", body = DeliveryList))
)]
#[get("/v1/webhooks/{id}/deliveries")]
pub async fn list_deliveries(
    state: State,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<DeliveriesQuery>,
) -> Result<web::Json<DeliveryList>, ApiError> {
    let (store, tenant) = scope(&state, &caller)?;
    let limit = page_limit(query.limit)?;
    let after = match query.cursor.as_deref() {
        None => None,
        Some(c) => Some(
            c.strip_prefix('d')
                .filter(|p| is_position(p))
                .ok_or_else(|| {
                    ApiError::new(
                        Code::InvalidQuery,
                        "not a cursor of this list: pass the `next_cursor` of a page as it came",
                    )
                })?,
        ),
    };
    let found = endpoint(store.as_ref(), &tenant, &path).await?;
    let page = store
        .deliveries(&tenant, &found.id, after, limit)
        .await
        .map_err(store_error)?;
    Ok(web::Json(DeliveryList {
        has_more: page.next.is_some(),
        next_cursor: page.next.map(|p| format!("d{p}")),
        deliveries: page.deliveries,
    }))
}
