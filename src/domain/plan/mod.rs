//! Every plan-mode rule in one place: the plan view, the `set()` outcome table, the pre-step,
//! the plan projection unit, and (in `review.rs`) the `exit_plan_mode` review table (DESIGN §2).
//!
//! Nothing here does I/O. The session fold (`session.rs`) keeps an agent's [`PlanRecord`]; this
//! module decides what a choice appends and how the view is derived from the record.

pub mod review;
pub mod revisions;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::event::{EventKind, PlanMode, PlanSelect};

/// An agent's plan state as the API shows it.
///
/// `pending` is present only when the user's choice differs from the recorded state: its
/// presence matters, not its truthiness (`pending: false` means "Default, pending").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanView {
    /// The recorded state: the value of the agent's last `plan/mode` event, or `false`.
    pub active: bool,
    /// The not-yet-committed choice; absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<bool>,
}

/// What the log says of one agent's plan: the recorded value and the desired target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanRecord {
    pub active: bool,
    /// The last selected target since the last `plan/mode`; it may equal `active`, in which
    /// case nothing is pending.
    pub target: Option<bool>,
}

impl PlanRecord {
    pub fn view(self) -> PlanView {
        PlanView {
            active: self.active,
            pending: self.target.filter(|t| *t != self.active),
        }
    }

    /// Folds the plan events of one agent; other events leave it unchanged.
    pub fn evolve(&mut self, kind: &EventKind) {
        match kind {
            EventKind::PlanMode(PlanMode { active }) => {
                self.active = *active;
                self.target = None;
            }
            EventKind::PlanSelect(PlanSelect { active }) => self.target = Some(*active),
            _ => {}
        }
    }
}

/// The result of `set(agent, active)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// `plan/mode` was appended now (the agent was idle).
    Committed,
    /// The choice is pending until the next pre-step (the agent is running).
    Queued,
    /// A pending choice was withdrawn because the target equals the recorded state.
    Cancelled,
    /// Nothing changed.
    Noop,
}

/// The `set()` outcome table, row by row as DESIGN §2 states it. Returns the outcome and the
/// one event to append, if any.
pub fn decide_set(view: PlanView, running: bool, target: bool) -> (Outcome, Option<EventKind>) {
    let select = || Some(EventKind::PlanSelect(PlanSelect { active: target }));
    match (running, view) {
        (false, PlanView { active, .. }) if target != active => (
            Outcome::Committed,
            Some(EventKind::PlanMode(PlanMode { active: target })),
        ),
        (
            false,
            PlanView {
                pending: Some(_), ..
            },
        ) => (Outcome::Cancelled, select()),
        (false, PlanView { pending: None, .. }) => (Outcome::Noop, None),
        (true, PlanView { active, pending }) if target == pending.unwrap_or(active) => {
            (Outcome::Noop, None)
        }
        (
            true,
            PlanView {
                active,
                pending: Some(_),
            },
        ) if target == active => (Outcome::Cancelled, select()),
        (true, _) => (Outcome::Queued, select()),
    }
}

/// The review-gated exit tool, registered in both plan states.
pub const EXIT_TOOL: &str = "exit_plan_mode";

/// Who writes the mode-change notification the model reads.
pub const NOTIFICATION_SOURCE: &str = "plugin:plan-mode";

/// The model-facing notification that the plan state changed since its last request.
pub fn notification(active: bool) -> String {
    if active {
        "Plan mode is now active. Explore and design before changing anything, then submit the \
         complete plan with `exit_plan_mode` for the user's review."
            .into()
    } else {
        "Plan mode has ended. You may now carry out the work.".into()
    }
}

/// The plan part of a pre-step (DESIGN §2 "Turn / step", "Notification"): the pending choice
/// is committed, and a notification is added when this step's state differs from the state
/// the agent's last recorded step header described (no header yet: no notification).
/// Returns the plan state the step describes and the events to append before its header.
pub fn decide_prestep(record: PlanRecord, last_header: Option<bool>) -> (bool, Vec<EventKind>) {
    let view = record.view();
    let mut events = Vec::new();
    let active = match view.pending {
        Some(target) => {
            events.push(EventKind::PlanMode(PlanMode { active: target }));
            target
        }
        None => view.active,
    };
    if last_header.is_some_and(|described| described != active) {
        events.push(EventKind::UserMessage(super::event::UserMessage {
            text: notification(active),
            source: Some(NOTIFICATION_SOURCE.into()),
            steer: false,
        }));
    }
    (active, events)
}

/// The plan projection unit: recomputes `{active, pending}` per agent from `command/run`
/// (name `plan`: args `off` → inactive, anything else → active), `plan/select` and `plan/mode`
/// alone, independently of the session fold, so the two can be held against each other.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanProjection {
    /// A persistent map: folding one event copies O(log n), however many agents there are.
    pub agents: imbl::OrdMap<String, PlanRecord>,
}

impl PlanProjection {
    pub fn apply(&mut self, agent: &str, kind: &EventKind) {
        if let Some(agents) = kind.snapshot() {
            self.agents = agents
                .iter()
                .map(|a| {
                    (
                        a.id.to_string(),
                        PlanRecord {
                            active: a.active,
                            target: a.pending,
                        },
                    )
                })
                .collect();
            return;
        }
        let mut rec = self.agents.get(agent).copied().unwrap_or_default();
        match kind {
            EventKind::CommandRun(c) if c.name == "plan" => {
                rec.target = Some(c.args.trim() != "off")
            }
            EventKind::PlanSelect(PlanSelect { active }) => rec.target = Some(*active),
            EventKind::PlanMode(PlanMode { active }) => {
                rec.active = *active;
                rec.target = None;
            }
            EventKind::SessionCreated(_) | EventKind::AgentSpawned(_) => {}
            _ => return,
        }
        self.agents.insert(agent.to_owned(), rec);
    }

    /// One agent's view, if the projection knows the agent.
    pub fn view_of(&self, agent: &str) -> Option<PlanView> {
        self.agents.get(agent).map(|r| r.view())
    }

    pub fn view(&self) -> std::collections::BTreeMap<String, PlanView> {
        self.agents
            .iter()
            .map(|(a, r)| (a.clone(), r.view()))
            .collect()
    }
}

#[cfg(test)]
mod tests;

/// What `/plan` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct PlanCommandResult {
    pub outcome: Outcome,
    /// For `/plan <message>`: the turn the message went to, and whether it steered a running one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<crate::domain::turn::Prompted>,
}

impl crate::domain::SessionState {
    /// The `/plan` command table: `/plan` selects plan mode; `/plan <message>` selects it and
    /// then sends the message as an ordinary user message of the next step (opening turn
    /// `new_turn` when idle); `/plan off` selects inactive with no model input. The command's
    /// effects come first and its `command/run` record after them, so the projection unit
    /// agrees with the live fold after every single event.
    pub fn decide_plan_command(
        &self,
        agent: &crate::domain::AgentId,
        args: &str,
        new_turn: &str,
    ) -> Result<(PlanCommandResult, Vec<crate::domain::NewEvent>), crate::domain::DomainError> {
        use crate::domain::event::CommandRun;
        let target = args != "off";
        let (outcome, mut events) = self.decide_set_plan(agent, target)?;
        let run = CommandRun {
            name: "plan".into(),
            args: args.to_owned(),
        };
        events.push(crate::domain::NewEvent::new(
            agent,
            EventKind::CommandRun(run),
        ));
        let mut message = None;
        if target && !args.is_empty() {
            let (prompted, prompt_events) = self.decide_prompt(agent, args, new_turn)?;
            events.extend(prompt_events);
            message = Some(prompted);
        }
        Ok((PlanCommandResult { outcome, message }, events))
    }
}
