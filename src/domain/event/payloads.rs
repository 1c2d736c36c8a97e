//! The payload of every event type, as stored in an entry's `data` field. Each rejects unknown
//! fields: a payload is a full value, never a partial one.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::options::QuestionOption;
use super::outcomes::ToolOutcome;
use crate::domain::ids::{AgentId, EventId, SessionId, TenantId};
use crate::domain::plan::revisions::Revision;

/// Where a forked session came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkOrigin {
    #[schema(value_type = String)]
    pub session: SessionId,
    /// The parent's event id the fork copies up to (inclusive).
    #[schema(value_type = String, example = "12-0")]
    pub at: EventId,
}

/// One agent's state in a snapshot: what a fold needs to continue without the events before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSnapshot {
    #[schema(value_type = String)]
    pub id: AgentId,
    #[schema(value_type = Option<String>)]
    pub owner: Option<AgentId>,
    /// The recorded plan state.
    pub active: bool,
    /// A pending choice, if any (kept by compaction; a fork does not carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<bool>,
    /// The plan state the agent's last step header described.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_header_plan: Option<bool>,
    /// The provider-visible history that replaces the events before the snapshot (a fork
    /// copies it; compaction replaces it with a summary).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub history: Vec<serde_json::Value>,
    /// The agent's plan revisions, oldest first (a fork carries them too: the history of what
    /// was submitted and decided is the fork's own up to its point).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<Revision>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ForkOrigin>,
    /// For a fork: the agents and their recorded state at the fork point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<AgentSnapshot>>,
    /// The tenant that created the session (a fork stays in its parent's tenant); absent for a
    /// session created while the server ran open (no credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub tenant: Option<TenantId>,
    /// How long the session is kept after its last write, in ms; 0 = until deleted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retention_ms: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A snapshot of everything the fold needs; later folds start here and earlier entries may be
/// trimmed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCompacted {
    /// The provider-written summary of the conversation so far.
    pub summary: String,
    /// When the session was created (ms since the epoch).
    pub created_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ForkOrigin>,
    pub agents: Vec<AgentSnapshot>,
    /// The tenant that created the session (a fork stays in its parent's tenant); absent for a
    /// session created while the server ran open (no credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub tenant: Option<TenantId>,
    /// How long the session is kept after its last write, in ms; 0 = until deleted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retention_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSpawned {
    /// The agent that owns this one; `null` for an unowned agent.
    #[schema(value_type = Option<String>)]
    pub owner: Option<AgentId>,
}

/// A full-value replacement of an agent's recorded plan state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanMode {
    pub active: bool,
}

/// The user's desired plan state, recorded while it cannot be committed yet. A target equal to
/// the recorded state clears the pending choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanSelect {
    pub active: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandRun {
    pub name: String,
    pub args: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserMessage {
    pub text: String,
    /// Who wrote it when not the user, e.g. `plugin:plan-mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// True when sent while a turn ran: the next step includes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub steer: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnStarted {
    pub turn: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnEnded {
    pub turn: String,
    /// Why the turn ended (a string on the wire; `crate::domain::agent::reason` names them).
    #[schema(value_type = TurnEndReason)]
    pub reason: String,
}

/// Why a turn ended: `completed` (the model answered without tool calls), `cancelled` (a
/// client cancelled it), `failed` (the provider kept failing, or every attempt of a step was
/// lost) or `step-limit` (it reached `DSH_MAX_STEPS` and wanted another step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TurnEndReason {
    Completed,
    Cancelled,
    Failed,
    StepLimit,
}

/// A system-prompt section as a step header names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SectionRef {
    pub name: String,
    pub order: u32,
}

/// What a step's request describes: recorded before the request is sent, so a retry or another
/// replica sends the identical request and the notification rule can compare plan states.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepHeader {
    /// The plan state this step's request describes.
    pub plan: PlanMode,
    /// The system-prompt sections, in order.
    pub sections: Vec<SectionRef>,
    /// SHA-256 of the serialized tool list (identical in both plan states).
    pub tools_hash: String,
    /// SHA-256 of the whole frozen request (system prompt, history, tools).
    pub assembly_hash: String,
    /// The replica that runs this step.
    pub replica: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepStarted {
    pub turn: String,
    /// 1-based step number within the turn.
    pub step: u32,
    pub header: StepHeader,
    /// The frozen system prompt; history is the agent's recorded messages before this event.
    pub system: String,
}

/// Another attempt at a step that has no recorded answer (its replica died, lost its lease or
/// handed the turn over on shutdown); the frozen request is sent again unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepRetried {
    pub turn: String,
    pub step: u32,
    /// 2 for the first retry, and so on.
    pub attempt: u32,
    /// The replica that runs this attempt.
    pub replica: String,
    pub reason: StepRetryReason,
}

/// Why a step was attempted again: `resumed` (a runner picked up the turn and found the step's
/// current attempt unanswered, so it sends the frozen request again). A failed provider call
/// is not retried: it ends the turn as `failed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StepRetryReason {
    Resumed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (a JSON document).
    pub arguments: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssistantMessage {
    pub turn: String,
    pub step: u32,
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    pub turn: String,
    pub call_id: String,
    pub name: String,
    /// False for a failed call; `result.reason` then says why.
    pub ok: bool,
    /// What the model reads as the call's result.
    #[schema(value_type = ToolOutcome)]
    pub result: serde_json::Value,
}

/// How a capable UI should present a question; others render a generic option list and
/// answer with the same option ids.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    /// Which kind of question this is (a string on the wire).
    #[schema(value_type = IntentKind)]
    pub kind: String,
    /// The label of the approving option, for UIs older than option kinds; decide by the
    /// option whose `kind` is `approve` instead.
    pub approve: String,
}

/// The kinds of question a capable UI may present specially: `plan-review` shows the plan with
/// Approve / Keep planning. A UI should render an unknown kind as a generic question.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum IntentKind {
    PlanReview,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionAsked {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<Intent>,
    pub title: String,
    /// Markdown; untrusted content (render sanitized).
    pub detail: String,
    /// The answers to offer, each with a stable id and a kind (logs older than option ids hold
    /// plain labels here; they read back as options, see [`super::options`]).
    #[serde(deserialize_with = "super::options::deserialize")]
    pub options: Vec<QuestionOption>,
    /// Whether a free-text answer is accepted.
    pub allow_text: bool,
    /// The turn and tool call waiting for the answer.
    pub turn: String,
    pub call_id: String,
    /// For a plan review: the plan revision it decides (absent in logs older than revisions,
    /// whose fold numbers and digests the plan itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<RevisionRef>,
}

/// The plan revision a review decides: its number among the agent's submissions (1, 2, …)
/// and the digest of its text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevisionRef {
    #[schema(minimum = 1, example = 2)]
    pub number: u32,
    /// `sha256:` and the hex SHA-256 of the plan's text (UTF-8).
    #[schema(example = "sha256:9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e")]
    pub digest: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionAnswered {
    pub id: String,
    /// The id of the chosen option (absent in logs older than option ids, which name the
    /// option by `label`; the fold resolves it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "approve")]
    pub option: Option<String>,
    /// The chosen option's label when it was answered, for a human reading the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Who answered: `key:<key id>` or `token:<subject>`; absent on an open server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionDismissed {
    pub id: String,
    /// Who dismissed it: `key:<key id>` or `token:<subject>`; absent on an open server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire<T: Serialize>(v: T) -> String {
        serde_json::to_value(v)
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn the_documented_turn_end_reasons_are_the_ones_recorded() {
        use crate::domain::agent::reason;
        use TurnEndReason::*;
        let documented: Vec<String> = [Completed, Cancelled, Failed, StepLimit].map(wire).into();
        let recorded = [
            reason::COMPLETED,
            reason::CANCELLED,
            reason::FAILED,
            reason::STEP_LIMIT,
        ];
        assert_eq!(documented, recorded);
    }

    #[test]
    fn the_documented_intent_kind_is_the_one_asked() {
        assert_eq!(
            wire(IntentKind::PlanReview),
            crate::domain::plan::review::REVIEW_KIND
        );
    }
}
