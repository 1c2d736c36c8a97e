//! What an event stream sends besides the recorded events, and the one envelope every frame
//! shares: `type` (the SSE `event:` name), `session`, `agent` (absent only on session-wide
//! frames), `id` (the event id, where the frame has one), then the payload in `data`.
//!
//! A recorded event's frame is the event as the log route returns it plus its `session`
//! ([`RecordedFrame`]); the others are [`Frame`]s of the payloads below. The wire shape lives
//! here, beside the recorded vocabulary, so the producer of a delta (the engine) and the
//! stream's framing (HTTP) write the same thing, and the OpenAPI schema is derived from it.

use serde::Serialize;
use utoipa::ToSchema;

use super::Recorded;
use crate::domain::ids::{AgentId, EventId, SessionId};
use crate::domain::plan::revisions::RevisionStatus;

/// An agent's plan view changed (or, without an `id`, its view when the stream opened).
pub const PLAN_VIEW: &str = "plan/view";
/// A plan revision was submitted, or its review decided it.
pub const PLAN_REVISION: &str = "plan/revision";
/// Assistant text while a model streams; never recorded, no `id`.
pub const ASSISTANT_DELTA: &str = "assistant/delta";
/// The cursor is older than the trimmed log.
pub const RESET: &str = "reset";
/// The session was deleted; nothing more comes from it.
pub const SESSION_DELETED: &str = "session/deleted";

/// A frame's `data:` JSON: the envelope around a payload.
#[derive(Debug, Serialize)]
pub struct Frame<'a, D> {
    /// The frame's name, equal to the SSE `event:` line.
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub session: &'a SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<&'a AgentId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<EventId>,
    pub data: D,
}

/// A recorded event's frame: the event as `GET …/log` returns it, naming its session.
#[derive(Debug, Serialize)]
pub struct RecordedFrame<'a> {
    pub session: &'a SessionId,
    #[serde(flatten)]
    pub event: &'a Recorded,
}

/// The payload of an `assistant/delta` frame: a piece of the text one attempt of one step is
/// streaming.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssistantDelta<'a> {
    pub turn: &'a str,
    /// 1-based step number within the turn.
    pub step: u32,
    /// The step's attempt (1 for the first; a retried step streams its text again).
    pub attempt: u32,
    /// The next piece of text, to append to what the step streamed so far.
    pub text: &'a str,
}

/// The payload of a `plan/revision` frame: a revision as the event (`id`) left it — submitted
/// (`pending`) or decided. Its text is in `GET …/agents/{agent}/plans/{number}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevisionChanged {
    #[schema(minimum = 1, example = 2)]
    pub number: u32,
    #[schema(example = "sha256:9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e")]
    pub digest: String,
    pub status: RevisionStatus,
    /// The review question that decides it.
    #[schema(example = "plan-review-7")]
    pub question: String,
    /// What the user said with the decision (the feedback of `revising`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// Who decided: `key:<key id>` or `token:<subject>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
}

/// Why a `reset` frame was sent.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResetReason {
    /// A compaction trimmed the events after the cursor.
    Trimmed,
}

/// The payload of a `reset` frame.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamReset {
    pub reason: ResetReason,
    /// What to do, in words.
    pub message: &'static str,
    /// The oldest event the log still holds.
    #[schema(value_type = String, example = "12-0")]
    pub first_available: EventId,
}

/// Why a `session/deleted` frame was sent.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeletedReason {
    Deleted,
}

/// The payload of a `session/deleted` frame.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionDeleted {
    pub reason: DeletedReason,
    pub message: &'static str,
}

impl SessionDeleted {
    pub const NOW: Self = Self {
        reason: DeletedReason::Deleted,
        message: "the session was deleted; it no longer exists",
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::{EventKind, PlanMode, SCHEMA_VERSION};

    #[test]
    fn every_frame_names_type_session_and_agent_the_same_way() {
        let sid = SessionId::parse("s1").unwrap();
        let main = AgentId::root();
        let recorded = Recorded {
            id: EventId(3),
            agent: main.clone(),
            kind: EventKind::PlanMode(PlanMode { active: true }),
            committed_at: 0,
            v: SCHEMA_VERSION,
        };
        let event = serde_json::to_value(RecordedFrame {
            session: &sid,
            event: &recorded,
        })
        .unwrap();
        let delta = serde_json::to_value(Frame {
            kind: ASSISTANT_DELTA,
            session: &sid,
            agent: Some(&main),
            id: None,
            data: AssistantDelta {
                turn: "turn-1",
                step: 1,
                attempt: 1,
                text: "Hi",
            },
        })
        .unwrap();
        let deleted = serde_json::to_value(Frame {
            kind: SESSION_DELETED,
            session: &sid,
            agent: None,
            id: None,
            data: SessionDeleted::NOW,
        })
        .unwrap();
        for (frame, ty) in [
            (&event, "plan/mode"),
            (&delta, "assistant/delta"),
            (&deleted, "session/deleted"),
        ] {
            assert_eq!(frame["type"], ty);
            assert_eq!(frame["session"], "s1");
        }
        assert_eq!(
            (&event["agent"], &event["id"]),
            (&"main".into(), &"3-0".into())
        );
        assert_eq!(event["data"], serde_json::json!({"active": true}));
        assert_eq!(delta["agent"], "main");
        assert_eq!(delta["data"]["text"], "Hi");
        assert!(delta.get("id").is_none());
        assert!(
            deleted.get("agent").is_none(),
            "a session-wide frame names no agent"
        );
        assert_eq!(deleted["data"]["reason"], "deleted");
    }
}
