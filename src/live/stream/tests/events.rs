//! Events and deltas the tests commit and publish, built from the domain types.

use super::*;
use crate::domain::event::{
    AgentSnapshot, AgentSpawned, AssistantMessage, PlanMode, PlanSelect, SessionCompacted,
    SessionCreated, StepHeader, StepRetried, StepRetryReason, StepStarted, TurnStarted,
    UserMessage,
};
use crate::domain::EventKind;

pub(super) fn agent(id: &str) -> AgentId {
    AgentId::parse(id).unwrap()
}

pub(super) fn on(id: &str, kind: EventKind) -> NewEvent {
    NewEvent::new(&agent(id), kind)
}

pub(super) fn created() -> NewEvent {
    on(
        "main",
        EventKind::SessionCreated(SessionCreated {
            parent: None,
            agents: None,
            tenant: None,
            retention_ms: 0,
        }),
    )
}

pub(super) fn spawned(id: &str) -> NewEvent {
    on(
        id,
        EventKind::AgentSpawned(AgentSpawned {
            owner: Some(agent("main")),
        }),
    )
}

pub(super) fn mode(id: &str, active: bool) -> NewEvent {
    on(id, EventKind::PlanMode(PlanMode { active }))
}

pub(super) fn select(id: &str, active: bool) -> NewEvent {
    on(id, EventKind::PlanSelect(PlanSelect { active }))
}

pub(super) fn user(id: &str) -> NewEvent {
    on(
        id,
        EventKind::UserMessage(UserMessage {
            text: "hi".into(),
            source: None,
            steer: false,
        }),
    )
}

pub(super) fn turn_started() -> NewEvent {
    on(
        "main",
        EventKind::TurnStarted(TurnStarted {
            turn: "turn-1".into(),
        }),
    )
}

pub(super) fn step_started(step: u32) -> NewEvent {
    let header = StepHeader {
        plan: PlanMode { active: false },
        sections: Vec::new(),
        tools_hash: String::new(),
        assembly_hash: String::new(),
        replica: "r".into(),
    };
    on(
        "main",
        EventKind::StepStarted(StepStarted {
            turn: "turn-1".into(),
            step,
            header,
            system: String::new(),
        }),
    )
}

pub(super) fn step_retried(step: u32, attempt: u32) -> NewEvent {
    on(
        "main",
        EventKind::StepRetried(StepRetried {
            turn: "turn-1".into(),
            step,
            attempt,
            replica: "r".into(),
            reason: StepRetryReason::Resumed,
        }),
    )
}

pub(super) fn answered(step: u32) -> NewEvent {
    on(
        "main",
        EventKind::AssistantMessage(AssistantMessage {
            turn: "turn-1".into(),
            step,
            text: "done".into(),
            tool_calls: Vec::new(),
        }),
    )
}

/// A compaction snapshot of `(agent, active, pending)`.
pub(super) fn compacted(agents: &[(&str, bool, Option<bool>)]) -> NewEvent {
    let agents = agents
        .iter()
        .map(|(id, active, pending)| AgentSnapshot {
            id: agent(id),
            owner: None,
            active: *active,
            pending: *pending,
            last_header_plan: None,
            history: Vec::new(),
            revisions: Vec::new(),
        })
        .collect();
    let compacted = SessionCompacted {
        summary: "so far".into(),
        created_at: 0,
        parent: None,
        agents,
        tenant: None,
        retention_ms: 0,
    };
    on("main", EventKind::SessionCompacted(compacted))
}

pub(super) fn delta(step: u32, attempt: u32, text: &str) -> Ephemeral {
    Ephemeral {
        sid: SessionId::parse("s1").unwrap(),
        agent: agent("main"),
        kind: Arc::from("assistant/delta"),
        step: Some(StepRef {
            turn: "turn-1".into(),
            step,
            attempt,
        }),
        body: Arc::from(text),
    }
}
