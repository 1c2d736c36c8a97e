use std::time::{Duration, Instant};

use dsh_plan::store::redis::Conn;

use crate::helpers::{spawn_replica, TestRedis};
use crate::on_both_stores;

struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    body: Option<(Vec<u8>, &'static str)>,
    status: u16,
    code: &'static str,
}

fn cases(sid: &str) -> Vec<Case> {
    let plan = format!("/v1/sessions/{sid}/agents/main/plan");
    let json = |b: &str| Some((b.as_bytes().to_vec(), "application/json"));
    let c = |what, method, path: &str, body, status, code| Case {
        what,
        method,
        path: path.into(),
        body,
        status,
        code,
    };
    vec![
        c(
            "malformed JSON",
            "PUT",
            &plan,
            json("{\"active\":"),
            400,
            "malformed-json",
        ),
        c(
            "a scope that is not a string (valid JSON: a body that does not fit)",
            "POST",
            &format!("/v1/sessions/{sid}/tokens"),
            json(r#"{"scopes":[1]}"#),
            422,
            "invalid-body",
        ),
        c(
            "an array where the body is an object (serde reads structs from arrays)",
            "POST",
            "/v1/sessions",
            json("[]"),
            422,
            "invalid-body",
        ),
        c(
            "wrong type",
            "PUT",
            &plan,
            json(r#"{"active":"yes"}"#),
            422,
            "invalid-body",
        ),
        c(
            "unknown field",
            "PUT",
            &plan,
            json(r#"{"active":true,"force":true}"#),
            422,
            "invalid-body",
        ),
        c(
            "missing field",
            "PUT",
            &plan,
            json("{}"),
            422,
            "invalid-body",
        ),
        c(
            "not JSON content type",
            "PUT",
            &plan,
            Some((br#"{"active":true}"#.to_vec(), "text/plain")),
            415,
            "unsupported-media-type",
        ),
        c(
            "body over 64 KiB",
            "PUT",
            &plan,
            Some((
                format!(r#"{{"active":true,"x":"{}"}}"#, "a".repeat(70_000)).into_bytes(),
                "application/json",
            )),
            413,
            "payload-too-large",
        ),
        c(
            "oversize optional body",
            "POST",
            &format!("/v1/sessions/{sid}/agents"),
            Some((vec![b' '; 70_000], "application/json")),
            413,
            "payload-too-large",
        ),
        c(
            "unknown field on spawn",
            "POST",
            &format!("/v1/sessions/{sid}/agents"),
            json(r#"{"parent":"main"}"#),
            422,
            "invalid-body",
        ),
        c(
            "unknown owner",
            "POST",
            &format!("/v1/sessions/{sid}/agents"),
            json(r#"{"owner":"ghost"}"#),
            422,
            "owner-not-found",
        ),
        c(
            "malformed owner",
            "POST",
            &format!("/v1/sessions/{sid}/agents"),
            json(r#"{"owner":"Not An Id"}"#),
            422,
            "invalid-body",
        ),
        c(
            "malformed agent id",
            "PUT",
            &format!("/v1/sessions/{sid}/agents/BAD%20ID/plan"),
            json(r#"{"active":true}"#),
            400,
            "invalid-id",
        ),
        c(
            "malformed session id",
            "GET",
            "/v1/sessions/a%7Bb%7D",
            None,
            400,
            "invalid-id",
        ),
        c(
            "overlong session id",
            "GET",
            &format!("/v1/sessions/{}", "s".repeat(65)),
            None,
            400,
            "invalid-id",
        ),
        c(
            "unknown agent",
            "PUT",
            &format!("/v1/sessions/{sid}/agents/ghost/plan"),
            json(r#"{"active":true}"#),
            404,
            "agent-not-found",
        ),
        c(
            "unknown agent read",
            "GET",
            &format!("/v1/sessions/{sid}/agents/ghost"),
            None,
            404,
            "agent-not-found",
        ),
        c(
            "unknown session",
            "PUT",
            "/v1/sessions/nosuchsession/agents/main/plan",
            json(r#"{"active":true}"#),
            404,
            "session-not-found",
        ),
        c(
            "unknown session log",
            "GET",
            "/v1/sessions/nosuchsession/log",
            None,
            404,
            "session-not-found",
        ),
        c(
            "unknown session projection",
            "GET",
            "/v1/sessions/nosuchsession/projections/plan",
            None,
            404,
            "session-not-found",
        ),
        c(
            "bad cursor",
            "GET",
            &format!("/v1/sessions/{sid}/log?after=abc"),
            None,
            400,
            "invalid-query",
        ),
        c(
            "limit out of range",
            "GET",
            &format!("/v1/sessions/{sid}/log?limit=0"),
            None,
            400,
            "invalid-query",
        ),
        c(
            "limit not a number",
            "GET",
            &format!("/v1/sessions/{sid}/log?limit=ten"),
            None,
            400,
            "invalid-query",
        ),
        c(
            "unknown query parameter",
            "GET",
            &format!("/v1/sessions/{sid}/log?afer=1-0"),
            None,
            400,
            "invalid-query",
        ),
        c(
            "unknown route",
            "GET",
            "/v1/nothing-here",
            None,
            404,
            "not-found",
        ),
    ]
}

on_both_stores! {
    async fn bad_input_gets_a_problem_and_appends_nothing(app: TestApp) {
        let sid = app.create_session().await;
        app.set_plan(&sid, "main", true).await.ok();
        let before = app.events(&sid).await;
        for case in cases(&sid) {
            let method = reqwest::Method::from_bytes(case.method.as_bytes()).unwrap();
            let mut req = app.client.request(method, app.url(&case.path));
            if let Some((body, ty)) = case.body {
                req = req.header("content-type", ty).body(body);
            }
            let reply = app.send(req).await;
            let detail = reply.assert_problem(case.status, case.code);
            assert!(detail.len() > 10, "{}: the detail explains: {detail}", case.what);
        }
        assert_eq!(app.events(&sid).await, before, "rejected requests append nothing");
        // The worker that rejected all of that still serves.
        assert_eq!(app.plan(&sid, "main").await.ok(), serde_json::json!({"active": true}));
    }
}

#[tokio::test]
async fn redis_down_answers_503_with_retry_after_and_no_hang() {
    // Its own server even under REDIS_URL: this test stops it.
    let mut redis = TestRedis::start_private().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    redis.kill();
    let started = Instant::now();
    for reply in [
        app.set_plan(&sid, "main", true).await,
        app.plan(&sid, "main").await,
        app.get("/readyz").await,
    ] {
        reply.assert_problem(503, "store-unavailable");
        assert_eq!(reply.retry_after.as_deref(), Some("1"));
        assert!(
            !reply.body["detail"].as_str().unwrap().contains("127.0.0.1"),
            "5xx bodies are opaque"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "failed fast: {:?}",
        started.elapsed()
    );
    assert_eq!(
        app.get("/healthz").await.status,
        200,
        "liveness does not depend on Redis"
    );
}

/// The replica's command connections to Redis, as `CLIENT LIST` names them: every RESP2
/// client but the one asking (its live subscriber speaks RESP3).
async fn replica_clients(conn: &mut Conn) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query_async(conn)
        .await
        .unwrap();
    let resp2 = list.lines().filter(|l| l.contains(" resp=2")).count();
    resp2.saturating_sub(1)
}

#[tokio::test]
async fn writes_resume_after_redis_drops_every_connection_of_the_replica() {
    // Its own server even under REDIS_URL: this test kills every client of it.
    let redis = TestRedis::start_private().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let mut conn = redis.conn().await;
    // Before any request: the connections the replica opened to start.
    let shared = replica_clients(&mut conn).await;
    let sid = app.create_session().await;
    // An HTTP worker's requests go on a connection of its own once it has opened it.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut active = false;
    while replica_clients(&mut conn).await <= shared {
        assert!(
            Instant::now() < deadline,
            "the worker never opened its own connection"
        );
        active = !active;
        assert_eq!(app.set_plan(&sid, "main", active).await.status, 200);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        killed as usize > shared,
        "killed {killed}, the worker's included"
    );
    // Writes fail fast meanwhile (503) and succeed again once the connections are back.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut acknowledged = 0;
    while acknowledged < 20 {
        assert!(
            Instant::now() < deadline,
            "writes did not resume after the connections dropped"
        );
        let reply = app.set_plan(&sid, "main", !active).await;
        match reply.status.as_u16() {
            200 => {
                active = !active;
                acknowledged += 1;
            }
            _ => {
                reply.assert_problem(503, "store-unavailable");
            }
        }
    }
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        serde_json::json!({"active": active}),
        "the log holds the last acknowledged write"
    );
}

on_both_stores! {
    async fn random_bodies_and_ids_never_reach_a_5xx_or_append(app: TestApp) {
        let sid = app.create_session().await;
        let before = app.events(&sid).await;
        // A small deterministic generator: JSON-ish fragments, raw bytes and odd ids.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let pieces = ["{", "}", "\"active\"", ":", "true", "null", "[", "]", ",", "\"owner\"", "1e999", "\u{0}", "\"\\ud800\"", " ", "\"main\""];
        let mut accepted_writes = 0;
        for _ in 0..300 {
            let len = (next() % 12) as usize;
            let body: String = (0..len).map(|_| pieces[(next() % pieces.len() as u64) as usize]).collect();
            let agent = ["main", "", "%7B%7D", "..", "a%00b", "x".repeat(70).as_str()][(next() % 6) as usize].to_owned();
            let (method, path) = match next() % 3 {
                0 => (reqwest::Method::PUT, format!("/v1/sessions/{sid}/agents/{agent}/plan")),
                1 => (reqwest::Method::POST, format!("/v1/sessions/{sid}/agents")),
                _ => (reqwest::Method::GET, format!("/v1/sessions/{sid}/log?after={agent}")),
            };
            let req = app.client.request(method, app.url(&path)).header("content-type", "application/json").body(body.clone());
            let reply = app.send(req).await;
            assert!(reply.status.as_u16() < 500, "{path} {body:?} -> {reply:?}");
            if !reply.status.is_success() {
                assert_eq!(reply.content_type, "application/problem+json", "{path} {body:?}");
            } else if reply.status == 201 || ["committed", "queued", "cancelled"].contains(&reply.body["outcome"].as_str().unwrap_or("")) {
                accepted_writes += 1;
            }
        }
        // Only the requests that were accepted appended, one event each.
        assert_eq!(app.events(&sid).await.len(), before.len() + accepted_writes);
        assert_eq!(app.get("/healthz").await.status, 200);
    }
}
