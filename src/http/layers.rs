//! The middleware every request passes through, as two layers around `actix-cors`: [`edge`]
//! outside it, [`admit`] inside it. Each layer runs its steps as plain nested futures (one
//! allocation per layer and request, where a layer per step cost two each and a dynamic call).
//!
//! Outermost first:
//! - a draining replica closes every connection after its answer
//!   ([`super::close_while_draining`]);
//! - every request gets its id, its span and its access line ([`super::request_id::track`]);
//! - its status and latency are counted for `/metrics` ([`super::metrics::track`]);
//! - a HEAD runs as its GET from here in (the access line and metrics still say HEAD;
//!   [`super::methods::head_as_get`]);
//! - the security headers go on everything ([`super::guard::security_headers`]);
//! - a refused CORS preflight becomes a problem ([`super::cors::refusals_as_problems`]);
//! - then CORS headers go on every answer to an allowed origin (`actix-cors`, between the two
//!   layers), the guard's 415 and a refused credential's 401 included;
//! - the caller is authenticated and spends its rate ([`super::authenticate`]);
//! - writes must be JSON ([`super::guard::json_writes`]);
//! - keyed writes run once, for a known caller and only once they are JSON
//!   ([`super::idempotency::keyed_writes`]).

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use std::future::Future;

use super::{auth, cors, guard, idempotency, methods, metrics, request_id, system};

/// The steps outside CORS, from closing a draining replica's connections to turning a refused
/// preflight into a problem.
pub async fn edge(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    system::close_while_draining(req, |req| {
        request_id::track(req, |req| {
            metrics::track(req, |req| {
                methods::head_as_get(req, |req| {
                    guard::security_headers(req, |req| {
                        cors::refusals_as_problems(req, |req| next.call(req))
                    })
                })
            })
        })
    })
    .await
}

/// The steps inside CORS: the caller, JSON writes, keyed writes.
pub async fn admit(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    auth::authenticate(req, |req| {
        guard::json_writes(req, |req| {
            idempotency::keyed_writes(req, |req| next.call(req))
        })
    })
    .await
}

/// The rest of the chain as one step of a layer sees it: called once, with the request.
pub trait Rest<B> {
    type Answer: Future<Output = Result<ServiceResponse<B>, actix_web::Error>>;
    fn call(self, req: ServiceRequest) -> Self::Answer;
}

impl<B, F, Fut> Rest<B> for F
where
    F: FnOnce(ServiceRequest) -> Fut,
    Fut: Future<Output = Result<ServiceResponse<B>, actix_web::Error>>,
{
    type Answer = Fut;
    fn call(self, req: ServiceRequest) -> Fut {
        self(req)
    }
}
