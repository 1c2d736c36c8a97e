//! SSE across three replicas on one Redis, fork, compaction and resume.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{spawn_replica, spawn_with, verify, TestApp, TestRedis};
use crate::sse::{raw_ids, SseClient};

fn events_url(app: &TestApp, sid: &str, query: &str) -> String {
    app.url(&format!("/v1/sessions/{sid}/events{query}"))
}

async fn three(redis: &TestRedis) -> (TestApp, TestApp, TestApp) {
    (
        spawn_replica(Some(redis), "a").await,
        spawn_replica(Some(redis), "b").await,
        spawn_replica(Some(redis), "c").await,
    )
}

#[tokio::test]
async fn a_put_on_a_reaches_subscribers_on_b_and_c_as_plan_mode_and_plan_view() {
    let redis = TestRedis::start().await;
    let (a, b, c) = three(&redis).await;
    let sid = a.create_session().await;
    let mut on_b = SseClient::connect(&events_url(&b, &sid, "?after=1-0"), None).await;
    let mut on_c = SseClient::connect(&events_url(&c, &sid, ""), None).await;
    // Every stream starts with the current plan view (after the cursor) or the history.
    let first = on_b
        .until("the initial view", |f| f.event == "plan/view")
        .await;
    assert_eq!(
        first[0].data,
        json!({"type": "plan/view", "session": sid, "agent": "main", "data": {"active": false}})
    );
    assert_eq!(first[0].id, None, "the initial view is not an event");

    assert_eq!(
        a.set_plan(&sid, "main", true).await.ok()["outcome"],
        "committed"
    );
    for sub in [&mut on_b, &mut on_c] {
        let frames = sub
            .until("plan/view active", |f| {
                f.event == "plan/view" && f.data["data"]["active"] == true
            })
            .await;
        let mode = frames
            .iter()
            .find(|f| f.event == "plan/mode")
            .expect("the raw event arrives");
        assert_eq!(mode.id.as_deref(), Some("2-0"));
        assert_eq!(mode.data["data"], json!({"active": true}));
        assert!(mode.data["committed_at"].as_str().unwrap().ends_with('Z'));
        assert_eq!(
            frames.last().unwrap().id.as_deref(),
            Some("2-0"),
            "a view carries its cause's id"
        );
    }
}

#[tokio::test]
async fn reconnecting_with_last_event_id_on_another_replica_gets_exactly_the_missing_events() {
    let redis = TestRedis::start().await;
    let (a, b, c) = three(&redis).await;
    let sid = a.create_session().await;
    let mut sub = SseClient::connect(&events_url(&b, &sid, ""), None).await;
    a.set_plan(&sid, "main", true).await.ok();
    sub.until("2-0", |f| {
        f.id.as_deref() == Some("2-0") && f.event == "plan/mode"
    })
    .await;
    drop(sub);
    // Written while nobody listens.
    for active in [false, true, false] {
        a.set_plan(&sid, "main", active).await.ok();
    }
    a.spawn_agent(&sid, Some("main")).await.ok();
    let mut resumed = SseClient::connect(&events_url(&c, &sid, "?after=1-0"), Some("2-0")).await;
    let frames = resumed
        .until("6-0", |f| {
            f.id.as_deref() == Some("6-0") && f.event == "agent/spawned"
        })
        .await;
    assert_eq!(
        raw_ids(&frames),
        vec![3, 4, 5, 6],
        "the header wins over ?after= and nothing repeats"
    );
    a.set_plan(&sid, "main", true).await.ok();
    let live = resumed
        .until("7-0", |f| {
            f.id.as_deref() == Some("7-0") && f.event == "plan/mode"
        })
        .await;
    assert_eq!(raw_ids(&live), vec![7]);
}

/// A replica that dies between a commit and its live message leaves the event in the log and
/// no message on the bus. Written here straight into the log, as such a replica's append left
/// it: subscribers on another replica still get it, exactly once, once their replica rechecks
/// the quiet session (`DSH_SSE_RECHECK_MS`), and the stream goes on live afterwards.
#[tokio::test]
async fn an_event_whose_live_message_was_lost_reaches_subscribers_once_their_replica_rechecks() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_with(Some(&redis), "b", |s| s.sse_recheck_ms = 100).await;
    let sid = a.create_session().await;
    let mut sub = SseClient::connect(&events_url(&b, &sid, "?after=1-0"), None).await;
    // A live event first: b hears the session from here on (its subscription is confirmed, so
    // no catch-up of its own reads the log later).
    a.set_plan(&sid, "main", true).await.ok();
    sub.until("2-0", |f| {
        f.id.as_deref() == Some("2-0") && f.event == "plan/view"
    })
    .await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    redis
        .write_event(&sid, "3-0", "plan/mode", r#"{"active":false}"#, now_ms)
        .await;
    let frames = sub
        .until("the unpublished 3-0", |f| {
            f.id.as_deref() == Some("3-0") && f.event == "plan/view"
        })
        .await;
    assert_eq!(raw_ids(&frames), vec![3], "{frames:#?}");
    assert_eq!(frames.last().unwrap().data["data"]["active"], false);
    assert_eq!(
        a.set_plan(&sid, "main", true).await.ok()["outcome"],
        "committed"
    );
    let live = sub
        .until("4-0", |f| {
            f.id.as_deref() == Some("4-0") && f.event == "plan/view"
        })
        .await;
    assert_eq!(raw_ids(&live), vec![4], "nothing repeats: {live:#?}");
}

#[tokio::test]
async fn type_and_agent_filters_select_what_a_client_reads() {
    let redis = TestRedis::start().await;
    let (a, b, _) = three(&redis).await;
    let sid = a.create_session().await;
    let child = a.spawn_agent(&sid, Some("main")).await.ok()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut plans = SseClient::connect(
        &events_url(&b, &sid, "?types=plan/*&max_events=6&max_ms=10000"),
        None,
    )
    .await;
    let mut of_child = SseClient::connect(
        &events_url(
            &b,
            &sid,
            &format!("?agent={child}&types=plan/mode&max_events=1"),
        ),
        None,
    )
    .await;
    a.set_plan(&sid, "main", true).await.ok();
    a.set_plan(&sid, &child, true).await.ok();
    let frames = plans.drain().await;
    // The current views of the two agents (ordered by agent id), then plan/mode + plan/view
    // per flip; the
    // bounded mode ends it after six.
    let seen: Vec<(&str, &str, bool)> = frames
        .iter()
        .map(|f| {
            (
                f.event.as_str(),
                f.data["agent"].as_str().unwrap(),
                f.data["data"]["active"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("plan/view", child.as_str(), false),
            ("plan/view", "main", false),
            ("plan/mode", "main", true),
            ("plan/view", "main", true),
            ("plan/mode", child.as_str(), true),
            ("plan/view", child.as_str(), true),
        ]
    );
    assert!(*plans.ended.borrow(), "max_events ends the stream cleanly");
    let child_frames = of_child.drain().await;
    assert_eq!(child_frames.len(), 1);
    assert_eq!(child_frames[0].event, "plan/mode");
    assert_eq!(child_frames[0].data["agent"], child.as_str());
    assert_eq!(child_frames[0].data["data"], json!({"active": true}));
}

#[tokio::test]
async fn fork_on_b_of_a_session_written_on_a_inherits_recorded_plan_state_but_not_pending() {
    let redis = TestRedis::start().await;
    let (a, b, _) = three(&redis).await;
    let sid = a.create_session().await;
    let child = a.spawn_agent(&sid, Some("main")).await.ok()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.set_plan(&sid, "main", true).await.ok();
    let fork_point = a.session(&sid).await.ok()["last_event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A turn runs and a choice is pending at the head; neither carries over.
    let turn = a.prompt(&sid, "main", "plan something").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    a.await_question(&sid).await;
    assert_eq!(
        a.set_plan(&sid, "main", false).await.ok()["outcome"],
        "queued"
    );

    let forked = b
        .post_json(&format!("/v1/sessions/{sid}/fork"), json!({}))
        .await;
    assert_eq!(forked.status, 201, "{forked:?}");
    let fid = forked.body["id"].as_str().unwrap().to_owned();
    assert_eq!(
        forked.body["parent"],
        json!({"session": sid, "at": a.session(&sid).await.ok()["last_event_id"]})
    );
    let main = &forked.body["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "main")
        .unwrap()
        .clone();
    assert_eq!(
        main["plan"],
        json!({"active": true}),
        "recorded state inherited, pending not"
    );
    assert_eq!(main["status"], "idle", "no open turn");
    assert_eq!(
        a.get(&format!("/v1/sessions/{fid}/questions")).await.ok()["questions"],
        json!([])
    );
    assert_eq!(a.plan(&fid, &child).await.ok(), json!({"active": false}));
    assert_eq!(
        a.get(&format!("/v1/sessions/{fid}/agents/{child}"))
            .await
            .ok()["owner"],
        "main"
    );
    // The parent is unchanged.
    assert_eq!(
        a.plan(&sid, "main").await.ok(),
        json!({"active": true, "pending": false})
    );
    assert_eq!(
        a.get(&format!("/v1/sessions/{sid}/agents/main")).await.ok()["status"],
        "waiting"
    );

    // A fork at an earlier event, and forks at points that are not events.
    let early = b
        .post_json(&format!("/v1/sessions/{sid}/fork"), json!({"at": "2-0"}))
        .await
        .ok();
    assert_eq!(early["agents"].as_array().unwrap().len(), 2);
    assert_eq!(
        b.plan(early["id"].as_str().unwrap(), "main").await.ok(),
        json!({"active": false})
    );
    let at_plan = b
        .post_json(
            &format!("/v1/sessions/{sid}/fork"),
            json!({"at": fork_point}),
        )
        .await
        .ok();
    assert_eq!(
        b.plan(at_plan["id"].as_str().unwrap(), "main").await.ok(),
        json!({"active": true})
    );
    b.post_json(&format!("/v1/sessions/{sid}/fork"), json!({"at": "999-0"}))
        .await
        .assert_problem(422, "invalid-fork-point");
    b.post_json(&format!("/v1/sessions/{sid}/fork"), json!({"at": "nope"}))
        .await
        .assert_problem(422, "invalid-body");
    b.post_json("/v1/sessions/nosuch/fork", json!({}))
        .await
        .assert_problem(404, "session-not-found");

    // The forked root agent is a root: it can open its own review.
    let fturn = b.prompt(&fid, "main", "plan in the fork").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    let q = b.await_question(&fid).await;
    assert_eq!(q["intent"]["kind"], "plan-review");
    b.dismiss(&fid, q["id"].as_str().unwrap()).await.ok();
    b.await_turn_end(&fid, &fturn).await;
    a.cancel(&sid, "main").await.ok();
    a.await_turn_end(&sid, &turn).await;
    for s in [&sid, &fid] {
        let (ok, out) = verify(&redis, s);
        assert!(ok, "{out}");
    }
}

#[tokio::test]
async fn compact_then_fork_then_resume_keeps_plan_state_and_trimmed_cursors_get_a_reset() {
    let redis = TestRedis::start().await;
    let (a, b, c) = three(&redis).await;
    let sid = a.create_session().await;
    a.set_plan(&sid, "main", true).await.ok();
    let turn = a.prompt(&sid, "main", "fix the login bug").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    let q = a.await_question(&sid).await;
    b.post_json(&format!("/v1/sessions/{sid}/compact"), json!({}))
        .await
        .assert_problem(409, "turn-running");
    a.dismiss(&sid, q["id"].as_str().unwrap()).await.ok();
    a.await_turn_end(&sid, &turn).await;
    let before = a.session(&sid).await.ok();

    let compacted = b
        .post_json(&format!("/v1/sessions/{sid}/compact"), json!({}))
        .await
        .ok();
    assert_eq!(
        compacted["agents"], before["agents"],
        "plan state is unchanged"
    );
    let log = c.events(&sid).await;
    assert_eq!(log.len(), 1, "older entries were trimmed");
    assert_eq!(log[0]["type"], "session/compacted");
    assert!(log[0]["data"]["summary"]
        .as_str()
        .unwrap()
        .contains("fix the login bug"));
    // Every replica reads it back the same, including one that had it cached.
    assert_eq!(a.session(&sid).await.ok(), c.session(&sid).await.ok());
    assert_eq!(c.plan(&sid, "main").await.ok(), json!({"active": true}));

    // An SSE cursor older than the trimmed log gets a reset.
    let mut stale = SseClient::connect(&events_url(&c, &sid, ""), Some("3-0")).await;
    let frames = stale.drain().await;
    let reset = frames
        .iter()
        .find(|f| f.event == "reset")
        .expect("a reset event");
    assert_eq!(reset.data["data"]["reason"], "trimmed");
    assert_eq!(reset.data["data"]["first_available"], log[0]["id"]);
    // A fork after compaction and a resumed conversation both start from the snapshot.
    let forked = c
        .post_json(&format!("/v1/sessions/{sid}/fork"), json!({}))
        .await
        .ok();
    let fid = forked["id"].as_str().unwrap();
    assert_eq!(c.plan(fid, "main").await.ok(), json!({"active": true}));
    a.set_plan(&sid, "main", false).await.ok();
    let next = c.prompt(&sid, "main", "carry on").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = c.await_turn_end(&sid, &next).await;
    let answer = events
        .iter()
        .rev()
        .find(|e| e["type"] == "assistant/message")
        .unwrap();
    assert_eq!(answer["data"]["text"], "Done: carry on");
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn a_slow_subscriber_is_cut_off_while_a_fast_one_keeps_getting_events() {
    let redis = TestRedis::start().await;
    // A slow model keeps one turn running, so every prompt below is a steer.
    let a = spawn_with(Some(&redis), "a", |s| s.fixture_token_delay_ms = 5_000).await;
    let b = spawn_with(Some(&redis), "b", |s| s.sse_feed_capacity = 32).await;
    let sid = a.create_session().await;
    // The slow client connects with a tiny receive window and never reads.
    let addr = b.address.trim_start_matches("http://").to_owned();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = socket.connect(addr.parse().unwrap()).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    slow.write_all(
        format!("GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut fast = SseClient::connect(&events_url(&b, &sid, ""), None).await;
    // Big events fill the slow socket quickly: steers of 30 KB into a running turn.
    let big = "x".repeat(30_000);
    let turn = a.prompt(&sid, "main", "start").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut last = String::new();
    for _ in 0..400 {
        a.prompt(&sid, "main", &big).await.ok();
        last = a.session(&sid).await.ok()["last_event_id"]
            .as_str()
            .unwrap()
            .to_owned();
    }
    fast.until("the last steer", |f| {
        f.id.as_deref() == Some(last.as_str()) && f.event == "user/message"
    })
    .await;
    // The slow one was cut off: once it reads again, its response ends (the last chunk of a
    // chunked body) before reaching the head.
    let mut received = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 65536];
        loop {
            let n = slow.read(&mut buf).await.unwrap();
            received.extend_from_slice(&buf[..n]);
            if n == 0 || received.ends_with(b"0\r\n\r\n") {
                return;
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the server ended the slow stream ({} bytes read)",
        received.len()
    );
    let text = String::from_utf8_lossy(&received);
    assert!(text.contains("id: 2-0\n"), "it got the first events");
    assert!(
        !text.contains(&format!("id: {last}\n")),
        "the slow subscriber did not get everything"
    );
    a.cancel(&sid, "main").await.ok();
    a.await_turn_end(&sid, &turn).await;
}

#[tokio::test]
async fn heartbeats_keep_an_idle_stream_alive() {
    let app = spawn_with(None, "a", |s| s.sse_heartbeat_ms = 100).await;
    let sid = app.create_session().await;
    let res = app
        .client
        .get(events_url(&app, &sid, "?after=1-0&max_ms=450"))
        .send()
        .await
        .unwrap();
    let body = res.text().await.unwrap();
    assert!(body.starts_with("retry: 2000\n\n"), "{body}");
    assert!(body.matches(": heartbeat").count() >= 3, "{body}");
}

#[tokio::test]
async fn the_events_endpoint_rejects_bad_cursors_and_unknown_sessions() {
    let app = spawn_replica(None, "a").await;
    let sid = app.create_session().await;
    app.get(&format!("/v1/sessions/{sid}/events?after=x"))
        .await
        .assert_problem(400, "invalid-query");
    app.get("/v1/sessions/nosuch/events")
        .await
        .assert_problem(404, "session-not-found");
    app.get(&format!("/v1/sessions/{sid}/events?max_event=1"))
        .await
        .assert_problem(400, "invalid-query");
}

#[tokio::test]
async fn metrics_count_sse_subscribers_and_running_turns() {
    let app = spawn_with(None, "m", |s| s.fixture_token_delay_ms = 2_000).await;
    let sid = app.create_session().await;
    let metrics = || async {
        let res = app.client.get(app.url("/metrics")).send().await.unwrap();
        assert!(res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"));
        res.text().await.unwrap()
    };
    assert!(metrics().await.contains("dsh_sse_subscribers 0\n"));
    let mut sub = SseClient::connect(&events_url(&app, &sid, ""), None).await;
    sub.until("the first event", |f| f.event == "session/created")
        .await;
    app.prompt(&sid, "main", "slow").await.ok();
    let text = metrics().await;
    assert!(text.contains("dsh_sse_subscribers 1\n"), "{text}");
    assert!(text.contains("dsh_turns_running 1\n"), "{text}");
    assert!(text.contains("dsh_build_info{"), "{text}");
    assert!(
        text.contains("dsh_http_responses_total{class=\"2xx\"} "),
        "{text}"
    );
    assert!(
        !text.contains("dsh_http_responses_total{class=\"2xx\"} 0\n"),
        "requests were counted: {text}"
    );
    assert!(text.contains("dsh_http_response_seconds_count "), "{text}");
    app.cancel(&sid, "main").await.ok();
}

#[tokio::test]
async fn a_replica_whose_cache_predates_a_trimmed_compaction_still_reads_the_session() {
    let redis = TestRedis::start().await;
    let (a, _, c) = three(&redis).await;
    let sid = a.create_session().await;
    a.set_plan(&sid, "main", true).await.ok();
    let turn = a.prompt(&sid, "main", "plan").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    let q = a.await_question(&sid).await;
    // C caches the session while its turn is open.
    assert_eq!(
        c.get(&format!("/v1/sessions/{sid}/agents/main")).await.ok()["status"],
        "waiting"
    );
    a.dismiss(&sid, q["id"].as_str().unwrap()).await.ok();
    a.await_turn_end(&sid, &turn).await;
    a.post_json(&format!("/v1/sessions/{sid}/compact"), json!({}))
        .await
        .ok();
    let agent = c.get(&format!("/v1/sessions/{sid}/agents/main")).await.ok();
    assert_eq!(agent["status"], "idle");
    assert_eq!(agent["plan"], json!({"active": true}));
    assert_eq!(
        c.set_plan(&sid, "main", false).await.ok()["outcome"],
        "committed"
    );
}

#[tokio::test]
async fn with_a_thousand_agents_every_subscriber_gets_each_flip_of_one_agent_as_plan_mode_and_plan_view(
) {
    let redis = TestRedis::start().await;
    let (a, b, _) = three(&redis).await;
    let sid = a.create_session().await;
    let mut agents = Vec::new();
    // `main` and 999 more: DSH_MAX_AGENTS (1,000) of them.
    for _ in 0..999 {
        let spawned = a.spawn_agent(&sid, Some("main")).await.ok();
        agents.push(spawned["id"].as_str().unwrap().to_owned());
    }
    let target = agents[500].clone();
    let head_id = a.session(&sid).await.ok()["last_event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let head: u64 = head_id.trim_end_matches("-0").parse().unwrap();
    assert_eq!(head, 1000);
    let mut subscribers = [
        // Replays the whole log, on the replica that writes.
        SseClient::connect(&events_url(&a, &sid, ""), None).await,
        // Resumes at the head, on another replica.
        SseClient::connect(&events_url(&b, &sid, ""), Some(&head_id)).await,
        SseClient::connect(&events_url(&b, &sid, "?types=plan/*"), None).await,
    ];

    let flips = 30;
    let mut expected = Vec::new();
    for i in 1..=flips {
        let active = i % 2 == 1;
        let put = a.set_plan(&sid, &target, active).await.ok();
        assert_eq!(put["outcome"], "committed");
        let id = format!("{}-0", head + i);
        let view = json!({"agent": target, "active": active});
        expected.push((id.clone(), "plan/mode".to_owned(), view.clone()));
        expected.push((id, "plan/view".to_owned(), view));
    }
    let last = format!("{}-0", head + flips);
    for sub in &mut subscribers {
        let frames = sub
            .until("the last flip's view", |f| {
                f.event == "plan/view" && f.id.as_deref() == Some(last.as_str())
            })
            .await;
        let initial = frames
            .iter()
            .filter(|f| f.event == "plan/view" && f.id.is_none())
            .count();
        assert_eq!(initial, 1000, "the view of every agent as of the head");
        let burst: Vec<(String, String, serde_json::Value)> = frames
            .iter()
            .filter(|f| f.event.starts_with("plan/"))
            .filter_map(|f| {
                let id = f.id.clone()?;
                let seq: u64 = id.trim_end_matches("-0").parse().unwrap();
                let view = json!({"agent": f.data["agent"], "active": f.data["data"]["active"]});
                (seq > head).then(|| (id, f.event.clone(), view))
            })
            .collect();
        assert_eq!(
            burst, expected,
            "each flip once, in order, and a view for no other agent"
        );
    }
}
