//! The webhook delivery queue on its own (the Redis store behind the senders): announcing an
//! event twice queues one job, a job stays with the replica that took it until it is finished
//! or has been quiet for the visibility timeout, and a retry comes back when it is due; and
//! the whole of it on a Redis Cluster, every script within one slot.

use std::sync::Arc;
use std::time::Duration;

use dsh_plan::domain::webhooks::WebhookEvent;
use dsh_plan::store::webhooks::{Job, WebhookStore};
use dsh_plan::store::{now_ms, RedisLog, RedisWebhooks};
use serde_json::json;

use wiremock::ResponseTemplate;

use crate::helpers::{spawn_replica, TestCluster, TestRedis};
use crate::webhooks::{await_delivery, await_requests, receiver, register, replica};

async fn queue(redis: &TestRedis) -> Arc<dyn WebhookStore> {
    let log = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    Arc::new(RedisWebhooks::new(&log))
}

fn job(id: &str, group: usize) -> Job {
    Job {
        id: id.to_owned(),
        tenant: "acme".into(),
        endpoint: "wh_1".into(),
        event: WebhookEvent::TurnEnded,
        session: "s1".into(),
        group,
        created_at: now_ms(),
        attempts: 0,
        body: json!({"type": "turn.ended"}).to_string(),
    }
}

#[tokio::test]
async fn announcing_an_event_twice_queues_one_job() {
    let redis = TestRedis::start().await;
    let q = queue(&redis).await;
    assert!(q.enqueue(&job("msg_a", 3)).await.unwrap());
    assert!(
        !q.enqueue(&job("msg_a", 3)).await.unwrap(),
        "the id was queued already"
    );
    let taken = q.take(3, "r1", 10, 60_000).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!((taken[0].job.id.as_str(), taken[0].group), ("msg_a", 3));
    assert_eq!(
        taken[0].job.body,
        job("msg_a", 3).body,
        "the job as it was queued"
    );
    q.finish(&taken[0]).await.unwrap();
    assert!(
        !q.enqueue(&job("msg_a", 3)).await.unwrap(),
        "nor after it was sent"
    );
    assert!(q.take(3, "r2", 10, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_taken_job_goes_to_another_consumer_only_after_the_visibility_timeout() {
    let redis = TestRedis::start().await;
    let q = queue(&redis).await;
    q.enqueue(&job("msg_b", 0)).await.unwrap();
    let first = q.take(0, "dead", 10, 60_000).await.unwrap();
    assert_eq!(first.len(), 1);
    assert!(
        q.take(0, "alive", 10, 60_000).await.unwrap().is_empty(),
        "still the first's"
    );
    tokio::time::sleep(Duration::from_millis(120)).await;
    let claimed = q.take(0, "alive", 10, 100).await.unwrap();
    assert_eq!(
        claimed.len(),
        1,
        "quiet for longer than the timeout: claimed"
    );
    assert_eq!(claimed[0].job.id, "msg_b");
    q.finish(&claimed[0]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(
        q.take(0, "other", 10, 100).await.unwrap().is_empty(),
        "finished for good"
    );
}

#[tokio::test]
async fn a_retry_comes_back_when_it_is_due_with_its_attempts_counted() {
    let redis = TestRedis::start().await;
    let q = queue(&redis).await;
    q.enqueue(&job("msg_c", 5)).await.unwrap();
    let mut taken = q.take(5, "r1", 10, 60_000).await.unwrap().remove(0);
    taken.job.attempts = 1;
    q.retry(&taken, now_ms() + 300).await.unwrap();
    assert!(
        q.take(5, "r1", 10, 0).await.unwrap().is_empty(),
        "not due yet"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let again = q.take(5, "r1", 10, 60_000).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].job.id.as_str(), again[0].job.attempts),
        ("msg_c", 1)
    );
}

#[tokio::test]
async fn an_unreadable_job_does_not_hold_back_the_jobs_taken_with_it() {
    let redis = TestRedis::start().await;
    let q = queue(&redis).await;
    q.enqueue(&job("msg_d", 2)).await.unwrap();
    // An entry this version cannot read (garbage, or a newer version's event type) between two
    // good ones.
    let stream = format!("{}:{{wh:2}}:jobs", redis.prefix);
    let _: String = redis::cmd("XADD")
        .arg(&stream)
        .arg("*")
        .arg("job")
        .arg(r#"{"id":"msg_x","event":"plan.submitted"}"#)
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    q.enqueue(&job("msg_e", 2)).await.unwrap();
    let taken = q.take(2, "r1", 10, 60_000).await.unwrap();
    let ids: Vec<_> = taken.iter().map(|t| t.job.id.as_str()).collect();
    assert_eq!(ids, ["msg_d", "msg_e"]);
}

#[tokio::test]
async fn polling_queues_no_job_ever_reached_creates_no_key() {
    // Every replica polls all 16 groups, webhooks or not; an idle poll must leave Redis as it
    // was (a deployment without webhooks should not grow keys, and tests compare key sets).
    let redis = TestRedis::start().await;
    let q = queue(&redis).await;
    for group in 0..16 {
        assert!(q.take(group, "r1", 10, 0).await.unwrap().is_empty());
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", redis.prefix))
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    // A retry due in a group is still taken (the poll creates the stream for it then).
    q.enqueue(&job("msg_f", 5)).await.unwrap();
    let taken = q.take(5, "r1", 10, 60_000).await.unwrap();
    q.retry(&taken[0], now_ms()).await.unwrap();
    let again = q.take(5, "r1", 10, 60_000).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].job.id, "msg_f");
}

#[tokio::test]
async fn without_redis_the_webhook_routes_say_the_feature_is_not_there() {
    let app = spawn_replica(None, "a").await;
    app.get("/v1/webhooks")
        .await
        .assert_problem(404, "feature-disabled");
    let body = json!({"url": "https://hooks.example.com/", "events": ["turn.ended"]});
    let reply = app.post_json("/v1/webhooks", body).await;
    reply.assert_problem(404, "feature-disabled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_deliveries_are_queued_retried_and_recorded_within_single_slots() {
    let cluster = TestCluster::start(3, 0, 1000).await;
    let redis = cluster.redis();
    let app = replica(&redis, "a").await;
    let receiver = receiver(ResponseTemplate::new(500), 1).await;
    let hook = register(&app, &receiver.uri(), &["turn.ended"]).await;
    // Sessions fall into different queue groups, on different nodes.
    let mut sessions = Vec::new();
    for _ in 0..4 {
        let sid = app.create_session().await;
        let turn = app.prompt(&sid, "main", "hello").await.ok()["turn"]
            .as_str()
            .unwrap()
            .to_owned();
        sessions.push((sid, turn));
    }
    for (sid, turn) in &sessions {
        app.await_turn_end(sid, turn).await;
    }
    let page = await_delivery(&app, hook["id"].as_str().unwrap(), "succeeded").await;
    let deliveries = page["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 4);
    let attempts: usize = deliveries
        .iter()
        .map(|d| d["attempts"].as_array().unwrap().len())
        .sum();
    assert_eq!(attempts, 5, "one retry after the one 500");
    assert_eq!(await_requests(&receiver, 5).await.len(), 5);
}
