//! Writes must be JSON (a foreign page's "simple" requests are refused before any handler), and
//! every response carries the browser security headers.

use dsh_plan::http::guard::{API_CSP, DOCS_CSP};
use reqwest::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use reqwest::Method;
use serde_json::json;

use crate::helpers::{spawn_replica, TestRedis};

/// Every write route, with a body that would be accepted as JSON.
fn writes(sid: &str) -> Vec<(Method, String, &'static str)> {
    let s = format!("/v1/sessions/{sid}");
    let main = format!("{s}/agents/main");
    vec![
        (Method::POST, "/v1/sessions".into(), "{}"),
        (Method::POST, format!("{s}/agents"), "{}"),
        (Method::POST, format!("{s}/fork"), "{}"),
        (Method::POST, format!("{s}/compact"), "{}"),
        (Method::PUT, format!("{main}/plan"), r#"{"active":true}"#),
        (Method::POST, format!("{main}/messages"), r#"{"text":"hi"}"#),
        (
            Method::POST,
            format!("{main}/commands"),
            r#"{"input":"/plan go"}"#,
        ),
        (Method::POST, format!("{main}/cancel"), "{}"),
        (
            Method::POST,
            format!("{s}/questions/q-1/answer"),
            r#"{"label":"Approve"}"#,
        ),
        (Method::POST, format!("{s}/questions/q-1/dismiss"), "{}"),
    ]
}

async fn keys(redis: &TestRedis) -> Vec<String> {
    let mut conn = redis.conn().await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", redis.prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    keys
}

#[tokio::test]
async fn writes_without_a_json_content_type_get_415_and_append_nothing() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    let events = app.events(&sid).await;
    let stored = keys(&redis).await;
    // What a cross-site form or `fetch(.., {mode: "no-cors"})` can send without a preflight:
    // no body and no type, or a text, form or multipart body.
    let simple = [
        None,
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ];
    for (method, path, body) in writes(&sid) {
        for content_type in simple {
            let mut req = app.client.request(method.clone(), app.url(&path));
            if let Some(ty) = content_type {
                req = req.header(CONTENT_TYPE, ty).body(body);
            }
            let reply = app.send(req).await;
            let detail = reply.assert_problem(415, "unsupported-media-type");
            assert!(
                detail.contains("application/json"),
                "{method} {path} {content_type:?}: {detail}"
            );
        }
    }
    assert_eq!(app.events(&sid).await, events, "the session is unchanged");
    assert_eq!(keys(&redis).await, stored, "no session was created");
}

#[tokio::test]
async fn json_writes_are_accepted_with_parameters_suffixes_or_no_body() {
    let app = spawn_replica(None, "a").await;
    let post = |path: &str, content_type: &'static str, body: &'static str| {
        app.client
            .post(app.url(path))
            .header(CONTENT_TYPE, content_type)
            .body(body)
    };
    let created = app
        .send(post("/v1/sessions", "application/json; charset=utf-8", ""))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let sid = created.body["id"].as_str().unwrap().to_owned();
    let spawned = app
        .send(post(
            &format!("/v1/sessions/{sid}/agents"),
            "application/merge-patch+json",
            r#"{"owner":"main"}"#,
        ))
        .await;
    assert_eq!(spawned.status, 201, "{spawned:?}");
    let cancelled = app
        .send(post(
            &format!("/v1/sessions/{sid}/agents/main/cancel"),
            "Application/JSON",
            "",
        ))
        .await
        .ok();
    assert_eq!(cancelled, json!({"turn": null}));
}

#[tokio::test]
async fn reads_and_deletes_need_no_content_type() {
    let app = spawn_replica(None, "a").await;
    let sid = app.create_session().await;
    app.get(&format!("/v1/sessions/{sid}")).await.ok();
    let delete = app
        .send(app.client.delete(app.url(&format!("/v1/sessions/{sid}"))))
        .await;
    assert_ne!(delete.status, 415, "{delete:?}");
}

async fn headers_of(req: reqwest::RequestBuilder) -> reqwest::header::HeaderMap {
    req.send()
        .await
        .expect("the server answers")
        .headers()
        .clone()
}

#[track_caller]
fn assert_guarded(what: &str, headers: &reqwest::header::HeaderMap, csp: &str) {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert_eq!(get("x-content-type-options"), "nosniff", "{what}");
    assert_eq!(get("referrer-policy"), "no-referrer", "{what}");
    assert_eq!(get("x-frame-options"), "DENY", "{what}");
    assert_eq!(get(CONTENT_SECURITY_POLICY.as_str()), csp, "{what}");
}

#[tokio::test]
async fn every_response_carries_the_security_headers() {
    let app = spawn_replica(None, "a").await;
    let sid = app.create_session().await;
    let get = |path: &str| app.client.get(app.url(path));
    for (what, path) in [
        ("JSON", format!("/v1/sessions/{sid}")),
        ("a problem", "/v1/sessions/nosuchsession".to_owned()),
        ("no route", "/nothing-here".to_owned()),
        ("the spec", "/openapi.json".to_owned()),
        ("metrics", "/metrics".to_owned()),
        (
            "the event stream",
            format!("/v1/sessions/{sid}/events?max_events=1&max_ms=1000"),
        ),
    ] {
        assert_guarded(what, &headers_of(get(&path)).await, API_CSP);
    }
    let refused = app.client.post(app.url("/v1/sessions"));
    assert_guarded("a 415", &headers_of(refused).await, API_CSP);
    assert_guarded("Swagger UI", &headers_of(get("/docs/")).await, DOCS_CSP);
    let swagger_js = get("/docs/swagger-ui-bundle.js");
    assert_guarded("its script", &headers_of(swagger_js).await, DOCS_CSP);
}

#[tokio::test]
async fn the_web_client_keeps_its_own_strict_policy_and_cannot_be_framed() {
    let app = spawn_replica(None, "a").await;
    for path in ["/", "/app.js"] {
        let headers = headers_of(app.client.get(app.url(path))).await;
        let csp = headers[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(csp.starts_with("default-src 'self';"), "{path}: {csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert_eq!(headers.get_all(CONTENT_SECURITY_POLICY).iter().count(), 1);
        assert_eq!(headers["x-frame-options"], "DENY");
        assert_eq!(headers["x-content-type-options"], "nosniff");
    }
}
