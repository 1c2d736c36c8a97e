//! The event streams' frames in the OpenAPI document: one schema per frame (`PlanModeFrame`,
//! `PlanViewFrame`, `AssistantDeltaFrame`, …) and [`EventFrame`], their `oneOf` with a
//! discriminator on `type`, which both event routes name as their `text/event-stream` body.
//!
//! The recorded frames are derived from [`EventKind`]'s own schema, so a new event type gets
//! its frame schema without anyone listing it here; the frames' payloads are the types the
//! wire is serialized from ([`crate::domain::event::frames`]).

use std::borrow::Cow;

use serde_json::{json, Value};
use utoipa::openapi::schema::{Discriminator, OneOfBuilder, Schema};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::domain::event::frames::{
    AssistantDelta, Frame, ResetReason, RevisionChanged, SessionDeleted, StreamReset,
    ASSISTANT_DELTA, PLAN_REVISION, PLAN_VIEW, RESET, SESSION_DELETED,
};
use crate::domain::{AgentId, EventId, EventKind, PlanView, SessionId};

/// Any frame of an event stream, told apart by `type` (the SSE `event:` line).
pub struct EventFrame;

/// Whether a frame's envelope carries a member.
#[derive(Clone, Copy, PartialEq)]
enum Has {
    Always,
    Sometimes,
    Never,
}

/// One frame's schema.
struct FrameSchema {
    /// The `type` / `event:` value.
    event: String,
    /// Its component name.
    name: String,
    schema: Value,
}

const SESSION: &str = "The session the frame belongs to.";
const EVENT_ID: &str = "The event id `<seq>-0`, the event's position in its session's log: \
                        order ids by `seq` as a number, never as strings (`10-0` follows `9-0`).";

/// The envelope every frame shares around its payload `data` (a `$ref`).
fn envelope(event: &str, description: &str, agent: Has, id: (Has, &str), data: &str) -> Value {
    let mut properties = serde_json::Map::new();
    let mut required = vec![json!("type"), json!("session")];
    properties.insert(
        "type".into(),
        json!({"type": "string", "enum": [event], "description": "The frame's name; the SSE `event:` line says the same."}),
    );
    properties.insert(
        "session".into(),
        json!({"type": "string", "description": SESSION}),
    );
    for (name, has, schema) in [
        (
            "agent",
            agent,
            json!({"type": "string", "description": "The agent it concerns.", "example": "main"}),
        ),
        (
            "id",
            id.0,
            json!({"type": "string", "pattern": "^[0-9]+-0$", "description": id.1, "example": "12-0"}),
        ),
    ] {
        if has != Has::Never {
            properties.insert(name.into(), schema);
        }
        if has == Has::Always {
            required.push(json!(name));
        }
    }
    properties.insert(
        "data".into(),
        json!({"$ref": format!("#/components/schemas/{data}")}),
    );
    required.push(json!("data"));
    json!({
        "type": "object",
        "description": description,
        "required": required,
        "properties": properties,
        "additionalProperties": false,
    })
}

/// A recorded event's frame: the envelope plus `committed_at` and `v`.
fn recorded(event: &str, payload: &str) -> FrameSchema {
    let mut schema = envelope(
        event,
        &format!("`{event}`: a recorded event, as `GET …/log` returns it, naming its session."),
        Has::Always,
        (Has::Always, EVENT_ID),
        payload,
    );
    schema["properties"]["committed_at"] = json!({
        "type": "string",
        "description": "Commit time, RFC 3339 with milliseconds, taken from the store's clock.",
        "example": "2026-12-02T10:23:53.123Z",
    });
    schema["properties"]["v"] =
        json!({"type": "integer", "minimum": 0, "description": "Schema version of the entry."});
    for field in ["committed_at", "v"] {
        if let Some(required) = schema["required"].as_array_mut() {
            required.push(json!(field));
        }
    }
    if let Some(example) = super::examples::recorded(event) {
        schema["example"] = example;
    }
    FrameSchema {
        event: event.to_owned(),
        name: format!("{payload}Frame"),
        schema,
    }
}

/// `(type, payload component)` of every recorded event, read from [`EventKind`]'s schema.
fn recorded_kinds() -> Vec<(String, String)> {
    let kinds = serde_json::to_value(<EventKind as PartialSchema>::schema()).unwrap_or_default();
    let variants = kinds["oneOf"].as_array().cloned().unwrap_or_default();
    variants
        .iter()
        .filter_map(|v| {
            let event = v["properties"]["type"]["enum"][0].as_str()?;
            let payload = v["properties"]["data"]["$ref"].as_str()?;
            let payload = payload.rsplit('/').next()?;
            Some((event.to_owned(), payload.to_owned()))
        })
        .collect()
}

/// Every frame an event stream sends.
fn frames() -> Vec<FrameSchema> {
    let mut out: Vec<FrameSchema> = recorded_kinds()
        .iter()
        .map(|(event, payload)| recorded(event, payload))
        .collect();
    let derived = [
        (
            PLAN_VIEW,
            "PlanViewFrame",
            "An agent's plan view: when the stream opens, every agent's (no `id`), then whenever \
             an event (`id`) changes one.",
            Has::Always,
            (
                Has::Sometimes,
                "The event that changed the view; absent on the views a stream opens with.",
            ),
            PlanView::name(),
            example(
                PLAN_VIEW,
                true,
                Some(EventId(12)),
                PlanView {
                    active: true,
                    pending: Some(false),
                },
            ),
        ),
        (
            PLAN_REVISION,
            "PlanRevisionFrame",
            "A plan revision was submitted (`pending`: its review opened) or decided (`approved`, \
             `revising`, `dismissed`, `unavailable`) by the event `id`. Read the list with \
             `GET …/agents/{agent}/plans` once, then follow these.",
            Has::Always,
            (
                Has::Always,
                "The event that submitted or decided the revision.",
            ),
            RevisionChanged::name(),
            example(
                PLAN_REVISION,
                true,
                Some(EventId(10)),
                super::examples::revision_changed(),
            ),
        ),
        (
            ASSISTANT_DELTA,
            "AssistantDeltaFrame",
            "Assistant text while a model streams: never recorded, no `id`; never sent after its \
             step's `assistant/message` nor for an attempt a `step/retried` superseded.",
            Has::Always,
            (Has::Never, ""),
            AssistantDelta::name(),
            example(
                ASSISTANT_DELTA,
                true,
                None,
                AssistantDelta {
                    turn: "turn-0192f3a4",
                    step: 1,
                    attempt: 1,
                    text: "Here is the ",
                },
            ),
        ),
        (
            RESET,
            "ResetFrame",
            "The cursor is older than the session's trimmed log: re-read the session (see \
             `data.message` for how the stream goes on).",
            Has::Never,
            (Has::Never, ""),
            StreamReset::name(),
            example(
                RESET,
                false,
                None,
                StreamReset {
                    reason: ResetReason::Trimmed,
                    message: "events after your cursor were compacted away; re-read the session, \
                              then reconnect after its last_event_id",
                    first_available: EventId(41),
                },
            ),
        ),
        (
            SESSION_DELETED,
            "SessionDeletedFrame",
            "The session was deleted; nothing more comes from it.",
            Has::Never,
            (Has::Never, ""),
            SessionDeleted::name(),
            example(SESSION_DELETED, false, None, SessionDeleted::NOW),
        ),
    ];
    for (event, name, description, agent, id, payload, example) in derived {
        let mut schema = envelope(event, description, agent, id, &payload);
        schema["example"] = example;
        out.push(FrameSchema {
            event: event.to_owned(),
            name: name.to_owned(),
            schema,
        });
    }
    out
}

/// A frame as the stream writes it, for the spec's examples.
fn example<D: serde::Serialize>(kind: &str, agent: bool, id: Option<EventId>, data: D) -> Value {
    let (Ok(session), main) = (SessionId::parse(super::examples::SESSION), AgentId::root()) else {
        return Value::Null;
    };
    serde_json::to_value(Frame {
        kind,
        session: &session,
        agent: agent.then_some(&main),
        id,
        data,
    })
    .unwrap_or_default()
}

fn to_schema(value: Value) -> RefOr<Schema> {
    serde_json::from_value(value).unwrap_or_else(|e| {
        // Built from literals above: a failure is a bug, shown in the spec and its drift test.
        RefOr::T(Schema::Object(
            utoipa::openapi::schema::ObjectBuilder::new()
                .description(Some(format!("frame schema did not build: {e}")))
                .build(),
        ))
    })
}

impl PartialSchema for EventFrame {
    fn schema() -> RefOr<Schema> {
        let frames = frames();
        let mut discriminator = Discriminator::new("type");
        let mut one_of = OneOfBuilder::new().description(Some(
            "One frame of an event stream: the JSON on its `data:` line. Every frame has `type` \
             (equal to its SSE `event:` line), `session`, `agent` (absent only on session-wide \
             frames: `reset`, `session/deleted`), `id` (the event id, where the frame has one) \
             and its payload in `data`. On the wire a frame is `id: <cursor>` (only when it \
             carries an event id: the event id on a session's stream, a composite cursor on \
             `GET /v1/events`), `event: <type>`, `data: <this JSON on one line>`, then a blank \
             line; `retry:` opens the stream and lines starting with `:` are heartbeats. Ignore \
             frame types you do not know.",
        ));
        for f in &frames {
            let reference = format!("#/components/schemas/{}", f.name);
            discriminator
                .mapping
                .insert(f.event.clone(), reference.clone());
            one_of = one_of.item(Ref::new(reference));
        }
        RefOr::T(Schema::OneOf(
            one_of.discriminator(Some(discriminator)).build(),
        ))
    }
}

impl ToSchema for EventFrame {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("EventFrame")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        for f in frames() {
            schemas.push((f.name, to_schema(f.schema)));
        }
        <EventKind as ToSchema>::schemas(schemas);
        schemas.push((PlanView::name().into(), PlanView::schema()));
        <PlanView as ToSchema>::schemas(schemas);
        schemas.push((RevisionChanged::name().into(), RevisionChanged::schema()));
        <RevisionChanged as ToSchema>::schemas(schemas);
        schemas.push((AssistantDelta::name().into(), AssistantDelta::schema()));
        <AssistantDelta as ToSchema>::schemas(schemas);
        schemas.push((StreamReset::name().into(), StreamReset::schema()));
        <StreamReset as ToSchema>::schemas(schemas);
        schemas.push((SessionDeleted::name().into(), SessionDeleted::schema()));
        <SessionDeleted as ToSchema>::schemas(schemas);
    }
}

/// Shows each event route's `text/event-stream` body as it looks on the wire, framed by the
/// routes' own code. It goes in the response's description: the media type's schema is one
/// frame's `data:` JSON, so a whole body as its example would not fit it.
pub fn document_streams(spec: &mut utoipa::openapi::OpenApi) {
    for (path, many) in [("/v1/sessions/{sid}/events", false), ("/v1/events", true)] {
        let response = spec
            .paths
            .paths
            .get_mut(path)
            .and_then(|item| item.get.as_mut())
            .and_then(|op| op.responses.responses.get_mut("200"));
        if let Some(RefOr::T(response)) = response {
            response.description.push_str(&format!(
                "\n\nFor example (the opening view, a recorded event, the view it changed, a \
                 delta, a heartbeat):\n\n```text\n{}```",
                super::examples::stream(many)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recorded_event_type_has_a_frame() {
        let kinds = recorded_kinds();
        let names: Vec<&str> = kinds.iter().map(|(event, _)| event.as_str()).collect();
        for known in [
            "session/created",
            "agent/spawned",
            "plan/mode",
            "plan/select",
            "command/run",
            "user/message",
            "turn/started",
            "turn/ended",
            "step/started",
            "step/retried",
            "assistant/message",
            "tool/result",
            "question/asked",
            "question/answered",
            "question/dismissed",
            "session/compacted",
        ] {
            assert!(names.contains(&known), "{known} in {names:?}");
        }
        assert!(kinds.contains(&("plan/mode".into(), "PlanMode".into())));
        let frames = frames();
        let events: Vec<&str> = frames.iter().map(|f| f.event.as_str()).collect();
        for extra in [
            "plan/view",
            "plan/revision",
            "assistant/delta",
            "reset",
            "session/deleted",
        ] {
            assert!(events.contains(&extra), "{events:?}");
        }
    }

    #[test]
    fn every_frame_has_an_example_that_fits_its_own_schema_and_the_union() {
        let spec = serde_json::to_value(crate::http::openapi()).unwrap();
        let components = &spec["components"];
        let validator = |name: &str| {
            let root =
                json!({"$ref": format!("#/components/schemas/{name}"), "components": components});
            jsonschema::validator_for(&root).unwrap()
        };
        let any = validator("EventFrame");
        let frames = frames();
        assert!(frames.len() >= 20, "{} frames", frames.len());
        for f in frames {
            let example = &components["schemas"][&f.name]["example"];
            assert!(example.is_object(), "{} has an example", f.name);
            assert_eq!(example["type"], f.event.as_str(), "{}", f.name);
            assert_eq!(example["session"], super::super::examples::SESSION);
            for v in [&validator(&f.name), &any] {
                let errors: Vec<String> = v.iter_errors(example).map(|e| e.to_string()).collect();
                assert!(errors.is_empty(), "{}: {errors:?}\n{example:#}", f.name);
            }
        }
    }

    #[test]
    fn the_stream_routes_show_a_body_whose_frames_fit_the_published_schema() {
        let spec = serde_json::to_value(crate::http::openapi()).unwrap();
        let root =
            json!({"$ref": "#/components/schemas/EventFrame", "components": spec["components"]});
        let any = jsonschema::validator_for(&root).unwrap();
        let session = super::super::examples::SESSION;
        for (path, many) in [("/v1/sessions/{sid}/events", false), ("/v1/events", true)] {
            let description = spec["paths"][path]["get"]["responses"]["200"]["description"]
                .as_str()
                .unwrap();
            let body = description.split("```text\n").nth(1).unwrap();
            let body = body.split("```").next().unwrap();
            assert!(body.starts_with("retry: 2000\n\n"), "{path}: {body}");
            let mut frames = 0;
            for block in body.split("\n\n").filter(|b| !b.is_empty()) {
                let line = |prefix: &str| {
                    let mut lines = block.lines();
                    lines.find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
                };
                let Some(data) = line("data: ") else {
                    continue;
                };
                let data: Value = serde_json::from_str(&data).unwrap();
                assert!(any.is_valid(&data), "{path}: {data:#}");
                assert_eq!(
                    Some(data["type"].as_str().unwrap().to_owned()),
                    line("event: ")
                );
                match (line("id: "), data["id"].as_str()) {
                    (None, None) => {}
                    (Some(id), Some(event)) if many => {
                        let seq = event.trim_end_matches("-0");
                        assert!(
                            id.split(',').any(|c| c == format!("{session}:{seq}")),
                            "{id}"
                        );
                    }
                    (Some(id), Some(event)) => assert_eq!(id, event),
                    other => panic!("{path}: the id line and the frame's id disagree: {other:?}"),
                }
                frames += 1;
            }
            assert_eq!(frames, 4, "{path}: {body}");
        }
    }

    #[test]
    fn frame_schemas_build_from_their_json() {
        for f in frames() {
            let built = serde_json::to_value(to_schema(f.schema.clone())).unwrap();
            assert_eq!(built["properties"]["type"]["enum"][0], f.event.as_str());
            assert_eq!(built["additionalProperties"], false, "{}", f.name);
            assert_eq!(built["required"], f.schema["required"], "{}", f.name);
        }
    }
}
