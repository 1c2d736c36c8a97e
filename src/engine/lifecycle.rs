//! Forking and compacting sessions: both write a snapshot of what the fold needs, so later
//! folds (and provider histories) start there instead of at the first event.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::assembly::{history, well_formed};
use super::Engine;
use crate::domain::event::ForkOrigin;
use crate::domain::{DomainError, EventId, SessionId, SessionState};
use crate::service::{ServiceError, Sessions};

/// Attempts at a compaction whose session keeps changing underneath it.
const COMPACT_ATTEMPTS: usize = 3;

impl Engine {
    /// Forks `sid` at event `at` (default: its last event) into a new session whose agents
    /// have the parent's recorded plan state and history there — no open turn, question or
    /// pending choice. The parent is unchanged.
    pub async fn fork(
        &self,
        sessions: &Sessions,
        sid: &SessionId,
        at: Option<EventId>,
    ) -> Result<(SessionId, Arc<SessionState>), ServiceError> {
        let head = sessions.state(sid).await?;
        let at = at.map(EventId::seq).unwrap_or(head.seq);
        if at == 0 || at > head.seq {
            return Err(ServiceError::InvalidForkPoint(format!(
                "`{at}-0` is not an event of session `{sid}` (its events end at {}-0)",
                head.seq
            )));
        }
        let (state, events) = sessions.prefix(sid, Some(at)).await?;
        if state.seq != at {
            return Err(ServiceError::InvalidForkPoint(format!(
                "`{at}-0` was compacted away in session `{sid}`; fork at a later event"
            )));
        }
        let agents = state.snapshot(|id| well_formed(history(&events, id, u64::MAX)), false);
        let origin = ForkOrigin {
            session: sid.clone(),
            at: EventId(at),
        };
        sessions.create(Some(origin), Some(agents)).await
    }

    /// Compacts `sid`: the provider summarizes each agent's history, and a `session/compacted`
    /// snapshot replaces everything before it (which is trimmed when `trim`). Refused while a
    /// turn runs; plan state is unchanged.
    pub async fn compact(
        &self,
        sessions: &Sessions,
        sid: &SessionId,
        trim: bool,
    ) -> Result<Arc<SessionState>, ServiceError> {
        for _ in 0..COMPACT_ATTEMPTS {
            let (state, events) = sessions.prefix(sid, None).await?;
            if let Some((id, _)) = state.agents.iter().find(|(_, a)| a.turn.is_some()) {
                return Err(DomainError::TurnRunning(id.clone()).into());
            }
            let mut histories = BTreeMap::new();
            let mut summary = String::new();
            for id in state.agents.keys() {
                let messages = history(&events, id, u64::MAX);
                if messages.is_empty() {
                    continue;
                }
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
            let decided = sessions
                .decide(sid, |s| {
                    if s.history_seq != state.history_seq {
                        return Err(DomainError::ChangedDuringCompaction);
                    }
                    s.decide_compact(&summary, &histories)
                })
                .await;
            match decided {
                Ok(done) => {
                    if trim {
                        self.log.trim(sid, done.state.seq).await?;
                    }
                    return Ok(done.state);
                }
                Err(ServiceError::Domain(DomainError::ChangedDuringCompaction)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(DomainError::ChangedDuringCompaction.into())
    }
}
