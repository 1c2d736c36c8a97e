//! The wire form of a request-rate decision ([`RateDecision`]): the IETF
//! `RateLimit-Policy` / `RateLimit` headers (draft-ietf-httpapi-ratelimit-headers, structured
//! fields) on every response of a rate-limited caller, `Retry-After` and a `rate-limited`
//! problem on a refusal.
//!
//! ```text
//! RateLimit-Policy: "default";q=100;w=1     100 requests per 1-second window
//! RateLimit: "default";r=42;t=1             42 left, all back within 1 s
//! Retry-After: 1                            (429 only)
//! ```

use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::{HttpResponse, HttpResponseBuilder, ResponseError};

use super::{ApiError, Code};
use crate::limits::RateDecision;

pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `"default";q=<rate>;w=1`: the key's quota per one-second window.
pub fn policy_value(d: &RateDecision) -> String {
    format!("\"default\";q={};w=1", d.limit)
}

/// `"default";r=<remaining>;t=<seconds until the quota is whole again>`.
pub fn limit_value(d: &RateDecision) -> String {
    format!("\"default\";r={};t={}", d.remaining, d.reset_secs)
}

/// The headers of `d`: both rate-limit fields, and `Retry-After` when refused.
pub fn headers(d: &RateDecision) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = vec![
        (RATELIMIT_POLICY, value(policy_value(d))),
        (RATELIMIT, value(limit_value(d))),
    ];
    if !d.allowed {
        out.push((header::RETRY_AFTER, HeaderValue::from(d.retry_after_secs)));
    }
    out
}

fn value(s: String) -> HeaderValue {
    // Digits, quotes, `;` and `=` only: always a valid header value.
    HeaderValue::try_from(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Adds the headers of `d` to a response being built.
pub fn apply<'a>(
    res: &'a mut HttpResponseBuilder,
    d: &RateDecision,
) -> &'a mut HttpResponseBuilder {
    for h in headers(d) {
        res.insert_header(h);
    }
    res
}

/// Adds the headers of `d` to a finished response (e.g. in a middleware).
pub fn insert(map: &mut HeaderMap, d: &RateDecision) {
    for (name, value) in headers(d) {
        map.insert(name, value);
    }
}

/// The problem for a refused request.
pub fn refusal(d: &RateDecision) -> ApiError {
    ApiError::new(
        Code::RateLimited,
        format!(
            "this API key may make {} requests per second and has used them up; retry in {} s",
            d.limit,
            d.retry_after_secs.max(1)
        ),
    )
}

/// The whole 429 answer to a refused request: the problem with every rate-limit header.
pub fn refused_response(d: &RateDecision) -> HttpResponse {
    let mut res = refusal(d).error_response();
    insert(res.headers_mut(), d);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(allowed: bool) -> RateDecision {
        RateDecision {
            allowed,
            limit: 100,
            remaining: if allowed { 42 } else { 0 },
            reset_secs: 1,
            retry_after_secs: if allowed { 0 } else { 1 },
        }
    }

    #[test]
    fn an_allowed_request_carries_the_policy_and_what_is_left_in_structured_form() {
        let h = headers(&decision(true));
        assert_eq!(
            h,
            vec![
                (
                    RATELIMIT_POLICY,
                    HeaderValue::from_static("\"default\";q=100;w=1")
                ),
                (RATELIMIT, HeaderValue::from_static("\"default\";r=42;t=1")),
            ]
        );
    }

    #[test]
    fn a_refused_request_is_a_429_problem_with_retry_after_and_both_rate_limit_headers() {
        let res = refused_response(&decision(false));
        assert_eq!(res.status().as_u16(), 429);
        let get = |n: &str| res.headers().get(n).and_then(|v| v.to_str().ok());
        assert_eq!(get("retry-after"), Some("1"));
        assert_eq!(get("ratelimit-policy"), Some("\"default\";q=100;w=1"));
        assert_eq!(get("ratelimit"), Some("\"default\";r=0;t=1"));
        assert_eq!(get("content-type"), Some("application/problem+json"));
        let mut b = HttpResponse::Ok();
        let res = apply(&mut b, &decision(true)).finish();
        assert_eq!(
            res.headers().get("ratelimit").and_then(|v| v.to_str().ok()),
            Some("\"default\";r=42;t=1")
        );
        assert!(res.headers().get("retry-after").is_none());
    }
}
