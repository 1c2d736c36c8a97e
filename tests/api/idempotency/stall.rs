//! A Redis stall: the write reaches Redis and commits, but its answer comes too late, so the
//! client got a 503 and cannot know the outcome. A retry with the same key learns it: the
//! committed outcome, answered as the first attempt would have, and the write made once.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use super::proxy::StallProxy;
use super::{keyed, messages, messages_path, plan_path, Keyed};
use crate::helpers::{spawn_with, TestApp, TestRedis};
use crate::review::plan_and_await_review;

/// A replica whose Redis traffic goes through a stall proxy.
async fn behind_proxy(redis: &TestRedis) -> (StallProxy, TestApp) {
    let proxy = StallProxy::start(&redis.url).await;
    let url = proxy.url.clone();
    let app = spawn_with(Some(redis), "a", move |s| s.redis_url = Some(url)).await;
    (proxy, app)
}

/// The session's events as Redis holds them, read around the proxy.
async fn stored_types(redis: &TestRedis, sid: &str) -> Vec<String> {
    let mut conn = redis.conn().await;
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(redis.key(sid))
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|(_, fields)| fields.into_iter().find(|(k, _)| k == "type").unwrap().1)
        .collect()
}

/// Sends the keyed request until it is no longer refused as running (the first attempt's
/// lock may outlive the stall by a few seconds) or unavailable.
async fn retry(app: &TestApp, method: Method, path: &str, key: &str, body: Value) -> Keyed {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let reply = keyed(app, method.clone(), path, key, body.clone()).await;
        let in_use = reply.code.as_deref() == Some("idempotency-key-in-use");
        if !in_use && reply.status != 503 {
            return reply;
        }
        assert!(Instant::now() < deadline, "still refused: {reply:?}");
        let wait = reply
            .retry_after
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        tokio::time::sleep(Duration::from_millis(200).min(Duration::from_secs(wait))).await;
    }
}

/// Sends the first attempt into the stall: the answer is a 503, the write committed anyway.
async fn stalled(
    proxy: &StallProxy,
    app: &TestApp,
    method: Method,
    path: &str,
    key: &str,
    body: Value,
    on: &str,
) {
    proxy.stall_after(on);
    let first = keyed(app, method, path, key, body).await;
    assert!(proxy.stalled(), "the write went to Redis: {first:?}");
    assert_eq!(first.status, 503, "{first:?}");
    assert_eq!(first.code.as_deref(), Some("store-unavailable"));
    proxy.resume();
}

#[tokio::test]
async fn a_flip_answered_503_in_a_redis_stall_is_learned_committed_by_its_retry() {
    let redis = TestRedis::start_private().await;
    let (proxy, app) = behind_proxy(&redis).await;
    let sid = app.create_session().await;
    let body = json!({"active": true});
    stalled(
        &proxy,
        &app,
        Method::PUT,
        &plan_path(&sid),
        "flip-1",
        body.clone(),
        "plan/mode",
    )
    .await;
    assert_eq!(
        stored_types(&redis, &sid).await,
        ["session/created", "plan/mode"],
        "the flip committed although the client got a 503"
    );

    let learned = retry(&app, Method::PUT, &plan_path(&sid), "flip-1", body.clone()).await;
    assert_eq!(learned.status, 200, "{learned:?}");
    assert!(
        learned.replayed,
        "the answer repeats the first attempt's outcome"
    );
    assert_eq!(
        learned.body,
        json!({"outcome": "committed", "plan": {"active": true}, "last_event_id": "2-0"}),
        "as the first attempt would have answered"
    );
    // Final now: stored and replayed, and still one flip.
    let again = keyed(&app, Method::PUT, &plan_path(&sid), "flip-1", body).await;
    assert_eq!((again.replayed, &again.body), (true, &learned.body));
    assert_eq!(app.events_of_type(&sid, "plan/mode").await.len(), 1);
    assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
    // Without a key the same stall leaves the client guessing; a new key is a new request.
    let other = keyed(
        &app,
        Method::PUT,
        &plan_path(&sid),
        "flip-2",
        json!({"active": false}),
    )
    .await;
    assert_eq!((other.status, other.replayed), (200, false), "{other:?}");
}

#[tokio::test]
async fn a_message_answered_503_in_a_redis_stall_is_recorded_once_and_its_turn_runs() {
    let redis = TestRedis::start_private().await;
    let (proxy, app) = behind_proxy(&redis).await;
    let sid = app.create_session().await;
    let (path, body) = (messages_path(&sid), json!({"text": "hello once"}));
    stalled(
        &proxy,
        &app,
        Method::POST,
        &path,
        "msg-1",
        body.clone(),
        "user/message",
    )
    .await;
    assert!(stored_types(&redis, &sid)
        .await
        .contains(&"user/message".to_owned()));

    let learned = retry(&app, Method::POST, &path, "msg-1", body).await;
    assert_eq!(
        (learned.status, learned.replayed),
        (202, true),
        "{learned:?}"
    );
    let turn = learned.body["turn"].as_str().unwrap();
    assert_eq!(
        learned.body["steered"], false,
        "the turn the message started, not a steer"
    );
    let events = app.await_turn_end(&sid, turn).await;
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "turn/started")
        .collect();
    assert_eq!(started.len(), 1, "{events:#?}");
    assert_eq!(started[0]["data"]["turn"], turn);
    assert_eq!(messages(&app, &sid, "hello once").await, 1);
}

#[tokio::test]
async fn a_session_created_in_a_redis_stall_is_found_by_its_retry_not_created_twice() {
    let redis = TestRedis::start_private().await;
    let (proxy, app) = behind_proxy(&redis).await;
    // Another session first, so Redis has the append script loaded when the stall comes.
    let earlier = app.create_session().await;
    stalled(
        &proxy,
        &app,
        Method::POST,
        "/v1/sessions",
        "new-1",
        json!({}),
        "session/created",
    )
    .await;

    let learned = retry(&app, Method::POST, "/v1/sessions", "new-1", json!({})).await;
    assert_eq!(
        (learned.status, learned.replayed),
        (201, true),
        "{learned:?}"
    );
    let sid = learned.body["id"].as_str().unwrap();
    assert_eq!(learned.location, Some(format!("/v1/sessions/{sid}")));
    let mut conn = redis.conn().await;
    let logs: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*:log", redis.prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut created = vec![redis.key(&earlier), redis.key(sid)];
    created.sort();
    let mut logs = logs;
    logs.sort();
    assert_eq!(logs, created, "one session was created");
}

/// A plan review answered (Approve, key `answer-1`) into the stall: committed, answered 503.
/// Returns the session, the turn, the question, the answer's path and its body.
async fn answer_in_a_stall(
    proxy: &StallProxy,
    app: &TestApp,
) -> (String, String, String, String, Value) {
    let sid = app.create_session().await;
    let (turn, question) = plan_and_await_review(app, &sid, "fix the login bug").await;
    let qid = question["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/sessions/{sid}/questions/{qid}/answer");
    let body = json!({"label": "Approve"});
    let on = "question/answered";
    stalled(
        proxy,
        app,
        Method::POST,
        &path,
        "answer-1",
        body.clone(),
        on,
    )
    .await;
    (sid, turn, qid, path, body)
}

#[tokio::test]
async fn an_answer_given_in_a_redis_stall_is_learned_by_its_retry_where_a_plain_retry_is_refused() {
    let redis = TestRedis::start_private().await;
    let (proxy, app) = behind_proxy(&redis).await;
    let (sid, turn, qid, path, body) = answer_in_a_stall(&proxy, &app).await;
    let qid = qid.as_str();
    // Without the key, the retry could only hear that the question is closed.
    app.answer(&sid, qid, body.clone())
        .await
        .assert_problem(409, "question-closed");

    let learned = retry(&app, Method::POST, &path, "answer-1", body).await;
    assert_eq!(
        (learned.status, learned.replayed),
        (200, true),
        "{learned:?}"
    );
    assert_eq!(
        (learned.body["id"].as_str(), &learned.body["state"]),
        (Some(qid), &json!("answered"))
    );
    let events = app.await_turn_end(&sid, &turn).await;
    let answers = events
        .iter()
        .filter(|e| e["type"] == "question/answered")
        .count();
    assert_eq!(answers, 1, "{events:#?}");
}

#[tokio::test]
async fn a_retry_after_the_log_was_compacted_past_its_commit_says_it_was_applied() {
    let redis = TestRedis::start_private().await;
    let (proxy, app) = behind_proxy(&redis).await;
    let sid = app.create_session().await;
    let body = json!({"active": true});
    stalled(
        &proxy,
        &app,
        Method::PUT,
        &plan_path(&sid),
        "flip-1",
        body.clone(),
        "plan/mode",
    )
    .await;
    let compacted = app
        .post_json(&format!("/v1/sessions/{sid}/compact"), json!({}))
        .await;
    assert_eq!(compacted.status, 200, "{compacted:?}");

    // The state the flip was decided on is trimmed: its answer cannot be rebuilt, but the
    // client learns that it was applied, and nothing is applied again.
    let learned = retry(&app, Method::PUT, &plan_path(&sid), "flip-1", body).await;
    assert_eq!(learned.status, 409, "{learned:?}");
    assert_eq!(learned.code.as_deref(), Some("already-applied"));
    assert!(
        learned.body["detail"].as_str().unwrap().contains("2-0"),
        "{learned:?}"
    );
    assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
    assert!(
        app.events_of_type(&sid, "plan/mode").await.is_empty(),
        "trimmed, not flipped again"
    );
}

#[tokio::test]
async fn an_answer_committed_in_a_redis_stall_is_still_delivered_to_webhooks_once() {
    use crate::webhooks::{await_requests, body, receiver, register};
    let redis = TestRedis::start_private().await;
    let proxy = StallProxy::start(&redis.url).await;
    let url = proxy.url.clone();
    let app = spawn_with(Some(&redis), "a", move |s| {
        s.redis_url = Some(url);
        s.webhook_allow_private = true;
        s.webhook_poll_ms = 50;
    })
    .await;
    let hooks = receiver(wiremock::ResponseTemplate::new(200), 1).await;
    register(&app, &hooks.uri(), &["plan.approved"]).await;
    // Committed, but the attempt never learned it, so it announced nothing.
    let (sid, turn, qid, path, body_sent) = answer_in_a_stall(&proxy, &app).await;
    // Its keyed retry (or the replica adopting the turn) announces it.
    retry(&app, Method::POST, &path, "answer-1", body_sent).await;
    app.await_turn_end(&sid, &turn).await;
    let got = await_requests(&hooks, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got_later = hooks.received_requests().await.unwrap();
    assert_eq!(
        got_later.len(),
        got.len(),
        "announced more than once: {got_later:?}"
    );
    assert_eq!(got.len(), 1);
    assert_eq!(body(&got[0])["data"]["question"], qid.as_str());
}
