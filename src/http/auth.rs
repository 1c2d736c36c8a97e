//! Credentials at the edge: every `/v1/sessions…` and `/v1/events` request is authenticated
//! once, by the [`authenticate`] middleware, which leaves the [`Caller`] in the request for
//! handlers to take as an extractor. Handlers then ask [`AppState::guard`] before they touch a
//! session.
//!
//! The credential is `Authorization: Bearer <API key or token>`; on the event routes only, a
//! token may also come as `?access_token=` (an `EventSource` cannot set headers). Neither is
//! ever logged.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::{http::header, web, FromRequest, HttpMessage, HttpRequest, ResponseError};

use super::layers::Rest;
use super::{rate_limit, ApiError, AppState, Code};
use crate::auth::{Action, Caller, Denied};
use crate::domain::{AgentId, SessionId};

/// Whether a route needs a credential (when auth is on): the session and webhook routes and
/// the many-session event stream; the rest are public.
pub(super) fn guarded(path: &str) -> bool {
    path.starts_with("/v1/sessions") || path.starts_with("/v1/webhooks") || path == MANY_EVENTS
}

/// The event stream of many sessions.
const MANY_EVENTS: &str = "/v1/events";

/// Authenticates a request to a session route, records its caller, and spends one request
/// of its key's rate (429 past it; `RateLimit` headers on every answer to a key).
pub async fn authenticate<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: impl Rest<B>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // The decoded path, as the router matches it (`/v1/%73essions` is `/v1/sessions`).
    let path = req.match_info().as_str().to_owned();
    if !guarded(&path) || req.method() == actix_web::http::Method::OPTIONS {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return refuse(
            req,
            ApiError::new(Code::Internal, "the server is not configured"),
        );
    };
    let presented = credential(req.request(), &path);
    let authenticated = state
        .auth
        .authenticate(presented.as_deref())
        .await
        .map_err(crate::service::ServiceError::from)
        .map_err(ApiError::from)
        .and_then(|c| c.map_err(|d| denied(d, None)));
    let caller = match authenticated {
        Ok(caller) => caller,
        Err(e) => return refuse(req, e),
    };
    let decision = match caller.rate_key() {
        Some((key, rate)) => match state.limits.check_rate(key, rate).await {
            Ok(d) => Some(d),
            // A full Redis cannot record the spend; reads must keep working (writes get 507).
            Err(crate::store::StoreError::Full(_)) => None,
            Err(e) => return refuse(req, crate::service::ServiceError::from(e).into()),
        },
        None => None,
    };
    if let Some(d) = decision.as_ref().filter(|d| !d.allowed) {
        return Ok(req.into_response(rate_limit::refused_response(d)));
    }
    req.extensions_mut().insert(caller);
    let mut res = next.call(req).await?.map_into_boxed_body();
    if let Some(d) = &decision {
        rate_limit::insert(res.headers_mut(), d);
    }
    Ok(res)
}

/// A refusal answered here, as a response, so it is rendered inside the request's scope and
/// names the request (`request_id`).
fn refuse(req: ServiceRequest, e: ApiError) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    Ok(req.into_response(e.error_response()))
}

/// The presented credential: the bearer header, or `access_token` on the event routes.
fn credential(req: &HttpRequest, path: &str) -> Option<String> {
    if let Some(value) = req.headers().get(header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let (scheme, rest) = value.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| rest.trim().to_owned());
    }
    // Only an event stream takes its credential from the query (`/v1/events` or
    // `/v1/sessions/{sid}/events`).
    let events = req.method() == actix_web::http::Method::GET
        && (path == MANY_EVENTS
            || path
                .strip_prefix("/v1/sessions/")
                .and_then(|rest| rest.strip_suffix("/events"))
                .is_some_and(|sid| !sid.is_empty() && !sid.contains('/')));
    if !events {
        return None;
    }
    web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .ok()?
        .into_inner()
        .into_iter()
        .find(|(k, _)| k == "access_token")
        .map(|(_, v)| v)
}

/// The problem a refusal answers with; `sid` names the session a 404 pretends is missing.
fn denied(d: Denied, sid: Option<&SessionId>) -> ApiError {
    match d {
        Denied::Unauthenticated(why) => ApiError::new(Code::Unauthorized, why),
        Denied::Expired => ApiError::new(
            Code::TokenExpired,
            "the token has expired: ask your backend for a new one",
        ),
        // Word for word what a session that does not exist answers.
        Denied::Hidden => match sid {
            Some(sid) => crate::service::ServiceError::SessionNotFound(sid.clone()).into(),
            None => ApiError::new(Code::SessionNotFound, "no such session"),
        },
        Denied::Forbidden(why) => ApiError::new(Code::InsufficientScope, why),
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        // Only a route the middleware did not cover lacks a caller: a wiring bug, never open.
        std::future::ready(
            req.extensions()
                .get::<Caller>()
                .cloned()
                .ok_or_else(|| ApiError::new(Code::Internal, "this route was not authenticated")),
        )
    }
}

impl AppState {
    /// Refuses unless `caller` may do `action` on `sid` (touching `agent`). Another tenant's
    /// session answers exactly as a missing one does.
    pub async fn guard(
        &self,
        caller: &Caller,
        sid: &SessionId,
        agent: Option<&AgentId>,
        action: Action,
    ) -> Result<(), ApiError> {
        if matches!(caller, Caller::Open) {
            return Ok(());
        }
        let owner = self.sessions.owner(sid).await?;
        caller
            .authorize(sid, owner.as_ref(), agent, action)
            .map_err(|d| denied(d, Some(sid)))
    }

    /// Refuses a browser token on a route for API keys only (those not about one session).
    pub fn require_key(&self, caller: &Caller) -> Result<(), ApiError> {
        match caller {
            Caller::Token { .. } => Err(ApiError::new(
                Code::InsufficientScope,
                "this route takes an API key; a browser token cannot use it",
            )),
            _ => Ok(()),
        }
    }
}
