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
