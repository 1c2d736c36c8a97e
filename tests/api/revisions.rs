//! Plan revisions: each submitted plan as a numbered, versioned resource folded from the log;
//! decisions that name the revision they decide; the approved plan kept in the model's context
//! through compaction and fork; `plan/revision` frames.

use serde_json::{json, Value};

use crate::helpers::{spawn_replica, TestApp, TestRedis};
use crate::on_both_stores;
use crate::review::plan_and_await_review;
use crate::sse::SseClient;

fn plans(sid: &str) -> String {
    format!("/v1/sessions/{sid}/agents/main/plans")
}

fn qid(q: &Value) -> &str {
    q["id"].as_str().unwrap()
}

/// A `/plan` turn whose first plan is sent back with feedback: the turn waits on the review of
/// revision 2. Returns the turn and that review.
async fn one_keep_planning_round(app: &TestApp, sid: &str) -> (String, Value) {
    let (turn, q) = plan_and_await_review(app, sid, "fix the login bug").await;
    let body = json!({"option": "keep_planning", "text": "Also cover SSO logins.", "revision": 1});
    app.answer(sid, qid(&q), body).await.ok();
    let revised = app.await_question(sid).await;
    (turn, revised)
}

/// The names of the last step header's sections, and that step's system prompt.
async fn last_step(app: &TestApp, sid: &str) -> (Vec<String>, String) {
    let step = app.events_of_type(sid, "step/started").await.pop().unwrap();
    let names = step["data"]["header"]["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    (names, step["data"]["system"].as_str().unwrap().to_owned())
}

/// The `plan:approved` section in a system prompt: from its opening words to the end of the
/// plan's text.
fn approved_section(system: &str, plan: &str) -> String {
    let start = system
        .find("The user approved this plan")
        .unwrap_or_else(|| panic!("no approved plan in {system}"));
    let end = start + system[start..].find(plan.trim_end()).unwrap() + plan.trim_end().len();
    system[start..end].to_owned()
}

on_both_stores! {
    async fn revisions_are_listed_and_diffed_after_a_keep_planning_round(app: TestApp) {
        let sid = app.create_session().await;
        let (_, revised) = one_keep_planning_round(&app, &sid).await;
        let list = app.get(&plans(&sid)).await.ok();
        let [first, second] = list["revisions"].as_array().unwrap().clone().try_into().unwrap();
        assert_eq!(list["has_more"], false);
        assert_eq!((first["number"].as_u64(), first["status"].as_str()), (Some(1), Some("revising")));
        assert_eq!(first["feedback"], "Also cover SSO logins.");
        assert!(first["decided_at"].is_string());
        assert_eq!((second["number"].as_u64(), second["status"].as_str()), (Some(2), Some("pending")));
        assert_eq!(second["text"], revised["detail"], "a revision is the plan its review shows");
        assert_eq!(second["question"], revised["id"]);
        assert_eq!(revised["revision"], json!({"number": 2, "digest": second["digest"]}));
        assert!(second["digest"].as_str().unwrap().starts_with("sha256:"));
        assert_eq!((second["step"].as_u64(), second["turn"].is_string()), (Some(2), true));

        let one = app.send(app.client.get(app.url(&format!("{}/2", plans(&sid))))).await;
        assert_eq!(one.status, 200);
        assert_eq!(one.body, second);
        let etag = app.client.get(app.url(&format!("{}/2", plans(&sid)))).send().await.unwrap();
        assert_eq!(etag.headers()["etag"].to_str().unwrap(), format!("\"{}\"", second["digest"].as_str().unwrap()));

        let diff = app.get(&format!("{}/2/diff", plans(&sid))).await.ok();
        assert_eq!((diff["revision"].as_u64(), diff["against"].as_u64()), (Some(2), Some(1)));
        let text = diff["diff"].as_str().unwrap();
        assert!(text.starts_with("--- revision 1\n+++ revision 2\n@@ "), "{text}");
        assert!(text.contains("\n+> Also cover SSO logins.\n"), "{text}");
        assert!(text.contains("\n-> fix the login bug\n"), "{text}");
        let first_diff = app.get(&format!("{}/1/diff", plans(&sid))).await.ok();
        assert!(first_diff.get("against").is_none());
        assert!(first_diff["diff"].as_str().unwrap().starts_with("--- /dev/null\n+++ revision 1\n"));
        let same = app.get(&format!("{}/2/diff?against=2", plans(&sid))).await.ok();
        assert_eq!(same["diff"], "");

        let page = app.get(&format!("{}?limit=1", plans(&sid))).await.ok();
        assert_eq!((page["revisions"][0]["number"].as_u64(), &page["has_more"]), (Some(1), &json!(true)));
        let cursor = page["next_cursor"].as_str().unwrap();
        let next = app.get(&format!("{}?limit=1&cursor={cursor}", plans(&sid))).await.ok();
        assert_eq!((next["revisions"][0]["number"].as_u64(), &next["has_more"]), (Some(2), &json!(false)));
        assert!(next.get("next_cursor").is_none());
        let pending = app.get(&format!("{}?status=pending", plans(&sid))).await.ok();
        assert_eq!(pending["revisions"].as_array().unwrap().len(), 1);
        assert_eq!(pending["revisions"][0]["number"], 2);

        app.get(&format!("{}/3", plans(&sid))).await.assert_problem(404, "revision-not-found");
        app.get(&format!("{}/2/diff?against=7", plans(&sid))).await.assert_problem(404, "revision-not-found");
        app.get(&format!("{}/0", plans(&sid))).await.assert_problem(400, "invalid-id");
        app.get(&format!("{}/two/diff", plans(&sid))).await.assert_problem(400, "invalid-id");
        app.get(&format!("{}/2/diff?against=-1", plans(&sid))).await.assert_problem(400, "invalid-query");
        app.get(&format!("{}?status=approvedd", plans(&sid))).await.assert_problem(400, "invalid-query");
        app.get(&format!("{}?cursor=2", plans(&sid))).await.assert_problem(400, "invalid-query");
        app.get(&format!("/v1/sessions/{sid}/agents/ghost/plans")).await.assert_problem(404, "agent-not-found");
    }

    async fn a_revisions_status_follows_its_review_approved_dismissed_or_cut_off_by_a_cancel(app: TestApp) {
        let sid = app.create_session().await;
        let (turn, revised) = one_keep_planning_round(&app, &sid).await;
        app.answer(&sid, qid(&revised), json!({"option": "approve", "text": "Go ahead."})).await.ok();
        app.await_turn_end(&sid, &turn).await;
        let (turn, q) = plan_and_await_review(&app, &sid, "and the signup bug").await;
        app.dismiss(&sid, qid(&q)).await.ok();
        app.await_turn_end(&sid, &turn).await;
        // Plan mode stays on after a dismissal: the next prompt is planned and reviewed.
        app.prompt(&sid, "main", "and the logout bug").await.ok();
        app.await_question(&sid).await;
        app.cancel(&sid, "main").await.ok();

        let all = app.get(&plans(&sid)).await.ok();
        let statuses: Vec<&str> = all["revisions"].as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
        assert_eq!(statuses, ["revising", "approved", "dismissed", "unavailable"]);
        let approved = app.get(&format!("{}?status=approved", plans(&sid))).await.ok();
        assert_eq!(approved["revisions"][0]["number"], 2);
        assert_eq!(approved["revisions"][0]["feedback"], "Go ahead.");
        let unavailable = &all["revisions"][3];
        assert!(unavailable.get("decided_by").is_none() && unavailable["decided_at"].is_string());
    }
}

#[tokio::test]
async fn a_stale_revision_answer_from_a_second_replica_is_refused_and_appends_nothing() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let (turn, revised) = one_keep_planning_round(&a, &sid).await;
    let stale = b.get(&format!("{}/1", plans(&sid))).await.ok();
    let current = b.get(&format!("{}/2", plans(&sid))).await.ok();
    let before = b.events(&sid).await.len();

    // A second tab still shows revision 1 and approves "the open review".
    let refused = b
        .answer(
            &sid,
            qid(&revised),
            json!({"option": "approve", "revision": 1}),
        )
        .await;
    let detail = refused.assert_problem(409, "revision-superseded");
    assert!(
        detail.contains("revision 2") && detail.contains("not revision 1"),
        "{detail}"
    );
    let url = b.url(&format!(
        "/v1/sessions/{sid}/questions/{}/answer",
        qid(&revised)
    ));
    let if_match = |digest: &Value| format!("\"{}\"", digest.as_str().unwrap());
    let by_digest = b
        .client
        .post(&url)
        .header("If-Match", if_match(&stale["digest"]));
    b.send(by_digest.json(&json!({"option": "approve"})))
        .await
        .assert_problem(409, "revision-superseded");
    let dismiss = b.url(&format!(
        "/v1/sessions/{sid}/questions/{}/dismiss",
        qid(&revised)
    ));
    let stale_dismiss = b
        .client
        .post(&dismiss)
        .header("If-Match", if_match(&stale["digest"]));
    b.send(stale_dismiss.json(&json!({})))
        .await
        .assert_problem(409, "revision-superseded");
    // The review of revision 1, answered already: naming its revision says it was superseded.
    let first = stale["question"].as_str().unwrap();
    let body = json!({"option": "approve", "revision": 1});
    let detail = b
        .answer(&sid, first, body)
        .await
        .assert_problem(409, "revision-superseded");
    assert!(detail.contains("which revision 2 superseded"), "{detail}");
    for bad in [json!(0), json!(-1), json!("2")] {
        let body = json!({"option": "approve", "revision": bad});
        b.answer(&sid, qid(&revised), body)
            .await
            .assert_problem(422, "invalid-body");
    }
    assert_eq!(
        b.events(&sid).await.len(),
        before,
        "a refused decision appends nothing"
    );
    assert_eq!(
        b.get(&format!("{}/2", plans(&sid))).await.ok()["status"],
        "pending"
    );

    // The tab that read revision 2 decides it, by number and digest.
    let fresh = b
        .client
        .post(&url)
        .header("If-Match", if_match(&current["digest"]));
    let answered = b
        .send(fresh.json(&json!({"option": "approve", "revision": 2})))
        .await
        .ok();
    assert_eq!(answered["state"], "answered");
    a.await_turn_end(&sid, &turn).await;
    assert_eq!(
        a.get(&format!("{}/2", plans(&sid))).await.ok()["status"],
        "approved"
    );
    b.answer(
        &sid,
        qid(&revised),
        json!({"option": "approve", "revision": 2}),
    )
    .await
    .assert_problem(409, "question-closed");
}

on_both_stores! {
    async fn the_approved_plan_stays_in_the_step_headers_after_compaction_and_in_a_fork(app: TestApp) {
        let sid = app.create_session().await;
        let (turn, q) = plan_and_await_review(&app, &sid, "fix the login bug").await;
        app.answer(&sid, qid(&q), json!({"option": "approve", "revision": 1})).await.ok();
        app.await_turn_end(&sid, &turn).await;
        let plan = app.get(&format!("{}/1", plans(&sid))).await.ok();
        let text = plan["text"].as_str().unwrap();
        let (names, system) = last_step(&app, &sid).await;
        assert_eq!(names, ["product:base", "plan:approved"], "plan mode is off, the approved plan stays");
        let section = approved_section(&system, text);
        assert!(section.contains(&format!("revision 1, {}", plan["digest"].as_str().unwrap())), "{section}");

        app.post_json(&format!("/v1/sessions/{sid}/compact"), json!({})).await.ok();
        let turn = app.prompt(&sid, "main", "next task").await.ok()["turn"].as_str().unwrap().to_owned();
        app.await_turn_end(&sid, &turn).await;
        let (names, system) = last_step(&app, &sid).await;
        assert!(names.contains(&"plan:approved".to_owned()), "{names:?}");
        assert_eq!(approved_section(&system, text), section, "byte-stable after compaction");
        let approved = app.get(&format!("{}?status=approved", plans(&sid))).await.ok();
        assert_eq!(approved["revisions"][0]["digest"], plan["digest"]);

        let fork = app.post_json(&format!("/v1/sessions/{sid}/fork"), json!({})).await.ok();
        let fid = fork["id"].as_str().unwrap().to_owned();
        assert_eq!(app.get(&format!("{}/1", plans(&fid))).await.ok(), plan, "the fork inherits the history");
        app.set_plan(&fid, "main", true).await.ok();
        let turn = app.prompt(&fid, "main", "plan the next step").await.ok()["turn"].as_str().unwrap().to_owned();
        app.await_question(&fid).await;
        let (names, system) = last_step(&app, &fid).await;
        assert_eq!(names, ["product:base", "plan:policy", "plan:approved"], "in plan mode too, after its policy");
        assert_eq!(approved_section(&system, text), section, "byte-stable in the fork");
        app.finish_turn_dismissing(&fid, &turn).await;
        let fork_plans = app.get(&plans(&fid)).await.ok();
        assert_eq!(fork_plans["revisions"][1]["number"], 2, "the fork numbers on from its history");
        assert_eq!(app.get(&plans(&sid)).await.ok()["revisions"].as_array().unwrap().len(), 1, "the parent is unchanged");
    }
}

#[tokio::test]
async fn a_plan_revision_frame_follows_each_submission_and_decision_also_on_a_resumed_stream() {
    let app = spawn_replica(None, "a").await;
    let sid = app.create_session().await;
    let url = app.url(&format!("/v1/sessions/{sid}/events?types=plan/revision"));
    let mut live = SseClient::connect(&url, None).await;
    let (turn, revised) = one_keep_planning_round(&app, &sid).await;
    app.answer(&sid, qid(&revised), json!({"option": "approve"}))
        .await
        .ok();
    app.await_turn_end(&sid, &turn).await;
    plan_and_await_review(&app, &sid, "and the signup bug").await;
    app.cancel(&sid, "main").await.ok();
    let frames = live
        .until("the cancelled review", |f| {
            f.data["data"]["status"] == "unavailable"
        })
        .await;
    let seen = |frames: &[crate::sse::Frame]| -> Vec<(u64, String)> {
        frames
            .iter()
            .map(|f| {
                let d = &f.data["data"];
                (
                    d["number"].as_u64().unwrap(),
                    d["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let expected = [
        (1, "pending"),
        (1, "revising"),
        (2, "pending"),
        (2, "approved"),
        (3, "pending"),
        (3, "unavailable"),
    ];
    let expected: Vec<(u64, String)> = expected.iter().map(|(n, s)| (*n, s.to_string())).collect();
    assert_eq!(seen(&frames), expected);
    assert_eq!(frames[1].data["data"]["feedback"], "Also cover SSO logins.");
    assert_eq!(frames[2].data["data"]["question"], revised["id"]);
    assert_eq!(
        frames[2].data["data"]["digest"],
        revised["revision"]["digest"]
    );
    assert!(frames
        .iter()
        .all(|f| f.id.is_some() && f.data["agent"] == "main"));

    // A client resuming from its first event reads the same frames, judged from the log.
    let mut resumed = SseClient::connect(&url, Some("1-0")).await;
    let again = resumed
        .until("the cancelled review", |f| {
            f.data["data"]["status"] == "unavailable"
        })
        .await;
    assert_eq!(seen(&again), expected);
    let ids =
        |frames: &[crate::sse::Frame]| frames.iter().map(|f| f.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&again),
        ids(&frames),
        "each names the event that made it"
    );
    assert_eq!(again[1].data["data"], frames[1].data["data"]);
}

on_both_stores! {
    async fn what_the_user_said_with_the_approval_stays_with_the_approved_plan_after_compaction(app: TestApp) {
        // An approval with a condition ("… but skip step 3") is not an approval of the plan as
        // written: once compaction summarized away the review's tool result, the approved
        // section is all the model has, so it carries the condition too.
        let sid = app.create_session().await;
        let (turn, q) = plan_and_await_review(&app, &sid, "fix the login bug").await;
        let condition = "Go ahead, but skip step 3: do not run the tests.";
        app.answer(&sid, qid(&q), json!({"option": "approve", "text": condition})).await.ok();
        app.await_turn_end(&sid, &turn).await;
        let (_, system) = last_step(&app, &sid).await;
        let text = app.get(&format!("{}/1", plans(&sid))).await.ok()["text"].as_str().unwrap().to_owned();
        let start = system.find("The user approved this plan").unwrap();
        let section = system[start..].to_owned();
        assert!(section.contains(condition), "{section}");

        app.post_json(&format!("/v1/sessions/{sid}/compact"), json!({})).await.ok();
        let turn = app.prompt(&sid, "main", "next task").await.ok()["turn"].as_str().unwrap().to_owned();
        app.await_turn_end(&sid, &turn).await;
        let (_, after) = last_step(&app, &sid).await;
        assert!(after.contains(&section), "byte-stable, condition included:\n{after}");
        assert!(after.contains(text.trim_end()));
    }
}

#[tokio::test]
async fn a_page_on_an_allowed_origin_can_read_a_revisions_etag_and_send_it_back_as_if_match() {
    // The documented round trip (read `ETag`, answer with `If-Match`) from a frontend on
    // another origin: its script only sees exposed headers, and it may send only allowed ones.
    let origin = "http://app.test:3000";
    let app = crate::helpers::spawn_with(None, "a", |s| s.cors_origins = vec![origin.into()]).await;
    let sid = app.create_session().await;
    let (_, q) = plan_and_await_review(&app, &sid, "fix the login bug").await;
    let read = app
        .client
        .get(app.url(&format!("{}/1", plans(&sid))))
        .header("Origin", origin)
        .send()
        .await
        .unwrap();
    let exposed = read.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        exposed.split(',').any(|h| h.trim() == "etag"),
        "ETag is not readable: {exposed}"
    );
    let etag = read.headers()["etag"].to_str().unwrap().to_owned();

    let answer = format!("/v1/sessions/{sid}/questions/{}/answer", qid(&q));
    let preflight = app
        .client
        .request(reqwest::Method::OPTIONS, app.url(&answer))
        .header("Origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type,if-match")
        .send()
        .await
        .unwrap();
    assert!(
        preflight.status().is_success(),
        "If-Match refused by the preflight: {preflight:?}"
    );
    let sent = app
        .client
        .post(app.url(&answer))
        .header("Origin", origin)
        .header("If-Match", etag);
    let answered = app
        .send(sent.json(&json!({"option": "approve"})))
        .await
        .ok();
    assert_eq!(answered["state"], "answered");
}

#[tokio::test]
async fn an_idempotency_key_sent_again_with_another_if_match_is_another_request() {
    // If-Match changes what an answer means (which plan it decides), so a key first used with a
    // stale digest must not replay that refusal for the corrected request, nor a success for a
    // request naming another plan: it is a different request (422), like a different body.
    let app = spawn_replica(None, "a").await;
    let sid = app.create_session().await;
    let (_, revised) = one_keep_planning_round(&app, &sid).await;
    let stale = app.get(&format!("{}/1", plans(&sid))).await.ok();
    let current = app.get(&format!("{}/2", plans(&sid))).await.ok();
    let url = app.url(&format!(
        "/v1/sessions/{sid}/questions/{}/answer",
        qid(&revised)
    ));
    let keyed = |digest: &Value| {
        app.client
            .post(&url)
            .header("Idempotency-Key", "approve-click-1")
            .header("If-Match", format!("\"{}\"", digest.as_str().unwrap()))
            .json(&json!({"option": "approve"}))
    };
    app.send(keyed(&stale["digest"]))
        .await
        .assert_problem(409, "revision-superseded");
    app.send(keyed(&current["digest"]))
        .await
        .assert_problem(422, "idempotency-key-reused");
    let again = app.send(keyed(&stale["digest"])).await;
    again.assert_problem(409, "revision-superseded");
    assert_eq!(
        app.get(&format!("{}/2", plans(&sid))).await.ok()["status"],
        "pending"
    );
}

#[tokio::test]
async fn a_dismissal_naming_a_superseded_revision_in_its_body_is_refused_like_an_answer() {
    // A client sends the same decision body to answer and to dismiss; the dismissal ignored
    // `revision` and closed the review of a plan its tab never showed.
    let app = spawn_replica(None, "a").await;
    let sid = app.create_session().await;
    let (_, revised) = one_keep_planning_round(&app, &sid).await;
    let dismiss = format!("/v1/sessions/{sid}/questions/{}/dismiss", qid(&revised));
    let before = app.events(&sid).await.len();
    let detail = app
        .post_json(&dismiss, json!({"revision": 1}))
        .await
        .assert_problem(409, "revision-superseded");
    assert!(detail.contains("not revision 1"), "{detail}");
    // Revision 0, and a misspelt field (no longer ignored).
    for bad in [json!({"revision": 0}), json!({"revison": 2})] {
        let refused = app.post_json(&dismiss, bad).await;
        refused.assert_problem(422, "invalid-body");
    }
    let after = app.events(&sid).await.len();
    assert_eq!(after, before, "a refused dismissal appends nothing");
    let dismissed = app.post_json(&dismiss, json!({"revision": 2})).await.ok();
    assert_eq!(dismissed["state"], "dismissed");
    assert_eq!(
        app.get(&format!("{}/2", plans(&sid))).await.ok()["status"],
        "dismissed"
    );
}
