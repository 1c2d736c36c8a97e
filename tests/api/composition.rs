//! Each composition variant of the manifest, and start-up failures for bad manifests.

use std::process::Command;

use serde_json::{json, Value};

use crate::helpers::{spawn_with, TestApp};

fn manifest(text: &str) -> String {
    let path = std::env::temp_dir().join(format!("dshtest-{}.yaml", uuid::Uuid::now_v7().simple()));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

async fn composed(text: &str) -> TestApp {
    let path = manifest(text);
    spawn_with(None, "a", move |s| s.config = Some(path)).await
}

#[tokio::test]
async fn without_plan_mode_the_feature_is_null_its_routes_404_and_no_section_or_tool_exists() {
    let app = composed("plugins:\n  - id: commands\n  - id: questions\n").await;
    let status = app.get("/v1/status").await.ok();
    assert_eq!(
        status["features"],
        json!({"plan_mode": null, "commands": true, "questions": true})
    );
    let sid = app.create_session().await;
    let url = app.url(&format!("/v1/sessions/{sid}/agents/main/plan"));
    app.get(&format!("/v1/sessions/{sid}/agents/main/plan"))
        .await
        .assert_problem(404, "feature-disabled");
    app.send(app.client.put(url).json(&json!({"active": true})))
        .await
        .assert_problem(404, "feature-disabled");
    app.get(&format!("/v1/sessions/{sid}/projections/plan"))
        .await
        .assert_problem(404, "feature-disabled");
    for plans in ["plans", "plans/1", "plans/1/diff"] {
        app.get(&format!("/v1/sessions/{sid}/agents/main/{plans}"))
            .await
            .assert_problem(404, "feature-disabled");
    }
    assert_eq!(
        app.get("/v1/tools").await.ok()["tools"],
        json!([]),
        "no exit tool"
    );
    assert_eq!(
        app.get("/v1/commands").await.ok()["commands"],
        json!([]),
        "no /plan"
    );
    let turn = app.prompt(&sid, "main", "hello").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = app.await_turn_end(&sid, &turn).await;
    let step = events.iter().find(|e| e["type"] == "step/started").unwrap();
    let names: Vec<Value> = step["data"]["header"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert!(!names.contains(&json!("plan:policy")));
    assert!(!step["data"]["system"]
        .as_str()
        .unwrap()
        .contains("plan mode"));
}

#[tokio::test]
async fn without_commands_plan_is_not_registered_but_the_plan_service_and_review_work() {
    let app = composed("plugins:\n  - id: plan-mode\n    config:\n      section: Plan carefully.\n  - id: questions\n").await;
    assert_eq!(
        app.get("/v1/status").await.ok()["features"]["commands"],
        false
    );
    assert_eq!(app.get("/v1/commands").await.ok()["commands"], json!([]));
    let sid = app.create_session().await;
    let reply = app
        .post_json(
            &format!("/v1/sessions/{sid}/agents/main/commands"),
            json!({"input": "/plan"}),
        )
        .await;
    let detail = reply.assert_problem(400, "unknown-command");
    assert!(detail.contains("known commands: none"), "{detail}");
    assert_eq!(
        app.set_plan(&sid, "main", true).await.ok()["outcome"],
        "committed"
    );
    app.prompt(&sid, "main", "fix it").await.ok();
    let q = app.await_question(&sid).await;
    assert_eq!(q["intent"]["kind"], "plan-review");
    let step = app.events_of_type(&sid, "step/started").await.remove(0);
    assert!(
        step["data"]["system"]
            .as_str()
            .unwrap()
            .contains("Plan carefully."),
        "the configured section is used"
    );
}

#[tokio::test]
async fn without_questions_reviews_fail_closed_and_question_routes_404() {
    let app = composed("plugins:\n  - id: plan-mode\n    config:\n      section: Plan carefully.\n  - id: commands\n").await;
    let sid = app.create_session().await;
    app.get(&format!("/v1/sessions/{sid}/questions"))
        .await
        .assert_problem(404, "feature-disabled");
    let ran = app
        .post_json(
            &format!("/v1/sessions/{sid}/agents/main/commands"),
            json!({"input": "/plan fix it"}),
        )
        .await
        .ok();
    let turn = ran["message"]["turn"].as_str().unwrap().to_owned();
    let events = app.await_turn_end(&sid, &turn).await;
    let result = events.iter().find(|e| e["type"] == "tool/result").unwrap();
    assert_eq!(result["data"]["result"]["reason"], "unavailable");
    assert!(!events.iter().any(|e| e["type"] == "question/asked"));
    assert_eq!(
        app.plan(&sid, "main").await.ok(),
        json!({"active": true}),
        "fail closed: still planning"
    );
}

fn start_with_manifest(text: &str) -> (bool, String, String) {
    let path = manifest(text);
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-plan"))
        .env("DSH_CONFIG", &path)
        .env("DSH_BIND", "127.0.0.1:0")
        .env_remove("REDIS_URL")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        path,
    )
}

#[test]
fn a_manifest_with_an_unknown_key_fails_start_naming_the_key_and_the_file() {
    let (ok, stderr, path) = start_with_manifest(
        "plugins:\n  - id: plan-mode\n    config:\n      section: x\n      mode: strict\n",
    );
    assert!(!ok);
    assert!(
        stderr.contains(&path) && stderr.contains("unknown field `mode`"),
        "{stderr}"
    );
}

#[test]
fn a_manifest_with_an_empty_section_fails_start() {
    let (ok, stderr, path) =
        start_with_manifest("plugins:\n  - id: plan-mode\n    config:\n      section: \"\"\n");
    assert!(!ok);
    assert!(
        stderr.contains(&path) && stderr.contains("`config.section` must not be empty"),
        "{stderr}"
    );
}

#[test]
fn a_manifest_with_an_unknown_plugin_fails_start() {
    let (ok, stderr, _) = start_with_manifest("plugins:\n  - id: sandbox\n");
    assert!(!ok);
    assert!(stderr.contains("unknown variant `sandbox`"), "{stderr}");
}

#[test]
fn a_missing_manifest_file_fails_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-plan"))
        .env("DSH_CONFIG", "/nonexistent/dsh.yaml")
        .env("DSH_BIND", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/dsh.yaml"));
}
