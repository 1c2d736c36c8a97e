//! `Idempotency-Key` on every write (POST, PUT) of a session or webhook route, with Stripe's
//! semantics.
//!
//! A write that sends the header is run once per key of the caller's tenant for 24 hours: its
//! first final response (status, body, and the headers in [`KEPT_HEADERS`]) is stored and a
//! retry of the same request gets it again with `Idempotent-Replayed: true`. The same request
//! means the same method, path, credential, `If-Match` and body (JSON compared with its keys
//! sorted, so spacing and key order do not matter). The key with a different request answers 422
//! `idempotency-key-reused`; a duplicate while the first still runs 409
//! `idempotency-key-in-use` (with `Retry-After`).
//!
//! Answers that say "try again" (5xx, 429) are not final: a retry runs the request again, and
//! so does a retry whose first attempt died or timed out. That retry cannot write twice: the
//! log carries the key's markers (see [`crate::service::idempotency`]), so it learns what the
//! first attempt committed and answers it (also with `Idempotent-Replayed: true`). The same
//! holds when a response is not stored: bodies over [`MAX_STORED`] bytes, and responses marked
//! `Cache-Control: no-store` (a minted token is never kept), are rebuilt by running again.
//!
//! Mounted inside [`super::authenticate`] (the tenant is known, a refused credential or rate is
//! never recorded) and inside [`super::guard::json_writes`] (a 415 is not recorded either).

use actix_web::body::{self, BodySize, BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{web, HttpMessage, HttpResponse, ResponseError};
use serde_json::Value;

use super::error::payload_error;
use super::layers::Rest;
use super::{ApiError, AppState, Code};
use crate::auth::Caller;
use crate::service::idempotency::{fingerprint, Admission, Ticket};
use crate::store::StoredResponse;

pub const KEY_HEADER: &str = "Idempotency-Key";
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";
/// Longest key accepted, in characters (printable ASCII).
pub const MAX_KEY: usize = 255;
/// The most bytes of a response body stored for a replay.
pub const MAX_STORED: usize = 64 * 1024;
/// The response headers a replay repeats; the rest (rate limits, CORS, security, request id)
/// are the retry's own.
const KEPT_HEADERS: [HeaderName; 6] = [
    header::CONTENT_TYPE,
    header::LOCATION,
    header::RETRY_AFTER,
    header::CONTENT_LOCATION,
    header::ETAG,
    header::LINK,
];

/// Runs a keyed write once (see the module docs); any other request passes through.
pub async fn keyed_writes<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: impl Rest<B>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let write = matches!(*req.method(), Method::POST | Method::PUT);
    // Only session and webhook routes know their caller; nothing else is a keyed write.
    let caller = (write && req.headers().contains_key(KEY_HEADER))
        .then(|| req.extensions().get::<Caller>().cloned())
        .flatten();
    let Some(caller) = caller else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let key = match key(req.headers()) {
        Ok(key) => key,
        Err(e) => return Ok(req.into_response(e.error_response())),
    };
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return Err(ApiError::new(Code::Internal, "the server is not configured").into());
    };
    let body = match req.extract::<web::Bytes>().await {
        Ok(body) => body,
        Err(e) => return Ok(req.into_response(payload_error(e).error_response())),
    };
    let (holder, canonical_body) = (holder(&caller), canonical(&body));
    let mut parts: Vec<&[u8]> = vec![
        req.method().as_str().as_bytes(),
        req.match_info().as_str().as_bytes(),
        req.query_string().as_bytes(),
        holder.as_bytes(),
        &canonical_body,
    ];
    // `If-Match` says which plan revision a decision decides, so it is part of the request;
    // added only when sent, so the prints of requests without it stay what they were.
    let preconditions: Vec<&[u8]> = req
        .headers()
        .get_all(header::IF_MATCH)
        .map(HeaderValue::as_bytes)
        .collect();
    if !preconditions.is_empty() {
        parts.push(b"if-match");
        parts.extend(preconditions);
    }
    let print = fingerprint(&parts);
    req.set_payload(Payload::from(body));
    let tenant = crate::limits::tenant_name(caller.tenant());
    let refused = |e: ApiError| {
        Ok(ServiceResponse::new(
            req.request().clone(),
            e.error_response(),
        ))
    };
    let ticket =
        match state.idempotency.begin(tenant, &key, &print).await {
            Ok(Admission::Run(ticket)) => ticket,
            Ok(Admission::Replay(stored)) => {
                if let Some(gone) = gone(&state, &req, &stored).await {
                    return refused(gone);
                }
                return Ok(ServiceResponse::new(req.request().clone(), replay(stored)?));
            }
            Ok(Admission::Mismatch) => return refused(ApiError::new(
                Code::IdempotencyKeyReused,
                "this Idempotency-Key was used for a different request (method, path, credential, \
             If-Match or body) in the last 24 hours; send a new key with a new request",
            )),
            Ok(Admission::InUse(wait)) => {
                return refused(
                    ApiError::new(
                        Code::IdempotencyKeyInUse,
                        "a request with this Idempotency-Key is still running; retry it after \
                 Retry-After to get its answer",
                    )
                    .retry_after(wait.as_secs_f64().ceil() as u64),
                )
            }
            Ok(Admission::Full(wait)) => {
                return refused(
                    ApiError::new(
                        Code::IdempotencyKeyQuota,
                        format!(
                    "the tenant holds {} idempotency keys of the last 24 hours, as many as it \
                     may; retry after Retry-After or send the write without a key",
                    crate::service::idempotency::MAX_RECORDS
                ),
                    )
                    .retry_after(wait.as_secs_f64().ceil() as u64),
                )
            }
            Err(e) => return refused(e.into()),
        };
    let answered = state.idempotency.hold(&ticket, next.call(req)).await;
    finish(&state, ticket, answered).await
}

/// Stores a final answer for replays, or frees the key for a retry; marks a response that
/// repeats an earlier attempt's outcome.
async fn finish(
    state: &web::Data<AppState>,
    ticket: Ticket,
    answered: Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let mut res = match answered {
        Ok(res) => res.map_into_boxed_body(),
        Err(e) => {
            state.idempotency.finish(&ticket, None).await;
            return Err(e);
        }
    };
    if ticket.request.replayed() {
        res.headers_mut().insert(
            HeaderName::from_static("idempotent-replayed"),
            HeaderValue::from_static("true"),
        );
    }
    let status = res.status();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        // Not final. Freed in the background: during an outage this may wait for Redis, and
        // the answer must not (a retry meanwhile hears 409 and waits a second).
        let state = state.clone();
        actix_web::rt::spawn(async move { state.idempotency.finish(&ticket, None).await });
        return Ok(res);
    }
    let size = match res.response().body().size() {
        BodySize::None => Some(0),
        BodySize::Sized(n) => usize::try_from(n).ok().filter(|n| *n <= MAX_STORED),
        BodySize::Stream => None,
    };
    let (Some(_), false) = (size, no_store(res.headers())) else {
        state.idempotency.finish(&ticket, None).await;
        return Ok(res);
    };
    let (req, res) = res.into_parts();
    let (head, body) = res.into_parts();
    let bytes = match body::to_bytes_limited(body, MAX_STORED).await {
        Ok(Ok(bytes)) => bytes,
        _ => {
            state.idempotency.finish(&ticket, None).await;
            let err = ApiError::new(Code::Internal, "the response could not be read");
            return Ok(ServiceResponse::new(req, err.error_response()));
        }
    };
    let stored = StoredResponse {
        status: status.as_u16(),
        headers: kept(head.headers()),
        body: bytes.to_vec(),
    };
    state.idempotency.finish(&ticket, Some(&stored)).await;
    Ok(ServiceResponse::new(
        req,
        head.set_body(BoxBody::new(bytes)),
    ))
}

/// The key: one header of 1-255 printable ASCII characters.
fn key(headers: &HeaderMap) -> Result<String, ApiError> {
    let mut values = headers.get_all(KEY_HEADER);
    let invalid = |why: &str| {
        ApiError::new(
            Code::InvalidIdempotencyKey,
            format!("the Idempotency-Key header {why}; send one key of 1-{MAX_KEY} printable ASCII characters, e.g. a UUID"),
        )
    };
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(invalid("is sent more than once"));
    };
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_KEY {
        return Err(invalid(&format!("is {} characters long", bytes.len())));
    }
    if !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(invalid("holds characters that are not printable ASCII"));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// Who may see a stored answer: the credential and, for a browser token, everything it grants
/// (key, session, agent, scopes; not its times, so a refreshed token with the same grant
/// replays). A replay answers before the handler's own checks run, so a token granting less
/// than the first one must not match its record.
fn holder(caller: &Caller) -> String {
    match caller {
        Caller::Token { claims, .. } => {
            let mut scopes: Vec<String> = claims.scp.iter().map(|s| format!("{s:?}")).collect();
            scopes.sort();
            format!(
                "token:{}|key:{}|sid:{}|agt:{}|scp:{}",
                claims.sub,
                claims.key,
                claims.sid,
                claims.agt.as_ref().map(|a| a.as_str()).unwrap_or(""),
                scopes.join(",")
            )
        }
        other => other.principal().unwrap_or_default(),
    }
}

/// The body as compared between attempts: JSON with its object keys sorted, its null-valued
/// members dropped and no spacing (an empty body as `{}`), anything else as it is. Every request body reads an absent
/// member and a null one alike (`Option` fields), so a client whose serializer writes nulls
/// sends the same request either way.
fn canonical(body: &[u8]) -> Vec<u8> {
    fn sorted(v: Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut pairs: Vec<_> = map.into_iter().filter(|(_, v)| !v.is_null()).collect();
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Object(pairs.into_iter().map(|(k, v)| (k, sorted(v))).collect())
            }
            Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
            other => other,
        }
    }
    // An empty body is the empty object: routes whose body is optional read both alike.
    if body.iter().all(u8::is_ascii_whitespace) {
        return b"{}".to_vec();
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => serde_json::to_vec(&sorted(v)).unwrap_or_else(|_| body.to_vec()),
        Err(_) => body.to_vec(),
    }
}

fn no_store(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-store"))
}

fn kept(headers: &HeaderMap) -> Vec<(String, String)> {
    KEPT_HEADERS
        .iter()
        .flat_map(|name| headers.get_all(name).map(move |v| (name, v)))
        .filter_map(|(name, v)| Some((name.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect()
}

/// Why a stored answer is no longer replayed: the session it is about (the one in the path,
/// or the one it created) was deleted or expired since. A retry then hears what the request
/// would answer now — `session-not-found`, or for a creation `already-applied` — never the
/// gone session's content. `None`: replay it (also when the check itself fails: a store
/// outage answers the retry as it would any request).
async fn gone(
    state: &web::Data<AppState>,
    req: &ServiceRequest,
    stored: &StoredResponse,
) -> Option<ApiError> {
    // Middleware runs before routing: the session is read from the path itself.
    let in_path = req
        .path()
        .strip_prefix("/v1/sessions/")
        .and_then(|rest| rest.split('/').next())
        .filter(|sid| !sid.is_empty());
    let (sid, created) = match in_path {
        Some(sid) => (sid.to_owned(), false),
        None => {
            let location = stored
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(header::LOCATION.as_str()))?;
            (location.1.strip_prefix("/v1/sessions/")?.to_owned(), true)
        }
    };
    let sid = crate::domain::SessionId::parse(&sid).ok()?;
    match state.sessions.state(&sid).await {
        Err(crate::service::ServiceError::SessionNotFound(_)) if created => Some(ApiError::new(
            Code::AlreadyApplied,
            format!(
                "this request was applied already: it created session `{sid}`, which has been \
                 deleted or has expired since"
            ),
        )),
        Err(crate::service::ServiceError::SessionNotFound(_)) => Some(ApiError::new(
            Code::SessionNotFound,
            format!("session `{sid}` does not exist (it was deleted or expired since this request was answered)"),
        )),
        _ => None,
    }
}

/// A stored answer, sent again. A problem names the retry in its `instance`, as its
/// `X-Request-Id` does: each attempt is its own request in the logs.
fn replay(stored: StoredResponse) -> Result<HttpResponse, ApiError> {
    let status = StatusCode::from_u16(stored.status)
        .map_err(|e| ApiError::opaque(Code::Internal, "a stored response is unreadable", e))?;
    let mut res = HttpResponse::build(status);
    let mut problem = false;
    for (name, value) in stored.headers {
        problem |= name.eq_ignore_ascii_case(header::CONTENT_TYPE.as_str())
            && value.starts_with("application/problem+json");
        res.append_header((name, value));
    }
    res.insert_header((REPLAYED_HEADER, "true"));
    let body = match (problem, super::request_id::instance()) {
        (true, Some(instance)) => renamed(stored.body, &instance),
        _ => stored.body,
    };
    Ok(res.body(body))
}

/// A stored problem document with its `instance` set to `instance`; anything else unchanged.
fn renamed(body: Vec<u8>, instance: &str) -> Vec<u8> {
    match serde_json::from_slice::<super::Problem>(&body) {
        Ok(mut problem) => {
            problem.instance = Some(instance.to_owned());
            serde_json::to_vec(&problem).unwrap_or(body)
        }
        Err(_) => body,
    }
}

/// Documents the header on every POST and PUT of a session route, and `Idempotent-Replayed`
/// on their answers that can be replayed (all but 5xx).
pub fn document(spec: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa::openapi::{Ref, RefOr, Required};
    let parameter = ParameterBuilder::new()
        .name(KEY_HEADER)
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "Makes the write safe to retry (Stripe's semantics), for 24 hours per key of the \
             tenant: a retry of the same request (method, path, credential, body) gets the first \
             final answer again with `Idempotent-Replayed: true`, and never applies twice, also \
             after a 503 or a timeout. The key with a different request: 422 \
             `idempotency-key-reused`; while the first still runs: 409 `idempotency-key-in-use` \
             with `Retry-After`; a malformed key: 400 `invalid-idempotency-key`. 5xx and 429 \
             answers are not final: the retry runs again and learns what was applied.",
        ))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(MAX_KEY))
                .pattern(Some("^[\\x20-\\x7E]+$")),
        ))
        .example(Some(serde_json::json!(
            "7c4a1f0e-9d2b-4c55-8a3e-1f2b3c4d5e6f"
        )))
        .build();
    let replayed = HeaderBuilder::new()
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["true"])),
        ))
        .description(Some(
            "`true` when this answer repeats an earlier attempt's (same Idempotency-Key)",
        ))
        .build();
    let components = spec.components.get_or_insert_with(Default::default);
    components
        .parameters
        .insert("IdempotencyKey".to_owned(), RefOr::T(parameter));
    components
        .headers
        .insert("IdempotentReplayed".to_owned(), RefOr::T(replayed));
    for (path, item) in spec.paths.paths.iter_mut() {
        if !path.starts_with("/v1/sessions") && !path.starts_with("/v1/webhooks") {
            continue;
        }
        for op in [&mut item.post, &mut item.put].into_iter().flatten() {
            op.parameters
                .get_or_insert_with(Vec::new)
                .push(RefOr::Ref(Ref::new(
                    "#/components/parameters/IdempotencyKey",
                )));
            for (status, response) in op.responses.responses.iter_mut() {
                if let (false, RefOr::T(response)) = (status.starts_with('5'), response) {
                    response.headers.insert(
                        REPLAYED_HEADER.to_owned(),
                        RefOr::Ref(Ref::new("#/components/headers/IdempotentReplayed")),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(
                HeaderName::from_static("idempotency-key"),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn keys_are_one_header_of_printable_ascii_up_to_255_characters() {
        assert_eq!(key(&headers(&["a"])).unwrap(), "a");
        assert!(key(&headers(&[&"k".repeat(255)])).is_ok());
        assert!(key(&headers(&["with spaces ~!"])).is_ok());
        for bad in [
            vec!["".to_owned()],
            vec!["k".repeat(256)],
            vec!["a".into(), "b".into()],
        ] {
            let refs: Vec<&str> = bad.iter().map(String::as_str).collect();
            let err = key(&headers(&refs)).unwrap_err();
            assert_eq!(err.code, Code::InvalidIdempotencyKey, "{bad:?}");
        }
        let mut tab = HeaderMap::new();
        tab.insert(
            HeaderName::from_static("idempotency-key"),
            HeaderValue::from_bytes(b"a\tb").unwrap(),
        );
        assert!(key(&tab).is_err());
    }

    #[test]
    fn bodies_compare_as_json_with_sorted_keys() {
        assert_eq!(
            canonical(br#"{"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": null}}"#),
            canonical(br#"{"a":{"x":null,"y":[1,{"c":3,"d":2}]},"b":1}"#)
        );
        assert_ne!(
            canonical(br#"{"active":true}"#),
            canonical(br#"{"active":false}"#)
        );
        assert_eq!(canonical(b"not json"), b"not json");
    }

    #[test]
    fn null_members_compare_as_absent_at_every_depth_but_not_in_arrays() {
        assert_eq!(
            canonical(br#"{"option":null,"label":"Approve"}"#),
            canonical(br#"{"label":"Approve"}"#)
        );
        assert_eq!(
            canonical(br#"{"a":{"b":null,"c":1},"d":null}"#),
            canonical(br#"{"a":{"c":1}}"#)
        );
        assert_ne!(canonical(br#"{"a":[null]}"#), canonical(br#"{"a":[]}"#));
        assert_ne!(
            canonical(br#"{"option":null}"#),
            canonical(br#"{"option":"approve"}"#)
        );
    }

    #[test]
    fn a_replayed_problem_names_the_retry_in_its_instance() {
        let first = super::super::Problem {
            instance: Some("urn:dsh-plan:request:first".into()),
            ..super::super::Problem::new(Code::NotFound, StatusCode::NOT_FOUND, "gone")
        };
        let body = renamed(
            serde_json::to_vec(&first).unwrap(),
            "urn:dsh-plan:request:second",
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["instance"], "urn:dsh-plan:request:second");
        assert_eq!(
            (v["status"].clone(), v["detail"].clone()),
            (404.into(), "gone".into())
        );
        assert_eq!(renamed(b"[1]".to_vec(), "x"), b"[1]");
    }

    #[test]
    fn no_store_is_found_among_other_directives() {
        let mut map = HeaderMap::new();
        map.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, No-Store"),
        );
        assert!(no_store(&map));
        map.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        assert!(!no_store(&map));
    }
}
