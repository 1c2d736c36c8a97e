//! Turns: opening one (or steering it), and every decision of the turn runner — the pre-step
//! with its step header, a retry, recording the model's answer, a tool call's result or
//! question, ending the turn.
//!
//! Each is a pure function of the folded session that first checks the turn still stands where
//! the runner thinks it does ([`AgentState::next`]). They are committed through the same
//! compare-and-append as every other decision, so a runner acting on a stale view (the user
//! cancelled, another replica took the step over, a compaction replaced the log) appends
//! nothing.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use super::agent::{reason, Next};
use super::event::{
    AssistantMessage, EventKind, FailureReason, PlanMode, SectionRef, StepHeader, StepRetried,
    StepRetryReason, StepStarted, ToolCall, ToolOutcome, ToolResult, TurnEnded, TurnStarted,
    UserMessage,
};
use super::history::{History, Message};
use super::plan::review::{review, ReviewStep};
use super::plan::revisions::Revision;
use super::plan::{decide_prestep, EXIT_TOOL};
use super::session::{DomainError, SessionState};
use super::{AgentId, NewEvent};

/// The answer to a prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Prompted {
    /// The turn that will read the message.
    pub turn: String,
    /// True when a turn was already running: the message is included in its next step.
    pub steered: bool,
}

/// What request assembly made of a step: the engine frames, the domain records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Framed {
    pub system: String,
    pub sections: Vec<SectionRef>,
    pub tools_hash: String,
    pub assembly_hash: String,
}

/// A step's frozen request as committed: its system prompt and the history it sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRequest {
    pub system: Arc<str>,
    pub messages: Vec<Message>,
    pub assembly_hash: String,
}

/// What a runner needs to know of its turn's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnRules {
    /// A turn ends with `step-limit` instead of starting step `max_steps + 1`.
    pub max_steps: u32,
    /// Whether `exit_plan_mode` is registered (plan mode is composed).
    pub exit_tool: bool,
    /// Whether questions are composed (without them, reviews fail closed).
    pub questions: bool,
}

type Decision<T> = Result<(T, Vec<NewEvent>), DomainError>;

/// Request assembly for a step: its plan state, the agent's latest approved plan revision and
/// the history it sends.
pub type FrameStep = dyn Fn(bool, Option<&Revision>, &imbl::Vector<Message>) -> Framed;

impl SessionState {
    /// What `agent`'s turn `turn` does next.
    pub fn next(&self, agent: &AgentId, turn: &str, rules: TurnRules) -> Next {
        self.agents
            .get(agent)
            .map_or(Next::Closed, |a| a.next(turn, rules.max_steps))
    }

    /// A prompt: opens turn `new_turn` on an idle agent, or steers the running one.
    pub fn decide_prompt(&self, agent: &AgentId, text: &str, new_turn: &str) -> Decision<Prompted> {
        let a = self.agent(agent)?;
        let open = a.turn_id();
        let message = NewEvent::new(
            agent,
            EventKind::UserMessage(UserMessage {
                text: text.to_owned(),
                source: None,
                steer: open.is_some(),
            }),
        );
        Ok(match open {
            Some(open) => (
                Prompted {
                    turn: open.to_owned(),
                    steered: true,
                },
                vec![message],
            ),
            None => {
                let start = EventKind::TurnStarted(TurnStarted {
                    turn: new_turn.to_owned(),
                });
                (
                    Prompted {
                        turn: new_turn.to_owned(),
                        steered: false,
                    },
                    vec![NewEvent::new(agent, start), message],
                )
            }
        })
    }

    /// Ends `agent`'s open turn with `reason`, if one is open (and is `turn`, when given).
    /// Every open tool call gets its (failed) result first, so the history stays well-formed
    /// for the next request; an open review fails closed.
    pub fn decide_end_turn(
        &self,
        agent: &AgentId,
        turn: Option<&str>,
        reason: &str,
    ) -> Decision<Option<String>> {
        let a = self.agent(agent)?;
        let Some(open) = a.turn.as_ref().filter(|t| turn.is_none_or(|id| id == t.id)) else {
            return Ok((None, Vec::new()));
        };
        let mut events: Vec<NewEvent> = open
            .open_calls
            .iter()
            .map(|c| {
                let (ok, result) = super::plan::review::aborted(&c.call, reason);
                let r = ToolResult {
                    turn: open.id.clone(),
                    call_id: c.call.id.clone(),
                    name: c.call.name.clone(),
                    ok,
                    result,
                };
                NewEvent::new(agent, EventKind::ToolResult(r))
            })
            .collect();
        let end = EventKind::TurnEnded(TurnEnded {
            turn: open.id.clone(),
            reason: reason.to_owned(),
        });
        events.push(NewEvent::new(agent, end));
        Ok((Some(open.id.clone()), events))
    }

    /// Ends the turn if there is nothing more to do (or it reached a limit).
    pub fn decide_finish(&self, agent: &AgentId, turn: &str, rules: TurnRules) -> Decision<bool> {
        match self.next(agent, turn, rules) {
            Next::End { reason } => {
                let (_, events) = self.decide_end_turn(agent, Some(turn), reason)?;
                Ok((true, events))
            }
            _ => Ok((false, Vec::new())),
        }
    }

    /// The pre-step and step `step` (DESIGN §2): commit the pending choice, notify if the plan
    /// state differs from the last header, freeze the request (`frame` assembles it from the
    /// plan state, the agent's latest approved plan revision and the history the step sends)
    /// and record its header — one append.
    pub fn decide_step(
        &self,
        agent: &AgentId,
        turn: &str,
        step: u32,
        rules: TurnRules,
        replica: &str,
        frame: &FrameStep,
    ) -> Decision<Option<StepRequest>> {
        if self.next(agent, turn, rules) != (Next::NewStep { step }) {
            return Ok((None, Vec::new()));
        }
        let a = self.agent(agent)?;
        let (active, plan_events) = decide_prestep(a.plan, a.last_header_plan);
        let mut history: History = a.history.clone();
        for e in &plan_events {
            history.apply(e);
        }
        let framed = frame(
            active,
            a.revisions.approved().map(|r| &**r),
            history.messages(),
        );
        let mut events: Vec<NewEvent> = plan_events
            .into_iter()
            .map(|k| NewEvent::new(agent, k))
            .collect();
        let header = StepHeader {
            plan: PlanMode { active },
            sections: framed.sections,
            tools_hash: framed.tools_hash,
            assembly_hash: framed.assembly_hash.clone(),
            replica: replica.to_owned(),
        };
        let request = StepRequest {
            system: framed.system.as_str().into(),
            messages: history.messages().iter().cloned().collect(),
            assembly_hash: framed.assembly_hash,
        };
        events.push(NewEvent::new(
            agent,
            EventKind::StepStarted(StepStarted {
                turn: turn.to_owned(),
                step,
                header,
                system: framed.system,
            }),
        ));
        Ok((Some(request), events))
    }

    /// Another attempt at an unanswered step, with its frozen request.
    pub fn decide_retry(
        &self,
        agent: &AgentId,
        turn: &str,
        (step, attempt): (u32, u32),
        rules: TurnRules,
        replica: &str,
    ) -> Decision<Option<StepRequest>> {
        if self.next(agent, turn, rules) != (Next::Retry { step, attempt }) {
            return Ok((None, Vec::new()));
        }
        let a = self.agent(agent)?;
        let Some(s) = a.turn.as_ref().and_then(|t| t.step.as_ref()) else {
            return Ok((None, Vec::new()));
        };
        let request = StepRequest {
            system: s.system.clone(),
            messages: a.history.messages().iter().cloned().collect(),
            assembly_hash: s.assembly_hash.clone(),
        };
        let retried = EventKind::StepRetried(StepRetried {
            turn: turn.to_owned(),
            step,
            attempt,
            replica: replica.to_owned(),
            reason: StepRetryReason::Resumed,
        });
        Ok((Some(request), vec![NewEvent::new(agent, retried)]))
    }

    /// Whether `(step, attempt)` is the turn's current, unanswered attempt: the fence that
    /// lets only the runner that committed that attempt record its outcome.
    pub fn holds_attempt(&self, agent: &AgentId, turn: &str, (step, attempt): (u32, u32)) -> bool {
        let current = self.agents.get(agent).and_then(|a| a.turn.as_ref());
        let current = current
            .filter(|t| t.id == turn)
            .and_then(|t| t.step.as_ref());
        current.is_some_and(|s| s.step == step && s.attempt == attempt && !s.answered)
    }

    /// Records the model's answer to attempt `attempt` of step `step`, if that attempt is still
    /// the current one and unanswered.
    pub fn decide_model_answer(
        &self,
        agent: &AgentId,
        turn: &str,
        at: (u32, u32),
        text: String,
        tool_calls: Vec<ToolCall>,
    ) -> Decision<bool> {
        if !self.holds_attempt(agent, turn, at) {
            return Ok((false, Vec::new()));
        }
        let message = AssistantMessage {
            turn: turn.to_owned(),
            step: at.0,
            text,
            tool_calls: unique_call_ids(tool_calls, turn, at.0),
        };
        let event = NewEvent::new(agent, EventKind::AssistantMessage(message));
        Ok((true, vec![event]))
    }

    /// Ends the turn as `failed` after the provider failed attempt `at`, if it still holds it.
    pub fn decide_failed(&self, agent: &AgentId, turn: &str, at: (u32, u32)) -> Decision<bool> {
        if !self.holds_attempt(agent, turn, at) {
            return Ok((false, Vec::new()));
        }
        let (_, events) = self.decide_end_turn(agent, Some(turn), reason::FAILED)?;
        Ok((true, events))
    }

    /// Gives the first open tool call of the turn its result, or asks its review question.
    /// The question id is minted here, from the log position, for this call occurrence.
    pub fn decide_tool(&self, agent: &AgentId, turn: &str, rules: TurnRules) -> Decision<bool> {
        let Next::RunTool(open) = self.next(agent, turn, rules) else {
            return Ok((false, Vec::new()));
        };
        let step = if open.call.name == EXIT_TOOL && rules.exit_tool {
            review(self, agent, turn, &open, rules.questions)
        } else {
            ReviewStep::Done {
                ok: false,
                result: ToolOutcome::failed(
                    FailureReason::UnknownTool,
                    format!("no tool named `{}` is registered", open.call.name),
                )
                .to_value(),
                then: vec![],
            }
        };
        let events = match step {
            ReviewStep::Wait => vec![],
            ReviewStep::Ask(q) => vec![NewEvent::new(agent, EventKind::QuestionAsked(q))],
            ReviewStep::Done { ok, result, then } => {
                let r = ToolResult {
                    turn: turn.to_owned(),
                    call_id: open.call.id.clone(),
                    name: open.call.name.clone(),
                    ok,
                    result,
                };
                let mut events = vec![NewEvent::new(agent, EventKind::ToolResult(r))];
                events.extend(then.into_iter().map(|k| NewEvent::new(agent, k)));
                events
            }
        };
        Ok((!events.is_empty(), events))
    }
}

/// Tool-call ids as recorded: unique within the answer and never empty (some compatible
/// servers omit them), so every result names exactly one call of the answer.
fn unique_call_ids(calls: Vec<ToolCall>, turn: &str, step: u32) -> Vec<ToolCall> {
    let given: HashSet<String> = calls.iter().map(|c| c.id.clone()).collect();
    let mut seen = HashSet::new();
    calls
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            if c.id.is_empty() || !seen.insert(c.id.clone()) {
                // A fresh id that no call of this answer has (nor was given).
                let base = format!("call-{}-{step}-{i}", turn.trim_start_matches("turn-"));
                let mut id = base.clone();
                let mut n = 0;
                while given.contains(&id) || seen.contains(&id) {
                    n += 1;
                    id = format!("{base}-{n}");
                }
                seen.insert(id.clone());
                c.id = id;
            }
            c
        })
        .collect()
}

#[cfg(test)]
#[path = "turn_tests.rs"]
pub(crate) mod tests;
