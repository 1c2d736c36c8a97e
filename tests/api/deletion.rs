//! `DELETE /v1/sessions/{sid}`: the session's keys go, every route of it answers 404 on every
//! replica, its event streams end, and a turn running on it stops without bringing it back.

use std::time::{Duration, Instant};

use serde_json::json;

use dsh_plan::domain::event::PlanSelect;
use dsh_plan::domain::{AgentId, EventKind, NewEvent, SessionId};
use dsh_plan::store::{Anchor, Append, EventLog, MemoryLog, RedisLog};

use crate::helpers::{spawn_replica, spawn_with, Reply, TestApp, TestRedis};
use crate::on_both_stores;
use crate::sse::SseClient;

async fn delete(app: &TestApp, sid: &str) -> Reply {
    app.send(app.client.delete(app.url(&format!("/v1/sessions/{sid}"))))
        .await
}

async fn key_count(redis: &TestRedis, pattern: &str) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    keys.len()
}

async fn leases(redis: &TestRedis) -> u64 {
    redis.lease_count().await
}

/// Every route of a deleted session answers 404 `session-not-found`.
async fn assert_gone(app: &TestApp, sid: &str) {
    app.session(sid)
        .await
        .assert_problem(404, "session-not-found");
    for path in [
        "log",
        "events",
        "agents/main",
        "agents/main/plan",
        "questions",
    ] {
        app.get(&format!("/v1/sessions/{sid}/{path}"))
            .await
            .assert_problem(404, "session-not-found");
    }
    app.set_plan(sid, "main", true)
        .await
        .assert_problem(404, "session-not-found");
    app.post_json(&format!("/v1/sessions/{sid}/fork"), json!({}))
        .await
        .assert_problem(404, "session-not-found");
}

#[tokio::test]
async fn deleting_a_session_leaves_no_key_of_it_in_redis_not_even_a_keyed_writes_marker() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    let put = app
        .client
        .put(app.url(&format!("/v1/sessions/{sid}/agents/main/plan")))
        .header("Idempotency-Key", "flip-before-delete")
        .json(&json!({"active": true}));
    assert_eq!(app.send(put).await.status, 200);
    let pattern = format!("{}:{{{sid}}}*", redis.prefix);
    assert!(
        key_count(&redis, &pattern).await >= 2,
        "the log and a marker"
    );
    assert_eq!(delete(&app, &sid).await.status, 204);
    assert_eq!(
        key_count(&redis, &pattern).await,
        0,
        "no key of {sid} is left"
    );
}

on_both_stores! {
    async fn a_deleted_session_is_gone_for_every_route_and_a_second_delete(app: TestApp) {
        let sid = app.create_session().await;
        let kept = app.create_session().await;
        app.set_plan(&sid, "main", true).await.ok();
        let reply = delete(&app, &sid).await;
        assert_eq!(reply.status, 204, "{reply:?}");
        assert_eq!(reply.body, serde_json::Value::Null, "no body");
        assert_gone(&app, &sid).await;
        delete(&app, &sid).await.assert_problem(404, "session-not-found");
        // Nothing else went with it.
        app.session(&kept).await.ok();
    }

    async fn deleting_an_unknown_or_malformed_session_is_refused(app: TestApp) {
        delete(&app, "nosuchsession").await.assert_problem(404, "session-not-found");
        delete(&app, "not%20an%20id").await.assert_problem(400, "invalid-id");
    }
}

#[tokio::test]
async fn a_delete_removes_the_sessions_keys_from_redis() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    let pattern = format!("{}:{{{sid}}}*", redis.prefix);
    assert_eq!(key_count(&redis, &pattern).await, 1);
    assert_eq!(delete(&app, &sid).await.status, 204);
    assert_eq!(key_count(&redis, &pattern).await, 0);
}

#[tokio::test]
async fn another_replica_notices_a_delete_at_its_next_read_and_writes_nothing() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    a.set_plan(&sid, "main", true).await.ok();
    // B folds and caches the session before A deletes it.
    assert_eq!(b.plan(&sid, "main").await.ok(), json!({"active": true}));
    assert_eq!(delete(&a, &sid).await.status, 204);
    assert_gone(&b, &sid).await;
    delete(&b, &sid)
        .await
        .assert_problem(404, "session-not-found");
    let pattern = format!("{}:{{{sid}}}*", redis.prefix);
    assert_eq!(
        key_count(&redis, &pattern).await,
        0,
        "B's refused writes created nothing"
    );
}

#[tokio::test]
async fn open_event_streams_on_every_replica_end_with_session_deleted() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let path = format!("/v1/sessions/{sid}/events");
    let mut on_a = SseClient::connect(&a.url(&path), None).await;
    // A filter does not hide the end of the session.
    let mut on_b = SseClient::connect(&b.url(&format!("{path}?types=plan/mode")), None).await;
    on_a.until("the creation", |f| f.event == "session/created")
        .await;
    a.set_plan(&sid, "main", true).await.ok();
    on_b.until("the plan/mode", |f| f.event == "plan/mode")
        .await;
    assert_eq!(delete(&b, &sid).await.status, 204);
    for sse in [&mut on_a, &mut on_b] {
        let rest = sse.drain().await;
        let last = rest.last().expect("a last frame");
        assert_eq!(last.event, "session/deleted", "{rest:#?}");
        assert_eq!(last.id, None);
        assert_eq!(last.data["data"]["reason"], "deleted");
        assert_eq!(last.data["session"], sid.as_str());
        assert!(*sse.ended.borrow(), "the server ended the stream");
    }
    // Reconnecting gets the session's 404, so an EventSource stops.
    a.get(&path).await.assert_problem(404, "session-not-found");
}

#[tokio::test]
async fn a_running_turn_on_a_deleted_session_stops_and_never_recreates_it() {
    let redis = TestRedis::start().await;
    let slow = |s: &mut dsh_plan::config::Settings| s.fixture_token_delay_ms = 20;
    let a = spawn_with(Some(&redis), "a", slow).await;
    let b = spawn_with(Some(&redis), "b", slow).await;
    let sid = a.create_session().await;
    // The fixture answers `Done: <prompt>` one word per 20 ms: seven seconds of generating.
    let prompt = "please look at every part of the login flow ".repeat(40);
    let turn = a.prompt(&sid, "main", &prompt).await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    a.await_event(&sid, "the step's start", |e| e["type"] == "step/started")
        .await;
    assert_eq!(leases(&redis).await, 1, "turn {turn} runs under a lease");
    assert_eq!(delete(&b, &sid).await.status, 204);
    // The runner notices at its next look at the log (every 200 ms), abandons the provider
    // request and lets its lease go, long before the answer would have been complete.
    let deadline = Instant::now() + Duration::from_secs(3);
    while leases(&redis).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the turn ran on after its session was deleted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pattern = format!("{}:{{{sid}}}*", redis.prefix);
    assert_eq!(
        key_count(&redis, &pattern).await,
        0,
        "nothing recreated the session"
    );
    assert_gone(&a, &sid).await;
}

/// An append that expects events of a session that is gone conflicts; it never creates a log.
async fn an_append_to_a_gone_session_conflicts(log: &dyn EventLog) {
    let sid = SessionId::parse("gone").unwrap();
    let main = AgentId::root();
    let select = |active| NewEvent::new(&main, EventKind::PlanSelect(PlanSelect { active }));
    let created = log
        .append(
            &sid,
            Anchor::seq_only(0),
            &[select(true), select(false)],
            60_000,
        )
        .await
        .unwrap();
    assert!(
        matches!(created, Append::Committed(ref e) if e.len() == 2),
        "{created:?}"
    );
    assert!(log.delete(&sid).await.unwrap());
    let late = log
        .append(&sid, Anchor::seq_only(2), &[select(true)], 60_000)
        .await
        .unwrap();
    assert!(matches!(late, Append::Replaced), "{late:?}");
    assert!(log.read(&sid, 0, 10).await.unwrap().is_empty());
    assert!(
        !log.delete(&sid).await.unwrap(),
        "nothing was there to delete"
    );
}

#[tokio::test]
async fn an_append_expecting_events_of_a_deleted_session_creates_nothing_on_redis() {
    let redis = TestRedis::start().await;
    let log = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    an_append_to_a_gone_session_conflicts(&log).await;
    assert_eq!(key_count(&redis, &format!("{}:*", redis.prefix)).await, 0);
}

#[tokio::test]
async fn an_append_expecting_events_of_a_deleted_session_creates_nothing_on_memory() {
    an_append_to_a_gone_session_conflicts(&MemoryLog::default()).await;
}
