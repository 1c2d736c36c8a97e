//! Which assistant deltas a stream may still send, judged from the events it has sent.
//!
//! Deltas travel apart from the log (published by the running replica, buffered in the feed
//! while a stream catches up), so one can reach a stream after its step's recorded message or
//! after the step was retried. Per agent the stream remembers the step it last saw start,
//! its attempt, and whether it was answered; a delta of an answered step, of an earlier step
//! or attempt, or of an ended turn is stale and dropped. What the stream has not seen (another
//! turn, a later step) passes: the event that would judge it has not arrived yet.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::domain::event::{AssistantMessage, StepRetried, StepStarted, TurnEnded};
use crate::domain::{AgentId, EventKind, Recorded};
use crate::store::{Ephemeral, StepRef};

/// The latest step of an agent's turn that a stream has sent.
#[derive(Debug)]
struct Progress {
    turn: String,
    step: u32,
    attempt: u32,
    /// Its `assistant/message` was sent.
    answered: bool,
    /// Its `turn/ended` was sent.
    ended: bool,
}

#[derive(Default)]
pub(super) struct Steps {
    agents: HashMap<AgentId, Progress>,
}

impl Steps {
    /// Learns from an event the stream sends (or the client already has).
    pub(super) fn observe(&mut self, e: &Recorded) {
        let at = |turn: &str, step, attempt, answered| Progress {
            turn: turn.to_owned(),
            step,
            attempt,
            answered,
            ended: false,
        };
        match &e.kind {
            EventKind::StepStarted(StepStarted { turn, step, .. }) => {
                self.agents
                    .insert(e.agent.clone(), at(turn, *step, 1, false));
            }
            EventKind::StepRetried(StepRetried {
                turn,
                step,
                attempt,
                ..
            }) => {
                self.agents
                    .insert(e.agent.clone(), at(turn, *step, *attempt, false));
            }
            EventKind::AssistantMessage(AssistantMessage { turn, step, .. }) => {
                match self.agents.get_mut(&e.agent) {
                    Some(p) if p.turn == *turn && p.step == *step => p.answered = true,
                    _ => {
                        self.agents
                            .insert(e.agent.clone(), at(turn, *step, 1, true));
                    }
                }
            }
            EventKind::TurnEnded(TurnEnded { turn, .. }) => {
                if let Some(p) = self.agents.get_mut(&e.agent).filter(|p| p.turn == *turn) {
                    p.ended = true;
                }
            }
            _ => {}
        }
    }

    /// Whether `msg` may still be sent.
    pub(super) fn admits(&self, msg: &Ephemeral) -> bool {
        let Some(StepRef {
            turn,
            step,
            attempt,
        }) = &msg.step
        else {
            return true;
        };
        let Some(p) = self.agents.get(&msg.agent).filter(|p| p.turn == *turn) else {
            return true;
        };
        if p.ended {
            return false;
        }
        match step.cmp(&p.step) {
            Ordering::Less => false,
            Ordering::Greater => true,
            Ordering::Equal => !p.answered && *attempt >= p.attempt,
        }
    }
}
