//! Tenant quotas across two replicas on one Redis: each refusal is its own problem code and
//! appends nothing, and a slot comes back when what held it ends. (Without credentials every
//! session belongs to the open tenant, `_open`.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_plan::config::Settings;
use dsh_plan::domain::SessionId;
use dsh_plan::limits::Limits;
use dsh_plan::store::{RedisLimits, RedisLog};
use serde_json::json;

use crate::helpers::{spawn_with, TestApp, TestRedis};

/// A replica's limits facade of its own on the test's Redis, for the primitives no route
/// reaches yet (deleting a session).
pub async fn limits_on(redis: &TestRedis, adjust: impl FnOnce(&mut Settings)) -> Arc<Limits> {
    let log = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    let mut settings = Settings::local(Some(redis.url.clone()));
    settings.key_prefix = redis.prefix.clone();
    adjust(&mut settings);
    Limits::new(Arc::new(RedisLimits::new(&log)), &settings)
}

/// How many session logs Redis holds under this test's prefix.
async fn stored_logs(redis: &TestRedis) -> usize {
    let mut conn = redis.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*:log", redis.prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.len()
}

async fn two_replicas(redis: &TestRedis, adjust: fn(&mut Settings)) -> (TestApp, TestApp) {
    (
        spawn_with(Some(redis), "a", adjust).await,
        spawn_with(Some(redis), "b", adjust).await,
    )
}

/// Polls `attempt` until it returns true, for at most 15 s.
async fn eventually(what: &str, mut attempt: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !attempt().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_session_quota_holds_across_replicas_and_a_refused_create_or_fork_appends_nothing() {
    let redis = TestRedis::start().await;
    let (a, b) = two_replicas(&redis, |s| s.max_sessions = 3).await;
    let first = a.create_session().await;
    a.create_session().await;
    b.create_session().await;

    let refused = b.post_json("/v1/sessions", json!({})).await;
    let detail = refused.assert_problem(429, "session-quota");
    assert!(detail.contains("max-sessions"), "{detail}");
    let fork = a
        .post_json(&format!("/v1/sessions/{first}/fork"), json!({}))
        .await;
    fork.assert_problem(429, "session-quota");
    assert_eq!(stored_logs(&redis).await, 3, "the refusals created nothing");

    // Deleting a session (on the other replica) gives its slot back.
    let deleted = b
        .send(b.client.delete(b.url(&format!("/v1/sessions/{first}"))))
        .await;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    b.create_session().await;
    assert_eq!(stored_logs(&redis).await, 3);
}

#[tokio::test]
async fn a_session_stops_counting_when_its_retention_runs_out_unless_a_write_refreshed_it() {
    let redis = TestRedis::start().await;
    let limits = limits_on(&redis, |s| s.max_sessions = 1).await;
    let acme = dsh_plan::domain::TenantId::parse("acme").unwrap();
    let (one, two) = (
        SessionId::generate().unwrap(),
        SessionId::generate().unwrap(),
    );
    let retention = Duration::from_secs(4);
    let start = Instant::now();
    limits
        .admit_session(Some(&acme), &one, retention)
        .await
        .unwrap();
    let refused = limits.admit_session(Some(&acme), &two, retention).await;
    assert!(
        matches!(&refused, Err(dsh_plan::limits::LimitError::Quota(q)) if q.code().as_str() == "session-quota"),
        "{refused:?}"
    );
    // Another tenant has a quota of its own.
    limits.admit_session(None, &two, retention).await.unwrap();

    // A write halfway through moves its expiry on.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(start.elapsed())).await;
    limits.touch_session(Some(&acme), &one, retention);
    tokio::time::sleep(Duration::from_millis(4500).saturating_sub(start.elapsed())).await;
    assert!(
        limits
            .admit_session(Some(&acme), &two, retention)
            .await
            .is_err(),
        "past its first expiry, the refreshed session still counts"
    );
    eventually("the session to expire", async || {
        limits
            .admit_session(Some(&acme), &two, retention)
            .await
            .is_ok()
    })
    .await;
    // Not at its first expiry (4 s) but at the refreshed one (the touch at 2 s + 4 s). The
    // expiry is on Redis's clock and `start` on this process's monotonic one: on a loaded VM
    // they drifted 8.5 ms apart over those 4 s (5.9915 s measured), so allow 100 ms.
    assert!(
        start.elapsed() >= Duration::from_millis(5900),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn the_running_turn_quota_refuses_a_new_turn_on_another_replica_but_never_a_steer() {
    let redis = TestRedis::start().await;
    let (a, b) = two_replicas(&redis, |s| {
        s.max_running_turns = 1;
        // Slow enough that the first turn is still running while the others are tried.
        s.fixture_token_delay_ms = 100;
    })
    .await;
    let (busy, other) = (a.create_session().await, b.create_session().await);
    let long = "word ".repeat(200);
    let first = a.prompt(&busy, "main", &long).await;
    assert_eq!(first.status, 202, "{first:?}");

    let before = b.events(&other).await.len();
    let refused = b.prompt(&other, "main", "hello").await;
    let detail = refused.assert_problem(429, "turn-quota");
    assert!(detail.contains("max-running-turns"), "{detail}");
    assert_eq!(b.events(&other).await.len(), before, "nothing appended");

    let steer = b.prompt(&busy, "main", "and also this").await;
    assert_eq!(steer.status, 202, "{steer:?}");
    assert_eq!(steer.body["steered"], true, "{steer:?}");

    a.cancel(&busy, "main").await.ok();
    eventually("the cancelled turn to free its slot", async || {
        b.prompt(&other, "main", "hello").await.status == 202
    })
    .await;
}

#[tokio::test]
async fn the_stream_quota_counts_open_streams_of_both_replicas_and_a_closed_stream_frees_its_slot()
{
    let redis = TestRedis::start().await;
    let (a, b) = two_replicas(&redis, |s| {
        s.max_streams = 2;
        // A client that went away is noticed at the next write.
        s.sse_heartbeat_ms = 100;
    })
    .await;
    let sid = a.create_session().await;
    let events = |app: &TestApp| app.url(&format!("/v1/sessions/{sid}/events"));
    let open = |app: &TestApp| app.client.get(events(app)).send();
    let on_a = open(&a).await.unwrap();
    let on_b = open(&b).await.unwrap();
    assert_eq!((on_a.status().as_u16(), on_b.status().as_u16()), (200, 200));

    let refused = a.send(a.client.get(events(&a))).await;
    let detail = refused.assert_problem(429, "stream-quota");
    assert!(detail.contains("max-streams"), "{detail}");

    drop(on_b);
    eventually("the closed stream to free its slot", async || {
        match open(&a).await.unwrap().status().as_u16() {
            200 => true,
            429 => false,
            other => panic!("unexpected status {other}"),
        }
    })
    .await;
    drop(on_a);
}

#[tokio::test]
async fn a_turn_over_the_provider_call_quota_waits_for_the_next_window_instead_of_failing() {
    let redis = TestRedis::start().await;
    let (a, b) = two_replicas(&redis, |s| {
        s.max_provider_calls = 1;
        s.provider_call_window_ms = 1500;
    })
    .await;
    let (one, two) = (a.create_session().await, b.create_session().await);
    let (first, second) =
        tokio::join!(a.prompt(&one, "main", "one"), b.prompt(&two, "main", "two"));
    let turn = |r: &crate::helpers::Reply| r.body["turn"].as_str().unwrap().to_owned();
    let (first, second) = (turn(&first), turn(&second));
    let (l1, l2) = tokio::join!(
        a.await_turn_end(&one, &first),
        b.await_turn_end(&two, &second)
    );

    // When each turn's one provider call was answered.
    let answered = |log: &[serde_json::Value]| {
        let ended = log.iter().find(|e| e["type"] == "turn/ended").unwrap();
        assert_eq!(ended["data"]["reason"], "completed", "{log:#?}");
        let e = log
            .iter()
            .find(|e| e["type"] == "assistant/message")
            .unwrap();
        humantime::parse_rfc3339(e["committed_at"].as_str().unwrap()).unwrap()
    };
    let (a1, a2) = (answered(&l1), answered(&l2));
    let gap = a1.max(a2).duration_since(a1.min(a2)).unwrap();
    assert!(
        gap >= Duration::from_millis(1200),
        "one call per 1.5 s window: the second call waited for the next window, yet the answers \
         came {gap:?} apart"
    );
}
