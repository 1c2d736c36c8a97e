//! Events committed without being announced (the replica that committed them died first) still
//! reach the webhooks: here a replica that never announces stands in for one that died right
//! after its commit.

use dsh_plan::config::Settings;
use dsh_plan::startup::{open_store, Application};
use wiremock::ResponseTemplate;

use crate::helpers::{serve, spawn_with, TestApp, TestRedis};
use crate::webhooks::{await_delivery, await_requests, body, receiver, register};

/// A replica on `redis` whose commits are never announced to webhooks.
async fn silent_replica(redis: &TestRedis) -> TestApp {
    let mut settings = Settings::local(Some(redis.url.clone()));
    settings.key_prefix = redis.prefix.clone();
    settings.replica_id = Some("silent".into());
    let mut stores = open_store(&settings).await.unwrap();
    stores.webhooks = None;
    serve(
        Application::build_with_store(settings, stores)
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn a_turn_cancelled_by_a_replica_that_never_announced_it_is_announced_by_its_runner() {
    let redis = TestRedis::start().await;
    let runner = spawn_with(Some(&redis), "a", |s| {
        s.webhook_allow_private = true;
        s.webhook_poll_ms = 50;
        s.fixture_token_delay_ms = 100;
    })
    .await;
    let silent = silent_replica(&redis).await;
    let hooks = receiver(ResponseTemplate::new(200), 1).await;
    register(&runner, &hooks.uri(), &["turn.ended"]).await;
    let sid = runner.create_session().await;
    let turn = runner.prompt(&sid, "main", "hello").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    runner
        .await_event(&sid, "step/started", |e| e["type"] == "step/started")
        .await;
    silent.cancel(&sid, "main").await.ok();
    runner.await_turn_end(&sid, &turn).await;
    let got = await_requests(&hooks, 1).await;
    let ended = body(&got[0]);
    assert_eq!(ended["type"], "turn.ended");
    assert_eq!(ended["data"]["reason"], "cancelled");
}

#[tokio::test]
async fn a_deleted_sessions_pending_deliveries_end_failed_and_nothing_more_is_sent() {
    let redis = TestRedis::start().await;
    let app = spawn_with(Some(&redis), "a", |s| {
        s.webhook_allow_private = true;
        s.webhook_backoff_ms = 300;
        s.webhook_poll_ms = 50;
    })
    .await;
    // Down at first: the delivery waits for its retry when the session is deleted.
    let receiver = receiver(ResponseTemplate::new(503), u64::MAX).await;
    let hook = register(&app, &receiver.uri(), &["turn.ended"]).await;
    let hook = hook["id"].as_str().unwrap();
    let sid = app.create_session().await;
    app.prompt(&sid, "main", "hello").await.ok();
    await_requests(&receiver, 1).await;
    let res = app
        .send(app.client.delete(app.url(&format!("/v1/sessions/{sid}"))))
        .await;
    assert_eq!(res.status, 204);
    let page = await_delivery(&app, hook, "failed").await;
    let attempts = page["deliveries"][0]["attempts"]
        .as_array()
        .unwrap()
        .clone();
    let last = attempts.last().unwrap();
    assert!(last.get("status").is_none(), "not sent: {last}");
    assert!(
        last["error"].as_str().unwrap().contains("deleted"),
        "says why: {last}"
    );
    let sent = receiver.received_requests().await.unwrap().len();
    assert_eq!(
        sent,
        attempts.len() - 1,
        "every attempt but the last was sent"
    );
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert_eq!(receiver.received_requests().await.unwrap().len(), sent);
}
