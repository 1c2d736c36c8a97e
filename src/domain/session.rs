//! The session aggregate: `evolve` folds recorded events into [`SessionState`]; the `decide_*`
//! functions turn a request into the events to append. Pure: no async, no I/O.
//!
//! An impossible transition during a fold (an event for an agent that does not exist, a gap in
//! the sequence, a second `session/created`) is corruption, reported as [`FoldError`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use super::agent::{AgentState, AgentStatus};
use super::event::{AgentSnapshot, AgentSpawned, EventKind, ForkOrigin, NewEvent, Recorded};
use super::event::{SessionCompacted, SessionCreated};
use super::history::History;
use super::ids::{AgentId, EventId, SessionId};
use super::plan::revisions::{is_review, Revisions};
use super::plan::{decide_set, Outcome, PlanProjection, PlanRecord, PlanView};
use super::questions::QuestionState;

/// A session folded up to `seq`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionState {
    /// The last folded event's seq; 0 means the session does not exist (yet).
    pub seq: u64,
    pub created_at: u64,
    pub parent: Option<ForkOrigin>,
    /// Who owns the session and how long it is kept (fixed at creation).
    pub terms: SessionTerms,
    /// The commit time of the event at `seq`: with `seq` it anchors a catch-up, so a cache
    /// notices a log that no longer holds what it folded (Redis lost its data).
    pub tail_ts: u64,
    /// Persistent maps: a fold that changes one agent copies O(log n), never every agent.
    /// Values behind an `Arc`: a map leaf holds room for 16 entries inline, so inline
    /// `AgentState`s (328 bytes) cost a one-agent session 5.6 KB in every fold it keeps.
    pub agents: imbl::OrdMap<AgentId, Arc<AgentState>>,
    /// Every question asked in this session, by id.
    pub questions: imbl::OrdMap<String, Arc<QuestionState>>,
    /// The seq of the last history-bearing event (user, assistant, tool) or snapshot: what a
    /// compaction summarized must still be the latest history when it commits.
    pub history_seq: u64,
    /// The plan projection unit, folded alongside (independently of the agents' records).
    pub plans: PlanProjection,
    /// Approximate bytes held (histories, questions), for the per-replica cache's weight.
    pub bytes: usize,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("event {at}: {reason}")]
pub struct FoldError {
    pub at: EventId,
    pub reason: String,
}

/// A request the domain refuses; the HTTP layer maps each to a 4xx.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum DomainError {
    #[error("agent `{0}` does not exist in this session")]
    AgentNotFound(AgentId),
    #[error("owner `{0}` does not exist in this session")]
    OwnerNotFound(AgentId),
    #[error("question `{0}` does not exist in this session")]
    QuestionNotFound(String),
    #[error("question `{id}` is already {}; the first answer wins", format!("{state:?}").to_lowercase())]
    QuestionClosed {
        id: String,
        state: super::questions::QuestionStatus,
    },
    #[error("`{label}` is not an option label of this question; answer with an `option` id, or one of the labels {options:?}")]
    UnknownLabel { label: String, options: Vec<String> },
    #[error("`{option}` is not an option of this question; choose one of {options:?}")]
    UnknownOption {
        option: String,
        options: Vec<String>,
    },
    #[error("`label` `{label}` is not the label of option `{option}`; send the option id alone")]
    LabelMismatch { label: String, option: String },
    #[error("question `{0}` does not accept free text")]
    TextNotAllowed(String),
    #[error("an answer needs an `option` or a non-empty `text`")]
    EmptyAnswer,
    #[error("agent `{0}` is running a turn; try again when it is idle")]
    TurnRunning(AgentId),
    #[error("the session changed while it was being compacted; try again")]
    ChangedDuringCompaction,
    #[error("this session already has {max} agents, the most a session may have")]
    AgentLimit { max: usize },
    #[error("{}", match (decides, latest) {
        (Some((n, digest)), Some(latest)) => format!("question `{question}` decides plan revision {n} ({digest}), which revision {latest} superseded: the plan changed since you read it"),
        (Some((n, digest)), None) => format!("question `{question}` decides plan revision {n} ({digest}), not {named}: the plan changed since you read it"),
        (None, _) => format!("question `{question}` decides no plan revision, so it cannot be answered naming {named}"),
    })]
    RevisionSuperseded {
        question: String,
        /// The number and digest of the revision the question decides, if it decides one.
        decides: Option<(u32, String)>,
        /// The agent's latest revision, when a newer one superseded the question's.
        latest: Option<u32>,
        named: String,
    },
}

impl SessionState {
    pub fn exists(&self) -> bool {
        self.seq > 0
    }

    pub fn agent(&self, id: &AgentId) -> Result<&AgentState, DomainError> {
        self.agents
            .get(id)
            .map(|a| &**a)
            .ok_or_else(|| DomainError::AgentNotFound(id.clone()))
    }

    pub fn evolve(&mut self, e: &Recorded) -> Result<(), FoldError> {
        let fail = |reason: String| FoldError { at: e.id, reason };
        // A compaction snapshot restores the whole state, so entries before it may be gone.
        let restores = matches!(e.kind, EventKind::SessionCompacted(_));
        if e.seq() != self.seq + 1 && !(restores && e.seq() > self.seq) {
            return Err(fail(format!(
                "expected seq {}, found {}",
                self.seq + 1,
                e.seq()
            )));
        }
        match (&e.kind, self.exists()) {
            (EventKind::SessionCompacted(c), _) => {
                // Only checkable when nothing was skipped: a fold resuming from an older cache
                // across trimmed entries does not know how that turn ended.
                if e.seq() == self.seq + 1 && self.agents.values().any(|a| a.turn.is_some()) {
                    return Err(fail("compacted while a turn is open".into()));
                }
                *self = SessionState {
                    seq: self.seq,
                    created_at: c.created_at,
                    parent: c.parent.clone(),
                    terms: SessionTerms {
                        tenant: c.tenant.clone(),
                        retention_ms: c.retention_ms,
                    },
                    history_seq: e.seq(),
                    ..Default::default()
                };
                self.restore(&c.agents);
            }
            (EventKind::SessionCreated(c), false) => {
                let SessionCreated { parent, agents, .. } = c;
                self.created_at = e.committed_at;
                self.parent = parent.clone();
                self.terms = SessionTerms {
                    tenant: c.tenant.clone(),
                    retention_ms: c.retention_ms,
                };
                match agents {
                    Some(agents) => self.restore(agents),
                    None => {
                        self.agents
                            .insert(e.agent.clone(), Arc::new(AgentState::new(None)));
                    }
                }
            }
            (EventKind::SessionCreated(_), true) => {
                return Err(fail("second session/created".into()))
            }
            (_, false) => {
                return Err(fail(format!(
                    "{} before session/created",
                    e.kind.type_name()
                )))
            }
            (EventKind::AgentSpawned(AgentSpawned { owner }), true) => {
                if self.agents.contains_key(&e.agent) {
                    return Err(fail(format!("agent `{}` spawned twice", e.agent)));
                }
                if let Some(o) = owner.as_ref().filter(|o| !self.agents.contains_key(*o)) {
                    return Err(fail(format!("owner `{o}` does not exist")));
                }
                self.agents
                    .insert(e.agent.clone(), Arc::new(AgentState::new(owner.clone())));
            }
            (kind, true) => {
                if matches!(
                    kind,
                    EventKind::UserMessage(_)
                        | EventKind::AssistantMessage(_)
                        | EventKind::ToolResult(_)
                ) {
                    self.history_seq = e.seq();
                }
                let questions = &mut self.questions;
                let agent = Arc::make_mut(
                    self.agents
                        .get_mut(&e.agent)
                        .ok_or_else(|| fail(format!("agent `{}` does not exist", e.agent)))?,
                );
                let before = agent.history.bytes();
                agent.evolve(e, questions).map_err(fail)?;
                self.bytes += agent.history.bytes().saturating_sub(before);
                if let EventKind::QuestionAsked(q) = kind {
                    // A review's revision keeps its own copy of the plan.
                    let copies = if is_review(q) { 2 } else { 1 };
                    self.bytes += q.detail.len() * copies;
                }
            }
        }
        self.plans.apply(e.agent.as_str(), &e.kind);
        self.seq = e.seq();
        self.tail_ts = e.committed_at;
        Ok(())
    }

    /// Restores agents from a snapshot: recorded plan state, pending choice, last header; no
    /// turns, no open questions.
    fn restore(&mut self, agents: &[AgentSnapshot]) {
        for a in agents {
            let mut state = AgentState::new(a.owner.clone());
            state.plan = PlanRecord {
                active: a.active,
                target: a.pending,
            };
            state.last_header_plan = a.last_header_plan;
            state.history = History::restore(&a.history);
            state.revisions = Revisions::restore(&a.revisions);
            self.bytes += state.history.bytes();
            self.bytes += a.revisions.iter().map(|r| r.text.len()).sum::<usize>();
            self.agents.insert(a.id.clone(), Arc::new(state));
        }
    }

    /// The snapshot of every agent, with the given provider history per agent. `keep_pending`
    /// (compaction) keeps pending choices and open reviews; a fork carries neither.
    pub fn snapshot(
        &self,
        mut history: impl FnMut(&AgentId) -> Vec<serde_json::Value>,
        keep_pending: bool,
    ) -> Vec<AgentSnapshot> {
        self.agents
            .iter()
            .map(|(id, a)| AgentSnapshot {
                id: id.clone(),
                owner: a.owner.clone(),
                active: a.plan.active,
                pending: if keep_pending {
                    a.plan.view().pending
                } else {
                    None
                },
                last_header_plan: a.last_header_plan,
                history: history(id),
                revisions: a.revisions.snapshot(keep_pending),
            })
            .collect()
    }

    /// `set(agent, active)`: the outcome and the events that carry it out.
    pub fn decide_set_plan(
        &self,
        agent: &AgentId,
        target: bool,
    ) -> Result<(Outcome, Vec<NewEvent>), DomainError> {
        let a = self.agent(agent)?;
        let running = a.status() != AgentStatus::Idle;
        let (outcome, event) = decide_set(a.plan.view(), running, target);
        Ok((
            outcome,
            event.into_iter().map(|k| NewEvent::new(agent, k)).collect(),
        ))
    }

    /// Spawns a child agent, inactive, owned by `owner` if given. Ids are `agent-<n>`, numbered
    /// by the session's agent count, so every replica derives the same id for the same position.
    pub fn decide_spawn(
        &self,
        owner: Option<AgentId>,
        max_agents: usize,
    ) -> Result<(AgentId, Vec<NewEvent>), DomainError> {
        if self.agents.len() >= max_agents {
            return Err(DomainError::AgentLimit { max: max_agents });
        }
        if let Some(o) = &owner {
            if !self.agents.contains_key(o) {
                return Err(DomainError::OwnerNotFound(o.clone()));
            }
        }
        let mut n = self.agents.len();
        let id = loop {
            let id = AgentId::parse(&format!("agent-{n}")).expect("generated ids are valid");
            if !self.agents.contains_key(&id) {
                break id;
            }
            n += 1;
        };
        let event = NewEvent::new(&id, EventKind::AgentSpawned(AgentSpawned { owner }));
        Ok((id, vec![event]))
    }

    pub fn agent_view(&self, id: &AgentId) -> Result<AgentView, DomainError> {
        let a = self.agent(id)?;
        Ok(AgentView {
            id: id.clone(),
            owner: a.owner.clone(),
            status: a.status(),
            plan: a.plan.view(),
            turn: a.turn_id().map(str::to_owned),
        })
    }

    pub fn view(&self, id: &SessionId) -> SessionView {
        SessionView {
            id: id.clone(),
            parent: self.parent.clone(),
            created_at: self.created_at,
            last_event_id: EventId(self.seq),
            agents: self
                .agents
                .keys()
                .filter_map(|a| self.agent_view(a).ok())
                .collect(),
        }
    }
}

impl SessionState {
    /// Compaction: refused while any turn runs; otherwise a snapshot of every agent (recorded
    /// plan state, pending choice, last header) with `histories` in place of the events so far.
    pub fn decide_compact(
        &self,
        summary: &str,
        histories: &BTreeMap<AgentId, Vec<serde_json::Value>>,
    ) -> Result<((), Vec<NewEvent>), DomainError> {
        if let Some((id, _)) = self.agents.iter().find(|(_, a)| a.turn.is_some()) {
            return Err(DomainError::TurnRunning(id.clone()));
        }
        let agents = self.snapshot(|id| histories.get(id).cloned().unwrap_or_default(), true);
        let event = EventKind::SessionCompacted(SessionCompacted {
            summary: summary.to_owned(),
            created_at: self.created_at,
            parent: self.parent.clone(),
            agents,
            tenant: self.terms.tenant.clone(),
            retention_ms: self.terms.retention_ms,
        });
        Ok(((), vec![NewEvent::new(&AgentId::root(), event)]))
    }
}

/// The events that create a session: its root agent `main` comes with `session/created`.
pub fn decide_create(
    parent: Option<ForkOrigin>,
    agents: Option<Vec<AgentSnapshot>>,
    terms: SessionTerms,
) -> Vec<NewEvent> {
    vec![NewEvent::new(
        &AgentId::root(),
        EventKind::SessionCreated(SessionCreated {
            parent,
            agents,
            tenant: terms.tenant,
            retention_ms: terms.retention_ms,
        }),
    )]
}

/// Who owns a session and how long it is kept after its last write (0 ms: until deleted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionTerms {
    pub tenant: Option<super::ids::TenantId>,
    pub retention_ms: u64,
}

/// An agent as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct AgentView {
    #[schema(value_type = String, example = "main")]
    pub id: AgentId,
    /// The owning agent; `null` for the root agent and unowned agents.
    #[schema(value_type = Option<String>)]
    pub owner: Option<AgentId>,
    pub status: AgentStatus,
    pub plan: PlanView,
    /// The open turn's id, while one is open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
}

/// A session folded from its log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct SessionView {
    #[schema(value_type = String)]
    pub id: SessionId,
    /// Set when this session was forked from another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<ForkOrigin>,
    #[serde(with = "super::event::rfc3339_ms")]
    #[schema(value_type = String, example = "2026-12-02T10:23:53.123Z")]
    pub created_at: u64,
    /// The id of the last event folded into this view; pass it as `after` to read what follows.
    #[schema(value_type = String, example = "7-0")]
    pub last_event_id: EventId,
    pub agents: Vec<AgentView>,
}
