//! Webhook registrations and delivery lists under abuse: address spellings of loopback and
//! metadata hosts, duplicated event types, the per-tenant limit raced from two replicas, and
//! bad paging parameters (always a 400 problem, never a 500).

use serde_json::json;

use crate::helpers::{spawn_with, TestRedis};
use crate::webhooks::register;

#[tokio::test]
async fn other_spellings_of_private_addresses_are_refused_and_duplicate_events_kept_once() {
    let redis = TestRedis::start().await;
    let app = spawn_with(Some(&redis), "a", |s| s.default_rate = 100_000).await;
    for url in [
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://0x7f.1/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data",
        "http://LOCALHOST:9/",
        "http://0/",
    ] {
        app.post_json(
            "/v1/webhooks",
            json!({"url": url, "events": ["turn.ended"]}),
        )
        .await
        .assert_problem(400, "invalid-webhook");
    }
    let events = vec!["turn.ended"; 4000];
    let created = register(&app, "https://hooks.example.com/x", &events).await;
    assert_eq!(created["events"], json!(["turn.ended"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_registrations_stop_at_sixteen() {
    let redis = TestRedis::start().await;
    let a = spawn_with(Some(&redis), "a", |s| s.default_rate = 100_000).await;
    let b = spawn_with(Some(&redis), "b", |s| s.default_rate = 100_000).await;
    let body = json!({"url": "https://hooks.example.com/race", "events": ["turn.ended"]});
    let tries = (0..20).map(|i| {
        let (app, body) = (if i % 2 == 0 { &a } else { &b }, body.clone());
        async move { app.post_json("/v1/webhooks", body).await.status }
    });
    let statuses = futures_util::future::join_all(tries).await;
    let made = statuses.iter().filter(|s| s.as_u16() == 201).count();
    let refused = statuses.iter().filter(|s| s.as_u16() == 429).count();
    assert_eq!((made, refused), (16, 4), "{statuses:?}");
    let list = a.get("/v1/webhooks").await.ok();
    assert_eq!(list["webhooks"].as_array().unwrap().len(), 16);
}

#[tokio::test]
async fn bad_paging_of_deliveries_is_a_400_problem() {
    let redis = TestRedis::start().await;
    let app = spawn_with(Some(&redis), "a", |s| s.default_rate = 100_000).await;
    let id = register(&app, "https://hooks.example.com/x", &["turn.ended"]).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for query in [
        "limit=0",
        "limit=201",
        "limit=-1",
        "limit=abc",
        "limit=99999999999",
        "cursor=",
        "cursor=d",
        "cursor=d1764780000000",
        "cursor=d1764780000000:msg_zz",
        "cursor=d%2B",
        "cursor=d(1764780000000:msg_0",
        "after=1",
    ] {
        app.get(&format!("/v1/webhooks/{id}/deliveries?{query}"))
            .await
            .assert_problem(400, "invalid-query");
    }
    let far = format!("d{}:msg_{}", "9".repeat(13), "f".repeat(64));
    let page = app
        .get(&format!(
            "/v1/webhooks/{id}/deliveries?cursor={far}&limit=200"
        ))
        .await
        .ok();
    assert_eq!(page["deliveries"], json!([]));
}
