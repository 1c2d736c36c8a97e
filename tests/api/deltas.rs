//! Assistant deltas on the live stream: they travel apart from the log, so a stream must drop
//! the ones that reach it after their step's recorded message.

use std::collections::HashSet;
use std::time::Duration;

use crate::helpers::{spawn_replica, TestRedis};
use crate::sse::{Frame, SseClient};

/// The `(turn, step)` a delta or an assistant message belongs to.
fn step_of(f: &Frame) -> (String, u64) {
    let data = &f.data["data"];
    (
        data["turn"].as_str().unwrap().to_owned(),
        data["step"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn no_delta_of_a_step_reaches_a_subscriber_after_that_steps_message() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let url = |app: &crate::helpers::TestApp, query: &str| {
        app.url(&format!("/v1/sessions/{sid}/events{query}"))
    };
    let mut subscribers = [
        SseClient::connect(&url(&a, ""), None).await,
        SseClient::connect(&url(&b, "?types=assistant/*"), None).await,
    ];
    let turns = 5;
    for round in 0..turns {
        let text = format!("round {round}: a request of several words to stream back");
        let turn = a.prompt(&sid, "main", &text).await.ok()["turn"]
            .as_str()
            .unwrap()
            .to_owned();
        a.await_turn_end(&sid, &turn).await;
    }
    for sub in &mut subscribers {
        let mut frames = Vec::new();
        let mut messages = 0;
        while messages < turns {
            let frame = sub
                .next(Duration::from_secs(10))
                .await
                .expect("every message arrives");
            messages += usize::from(frame.event == "assistant/message");
            frames.push(frame);
        }
        // Stragglers published before the last message may still be on their way.
        while let Some(frame) = sub.next(Duration::from_millis(300)).await {
            frames.push(frame);
        }
        let mut answered = HashSet::new();
        let mut deltas = 0;
        for f in &frames {
            match f.event.as_str() {
                "assistant/message" => {
                    answered.insert(step_of(f));
                }
                "assistant/delta" => {
                    deltas += 1;
                    assert!(
                        !answered.contains(&step_of(f)),
                        "a delta after its step's message: {f:?}"
                    );
                    assert_eq!(f.data["data"]["attempt"], 1, "{f:?}");
                }
                _ => {}
            }
        }
        assert_eq!(answered.len(), turns);
        assert!(deltas > 0, "deltas are streamed");
    }
}
