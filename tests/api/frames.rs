//! Every frame the event streams send, held against the served OpenAPI document: a frame
//! whose name has no schema, or whose data does not fit it, fails.

use std::collections::{BTreeSet, HashMap};

use jsonschema::Validator;
use serde_json::{json, Value};

use crate::helpers::{spawn_replica, TestApp, TestRedis};
use crate::review::plan_and_await_review;
use crate::sse::{Frame, SseClient};

/// `EventFrame` and the schema its discriminator maps each frame name to, from `/openapi.json`.
struct FrameSchemas {
    any: Validator,
    by_name: HashMap<String, Validator>,
}

impl FrameSchemas {
    async fn served(app: &TestApp) -> Self {
        let spec = app.get("/openapi.json").await.ok();
        let components = spec["components"].clone();
        let frame = &components["schemas"]["EventFrame"];
        assert_eq!(frame["discriminator"]["propertyName"], "type", "{frame:#}");
        let compile = |reference: &str| {
            let root = json!({"$ref": reference, "components": components});
            jsonschema::validator_for(&root)
                .unwrap_or_else(|e| panic!("{reference} does not compile: {e}"))
        };
        let mapping = frame["discriminator"]["mapping"]
            .as_object()
            .expect("a discriminator mapping");
        let by_name = mapping
            .iter()
            .map(|(name, reference)| (name.clone(), compile(reference.as_str().unwrap())))
            .collect();
        // The event routes name it as their stream's body.
        for path in ["/v1/sessions/{sid}/events", "/v1/events"] {
            let body = &spec["paths"][path]["get"]["responses"]["200"]["content"]
                ["text/event-stream"]["schema"]["$ref"];
            assert_eq!(body, "#/components/schemas/EventFrame", "{path}");
        }
        Self {
            any: compile("#/components/schemas/EventFrame"),
            by_name,
        }
    }

    #[track_caller]
    fn check(&self, route: &str, f: &Frame) {
        let errors: Vec<String> = self
            .any
            .iter_errors(&f.data)
            .map(|e| e.to_string())
            .collect();
        assert!(
            errors.is_empty(),
            "{route}: `{}` does not fit EventFrame: {errors:#?}\n{:#}",
            f.event,
            f.data
        );
        assert_eq!(
            f.data["type"],
            f.event.as_str(),
            "{route}: the event: line is the discriminator value"
        );
        let named = self
            .by_name
            .get(&f.event)
            .unwrap_or_else(|| panic!("{route}: `{}` frames have no schema", f.event));
        assert!(named.is_valid(&f.data), "{route}: {:#}", f.data);
    }
}

async fn answer(app: &TestApp, sid: &str, q: &Value, body: Value) {
    app.answer(sid, q["id"].as_str().unwrap(), body).await.ok();
}

#[tokio::test]
async fn every_frame_of_a_plan_review_a_reset_and_a_deletion_fits_the_published_schema() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let schemas = FrameSchemas::served(&app).await;
    let sid = app.create_session().await;
    let one_url = app.url(&format!("/v1/sessions/{sid}/events"));
    let many_url = app.url(&format!("/v1/events?sessions={sid}"));
    let mut one = SseClient::connect(&one_url, None).await;
    let mut many = SseClient::connect(&many_url, None).await;

    app.spawn_agent(&sid, Some("main")).await.ok();
    // The review: keep planning with feedback, then approve; the turn ends.
    let (turn, q) = plan_and_await_review(&app, &sid, "fix the login bug").await;
    answer(
        &app,
        &sid,
        &q,
        json!({"label": "Keep planning", "text": "Also cover SSO."}),
    )
    .await;
    let revised = app.await_question(&sid).await;
    answer(&app, &sid, &revised, json!({"label": "Approve"})).await;
    app.await_turn_end(&sid, &turn).await;
    // Another review, dismissed.
    let (turn, q) = plan_and_await_review(&app, &sid, "and the signup bug").await;
    app.dismiss(&sid, q["id"].as_str().unwrap()).await.ok();
    app.await_turn_end(&sid, &turn).await;
    let head = app.session(&sid).await.ok()["last_event_id"].clone();
    for sub in [&mut one, &mut many] {
        sub.until("the last turn's end", |f| f.data["id"] == head)
            .await;
    }

    // A trimmed compaction: a cursor before it gets a reset, on both routes.
    app.post_json(&format!("/v1/sessions/{sid}/compact"), json!({}))
        .await
        .ok();
    let mut stale_one = SseClient::connect(&one_url, Some("3-0")).await;
    let mut stale_many = SseClient::connect(&many_url, Some(&format!("{sid}:3"))).await;
    stale_one.until("a reset", |f| f.event == "reset").await;
    stale_many
        .until("the snapshot after the reset", |f| {
            f.event == "session/compacted"
        })
        .await;

    let deleted = app
        .send(app.client.delete(app.url(&format!("/v1/sessions/{sid}"))))
        .await;
    assert_eq!(deleted.status, 204);
    let mut seen = BTreeSet::new();
    for (route, sub) in [
        ("session", &mut one),
        ("many", &mut many),
        ("session after 3-0", &mut stale_one),
        ("many after 3", &mut stale_many),
    ] {
        sub.drain().await;
        assert!(*sub.ended.borrow(), "{route}: the stream ended");
        for f in sub.seen() {
            schemas.check(route, f);
            assert_eq!(
                f.data["session"],
                sid.as_str(),
                "{route}: every frame names its session"
            );
            if let (Some(id), Some(event)) = (&f.id, f.data["id"].as_str()) {
                let seq = event.trim_end_matches("-0");
                match route.starts_with("many") {
                    true => {
                        assert_eq!(id, &format!("{sid}:{seq}"), "{route}: the composite cursor")
                    }
                    false => assert_eq!(id, event, "{route}: the id line is the event id"),
                }
            }
            seen.insert(f.event.clone());
        }
    }
    let expected = [
        "session/created",
        "agent/spawned",
        "command/run",
        "plan/mode",
        "plan/select",
        "user/message",
        "turn/started",
        "step/started",
        "assistant/message",
        "tool/result",
        "question/asked",
        "question/answered",
        "question/dismissed",
        "turn/ended",
        "session/compacted",
        "plan/view",
        "plan/revision",
        "assistant/delta",
        "reset",
        "session/deleted",
    ];
    let missing: Vec<_> = expected.iter().filter(|e| !seen.contains(**e)).collect();
    assert!(
        missing.is_empty(),
        "the flow sent no {missing:?} frame (saw {seen:?})"
    );
}

#[tokio::test]
async fn a_frame_that_is_untyped_or_mis_shaped_fails_the_check() {
    let app = spawn_replica(None, "a").await;
    let schemas = FrameSchemas::served(&app).await;
    let frame = |event: &str, data: Value| Frame {
        id: None,
        event: event.into(),
        data,
    };
    let good =
        json!({"type": "plan/view", "session": "s1", "agent": "main", "data": {"active": true}});
    schemas.check("good", &frame("plan/view", good.clone()));
    let wrongs = [
        // The old shape: no envelope.
        frame("plan/view", json!({"agent": "main", "active": true})),
        // A field too many.
        frame(
            "plan/view",
            json!({"type": "plan/view", "session": "s1", "agent": "main", "data": {"active": true}, "x": 1}),
        ),
        // A session-wide frame naming an agent.
        frame(
            "reset",
            json!({"type": "reset", "session": "s1", "agent": "main", "data": {"reason": "trimmed", "message": "m", "first_available": "3-0"}}),
        ),
        // An unknown frame name.
        frame(
            "plan/flip",
            json!({"type": "plan/flip", "session": "s1", "agent": "main", "data": {}}),
        ),
        // The event line disagreeing with the data.
        frame("plan/mode", good),
    ];
    for wrong in wrongs {
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            schemas.check("wrong", &wrong)
        }));
        assert!(failed.is_err(), "accepted {wrong:?}");
    }
}
