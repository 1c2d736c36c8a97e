//! One event stream for many sessions (`GET /v1/events`): every event of each session once
//! and in its order, a composite cursor that resumes all of them on another replica, tenant
//! scoping, and the limits.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::json;

use crate::auth::{key_for, mint};
use crate::failover::spawn_process;
use crate::helpers::{spawn_replica, spawn_with, TestApp, TestRedis};
use crate::on_both_stores;
use crate::sse::{Frame, SseClient};

/// The event seq a frame carries, for recorded events (not views, deltas or notices).
fn recorded_seq(f: &Frame) -> Option<(String, u64)> {
    if f.event == "plan/view" {
        return None;
    }
    let seq = f.data["id"].as_str()?.trim_end_matches("-0").parse().ok()?;
    Some((f.data["session"].as_str()?.to_owned(), seq))
}

fn last_event_seq(session: &serde_json::Value) -> u64 {
    session["last_event_id"]
        .as_str()
        .unwrap()
        .trim_end_matches("-0")
        .parse()
        .unwrap()
}

#[tokio::test]
async fn twenty_sessions_on_one_connection_get_every_event_once_in_order_even_across_a_replica_kill(
) {
    let redis = TestRedis::start().await;
    let mut a = spawn_process(&redis, "a", 1).await;
    let b = spawn_replica(Some(&redis), "b").await;
    let mut sids = Vec::new();
    for _ in 0..20 {
        sids.push(b.create_session().await);
    }
    let query = format!("/v1/events?sessions={}", sids.join(","));
    let mut first = SseClient::connect(&a.app.url(&query), None).await;
    // A writer on b flips every session's plan, round after round, across the kill.
    let writer = {
        let (w, sids) = (TestApp::remote(b.address.clone()), sids.clone());
        tokio::spawn(async move {
            for round in 0..6 {
                for sid in &sids {
                    w.set_plan(sid, "main", round % 2 == 0).await.ok();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // Kill a while it streams: after the creations and some of the flips.
    let mut streamed = 0;
    while streamed < 50 {
        let f = first
            .next(Duration::from_secs(10))
            .await
            .expect("events stream");
        streamed += usize::from(recorded_seq(&f).is_some());
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    first.drain().await;
    let cursor = first.last_id.clone().expect("a composite cursor");
    assert_eq!(
        cursor.split(',').count(),
        20,
        "every session is in it: {cursor}"
    );

    let mut second = SseClient::connect(&b.url(&query), Some(&cursor)).await;
    writer.await.unwrap();
    let mut heads = BTreeMap::new();
    for sid in &sids {
        heads.insert(sid.clone(), last_event_seq(&b.session(sid).await.ok()));
    }
    let mut reached = HashSet::new();
    while reached.len() < sids.len() {
        let f = second
            .next(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("resumed sessions stalled; reached {reached:?}"));
        if let Some((sid, seq)) = recorded_seq(&f) {
            if heads[&sid] == seq {
                reached.insert(sid);
            }
        }
    }
    // And it follows live after the catch-up.
    b.set_plan(&sids[7], "main", true).await.ok();
    second
        .until("a live event", |f| {
            recorded_seq(f).is_some_and(|(s, _)| s == sids[7])
        })
        .await;
    *heads.get_mut(&sids[7]).unwrap() += 1;

    let mut delivered: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for f in first.seen().iter().chain(second.seen()) {
        assert!(
            sids.iter().any(|s| f.data["session"] == s.as_str()),
            "{f:?}"
        );
        if let Some((sid, seq)) = recorded_seq(f) {
            delivered.entry(sid).or_default().push(seq);
        }
    }
    for (sid, head) in heads {
        let expected: Vec<u64> = (1..=head).collect();
        assert_eq!(
            delivered[&sid], expected,
            "session {sid}: each event once, in order"
        );
    }
}

#[tokio::test]
async fn a_tenant_wide_stream_follows_only_its_sessions_and_picks_up_new_ones() {
    let redis = TestRedis::start().await;
    let (_, acme_key) = key_for(&redis, "acme", None).await;
    let (_, other_key) = key_for(&redis, "other", None).await;
    let app = spawn_with(Some(&redis), "r1", |s| {
        s.default_rate = 100_000;
        s.stream_max_sessions = 3;
    })
    .await;
    let (acme, other) = (app.as_caller(&acme_key), app.as_caller(&other_key));
    let s1 = acme.create_session().await;
    let s2 = acme.create_session().await;
    let theirs = other.create_session().await;
    let url = app.url("/v1/events");
    let mut all = SseClient::connect_as(&url, None, Some(&acme_key)).await;
    let created = |sid: &str| {
        let sid = sid.to_owned();
        move |f: &Frame| f.event == "session/created" && f.data["session"] == sid.as_str()
    };
    let creation = |f: &Frame, sid: &str| f.event == "session/created" && f.data["session"] == sid;
    all.until_each("the creation", &[&s1, &s2], creation).await;
    // A session created after connecting is picked up from its first event.
    let s3 = acme.create_session().await;
    all.until("s3 created", created(&s3)).await;
    // A deleted one says so; the others go on.
    let deleted = acme
        .send(acme.client.delete(app.url(&format!("/v1/sessions/{s2}"))))
        .await;
    assert_eq!(deleted.status, 204);
    all.until("s2 deleted", |f| {
        f.event == "session/deleted" && f.data["session"] == s2.as_str()
    })
    .await;
    acme.set_plan(&s3, "main", true).await.ok();
    all.until("s3 goes on", |f| {
        f.event == "plan/mode" && f.data["session"] == s3.as_str()
    })
    .await;
    assert!(
        all.seen()
            .iter()
            .all(|f| f.data["session"] != theirs.as_str()),
        "another tenant's session never shows"
    );

    // Another tenant's session is missing, word for word as on its own route; listed beside
    // one of the caller's, it is left out as a missing one is.
    let listed = acme.get(&format!("/v1/events?sessions={theirs}")).await;
    let alone = acme.get(&format!("/v1/sessions/{theirs}/events")).await;
    assert_eq!(
        listed.assert_problem(404, "session-not-found"),
        alone.assert_problem(404, "session-not-found")
    );
    let mut beside = SseClient::connect_as(
        &app.url(&format!("/v1/events?sessions={s1},{theirs}&max_ms=300")),
        None,
        Some(&acme_key),
    )
    .await;
    let frames = beside.drain().await;
    assert!(frames.iter().any(created(&s1)), "{frames:#?}");
    assert!(
        frames.iter().all(|f| f.data["session"] == s1.as_str()),
        "{frames:#?}"
    );
    // A browser token follows its own session only.
    let token = mint(&acme, &s1, json!({"scopes": ["read"]})).await;
    let mut scoped = SseClient::connect(
        &app.url(&format!("/v1/events?access_token={token}&max_ms=500")),
        None,
    )
    .await;
    let frames = scoped.drain().await;
    assert!(frames.iter().any(created(&s1)), "{frames:#?}");
    assert!(
        frames.iter().all(|f| f.data["session"] == s1.as_str()),
        "{frames:#?}"
    );
    app.get(&format!("/v1/events?sessions={s3}&access_token={token}"))
        .await
        .assert_problem(404, "session-not-found");

    // Past the per-stream limit: 422, and the tenant-wide stream that grew past it ends.
    let s4 = acme.create_session().await;
    let s5 = acme.create_session().await;
    let detail = acme
        .get(&format!("/v1/events?sessions={s1},{s3},{s4},{s5}"))
        .await
        .assert_problem(422, "too-many-sessions");
    assert!(detail.contains("at most 3"), "{detail}");
    acme.get("/v1/events")
        .await
        .assert_problem(422, "too-many-sessions");
    all.drain().await;
    assert!(
        *all.ended.borrow(),
        "the stream ended when its tenant outgrew it"
    );
}

#[tokio::test]
async fn a_stream_of_many_sessions_counts_once_against_the_stream_quota() {
    let app = spawn_with(None, "a", |s| s.max_streams = 1).await;
    let (s1, s2, s3) = (
        app.create_session().await,
        app.create_session().await,
        app.create_session().await,
    );
    let mut many = SseClient::connect(
        &app.url(&format!("/v1/events?sessions={s1},{s2},{s3}")),
        None,
    )
    .await;
    many.until_each("the creation", &[&s1, &s2, &s3], |f, sid| {
        f.event == "session/created" && f.data["session"] == sid
    })
    .await;
    app.get(&format!("/v1/sessions/{s1}/events"))
        .await
        .assert_problem(429, "stream-quota");
    app.get("/v1/events?sessions=")
        .await
        .assert_problem(400, "invalid-query");
    app.get("/v1/events?sessions=a%20b")
        .await
        .assert_problem(400, "invalid-id");
}

on_both_stores! {
    async fn a_listed_session_deleted_while_away_is_dropped_on_reconnect_and_the_rest_resume(app: TestApp) {
        let (s1, s2) = (app.create_session().await, app.create_session().await);
        let url = app.url(&format!("/v1/events?sessions={s1},{s2}"));
        let mut first = SseClient::connect(&url, None).await;
        first
            .until_each("the creation", &[&s1, &s2], |f, sid| f.event == "session/created" && f.data["session"] == sid)
            .await;
        let cursor = first.last_id.clone().expect("frames carry the composite cursor");
        drop(first);
        let gone = app.send(app.client.delete(app.url(&format!("/v1/sessions/{s2}")))).await;
        assert_eq!(gone.status, 204);
        app.set_plan(&s1, "main", true).await.ok();

        let mut again = SseClient::connect(&url, Some(&cursor)).await;
        let frames = again
            .until("s1 goes on", |f| f.event == "plan/mode" && f.data["session"] == s1.as_str())
            .await;
        assert_eq!(frames[0].event, "session/deleted", "{frames:#?}");
        assert_eq!(frames[0].data["session"], s2.as_str());
        assert!(
            frames.iter().all(|f| f.event != "session/created"),
            "resumed after the cursor, no replay: {frames:#?}"
        );
        let id = again.last_id.clone().unwrap();
        assert!(!id.contains(s2.as_str()), "the cursor drops the deleted session: {id}");

        // Only when none of the listed sessions exists is the stream refused.
        let gone = app.send(app.client.delete(app.url(&format!("/v1/sessions/{s1}")))).await;
        assert_eq!(gone.status, 204);
        app.get(&format!("/v1/events?sessions={s1},{s2}"))
            .await
            .assert_problem(404, "session-not-found");
    }
}
