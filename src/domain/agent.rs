//! One agent in the fold: its recorded plan state, its provider history, and the progress of
//! its open turn — the current step, that step's attempt and owner, whether it was answered,
//! which tool calls wait for a result and which question each one asked.
//!
//! Turn progress is folded like everything else, so "what does this turn do next"
//! ([`AgentState::next`]) is a read of the folded agent, the same on every replica, and every
//! decision of the turn runner is checked against it by the compare-and-append.

use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use super::event::{
    AssistantMessage, EventKind, QuestionAnswered, QuestionDismissed, StepRetried, StepStarted,
    ToolCall, ToolResult, TurnEnded, TurnStarted,
};
use super::history::History;
use super::ids::AgentId;
use super::plan::revisions::Revisions;
use super::plan::PlanRecord;
use super::questions::{QuestionState, QuestionStatus};
use super::Recorded;

/// How many attempts one step gets (a replica crash or hand-off starts another) before the
/// turn ends as `failed`: a request that kills every replica that sends it must not loop.
pub const MAX_STEP_ATTEMPTS: u32 = 8;

/// Why a turn ended, as `turn/ended.reason` records it.
pub mod reason {
    pub const COMPLETED: &str = "completed";
    pub const CANCELLED: &str = "cancelled";
    pub const FAILED: &str = "failed";
    /// The turn reached `DSH_MAX_STEPS` steps and still wanted another.
    pub const STEP_LIMIT: &str = "step-limit";
}

/// What an agent is doing, folded from its turn events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentStatus {
    /// No turn is open.
    Idle,
    /// A turn is open.
    Running,
    /// A turn is open and waits on the user's answer to a question.
    Waiting,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentState {
    pub owner: Option<AgentId>,
    pub plan: PlanRecord,
    /// The open turn, if any.
    pub turn: Option<TurnProgress>,
    /// The plan state described by this agent's last `step/started` header.
    pub last_header_plan: Option<bool>,
    pub history: History,
    /// Its plan revisions, folded from its reviews.
    pub revisions: Revisions,
}

/// An open turn, as far as the log has got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnProgress {
    pub id: String,
    /// The latest step, once one started.
    pub step: Option<StepProgress>,
    /// A user message arrived after the current step's header: the turn needs another step.
    pub steered: bool,
    /// The last answer's tool calls without a result yet, in order.
    pub open_calls: Vec<OpenCall>,
    /// The open question the turn waits on.
    pub waiting_on: Option<String>,
}

/// The turn's latest step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepProgress {
    pub step: u32,
    /// The seq of its `step/started` header.
    pub header_seq: u64,
    /// 1 for the first attempt; each `step/retried` names the next.
    pub attempt: u32,
    /// The replica that owns the current attempt: only its answer is recorded.
    pub owner: String,
    pub answered: bool,
    /// The answer asked for tool calls (so the turn goes on after their results).
    pub had_calls: bool,
    /// The frozen system prompt and the request's hash: a retry sends the identical request.
    pub system: Arc<str>,
    pub assembly_hash: String,
}

/// A tool call waiting for its result, and the question this occurrence asked, if any. A
/// question belongs to one occurrence, never to the provider's call id, which some servers
/// reuse (`call_0` on every call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenCall {
    pub call: ToolCall,
    pub question: Option<String>,
}

/// What a turn does next, read from the folded agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// The turn is not open (ended, cancelled, or never started).
    Closed,
    /// Run a pre-step and then step `step`.
    NewStep { step: u32 },
    /// Step `step` has no answer: send its frozen request again as attempt `attempt`.
    Retry { step: u32, attempt: u32 },
    /// Give the first open tool call its result (or ask its question).
    RunTool(OpenCall),
    /// The turn waits on the user's answer (it holds no replica meanwhile).
    Wait,
    /// Nothing more to do: end the turn with this reason.
    End { reason: &'static str },
}

impl AgentState {
    pub fn new(owner: Option<AgentId>) -> Self {
        Self {
            owner,
            plan: PlanRecord::default(),
            turn: None,
            last_header_plan: None,
            history: History::default(),
            revisions: Revisions::default(),
        }
    }

    pub fn status(&self) -> AgentStatus {
        match &self.turn {
            Some(t) if t.waiting_on.is_some() => AgentStatus::Waiting,
            Some(_) => AgentStatus::Running,
            None => AgentStatus::Idle,
        }
    }

    pub fn turn_id(&self) -> Option<&str> {
        self.turn.as_ref().map(|t| t.id.as_str())
    }

    /// What turn `turn` does next; a turn reaching `max_steps` steps ends instead of
    /// starting another.
    pub fn next(&self, turn: &str, max_steps: u32) -> Next {
        let Some(t) = self.turn.as_ref().filter(|t| t.id == turn) else {
            return Next::Closed;
        };
        if t.waiting_on.is_some() {
            return Next::Wait;
        }
        let Some(s) = &t.step else {
            return Next::NewStep { step: 1 };
        };
        if !s.answered {
            return if s.attempt >= MAX_STEP_ATTEMPTS {
                Next::End {
                    reason: reason::FAILED,
                }
            } else {
                Next::Retry {
                    step: s.step,
                    attempt: s.attempt + 1,
                }
            };
        }
        if let Some(call) = t.open_calls.first() {
            return Next::RunTool(call.clone());
        }
        match (s.had_calls || t.steered, s.step >= max_steps) {
            (false, _) => Next::End {
                reason: reason::COMPLETED,
            },
            (true, true) => Next::End {
                reason: reason::STEP_LIMIT,
            },
            (true, false) => Next::NewStep { step: s.step + 1 },
        }
    }

    /// Folds one of this agent's turn, step, tool, question, message and plan events.
    pub(super) fn evolve(
        &mut self,
        e: &Recorded,
        questions: &mut imbl::OrdMap<String, std::sync::Arc<QuestionState>>,
    ) -> Result<(), String> {
        self.history.apply(&e.kind);
        match &e.kind {
            EventKind::TurnStarted(TurnStarted { turn }) => {
                if let Some(open) = &self.turn {
                    return Err(format!("turn `{turn}` started while `{}` is open", open.id));
                }
                self.turn = Some(TurnProgress {
                    id: turn.clone(),
                    step: None,
                    steered: false,
                    open_calls: Vec::new(),
                    waiting_on: None,
                });
            }
            EventKind::TurnEnded(TurnEnded { turn, .. }) => {
                let t = open_turn(&mut self.turn, turn)?;
                if !t.open_calls.is_empty() {
                    return Err(format!(
                        "turn `{turn}` ended with tool calls that have no result"
                    ));
                }
                if let Some(q) = t.waiting_on.take().and_then(|q| questions.get_mut(&q)) {
                    std::sync::Arc::make_mut(q).state = QuestionStatus::Aborted;
                }
                self.turn = None;
            }
            EventKind::StepStarted(StepStarted {
                turn,
                step,
                header,
                system,
            }) => {
                let t = open_turn(&mut self.turn, turn)?;
                if !t.open_calls.is_empty() {
                    return Err(format!("step {step} started with tool calls still open"));
                }
                t.step = Some(StepProgress {
                    step: *step,
                    header_seq: e.seq(),
                    attempt: 1,
                    owner: header.replica.clone(),
                    answered: false,
                    had_calls: false,
                    system: system.as_str().into(),
                    assembly_hash: header.assembly_hash.clone(),
                });
                t.steered = false;
                self.last_header_plan = Some(header.plan.active);
            }
            EventKind::StepRetried(StepRetried {
                turn,
                step,
                attempt,
                replica,
                ..
            }) => {
                let s = current_step(&mut self.turn, turn, *step)?;
                if s.answered || *attempt != s.attempt + 1 {
                    return Err(format!(
                        "step {step} cannot be retried as attempt {attempt}"
                    ));
                }
                s.attempt = *attempt;
                s.owner = replica.clone();
            }
            EventKind::AssistantMessage(AssistantMessage {
                turn,
                step,
                tool_calls,
                ..
            }) => {
                let s = current_step(&mut self.turn, turn, *step)?;
                if s.answered {
                    return Err(format!("step {step} answered twice"));
                }
                s.answered = true;
                s.had_calls = !tool_calls.is_empty();
                let t = open_turn(&mut self.turn, turn)?;
                t.open_calls = tool_calls
                    .iter()
                    .map(|call| OpenCall {
                        call: call.clone(),
                        question: None,
                    })
                    .collect();
            }
            EventKind::ToolResult(ToolResult { turn, call_id, .. }) => {
                let t = open_turn(&mut self.turn, turn)?;
                let Some(i) = t.open_calls.iter().position(|c| &c.call.id == call_id) else {
                    return Err(format!(
                        "result for tool call `{call_id}`, which is not open"
                    ));
                };
                t.open_calls.remove(i);
            }
            EventKind::QuestionAsked(q) => {
                let t = open_turn(&mut self.turn, &q.turn)?;
                if questions.contains_key(&q.id) {
                    return Err(format!("question `{}` asked twice", q.id));
                }
                let call = t
                    .open_calls
                    .iter_mut()
                    .find(|c| c.call.id == q.call_id && c.question.is_none())
                    .ok_or_else(|| {
                        format!("question for tool call `{}`, which is not open", q.call_id)
                    })?;
                call.question = Some(q.id.clone());
                t.waiting_on = Some(q.id.clone());
                questions.insert(
                    q.id.clone(),
                    std::sync::Arc::new(QuestionState {
                        agent: e.agent.clone(),
                        asked: q.clone(),
                        asked_at: e.id,
                        state: QuestionStatus::Open,
                        answer: None,
                    }),
                );
            }
            EventKind::QuestionAnswered(QuestionAnswered { id, .. })
            | EventKind::QuestionDismissed(QuestionDismissed { id, .. }) => {
                let q = questions
                    .get_mut(id)
                    .filter(|q| q.agent == e.agent && q.state == QuestionStatus::Open)
                    .map(std::sync::Arc::make_mut)
                    .ok_or_else(|| format!("question `{id}` is not open"))?;
                match &e.kind {
                    EventKind::QuestionAnswered(a) => q.record_answer(a)?,
                    _ => q.state = QuestionStatus::Dismissed,
                }
                if let Some(t) = self.turn.as_mut() {
                    if t.waiting_on.as_deref() == Some(id) {
                        t.waiting_on = None;
                    }
                }
            }
            EventKind::UserMessage(_) => {
                if let Some(t) = self.turn.as_mut().filter(|t| t.step.is_some()) {
                    t.steered = true;
                }
            }
            other => self.plan.evolve(other),
        }
        let step = self
            .turn
            .as_ref()
            .and_then(|t| t.step.as_ref())
            .map(|s| s.step);
        self.revisions.evolve(e, questions, step)
    }
}

fn open_turn<'a>(
    open: &'a mut Option<TurnProgress>,
    turn: &str,
) -> Result<&'a mut TurnProgress, String> {
    match open {
        Some(t) if t.id == turn => Ok(t),
        _ => Err(format!("event for turn `{turn}`, which is not open")),
    }
}

fn current_step<'a>(
    open: &'a mut Option<TurnProgress>,
    turn: &str,
    step: u32,
) -> Result<&'a mut StepProgress, String> {
    match open_turn(open, turn)?.step.as_mut() {
        Some(s) if s.step == step => Ok(s),
        _ => Err(format!(
            "event for step {step}, which is not the current one"
        )),
    }
}
