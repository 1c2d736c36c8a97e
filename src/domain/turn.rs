//! Turns: opening one (or steering it), ending one, and what a turn does next, read from the
//! log alone — so any replica that picks a turn up (after a crash, or after a question is
//! answered) continues exactly where the log says it stands.

use serde::Serialize;
use utoipa::ToSchema;

use super::event::{
    EventKind, StepStarted, ToolCall, ToolResult, TurnEnded, TurnStarted, UserMessage,
};
use super::session::{DomainError, SessionState};
use super::{AgentId, NewEvent, Recorded};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// The turn is not open (ended, cancelled, or never started).
    Closed,
    /// Run a pre-step and then step `step`.
    NewStep { step: u32 },
    /// Step `step` has no answer recorded: send its frozen request again as attempt `attempt`.
    Retry {
        step: u32,
        attempt: u32,
        header_seq: u64,
        started: Box<StepStarted>,
    },
    /// The last answer's tool calls that have no result yet.
    RunTools { calls: Vec<ToolCall> },
    /// Nothing more to do: end the turn.
    End,
}

/// The current attempt of the turn's current step: which replica owns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub step: u32,
    pub attempt: u32,
    pub replica: String,
    pub answered: bool,
}

/// Walks `agent`'s events of `turn` and says what comes next.
pub fn next_action(events: &[Recorded], agent: &AgentId, turn: &str) -> Next {
    let mut open = false;
    let mut step: Option<(u64, StepStarted)> = None;
    let mut attempts = 0;
    let mut answered = false;
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut steered_after_step = false;
    for e in events.iter().filter(|e| &e.agent == agent) {
        match &e.kind {
            EventKind::TurnStarted(t) if t.turn == turn => open = true,
            EventKind::TurnEnded(t) if t.turn == turn => open = false,
            EventKind::StepStarted(s) if s.turn == turn => {
                step = Some((e.seq(), s.clone()));
                attempts = 1;
                answered = false;
                calls.clear();
                steered_after_step = false;
            }
            EventKind::StepRetried(r) if r.turn == turn => attempts = r.attempt,
            EventKind::AssistantMessage(m) if m.turn == turn => {
                answered = true;
                calls = m.tool_calls.clone();
            }
            EventKind::ToolResult(r) if r.turn == turn => calls.retain(|c| c.id != r.call_id),
            EventKind::UserMessage(_) if open && step.is_some() => steered_after_step = true,
            _ => {}
        }
    }
    if !open {
        return Next::Closed;
    }
    let Some((header_seq, started)) = step else {
        return Next::NewStep { step: 1 };
    };
    if !answered {
        return Next::Retry {
            step: started.step,
            attempt: attempts + 1,
            header_seq,
            started: Box::new(started),
        };
    }
    if !calls.is_empty() {
        return Next::RunTools { calls };
    }
    let last_had_calls = events
        .iter()
        .rev()
        .filter(|e| &e.agent == agent)
        .find_map(|e| match &e.kind {
            EventKind::AssistantMessage(m) if m.turn == turn => Some(!m.tool_calls.is_empty()),
            _ => None,
        });
    if last_had_calls == Some(true) || steered_after_step {
        Next::NewStep {
            step: started.step + 1,
        }
    } else {
        Next::End
    }
}

/// The turn's current step attempt, for fencing: only its owner may record the answer.
pub fn current_attempt(events: &[Recorded], agent: &AgentId, turn: &str) -> Option<Attempt> {
    let mut current: Option<Attempt> = None;
    for e in events.iter().filter(|e| &e.agent == agent) {
        match &e.kind {
            EventKind::StepStarted(s) if s.turn == turn => {
                current = Some(Attempt {
                    step: s.step,
                    attempt: 1,
                    replica: s.header.replica.clone(),
                    answered: false,
                })
            }
            EventKind::StepRetried(r) if r.turn == turn => {
                if let Some(a) = current.as_mut() {
                    a.attempt = r.attempt;
                    a.replica = r.replica.clone();
                }
            }
            EventKind::AssistantMessage(m) if m.turn == turn => {
                if let Some(a) = current.as_mut() {
                    a.answered = true;
                }
            }
            _ => {}
        }
    }
    current
}

/// The answer to a prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Prompted {
    /// The turn that will read the message.
    pub turn: String,
    /// True when a turn was already running: the message is included in its next step.
    pub steered: bool,
}

impl SessionState {
    /// A prompt: opens turn `new_turn` on an idle agent, or steers the running one.
    pub fn decide_prompt(
        &self,
        agent: &AgentId,
        text: &str,
        new_turn: &str,
    ) -> Result<(Prompted, Vec<NewEvent>), DomainError> {
        let a = self.agent(agent)?;
        let steer = a.turn.is_some();
        let message = NewEvent::new(
            agent,
            EventKind::UserMessage(UserMessage {
                text: text.to_owned(),
                source: None,
                steer,
            }),
        );
        Ok(match &a.turn {
            Some(open) => (
                Prompted {
                    turn: open.clone(),
                    steered: true,
                },
                vec![message],
            ),
            None => {
                let start = NewEvent::new(
                    agent,
                    EventKind::TurnStarted(TurnStarted {
                        turn: new_turn.to_owned(),
                    }),
                );
                (
                    Prompted {
                        turn: new_turn.to_owned(),
                        steered: false,
                    },
                    vec![start, message],
                )
            }
        })
    }

    /// Ends `agent`'s open turn with `reason`, if one is open (and is `turn`, when given).
    pub fn decide_end_turn(
        &self,
        agent: &AgentId,
        turn: Option<&str>,
        reason: &str,
    ) -> Result<(Option<String>, Vec<NewEvent>), DomainError> {
        let a = self.agent(agent)?;
        match &a.turn {
            Some(open) if turn.is_none_or(|t| t == open) => {
                // Every open tool call gets its (failed) result first, so the history stays
                // well-formed for the next request; an open review fails closed.
                let mut seen = std::collections::HashSet::new();
                let mut events: Vec<NewEvent> = a
                    .open_calls
                    .iter()
                    // One result closes every call with its id (see the fold).
                    .filter(|call| seen.insert(call.id.clone()))
                    .map(|call| {
                        let (ok, result) = super::plan::review::aborted(call, reason);
                        let r = ToolResult {
                            turn: open.clone(),
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            ok,
                            result,
                        };
                        NewEvent::new(agent, EventKind::ToolResult(r))
                    })
                    .collect();
                let end = EventKind::TurnEnded(TurnEnded {
                    turn: open.clone(),
                    reason: reason.to_owned(),
                });
                events.push(NewEvent::new(agent, end));
                Ok((Some(open.clone()), events))
            }
            _ => Ok((None, Vec::new())),
        }
    }
}
