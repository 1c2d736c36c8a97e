//! The invariant checker: replays a session log and reports every violation.
//!
//! It holds the log against the rules the service promises: every entry decodes to a known
//! event with a full-value payload, seqs are dense and in order, the session fold accepts every
//! event, no `plan/mode` repeats the agent's recorded state (two identical flips in a row), and
//! the plan projection unit agrees with the live fold after every event.

use std::collections::BTreeMap;

use crate::domain::plan::PlanProjection;
use crate::domain::{EventId, EventKind, SessionId, SessionState};
use crate::store::{EventLog, StoreError};

const BATCH: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub at: Option<EventId>,
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.at {
            Some(id) => write!(f, "event {id}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub events: u64,
    pub agents: usize,
    pub violations: Vec<Violation>,
}

/// Replays `sid` from `log`. Store outages are errors; everything wrong with the log itself is
/// a violation in the report.
pub async fn verify(log: &dyn EventLog, sid: &SessionId) -> Result<Report, StoreError> {
    let mut report = Report::default();
    let mut state = SessionState::default();
    let mut projection = PlanProjection::default();
    let mut after = 0;
    loop {
        let events = match log.read(sid, after, BATCH).await {
            Ok(events) => events,
            Err(StoreError::Corrupt { id, reason }) => {
                let at = EventId::parse(&id).ok();
                report.violations.push(Violation {
                    at,
                    what: format!("malformed entry: {reason}"),
                });
                break;
            }
            Err(e) => return Err(e),
        };
        for e in &events {
            report.events += 1;
            let mut flag = |what: String| {
                report.violations.push(Violation {
                    at: Some(e.id),
                    what,
                })
            };
            let trimmed_start =
                report.events == 1 && matches!(e.kind, EventKind::SessionCompacted(_));
            if e.seq() != after + 1 && !trimmed_start {
                flag(format!(
                    "out of order: expected seq {}, found {}",
                    after + 1,
                    e.seq()
                ));
            }
            after = e.seq();
            if let EventKind::PlanMode(m) = &e.kind {
                if let Some(agent) = state.agents.get(&e.agent) {
                    if agent.plan.active == m.active {
                        flag(format!(
                            "plan/mode {{active: {}}} repeats the recorded state of `{}`",
                            m.active, e.agent
                        ));
                    }
                }
            }
            // Fold a copy so one bad event does not hide the rest of the log.
            let mut next = state.clone();
            next.seq = e.seq() - 1;
            match next.evolve(e) {
                Ok(()) => state = next,
                Err(err) => {
                    flag(format!("the session fold rejects it: {}", err.reason));
                    state.seq = e.seq();
                }
            }
            projection.apply(e.agent.as_str(), &e.kind);
            // One event changes one agent's view, or (a snapshot) every agent's: compare
            // those, so checking a long log of a many-agent session stays linear.
            let disagrees = if e.kind.snapshot().is_some() {
                let all: BTreeMap<String, _> = state
                    .agents
                    .iter()
                    .map(|(id, a)| (id.to_string(), a.plan.view()))
                    .collect();
                (all != projection.view()).then(|| format!("{all:?}"))
            } else {
                let id = e.agent.as_str();
                let mine = state.agents.get(&e.agent).map(|a| a.plan.view());
                let known = projection.agents.len() == state.agents.len();
                (mine != projection.view_of(id) || !known).then(|| format!("{id}: {mine:?}"))
            };
            if let Some(live) = disagrees {
                flag(format!(
                    "the plan projection {:?} disagrees with the live fold {live}",
                    projection.view_of(e.agent.as_str()),
                ));
            }
        }
        if events.len() < BATCH {
            break;
        }
    }
    if report.events == 0 && report.violations.is_empty() {
        report.violations.push(Violation {
            at: None,
            what: format!("session `{sid}` has no events"),
        });
    }
    report.agents = state.agents.len();
    Ok(report)
}
