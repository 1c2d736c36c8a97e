//! On a Redis Cluster of the test's own (3 primaries with a replica each): a primary killed
//! with `kill -9` while writes run is replaced by its replica, writes resume, and with
//! `DSH_REDIS_WAIT_REPLICAS=1` no write the service acknowledged is lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::{spawn_with, TestApp, TestCluster, TestRedis};

/// What one writer had acknowledged: (event id, plan state) of every committed toggle.
type Acked = Vec<(String, bool)>;

/// Toggles the plan of `sid` until `stop`, keeping what was acknowledged as committed.
async fn toggle_until(app: Arc<TestApp>, sid: String, stop: Arc<AtomicBool>) -> (Acked, usize) {
    let (mut acked, mut refused) = (Vec::new(), 0);
    let mut active = true;
    while !stop.load(Ordering::Relaxed) {
        let reply = app.set_plan(&sid, "main", active).await;
        if reply.status.is_success() {
            if reply.body["outcome"] == "committed" {
                let id = reply.body["last_event_id"].as_str().unwrap().to_owned();
                acked.push((id, active));
            }
            active = !active;
        } else {
            // The outage: 503 while the slot has no primary, or no replica acknowledges.
            assert_eq!(reply.status, 503, "{reply:?}");
            refused += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    (acked, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_during_writes_fails_over_and_no_acknowledged_write_is_lost() {
    let mut cluster = TestCluster::start(3, 1, 1000).await;
    let redis = cluster.redis();
    let app = Arc::new(spawn_with(Some(&redis), "a", |s| s.redis_wait_replicas = 1).await);
    let mut sessions = Vec::new();
    for _ in 0..6 {
        sessions.push(app.create_session().await);
    }
    let victim_key = redis.key(&sessions[0]);
    let victim = cluster.master_of(&victim_key).await;

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = sessions
        .iter()
        .map(|sid| tokio::spawn(toggle_until(app.clone(), sid.clone(), stop.clone())))
        .collect();
    // Writes are running: the victim's session has acknowledged some.
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.events_of_type(&sessions[0], "plan/mode").await.len() < 5 {
        assert!(Instant::now() < deadline, "no write went through");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    cluster.kill(victim);
    let promoted = cluster.await_failover(&victim_key, victim).await;
    // The promoted replica has no replica of its own until the old primary rejoins as one.
    cluster.restart(victim).await;

    // Writes resume on every session, the failed-over one included.
    let mut marks = Vec::new();
    for sid in &sessions {
        marks.push(app.events_of_type(sid, "plan/mode").await.len());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for (sid, mark) in sessions.iter().zip(marks) {
        while app.events_of_type(sid, "plan/mode").await.len() < mark + 3 {
            assert!(
                Instant::now() < deadline,
                "writes to {sid} did not resume after {victim} failed over to {promoted}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);

    let mut refused_total = 0;
    for (sid, writer) in sessions.iter().zip(writers) {
        let (acked, refused) = writer.await.unwrap();
        refused_total += refused;
        let log = app.events(sid).await;
        for (id, active) in acked {
            let event = log.iter().find(|e| e["id"] == id.as_str());
            assert!(
                event.is_some_and(
                    |e| e["type"] == "plan/mode" && e["data"] == json!({"active": active})
                ),
                "acknowledged write {id} (active: {active}) of {sid} is not in its log: {event:?}"
            );
        }
    }
    assert!(
        refused_total > 0,
        "the outage was never seen: the primary of the written slot was not the one killed"
    );
}

/// `calls` of `EVALSHA` in the node's `INFO commandstats`.
async fn scripts_run(port: u16) -> u64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_slot_moves_to_another_primary_keeps_taking_writes_there() {
    let cluster = TestCluster::start(3, 0, 1000).await;
    let redis = cluster.redis();
    let app = Arc::new(spawn_with(Some(&redis), "a", |_| {}).await);
    let sid = app.create_session().await;
    let key = redis.key(&sid);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(toggle_until(app.clone(), sid.clone(), stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.events_of_type(&sid, "plan/mode").await.len() < 5 {
        assert!(Instant::now() < deadline, "no write went through");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // While writes run: the slot is migrated key by key (commands meet ASK), then given to
    // the new primary (commands sent to the old one meet MOVED).
    let (from, to) = cluster.move_slot(&key).await;
    let moved = app.events_of_type(&sid, "plan/mode").await.len();
    let ran_there = scripts_run(to).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.events_of_type(&sid, "plan/mode").await.len() < moved + 10 {
        assert!(
            Instant::now() < deadline,
            "writes stopped after the slot moved from {from} to {to}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (acked, refused) = writer.await.unwrap();
    assert_eq!(
        refused, 0,
        "a write failed while its slot moved from {from} to {to}"
    );
    assert!(
        scripts_run(to).await >= ran_there + 10,
        "the writes after the move did not run on the new primary ({to})"
    );
    let log = app.events(&sid).await;
    for (id, active) in acked {
        assert!(
            log.iter()
                .any(|e| e["id"] == id.as_str() && e["data"] == json!({"active": active})),
            "acknowledged write {id} is not in the log"
        );
    }
}

/// Sets the plan of `sid`'s main agent in a task of its own: its reply, and how long it took.
fn timed_set_plan(
    app: &Arc<TestApp>,
    sid: &str,
    active: bool,
) -> tokio::task::JoinHandle<(crate::helpers::Reply, Duration)> {
    let (app, sid) = (app.clone(), sid.to_owned());
    tokio::spawn(async move {
        let started = Instant::now();
        let reply = app.set_plan(&sid, "main", active).await;
        (reply, started.elapsed())
    })
}

/// A write that reaches a session mid-migration, when its log has moved to the new primary and
/// its other keys (request markers, never written) are on neither: the new primary answers
/// the append script `TRYAGAIN` until the slot is its own. The write waits for that (1.4 s
/// here), within the response timeout (2 s), and commits once. (The cluster client's own
/// retry waits 1.28 s before it asks again, and gives up after the second `TRYAGAIN`: a move
/// that took longer than that failed the write.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_during_a_slot_migration_waits_for_it_to_finish_and_commits_once() {
    let cluster = TestCluster::start(3, 0, 30_000).await;
    let redis = cluster.redis();
    let app = Arc::new(spawn_with(Some(&redis), "a", |_| {}).await);
    let sid = app.create_session().await;
    assert!(app.set_plan(&sid, "main", true).await.status.is_success());
    let moving = cluster.begin_move(&redis.key(&sid)).await;
    let writer = timed_set_plan(&app, &sid, false);
    // Past the cluster client's retry (1.28 s after its first TRYAGAIN), well within the 2 s
    // timeout.
    tokio::time::sleep(Duration::from_millis(1_400)).await;
    assert!(!writer.is_finished(), "the write did not wait for the move");
    cluster.finish_move(&moving).await;
    let (reply, took) = writer.await.unwrap();
    assert_eq!(reply.status, 200, "after {took:?}: {reply:?}");
    assert_eq!(reply.body["outcome"], "committed", "{reply:?}");
    let modes: Vec<_> = app
        .events_of_type(&sid, "plan/mode")
        .await
        .iter()
        .map(|e| e["data"]["active"].clone())
        .collect();
    assert_eq!(modes, [json!(true), json!(false)], "the write ran once");
}

/// A primary that hangs past the response timeout (2 s) while a write is on its way: the
/// write is answered 503 (within the timeout, not after a second one) and sent once. (Sent
/// again after the timeout, both copies ran when the node woke: the first committed, the
/// second met those events as a conflict, and the write was answered as a no-op although it
/// had changed the plan.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_a_primary_that_hangs_past_the_timeout_is_refused_not_run_twice() {
    let cluster = TestCluster::start(3, 0, 30_000).await;
    let redis = cluster.redis();
    let app = Arc::new(spawn_with(Some(&redis), "a", |_| {}).await);
    let sid = app.create_session().await;
    for active in [true, false, true] {
        assert!(app.set_plan(&sid, "main", active).await.status.is_success());
    }
    let port = cluster.master_of(&redis.key(&sid)).await;
    cluster.pause(port, true);
    let writer = timed_set_plan(&app, &sid, false);
    // Well past the 2 s timeout (however late the write reaches the node), then awake.
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    cluster.pause(port, false);
    let (reply, took) = writer.await.unwrap();
    assert_eq!(reply.status, 503, "{reply:?}");
    assert!(
        took < Duration::from_millis(3_500),
        "answered after {took:?}"
    );
    // The write may have run when the node woke (a 503 after a timeout does not say it did
    // not), once.
    let toggles = app.events_of_type(&sid, "plan/mode").await.len();
    assert!((3..=4).contains(&toggles), "{toggles} plan/mode events");
}

/// A cluster of 3 primaries with a replica each, a server with `DSH_REDIS_WAIT_REPLICAS=1`, and
/// a session written once with an `Idempotency-Key`: every key of the session exists (its
/// request markers too), so a write can run on a primary its slot is moving to (one whose keys
/// are split between the two meets `TRYAGAIN` there and is refused anyway).
async fn keyed_session_waiting_for_a_replica() -> (TestCluster, TestRedis, Arc<TestApp>, String) {
    let cluster = TestCluster::start(3, 1, 30_000).await;
    let redis = cluster.redis();
    let app = Arc::new(spawn_with(Some(&redis), "a", |s| s.redis_wait_replicas = 1).await);
    let sid = app.create_session().await;
    let keyed = crate::idempotency::keyed(
        &app,
        reqwest::Method::PUT,
        &format!("/v1/sessions/{sid}/agents/main/plan"),
        "first",
        json!({"active": true}),
    )
    .await;
    assert_eq!(keyed.status, 200, "{:?}", keyed.body);
    (cluster, redis, app, sid)
}

/// With `DSH_REDIS_WAIT_REPLICAS=1`, a write whose slot is being moved to another primary (its
/// keys are already there: the old primary answers `ASK`) is acknowledged only once the new
/// primary's replica has it. (`WAIT` used to go where the cluster's routes still sent the key,
/// the old primary, which acknowledged at once what it had never been sent.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_redirected_to_the_primary_its_slot_moves_to_waits_for_that_primarys_replica() {
    let (cluster, redis, app, sid) = keyed_session_waiting_for_a_replica().await;
    let moving = cluster.begin_move(&redis.key(&sid)).await;
    let ran_there = scripts_run(moving.to).await;

    // The new primary's replica hangs: nothing written there can be acknowledged.
    let replica = cluster.replica_of(moving.to).await;
    cluster.pause(replica, true);
    let refused = app.set_plan(&sid, "main", false).await;
    cluster.pause(replica, false);
    assert_eq!(
        refused.status, 503,
        "acknowledged while the replica of the primary that took it was stopped: {refused:?}"
    );
    assert!(
        scripts_run(moving.to).await > ran_there,
        "the write did not reach the primary the slot is moving to ({})",
        moving.to
    );

    // With the replica back, a write is acknowledged, and it is in the log.
    let reply = app.set_plan(&sid, "main", true).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.body["outcome"], "committed", "{reply:?}");
    let id = reply.body["last_event_id"].as_str().unwrap().to_owned();
    cluster.finish_move(&moving).await;
    let log = app.events(&sid).await;
    assert!(
        log.iter()
            .any(|e| e["id"] == id.as_str() && e["data"] == json!({"active": true})),
        "acknowledged write {id} is not in the log"
    );
}

/// The same with the write carried by the cluster client: the slot moved to another primary
/// (the direct routes still name the old one, which answers `MOVED`), which then starts moving
/// it on (the cluster client follows `MOVED`, then `ASK`, to a third node). Its `WAIT` would
/// go where the cluster client routes the key, the second primary, which never had the write:
/// a write the cluster client carried is taken as acknowledged by no replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_cluster_client_carries_during_a_slot_move_is_not_taken_as_replicated() {
    let (cluster, redis, app, sid) = keyed_session_waiting_for_a_replica().await;
    let key = redis.key(&sid);
    let (_, moved_to) = cluster.move_slot(&key).await;
    let moving = cluster.begin_move(&key).await;
    assert_eq!(moving.from, moved_to);
    let ran_there = scripts_run(moving.to).await;

    let replica = cluster.replica_of(moving.to).await;
    cluster.pause(replica, true);
    let reply = app.set_plan(&sid, "main", false).await;
    cluster.pause(replica, false);
    assert!(
        scripts_run(moving.to).await > ran_there,
        "the write did not reach the primary the slot is moving to ({}): {reply:?}",
        moving.to
    );
    assert_eq!(
        reply.status, 503,
        "acknowledged while the replica of the primary that took it was stopped: {reply:?}"
    );
}
