//! Cursor, catch-up, gaps, resync, trimmed logs and lag.

use super::events::*;
use super::*;

#[tokio::test(start_paused = true)]
async fn a_stream_catches_up_then_follows_live_without_gaps_or_duplicates() {
    // The realistic wiring: the memory log is the bus too, so every append is delivered.
    let log = Arc::new(MemoryLog::default());
    let hub = Hub::start(log.as_ref(), log.clone(), 16);
    let sid = SessionId::parse("s1").unwrap();
    let commit = |expected: u64, events: Vec<NewEvent>| {
        let log = log.clone();
        let sid = sid.clone();
        async move {
            log.append(&sid, Anchor::seq_only(expected), &events, 0)
                .await
                .unwrap()
        }
    };
    commit(0, vec![created(), mode("main", true)]).await;
    // Committed after subscribing and before the head is read: in the feed, the log and the
    // head at once, and still sent once.
    let head = async {
        commit(2, vec![select("main", false)]).await;
        fold(&log, &sid).await
    };
    let mut stream = LiveStream::open(&hub, &sid, None, true, head)
        .await
        .unwrap();
    assert_eq!(
        drain(&mut stream).await,
        [
            "view main active=true pending=false",
            "1 session/created",
            "2 plan/mode",
            "3 plan/select",
        ]
    );
    log.publish(delta(1, 1, "unrelated")).await.unwrap();
    commit(3, vec![mode("main", false)]).await;
    assert_eq!(
        drain(&mut stream).await,
        [
            "assistant/delta turn-1/1/1 unrelated",
            "4 plan/mode",
            "view main active=false @4",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_catch_up_longer_than_one_batch_sends_every_event_once_in_order() {
    let s = Session::new(16).await;
    let flips: Vec<NewEvent> = (0..1200).map(|i| mode("main", i % 2 == 0)).collect();
    s.append(flips).await;
    let mut stream = s.open(Some(1)).await;
    let items = drain(&mut stream).await;
    let ids: Vec<String> = (2..=1201).map(|seq| format!("{seq} plan/mode")).collect();
    assert_eq!(items[0], "view main active=false");
    assert_eq!(items[1..], ids[..]);
}

#[tokio::test(start_paused = true)]
async fn a_gap_in_the_feed_is_read_from_the_log() {
    let (s, mut stream) = following(16).await;
    s.append(vec![user("main")]).await; // its message is lost
    s.commit(vec![user("main")]).await;
    s.commit(vec![user("main")]).await;
    assert_eq!(
        drain(&mut stream).await,
        ["2 user/message", "3 user/message", "4 user/message"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_resync_after_the_bus_reconnected_rereads_the_log() {
    let (s, mut stream) = following(16).await;
    s.append(vec![user("main"), mode("main", true)]).await; // lost while disconnected
    s.wire.send(LiveMessage::Reconnected);
    assert_eq!(
        drain(&mut stream).await,
        ["2 user/message", "3 plan/mode", "view main active=true @3"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_cursor_older_than_the_trimmed_log_gets_a_reset_and_the_stream_ends() {
    let s = Session::new(16).await;
    s.append(vec![mode("main", true), user("main")]).await;
    s.append(vec![compacted(&[("main", true, None)])]).await;
    s.log.trim(&s.sid, 4).await.unwrap();
    let mut stale = s.open(Some(2)).await;
    assert_eq!(
        drain(&mut stale).await,
        ["view main active=true", "reset 4", "end"]
    );
    // Without a cursor the snapshot is where the session starts.
    let mut fresh = s.open(None).await;
    assert_eq!(
        drain(&mut fresh).await,
        ["view main active=true", "4 session/compacted"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_lag_while_fresh_from_a_catch_up_skips_to_the_tail_and_rereads_the_log() {
    let (s, mut stream) = following(2).await;
    for _ in 0..5 {
        s.commit(vec![user("main")]).await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await; // the hub fills the feed
    let expected: Vec<String> = (2..=6).map(|seq| format!("{seq} user/message")).collect();
    assert_eq!(drain(&mut stream).await, expected);
    s.commit(vec![user("main")]).await;
    assert_eq!(drain(&mut stream).await, ["7 user/message"]);
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_that_lags_the_feed_while_following_is_cut_off() {
    let s = Session::new(2).await;
    let mut stream = s.open(Some(1)).await;
    s.commit(vec![user("main")]).await;
    assert_eq!(
        drain(&mut stream).await,
        ["view main active=false", "2 user/message"]
    );
    for _ in 0..5 {
        s.commit(vec![user("main")]).await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(drain(&mut stream).await, ["end"]);
}

#[tokio::test(start_paused = true)]
async fn a_deletion_notice_ends_the_stream_with_deleted() {
    let (s, mut stream) = following(16).await;
    assert!(s.log.delete(&s.sid).await.unwrap());
    s.wire.send(LiveMessage::Deleted { sid: s.sid.clone() });
    assert_eq!(drain(&mut stream).await, ["deleted", "end"]);
}

#[tokio::test(start_paused = true)]
async fn a_deletion_whose_notice_was_lost_is_found_by_the_next_catch_up() {
    let (s, mut stream) = following(16).await;
    // The notice goes to the log's own listeners, none here: lost, as on a bus outage.
    assert!(s.log.delete(&s.sid).await.unwrap());
    assert_eq!(drain(&mut stream).await, Vec::<String>::new());
    s.wire.send(LiveMessage::Reconnected);
    assert_eq!(drain(&mut stream).await, ["deleted", "end"]);
}

#[tokio::test(start_paused = true)]
async fn a_commit_whose_message_was_lost_at_the_tail_arrives_with_the_next_recheck() {
    let (s, mut stream) = following(16).await;
    s.hub.recheck_quiet_feeds(Duration::from_secs(5));
    // Heard: the feed knows the log reaches 2.
    s.commit(vec![mode("main", true)]).await;
    assert_eq!(
        drain(&mut stream).await,
        ["2 plan/mode", "view main active=true @2"]
    );
    // Its writer died before the message: nothing comes until the session's next message…
    s.append(vec![mode("main", false), mode("main", true)])
        .await;
    assert_eq!(drain(&mut stream).await, Vec::<String>::new());
    // …or the recheck, which reads the quiet session's log past what the feed knows: not the
    // first one (the feed heard 2 in its period), the one after.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(drain(&mut stream).await, Vec::<String>::new());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        drain(&mut stream).await,
        [
            "3 plan/mode",
            "view main active=false @3",
            "4 plan/mode",
            "view main active=true @4"
        ]
    );
    // Then live again, nothing twice.
    s.commit(vec![mode("main", false)]).await;
    assert_eq!(
        drain(&mut stream).await,
        ["5 plan/mode", "view main active=false @5"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_subscriber_catching_up_past_a_lost_message_brings_the_first_along() {
    let (s, mut first) = following(16).await;
    s.hub.recheck_quiet_feeds(Duration::from_secs(5));
    // Lost: the first stream waits on the feed…
    s.append(vec![mode("main", true)]).await;
    assert_eq!(drain(&mut first).await, Vec::<String>::new());
    // …while a second one (a reload, a client of the dead replica resuming here) reads it
    // from the log: what it caught up to is past what the feed heard, so the first reads on
    // at the next recheck.
    let mut second = s.open(Some(1)).await;
    assert_eq!(
        drain(&mut second).await,
        ["view main active=true", "2 plan/mode"]
    );
    assert_eq!(drain(&mut first).await, Vec::<String>::new());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        drain(&mut first).await,
        ["2 plan/mode", "view main active=true @2"]
    );
    // And nothing more after the rechecks.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(drain(&mut first).await, Vec::<String>::new());
    assert_eq!(drain(&mut second).await, Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn a_deletion_whose_notice_was_lost_ends_quiet_streams_at_a_recheck() {
    let (s, mut stream) = following(16).await;
    s.hub.recheck_quiet_feeds(Duration::from_secs(5));
    assert!(s.log.delete(&s.sid).await.unwrap());
    assert_eq!(drain(&mut stream).await, Vec::<String>::new());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(drain(&mut stream).await, ["deleted", "end"]);
}
