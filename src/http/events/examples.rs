//! The spec's example of every recorded frame: one plan-review story (create, `/plan`, a step,
//! a review kept planning, a retried step, the approval, a child agent, a dismissed review,
//! a compaction), built from the domain's own types and serialized the way the streams write
//! them ([`RecordedFrame`]), so an example cannot drift from the wire.

use std::sync::Arc;

use serde_json::Value;

use super::cursor::Cursor;
use super::many::RESET_MANY;
use super::sse::{Filter, Framing, HEARTBEAT, RETRY};
use super::RESET_ONE;

use crate::domain::agent::reason;
use crate::domain::event::frames::{
    AssistantDelta, Frame, RecordedFrame, RevisionChanged, ASSISTANT_DELTA,
};
use crate::domain::event::options::{APPROVE, KEEP_PLANNING};
use crate::domain::event::{
    AgentSnapshot, AgentSpawned, AssistantMessage, CommandRun, EventKind, FailureReason, Intent,
    OptionKind, PlanMode, PlanSelect, QuestionAnswered, QuestionAsked, QuestionDismissed,
    QuestionOption, Recorded, SectionRef, SessionCompacted, SessionCreated, StepHeader,
    StepRetried, StepRetryReason, StepStarted, ToolCall, ToolFailure, ToolOutcome, ToolResult,
    TurnEnded, TurnStarted, UserMessage, SCHEMA_VERSION,
};
use crate::domain::plan::review::REVIEW_KIND;
use crate::domain::plan::revisions::{digest, Revision, RevisionStatus};
use crate::domain::plan::EXIT_TOOL;
use crate::domain::{AgentId, EventId, PlanView, SessionId};
use crate::live::{Item, LiveEvent};
use crate::store::Ephemeral;

/// The session every example names.
pub(super) const SESSION: &str = "3f9c0d2a7be14c55a1d2e3f405162738";
const TURN: &str = "turn-01a23b6b5b867777b7ae56fd0cc422a3";
/// 2026-12-02T10:23:53.123Z, the first event's commit time.
const T0: u64 = 1_796_207_033_123;
const THIRTY_DAYS_MS: u64 = 30 * 24 * 3_600_000;
const PLAN: &str = "# Plan\n\nRequest:\n\n> fix the login bug\n\n## Steps\n\n1. Inspect the \
                    code involved.\n2. Make the change.\n3. Verify it with the tests.\n";
const SUMMARY: &str = "7 earlier messages. The last request was: fix the login bug";
const SYSTEM: &str = "You are dsh, an AI agent working with a user on their software project. \
                      …\n\nYou are in plan mode: plan before you change anything. …";

/// The example frame of recorded event type `event`, if the story has one.
pub(super) fn recorded(event: &str) -> Option<Value> {
    let session = SessionId::parse(SESSION).ok()?;
    let recorded = story().into_iter().find(|r| r.kind.type_name() == event)?;
    serde_json::to_value(RecordedFrame {
        session: &session,
        event: &recorded,
    })
    .ok()
}

fn header(active: bool, assembly_hash: &str) -> StepHeader {
    let mut sections = vec![SectionRef {
        name: "product:base".into(),
        order: 10,
    }];
    if active {
        sections.push(SectionRef {
            name: "plan:policy".into(),
            order: 50,
        });
    }
    StepHeader {
        plan: PlanMode { active },
        sections,
        tools_hash: "af8a90dfc361d9403ac5901b8bc1cbe469e5ef3471f49d29637da4eaadfe5e26".into(),
        assembly_hash: assembly_hash.into(),
        replica: "replica-a".into(),
    }
}

fn review_question(seq: u64, call_id: &str) -> QuestionAsked {
    QuestionAsked {
        id: format!("{REVIEW_KIND}-{seq}"),
        intent: Some(Intent {
            kind: REVIEW_KIND.into(),
            approve: APPROVE.1.into(),
        }),
        title: "Review the plan".into(),
        detail: PLAN.into(),
        options: vec![
            QuestionOption::new(APPROVE.0, OptionKind::Approve, APPROVE.1),
            QuestionOption::new(KEEP_PLANNING.0, OptionKind::KeepPlanning, KEEP_PLANNING.1),
        ],
        allow_text: true,
        turn: TURN.into(),
        call_id: call_id.into(),
        revision: Some(revision().reference()),
    }
}

/// The story's one plan revision: submitted at event 9, sent back at event 10.
pub(super) fn revision() -> Revision {
    Revision {
        number: 1,
        digest: digest(PLAN),
        text: PLAN.into(),
        submitted_at: T0 + 250 * 8,
        turn: TURN.into(),
        step: 1,
        question: format!("{REVIEW_KIND}-9"),
        status: RevisionStatus::Revising,
        feedback: Some("Also cover SSO logins.".into()),
        decided_by: Some("token:user-42".into()),
        decided_at: Some(T0 + 250 * 9),
    }
}

/// The `plan/revision` frame of the story's answer (event 10): revision 1 sent back.
pub(super) fn revision_changed() -> RevisionChanged {
    let r = revision();
    RevisionChanged {
        number: r.number,
        digest: r.digest,
        status: r.status,
        question: r.question,
        feedback: r.feedback,
        decided_by: r.decided_by,
    }
}

/// One session's log, in order: every recorded event type at least once.
fn story() -> Vec<Recorded> {
    let main = AgentId::root();
    let child = AgentId::parse("agent-1").unwrap_or_else(|_| AgentId::root());
    let by = Some("token:user-42".to_owned());
    let events: Vec<(&AgentId, EventKind)> = vec![
        (
            &main,
            EventKind::SessionCreated(SessionCreated {
                parent: None,
                agents: None,
                tenant: None,
                retention_ms: THIRTY_DAYS_MS,
            }),
        ),
        (&main, EventKind::PlanMode(PlanMode { active: true })),
        (
            &main,
            EventKind::CommandRun(CommandRun {
                name: "plan".into(),
                args: "fix the login bug".into(),
            }),
        ),
        (
            &main,
            EventKind::TurnStarted(TurnStarted { turn: TURN.into() }),
        ),
        (
            &main,
            EventKind::UserMessage(UserMessage {
                text: "fix the login bug".into(),
                source: None,
                steer: false,
            }),
        ),
        (
            &main,
            EventKind::StepStarted(StepStarted {
                turn: TURN.into(),
                step: 1,
                header: header(
                    true,
                    "9341ee487d5f5803dfecc8133a8f01d67cd9701919b4d21e56d74e92528bb92c",
                ),
                system: SYSTEM.into(),
            }),
        ),
        (
            &main,
            EventKind::StepRetried(StepRetried {
                turn: TURN.into(),
                step: 1,
                attempt: 2,
                replica: "replica-b".into(),
                reason: StepRetryReason::Resumed,
            }),
        ),
        (
            &main,
            EventKind::AssistantMessage(AssistantMessage {
                turn: TURN.into(),
                step: 1,
                text: "Here is my plan.".into(),
                tool_calls: vec![ToolCall {
                    id: "call-1".into(),
                    name: EXIT_TOOL.into(),
                    arguments: serde_json::json!({ "plan": PLAN }).to_string(),
                }],
            }),
        ),
        (
            &main,
            EventKind::QuestionAsked(review_question(9, "call-1")),
        ),
        (
            &main,
            EventKind::QuestionAnswered(QuestionAnswered {
                id: format!("{REVIEW_KIND}-9"),
                option: Some(KEEP_PLANNING.0.into()),
                label: Some(KEEP_PLANNING.1.into()),
                text: Some("Also cover SSO logins.".into()),
                by: by.clone(),
            }),
        ),
        (
            &main,
            EventKind::ToolResult(ToolResult {
                turn: TURN.into(),
                call_id: "call-1".into(),
                name: EXIT_TOOL.into(),
                ok: false,
                result: ToolOutcome::Failed(ToolFailure {
                    reason: FailureReason::Rejected,
                    message: "The user did not approve the plan. Stay in plan mode, revise the \
                              plan with their feedback and submit it again with `exit_plan_mode`."
                        .into(),
                    feedback: Some("Also cover SSO logins.".into()),
                    decided_by: by.clone(),
                })
                .to_value(),
            }),
        ),
        (&main, EventKind::PlanSelect(PlanSelect { active: false })),
        (
            &main,
            EventKind::TurnEnded(TurnEnded {
                turn: TURN.into(),
                reason: reason::CANCELLED.into(),
            }),
        ),
        (
            &child,
            EventKind::AgentSpawned(AgentSpawned {
                owner: Some(main.clone()),
            }),
        ),
        (
            &main,
            EventKind::QuestionDismissed(QuestionDismissed {
                id: format!("{REVIEW_KIND}-21"),
                by,
            }),
        ),
        (
            &main,
            EventKind::SessionCompacted(SessionCompacted {
                summary: SUMMARY.into(),
                created_at: T0,
                parent: None,
                agents: vec![
                    AgentSnapshot {
                        id: child.clone(),
                        owner: Some(main.clone()),
                        active: false,
                        pending: None,
                        last_header_plan: None,
                        history: vec![],
                        revisions: vec![],
                    },
                    AgentSnapshot {
                        id: main.clone(),
                        owner: None,
                        active: true,
                        pending: Some(false),
                        last_header_plan: Some(true),
                        history: vec![serde_json::json!({
                            "role": "user",
                            "content": format!("[summary of the earlier conversation] {SUMMARY}"),
                        })],
                        revisions: vec![revision()],
                    },
                ],
                tenant: None,
                retention_ms: THIRTY_DAYS_MS,
            }),
        ),
    ];
    events
        .into_iter()
        .zip(1u64..)
        .map(|((agent, kind), seq)| Recorded {
            id: EventId(seq),
            agent: agent.clone(),
            kind,
            committed_at: T0 + 250 * (seq - 1),
            v: SCHEMA_VERSION,
        })
        .collect()
}

/// The first frames of a session's stream (`many`: of `GET /v1/events` following this session
/// and one more) as the wire carries them, framed by the routes' own code: the opening views,
/// a recorded event, the view it changed, a delta and a heartbeat.
pub(super) fn stream(many: bool) -> String {
    let (Ok(sid), Ok(other)) = (
        SessionId::parse(SESSION),
        SessionId::parse("7a41e6c2d09b4f3e8c5a1b2d3e4f5061"),
    ) else {
        return String::new();
    };
    let main = AgentId::root();
    let plan_mode = story()
        .into_iter()
        .find(|r| r.kind.type_name() == "plan/mode");
    let delta = serde_json::to_string(&Frame {
        kind: ASSISTANT_DELTA,
        session: &sid,
        agent: Some(&main),
        id: None,
        data: AssistantDelta {
            turn: TURN,
            step: 1,
            attempt: 1,
            text: "Here is ",
        },
    });
    let (Some(plan_mode), Ok(delta)) = (plan_mode, delta) else {
        return String::new();
    };
    let changed = plan_mode.id;
    let view = |id, active| Item::PlanView {
        id,
        agent: main.clone(),
        view: PlanView {
            active,
            pending: None,
        },
    };
    let items = [
        view(None, false),
        Item::Event(LiveEvent::new(&sid, plan_mode)),
        view(Some(changed), true),
        Item::Ephemeral(Arc::new(Ephemeral {
            sid: sid.clone(),
            agent: main.clone(),
            kind: ASSISTANT_DELTA.into(),
            step: None,
            body: delta.into(),
        })),
    ];
    let framing = Framing {
        filter: Filter::everything(),
        reset: if many { RESET_MANY } else { RESET_ONE },
    };
    // `GET /v1/events`'s `id:` names every followed session's last event.
    let mut cursor = Cursor::default();
    cursor.set(&other, 4);
    cursor.set(&sid, changed.seq());
    let mut out = String::from(RETRY);
    for item in &items {
        let frame = framing.encode(&sid, item, |id| match many {
            true => cursor.to_string(),
            false => id.to_string(),
        });
        if let Ok(Some(bytes)) = frame {
            out.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    out.push_str(HEARTBEAT);
    out
}
