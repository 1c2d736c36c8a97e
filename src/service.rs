//! The application layer between HTTP and the store: folds sessions on read and turns domain
//! decisions into compare-and-append commits.
//!
//! A replica keeps a cache of folded sessions with the seq each was folded to. It is a cache,
//! never truth: a read catches up with one range read past that seq, and a decision is
//! committed only if the log still ends at the seq the decision saw. On a conflict the store
//! hands back the missed events, the decision is made again on the newer state, and the cache
//! learns them. Decisions on one session are also serialized within a replica, so contention
//! costs retries only across replicas.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use quick_cache::sync::Cache;

use crate::domain::event::{AgentSnapshot, ForkOrigin};
use crate::domain::plan::PlanProjection;
use crate::domain::session::decide_create;
use crate::domain::{DomainError, FoldError, NewEvent, Recorded, SessionId, SessionState};
use crate::store::{Append, EventLog, StoreError};

/// Events read per round trip while catching a cold session up.
const FOLD_BATCH: usize = 10_000;
/// Attempts of one decision before giving up with [`ServiceError::Contention`].
const MAX_ATTEMPTS: usize = 32;
/// Folded sessions a replica keeps.
const CACHE_SESSIONS: usize = 100_000;
const LOCK_SHARDS: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("session `{0}` does not exist")]
    SessionNotFound(SessionId),
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("session log is corrupt: {0}")]
    Corrupt(#[from] FoldError),
    #[error("too many concurrent writers on this session; retry")]
    Contention,
    #[error("{0}")]
    InvalidForkPoint(String),
    #[error("the model provider failed: {0}")]
    Provider(String),
}

/// A committed decision: its value, the state after it, and the events it appended.
pub struct Decided<T> {
    pub value: T,
    pub state: Arc<SessionState>,
    pub events: Vec<Recorded>,
}

pub struct Sessions {
    log: Arc<dyn EventLog>,
    cache: Cache<SessionId, Arc<SessionState>>,
    locks: Box<[tokio::sync::Mutex<()>]>,
}

impl Sessions {
    pub fn new(log: Arc<dyn EventLog>) -> Self {
        Self {
            log,
            cache: Cache::new(CACHE_SESSIONS),
            locks: (0..LOCK_SHARDS)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        }
    }

    pub fn log(&self) -> &Arc<dyn EventLog> {
        &self.log
    }

    /// The session folded up to the log's current end.
    pub async fn state(&self, sid: &SessionId) -> Result<Arc<SessionState>, ServiceError> {
        let base = self.cache.get(sid).unwrap_or_default();
        let state = self.catch_up(sid, base).await?;
        if !state.exists() {
            return Err(ServiceError::SessionNotFound(sid.clone()));
        }
        Ok(state)
    }

    /// Folds every event after `state.seq`, reading until the log's end.
    async fn catch_up(
        &self,
        sid: &SessionId,
        state: Arc<SessionState>,
    ) -> Result<Arc<SessionState>, ServiceError> {
        let mut state = state;
        loop {
            let events = self.log.read(sid, state.seq, FOLD_BATCH).await?;
            let done = events.len() < FOLD_BATCH;
            state = self.advance(sid, state, &events)?;
            if done {
                return Ok(state);
            }
        }
    }

    /// Applies `events` (which must follow `state`) and remembers the result.
    fn advance(
        &self,
        sid: &SessionId,
        state: Arc<SessionState>,
        events: &[Recorded],
    ) -> Result<Arc<SessionState>, ServiceError> {
        if events.is_empty() {
            return Ok(state);
        }
        let mut next = (*state).clone();
        for e in events {
            next.evolve(e)?;
        }
        let next = Arc::new(next);
        if next.exists() && self.cache.get(sid).is_none_or(|c| c.seq < next.seq) {
            self.cache.insert(sid.clone(), next.clone());
        }
        Ok(next)
    }

    fn lock(&self, sid: &SessionId) -> &tokio::sync::Mutex<()> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        sid.hash(&mut h);
        &self.locks[(h.finish() as usize) % self.locks.len()]
    }

    /// Runs `decide` on the current state and commits its events atomically: if another writer
    /// got there first, `decide` runs again on the newer state. A decision that appends nothing
    /// is still checked against the log's end, so its answer is never based on a stale view.
    pub async fn decide<T>(
        &self,
        sid: &SessionId,
        decide: impl Fn(&SessionState) -> Result<(T, Vec<NewEvent>), DomainError>,
    ) -> Result<Decided<T>, ServiceError> {
        let _serial = self.lock(sid).lock().await;
        let mut state = match self.cache.get(sid) {
            Some(s) => s,
            None => self.catch_up(sid, Arc::default()).await?,
        };
        for _ in 0..MAX_ATTEMPTS {
            if !state.exists() {
                return Err(ServiceError::SessionNotFound(sid.clone()));
            }
            let (value, events) = match decide(&state) {
                Ok(decided) => decided,
                Err(refusal) => {
                    // A refusal is only an answer if it was made on the log's current end;
                    // a cached view may be behind (e.g. a question asked on another replica).
                    let current = self.catch_up(sid, state.clone()).await?;
                    if current.seq == state.seq {
                        return Err(refusal.into());
                    }
                    state = current;
                    continue;
                }
            };
            match self.log.append(sid, state.seq, &events).await? {
                Append::Committed(recorded) => {
                    let state = self.advance(sid, state, &recorded)?;
                    return Ok(Decided {
                        value,
                        state,
                        events: recorded,
                    });
                }
                Append::Conflict { head, missing } => {
                    state = if head < state.seq {
                        // The log is shorter than what we folded: it was replaced. Start over.
                        self.cache.remove(sid);
                        self.catch_up(sid, Arc::default()).await?
                    } else {
                        let s = self.advance(sid, state, &missing)?;
                        if s.seq < head {
                            self.catch_up(sid, s).await?
                        } else {
                            s
                        }
                    };
                }
            }
        }
        Err(ServiceError::Contention)
    }

    /// Creates a session (with its root agent, or a fork's agents) and returns its id and state.
    pub async fn create(
        &self,
        parent: Option<ForkOrigin>,
        agents: Option<Vec<AgentSnapshot>>,
    ) -> Result<(SessionId, Arc<SessionState>), ServiceError> {
        let events = decide_create(parent, agents);
        loop {
            let sid = SessionId::generate();
            if let Append::Committed(recorded) = self.log.append(&sid, 0, &events).await? {
                let state = self.advance(&sid, Arc::default(), &recorded)?;
                return Ok((sid, state));
            }
            // An id collision: draw another.
        }
    }

    /// The session folded up to and including `at` (its head when `None`), and the events
    /// from its latest snapshot to there.
    pub async fn prefix(
        &self,
        sid: &SessionId,
        at: Option<u64>,
    ) -> Result<(SessionState, Vec<Recorded>), ServiceError> {
        let mut state = SessionState::default();
        let mut events: Vec<Recorded> = Vec::new();
        loop {
            let batch = self.log.read(sid, state.seq, FOLD_BATCH).await?;
            let done = batch.len() < FOLD_BATCH;
            for e in batch {
                if at.is_some_and(|at| e.seq() > at) {
                    return Ok((state, events));
                }
                state.evolve(&e)?;
                if e.kind.snapshot().is_some() {
                    events.clear();
                }
                events.push(e);
            }
            if done {
                if !state.exists() {
                    return Err(ServiceError::SessionNotFound(sid.clone()));
                }
                return Ok((state, events));
            }
        }
    }

    /// A page of the session's events after `after`; 404 for an unknown session.
    pub async fn page(
        &self,
        sid: &SessionId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Recorded>, ServiceError> {
        let events = self.log.read(sid, after, limit).await?;
        if events.is_empty() {
            self.state(sid).await?;
        }
        Ok(events)
    }

    /// The plan projection unit, recomputed from the whole log and nothing else.
    pub async fn plan_projection(&self, sid: &SessionId) -> Result<PlanProjection, ServiceError> {
        let mut projection = PlanProjection::default();
        let mut after = 0;
        loop {
            let events = self.log.read(sid, after, FOLD_BATCH).await?;
            for e in &events {
                projection.apply(e.agent.as_str(), &e.kind);
            }
            match events.last() {
                Some(last) if events.len() == FOLD_BATCH => after = last.seq(),
                _ if after == 0 && events.is_empty() => {
                    return Err(ServiceError::SessionNotFound(sid.clone()))
                }
                _ => return Ok(projection),
            }
        }
    }
}
