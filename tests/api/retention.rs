//! Retention: a session is kept for its retention after its last write (a TTL on its Redis
//! keys, a deadline in memory), every write pushes that out, reads do not, and an expired
//! session is gone for good.

use std::time::{Duration, Instant};

use crate::helpers::{spawn_with, TestApp, TestRedis};

async fn app_keeping(redis: Option<&TestRedis>, retention: Duration) -> TestApp {
    spawn_with(redis, "a", |s| s.retention = retention).await
}

async fn pttl(redis: &TestRedis, sid: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(redis.key(sid))
        .query_async(&mut redis.conn().await)
        .await
        .unwrap()
}

async fn exists(redis: &TestRedis, sid: &str) -> bool {
    let n: u64 = redis::cmd("EXISTS")
        .arg(redis.key(sid))
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    n == 1
}

/// Polls the session until it is gone; returns when that was seen.
async fn await_gone(app: &TestApp, sid: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let reply = app.session(sid).await;
        if reply.status == 404 {
            reply.assert_problem(404, "session-not-found");
            return Instant::now();
        }
        assert_eq!(reply.status, 200, "{reply:?}");
        assert!(Instant::now() < deadline, "session {sid} never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates a session, lets it expire, and checks nothing brings it back.
async fn an_idle_session_is_gone_after_its_retention(app: TestApp) -> String {
    let retention = Duration::from_millis(1000);
    let before = Instant::now();
    let sid = app.create_session().await;
    let gone_at = await_gone(&app, &sid).await;
    assert!(
        gone_at - before >= retention,
        "expired after {:?}, before its retention of {retention:?}",
        gone_at - before
    );
    // A write to the expired session is refused and does not create it again.
    app.set_plan(&sid, "main", true)
        .await
        .assert_problem(404, "session-not-found");
    app.get(&format!("/v1/sessions/{sid}/log"))
        .await
        .assert_problem(404, "session-not-found");
    sid
}

/// Writes every 300 ms for twice the retention: the session outlives its first deadline, then
/// expires once the writes stop.
async fn writes_within_the_retention_keep_a_session(app: TestApp) {
    let retention = Duration::from_millis(1500);
    let sid = app.create_session().await;
    let start = Instant::now();
    let mut active = false;
    while start.elapsed() < retention * 2 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        active = !active;
        let reply = app.set_plan(&sid, "main", active).await;
        assert_eq!(reply.body["outcome"], "committed", "{reply:?}");
    }
    assert_eq!(app.session(&sid).await.status, 200);
    let last_write = Instant::now();
    let gone_at = await_gone(&app, &sid).await;
    assert!(gone_at - last_write >= retention - Duration::from_millis(100));
}

#[tokio::test]
async fn an_idle_session_is_gone_after_its_retention_on_redis() {
    let redis = TestRedis::start().await;
    let app = app_keeping(Some(&redis), Duration::from_millis(1000)).await;
    let sid = an_idle_session_is_gone_after_its_retention(app).await;
    assert!(
        !exists(&redis, &sid).await,
        "the refused write created no key"
    );
}

#[tokio::test]
async fn an_idle_session_is_gone_after_its_retention_on_memory() {
    let app = app_keeping(None, Duration::from_millis(1000)).await;
    an_idle_session_is_gone_after_its_retention(app).await;
}

#[tokio::test]
async fn writes_within_the_retention_keep_a_session_on_redis() {
    let redis = TestRedis::start().await;
    let app = app_keeping(Some(&redis), Duration::from_millis(1500)).await;
    writes_within_the_retention_keep_a_session(app).await;
}

#[tokio::test]
async fn writes_within_the_retention_keep_a_session_on_memory() {
    let app = app_keeping(None, Duration::from_millis(1500)).await;
    writes_within_the_retention_keep_a_session(app).await;
}

#[tokio::test]
async fn every_write_sets_the_session_key_ttl_to_its_retention_and_reads_do_not() {
    let redis = TestRedis::start().await;
    let app = app_keeping(Some(&redis), Duration::from_secs(60)).await;
    let sid = app.create_session().await;
    let created = pttl(&redis, &sid).await;
    assert!((55_000..=60_000).contains(&created), "PTTL {created}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    app.session(&sid).await.ok();
    app.events(&sid).await;
    let after_reads = pttl(&redis, &sid).await;
    assert!(
        after_reads <= 60_000 - 1_000,
        "reads moved the TTL to {after_reads}"
    );
    app.set_plan(&sid, "main", true).await.ok();
    let after_write = pttl(&redis, &sid).await;
    assert!(
        after_write > 60_000 - 1_000,
        "a write left the TTL at {after_write}"
    );
}

/// TTLs are refreshed by the first write of each window (a second; a hundredth of a retention
/// under 100 s: 600 ms here), not by every write: a session written many times a second for
/// longer than a second still expires no earlier than its retention less a window after any
/// write.
#[tokio::test]
async fn a_session_written_many_times_a_second_keeps_its_ttl_within_a_second_of_its_retention() {
    written_many_times_a_second_keeps_its_ttl(Duration::from_secs(60)).await;
}

/// The same with a retention of 100 s or more (the default is 30 days), whose window is a
/// second: the script tells it from the seconds of the commit times, not from their numbers.
#[tokio::test]
async fn a_session_kept_for_minutes_written_many_times_a_second_keeps_its_ttl_within_a_second() {
    written_many_times_a_second_keeps_its_ttl(Duration::from_secs(200)).await;
}

async fn written_many_times_a_second_keeps_its_ttl(retention: Duration) {
    let redis = TestRedis::start().await;
    let app = app_keeping(Some(&redis), retention).await;
    let kept = retention.as_millis() as i64;
    let sid = app.create_session().await;
    let started = Instant::now();
    let mut writes = 0;
    while started.elapsed() < Duration::from_millis(2500) {
        app.set_plan(&sid, "main", writes % 2 == 0).await.ok();
        writes += 1;
        let ttl = pttl(&redis, &sid).await;
        // A second of slack for the refresh window, and a little for the round trips.
        assert!(
            ttl > kept - 1_200,
            "after {writes} writes in {:?} the TTL is {ttl}",
            started.elapsed()
        );
    }
    assert!(writes > 20, "only {writes} writes");
}

#[tokio::test]
async fn a_retention_of_zero_keeps_sessions_until_deleted() {
    let redis = TestRedis::start().await;
    let app = app_keeping(Some(&redis), Duration::ZERO).await;
    let sid = app.create_session().await;
    app.set_plan(&sid, "main", true).await.ok();
    assert_eq!(pttl(&redis, &sid).await, -1, "no TTL on the stream");
}

#[tokio::test]
async fn a_fork_is_kept_under_its_parents_retention() {
    let redis = TestRedis::start().await;
    let parent_app = app_keeping(Some(&redis), Duration::from_secs(60)).await;
    let sid = parent_app.create_session().await;
    // Another replica with another default: the fork keeps the parent's terms.
    let other = spawn_with(Some(&redis), "b", |s| s.retention = Duration::ZERO).await;
    let fork = other
        .post_json(&format!("/v1/sessions/{sid}/fork"), serde_json::json!({}))
        .await
        .ok();
    let child = fork["id"].as_str().unwrap();
    let ttl = pttl(&redis, child).await;
    assert!((55_000..=60_000).contains(&ttl), "PTTL {ttl}");
}

async fn pttl_of(redis: &TestRedis, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut redis.conn().await)
        .await
        .unwrap()
}

fn markers_key(redis: &TestRedis, sid: &str) -> String {
    format!("{}:{{{sid}}}:idem", redis.prefix)
}

#[tokio::test]
async fn a_session_whose_log_alone_was_evicted_stays_gone_after_a_write() {
    // An eviction (or an operator's DEL) can take the log and leave the session's other keys:
    // a write to it must not start the log again.
    let redis = TestRedis::start().await;
    let app = app_keeping(Some(&redis), Duration::from_secs(60)).await;
    let sid = app.create_session().await;
    app.set_plan(&sid, "main", true).await.ok();
    let _: u64 = redis::cmd("DEL")
        .arg(redis.key(&sid))
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    app.set_plan(&sid, "main", false)
        .await
        .assert_problem(404, "session-not-found");
    assert!(!exists(&redis, &sid).await, "the write created no log");
    app.session(&sid)
        .await
        .assert_problem(404, "session-not-found");
}

#[tokio::test]
async fn a_keyed_write_right_after_another_gives_its_markers_the_sessions_ttl() {
    // TTLs are refreshed by the first write of each second (of each hundredth of a short
    // retention): a keyed write whose session was written just before still gives the
    // markers it creates the session's TTL, so they never outlive it.
    let redis = TestRedis::start().await;
    let app = app_keeping(Some(&redis), Duration::from_secs(600)).await;
    let sid = app.create_session().await;
    let reply = crate::idempotency::keyed(
        &app,
        reqwest::Method::PUT,
        &format!("/v1/sessions/{sid}/agents/main/plan"),
        "ttl-1",
        serde_json::json!({"active": true}),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let marks = markers_key(&redis, &sid);
    for key in [redis.key(&sid), marks.clone(), format!("{marks}:exp")] {
        let ttl = pttl_of(&redis, &key).await;
        assert!((590_000..=600_000).contains(&ttl), "{key}: PTTL {ttl}");
    }
}
