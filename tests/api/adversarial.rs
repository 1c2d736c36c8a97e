//! Found by an adversarial review of the issue-9 work, each fixed since: races between
//! replicas, Redis losing data under a cached fold, a panicking runner, a paused replica, a
//! session heavier than a cache shard, a cursor past the head, many hand-overs at once. Each
//! test failed on the code it was written against and guards that behaviour now.

use std::time::Duration;

use serde_json::json;

use crate::failover::spawn_process;
use crate::helpers::{spawn_replica, verify, TestApp, TestRedis};
use crate::mock_provider::{text_reply, MockProvider};
use crate::review::plan_and_await_review;

/// Whether `turn` ends within `wait`.
async fn ends_within(app: &TestApp, sid: &str, turn: &str, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        let events = app.events(sid).await;
        if events
            .iter()
            .any(|e| e["type"] == "turn/ended" && e["data"]["turn"] == turn)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Two users answer the same review at once, one through each replica: the first answer wins,
/// the other gets 409, and the turn goes on. (It once stalled when the loser was the replica
/// that had taken the turn's lease: the winner saw the lease taken, the loser let it go.)
#[tokio::test]
async fn racing_answers_on_two_replicas_never_leave_an_answered_turn_without_a_runner() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let mut reviews = Vec::new();
    for _ in 0..24 {
        let sid = a.create_session().await;
        let (turn, q) = plan_and_await_review(&a, &sid, "fix the login bug").await;
        let qid = q["id"].as_str().unwrap().to_owned();
        b.await_question(&sid).await;
        reviews.push((sid, turn, qid));
    }
    let races = reviews.iter().map(|(sid, _, qid)| {
        let (a, b) = (&a, &b);
        async move {
            let approve = json!({"label": "Approve"});
            let (x, y) = tokio::join!(
                a.answer(sid, qid, approve.clone()),
                b.answer(sid, qid, approve)
            );
            let mut codes = [x.status.as_u16(), y.status.as_u16()];
            codes.sort();
            assert_eq!(codes, [200, 409], "one answer wins: {x:?} {y:?}");
        }
    });
    futures_util::future::join_all(races).await;
    let mut stuck = Vec::new();
    tokio::time::sleep(Duration::from_secs(6)).await;
    for (sid, turn, _) in &reviews {
        if !ends_within(&a, sid, turn, Duration::from_millis(100)).await {
            let session = a.session(sid).await.ok();
            stuck.push(format!("{sid}: {}", session["agents"][0]));
        }
    }
    assert!(
        stuck.is_empty(),
        "{} of {} approved turns never continued: {stuck:#?}",
        stuck.len(),
        reviews.len()
    );
}

/// Redis loses the tail of a session's log and other replicas write it back past the seq a
/// replica folded, with different events. A decision on that stale fold is refused (the
/// append compares the last entry's commit time too) and made again on the new log. (The
/// commit time has millisecond resolution: a rewrite within the same millisecond as the lost
/// entry would go unnoticed, so the test lets the clock move on first.)
#[tokio::test]
async fn a_decision_is_never_committed_on_a_cache_that_the_log_has_replaced() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let snapshot = redis.snapshot(&sid).await;
    // A caches a session with `agent-1` in it (seq 2)...
    let spawned = a.spawn_agent(&sid, None).await.ok();
    assert_eq!(spawned["id"], "agent-1");
    let lost = a.events(&sid).await.last().unwrap()["committed_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let lost = humantime::parse_rfc3339(&lost).unwrap();
    while std::time::SystemTime::now() <= lost + Duration::from_millis(1) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // ...which Redis then loses: it comes back from the snapshot taken at seq 1.
    redis.lose_since(&sid, snapshot).await;
    // B writes seq 2 anew.
    b.set_plan(&sid, "main", true).await.ok();
    // A decides on its cache, in which agent-1 still exists.
    let reply = a.set_plan(&sid, "agent-1", true).await;
    let session = b.session(&sid).await;
    let (ok, out) = verify(&redis, &sid);
    assert!(
        reply.status.as_u16() == 404 && session.status.as_u16() == 200 && ok,
        "agent-1 no longer exists, yet A decided on its stale fold: {reply:?}\n\
         the session on B now: {session:?}\nverify: {out}"
    );
}

/// Redis loses the tail of a session's log (it comes back from an earlier snapshot) and nothing
/// writes it back. A replica whose fold still holds the lost entry writes the next seq of its
/// fold: Redis takes it (the log's last id is lower), and the read in the same round trip shows
/// the entry it built on is gone. The write is taken back before anything is published, the
/// decision made again on what is left, and the log keeps no gap: the next write lands right
/// after what Redis kept.
#[tokio::test]
async fn a_write_on_a_fold_past_what_the_log_lost_is_taken_back_and_decided_again() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let sid = a.create_session().await;
    let snapshot = redis.snapshot(&sid).await;
    a.set_plan(&sid, "main", true).await.ok(); // seq 2, then lost
    redis.lose_since(&sid, snapshot).await;
    // On A's fold plan mode is on: turning it off is a change there, none on the log.
    let off = a.set_plan(&sid, "main", false).await.ok();
    assert_eq!(
        (
            &off["outcome"],
            &off["last_event_id"],
            &off["plan"]["active"]
        ),
        (&json!("noop"), &json!("1-0"), &json!(false)),
        "{off}"
    );
    let types = |events: Vec<serde_json::Value>| {
        events
            .iter()
            .map(|e| format!("{} {}", e["id"], e["type"]))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        types(a.events(&sid).await),
        ["\"1-0\" \"session/created\""],
        "the write made on the lost entry stayed in the log"
    );
    // The stream's last id went back with it: the next write takes seq 2.
    a.set_plan(&sid, "main", true).await.ok();
    assert_eq!(
        types(a.events(&sid).await),
        ["\"1-0\" \"session/created\"", "\"2-0\" \"plan/mode\""]
    );
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "verify: {out}");
}

/// A provider chunk with an absurd tool-call `index` fails the step instead of panicking, and
/// a runner that panics anyway ends its turn as failed and stops renewing its lease: no turn
/// stays `running` with nobody running it.
#[tokio::test]
async fn a_runner_that_panics_does_not_keep_its_turn_leased_forever() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    let bad = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":18446744073709551615,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"x\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n";
    mock.next(bad.to_owned(), Duration::ZERO).await;
    mock.otherwise(text_reply("Done after all.")).await;
    let a = mock.replica_named(&redis, "a", |_| {}).await;
    let _b = mock.replica_named(&redis, "b", |_| {}).await;
    let sid = a.create_session().await;
    let turn = a.prompt(&sid, "main", "hello").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    mock.await_requests(1).await;
    let ended = ends_within(&a, &sid, &turn, Duration::from_secs(10)).await;
    let mut conn = redis.conn().await;
    let member = format!("{sid} main {turn}");
    let expiry: Option<f64> = redis::cmd("ZSCORE")
        .arg(redis.lease_expiry_key(&member))
        .arg(&member)
        .query_async(&mut conn)
        .await
        .unwrap();
    let requests = mock.requests().await.len();
    assert!(
        ended,
        "10 s after its runner died the turn is still {} with {requests} provider request(s); \
         its lease expires at {expiry:?} (still renewed)",
        a.session(&sid).await.ok()["agents"][0]["status"]
    );
}

/// Bytes Redis (every node of a cluster) has sent to clients so far.
async fn redis_bytes_out(redis: &TestRedis) -> u64 {
    let mut total = 0;
    for info in redis.info("stats").await {
        total += info
            .lines()
            .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap();
    }
    total
}

/// A session whose history outweighs one cache shard's budget is still cached (its weight is
/// capped), so reads of it read only past the fold instead of folding all of it again.
#[tokio::test]
async fn a_session_with_a_large_history_is_still_read_only_past_its_fold() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    // 2,500 messages of 32,000 bytes on `main`, as 2,500 POSTs of the largest accepted text
    // would record them (written directly: the turns they start do not matter here).
    let mut conn = redis.conn().await;
    let text = "x".repeat(32_000);
    let data = json!({ "text": text }).to_string();
    for chunk in (2..2_502u64).collect::<Vec<_>>().chunks(250) {
        let mut pipe = redis::pipe();
        for seq in chunk {
            pipe.cmd("XADD")
                .arg(redis.key(&sid))
                .arg(format!("{seq}-0"))
                .arg("type")
                .arg("user/message")
                .arg("agent")
                .arg("main")
                .arg("data")
                .arg(&data)
                .arg("ts")
                .arg(1_764_670_000_000u64 + seq)
                .arg("v")
                .arg(1)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await.unwrap();
    }
    app.plan(&sid, "main").await.ok(); // folds the session once
    let before = redis_bytes_out(&redis).await;
    let started = std::time::Instant::now();
    for _ in 0..5 {
        app.plan(&sid, "main").await.ok();
    }
    let took = started.elapsed();
    let sent = redis_bytes_out(&redis).await - before;
    assert!(
        sent < 1_000_000,
        "5 GET plan on an unchanged session read {} MB from Redis in {took:?}: the fold is \
         not cached, each read folds all 80 MB again",
        sent / 1_000_000
    );
}

/// A replica paused longer than the lease ttl (here SIGSTOP) loses its turn to another, which
/// records attempt 2. Waking, it finds the step taken over and its lease gone: it stops, and
/// never takes the step back with another retry.
#[tokio::test]
async fn a_runner_woken_after_losing_its_lease_does_not_take_the_step_back() {
    let redis = TestRedis::start().await;
    let mut bad = Vec::new();
    for round in 0..3 {
        let crate::failover::Replica {
            child: mut a,
            app: a_app,
        } = spawn_process(&redis, "a", 200).await;
        let crate::failover::Replica {
            child: mut b,
            app: b_app,
        } = spawn_process(&redis, "b", 200).await;
        let sid = a_app.create_session().await;
        let prompt = "tell me everything about the login flow and its many parts ".repeat(4);
        let turn = a_app.prompt(&sid, "main", &prompt).await.ok()["turn"]
            .as_str()
            .unwrap()
            .to_owned();
        a_app
            .await_event(&sid, "step/started", |e| e["type"] == "step/started")
            .await;
        unsafe { libc::kill(a.id() as i32, libc::SIGSTOP) };
        b_app
            .await_event(&sid, "step/retried", |e| e["type"] == "step/retried")
            .await;
        unsafe { libc::kill(a.id() as i32, libc::SIGCONT) };
        let events = b_app.await_turn_end(&sid, &turn).await;
        let retries: Vec<String> = events
            .iter()
            .filter(|e| e["type"] == "step/retried")
            .map(|e| {
                format!(
                    "attempt {} by {}",
                    e["data"]["attempt"], e["data"]["replica"]
                )
            })
            .collect();
        if retries.len() != 1 {
            bad.push(format!(
                "round {round}: {retries:?}, ended {}",
                events.last().unwrap()["data"]["reason"]
            ));
        }
        let _ = a.kill();
        let _ = b.kill();
        let _ = a.wait();
        let _ = b.wait();
    }
    assert!(
        bad.is_empty(),
        "a woken runner took the step back: {bad:#?}"
    );
}

/// A cursor past the session's last event (a parent's `Last-Event-ID` reused on its fork,
/// whose ids restart at 1) is refused with 400 instead of silently swallowing every event up
/// to it.
#[tokio::test]
async fn a_cursor_past_the_head_is_refused_not_silently_swallowed() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    for _ in 0..20 {
        app.set_plan(&sid, "main", true).await.ok();
        app.set_plan(&sid, "main", false).await.ok();
    }
    let fork = app
        .post_json(&format!("/v1/sessions/{sid}/fork"), json!({}))
        .await
        .ok()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The frontend resumes the fork with the parent's cursor.
    let reply = app
        .get(&format!("/v1/sessions/{fork}/events?after=41-0"))
        .await;
    let detail = reply.assert_problem(400, "cursor-out-of-range");
    assert!(detail.contains("41-0"), "{detail}");
    // At the head itself a stream opens (and a later event reaches it).
    let head = app.session(&fork).await.ok()["last_event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = app.url(&format!(
        "/v1/sessions/{fork}/events?after={head}&max_ms=1500"
    ));
    let res = app.client.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let stream = tokio::spawn(async move { res.text().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.set_plan(&fork, "main", true).await.ok();
    let body = stream.await.unwrap();
    assert!(body.contains("event: plan/mode"), "{body:?}");
}

/// The flush before an answer is recorded: every delta of a step reaches a subscriber before
/// the step's message, so the deltas spell the message (deltas.rs alone would pass without it,
/// since a stream drops deltas that arrive late).
#[tokio::test]
async fn every_delta_of_a_step_arrives_before_its_message_and_they_spell_it() {
    use crate::sse::SseClient;
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let mut sse = SseClient::connect(&b.url(&format!("/v1/sessions/{sid}/events")), None).await;
    for round in 0..5 {
        let text = format!("round {round}: a request of several words to stream back");
        let turn = a.prompt(&sid, "main", &text).await.ok()["turn"]
            .as_str()
            .unwrap()
            .to_owned();
        let frames = sse
            .until("the answer", |f| f.event == "assistant/message")
            .await;
        let streamed: String = frames
            .iter()
            .filter(|f| f.event == "assistant/delta" && f.data["data"]["turn"] == turn.as_str())
            .map(|f| f.data["data"]["text"].as_str().unwrap())
            .collect();
        let message = frames.last().unwrap().data["data"]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            streamed, message,
            "round {round}: the deltas before the message spell it"
        );
        a.await_turn_end(&sid, &turn).await;
    }
}

/// SIGTERM hands every running turn over at once, and a sweep claims expired leases until
/// none are left: with 160 turns each resumes on another replica within a second.
#[tokio::test]
async fn sigterm_with_many_running_turns_hands_each_over_within_a_second() {
    let redis = TestRedis::start().await;
    let crate::failover::Replica {
        child: mut a,
        app: a_app,
    } = spawn_process(&redis, "a", 300).await;
    let crate::failover::Replica {
        child: mut b,
        app: b_app,
    } = spawn_process(&redis, "b", 300).await;
    let mut sids = Vec::new();
    for _ in 0..160 {
        sids.push(a_app.create_session().await);
    }
    let prompt = "tell me about every part of the login flow ".repeat(4);
    futures_util::future::join_all(sids.iter().map(|sid| a_app.prompt(sid, "main", &prompt))).await;
    for sid in &sids {
        a_app
            .await_event(sid, "step/started", |e| e["type"] == "step/started")
            .await;
    }
    let stopped_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    unsafe { libc::kill(a.id() as i32, libc::SIGTERM) };
    let mut late = Vec::new();
    for sid in &sids {
        let events = b_app
            .await_event(sid, "step/retried", |e| e["type"] == "step/retried")
            .await;
        let retried = events.iter().find(|e| e["type"] == "step/retried").unwrap();
        let at = humantime::parse_rfc3339(retried["committed_at"].as_str().unwrap())
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let after = at.saturating_sub(stopped_at);
        if after > 1_000 {
            late.push(after);
        }
    }
    let _ = a.wait();
    let _ = b.kill();
    let _ = b.wait();
    late.sort();
    assert!(
        late.is_empty(),
        "{} of {} turns were resumed more than 1 s after SIGTERM (ms): {late:?}",
        late.len(),
        sids.len()
    );
}

/// A stopping runner aborts its lease renewal and hands its turn over, but a renewal already
/// sent can reach the store after the hand-over. It must not take the turn back: the turn
/// would then wait out a whole ttl (3 s) for another replica instead of its next sweep.
#[tokio::test]
async fn a_renewal_that_reaches_the_store_after_its_hand_over_does_not_keep_the_turn() {
    use dsh_plan::store::{MemoryLeases, RedisLeases, RedisLog, TurnLeases};
    let redis = TestRedis::start().await;
    let log = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    let stores: [(&str, Box<dyn TurnLeases>); 2] = [
        ("redis", Box::new(RedisLeases::new(&log))),
        ("memory", Box::new(MemoryLeases::default())),
    ];
    for (store, leases) in stores {
        let member = "0123456789abcdef0123456789abcdef main turn-1";
        assert!(leases.acquire(member, "a", 3_000).await.unwrap(), "{store}");
        leases.handoff(member, "a").await.unwrap();
        assert!(
            !leases.renew(member, "a", 3_000).await.unwrap(),
            "{store}: a renewal after the hand-over extended the lease"
        );
        assert_eq!(
            leases.claim_expired("b", 3_000, 64).await.unwrap(),
            [member],
            "{store}: the next sweep did not claim the handed-over turn"
        );
        // Claimed: its new holder renews it, the old one cannot.
        assert!(leases.renew(member, "b", 3_000).await.unwrap(), "{store}");
        assert!(!leases.renew(member, "a", 3_000).await.unwrap(), "{store}");
    }
}

/// A prompt whose caller goes away while its commit is under way (its client hung up) still
/// runs the turn it opened, at once: the turn's lease is taken before the commit, so a runner
/// that never started would leave the turn waiting out the lease's ttl (3 s) for a sweep.
#[tokio::test]
async fn a_prompt_whose_client_hangs_up_mid_commit_still_runs_its_turn_at_once() {
    let redis = TestRedis::start().await;
    let (app, log, _, sid, prompt) = a_held_prompt(&redis).await;
    // The prompt is dropped with its commit held: the caller is gone.
    prompt.abort();
    assert!(
        prompt.await.unwrap_err().is_cancelled(),
        "the prompt finished past a held commit"
    );
    let released = std::time::Instant::now();
    log.held.release();
    let events = ends_soon(&app, &sid, released, "its commit went on").await;
    let opened = events
        .iter()
        .filter(|e| e["type"] == "turn/started")
        .count();
    assert_eq!(opened, 1, "one turn opened: {events:#?}");
}

/// A replica's last wait before it exits (its server stopped) covers a prompt's turn opening
/// still under way, not only the runners it has: the turn opens, is handed over at once, and
/// another replica runs it within a sweep, instead of after its lease's ttl (3 s).
#[tokio::test]
async fn a_replica_stopping_during_a_prompts_commit_hands_the_new_turn_over() {
    let redis = TestRedis::start().await;
    let (_stopping, log, state, sid, prompt) = a_held_prompt(&redis).await;
    let stop = state.engine.finish(Duration::from_secs(5));
    tokio::pin!(stop);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut stop)
            .await
            .is_err(),
        "the stop did not wait for the turn being opened"
    );
    log.held.release();
    stop.await;
    let stopped = std::time::Instant::now();
    assert!(prompt.await.unwrap().is_ok(), "the prompt committed");

    let other = spawn_replica(Some(&redis), "other").await;
    ends_soon(&other, &sid, stopped, "the stop").await;
}

/// A replica whose log holds its next append back, a session on it, and a prompt to the
/// session's root agent sent from a task of its own, once its commit is held.
async fn a_held_prompt(
    redis: &TestRedis,
) -> (
    TestApp,
    std::sync::Arc<crate::counting::CountingLog>,
    std::sync::Arc<dsh_plan::http::AppState>,
    String,
    tokio::task::JoinHandle<
        Result<dsh_plan::domain::turn::Prompted, dsh_plan::service::ServiceError>,
    >,
) {
    use dsh_plan::domain::{AgentId, SessionId};
    let (app, log, state) = crate::counting::app(redis).await;
    let sid = app.create_session().await;
    let (id, main) = (SessionId::parse(&sid).unwrap(), AgentId::root());
    log.held.arm();
    let engine = state.engine.clone();
    let prompt = tokio::spawn(async move { engine.prompt(&id, &main, "hello").await });
    log.held.entered().await;
    (app, log, state, sid, prompt)
}

/// Waits for the session's turn to end on `app`, asserts it ended within 2.5 s of `since`
/// (`what`), where a turn left to its lease's expiry takes 3 s from the lease's taking, and
/// returns the log.
async fn ends_soon(
    app: &TestApp,
    sid: &str,
    since: std::time::Instant,
    what: &str,
) -> Vec<serde_json::Value> {
    let events = app
        .await_event(sid, "the turn's end", |e| e["type"] == "turn/ended")
        .await;
    let took = since.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "the turn ended {} ms after {what}: it waited for its lease to expire; log: {events:#?}",
        took.as_millis()
    );
    events
}
