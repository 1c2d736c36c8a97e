//! The exit_plan_mode review table, questions and the /plan command, row by row.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{spawn_replica, spawn_with, verify, TestApp, TestRedis};
use crate::mock_provider::{plan_call_reply, text_reply, MockProvider};
use crate::on_both_stores;

const PLAN_SECTION_MARK: &str = "You are in plan mode";

fn tool_results(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .collect()
}

pub async fn run_command(app: &TestApp, sid: &str, input: &str) -> crate::helpers::Reply {
    app.post_json(
        &format!("/v1/sessions/{sid}/agents/main/commands"),
        json!({ "input": input }),
    )
    .await
}

/// `/plan <message>` on an idle agent: plan mode on, a turn with the message, and the review.
pub async fn plan_and_await_review(app: &TestApp, sid: &str, message: &str) -> (String, Value) {
    let ran = run_command(app, sid, &format!("/plan {message}"))
        .await
        .ok();
    assert_eq!(ran["outcome"], "committed");
    assert_eq!(ran["message"]["steered"], false);
    let turn = ran["message"]["turn"].as_str().unwrap().to_owned();
    (turn, app.await_question(sid).await)
}

on_both_stores! {
    async fn exit_plan_mode_from_an_active_root_agent_opens_a_plan_review_question(app: TestApp) {
        let sid = app.create_session().await;
        let (_, q) = plan_and_await_review(&app, &sid, "fix the login bug").await;
        assert!(q["id"].as_str().unwrap().starts_with("plan-review"));
        assert_eq!(q["intent"], json!({"kind": "plan-review", "approve": "Approve"}));
        assert_eq!(q["options"], json!([
            {"id": "approve", "kind": "approve", "label": "Approve"},
            {"id": "keep_planning", "kind": "keep_planning", "label": "Keep planning"}
        ]));
        assert_eq!(q["allow_text"], true);
        assert_eq!(q["state"], "open");
        // The detail is the plan exactly as the model wrote it.
        let call = app.events_of_type(&sid, "assistant/message").await.pop().unwrap();
        let args: Value = serde_json::from_str(call["data"]["tool_calls"][0]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(q["detail"], args["plan"]);
        assert!(q["detail"].as_str().unwrap().contains("> fix the login bug"));
        assert_eq!(app.session(&sid).await.ok()["agents"][0]["status"], "waiting");
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
    }

    async fn the_review_round_trip_keep_planning_then_approve_leaves_plan_mode_at_the_next_step(app: TestApp) {
        let sid = app.create_session().await;
        let (turn, q) = plan_and_await_review(&app, &sid, "fix the login bug").await;
        let answered = app.answer(&sid, q["id"].as_str().unwrap(), json!({"label": "Keep planning", "text": "Also cover SSO logins."})).await.ok();
        assert_eq!(answered["state"], "answered");
        assert_eq!(answered["answer"], json!({"option": "keep_planning", "label": "Keep planning", "text": "Also cover SSO logins."}));

        let revised = app.await_question(&sid).await;
        assert_ne!(revised["id"], q["id"]);
        assert!(revised["detail"].as_str().unwrap().contains("> Also cover SSO logins."), "the revised plan quotes the feedback");
        let rejected = app.events_of_type(&sid, "tool/result").await;
        assert_eq!(rejected[0]["data"]["ok"], false);
        assert_eq!(rejected[0]["data"]["result"]["reason"], "rejected");
        assert_eq!(rejected[0]["data"]["result"]["feedback"], "Also cover SSO logins.");
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}), "plan mode stays active");

        app.answer(&sid, revised["id"].as_str().unwrap(), json!({"label": "Approve"})).await.ok();
        let events = app.await_turn_end(&sid, &turn).await;
        let approved = events.iter().position(|e| e["type"] == "tool/result" && e["data"]["ok"] == true).unwrap();
        assert_eq!(events[approved]["data"]["result"], json!({"approved": true}));
        // Leaving is queued, not rewritten into this batch: the next step's pre-step commits it.
        assert_eq!(events[approved + 1]["type"], "plan/select");
        let flip = events.iter().position(|e| e["type"] == "plan/mode" && e["data"]["active"] == false).unwrap();
        let next_step = events.iter().position(|e| e["type"] == "step/started" && e["data"]["step"] == 3).unwrap();
        assert!(approved < flip && flip < next_step);
        assert!(!events[next_step]["data"]["system"].as_str().unwrap().contains(PLAN_SECTION_MARK), "its request lacks plan:policy");
        let last_answer = events.iter().rev().find(|e| e["type"] == "assistant/message").unwrap();
        assert_eq!(last_answer["data"]["text"], "Plan approved. Starting work.");
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": false}));
        let projection = app.get(&format!("/v1/sessions/{sid}/projections/plan")).await.ok();
        assert_eq!(projection["agents"]["main"], json!({"active": false}));
    }

    async fn a_free_text_answer_fails_the_call_as_rejected_with_the_feedback(app: TestApp) {
        let sid = app.create_session().await;
        let (_, q) = plan_and_await_review(&app, &sid, "x").await;
        app.answer(&sid, q["id"].as_str().unwrap(), json!({"text": "Use the existing session store."})).await.ok();
        app.await_question(&sid).await; // the revised plan
        let results = app.events_of_type(&sid, "tool/result").await;
        assert_eq!(results[0]["data"]["result"]["reason"], "rejected");
        assert_eq!(results[0]["data"]["result"]["feedback"], "Use the existing session store.");
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
    }

    async fn a_dismissed_review_fails_the_call_telling_the_model_to_wait_in_plan_mode(app: TestApp) {
        let sid = app.create_session().await;
        let (turn, q) = plan_and_await_review(&app, &sid, "x").await;
        assert_eq!(app.dismiss(&sid, q["id"].as_str().unwrap()).await.ok()["state"], "dismissed");
        let events = app.await_turn_end(&sid, &turn).await;
        let result = &tool_results(&events)[0]["data"];
        assert_eq!(result["ok"], false);
        assert_eq!(result["result"]["reason"], "dismissed");
        assert!(result["result"]["message"].as_str().unwrap().contains("wait for their message"));
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
    }

    async fn cancelling_while_the_review_is_open_fails_closed_as_unavailable(app: TestApp) {
        let sid = app.create_session().await;
        let (turn, q) = plan_and_await_review(&app, &sid, "x").await;
        assert_eq!(app.cancel(&sid, "main").await.ok()["turn"], turn.as_str());
        let events = app.events(&sid).await;
        let result = &tool_results(&events)[0]["data"];
        assert_eq!(result["result"]["reason"], "unavailable");
        assert!(result["result"]["message"].as_str().unwrap().contains("switch plan mode off themselves"));
        assert_eq!(events.last().unwrap()["data"]["reason"], "cancelled");
        let before = events.len();
        app.answer(&sid, q["id"].as_str().unwrap(), json!({"label": "Approve"})).await.assert_problem(409, "question-closed");
        assert_eq!(app.events(&sid).await.len(), before, "a late answer appends nothing");
        let all = app.get(&format!("/v1/sessions/{sid}/questions?state=all")).await.ok();
        assert_eq!(all["questions"][0]["state"], "aborted");
        assert_eq!(app.get(&format!("/v1/sessions/{sid}/questions")).await.ok()["questions"], json!([]));
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
    }

    async fn an_active_child_agent_cannot_open_a_review(app: TestApp) {
        let sid = app.create_session().await;
        let child = app.spawn_agent(&sid, Some("main")).await.ok()["id"].as_str().unwrap().to_owned();
        app.set_plan(&sid, &child, true).await.ok();
        let turn = app.prompt(&sid, &child, "research the options").await.ok()["turn"].as_str().unwrap().to_owned();
        let events = app.await_turn_end(&sid, &turn).await;
        let result = &tool_results(&events)[0]["data"]["result"];
        assert_eq!(result["reason"], "child");
        assert!(result["message"].as_str().unwrap().contains("final result"));
        assert!(!events.iter().any(|e| e["type"] == "question/asked"));
        assert_eq!(app.plan(&sid, &child).await.ok(), json!({"active": true}));
    }

    async fn the_first_answer_wins_and_bad_answers_append_nothing(app: TestApp) {
        let sid = app.create_session().await;
        let (_, q) = plan_and_await_review(&app, &sid, "x").await;
        let qid = q["id"].as_str().unwrap();
        let before = app.events(&sid).await.len();
        app.answer(&sid, qid, json!({"label": "Maybe"})).await.assert_problem(422, "unknown-label");
        app.answer(&sid, qid, json!({})).await.assert_problem(422, "empty-answer");
        app.answer(&sid, qid, json!({"label": "Approve", "extra": 1})).await.assert_problem(422, "invalid-body");
        app.answer(&sid, "plan-review-999", json!({"label": "Approve"})).await.assert_problem(404, "question-not-found");
        app.answer(&sid, "bad id!", json!({"label": "Approve"})).await.assert_problem(400, "invalid-id");
        assert_eq!(app.events(&sid).await.len(), before);
        app.answer(&sid, qid, json!({"label": "Keep planning"})).await.ok();
        // The turn moves on by itself: it revises the plan and asks again. Waiting on the
        // revised question, the log is still, so the refused calls must leave it unchanged.
        let revised = app.await_question(&sid).await;
        assert_ne!(revised["id"], q["id"]);
        let settled = app.events(&sid).await;
        app.answer(&sid, qid, json!({"label": "Approve"})).await.assert_problem(409, "question-closed");
        app.dismiss(&sid, qid).await.assert_problem(409, "question-closed");
        assert_eq!(app.events(&sid).await, settled, "the refused calls appended nothing");
        let answers: Vec<Value> = app.events_of_type(&sid, "question/answered").await.into_iter().map(|e| e["data"].clone()).collect();
        assert_eq!(answers, vec![json!({"id": qid, "option": "keep_planning", "label": "Keep planning"})], "the first answer won");
    }

    async fn plan_off_selects_inactive_without_model_input_and_cancels_a_pending_entry(app: TestApp) {
        let sid = app.create_session().await;
        let ran = run_command(&app, &sid, "/plan").await.ok();
        assert_eq!(ran, json!({"command": "plan", "outcome": "committed", "plan": {"active": true}, "last_event_id": "3-0"}));
        let off = run_command(&app, &sid, "/plan off").await.ok();
        assert_eq!(off["outcome"], "committed");
        assert_eq!(off["plan"], json!({"active": false}));
        let runs: Vec<Value> = app.events_of_type(&sid, "command/run").await.into_iter().map(|e| e["data"].clone()).collect();
        assert_eq!(runs, vec![json!({"name": "plan", "args": ""}), json!({"name": "plan", "args": "off"})]);
        assert!(app.events_of_type(&sid, "turn/started").await.is_empty(), "no model input");

    }

    async fn unknown_and_non_slash_commands_get_a_problem_naming_the_known_ones(app: TestApp) {
        let sid = app.create_session().await;
        let detail = run_command(&app, &sid, "/deploy now").await.assert_problem(400, "unknown-command");
        assert!(detail.contains("/plan"), "{detail}");
        run_command(&app, &sid, "plan please").await.assert_problem(400, "not-a-command");
        assert_eq!(app.events(&sid).await.len(), 1);
        let list = app.get("/v1/commands").await.ok();
        assert_eq!(list["commands"][0]["name"], "plan");
        assert!(list["commands"][0]["usage"].as_str().unwrap().contains("/plan"));
    }
}

#[tokio::test]
async fn exit_plan_mode_while_inactive_fails_with_reason_inactive() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.next(plan_call_reply("# Plan"), Duration::ZERO).await;
    mock.otherwise(text_reply("ok")).await;
    let app = mock.replica(&redis, |_| {}).await;
    let sid = app.create_session().await;
    let turn = app.prompt(&sid, "main", "hi").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = app.await_turn_end(&sid, &turn).await;
    let result = &tool_results(&events)[0]["data"]["result"];
    assert_eq!(result["reason"], "inactive");
    assert!(!events.iter().any(|e| e["type"] == "question/asked"));
}

#[tokio::test]
async fn an_answer_on_replica_b_resumes_a_turn_started_on_replica_a() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let (turn, q) = plan_and_await_review(&a, &sid, "fix the login bug").await;
    let on_b = b.await_question(&sid).await;
    assert_eq!(on_b["id"], q["id"]);
    b.answer(&sid, q["id"].as_str().unwrap(), json!({"label": "Approve"}))
        .await
        .ok();
    let events = b.await_turn_end(&sid, &turn).await;
    let steps: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "step/started")
        .collect();
    assert_eq!(steps[0]["data"]["header"]["replica"], "a");
    assert_eq!(
        steps.last().unwrap()["data"]["header"]["replica"],
        "b",
        "B continued the turn"
    );
    assert_eq!(events.last().unwrap()["data"]["reason"], "completed");
    assert_eq!(a.plan(&sid, "main").await.ok(), json!({"active": false}));
    // A second answer, on A, is refused.
    a.answer(
        &sid,
        q["id"].as_str().unwrap(),
        json!({"label": "Keep planning"}),
    )
    .await
    .assert_problem(409, "question-closed");
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn plan_while_running_is_queued_and_plan_off_cancels_the_pending_entry() {
    let redis = TestRedis::start().await;
    let app = spawn_with(Some(&redis), "a", |s| s.fixture_token_delay_ms = 300).await;
    let sid = app.create_session().await;
    let turn = app.prompt(&sid, "main", "working on it").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    app.await_event(&sid, "step/started", |e| e["type"] == "step/started")
        .await;
    let queued = run_command(&app, &sid, "/plan").await.ok();
    assert_eq!(queued["outcome"], "queued");
    assert_eq!(queued["plan"], json!({"active": false, "pending": true}));
    let cancelled = run_command(&app, &sid, "/plan off").await.ok();
    assert_eq!(cancelled["outcome"], "cancelled");
    assert_eq!(cancelled["plan"], json!({"active": false}));
    let steered = run_command(&app, &sid, "/plan and plan this too")
        .await
        .ok();
    assert_eq!(steered["message"], json!({"turn": turn, "steered": true}));
    let events = app.finish_turn_dismissing(&sid, &turn).await;
    // The steered message was planned under plan guidance at the next step.
    let last_step = events
        .iter()
        .rev()
        .find(|e| e["type"] == "step/started")
        .unwrap();
    assert_eq!(last_step["data"]["header"]["plan"]["active"], true);
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn two_agents_reviewing_at_once_get_distinct_questions_and_a_valid_log() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    for _ in 0..5 {
        let sid = a.create_session().await;
        let other = a
            .post_json(&format!("/v1/sessions/{sid}/agents"), json!({}))
            .await
            .ok()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        a.set_plan(&sid, "main", true).await.ok();
        a.set_plan(&sid, &other, true).await.ok();
        let (x, y) = tokio::join!(
            a.prompt(&sid, "main", "plan one"),
            b.prompt(&sid, &other, "plan two")
        );
        x.ok();
        y.ok();
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let questions = loop {
            let open = a.get(&format!("/v1/sessions/{sid}/questions")).await.ok();
            if open["questions"].as_array().unwrap().len() == 2 {
                break open["questions"].clone();
            }
            assert!(std::time::Instant::now() < deadline, "both reviews open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_ne!(questions[0]["id"], questions[1]["id"]);
        let (ok, out) = verify(&redis, &sid);
        assert!(ok, "{out}");
    }
}

#[tokio::test]
async fn an_answer_on_a_replica_whose_cache_predates_the_question_is_accepted() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    b.session(&sid).await.ok(); // B caches the session before any question exists
    let (turn, q) = plan_and_await_review(&a, &sid, "x").await;
    b.answer(&sid, q["id"].as_str().unwrap(), json!({"label": "Approve"}))
        .await
        .ok();
    a.await_turn_end(&sid, &turn).await;
    assert_eq!(a.plan(&sid, "main").await.ok(), json!({"active": false}));
}
