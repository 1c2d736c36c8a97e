//! Lists and lookups: the caller's sessions a page at a time, a session's agents, questions
//! by status and by id, and answers that name an option id.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::auth::{key_for, mint, secured};
use crate::helpers::{spawn_replica, spawn_with, TestApp, TestRedis};
use crate::on_both_stores;
use crate::review::plan_and_await_review;

/// One page of `GET /v1/sessions`.
async fn page(app: &TestApp, query: &str) -> Value {
    app.get(&format!("/v1/sessions{query}")).await.ok()
}

fn ids(page: &Value) -> Vec<String> {
    page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every session, paging `limit` at a time.
async fn all_sessions(app: &TestApp, limit: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut query = format!("?limit={limit}");
    loop {
        let p = page(app, &query).await;
        out.extend(ids(&p));
        if p["has_more"] == false {
            assert!(p.get("next_cursor").is_none(), "{p}");
            return out;
        }
        query = format!(
            "?limit={limit}&cursor={}",
            p["next_cursor"].as_str().unwrap()
        );
    }
}

async fn create(app: &TestApp, n: usize) -> Vec<String> {
    let mut sids = Vec::new();
    for _ in 0..n {
        sids.push(app.create_session().await);
    }
    sids
}

fn newest_first(mut sids: Vec<String>) -> Vec<String> {
    sids.reverse();
    sids
}

on_both_stores! {
    async fn sessions_are_listed_newest_first_a_page_at_a_time_without_repeats_or_skips(app: TestApp) {
        let first = create(&app, 7).await;
        let p1 = page(&app, "?limit=3").await;
        assert_eq!(ids(&p1), newest_first(first.clone())[..3]);
        assert_eq!(p1["has_more"], true);
        // Sessions created while paging belong before the first page, never in the middle.
        let later = create(&app, 2).await;
        let cursor = p1["next_cursor"].as_str().unwrap();
        let p2 = page(&app, &format!("?limit=3&cursor={cursor}")).await;
        assert_eq!(ids(&p2), newest_first(first.clone())[3..6]);
        let cursor = p2["next_cursor"].as_str().unwrap();
        let p3 = page(&app, &format!("?limit=3&cursor={cursor}")).await;
        assert_eq!(ids(&p3), newest_first(first.clone())[6..]);
        assert_eq!(p3["has_more"], false);
        assert!(p3.get("next_cursor").is_none(), "{p3}");

        let mut everything = first.clone();
        everything.extend(later);
        assert_eq!(all_sessions(&app, 3).await, newest_first(everything.clone()));
        let default_page = page(&app, "").await;
        assert_eq!(ids(&default_page), newest_first(everything), "the default page holds 50");
        assert_eq!(default_page["has_more"], false);

        let row = &p1["sessions"][0];
        let session = app.session(&first[6]).await.ok();
        assert_eq!(row["created_at"], session["created_at"]);
        assert_eq!(row["last_event_id"], session["last_event_id"]);
        assert_eq!(row["agents"], json!(["main"]));
        assert_eq!((&row["running"], &row["open_questions"]), (&json!(false), &json!(0)));
        assert!(row["expires_at"].as_str().unwrap() > row["created_at"].as_str().unwrap());
    }

    async fn a_list_page_refuses_a_bad_limit_or_cursor(app: TestApp) {
        app.create_session().await;
        for query in ["?limit=0", "?limit=201", "?limit=x", "?cursor=abc", "?cursor=s", "?page=2"] {
            app.get(&format!("/v1/sessions{query}")).await.assert_problem(400, "invalid-query");
        }
        assert_eq!(ids(&page(&app, "?limit=200").await).len(), 1);
    }

    async fn deleted_sessions_are_not_listed_even_between_pages(app: TestApp) {
        let sids = create(&app, 4).await;
        let p1 = page(&app, "?limit=1").await;
        assert_eq!(ids(&p1), [sids[3].clone()]);
        for gone in [&sids[2], &sids[0]] {
            let url = app.url(&format!("/v1/sessions/{gone}"));
            assert_eq!(app.send(app.client.delete(url)).await.status, 204);
        }
        let cursor = p1["next_cursor"].as_str().unwrap();
        let rest = page(&app, &format!("?limit=5&cursor={cursor}")).await;
        assert_eq!(ids(&rest), [sids[1].clone()]);
        assert_eq!(rest["has_more"], false);
        assert_eq!(all_sessions(&app, 1).await, [sids[3].clone(), sids[1].clone()]);
    }

    async fn a_fork_is_listed_with_its_parent(app: TestApp) {
        let parent = app.create_session().await;
        let fork = app.post_json(&format!("/v1/sessions/{parent}/fork"), json!({})).await.ok();
        let p = page(&app, "").await;
        assert_eq!(ids(&p), [fork["id"].as_str().unwrap().to_owned(), parent.clone()]);
        assert_eq!(p["sessions"][0]["parent"]["session"], parent.as_str());
        assert!(p["sessions"][1].get("parent").is_none());
    }

    async fn the_agents_of_a_session_are_listed_as_each_is_shown(app: TestApp) {
        let sid = app.create_session().await;
        let child = app.spawn_agent(&sid, Some("main")).await.ok();
        app.set_plan(&sid, "main", true).await.ok();
        let listed = app.get(&format!("/v1/sessions/{sid}/agents")).await.ok();
        let main = app.get(&format!("/v1/sessions/{sid}/agents/main")).await.ok();
        assert_eq!(listed["agents"], json!([child, main]), "sorted by id, as GET …/agents/{{aid}} shows each");
        assert_eq!(main["plan"], json!({"active": true}));
        assert_eq!(page(&app, "").await["sessions"][0]["agents"], json!(["agent-1", "main"]));
        app.get("/v1/sessions/nosuchsession/agents").await.assert_problem(404, "session-not-found");
    }

    async fn questions_are_listed_by_status_and_found_by_id(app: TestApp) {
        let sid = app.create_session().await;
        let (_, first) = plan_and_await_review(&app, &sid, "x").await;
        let first_id = first["id"].as_str().unwrap();
        app.answer(&sid, first_id, json!({"option": "keep_planning"})).await.ok();
        let revised = app.await_question(&sid).await;
        let revised_id = revised["id"].as_str().unwrap();
        let listed = |query: &'static str| {
            let app = &app;
            let sid = &sid;
            async move {
                let list = app.get(&format!("/v1/sessions/{sid}/questions{query}")).await.ok();
                list["questions"].as_array().unwrap().iter().map(|q| q["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
            }
        };
        assert_eq!(listed("").await, [revised_id]);
        assert_eq!(listed("?status=open").await, [revised_id]);
        assert_eq!(listed("?status=answered").await, [first_id]);
        assert_eq!(listed("?status=dismissed").await, Vec::<String>::new());
        assert_eq!(listed("?status=all").await, [first_id, revised_id]);
        assert_eq!(listed("?state=all").await, [first_id, revised_id], "the deprecated alias still works");
        assert_eq!(listed("?state=answered&status=answered").await, [first_id]);
        for bad in ["?status=closed", "?status=open&state=all", "?states=open"] {
            app.get(&format!("/v1/sessions/{sid}/questions{bad}")).await.assert_problem(400, "invalid-query");
        }
        app.dismiss(&sid, revised_id).await.ok();
        assert_eq!(listed("?status=dismissed").await, [revised_id]);

        let one = app.get(&format!("/v1/sessions/{sid}/questions/{first_id}")).await.ok();
        assert_eq!(one["state"], "answered");
        assert_eq!(one["answer"], json!({"option": "keep_planning", "label": "Keep planning"}));
        assert_eq!(one["options"][1], json!({"id": "keep_planning", "kind": "keep_planning", "label": "Keep planning"}));
        let all = app.get(&format!("/v1/sessions/{sid}/questions?status=all")).await.ok();
        assert_eq!(all["questions"][0], one, "the lookup shows what the list shows");
        app.get(&format!("/v1/sessions/{sid}/questions/plan-review-999")).await.assert_problem(404, "question-not-found");
        app.get(&format!("/v1/sessions/{sid}/questions/bad%20id")).await.assert_problem(400, "invalid-id");
        app.get("/v1/sessions/nosuchsession/questions/plan-review-1").await.assert_problem(404, "session-not-found");
    }

    async fn a_plan_review_answered_by_option_ids_keeps_planning_then_approves(app: TestApp) {
        let sid = app.create_session().await;
        let (turn, q) = plan_and_await_review(&app, &sid, "fix the login bug").await;
        let qid = q["id"].as_str().unwrap();
        let before = app.events(&sid).await;
        app.answer(&sid, qid, json!({"option": "Approve"})).await.assert_problem(422, "unknown-option");
        // A localized label is display text: as the deprecated alias it names nothing.
        app.answer(&sid, qid, json!({"label": "Genehmigen"})).await.assert_problem(422, "unknown-label");
        app.answer(&sid, qid, json!({"option": "approve", "label": "Keep planning"})).await.assert_problem(422, "unknown-label");
        assert_eq!(app.events(&sid).await, before, "refused answers append nothing");

        let kept = app.answer(&sid, qid, json!({"option": "keep_planning", "text": "Cover SSO too."})).await.ok();
        assert_eq!(kept["answer"], json!({"option": "keep_planning", "label": "Keep planning", "text": "Cover SSO too."}));
        let revised = app.await_question(&sid).await;
        let rejected = app.events_of_type(&sid, "tool/result").await;
        assert_eq!(rejected[0]["data"]["result"]["reason"], "rejected");
        assert_eq!(rejected[0]["data"]["result"]["feedback"], "Cover SSO too.");
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": true}));

        app.answer(&sid, revised["id"].as_str().unwrap(), json!({"option": "approve"})).await.ok();
        let events = app.await_turn_end(&sid, &turn).await;
        let answers: Vec<&Value> = events.iter().filter(|e| e["type"] == "question/answered").map(|e| &e["data"]).collect();
        assert_eq!(answers[1], &json!({"id": revised["id"], "option": "approve", "label": "Approve"}));
        assert!(events.iter().any(|e| e["type"] == "tool/result" && e["data"]["result"] == json!({"approved": true})));
        assert_eq!(app.plan(&sid, "main").await.ok(), json!({"active": false}));
    }
}

#[tokio::test]
async fn another_tenants_sessions_never_appear_and_a_browser_token_cannot_list() {
    let redis = TestRedis::start().await;
    let (_, acme_key) = key_for(&redis, "acme", None).await;
    let (_, globex_key) = key_for(&redis, "globex", None).await;
    let app = secured(&redis, "r1").await;
    let (acme, globex) = (app.as_caller(&acme_key), app.as_caller(&globex_key));
    let acme_sids = create(&acme, 3).await;
    let globex_sids = create(&globex, 2).await;
    assert_eq!(
        all_sessions(&acme, 2).await,
        newest_first(acme_sids.clone())
    );
    assert_eq!(all_sessions(&globex, 1).await, newest_first(globex_sids));

    let token = mint(&acme, &acme_sids[0], json!({"scopes": ["read"]})).await;
    let browser = app.as_caller(&token);
    browser
        .get("/v1/sessions")
        .await
        .assert_problem(403, "insufficient-scope");
    let agents = browser
        .get(&format!("/v1/sessions/{}/agents", acme_sids[0]))
        .await
        .ok();
    assert_eq!(agents["agents"][0]["id"], "main");
    browser
        .get(&format!("/v1/sessions/{}/agents", acme_sids[1]))
        .await
        .assert_problem(404, "session-not-found");
    globex
        .get(&format!("/v1/sessions/{}/agents", acme_sids[0]))
        .await
        .assert_problem(404, "session-not-found");
    app.get("/v1/sessions")
        .await
        .assert_problem(401, "unauthorized");
}

/// Nine sessions of which only the first is written again: once the other eight expire, a
/// page of one skips them (a bounded number of index reads at a time, so the first page may
/// come back empty with `has_more`), and the quota has room for eight new sessions again.
async fn expired_sessions_leave_the_list_and_the_quota_together(redis: Option<&TestRedis>) {
    let app = spawn_with(redis, "a", |s| {
        s.retention = Duration::from_millis(3000);
        s.max_sessions = 9;
    })
    .await;
    let sids = create(&app, 9).await;
    app.post_json("/v1/sessions", json!({}))
        .await
        .assert_problem(429, "session-quota");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    app.set_plan(&sids[0], "main", true).await.ok();
    // The newest expires last; its log goes no sooner than its place in the quota.
    let deadline = Instant::now() + Duration::from_secs(15);
    while app.session(&sids[8]).await.status != 404 {
        assert!(
            Instant::now() < deadline,
            "session {} never expired",
            sids[8]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut listed = Vec::new();
    let mut query = "?limit=1".to_owned();
    let mut pages = 0;
    loop {
        let p = page(&app, &query).await;
        listed.extend(ids(&p));
        pages += 1;
        let Some(cursor) = p["next_cursor"].as_str() else {
            break;
        };
        query = format!("?limit=1&cursor={cursor}");
    }
    assert_eq!(listed, [sids[0].clone()]);
    assert!(
        pages >= 2,
        "eight expired sessions take more than one page's reads to skip"
    );
    let again = create(&app, 8).await;
    app.post_json("/v1/sessions", json!({}))
        .await
        .assert_problem(429, "session-quota");
    let mut expected = newest_first(again);
    expected.push(sids[0].clone());
    assert_eq!(all_sessions(&app, 4).await, expected);
}

#[tokio::test]
async fn expired_sessions_leave_the_list_and_the_quota_together_on_redis() {
    let redis = TestRedis::start().await;
    expired_sessions_leave_the_list_and_the_quota_together(Some(&redis)).await;
}

#[tokio::test]
async fn expired_sessions_leave_the_list_and_the_quota_together_on_memory() {
    expired_sessions_leave_the_list_and_the_quota_together(None).await;
}

/// The raw entries of a session's stream: id and field pairs.
async fn entries(redis: &TestRedis, sid: &str) -> Vec<(String, Vec<(String, String)>)> {
    redis::cmd("XRANGE")
        .arg(redis.key(sid))
        .arg("-")
        .arg("+")
        .query_async(&mut redis.conn().await)
        .await
        .unwrap()
}

/// An entry's `data` as a build before option ids recorded it: options as plain labels, an
/// answer naming its option by label only.
fn before_option_ids(ty: &str, mut data: Value) -> Value {
    match ty {
        "question/asked" => {
            let labels: Vec<Value> = data["options"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["label"].clone())
                .collect();
            data["options"] = Value::Array(labels);
        }
        "question/answered" => {
            data.as_object_mut().unwrap().remove("option");
        }
        _ => {}
    }
    data
}

/// Copies a session's log under a new id as a build before option ids would have recorded it.
async fn copy_as_old_log(redis: &TestRedis, from: &str, to: &str) {
    let mut conn = redis.conn().await;
    for (id, fields) in entries(redis, from).await {
        let ty = fields.iter().find(|(k, _)| k == "type").unwrap().1.clone();
        let mut cmd = redis::cmd("XADD");
        cmd.arg(redis.key(to)).arg(&id);
        for (k, v) in fields {
            let v = match k.as_str() {
                "data" => before_option_ids(&ty, serde_json::from_str(&v).unwrap()).to_string(),
                _ => v,
            };
            cmd.arg(k).arg(v);
        }
        let _: String = cmd.query_async(&mut conn).await.unwrap();
    }
}

#[tokio::test]
async fn a_review_recorded_with_plain_label_options_still_folds_and_is_answered_by_option_id() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    let (_, q) = plan_and_await_review(&app, &sid, "x").await;
    let old = "0123456789abcdef0123456789abcdef";
    copy_as_old_log(&redis, &sid, old).await;
    let raw = entries(&redis, old).await;
    let stored = raw
        .iter()
        .flat_map(|(_, f)| f)
        .find(|(k, v)| k == "data" && v.contains("plan-review"));
    assert!(
        stored
            .unwrap()
            .1
            .contains(r#""options":["Approve","Keep planning"]"#),
        "{stored:?}"
    );
    let asked = app.events_of_type(old, "question/asked").await;
    assert_eq!(
        asked[0]["data"]["options"],
        json!([
            {"id": "approve", "kind": "approve", "label": "Approve"},
            {"id": "keep_planning", "kind": "keep_planning", "label": "Keep planning"}
        ]),
        "an old entry reads back in the object form"
    );
    let qid = q["id"].as_str().unwrap();
    assert_eq!(
        app.await_question(old).await["options"],
        asked[0]["data"]["options"]
    );
    app.answer(old, qid, json!({"option": "approve"}))
        .await
        .ok();
    let turn = asked[0]["data"]["turn"].as_str().unwrap();
    let events = app.await_turn_end(old, turn).await;
    assert!(events
        .iter()
        .any(|e| e["type"] == "tool/result" && e["data"]["result"] == json!({"approved": true})));
    assert_eq!(app.plan(old, "main").await.ok(), json!({"active": false}));
    // The original, recorded in the new form, is untouched.
    assert_eq!(app.await_question(&sid).await["id"], qid);
}

#[tokio::test]
async fn an_answer_recorded_by_label_alone_reads_back_with_its_option_id() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    let (turn, q) = plan_and_await_review(&app, &sid, "x").await;
    app.answer(&sid, q["id"].as_str().unwrap(), json!({"label": "Approve"}))
        .await
        .ok();
    app.await_turn_end(&sid, &turn).await;
    let old = "fedcba9876543210fedcba9876543210";
    copy_as_old_log(&redis, &sid, old).await;
    let qid = q["id"].as_str().unwrap();
    let answered = app
        .get(&format!("/v1/sessions/{old}/questions/{qid}"))
        .await
        .ok();
    assert_eq!(
        answered["answer"],
        json!({"option": "approve", "label": "Approve"})
    );
    assert_eq!(app.plan(old, "main").await.ok(), json!({"active": false}));
}
