//! `Idempotency-Key` on writes: a retry replays the first answer and never records twice, the
//! key with another request is refused, a duplicate while the first runs is told to wait, and
//! it all holds across replicas and tenants. The Redis stall (a 503 whose write committed
//! later) is in `stall.rs`; the store's markers in `store.rs`.

mod proxy;
mod stall;
mod store;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::auth::key_for;
use crate::helpers::{spawn_replica, spawn_with, TestApp, TestRedis};
use crate::mock_provider::{text_reply, MockProvider};
use crate::on_both_stores;

/// An answer with the headers idempotency is about.
#[derive(Debug)]
pub struct Keyed {
    pub status: u16,
    pub replayed: bool,
    pub retry_after: Option<String>,
    pub location: Option<String>,
    pub code: Option<String>,
    pub body: Value,
}

/// Sends `body` with `Idempotency-Key: key`.
pub async fn keyed(app: &TestApp, method: Method, path: &str, key: &str, body: Value) -> Keyed {
    let req = app
        .client
        .request(method, app.url(path))
        .header("Idempotency-Key", key)
        .json(&body);
    let res = req.send().await.expect("the server answers");
    let header = |n: &str| {
        res.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (replayed, retry_after, location) = (
        header("idempotent-replayed"),
        header("retry-after"),
        header("location"),
    );
    assert!(
        replayed.as_deref().is_none_or(|v| v == "true"),
        "{replayed:?}"
    );
    let status = res.status().as_u16();
    let body: Value = serde_json::from_slice(&res.bytes().await.unwrap()).unwrap_or(Value::Null);
    Keyed {
        status,
        replayed: replayed.is_some(),
        retry_after,
        location,
        code: body["code"].as_str().map(str::to_owned),
        body,
    }
}

/// The user messages in the session's log with this text.
pub async fn messages(app: &TestApp, sid: &str, text: &str) -> usize {
    app.events_of_type(sid, "user/message")
        .await
        .iter()
        .filter(|e| e["data"]["text"] == text)
        .count()
}

fn plan_path(sid: &str) -> String {
    format!("/v1/sessions/{sid}/agents/main/plan")
}

fn messages_path(sid: &str) -> String {
    format!("/v1/sessions/{sid}/agents/main/messages")
}

on_both_stores! {
    async fn a_retry_after_its_session_was_deleted_hears_it_is_gone_not_its_old_answer(app: TestApp) {
        let sid = app.create_session().await;
        let plan = format!("/v1/sessions/{sid}/agents/main/plan");
        let first = keyed(&app, Method::PUT, &plan, "flip-1", json!({"active": true})).await;
        assert_eq!((first.status, first.replayed), (200, false));
        let created = keyed(&app, Method::POST, "/v1/sessions", "make-1", json!({})).await;
        assert_eq!(created.status, 201);
        let made = created.body["id"].as_str().unwrap().to_owned();
        for gone in [&sid, &made] {
            let deleted = app.send(app.client.delete(app.url(&format!("/v1/sessions/{gone}")))).await;
            assert_eq!(deleted.status, 204);
        }
        let again = keyed(&app, Method::PUT, &plan, "flip-1", json!({"active": true})).await;
        assert_eq!((again.status, again.code.as_deref()), (404, Some("session-not-found")), "{again:?}");
        assert!(!again.replayed, "nothing of the deleted session is replayed");
        let again = keyed(&app, Method::POST, "/v1/sessions", "make-1", json!({})).await;
        assert_eq!((again.status, again.code.as_deref()), (409, Some("already-applied")), "{again:?}");
        assert!(again.location.is_none(), "no link to a session that is gone");
        // An empty body and `{}` are one request to a route whose body is optional.
        let empty = app
            .send(
                app.client
                    .post(app.url("/v1/sessions"))
                    .header("Idempotency-Key", "make-2")
                    .header("content-type", "application/json"),
            )
            .await;
        assert_eq!(empty.status, 201);
        let same = keyed(&app, Method::POST, "/v1/sessions", "make-2", json!({})).await;
        assert_eq!((same.status, same.replayed), (201, true), "{same:?}");
    }

    async fn a_message_retried_with_its_key_is_recorded_once_and_answered_the_same(app: TestApp) {
        let sid = app.create_session().await;
        let path = messages_path(&sid);
        let send = || keyed(&app, Method::POST, &path, "msg-1", json!({"text": "hello"}));
        let first = send().await;
        assert_eq!(first.status, 202, "{first:?}");
        assert!(!first.replayed, "a first answer is no replay");
        let again = send().await;
        assert_eq!((again.status, again.replayed), (202, true), "{again:?}");
        assert_eq!(again.body, first.body);
        let turn = first.body["turn"].as_str().unwrap();
        app.await_turn_end(&sid, turn).await;
        // Still the same answer once the turn is over: no second turn.
        let late = send().await;
        assert_eq!((late.replayed, &late.body), (true, &first.body));
        assert_eq!(messages(&app, &sid, "hello").await, 1);
        assert_eq!(app.events_of_type(&sid, "turn/started").await.len(), 1);
    }

    async fn a_key_sent_with_another_body_or_path_is_refused_and_appends_nothing(app: TestApp) {
        let sid = app.create_session().await;
        let first = keyed(&app, Method::PUT, &plan_path(&sid), "flip", json!({"active": true})).await;
        assert_eq!((first.status, first.body["outcome"].as_str()), (200, Some("committed")));
        let before = app.events(&sid).await;
        // Spacing and key order are not a different request.
        let same = app.client.put(app.url(&plan_path(&sid)))
            .header("Idempotency-Key", "flip")
            .header("content-type", "application/json")
            .body("{ \"active\" :true }");
        let same = app.send(same).await;
        assert_eq!((same.status.as_u16(), &same.body), (200, &first.body));
        for (method, path, body) in [
            (Method::PUT, plan_path(&sid), json!({"active": false})),
            (Method::POST, messages_path(&sid), json!({"text": "hi"})),
            (Method::POST, format!("/v1/sessions/{sid}/agents"), json!({})),
        ] {
            let reused = keyed(&app, method, &path, "flip", body).await;
            assert_eq!(reused.status, 422, "{reused:?}");
            assert_eq!(reused.code.as_deref(), Some("idempotency-key-reused"));
        }
        assert_eq!(app.events(&sid).await, before, "a refused key appends nothing");
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
    }

    async fn a_malformed_key_is_refused_with_400_and_appends_nothing(app: TestApp) {
        let sid = app.create_session().await;
        let before = app.events(&sid).await;
        let put = |value: &[u8]| {
            app.client.put(app.url(&plan_path(&sid)))
                .header("Idempotency-Key", reqwest::header::HeaderValue::from_bytes(value).unwrap())
                .json(&json!({"active": true}))
        };
        let long = "k".repeat(256);
        for req in [
            put(b""),
            put(long.as_bytes()),
            put("clé".as_bytes()),
            put(b"a").header("Idempotency-Key", "b"),
        ] {
            app.send(req).await.assert_problem(400, "invalid-idempotency-key");
        }
        assert_eq!(app.events(&sid).await, before);
        let longest = keyed(&app, Method::PUT, &plan_path(&sid), &"k".repeat(255), json!({"active": true})).await;
        assert_eq!(longest.status, 200, "{longest:?}");
    }

    async fn a_session_created_with_a_key_is_created_once(app: TestApp) {
        let create = || keyed(&app, Method::POST, "/v1/sessions", "new-session", json!({}));
        let first = create().await;
        assert_eq!(first.status, 201, "{first:?}");
        let sid = first.body["id"].as_str().unwrap().to_owned();
        let again = create().await;
        assert_eq!((again.status, again.replayed, &again.body), (201, true, &first.body));
        assert_eq!(again.location, Some(format!("/v1/sessions/{sid}")), "headers a client needs are replayed");
        // Forks too: the retry names the fork made first.
        let path = format!("/v1/sessions/{sid}/fork");
        let fork = || keyed(&app, Method::POST, &path, "fork-1", json!({}));
        let (f1, f2) = (fork().await, fork().await);
        assert_eq!(f1.status, 201, "{f1:?}");
        assert_eq!((f2.replayed, &f2.body["id"]), (true, &f1.body["id"]));
        assert_ne!(f1.body["id"], first.body["id"]);
    }

    async fn a_replayed_problem_names_the_retry_not_the_first_attempt(app: TestApp) {
        let sid = app.create_session().await;
        let path = format!("/v1/sessions/{sid}/agents/ghost/plan");
        let mut seen = Vec::new();
        for _ in 0..2 {
            let req = app.client.put(app.url(&path))
                .header("Idempotency-Key", "ghost-plan")
                .json(&json!({"active": true}));
            let res = req.send().await.unwrap();
            let id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
            let replayed = res.headers().get("idempotent-replayed").cloned();
            let body: Value = res.json().await.unwrap();
            assert_eq!(body["code"], "agent-not-found", "{body}");
            assert_eq!(body["instance"], format!("urn:dsh-plan:request:{id}"), "{body}");
            seen.push((id, replayed, body));
        }
        let [(first, first_replayed, a), (second, second_replayed, b)] = &seen[..] else {
            unreachable!()
        };
        assert_ne!(first, second, "each attempt is its own request");
        assert_eq!((first_replayed, second_replayed.as_ref().map(|v| v.as_bytes())), (&None, Some(&b"true"[..])));
        assert_eq!(a["detail"], b["detail"], "the same answer otherwise");
    }

    async fn a_write_without_a_key_is_not_idempotent(app: TestApp) {
        let sid = app.create_session().await;
        for _ in 0..2 {
            let reply = app.post_json(&format!("/v1/sessions/{sid}/agents"), json!({})).await;
            assert_eq!(reply.status, 201, "{reply:?}");
        }
        assert_eq!(app.events_of_type(&sid, "agent/spawned").await.len(), 2);
    }

    async fn concurrent_duplicates_run_once_and_the_rest_wait_or_replay(app: TestApp) {
        let sid = app.create_session().await;
        let path = format!("/v1/sessions/{sid}/agents");
        let sends = (0..8).map(|_| keyed(&app, Method::POST, &path, "spawn-once", json!({})));
        let answers = futures_util::future::join_all(sends).await;
        let ran: Vec<&Keyed> = answers.iter().filter(|a| a.status == 201 && !a.replayed).collect();
        assert_eq!(ran.len(), 1, "exactly one ran: {answers:#?}");
        for a in &answers {
            match (a.status, a.replayed) {
                (201, _) => assert_eq!(a.body, ran[0].body),
                (409, false) => {
                    assert_eq!(a.code.as_deref(), Some("idempotency-key-in-use"), "{a:?}");
                    let wait: u64 = a.retry_after.as_deref().unwrap().parse().unwrap();
                    assert!((1..=5).contains(&wait), "{a:?}");
                }
                _ => panic!("{a:?}"),
            }
        }
        assert_eq!(app.events_of_type(&sid, "agent/spawned").await.len(), 1);
    }
}

#[tokio::test]
async fn a_duplicate_while_the_first_still_runs_is_told_to_retry_and_then_gets_the_replay() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.next(text_reply("Noted."), Duration::ZERO).await;
    let app = mock.replica(&redis, |_| {}).await;
    let sid = app.create_session().await;
    let turn = app.prompt(&sid, "main", "remember this").await.body["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    app.await_turn_end(&sid, &turn).await;
    // The compaction's summary takes a while: the first request is still running.
    mock.next(text_reply("A summary."), Duration::from_millis(1500))
        .await;
    let path = format!("/v1/sessions/{sid}/compact");
    let first = keyed(&app, Method::POST, &path, "compact-1", json!({}));
    let duplicate = async {
        mock.await_requests(2).await;
        keyed(&app, Method::POST, &path, "compact-1", json!({})).await
    };
    let (first, duplicate) = tokio::join!(first, duplicate);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(duplicate.status, 409, "{duplicate:?}");
    assert_eq!(duplicate.code.as_deref(), Some("idempotency-key-in-use"));
    let wait: u64 = duplicate.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=5).contains(&wait), "{wait}");
    let retry = keyed(&app, Method::POST, &path, "compact-1", json!({})).await;
    assert_eq!((retry.status, retry.replayed), (200, true), "{retry:?}");
    assert_eq!(retry.body, first.body);
    assert_eq!(
        app.events_of_type(&sid, "session/compacted").await.len(),
        1,
        "one compaction"
    );
    assert_eq!(
        mock.requests().await.len(),
        2,
        "the duplicate never reached the provider"
    );
}

#[tokio::test]
async fn a_retry_on_another_replica_replays_the_first_answer() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let (plan, message) = (plan_path(&sid), messages_path(&sid));
    let on = |app, body| keyed(app, Method::PUT, &plan, "flip-ab", body);
    let first = on(&a, json!({"active": true})).await;
    assert_eq!(first.body["outcome"], "committed", "{first:?}");
    let retry = on(&b, json!({"active": true})).await;
    assert_eq!((retry.status, retry.replayed), (200, true), "{retry:?}");
    assert_eq!(retry.body, first.body);
    let reused = on(&b, json!({"active": false})).await;
    assert_eq!(reused.code.as_deref(), Some("idempotency-key-reused"));
    let sent = |app| {
        keyed(
            app,
            Method::POST,
            &message,
            "msg-ab",
            json!({"text": "once"}),
        )
    };
    let first = sent(&a).await;
    let retry = sent(&b).await;
    assert_eq!((retry.replayed, &retry.body), (true, &first.body));
    assert_eq!(messages(&a, &sid, "once").await, 1);
    assert_eq!(a.events_of_type(&sid, "plan/mode").await.len(), 1);
}

#[tokio::test]
async fn keys_belong_to_a_tenant_and_its_credential() {
    let redis = TestRedis::start().await;
    let (_, acme_key) = key_for(&redis, "acme", None).await;
    let (_, acme_other) = key_for(&redis, "acme", None).await;
    let (_, globex_key) = key_for(&redis, "globex", None).await;
    let app = spawn_with(Some(&redis), "a", |s| s.default_rate = 100_000).await;
    let (acme, globex) = (app.as_caller(&acme_key), app.as_caller(&globex_key));
    let create = |app| keyed(app, Method::POST, "/v1/sessions", "same-key", json!({}));
    let (a, g) = (create(&acme).await, create(&globex).await);
    assert_eq!((a.status, g.status), (201, 201), "{a:?} {g:?}");
    assert!(
        !g.replayed,
        "another tenant's key of the same name is its own"
    );
    assert_ne!(a.body["id"], g.body["id"]);
    // The same tenant with another credential is another caller: not the same request.
    let other_credential = app.as_caller(&acme_other);
    let other = create(&other_credential).await;
    assert_eq!(
        other.code.as_deref(),
        Some("idempotency-key-reused"),
        "{other:?}"
    );
    assert!(create(&acme).await.replayed);
}

#[test]
fn every_session_write_documents_the_key_and_the_replay_header() {
    let spec = serde_json::to_value(dsh_plan::http::openapi()).unwrap();
    let resolve = |v: &Value| match v["$ref"].as_str() {
        Some(r) => spec.pointer(r.trim_start_matches('#')).cloned().unwrap(),
        None => v.clone(),
    };
    let mut writes = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in ["post", "put"] {
            let Some(op) = item.get(method) else { continue };
            writes += 1;
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            assert!(
                params
                    .iter()
                    .map(resolve)
                    .any(|p| p["name"] == "Idempotency-Key"
                        && p["in"] == "header"
                        && p["required"] == false),
                "{method} {path}"
            );
            for (status, response) in op["responses"].as_object().unwrap() {
                let documented = response["headers"]
                    .get("Idempotent-Replayed")
                    .map(resolve)
                    .is_some_and(|h| h["schema"]["enum"] == json!(["true"]));
                assert_eq!(
                    documented,
                    !status.starts_with('5'),
                    "{method} {path} {status}"
                );
            }
        }
    }
    assert!(writes >= 10, "{writes}");
}

/// A replay answers before the handler's checks, so it must never hand a stored success to a
/// credential that could not have made the request: a token of the same subject granting less
/// (read only) does not replay a plan change made with a `plan` token.
#[tokio::test]
async fn a_token_granting_less_never_replays_anothers_answer() {
    let acme = crate::auth::AcmeSession::start().await;
    let sid = &acme.sid;
    let planner = crate::auth::mint(
        &acme.acme,
        sid,
        json!({"scopes": ["read", "plan"], "subject": "u42"}),
    )
    .await;
    let reader = crate::auth::mint(
        &acme.acme,
        sid,
        json!({"scopes": ["read"], "subject": "u42"}),
    )
    .await;
    let path = format!("/v1/sessions/{sid}/agents/main/plan");
    let body = json!({"active": true});
    let first = keyed(
        &acme.app.as_caller(&planner),
        Method::PUT,
        &path,
        "k1",
        body.clone(),
    )
    .await;
    assert_eq!(first.status, 200, "{first:?}");
    let retry = keyed(&acme.app.as_caller(&reader), Method::PUT, &path, "k1", body).await;
    assert!(!retry.replayed, "{retry:?}");
    assert_ne!(retry.status, 200, "{retry:?}");
}
