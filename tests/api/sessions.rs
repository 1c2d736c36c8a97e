use serde_json::json;

use crate::on_both_stores;

on_both_stores! {
    async fn a_new_session_has_an_inactive_root_agent(app: TestApp) {
        let sid = app.create_session().await;
        let session = app.session(&sid).await.ok();
        assert_eq!(session["id"], sid.as_str());
        assert_eq!(session["last_event_id"], "1-0");
        assert_eq!(session["agents"], json!([{"id": "main", "owner": null, "status": "idle", "plan": {"active": false}}]));
        let events = app.events(&sid).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["type"], "session/created");
        assert_eq!(events[0]["id"], "1-0");
        assert!(events[0]["committed_at"].as_str().unwrap().ends_with('Z'));
    }

    async fn a_session_is_created_with_an_empty_json_object_too(app: TestApp) {
        let reply = app.post_json("/v1/sessions", json!({})).await;
        assert_eq!(reply.status, 201);
        assert_eq!(reply.body["agents"][0]["id"], "main");
    }

    async fn spawned_agents_start_inactive_with_their_owner(app: TestApp) {
        let sid = app.create_session().await;
        app.set_plan(&sid, "main", true).await.ok();
        let child = app.spawn_agent(&sid, Some("main")).await;
        assert_eq!(child.status, 201);
        assert_eq!(child.body["owner"], "main");
        assert_eq!(child.body["plan"], json!({"active": false}));
        let aid = child.body["id"].as_str().unwrap().to_owned();
        let unowned = app.post_json(&format!("/v1/sessions/{sid}/agents"), json!({})).await.ok();
        assert_ne!(unowned["id"], aid.as_str());
        assert_eq!(unowned["owner"], serde_json::Value::Null);
        let agent = app.get(&format!("/v1/sessions/{sid}/agents/{aid}")).await.ok();
        assert_eq!(agent["status"], "idle");
        assert_eq!(app.session(&sid).await.ok()["agents"].as_array().unwrap().len(), 3);
    }

    async fn the_log_is_read_in_pages_with_a_cursor(app: TestApp) {
        let sid = app.create_session().await;
        for i in 0..5 {
            app.set_plan(&sid, "main", i % 2 == 0).await.ok();
        }
        let first = app.get(&format!("/v1/sessions/{sid}/log?limit=2")).await.ok();
        let ids: Vec<_> = first["events"].as_array().unwrap().iter().map(|e| e["id"].clone()).collect();
        assert_eq!(ids, vec![json!("1-0"), json!("2-0")]);
        assert_eq!(first["cursor"], "2-0");
        assert_eq!(first["has_more"], true);
        let rest = app.get(&format!("/v1/sessions/{sid}/log?after=2-0&limit=100")).await.ok();
        let ids: Vec<_> = rest["events"].as_array().unwrap().iter().map(|e| e["id"].clone()).collect();
        assert_eq!(ids, vec![json!("3-0"), json!("4-0"), json!("5-0"), json!("6-0")]);
        assert_eq!(rest["has_more"], false);
        let tail = app.get(&format!("/v1/sessions/{sid}/log?after=6-0")).await.ok();
        assert_eq!(tail["events"], json!([]));
        assert_eq!(tail["cursor"], "6-0");
    }
}

#[tokio::test]
async fn status_reports_the_store_and_plan_mode_feature() {
    let redis = crate::helpers::TestRedis::start().await;
    let app = crate::helpers::spawn_replica(Some(&redis), "r1").await;
    let status = app.get("/v1/status").await.ok();
    assert_eq!(status["store"], "redis");
    assert_eq!(status["replica"], "r1");
    assert_eq!(status["features"]["plan_mode"]["section"], "plan:policy");
    assert_eq!(app.get("/healthz").await.status, 200);
    assert_eq!(app.get("/readyz").await.ok()["status"], "ready");
    let memory = crate::helpers::spawn_replica(None, "m").await;
    assert_eq!(memory.get("/v1/status").await.ok()["store"], "memory");
}

#[tokio::test]
async fn swagger_ui_is_served_offline_at_docs() {
    let app = crate::helpers::spawn_replica(None, "a").await;
    let page = app.client.get(app.url("/docs/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "{html}");
    assert!(!html.contains("cdn"), "no asset may come from a CDN");
    let js = app
        .client
        .get(app.url("/docs/swagger-ui-bundle.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), 200);
    assert!(js.bytes().await.unwrap().len() > 100_000);
}
