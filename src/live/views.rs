//! Plan views for one live stream: the view of every agent as of the session's head when the
//! stream opened, then only the views that later events change.
//!
//! The start comes from the folded session the handler already read, so a resume never reads
//! the log from its beginning. Events up to that head are already in it (a catch-up replays
//! them without views); each later event moves the plan projection unit and is compared for
//! its own agent alone, so an event costs the same with one agent or thousands. Only a
//! snapshot (fork creation, compaction) can change every agent, and only it compares them all.

use crate::domain::plan::{PlanProjection, PlanView};
use crate::domain::{AgentId, Recorded, SessionState};

pub(super) struct PlanViews {
    projection: PlanProjection,
    /// The seq the projection starts from: events up to it are already folded in.
    head: u64,
}

impl PlanViews {
    /// The projection as of `state`, and every agent's view there.
    pub(super) fn at_head(state: &SessionState) -> (Self, Vec<(AgentId, PlanView)>) {
        let initial = state
            .agents
            .iter()
            .map(|(id, a)| (id.clone(), a.plan.view()))
            .collect();
        // The session's own projection unit (its views always equal its agents' plan views):
        // a shared persistent map, so an idle stream holds no copy of it until an event moves
        // it.
        let views = Self {
            projection: state.plans.clone(),
            head: state.seq,
        };
        (views, initial)
    }

    fn view(&self, agent: &str) -> Option<PlanView> {
        self.projection.agents.get(agent).map(|r| r.view())
    }

    /// Folds `e` (if it follows the head) and returns the views it changed.
    pub(super) fn apply(&mut self, e: &Recorded) -> Vec<(AgentId, PlanView)> {
        if e.seq() <= self.head {
            return Vec::new();
        }
        let agent = e.agent.as_str();
        match e.kind.snapshot() {
            None => {
                let before = self.view(agent);
                self.projection.apply(agent, &e.kind);
                match self.view(agent) {
                    Some(now) if before != Some(now) => vec![(e.agent.clone(), now)],
                    _ => Vec::new(),
                }
            }
            Some(restored) => {
                let before = std::mem::take(&mut self.projection.agents);
                self.projection.apply(agent, &e.kind);
                restored
                    .iter()
                    .filter_map(|a| {
                        let now = self.view(a.id.as_str())?;
                        let was = before.get(a.id.as_str()).map(|r| r.view());
                        (was != Some(now)).then(|| (a.id.clone(), now))
                    })
                    .collect()
            }
        }
    }
}
