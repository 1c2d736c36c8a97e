//! One truth inside a running turn: the runner decides from the folded session and commits
//! through the one compare-and-append path, so a stale runner appends nothing, question
//! identity is the server's, turns are bounded, and a cache never outlives the log it folded.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{spawn_replica, spawn_with, verify, TestApp, TestRedis};
use crate::mock_provider::{text_reply, tool_call_reply, MockProvider};

fn turn_of(reply: crate::helpers::Reply) -> String {
    reply.ok()["turn"].as_str().unwrap().to_owned()
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

/// Waits until no replica in `apps` runs a turn (their `/metrics` gauge reads 0).
async fn await_idle(apps: &[&TestApp]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut busy = 0;
        for app in apps {
            busy += app.metric("dsh_turns_running").await;
        }
        if busy == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{busy} turns still run"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn cancel_then_compact_at_once_never_lets_the_cancelled_turn_write_again() {
    let redis = TestRedis::start().await;
    let slow = |s: &mut dsh_plan::config::Settings| s.fixture_token_delay_ms = 2;
    let a = spawn_with(Some(&redis), "a", slow).await;
    let b = spawn_with(Some(&redis), "b", slow).await;
    // A long prompt: the fixture answers `Done: <prompt>`, one token per word.
    let prompt = "please look at every part of the login flow ".repeat(15);
    let mut tries = Vec::new();
    for round in 0..10 {
        let rounds: Vec<_> = (0..10)
            .map(|i| {
                let (a, b, prompt) = (&a, &b, prompt.clone());
                async move {
                    let (runs, other) = if (round + i) % 2 == 0 { (a, b) } else { (b, a) };
                    let sid = runs.create_session().await;
                    let turn = turn_of(runs.prompt(&sid, "main", &prompt).await);
                    let cancelled = other.cancel(&sid, "main").await.ok();
                    assert_eq!(cancelled["turn"], turn.as_str());
                    other
                        .post_json(&format!("/v1/sessions/{sid}/compact"), json!({}))
                        .await
                        .ok();
                    (sid, turn)
                }
            })
            .collect();
        tries.extend(futures_util::future::join_all(rounds).await);
    }
    // Every runner has noticed (or finished its provider request and been refused).
    await_idle(&[&a, &b]).await;
    let leases = redis.lease_count().await;
    assert_eq!(leases, 0, "no lease is left for a sweeper to re-adopt");
    for (sid, turn) in &tries {
        for app in [&a, &b] {
            let session = app.session(sid).await.ok();
            assert_eq!(session["agents"][0]["status"], "idle", "{session}");
        }
        let events = a.events(sid).await;
        assert_eq!(events[0]["type"], "session/compacted", "{events:#?}");
        assert!(
            !events.iter().any(|e| e["data"]["turn"] == turn.as_str()),
            "nothing of the cancelled turn after the compaction: {events:#?}"
        );
        let (ok, out) = verify(&redis, sid);
        assert!(ok, "{out}");
    }
}

/// A session in plan mode whose root agent was just prompted: its id and the turn.
async fn planning(app: &TestApp, prompt: &str) -> (String, String) {
    let sid = app.create_session().await;
    app.set_plan(&sid, "main", true).await.ok();
    let turn = turn_of(app.prompt(&sid, "main", prompt).await);
    (sid, turn)
}

fn plan_call(plan: &str) -> String {
    tool_call_reply("exit_plan_mode", &json!({ "plan": plan }), "call_0")
}

#[tokio::test]
async fn a_provider_naming_every_call_call_0_gets_one_question_per_submitted_plan() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.next(plan_call("# Plan A"), Duration::ZERO).await;
    mock.next(plan_call("# Plan B"), Duration::ZERO).await;
    mock.otherwise(text_reply("Working on it.")).await;
    let app = mock.replica(&redis, |_| {}).await;
    let (sid, turn) = planning(&app, "fix the login bug").await;

    let first = app.await_question(&sid).await;
    assert_eq!(first["detail"], "# Plan A");
    let q1 = first["id"].as_str().unwrap().to_owned();
    app.answer(
        &sid,
        &q1,
        json!({"label": "Keep planning", "text": "cover SSO"}),
    )
    .await
    .ok();
    let second = app.await_question(&sid).await;
    let q2 = second["id"].as_str().unwrap().to_owned();
    assert_ne!(q1, q2, "the revised plan gets a question of its own");
    assert_eq!(second["detail"], "# Plan B");
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true}),
        "keep planning leaves plan mode on"
    );
    app.answer(&sid, &q2, json!({"label": "Approve"}))
        .await
        .ok();
    let events = app.await_turn_end(&sid, &turn).await;

    assert_eq!(of_type(&events, "question/asked").len(), 2, "{events:#?}");
    let results = of_type(&events, "tool/result");
    assert_eq!(
        results.len(),
        2,
        "one result per call occurrence: {events:#?}"
    );
    assert_eq!(results[0]["data"]["result"]["reason"], "rejected");
    assert_eq!(results[0]["data"]["result"]["feedback"], "cover SSO");
    assert_eq!(results[1]["data"]["result"]["approved"], true);
    assert_eq!(
        mock.requests().await.len(),
        3,
        "no replayed answer loops the model"
    );
    assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": false}));
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn a_plan_submitted_after_re_entering_plan_mode_is_not_approved_by_the_earlier_answer() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.next(plan_call("# Plan A"), Duration::ZERO).await;
    // Step 2 (plan mode just left) runs long enough for the user to choose plan mode again,
    // and calls a tool, so the turn goes on to step 3, whose pre-step re-enters plan mode.
    let search = tool_call_reply("search", &json!({"q": "login"}), "call_0");
    mock.next(search, Duration::from_millis(800)).await;
    mock.next(plan_call("# Plan B"), Duration::ZERO).await;
    mock.otherwise(text_reply("Waiting for your review.")).await;
    let app = mock.replica(&redis, |_| {}).await;
    let (sid, turn) = planning(&app, "fix the login bug").await;

    let q1 = app.await_question(&sid).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.answer(&sid, &q1, json!({"label": "Approve"}))
        .await
        .ok();
    mock.await_requests(2).await;
    let again = app.set_plan(&sid, "main", true).await.ok();
    assert_eq!(again["outcome"], "queued", "{again}");

    let second = app.await_question(&sid).await;
    assert_eq!(second["detail"], "# Plan B");
    assert_ne!(second["id"].as_str().unwrap(), q1);
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true}),
        "Plan B waits for its own review"
    );
    app.dismiss(&sid, second["id"].as_str().unwrap()).await.ok();
    let events = app.await_turn_end(&sid, &turn).await;
    let modes: Vec<&Value> = of_type(&events, "plan/mode")
        .into_iter()
        .map(|e| &e["data"]["active"])
        .collect();
    assert_eq!(modes, [true, false, true], "{events:#?}");
    assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
}

#[tokio::test]
async fn a_turn_that_keeps_calling_tools_ends_with_step_limit_after_max_steps() {
    use crate::sse::SseClient;
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.otherwise(tool_call_reply("search", &json!({"q": "x"}), "call_0"))
        .await;
    let app = mock.replica(&redis, |s| s.max_steps = 3).await;
    let sid = app.create_session().await;
    let mut sse = SseClient::connect(&app.url(&format!("/v1/sessions/{sid}/events")), None).await;
    let turn = turn_of(app.prompt(&sid, "main", "search forever").await);
    let frames = sse.until("turn/ended", |f| f.event == "turn/ended").await;
    let ended = frames.last().unwrap();
    assert_eq!(ended.data["data"]["reason"], "step-limit");
    assert_eq!(ended.data["data"]["turn"], turn.as_str());
    let events = app.events(&sid).await;
    assert_eq!(of_type(&events, "step/started").len(), 3);
    assert_eq!(of_type(&events, "tool/result").len(), 3);
    assert_eq!(mock.requests().await.len(), 3);
}

#[tokio::test]
async fn a_session_refuses_agents_past_max_agents_and_appends_nothing() {
    for redis in [Some(TestRedis::start().await), None] {
        let app = spawn_with(redis.as_ref(), "a", |s| s.max_agents = 3).await;
        let sid = app.create_session().await;
        for _ in 0..2 {
            app.spawn_agent(&sid, Some("main")).await.ok();
        }
        let before = app.events(&sid).await.len();
        let detail = app
            .spawn_agent(&sid, None)
            .await
            .assert_problem(409, "agent-limit");
        assert!(detail.contains('3'), "{detail}");
        assert_eq!(app.events(&sid).await.len(), before);
    }
}

#[tokio::test]
async fn a_replica_that_cached_a_session_answers_404_after_redis_restarts_empty() {
    let mut redis = TestRedis::start_private().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    a.set_plan(&sid, "main", true).await.ok();
    for app in [&a, &b] {
        app.plan(&sid, "main").await.ok(); // cached on both
    }
    redis.restart_empty().await;
    for app in [&a, &b] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let reply = app.plan(&sid, "main").await;
            if reply.status != 503 {
                reply.assert_problem(404, "session-not-found");
                break;
            }
            // The connection to the new server is being re-established.
            assert!(std::time::Instant::now() < deadline, "{reply:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A session created afresh works as usual.
    let fresh = b.create_session().await;
    assert_eq!(a.plan(&fresh, "main").await.ok(), json!({"active": false}));
}

#[tokio::test]
async fn text_sent_with_an_approval_reaches_the_model() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.next(plan_call("# Plan"), Duration::ZERO).await;
    mock.otherwise(text_reply("On it.")).await;
    let app = mock.replica(&redis, |_| {}).await;
    let (sid, turn) = planning(&app, "fix it").await;
    let q = app.await_question(&sid).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.answer(
        &sid,
        &q,
        json!({"label": "Approve", "text": "ship it on Friday"}),
    )
    .await
    .ok();
    app.await_turn_end(&sid, &turn).await;
    let requests = mock.requests().await;
    let tool = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the review's result is in the next request")
        .clone();
    let content: Value = serde_json::from_str(tool["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        content,
        json!({"approved": true, "feedback": "ship it on Friday"})
    );
}

#[tokio::test]
async fn a_turn_and_projection_reads_on_a_long_session_read_only_past_the_fold() {
    use dsh_plan::domain::event::{EventKind, PlanSelect};
    use dsh_plan::domain::{AgentId, NewEvent, SessionId};
    use dsh_plan::store::{Anchor, Append};

    let redis = TestRedis::start().await;
    let (app, counting, _) = crate::counting::app(&redis).await;
    let log = counting.inner.clone();
    let sid = app.create_session().await;
    app.spawn_agent(&sid, None).await.ok();
    // 10,000 recorded choices of another agent, written straight to the log.
    let (id, other) = (
        SessionId::parse(&sid).unwrap(),
        AgentId::parse("agent-1").unwrap(),
    );
    let mut seq = 2;
    for _ in 0..20 {
        let batch: Vec<NewEvent> = (0..500)
            .map(|i| {
                NewEvent::new(
                    &other,
                    EventKind::PlanSelect(PlanSelect { active: i % 2 == 0 }),
                )
            })
            .collect();
        let Append::Committed(done) = log
            .append(&id, Anchor::seq_only(seq), &batch, 0)
            .await
            .unwrap()
        else {
            panic!("nobody else writes this session");
        };
        seq += done.len() as u64;
    }
    app.plan(&sid, "main").await.ok(); // the one cold fold
    let before = counting.events_read();
    app.prompt(&sid, "main", "hello").await.ok();
    // Polls the agent (a read past the fold), not the paged log route, which reads the log.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while app
        .get(&format!("/v1/sessions/{sid}/agents/main"))
        .await
        .ok()["status"]
        != "idle"
    {
        assert!(std::time::Instant::now() < deadline, "the turn ends");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let turn_reads = counting.events_read() - before;
    let before = counting.events_read();
    for _ in 0..10 {
        let p = app
            .get(&format!("/v1/sessions/{sid}/projections/plan"))
            .await
            .ok();
        assert_eq!(p["agents"]["main"], json!({"active": false}));
    }
    let projection_reads = counting.events_read() - before;
    assert_eq!(
        projection_reads, 0,
        "nothing new to read: the projection is folded"
    );
    assert!(
        turn_reads < 100,
        "a turn on a 10,000-event session read {turn_reads} events"
    );
}
