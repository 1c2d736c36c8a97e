//! Browsers on other origins: the `DSH_CORS_ORIGINS` allow-list as a browser sees it, with
//! preflights and actual requests sent by hand (`Origin`, `Access-Control-Request-*`).

use dsh_plan::config::Settings;
use dsh_plan::startup::Application;
use reqwest::header::{HeaderMap, CONTENT_TYPE, ORIGIN};
use reqwest::Method;

use crate::helpers::{spawn_with, TestApp};

const ALLOWED: &str = "http://app.test:3000";
const OTHER: &str = "http://evil.test:3000";

async fn with_origins(origins: &[&str]) -> TestApp {
    let origins: Vec<String> = origins.iter().map(|o| o.to_string()).collect();
    spawn_with(None, "a", |s| s.cors_origins = origins).await
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A header's comma-separated values, lowercased and sorted.
fn list(headers: &HeaderMap, name: &str) -> Vec<String> {
    let mut out: Vec<String> = header(headers, name)
        .unwrap_or_default()
        .split(',')
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .collect();
    out.sort();
    out
}

async fn preflight(app: &TestApp, origin: &str, method: &str, headers: &str) -> reqwest::Response {
    app.client
        .request(Method::OPTIONS, app.url("/v1/sessions"))
        .header(ORIGIN, origin)
        .header("access-control-request-method", method)
        .header("access-control-request-headers", headers)
        .send()
        .await
        .expect("the server answers")
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered_with_the_allowed_methods_and_headers() {
    let app = with_origins(&[ALLOWED]).await;
    let res = preflight(&app, ALLOWED, "POST", "authorization,content-type").await;
    assert!(res.status().is_success(), "{res:?}");
    let h = res.headers();
    assert_eq!(header(h, "access-control-allow-origin"), Some(ALLOWED));
    assert_eq!(
        list(h, "access-control-allow-methods"),
        ["delete", "get", "post", "put"]
    );
    assert_eq!(
        list(h, "access-control-allow-headers"),
        [
            "authorization",
            "content-type",
            "idempotency-key",
            "if-match",
            "last-event-id"
        ]
    );
    assert_eq!(header(h, "access-control-max-age"), Some("600"));
    assert_eq!(header(h, "access-control-allow-credentials"), None);
    assert!(list(h, "vary").contains(&"origin".to_owned()), "{h:?}");
}

#[tokio::test]
async fn a_preflight_from_another_origin_is_refused_with_a_problem_and_no_allow_origin() {
    let app = with_origins(&[ALLOWED]).await;
    for (origin, method, headers, why) in [
        (OTHER, "POST", "content-type", "Origin is not allowed"),
        // An exact origin: another port or scheme of the same host is another origin.
        ("http://app.test:3001", "POST", "content-type", "Origin"),
        ("https://app.test:3000", "POST", "content-type", "Origin"),
        (ALLOWED, "PATCH", "content-type", "method is not allowed"),
        (ALLOWED, "POST", "x-custom", "headers are not allowed"),
    ] {
        let res = preflight(&app, origin, method, headers).await;
        assert_eq!(res.status(), 403, "{origin} {method} {headers}");
        let h = res.headers().clone();
        assert_eq!(header(&h, "access-control-allow-origin"), None, "{origin}");
        assert_eq!(header(&h, "content-type"), Some("application/problem+json"));
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["code"], "cors-refused", "{body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains(why),
            "{origin} {method} {headers}: {detail}"
        );
        assert!(detail.contains("DSH_CORS_ORIGINS"), "{detail}");
    }
}

#[tokio::test]
async fn answers_to_an_allowed_origin_carry_allow_origin_errors_and_event_streams_included() {
    let app = with_origins(&[OTHER, ALLOWED]).await;
    let created = app
        .client
        .post(app.url("/v1/sessions"))
        .header(ORIGIN, ALLOWED)
        .header(CONTENT_TYPE, "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let h = created.headers();
    assert_eq!(header(h, "access-control-allow-origin"), Some(ALLOWED));
    assert_eq!(
        list(h, "access-control-expose-headers"),
        [
            "etag",
            "idempotent-replayed",
            "location",
            "ratelimit",
            "ratelimit-policy",
            "retry-after",
            "x-request-id"
        ]
    );
    let sid = created.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let with_origin = |method: Method, path: &str| {
        app.client
            .request(method, app.url(path))
            .header(ORIGIN, ALLOWED)
    };
    for (what, req, status) in [
        (
            "a 404 problem",
            with_origin(Method::GET, "/v1/sessions/nosuchsession"),
            404,
        ),
        (
            "a 415 problem",
            with_origin(Method::POST, "/v1/sessions"),
            415,
        ),
        (
            "a 422 problem",
            with_origin(Method::PUT, &format!("/v1/sessions/{sid}/agents/main/plan"))
                .header(CONTENT_TYPE, "application/json")
                .body("{}"),
            422,
        ),
        (
            "the event stream",
            with_origin(
                Method::GET,
                &format!("/v1/sessions/{sid}/events?max_events=1&max_ms=1000"),
            ),
            200,
        ),
    ] {
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), status, "{what}");
        assert_eq!(
            header(res.headers(), "access-control-allow-origin"),
            Some(ALLOWED),
            "{what}"
        );
    }
}

#[tokio::test]
async fn a_request_from_another_origin_gets_no_allow_origin_so_its_page_cannot_read_it() {
    let app = with_origins(&[ALLOWED]).await;
    let res = app
        .client
        .get(app.url("/v1/status"))
        .header(ORIGIN, OTHER)
        .send()
        .await
        .unwrap();
    // Not blocked (curl and servers send any Origin they like), only not readable in a browser.
    assert_eq!(res.status(), 200);
    assert_eq!(header(res.headers(), "access-control-allow-origin"), None);
}

#[tokio::test]
async fn a_same_origin_post_works_whatever_the_list_says() {
    let app = with_origins(&[ALLOWED]).await;
    // A browser sends `Origin` on a same-origin POST too (the web client at `/`).
    let own = app.address.clone();
    let created = app
        .client
        .post(app.url("/v1/sessions"))
        .header(ORIGIN, own)
        .header(CONTENT_TYPE, "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let sid = created.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let put = app
        .client
        .put(app.url(&format!("/v1/sessions/{sid}/agents/main/plan")))
        .header(ORIGIN, app.address.as_str())
        .header(CONTENT_TYPE, "application/json")
        .body(r#"{"active":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
}

#[tokio::test]
async fn without_origins_no_cors_headers_are_sent_at_all() {
    let app = with_origins(&[]).await;
    let res = preflight(&app, ALLOWED, "POST", "content-type").await;
    let actual = app
        .client
        .get(app.url("/v1/status"))
        .header(ORIGIN, ALLOWED)
        .send()
        .await
        .unwrap();
    assert_eq!(actual.status(), 200);
    for h in [res.headers(), actual.headers()] {
        let cors: Vec<_> = h
            .keys()
            .filter(|k| k.as_str().starts_with("access-control-"))
            .collect();
        assert!(cors.is_empty(), "{h:?}");
    }
}

#[tokio::test]
async fn an_allow_list_entry_that_is_not_an_origin_stops_startup() {
    for bad in ["https://app.example/", "*", "app.example"] {
        let mut settings = Settings::local(None);
        settings.cors_origins = vec![ALLOWED.to_owned(), bad.to_owned()];
        let err = Application::build(settings)
            .await
            .err()
            .expect("a bad origin stops startup")
            .to_string();
        assert!(
            err.contains("DSH_CORS_ORIGINS") && err.contains(bad),
            "{err}"
        );
    }
}
