//! On a Redis Cluster a commit is published only when some replica follows its session (see
//! `src/store/redis/follows.rs`): a replica that starts following sets the session's follow
//! mark, then reads the log; a writer learns of the mark from Redis's client-side caching on
//! the connection its `XADD` goes on. These tests run on a cluster of their own, with the
//! subscribers' replicas never rechecking quiet sessions (`sse_recheck_ms = 0`): a commit left
//! unpublished that a subscriber needed would never reach it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::helpers::{spawn_with, TestApp, TestCluster, TestRedis};
use crate::sse::{raw_ids, SseClient};

fn events_url(app: &TestApp, sid: &str, query: &str) -> String {
    app.url(&format!("/v1/sessions/{sid}/events{query}"))
}

/// `SPUBLISH`es run so far, over every node.
async fn published(redis: &TestRedis) -> u64 {
    redis
        .info("commandstats")
        .await
        .iter()
        .flat_map(|info| info.lines())
        .filter_map(|l| l.strip_prefix("cmdstat_spublish:calls="))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// A writer replica and a follower replica (which never rechecks quiet sessions).
async fn writer_and_follower(redis: &TestRedis) -> (TestApp, TestApp) {
    (
        spawn_with(Some(redis), "writer", |_| {}).await,
        spawn_with(Some(redis), "follower", |s| s.sse_recheck_ms = 0).await,
    )
}

/// Reads `sub` until the committed event `last` (a raw id), waiting up to `wait` for each
/// frame, and returns the committed ids it carried, in order.
async fn ids_within(sub: &mut SseClient, last: u64, wait: Duration) -> Vec<u64> {
    let id = format!("{last}-0");
    let mut frames = Vec::new();
    loop {
        let Some(frame) = sub.next(wait).await else {
            panic!("no {id} within {wait:?} of the last frame: {frames:#?}");
        };
        let done = frame.id.as_deref() == Some(id.as_str()) && frame.event != "plan/view";
        frames.push(frame);
        if done {
            return raw_ids(&frames);
        }
    }
}

async fn ids_until(sub: &mut SseClient, last: u64) -> Vec<u64> {
    ids_within(sub, last, Duration::from_secs(10)).await
}

/// Switches the session's plan mode `n` times, from `active`; returns where it ends.
async fn toggle(app: &TestApp, sid: &str, mut active: bool, n: usize) -> bool {
    for _ in 0..n {
        active = !active;
        let reply = app.set_plan(sid, "main", active).await.ok();
        assert_eq!(reply["outcome"], "committed", "{reply}");
    }
    active
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_nobody_follows_is_not_published_and_a_followed_one_arrives_once() {
    let cluster = TestCluster::start(3, 0, 5000).await;
    let redis = cluster.redis();
    let (writer, follower) = writer_and_follower(&redis).await;
    let sid = writer.create_session().await;
    // The first write reads the mark; the rest know it from the connection.
    let active = toggle(&writer, &sid, false, 1).await;
    let before = published(&redis).await;
    let active = toggle(&writer, &sid, active, 20).await;
    assert_eq!(
        published(&redis).await,
        before,
        "commits of a session nobody follows were published"
    );

    let mut sub = SseClient::connect(&events_url(&follower, &sid, "?after=22-0"), None).await;
    sub.until("the initial view", |f| f.event == "plan/view")
        .await;
    let before = published(&redis).await;
    toggle(&writer, &sid, active, 20).await;
    assert_eq!(
        ids_until(&mut sub, 42).await,
        (23..=42).collect::<Vec<_>>(),
        "each commit once, in order"
    );
    assert!(
        published(&redis).await >= before + 20,
        "the followed session's commits were not published"
    );
}

/// Followers that start on another replica while a writer commits as fast as it can: each
/// ends with every event exactly once, the last ones included (nothing but a live message
/// could bring them: the follower never rechecks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_that_start_while_another_replica_writes_miss_nothing_and_get_nothing_twice() {
    let cluster = TestCluster::start(3, 0, 5000).await;
    let redis = cluster.redis();
    let (writer, follower) = writer_and_follower(&redis).await;
    let writer = Arc::new(writer);
    for round in 0..8 {
        let sid = writer.create_session().await;
        let stop = Arc::new(AtomicBool::new(false));
        let writing = {
            let (writer, sid, stop) = (writer.clone(), sid.clone(), stop.clone());
            tokio::spawn(async move {
                let mut active = true;
                while !stop.load(Ordering::Relaxed) {
                    writer.set_plan(&sid, "main", active).await.ok();
                    active = !active;
                }
            })
        };
        // Some commits first (a few more each round), then the follower starts among them.
        let deadline = Instant::now() + Duration::from_secs(10);
        while writer.events_of_type(&sid, "plan/mode").await.len() < 3 + round * 4 {
            assert!(Instant::now() < deadline, "no write went through");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut sub = SseClient::connect(&events_url(&follower, &sid, ""), None).await;
        tokio::time::sleep(Duration::from_millis(20 * round as u64)).await;
        stop.store(true, Ordering::Relaxed);
        writing.await.unwrap();
        let last = writer.events(&sid).await.len() as u64;
        assert_eq!(
            ids_until(&mut sub, last).await,
            (1..=last).collect::<Vec<_>>(),
            "round {round}: not every event exactly once, in order"
        );
    }
}

/// A follow mark that Redis loses (a failover that had not replicated it, here a `DEL`) stops
/// the writer's live messages, and costs the follower nothing: its replica sets the mark again
/// within its renewal (10 s), finds it was gone, and reads the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_mark_redis_lost_costs_the_follower_no_event() {
    let cluster = TestCluster::start(3, 0, 5000).await;
    let redis = cluster.redis();
    let (writer, follower) = writer_and_follower(&redis).await;
    let sid = writer.create_session().await;
    let mut sub = SseClient::connect(&events_url(&follower, &sid, "?after=1-0"), None).await;
    sub.until("the initial view", |f| f.event == "plan/view")
        .await;
    let active = toggle(&writer, &sid, false, 1).await;
    assert_eq!(ids_until(&mut sub, 2).await, [2]);

    let mark = redis.key(&sid).replace(":log", ":followed");
    let deleted: u64 = redis::cmd("DEL")
        .arg(&mark)
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    assert_eq!(deleted, 1, "the follower had set no mark");
    let before = published(&redis).await;
    let active = toggle(&writer, &sid, active, 3).await;
    let exists: u64 = redis::cmd("EXISTS")
        .arg(&mark)
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    // (Unless the follower's renewal came among the writes and set the mark again.)
    if exists == 0 {
        assert_eq!(
            published(&redis).await,
            before,
            "published although the mark was gone"
        );
    }
    assert_eq!(
        ids_within(&mut sub, 5, Duration::from_secs(15)).await,
        [3, 4, 5],
        "the commits made while the mark was gone"
    );
    // Followed again: live.
    toggle(&writer, &sid, active, 1).await;
    assert_eq!(ids_until(&mut sub, 6).await, [6]);
}
