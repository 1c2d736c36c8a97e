//! What every request and response passes through before the handlers: writes must be JSON, and
//! every response carries the browser security headers.
//!
//! The JSON rule is what keeps other web sites out. A browser lets any page send a "simple"
//! cross-site request without asking the server first (no CORS preflight): a form post or a
//! `fetch(.., {mode: "no-cors"})` with no body, a `text/plain`, form-encoded or multipart body.
//! Such a request cannot carry `Content-Type: application/json`, so refusing every write
//! without it (415, before any handler runs) means a foreign page can never create, cancel or
//! compact a session, with or without CORS configured. Body-less writes are no exception.
//!
//! The headers keep a response from being sniffed into something executable, framed by another
//! page (clickjacking the review card), or leaking its URL (tokens may ride in it) as a referrer.
//! A handler that sets its own `Content-Security-Policy` keeps it: the web client's pages do.

use actix_web::body::EitherBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::http::Method;
use actix_web::ResponseError;

use super::layers::Rest;
use super::{ApiError, Code};

/// The policy of every response that is not a page: JSON, problems, the event stream. Nothing
/// in it may load or run anything, nor be framed.
pub const API_CSP: &str = "default-src 'none'; frame-ancestors 'none'";

/// Swagger UI at `/docs`: its scripts, styles and images are vendored (served from `/docs/`),
/// it fetches `/openapi.json` and calls the API on this origin. React sets `style` attributes,
/// hence `'unsafe-inline'` for styles only; no inline or evaluated script.
pub const DOCS_CSP: &str =
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; \
     frame-ancestors 'none'";

/// Refuses a write (POST, PUT, PATCH) whose `Content-Type` is not JSON with 415
/// `unsupported-media-type`, before it reaches a handler, so nothing is appended.
pub async fn json_writes<B>(
    req: ServiceRequest,
    next: impl Rest<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    let write = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH);
    if write {
        let content_type = req.headers().get(header::CONTENT_TYPE);
        // A known path that does not take this method answers 405 (the default service).
        if !content_type.is_some_and(is_json)
            && !super::methods::refused(req.method(), req.match_info().as_str())
        {
            let got = content_type
                .map(|v| format!("`{}`", String::from_utf8_lossy(v.as_bytes())))
                .unwrap_or_else(|| "none".to_owned());
            let err = ApiError::new(
                Code::UnsupportedMediaType,
                format!(
                    "{} requests must send `Content-Type: application/json`, even with an empty \
                     body where the body is optional (got {})",
                    req.method(),
                    truncate(&got, 80)
                ),
            );
            return Ok(req
                .into_response(err.error_response())
                .map_into_right_body());
        }
    }
    Ok(next.call(req).await?.map_into_left_body())
}

/// `application/json` or any `application/*+json`, with parameters such as `charset`.
fn is_json(value: &HeaderValue) -> bool {
    // What nearly every client sends, at once.
    if value.as_bytes() == b"application/json" {
        return true;
    }
    let Ok(value) = value.to_str() else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype.len() > 5
                && subtype
                    .get(subtype.len() - 5..)
                    .is_some_and(|s| s.eq_ignore_ascii_case("+json")))
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Adds `nosniff`, `no-referrer`, `DENY` framing and a CSP (unless the handler set one) to every
/// response, including errors raised by inner middleware.
pub async fn security_headers<B>(
    req: ServiceRequest,
    next: impl Rest<B>,
) -> Result<ServiceResponse<B>, actix_web::Error> {
    let csp = if req.path() == "/docs" || req.path().starts_with("/docs/") {
        &DOCS_CSP_VALUE
    } else {
        &API_CSP_VALUE
    };
    match next.call(req).await {
        Ok(mut res) => {
            add_security_headers(res.headers_mut(), csp);
            Ok(res)
        }
        Err(mut err) => {
            err.add_response_mapper(move |mut res| {
                add_security_headers(res.headers_mut(), csp);
                res
            });
            Err(err)
        }
    }
}

// The values checked once, when compiled, not on every response.
static API_CSP_VALUE: HeaderValue = HeaderValue::from_static(API_CSP);
static DOCS_CSP_VALUE: HeaderValue = HeaderValue::from_static(DOCS_CSP);
static NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");
static NO_REFERRER: HeaderValue = HeaderValue::from_static("no-referrer");
static DENY: HeaderValue = HeaderValue::from_static("DENY");

fn add_security_headers(headers: &mut HeaderMap, csp: &HeaderValue) {
    let defaults: [(HeaderName, &HeaderValue); 4] = [
        (header::X_CONTENT_TYPE_OPTIONS, &NOSNIFF),
        (header::REFERRER_POLICY, &NO_REFERRER),
        (header::X_FRAME_OPTIONS, &DENY),
        (header::CONTENT_SECURITY_POLICY, csp),
    ];
    // Room for these and the request id in one allocation, not a growth as they go in.
    headers.reserve(defaults.len() + 1);
    for (name, value) in defaults {
        if !headers.contains_key(&name) {
            headers.insert(name, value.clone());
        }
    }
}

/// Gives every documented write without a request body an optional, empty JSON one, so the
/// spec says what [`json_writes`] requires and clients generated from it (Swagger UI's "Try it
/// out" among them) send `Content-Type: application/json`.
pub fn document_json_writes(spec: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::request_body::RequestBodyBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    use utoipa::openapi::{ContentBuilder, Required};
    for item in spec.paths.paths.values_mut() {
        for op in [&mut item.post, &mut item.put, &mut item.patch]
            .into_iter()
            .flatten()
        {
            if op.request_body.is_none() {
                let empty = ObjectBuilder::new().schema_type(Type::Object);
                let body = RequestBodyBuilder::new()
                    .description(Some(
                        "None (ignored): send `Content-Type: application/json` with `{}` or \
                         no body; any other type, or none, gets 415",
                    ))
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(empty))
                            .example(Some(serde_json::json!({})))
                            .build(),
                    )
                    .required(Some(Required::False))
                    .build();
                op.request_body = Some(body.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_json_suffixed_types_with_parameters_are_json() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
            "application/problem+json;charset=UTF-8",
        ] {
            assert!(is_json(&HeaderValue::from_static(ok)), "{ok}");
        }
    }

    #[test]
    fn simple_request_types_and_lookalikes_are_not_json() {
        for bad in [
            "text/plain",
            "text/plain; charset=utf-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/json",
            "application/jsonp",
            "application/+json",
            "application/x-json-stream",
            "",
            "application",
        ] {
            assert!(!is_json(&HeaderValue::from_static(bad)), "{bad}");
        }
    }
}
