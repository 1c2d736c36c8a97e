//! Fan-out that scales with subscribers: a replica hears, from Redis, only the sessions it has
//! SSE subscribers for (`dsh_live_messages_total` counts what its live bus delivered).

use futures_util::StreamExt;

use crate::helpers::{spawn_replica, TestApp, TestRedis};
use crate::sse::SseClient;

const SESSIONS: usize = 1_000;

fn events_url(app: &TestApp, sid: &str) -> String {
    app.url(&format!("/v1/sessions/{sid}/events"))
}

/// (messages for watched sessions, messages for sessions without subscribers here)
async fn heard(app: &TestApp) -> (u64, u64) {
    (
        app.metric("dsh_live_messages_total{for=\"watched\"}").await,
        app.metric("dsh_live_messages_total{for=\"unwatched\"}")
            .await,
    )
}

async fn flip(app: &TestApp, sid: &str) {
    for active in [true, false] {
        let outcome = app.set_plan(sid, "main", active).await.ok();
        assert_eq!(outcome["outcome"], "committed");
    }
}

#[tokio::test]
async fn a_replica_hears_only_the_sessions_it_has_subscribers_for() {
    let redis = TestRedis::start().await;
    let idle = spawn_replica(Some(&redis), "idle").await;
    let watching = spawn_replica(Some(&redis), "watching").await;
    let writer = spawn_replica(Some(&redis), "writer").await;
    let sids: Vec<String> = futures_util::stream::iter(0..SESSIONS)
        .map(|_| writer.create_session())
        .buffer_unordered(32)
        .collect()
        .await;
    let watched = &sids[SESSIONS / 2];
    let mut sub = SseClient::connect(&events_url(&watching, watched), None).await;
    sub.until("the watched session's creation", |f| {
        f.event == "session/created"
    })
    .await;

    // Every session busy: its plan mode switched on and off.
    futures_util::stream::iter(&sids)
        .map(|sid| flip(&writer, sid))
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let off = |f: &crate::sse::Frame| f.event == "plan/mode" && f.data["data"]["active"] == false;
    sub.until("the watched session's last switch", off).await;
    let (mine, others) = heard(&watching).await;
    assert_eq!(others, 0, "the watching replica heard other sessions");
    assert!(
        (1..=2).contains(&mine),
        "it heard the watched session's commits (the first may have come before its \
         subscription was confirmed, and from the log): {mine}"
    );

    // The idle replica: a message published to it before now would reach it before one that
    // is published after it subscribes, on the same connection.
    let mut late = SseClient::connect(&events_url(&idle, watched), None).await;
    late.until("the watched session's history", off).await;
    flip(&writer, watched).await;
    late.until("a switch made after subscribing", off).await;
    let (mine, others) = heard(&idle).await;
    assert_eq!(
        others, 0,
        "the idle replica heard sessions nobody watches there"
    );
    assert!(mine <= 2, "only what came after it subscribed: {mine}");
}

/// A commit is published on its session's channel in the append's round trip: a small batch as
/// the writing replica encoded it around the commit time, a large one (over 4 KB of payloads)
/// encoded by the script, so its payloads go to Redis once. Either way the message carries
/// every event of the commit byte for byte, from its first seq.
#[tokio::test]
async fn small_and_large_commits_are_published_whole_on_the_sessions_channel() {
    // A plain channel on a node of the test's own (a cluster's is a shard channel).
    let redis = TestRedis::start_private().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    let client = redis::Client::open(redis.url.as_str()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub
        .subscribe(format!("{}:{{{sid}}}:live", redis.prefix))
        .await
        .unwrap();
    let mut messages = pubsub.into_on_message();
    let mut next = async || {
        let msg = tokio::time::timeout(std::time::Duration::from_secs(5), messages.next())
            .await
            .expect("a published message within 5 s")
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(msg.get_payload_bytes()).unwrap()
    };
    app.set_plan(&sid, "main", true).await.ok();
    let small = next().await;
    let text = "a \"quoted\" line\\ with ✓ and </script>\n".repeat(150);
    assert!(text.len() > 4096);
    app.prompt(&sid, "main", &text).await.ok();
    let large = next().await;
    let log = app.events(&sid).await;
    for (msg, kind) in [(&small, "plan/mode"), (&large, "user/message")] {
        assert_eq!(msg["sid"], sid.as_str(), "{msg}");
        let first = msg["first"].as_u64().unwrap();
        let published = msg["events"].as_array().unwrap();
        let (i, event) = published
            .iter()
            .enumerate()
            .find(|(_, e)| e[0] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {msg}"));
        let seq = first + i as u64;
        let recorded = log
            .iter()
            .find(|e| e["id"] == format!("{seq}-0"))
            .unwrap_or_else(|| panic!("no event {seq} in the log"));
        assert_eq!(recorded["type"], kind);
        assert_eq!(event[1], recorded["agent"]);
        let data: serde_json::Value = serde_json::from_str(event[2].as_str().unwrap()).unwrap();
        assert_eq!(
            data, recorded["data"],
            "the published {kind} differs from the log"
        );
    }
    let carries_text = large["events"].as_array().unwrap().iter().any(|e| {
        serde_json::from_str::<serde_json::Value>(e[2].as_str().unwrap()).unwrap()["text"] == text
    });
    assert!(carries_text, "the large message lost the prompt's text");
}
