//! Forking and compacting sessions: both write a snapshot of what the fold needs (plan state
//! and provider history per agent), so later folds and requests start there instead of at the
//! first event. Both read the folded session through [`Sessions`], never the log.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::Engine;
use crate::domain::event::ForkOrigin;
use crate::domain::history::well_formed;
use crate::domain::{DomainError, EventId, SessionId, SessionState};
use crate::service::ServiceError;

/// Attempts at a compaction whose session keeps changing underneath it.
const COMPACT_ATTEMPTS: usize = 3;

impl Engine {
    /// Forks `sid` at event `at` (default: its last event) into a new session whose agents
    /// have the parent's recorded plan state and history there — no open turn, question or
    /// pending choice. The parent is unchanged.
    pub async fn fork(
        &self,
        sid: &SessionId,
        at: Option<EventId>,
    ) -> Result<(SessionId, Arc<SessionState>), ServiceError> {
        let head = self.sessions.state(sid).await?;
        let at = at.map(EventId::seq).unwrap_or(head.seq);
        if at == 0 || at > head.seq {
            return Err(ServiceError::InvalidForkPoint(format!(
                "`{at}-0` is not an event of session `{sid}` (its events end at {}-0)",
                head.seq
            )));
        }
        let Some(state) = self.sessions.state_at(sid, at).await? else {
            return Err(ServiceError::InvalidForkPoint(format!(
                "`{at}-0` was compacted away in session `{sid}`; fork at a later event"
            )));
        };
        let agents = state.snapshot(
            |id| {
                let history = state.agents.get(id).map(|a| a.history.all());
                well_formed(history.unwrap_or_default())
            },
            false,
        );
        let origin = ForkOrigin {
            session: sid.clone(),
            at: EventId(at),
        };
        // A fork stays in its parent's tenant, under the same retention.
        self.sessions
            .create(Some(origin), Some(agents), state.terms.clone())
            .await
    }

    /// Compacts `sid`: the provider summarizes each agent's history, and a `session/compacted`
    /// snapshot replaces everything before it (which is trimmed when `trim`). Refused while a
    /// turn runs; plan state is unchanged.
    pub async fn compact(
        &self,
        sid: &SessionId,
        trim: bool,
    ) -> Result<Arc<SessionState>, ServiceError> {
        for _ in 0..COMPACT_ATTEMPTS {
            let state = self.sessions.state(sid).await?;
            if let Some((id, _)) = state.agents.iter().find(|(_, a)| a.turn.is_some()) {
                return Err(DomainError::TurnRunning(id.clone()).into());
            }
            let mut histories = BTreeMap::new();
            let mut summary = String::new();
            for (id, agent) in state.agents.iter() {
                let messages = agent.history.all();
                if messages.is_empty() {
                    continue;
                }
                // Each summary is a paid provider call: it counts against the tenant's quota,
                // and a compaction over it is refused rather than kept waiting.
                self.limits
                    .admit_provider_call(state.terms.tenant.as_ref())
                    .await?;
                let text = self
                    .provider
                    .summarize(&messages)
                    .await
                    .map_err(|e| ServiceError::Provider(e.to_string()))?;
                let note = json!({"role": "user", "content": format!("[summary of the earlier conversation] {text}")});
                if id.is_root() {
                    summary = text;
                }
                histories.insert(id.clone(), vec![note]);
            }
            let seen = state.history_seq;
            let decided = self
                .sessions
                .decide(sid, move |s| {
                    if s.history_seq != seen {
                        return Err(DomainError::ChangedDuringCompaction);
                    }
                    s.decide_compact(&summary, &histories)
                })
                .await;
            match decided {
                Ok(done) => {
                    if trim {
                        self.sessions.trim(sid, done.state.seq).await?;
                    }
                    return Ok(done.state);
                }
                Err(ServiceError::Domain(DomainError::ChangedDuringCompaction)) => continue,
                // A keyed retry whose first attempt compacted (its snapshot is at `seq`, and
                // what came before may be trimmed): finish what it may not have, and answer
                // the session as it is now, that compaction's outcome.
                Err(ServiceError::AlreadyApplied { seq }) => {
                    if trim {
                        self.sessions.trim(sid, seq).await?;
                    }
                    return self.sessions.state(sid).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(DomainError::ChangedDuringCompaction.into())
    }
}
