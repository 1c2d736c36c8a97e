//! What a stream derives: plan views, and which deltas it may still send.

use super::events::*;
use super::*;

#[tokio::test(start_paused = true)]
async fn a_delta_that_reaches_the_stream_after_its_steps_message_is_dropped() {
    let s = Session::new(16).await;
    s.commit(vec![turn_started()]).await;
    let mut stream = s.open(Some(2)).await;
    // All of this happens while the stream has not read yet: it catches up from the log
    // (the message included) while the deltas wait in the feed.
    s.commit(vec![step_started(1)]).await;
    s.publish(delta(1, 1, "Do"));
    s.commit(vec![answered(1)]).await;
    s.publish(delta(1, 1, "ne"));
    assert_eq!(
        drain(&mut stream).await,
        [
            "view main active=false",
            "3 step/started",
            "4 assistant/message"
        ]
    );
    // Live: a delta before the message passes, a straggler after it does not, and the next
    // step's deltas pass again.
    s.commit(vec![step_started(2)]).await;
    s.publish(delta(2, 1, "a"));
    s.commit(vec![answered(2)]).await;
    s.publish(delta(2, 1, "b"));
    s.publish(delta(1, 1, "older step"));
    s.publish(delta(3, 1, "c"));
    assert_eq!(
        drain(&mut stream).await,
        [
            "5 step/started",
            "assistant/delta turn-1/2/1 a",
            "6 assistant/message",
            "assistant/delta turn-1/3/1 c",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_delta_of_an_attempt_older_than_the_latest_retry_is_dropped() {
    let s = Session::new(16).await;
    s.commit(vec![turn_started(), step_started(1)]).await;
    let mut stream = s.open(Some(1)).await;
    assert_eq!(
        drain(&mut stream).await,
        ["view main active=false", "2 turn/started", "3 step/started"]
    );
    s.publish(delta(1, 1, "first"));
    s.commit(vec![step_retried(1, 2)]).await;
    s.publish(delta(1, 1, "stale"));
    s.publish(delta(1, 2, "second"));
    assert_eq!(
        drain(&mut stream).await,
        [
            "assistant/delta turn-1/1/1 first",
            "4 step/retried",
            "assistant/delta turn-1/1/2 second",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn plan_views_come_for_the_changed_agent_only_and_not_for_events_replayed_up_to_the_head() {
    let s = Session::new(16).await;
    s.commit(vec![
        spawned("agent-1"),
        spawned("agent-2"),
        mode("main", true),
        mode("main", false),
        mode("main", true),
    ])
    .await;
    let mut stream = s.open(Some(1)).await;
    s.commit(vec![select("agent-2", true), user("agent-1")])
        .await;
    s.commit(vec![mode("main", false), select("agent-2", true)])
        .await;
    assert_eq!(
        drain(&mut stream).await,
        [
            "view agent-1 active=false",
            "view agent-2 active=false",
            "view main active=true",
            "2 agent/spawned",
            "3 agent/spawned",
            "4 plan/mode",
            "5 plan/mode",
            "6 plan/mode",
            "7 plan/select",
            "view agent-2 active=false pending=true @7",
            "8 user/message",
            "9 plan/mode",
            "view main active=false @9",
            "10 plan/select",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_sends_views_only_for_the_agents_it_changed() {
    let s = Session::new(16).await;
    s.commit(vec![spawned("agent-1"), mode("main", true)]).await;
    let mut stream = s.open(Some(3)).await;
    s.commit(vec![compacted(&[
        ("agent-1", false, Some(true)),
        ("main", true, None),
    ])])
    .await;
    assert_eq!(
        drain(&mut stream).await,
        [
            "view agent-1 active=false",
            "view main active=true",
            "4 session/compacted",
            "view agent-1 active=false pending=true @4",
        ]
    );
}
