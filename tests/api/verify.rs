use crate::helpers::{spawn_replica, verify, TestRedis};

async fn xadd(redis: &TestRedis, sid: &str, id: &str, ty: &str, data: &str) {
    redis.write_event(sid, id, ty, data, 1).await;
}

#[tokio::test]
async fn verify_accepts_a_log_the_service_wrote() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    app.spawn_agent(&sid, Some("main")).await.ok();
    for active in [true, false, true] {
        app.set_plan(&sid, "main", active).await.ok();
    }
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
    assert!(out.contains("5 events"), "{out}");
}

#[tokio::test]
async fn verify_rejects_two_identical_plan_modes_in_a_row() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    app.set_plan(&sid, "main", true).await.ok();
    xadd(&redis, &sid, "3-0", "plan/mode", r#"{"active":true}"#).await;
    let (ok, out) = verify(&redis, &sid);
    assert!(!ok);
    assert!(
        out.contains("event 3-0") && out.contains("repeats the recorded state"),
        "{out}"
    );
}

#[tokio::test]
async fn verify_rejects_a_plan_mode_without_its_full_value() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    xadd(&redis, &sid, "2-0", "plan/mode", r#"{"pending":true}"#).await;
    let (ok, out) = verify(&redis, &sid);
    assert!(!ok);
    assert!(
        out.contains("event 2-0") && out.contains("malformed"),
        "{out}"
    );
}

#[tokio::test]
async fn verify_rejects_unknown_event_types_and_gaps() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    xadd(&redis, &sid, "2-0", "plan/toggle", r#"{}"#).await;
    let (ok, out) = verify(&redis, &sid);
    assert!(!ok && out.contains("malformed"), "{out}");

    let gap = app.create_session().await;
    xadd(&redis, &gap, "5-0", "plan/mode", r#"{"active":true}"#).await;
    let (ok, out) = verify(&redis, &gap);
    assert!(!ok && out.contains("out of order"), "{out}");
}

#[tokio::test]
async fn verify_rejects_a_projection_that_disagrees_with_the_live_fold() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    // A `/plan off` recorded without the matching selection: the projection sees a pending
    // target that the live fold never got.
    xadd(
        &redis,
        &sid,
        "2-0",
        "command/run",
        r#"{"name":"plan","args":""}"#,
    )
    .await;
    let (ok, out) = verify(&redis, &sid);
    assert!(!ok && out.contains("disagrees with the live fold"), "{out}");
}

#[tokio::test]
async fn verify_fails_for_a_session_that_does_not_exist() {
    let redis = TestRedis::start().await;
    let (ok, out) = verify(&redis, "nosuchsession");
    assert!(!ok && out.contains("has no events"), "{out}");
}
