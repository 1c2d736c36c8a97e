//! The session log's vocabulary: every fact the service records, as typed events.
//!
//! Wire names are fixed by `#[serde(tag = "type", content = "data")]` and never reused with a new
//! meaning. A stored entry is `type`, `agent`, `data` (JSON), `ts` (commit time, ms) and `v`
//! (schema version); [`Recorded`] is that entry with its id, as the API and SSE show it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ids::{AgentId, EventId};

/// Version of the event schema written into every entry (`v`).
pub const SCHEMA_VERSION: u16 = 1;

pub mod frames;
pub mod options;
mod outcomes;
mod payloads;
pub use options::{OptionKind, QuestionOption};
pub use outcomes::*;
pub use payloads::*;

/// What happened. `type` names it; `data` carries its payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", content = "data")]
pub enum EventKind {
    #[serde(rename = "session/created")]
    SessionCreated(SessionCreated),
    #[serde(rename = "agent/spawned")]
    AgentSpawned(AgentSpawned),
    #[serde(rename = "plan/mode")]
    PlanMode(PlanMode),
    #[serde(rename = "plan/select")]
    PlanSelect(PlanSelect),
    #[serde(rename = "command/run")]
    CommandRun(CommandRun),
    #[serde(rename = "user/message")]
    UserMessage(UserMessage),
    #[serde(rename = "turn/started")]
    TurnStarted(TurnStarted),
    #[serde(rename = "turn/ended")]
    TurnEnded(TurnEnded),
    #[serde(rename = "step/started")]
    StepStarted(StepStarted),
    #[serde(rename = "step/retried")]
    StepRetried(StepRetried),
    #[serde(rename = "assistant/message")]
    AssistantMessage(AssistantMessage),
    #[serde(rename = "tool/result")]
    ToolResult(ToolResult),
    #[serde(rename = "question/asked")]
    QuestionAsked(QuestionAsked),
    #[serde(rename = "question/answered")]
    QuestionAnswered(QuestionAnswered),
    #[serde(rename = "question/dismissed")]
    QuestionDismissed(QuestionDismissed),
    #[serde(rename = "session/compacted")]
    SessionCompacted(SessionCompacted),
}

impl EventKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::SessionCreated(_) => "session/created",
            EventKind::AgentSpawned(_) => "agent/spawned",
            EventKind::PlanMode(_) => "plan/mode",
            EventKind::PlanSelect(_) => "plan/select",
            EventKind::CommandRun(_) => "command/run",
            EventKind::UserMessage(_) => "user/message",
            EventKind::TurnStarted(_) => "turn/started",
            EventKind::TurnEnded(_) => "turn/ended",
            EventKind::StepStarted(_) => "step/started",
            EventKind::StepRetried(_) => "step/retried",
            EventKind::AssistantMessage(_) => "assistant/message",
            EventKind::ToolResult(_) => "tool/result",
            EventKind::QuestionAsked(_) => "question/asked",
            EventKind::QuestionAnswered(_) => "question/answered",
            EventKind::QuestionDismissed(_) => "question/dismissed",
            EventKind::SessionCompacted(_) => "session/compacted",
        }
    }

    /// The agents a snapshot-bearing event (fork creation or compaction) restores.
    pub fn snapshot(&self) -> Option<&[AgentSnapshot]> {
        match self {
            EventKind::SessionCreated(SessionCreated {
                agents: Some(a), ..
            }) => Some(a),
            EventKind::SessionCompacted(c) => Some(&c.agents),
            _ => None,
        }
    }

    /// The payload alone, as stored in the entry's `data` field. An event that cannot be
    /// serialized is an error, never a stand-in `{}`: the store must not append it.
    pub fn data_json(&self) -> Result<String, serde_json::Error> {
        payload(serde_json::to_value(self)?, self.type_name())
    }

    /// Rebuilds an event from a stored entry's `type` and `data` fields.
    pub fn from_parts(type_name: &str, data: &[u8]) -> Result<Self, String> {
        let data: serde_json::Value = serde_json::from_slice(data)
            .map_err(|e| format!("`{type_name}` data is not JSON: {e}"))?;
        serde_json::from_value(serde_json::json!({ "type": type_name, "data": data }))
            .map_err(|e| format!("`{type_name}` entry is malformed: {e}"))
    }
}

/// The `data` member of a serialized event. Every variant carries one; without it the entry
/// would read back as another payload or not at all, so its absence is an error.
fn payload(mut entry: serde_json::Value, type_name: &str) -> Result<String, serde_json::Error> {
    match entry.get_mut("data") {
        Some(data) => Ok(data.take().to_string()),
        None => Err(serde::ser::Error::custom(format!(
            "a `{type_name}` event serialized without `data`"
        ))),
    }
}

/// An event about to be appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    pub agent: AgentId,
    pub kind: EventKind,
}

impl NewEvent {
    pub fn new(agent: &AgentId, kind: EventKind) -> Self {
        Self {
            agent: agent.clone(),
            kind,
        }
    }
}

/// An event as committed to a session log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Recorded {
    /// The event id: `<seq>-0`, the position in the session log.
    #[schema(value_type = String, example = "3-0")]
    pub id: EventId,
    #[schema(value_type = String, example = "main")]
    pub agent: AgentId,
    #[serde(flatten)]
    pub kind: EventKind,
    /// Commit time, RFC 3339 with milliseconds, taken from the store's clock.
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = String, example = "2026-12-02T10:23:53.123Z")]
    pub committed_at: u64,
    /// Schema version of the entry.
    pub v: u16,
}

impl Recorded {
    pub fn seq(&self) -> u64 {
        self.id.0
    }
}

pub(crate) mod rfc3339_ms {
    use std::time::{Duration, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
        let t = UNIX_EPOCH + Duration::from_millis(*ms);
        s.collect_str(&humantime::format_rfc3339_millis(t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        let t = humantime::parse_rfc3339(&s).map_err(serde::de::Error::custom)?;
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map_err(serde::de::Error::custom)?
            .as_millis();
        Ok(ms as u64)
    }
}

/// [`rfc3339_ms`] for an optional time.
pub(crate) mod rfc3339_ms_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ms: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match ms {
            Some(ms) => super::rfc3339_ms::serialize(ms, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        #[derive(Deserialize)]
        struct Time(#[serde(with = "super::rfc3339_ms")] u64);
        Ok(Option::<Time>::deserialize(d)?.map(|t| t.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_mode_entry_without_its_full_value_is_malformed() {
        assert!(EventKind::from_parts("plan/mode", br#"{}"#).is_err());
        assert!(EventKind::from_parts("plan/mode", br#"{"active":true,"x":1}"#).is_err());
        assert!(EventKind::from_parts("plan/flip", br#"{"active":true}"#).is_err());
        assert_eq!(
            EventKind::from_parts("plan/mode", br#"{"active":true}"#),
            Ok(EventKind::PlanMode(PlanMode { active: true }))
        );
    }

    #[test]
    fn recorded_events_serialize_with_type_data_and_commit_time() {
        let r = Recorded {
            id: EventId(3),
            agent: AgentId::root(),
            kind: EventKind::PlanMode(PlanMode { active: true }),
            committed_at: 1_764_670_000_123,
            v: SCHEMA_VERSION,
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["id"], "3-0");
        assert_eq!(json["type"], "plan/mode");
        assert_eq!(json["data"]["active"], true);
        assert_eq!(json["committed_at"], "2025-12-02T10:06:40.123Z");
        let back: Recorded = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.kind.data_json().unwrap(), r#"{"active":true}"#);
    }

    #[test]
    fn an_event_without_its_payload_is_an_error_not_an_empty_object() {
        let e = payload(serde_json::json!({"type": "plan/mode"}), "plan/mode").unwrap_err();
        assert_eq!(
            e.to_string(),
            "a `plan/mode` event serialized without `data`"
        );
        assert_eq!(
            payload(
                serde_json::json!({"type": "plan/mode", "data": {"active": false}}),
                "plan/mode"
            )
            .unwrap(),
            r#"{"active":false}"#
        );
    }
}
