use serde_json::json;

use crate::helpers::{spawn_replica, TestRedis};
use crate::on_both_stores;

on_both_stores! {
    async fn idle_set_commits_at_once_and_a_repeat_is_a_noop(app: TestApp) {
        let sid = app.create_session().await;
        let first = app.set_plan(&sid, "main", true).await.ok();
        assert_eq!(first, json!({"outcome": "committed", "plan": {"active": true}, "last_event_id": "2-0"}));
        let again = app.set_plan(&sid, "main", true).await.ok();
        assert_eq!(again["outcome"], "noop");
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));
        let modes = app.events_of_type(&sid, "plan/mode").await;
        assert_eq!(modes.len(), 1);
        assert_eq!(modes[0]["data"], json!({"active": true}));
        assert_eq!(modes[0]["agent"], "main");
    }

    async fn idle_set_back_and_forth_records_a_full_value_each_time(app: TestApp) {
        let sid = app.create_session().await;
        for active in [true, false, true] {
            assert_eq!(app.set_plan(&sid, "main", active).await.ok()["outcome"], "committed");
        }
        let modes: Vec<_> = app.events_of_type(&sid, "plan/mode").await.into_iter().map(|e| e["data"].clone()).collect();
        assert_eq!(modes, vec![json!({"active": true}), json!({"active": false}), json!({"active": true})]);
    }

    async fn idle_set_to_the_recorded_state_without_pending_is_a_noop(app: TestApp) {
        let sid = app.create_session().await;
        let reply = app.set_plan(&sid, "main", false).await.ok();
        assert_eq!(reply["outcome"], "noop");
        assert_eq!(reply["plan"], json!({"active": false}));
        assert_eq!(app.events(&sid).await.len(), 1);
    }

    async fn plan_state_is_per_agent(app: TestApp) {
        let sid = app.create_session().await;
        let child = app.spawn_agent(&sid, Some("main")).await.ok()["id"].as_str().unwrap().to_owned();
        app.set_plan(&sid, &child, true).await.ok();
        assert_eq!(app.plan(&sid, &child).await.ok(), json!({"active": true}));
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": false}));
    }

    async fn the_plan_projection_equals_every_agents_plan_view(app: TestApp) {
        let sid = app.create_session().await;
        let child = app.spawn_agent(&sid, None).await.ok()["id"].as_str().unwrap().to_owned();
        app.set_plan(&sid, "main", true).await.ok();
        app.set_plan(&sid, &child, true).await.ok();
        app.set_plan(&sid, &child, false).await.ok();
        let projection = app.get(&format!("/v1/sessions/{sid}/projections/plan")).await.ok();
        for (aid, view) in projection["agents"].as_object().unwrap() {
            assert_eq!(&app.plan(&sid, aid).await.ok(), view, "agent {aid}");
        }
        assert_eq!(projection["agents"].as_object().unwrap().len(), 2);
    }
}

/// Until the turn engine exists only another writer can open a turn; write it straight into
/// the log, as another replica would, and check the running rows over HTTP.
async fn open_turn(redis: &TestRedis, sid: &str, seq: u64) {
    let id = format!("{seq}-0");
    redis
        .write_event(sid, &id, "turn/started", r#"{"turn":"t1"}"#, 1)
        .await;
}

#[tokio::test]
async fn a_choice_on_a_running_agent_is_queued_then_cancelled_by_choosing_the_recorded_state() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    assert_eq!(
        app.set_plan(&sid, "main", true).await.ok()["outcome"],
        "committed"
    );
    open_turn(&redis, &sid, 3).await;
    assert_eq!(
        app.session(&sid).await.ok()["agents"][0]["status"],
        "running"
    );

    let queued = app.set_plan(&sid, "main", false).await.ok();
    assert_eq!(queued["outcome"], "queued");
    assert_eq!(queued["plan"], json!({"active": true, "pending": false}));
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true, "pending": false})
    );
    // Selecting the pending target again changes nothing.
    assert_eq!(
        app.set_plan(&sid, "main", false).await.ok()["outcome"],
        "noop"
    );
    let cancelled = app.set_plan(&sid, "main", true).await.ok();
    assert_eq!(cancelled["outcome"], "cancelled");
    assert_eq!(cancelled["plan"], json!({"active": true}));
    // Running: nothing was committed, only choices recorded.
    assert_eq!(app.events_of_type(&sid, "plan/mode").await.len(), 1);
    assert_eq!(app.events_of_type(&sid, "plan/select").await.len(), 2);
    let projection = app
        .get(&format!("/v1/sessions/{sid}/projections/plan"))
        .await
        .ok();
    assert_eq!(projection["agents"]["main"], json!({"active": true}));
}
