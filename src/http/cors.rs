//! Browsers on other origins: the `DSH_CORS_ORIGINS` allow-list, enforced by `actix-cors`.
//!
//! An allowed origin's preflight is answered and its responses, errors included, carry
//! `Access-Control-Allow-Origin`, so its pages can read them (and `EventSource` works). Any
//! other origin's preflight is refused with a `cors-refused` problem, and its plain requests get
//! no CORS headers, so the browser hides the answer from the page. Requests are never blocked on
//! their `Origin` alone: same-origin pages (the web client at `/`, which browsers never
//! preflight) and non-browser clients work whatever the list says, and a foreign page's simple
//! writes are already refused by [`super::guard::json_writes`]. Credentials mode is not needed:
//! browsers authenticate with a bearer header or `?access_token=`, never cookies.
//! An empty list adds nothing at all.

use actix_cors::Cors;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method, StatusCode};
use actix_web::middleware::Condition;
use actix_web::ResponseError;

use super::layers::Rest;
use super::{ApiError, Code};

/// Methods a page on an allowed origin may use.
const METHODS: [Method; 4] = [Method::GET, Method::POST, Method::PUT, Method::DELETE];
/// Request headers it may send beyond the CORS-safelisted ones.
const REQUEST_HEADERS: [&str; 5] = [
    "Authorization",
    "Content-Type",
    "Last-Event-ID",
    "Idempotency-Key",
    // A decision naming the plan revision it decides (a revision's `ETag`).
    "If-Match",
];
/// Response headers its script may read beyond the CORS-safelisted ones.
const EXPOSED_HEADERS: [&str; 7] = [
    "Location",
    // A plan revision's digest, to send back as `If-Match`.
    "ETag",
    "Retry-After",
    "RateLimit",
    "RateLimit-Policy",
    "X-Request-Id",
    "Idempotent-Replayed",
];
/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE: usize = 600;

/// Checks and normalizes `DSH_CORS_ORIGINS` at startup: each entry must be an exact origin,
/// `scheme://host[:port]` as a browser sends it in `Origin` (no path, no trailing slash, no
/// wildcard); empty entries are ignored.
pub fn parse_origins(list: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for raw in list {
        let origin = raw.trim();
        if origin.is_empty() {
            continue;
        }
        let rest = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"));
        let valid = rest.is_some_and(|host| {
            !host.is_empty()
                && !host.contains(['/', '?', '#', '@', '*'])
                && !host.chars().any(char::is_whitespace)
                && header::HeaderValue::from_str(origin).is_ok()
        });
        if !valid {
            return Err(format!(
                "DSH_CORS_ORIGINS: `{origin}` is not an origin; list exact origins such as \
                 `https://app.example` or `http://127.0.0.1:3000` (scheme, host and port only)"
            ));
        }
        out.push(origin.to_ascii_lowercase());
    }
    Ok(out)
}

/// The CORS middleware for these (already parsed) origins; it does nothing when there are none.
pub fn layer(origins: &[String]) -> Condition<Cors> {
    let mut cors = Cors::default()
        .allowed_methods(METHODS)
        .allowed_headers(REQUEST_HEADERS)
        .expose_headers(EXPOSED_HEADERS)
        .max_age(MAX_AGE)
        .block_on_origin_mismatch(false);
    for origin in origins {
        cors = cors.allowed_origin(origin);
    }
    Condition::new(!origins.is_empty(), cors)
}

/// Turns `actix-cors`'s plain-text refusal of a preflight into a `cors-refused` problem.
pub async fn refusals_as_problems<B: MessageBody>(
    req: ServiceRequest,
    next: impl Rest<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let res = next.call(req).await?;
    if !preflight || res.status() != StatusCode::BAD_REQUEST {
        return Ok(res.map_into_left_body());
    }
    let (req, res) = res.into_parts();
    let reason = actix_web::body::to_bytes_limited(res.into_body(), 1024)
        .await
        .ok()
        .and_then(Result::ok)
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let err = ApiError::new(
        Code::CorsRefused,
        format!(
            "CORS preflight refused: {reason}. Only the origins in DSH_CORS_ORIGINS may call \
             this API from a browser, with methods GET, POST, PUT, DELETE and headers {}",
            REQUEST_HEADERS.join(", ")
        ),
    );
    Ok(ServiceResponse::new(req, err.error_response()).map_into_right_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &[&str]) -> Result<Vec<String>, String> {
        parse_origins(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn exact_origins_are_kept_lowercased_and_blanks_dropped() {
        assert_eq!(
            parse(&["https://App.Example", " http://127.0.0.1:3000 ", ""]).unwrap(),
            ["https://app.example", "http://127.0.0.1:3000"]
        );
        assert!(parse(&[]).unwrap().is_empty());
    }

    #[test]
    fn paths_wildcards_and_bare_hosts_are_refused_with_the_entry_named() {
        for bad in [
            "https://app.example/",
            "https://app.example/path",
            "*",
            "https://*.example",
            "app.example",
            "ftp://app.example",
            "https://",
            "https://user@app.example",
        ] {
            let err = parse(&[bad]).unwrap_err();
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
