//! A full Redis (at its `maxmemory`, `noeviction`): writes answer 507 `store-full`, reads keep
//! working, `/readyz` says 503 `store-full` until space is freed, then all is well again.

use std::time::{Duration, Instant};

use crate::helpers::{spawn_replica, TestApp, TestRedis};

async fn config_set(redis: &TestRedis, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
}

async fn used_memory(redis: &TestRedis) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Caps Redis just above what it uses, fills it until it refuses a write, then lowers the cap
/// below what it holds by a margin, so what frees a little meanwhile (keys that expire, a
/// replica's background work) does not let a write the test expects refused slip under it.
async fn fill(redis: &TestRedis) {
    config_set(redis, "maxmemory-policy", "noeviction").await;
    let cap = used_memory(redis).await + 2 * 1024 * 1024;
    config_set(redis, "maxmemory", &cap.to_string()).await;
    let mut conn = redis.conn().await;
    let filler = "x".repeat(64 * 1024);
    for i in 0..1000 {
        let set: Result<(), _> = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&filler)
            .query_async(&mut conn)
            .await;
        if let Err(e) = set {
            assert!(e.to_string().contains("OOM"), "{e}");
            let held = used_memory(redis).await;
            config_set(redis, "maxmemory", &(held - 512 * 1024).to_string()).await;
            return;
        }
    }
    panic!("Redis never filled up");
}

/// Creates sessions until one is refused (with the cap below what Redis holds, the first is);
/// returns the refusal.
async fn refused_create(app: &TestApp) -> crate::helpers::Reply {
    for _ in 0..50 {
        let reply = app.post_json("/v1/sessions", serde_json::json!({})).await;
        if reply.status != 201 {
            return reply;
        }
    }
    panic!("every session was created on a full Redis");
}

#[tokio::test]
async fn a_full_redis_refuses_writes_with_507_keeps_reads_and_fails_readiness_until_freed() {
    let redis = TestRedis::start_private().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let spare = a.create_session().await;
    a.set_plan(&sid, "main", true).await.ok();
    assert_eq!(a.get("/readyz").await.status, 200);

    fill(&redis).await;
    let detail = refused_create(&a).await.assert_problem(507, "store-full");
    assert!(!detail.contains("retry shortly"), "{detail}");
    a.set_plan(&sid, "main", false)
        .await
        .assert_problem(507, "store-full");
    // Opening a turn takes a lease first: refused too, and nothing appended.
    a.prompt(&sid, "main", "hello")
        .await
        .assert_problem(507, "store-full");
    // Reads work, on the replica that folded the session and on one that folds it now.
    for app in [&a, &b] {
        assert_eq!(app.session(&sid).await.ok()["last_event_id"], "2-0");
        assert_eq!(app.events(&sid).await.len(), 2);
        let listed = app.get("/v1/sessions").await.ok();
        let ids: Vec<&str> = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap())
            .collect();
        assert!(
            ids.contains(&sid.as_str()) && ids.contains(&spare.as_str()),
            "{listed}"
        );
    }
    for app in [&a, &b] {
        app.get("/readyz").await.assert_problem(503, "store-full");
    }
    // Deleting frees space, so it works on a full Redis.
    let deleted = a.send(a.client.delete(a.url(&format!("/v1/sessions/{spare}"))));
    assert_eq!(deleted.await.status, 204);

    config_set(&redis, "maxmemory", "0").await;
    let deadline = Instant::now() + Duration::from_secs(15);
    for app in [&a, &b] {
        while app.get("/readyz").await.status != 200 {
            assert!(
                Instant::now() < deadline,
                "/readyz stayed unready after space was freed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    a.create_session().await;
    assert_eq!(
        a.set_plan(&sid, "main", false).await.ok()["outcome"],
        "committed"
    );
}
