use std::time::Duration;

use dsh_plan::composition::Composition;
use serde_json::{json, Value};

use crate::helpers::{spawn_with, TestApp, TestRedis};
use crate::mock_provider::{plan_call_reply, system_of, text_reply, MockProvider};
use crate::on_both_stores;

const NOTE: &str = "plugin:plan-mode";

fn policy() -> String {
    Composition::builtin()
        .plan_policy()
        .unwrap()
        .trim_end()
        .to_owned()
}

async fn openai_app(redis: &TestRedis, mock: &MockProvider, workspace: Option<String>) -> TestApp {
    mock.replica(redis, |s| s.workspace = workspace).await
}

fn turn_of(reply: &crate::helpers::Reply) -> String {
    assert_eq!(reply.status, 202, "{reply:?}");
    reply.body["turn"].as_str().unwrap().to_owned()
}

fn index_of(events: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    events
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no such event in {events:#?}"))
}

#[tokio::test]
async fn plan_policy_is_sent_only_while_active_between_lower_and_higher_orders_with_stable_prefix_and_tools(
) {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.otherwise(text_reply("All done.")).await;
    let workspace = std::env::temp_dir().join(format!("dshtest-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(
        workspace.join("AGENTS.md"),
        "Workspace rule: run the tests.",
    )
    .unwrap();
    let app = openai_app(
        &redis,
        &mock,
        Some(workspace.to_string_lossy().into_owned()),
    )
    .await;
    let sid = app.create_session().await;

    app.set_plan(&sid, "main", true).await.ok();
    let t1 = turn_of(&app.prompt(&sid, "main", "first").await);
    app.await_turn_end(&sid, &t1).await;
    assert_eq!(
        app.set_plan(&sid, "main", false).await.ok()["outcome"],
        "committed"
    );
    let t2 = turn_of(&app.prompt(&sid, "main", "second").await);
    app.await_turn_end(&sid, &t2).await;

    let requests = mock.requests().await;
    assert_eq!(requests.len(), 2);
    let (on, off) = (system_of(&requests[0]), system_of(&requests[1]));
    let at = on
        .find(&policy())
        .expect("plan:policy is sent while active");
    assert!(!off.contains(&policy()), "inactive sends no plan section");
    let base = on.find("You are dsh").unwrap();
    let ws = on.find("Workspace rule").unwrap();
    assert!(
        base < at && at < ws,
        "order 10 < plan:policy (50) < workspace (100)"
    );
    assert_eq!(
        &on[..at],
        &off[..at],
        "bytes before order 50 are identical across the transition"
    );
    assert!(off.ends_with("Workspace rule: run the tests."));

    let raw = mock.raw_requests().await;
    let tools = |body: &[u8]| {
        let s = String::from_utf8_lossy(body).into_owned();
        s[s.find("\"tools\":").unwrap()..].to_owned()
    };
    assert_eq!(
        tools(&raw[0]),
        tools(&raw[1]),
        "the serialized tool list is byte-identical"
    );
    assert_eq!(
        requests[0]["tools"][0]["function"]["name"],
        "exit_plan_mode"
    );
    assert_eq!(
        requests[0]["tools"][0]["function"]["parameters"]["required"],
        json!(["plan"])
    );
    assert_eq!(requests[0]["stream"], true);

    let headers: Vec<Value> = app
        .events_of_type(&sid, "step/started")
        .await
        .into_iter()
        .map(|e| e["data"]["header"].clone())
        .collect();
    assert_eq!(headers[0]["plan"], json!({"active": true}));
    assert_eq!(
        headers[0]["sections"][1],
        json!({"name": "plan:policy", "order": 50})
    );
    assert_eq!(headers[1]["plan"], json!({"active": false}));
    assert_eq!(headers[0]["tools_hash"], headers[1]["tools_hash"]);
    assert_eq!(headers[0]["replica"], "a");
}

#[tokio::test]
async fn a_choice_made_during_generation_stays_pending_until_the_continuation_prestep_commits_it() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.next(
        plan_call_reply("# Plan\n\n1. Do it."),
        Duration::from_millis(800),
    )
    .await;
    mock.otherwise(text_reply("Carrying on.")).await;
    let app = openai_app(&redis, &mock, None).await;
    let sid = app.create_session().await;
    app.set_plan(&sid, "main", true).await.ok();
    let turn = turn_of(&app.prompt(&sid, "main", "plan the fix").await);

    mock.await_requests(1).await;
    let queued = app.set_plan(&sid, "main", false).await.ok();
    assert_eq!(queued["outcome"], "queued");
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true, "pending": false})
    );

    // The plan call opens a review; waiting still counts as running, so the choice stays queued.
    let question = app.await_question(&sid).await;
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true, "pending": false})
    );
    app.answer(
        &sid,
        question["id"].as_str().unwrap(),
        json!({"label": "Keep planning", "text": "more detail"}),
    )
    .await
    .ok();
    let events = app.await_turn_end(&sid, &turn).await;
    let result = index_of(&events, |e| e["type"] == "tool/result");
    let flip = index_of(&events, |e| {
        e["type"] == "plan/mode" && e["data"]["active"] == false
    });
    let note = index_of(&events, |e| e["data"]["source"] == NOTE);
    let step2 = index_of(&events, |e| {
        e["type"] == "step/started" && e["data"]["step"] == 2
    });
    assert!(
        result < flip && flip < note && note < step2,
        "the continuation pre-step commits, notifies, then heads the step"
    );
    assert_eq!(
        events[step2]["data"]["header"]["plan"],
        json!({"active": false})
    );

    let requests = mock.requests().await;
    assert!(system_of(&requests[0]).contains(&policy()));
    assert!(
        !system_of(&requests[1]).contains(&policy()),
        "the step after the pre-step has no plan:policy"
    );
    // The rejected review and its feedback are part of the history.
    let tool_msg = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(tool_msg["content"]
        .as_str()
        .unwrap()
        .contains("more detail"));
    assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": false}));
}

#[tokio::test]
async fn provider_500_then_retry_sends_the_same_assembly_and_keeps_the_choice_pending() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.next_status(500, Duration::from_millis(500)).await;
    mock.otherwise(text_reply("Recovered.")).await;
    let app = openai_app(&redis, &mock, None).await;
    let sid = app.create_session().await;
    app.set_plan(&sid, "main", true).await.ok();
    let turn = turn_of(&app.prompt(&sid, "main", "go").await);
    mock.await_requests(1).await;
    assert_eq!(
        app.set_plan(&sid, "main", false).await.ok()["outcome"],
        "queued"
    );

    let events = app.await_turn_end(&sid, &turn).await;
    let raw = mock.raw_requests().await;
    assert_eq!(raw.len(), 2, "one failure, one retry");
    assert_eq!(
        raw[0], raw[1],
        "the retry sends the identical frozen request"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "step/started")
            .count(),
        1
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "assistant/message")
            .count(),
        1
    );
    assert_eq!(
        events
            .iter()
            .rev()
            .find(|e| e["type"] == "turn/ended")
            .unwrap()["data"]["reason"],
        "completed"
    );
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true, "pending": false}),
        "the choice is still pending"
    );
}

#[tokio::test]
async fn a_provider_that_keeps_failing_ends_the_turn_as_failed() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    mock.server
        .register(
            wiremock::Mock::given(wiremock::matchers::any())
                .respond_with(wiremock::ResponseTemplate::new(400)),
        )
        .await;
    let app = openai_app(&redis, &mock, None).await;
    let sid = app.create_session().await;
    let turn = turn_of(&app.prompt(&sid, "main", "go").await);
    let events = app.await_turn_end(&sid, &turn).await;
    assert_eq!(events.last().unwrap()["data"]["reason"], "failed");
    assert_eq!(mock.requests().await.len(), 1, "a 400 is not retried");
    assert_eq!(app.session(&sid).await.ok()["agents"][0]["status"], "idle");
}

async fn story(app: TestApp) {
    let sid = app.create_session().await;
    assert_eq!(
        app.set_plan(&sid, "main", true).await.ok()["outcome"],
        "committed"
    );
    let turn = turn_of(&app.prompt(&sid, "main", "fix the login bug").await);
    let events = app
        .await_event(&sid, "step/started", |e| e["type"] == "step/started")
        .await;
    let step = events.iter().find(|e| e["type"] == "step/started").unwrap();
    assert!(
        step["data"]["system"].as_str().unwrap().contains(&policy()),
        "the turn runs with plan:policy"
    );
    assert_eq!(
        app.session(&sid).await.ok()["agents"][0]["status"],
        "running"
    );

    assert_eq!(
        app.set_plan(&sid, "main", false).await.ok()["outcome"],
        "queued"
    );
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true, "pending": false})
    );
    assert_eq!(app.cancel(&sid, "main").await.ok()["turn"], turn.as_str());
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true, "pending": false}),
        "cancel keeps pending"
    );
    let agent = app
        .get(&format!("/v1/sessions/{sid}/agents/main"))
        .await
        .ok();
    assert_eq!(agent["status"], "idle");
    assert_eq!(
        app.cancel(&sid, "main").await.ok()["turn"],
        Value::Null,
        "nothing left to cancel"
    );

    let next = turn_of(&app.prompt(&sid, "main", "go ahead").await);
    let events = app.await_turn_end(&sid, &next).await;
    let cancelled = index_of(&events, |e| {
        e["type"] == "turn/ended" && e["data"]["reason"] == "cancelled"
    });
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "assistant/message" && e["data"]["turn"] == turn.as_str()),
        "the cancelled step's answer is never recorded"
    );
    let started = index_of(&events, |e| {
        e["type"] == "turn/started" && e["data"]["turn"] == next.as_str()
    });
    let flip = index_of(&events, |e| {
        e["type"] == "plan/mode" && e["data"]["active"] == false
    });
    let header = index_of(&events, |e| {
        e["type"] == "step/started" && e["data"]["turn"] == next.as_str()
    });
    assert!(
        cancelled < started && started < flip && flip < header,
        "the pre-step records plan/mode before its step/started"
    );
    let names: Vec<&str> = events[header]["data"]["header"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"plan:policy"));
    assert!(!events[header]["data"]["system"]
        .as_str()
        .unwrap()
        .contains(&policy()));
    assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": false}));
    assert_eq!(events.last().unwrap()["data"]["reason"], "completed");
}

#[tokio::test]
async fn cancel_keeps_the_pending_choice_and_the_next_prompt_commits_it_before_its_step_on_redis() {
    let redis = TestRedis::start().await;
    story(spawn_with(Some(&redis), "a", |s| s.fixture_token_delay_ms = 300).await).await;
}

#[tokio::test]
async fn cancel_keeps_the_pending_choice_and_the_next_prompt_commits_it_before_its_step_on_memory()
{
    story(spawn_with(None, "a", |s| s.fixture_token_delay_ms = 300).await).await;
}

async fn steered(app: TestApp) {
    let sid = app.create_session().await;
    let turn = turn_of(&app.prompt(&sid, "main", "first").await);
    let steer = app.prompt(&sid, "main", "also this").await;
    assert_eq!(steer.status, 202);
    assert_eq!(steer.body, json!({"turn": turn, "steered": true}));
    let events = app.await_turn_end(&sid, &turn).await;
    let answers: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        answers.last(),
        Some(&"Done: also this"),
        "a later step read the steer: {answers:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "turn/started")
            .count(),
        1
    );
}

// The first turn streams slowly (300 ms a token) so the second prompt surely arrives while it
// runs, however loaded the machine is; with the default 1 ms the turn could end first.
#[tokio::test]
async fn a_prompt_while_running_is_steered_into_the_next_step_on_redis() {
    let redis = TestRedis::start().await;
    steered(spawn_with(Some(&redis), "a", |s| s.fixture_token_delay_ms = 300).await).await;
}

#[tokio::test]
async fn a_prompt_while_running_is_steered_into_the_next_step_on_memory() {
    steered(spawn_with(None, "a", |s| s.fixture_token_delay_ms = 300).await).await;
}

on_both_stores! {
    async fn the_notification_appears_exactly_when_the_state_differs_from_the_last_header(app: TestApp) {
        let sid = app.create_session().await;
        for (plan, text) in [(None, "a"), (None, "b"), (Some(true), "c"), (None, "d"), (Some(false), "e")] {
            if let Some(active) = plan {
                assert_eq!(app.set_plan(&sid, "main", active).await.ok()["outcome"], "committed");
            }
            let turn = turn_of(&app.prompt(&sid, "main", text).await);
            // Plan-mode turns submit a plan for review; dismissing it ends them unchanged.
            app.finish_turn_dismissing(&sid, &turn).await;
        }
        let events = app.events(&sid).await;
        let notes: Vec<usize> = events.iter().enumerate().filter(|(_, e)| e["data"]["source"] == NOTE).map(|(i, _)| i).collect();
        // Turn a: no header yet; b: same state; c: inactive → active (its second step: same);
        // d: same; e: active → inactive.
        assert_eq!(notes.len(), 2, "{events:#?}");
        for i in &notes {
            assert_eq!(events[i + 1]["type"], "step/started", "a notification belongs to the next step");
        }
        assert_eq!(events[notes[0] + 1]["data"]["header"]["plan"]["active"], true);
        assert_eq!(events[notes[1] + 1]["data"]["header"]["plan"]["active"], false);
    }

    async fn prompts_reject_empty_text_and_unknown_agents(app: TestApp) {
        let sid = app.create_session().await;
        app.prompt(&sid, "main", "  ").await.assert_problem(422, "invalid-body");
        app.prompt(&sid, "ghost", "hi").await.assert_problem(404, "agent-not-found");
        app.cancel(&sid, "ghost").await.assert_problem(404, "agent-not-found");
        assert_eq!(app.events(&sid).await.len(), 1, "nothing was appended");
    }
}
