//! What the spec promises about every request: each operation's problem codes, 405 with
//! `Allow`, and an `X-Request-Id` on every answer that problems echo.

use serde_json::{json, Value};

use crate::auth::{mint, AcmeSession};
use crate::helpers::{spawn_replica, TestApp};

async fn request(
    app: &TestApp,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<(&str, &str)>,
) -> crate::helpers::Reply {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = app.client.request(method, app.url(path));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some((content_type, body)) = body {
        req = req
            .header("content-type", content_type)
            .body(body.to_owned());
    }
    app.send(req).await
}

#[tokio::test]
async fn a_wrong_method_on_a_known_path_gets_405_with_the_methods_it_takes() {
    let app = spawn_replica(None, "a").await;
    let sid = app.create_session().await;
    let plan = format!("/v1/sessions/{sid}/agents/main/plan");
    let json = Some(("application/json", "{}"));
    for (method, path, body, allow) in [
        (
            "PATCH",
            format!("/v1/sessions/{sid}"),
            json,
            "GET, HEAD, DELETE",
        ),
        ("DELETE", plan.clone(), None, "GET, HEAD, PUT"),
        ("POST", plan.clone(), json, "GET, HEAD, PUT"),
        ("PUT", "/v1/sessions".to_owned(), json, "GET, HEAD, POST"),
        // Not JSON either: the wrong method is the answer, not the content type.
        ("POST", "/v1/status".to_owned(), None, "GET, HEAD"),
        ("DELETE", "/".to_owned(), None, "GET, HEAD"),
        ("POST", "/openapi.json".to_owned(), None, "GET, HEAD"),
        ("OPTIONS", "/healthz".to_owned(), None, "GET, HEAD"),
    ] {
        let url = app.url(&path);
        let mut req = app
            .client
            .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url);
        if let Some((ty, b)) = body {
            req = req.header("content-type", ty).body(b);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 405, "{method} {path}");
        assert_eq!(
            res.headers()["allow"].to_str().unwrap(),
            allow,
            "{method} {path}"
        );
        let reply = request(&app, method, &path, &[], body).await;
        let detail = reply.assert_problem(405, "method-not-allowed");
        assert!(detail.contains(allow), "{detail}");
    }
    // Unknown paths stay 404, and the right methods still work.
    request(&app, "GET", "/v1/nothing-here", &[], None)
        .await
        .assert_problem(404, "not-found");
    request(&app, "PATCH", &format!("/v1/sessions/{sid}/x"), &[], json)
        .await
        .assert_problem(404, "not-found");
    assert_eq!(app.set_plan(&sid, "main", true).await.status, 200);
    assert_eq!(app.plan(&sid, "main").await.status, 200);
}

#[tokio::test]
async fn every_answer_carries_a_request_id_that_problems_name_in_instance() {
    let app = spawn_replica(None, "a").await;
    let sid = app.create_session().await;
    let is_v7 = |id: &str| uuid::Uuid::parse_str(id).is_ok_and(|u| u.get_version_num() == 7);

    // Drawn by the server when the client sends none: a UUID v7, new for each request.
    let a = app.get("/healthz").await.request_id.unwrap();
    let b = app.get("/healthz").await.request_id.unwrap();
    assert!(is_v7(&a) && is_v7(&b) && a != b, "{a} {b}");

    // A client's plain-token id is kept, on answers of every kind.
    let paths = [
        "/healthz".to_owned(),
        "/".to_owned(),
        "/docs/".to_owned(),
        "/openapi.json".to_owned(),
        format!("/v1/sessions/{sid}"),
        format!("/v1/sessions/{sid}/events?max_ms=10"),
    ];
    for path in &paths {
        let reply = request(
            &app,
            "GET",
            path,
            &[("x-request-id", "trace-42.a:b_c")],
            None,
        )
        .await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(
            reply.request_id.as_deref(),
            Some("trace-42.a:b_c"),
            "{path}"
        );
    }

    // Problems name it: from a handler, from the JSON guard, from the default service.
    let id = [("x-request-id", "client-7")];
    let problems = [
        request(&app, "GET", "/v1/sessions/nosuchsession", &id, None).await,
        request(
            &app,
            "POST",
            "/v1/sessions",
            &id,
            Some(("text/plain", "{}")),
        )
        .await,
        request(&app, "GET", "/v1/nothing", &id, None).await,
        request(&app, "PATCH", "/healthz", &id, None).await,
    ];
    for reply in problems {
        reply.assert_listed_problem();
        assert_eq!(reply.body["instance"], "urn:dsh-plan:request:client-7");
    }

    // Anything that is not a plain token of at most 128 characters is replaced.
    let long = "x".repeat(129);
    for bad in ["has space", "semi;colon", "{}", "a/b", long.as_str()] {
        let reply = request(&app, "GET", "/v1/nothing", &[("x-request-id", bad)], None).await;
        let got = reply.request_id.clone().unwrap();
        assert!(
            is_v7(&got),
            "{bad:?} was replaced by a UUID v7, got {got:?}"
        );
        reply.assert_problem(404, "not-found");
    }
    let max = "y".repeat(128);
    let reply = request(&app, "GET", "/healthz", &[("x-request-id", &max)], None).await;
    assert_eq!(reply.request_id.as_deref(), Some(max.as_str()));
}

#[tokio::test]
async fn the_spec_names_every_operation_and_gives_examples_and_headers_everywhere() {
    let app = spawn_replica(None, "a").await;
    let spec = app.get("/openapi.json").await.ok();
    let mut ids = Vec::new();
    let mut bodies = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_default();
            assert!(
                !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()),
                "{method} {path}: operationId `{id}` reads well in a flat SDK"
            );
            assert!(id.starts_with(|c: char| c.is_ascii_lowercase()), "{id}");
            ids.push(id.to_owned());
            if let Some(content) = op["requestBody"]["content"].as_object() {
                for (media, c) in content {
                    bodies += 1;
                    assert!(
                        c["example"].is_object() || c["examples"].is_object(),
                        "{id}: the {media} request body has an example"
                    );
                }
            }
            for (status, response) in op["responses"].as_object().unwrap() {
                let headers = &response["headers"];
                assert!(
                    headers["X-Request-Id"].is_object(),
                    "{id} {status} declares X-Request-Id"
                );
                if status == "429" || status == "503" {
                    assert!(
                        headers["Retry-After"].is_object(),
                        "{id} {status} declares Retry-After"
                    );
                }
                if let Some(problem) = response["content"]["application/problem+json"].as_object() {
                    let codes = problem["schema"]["allOf"][1]["properties"]["code"]["enum"]
                        .as_array()
                        .unwrap();
                    let examples = problem["examples"].as_object().unwrap();
                    assert!(!codes.is_empty(), "{id} {status}");
                    for code in codes {
                        assert!(
                            examples.contains_key(code.as_str().unwrap()),
                            "{id} {status}: an example of {code}"
                        );
                    }
                }
            }
        }
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "operationIds are unique");
    for expected in ["answerQuestion", "setPlan", "createToken", "streamEvents"] {
        assert!(ids.iter().any(|i| i == expected), "{expected} in {ids:?}");
    }
    assert!(bodies >= 10, "request bodies were checked: {bodies}");
    assert!(spec["components"]["headers"]["X-Request-Id"].is_object());
}

/// Requests that go wrong in every way the table knows, for one operation of the spec.
type Body = Option<(&'static str, &'static str)>;

fn bad_requests(path: &str, method: &str, sid: &str) -> Vec<(String, Body)> {
    let events = path.ends_with("/events");
    let fill = |sid: &str, aid: &str, qid: &str, query: &str| {
        let mut p = path
            .replace("{sid}", sid)
            .replace("{aid}", aid)
            .replace("{qid}", qid);
        // A real stream would not end: bound it.
        let bound = if events { "max_ms=10" } else { "" };
        let query: Vec<&str> = [bound, query]
            .into_iter()
            .filter(|q| !q.is_empty())
            .collect();
        if !query.is_empty() {
            p = format!("{p}?{}", query.join("&"));
        }
        p
    };
    let write = method == "POST" || method == "PUT";
    let json = |b: &'static str| {
        if write {
            Some(("application/json", b))
        } else {
            None
        }
    };
    let mut out = vec![
        (fill("a%7Bb%7D", "main", "q", ""), json("{}")),
        (fill("nosuchsession", "main", "q", ""), json("{}")),
        (fill(sid, "ghost", "nosuch-question", ""), json("{}")),
        (fill(sid, "BAD%20ID", "bad%20id", ""), json("{}")),
    ];
    if write {
        out.push((fill(sid, "main", "q", ""), Some(("text/plain", "{}"))));
        out.push((fill(sid, "main", "q", ""), json("{")));
        out.push((fill(sid, "main", "q", ""), json(r#"{"unknown_field": 1}"#)));
    } else if path.contains("{sid}") {
        out.push((fill(sid, "main", "q", "limit=0&after=x&nope=1"), None));
    }
    out
}

#[tokio::test]
async fn every_problem_answered_to_bad_requests_is_listed_for_its_operation() {
    let acme = AcmeSession::start().await;
    let reader = acme
        .app
        .as_caller(&mint(&acme.acme, &acme.sid, json!({"scopes": ["read"]})).await);
    let spec: Value = serde_json::to_value(dsh_plan::http::openapi()).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut operations = std::collections::BTreeSet::new();
    // Deletes last: they would take the session every other request uses.
    let mut ops: Vec<(String, String)> = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            ops.push((method.to_ascii_uppercase(), path.clone()));
        }
    }
    ops.sort_by_key(|(m, _)| m == "DELETE");
    for (method, path) in ops {
        for (url, body) in bad_requests(&path, &method, &acme.sid) {
            // With a key, with a read-only token, and with nothing (auth is on).
            for caller in [&acme.acme, &reader, &acme.app] {
                let reply = request(caller, &method, &url, &[], body).await;
                if reply.status.is_client_error() || reply.status.is_server_error() {
                    reply.assert_listed_problem();
                    let code = reply.body["code"].as_str().unwrap().to_owned();
                    operations.insert(format!("{method} {path}"));
                    seen.insert(code);
                }
            }
        }
    }
    for code in [
        "invalid-id",
        "session-not-found",
        "agent-not-found",
        "question-not-found",
        "unauthorized",
        "insufficient-scope",
        "unsupported-media-type",
        "malformed-json",
        "invalid-body",
        "invalid-query",
    ] {
        assert!(seen.contains(code), "the requests met `{code}`: {seen:?}");
    }
    assert!(
        operations.len() >= 19,
        "every session operation answered problems: {operations:?}"
    );
}
