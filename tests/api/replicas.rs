use serde_json::json;

use crate::helpers::{spawn_replica, verify, TestRedis};

#[tokio::test]
async fn a_set_on_one_replica_is_read_on_another() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    // B folds and caches the session before A changes it.
    assert_eq!(b.plan(&sid, "main").await.ok(), json!({"active": false}));

    assert_eq!(
        a.set_plan(&sid, "main", true).await.ok()["outcome"],
        "committed"
    );
    assert_eq!(b.plan(&sid, "main").await.ok(), json!({"active": true}));
    // B's cache is behind A's write; its decision must still see it.
    assert_eq!(b.set_plan(&sid, "main", true).await.ok()["outcome"], "noop");
    assert_eq!(a.events_of_type(&sid, "plan/mode").await.len(), 1);
    let child = b.spawn_agent(&sid, Some("main")).await.ok();
    assert_eq!(
        a.get(&format!(
            "/v1/sessions/{sid}/agents/{}",
            child["id"].as_str().unwrap()
        ))
        .await
        .ok()["owner"],
        "main"
    );
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn concurrent_puts_across_two_replicas_commit_exactly_one_plan_mode_per_committed_outcome() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let child = a.spawn_agent(&sid, Some("main")).await.ok()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let requests = (0..64).map(|i| {
        let replica = if i % 2 == 0 { &a } else { &b };
        let agent = if i % 3 == 0 { child.as_str() } else { "main" };
        // A deterministic but irregular pattern of targets, so flips and repeats interleave.
        let target = (i * 7 + i / 5) % 3 != 0;
        let sid = sid.clone();
        async move {
            (
                agent.to_owned(),
                replica.set_plan(&sid, agent, target).await.ok(),
            )
        }
    });
    let replies = futures_util::future::join_all(requests).await;

    let events = a.events(&sid).await;
    for agent in ["main", child.as_str()] {
        let committed = replies
            .iter()
            .filter(|(ag, r)| ag == agent && r["outcome"] == "committed")
            .count();
        let modes: Vec<bool> = events
            .iter()
            .filter(|e| e["type"] == "plan/mode" && e["agent"] == agent)
            .map(|e| e["data"]["active"].as_bool().unwrap())
            .collect();
        assert_eq!(
            modes.len(),
            committed,
            "{agent}: one plan/mode per committed outcome"
        );
        assert!(
            committed > 1,
            "{agent}: the storm flipped the state more than once"
        );
        let mut previous = false;
        for active in modes {
            assert_ne!(active, previous, "{agent}: no two identical flips in a row");
            previous = active;
        }
        // Both replicas agree on the final state, and it is what the last flip recorded.
        assert_eq!(
            a.plan(&sid, agent).await.ok(),
            b.plan(&sid, agent).await.ok()
        );
        assert_eq!(a.plan(&sid, agent).await.ok()["active"], previous);
    }
    assert!(replies
        .iter()
        .all(|(_, r)| r["outcome"] == "committed" || r["outcome"] == "noop"));
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn sessions_created_on_either_replica_are_served_by_both() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let from_b = b.create_session().await;
    assert_eq!(a.session(&from_b).await.ok()["agents"][0]["id"], "main");
    assert_eq!(
        a.set_plan(&from_b, "main", true).await.ok()["last_event_id"],
        "2-0"
    );
    assert_eq!(b.session(&from_b).await.ok()["last_event_id"], "2-0");
}
