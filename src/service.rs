//! The application layer between HTTP and the store: folds sessions on read and turns domain
//! decisions into compare-and-append commits.
//!
//! A replica keeps a cache of folded sessions with the seq each was folded to. It is a cache,
//! never truth: a read catches up with one range read past that seq (anchored on the last
//! folded entry, so a log that Redis lost or replaced is noticed and folded again), and a
//! decision is committed only if the log still ends at the seq the decision saw. On a conflict the store
//! hands back the missed events, the decision is made again on the newer state, and the cache
//! learns them. Concurrent decisions on one session within a replica share one commit, made
//! in arrival order (see [`group`]), so contention costs retries only across replicas.
//!
//! Every commit keeps the session for its retention (`SessionTerms::retention_ms`, folded from
//! its creation) from then on. A session that is deleted or expires is noticed like a lost log:
//! the catch-up finds its anchor gone, folds again from nothing, and the session is not found.

use std::sync::Arc;
use std::time::Duration;

use quick_cache::sync::Cache;

use crate::domain::event::{AgentSnapshot, ForkOrigin};
use crate::domain::session::decide_create;
use crate::domain::{
    DomainError, FoldError, NewEvent, Recorded, SessionId, SessionState, SessionTerms, TenantId,
};
use crate::limits::Limits;
use crate::store::{Anchor, Append, EventLog, StoreError};

mod listing;
pub use listing::{SessionSummary, SessionsPage};
mod group;
pub mod idempotency;
mod replay;
mod webhooks;

/// Events read per round trip while catching a cold session up.
const FOLD_BATCH: usize = 10_000;
/// Attempts of one decision before giving up with [`ServiceError::Contention`].
const MAX_ATTEMPTS: usize = 32;
/// Times one read folds a session again from its start because the log was replaced.
const MAX_REFOLDS: usize = 3;
/// Folded sessions a replica expects to keep.
const CACHE_SESSIONS: usize = 100_000;
/// What the cache of folded sessions may hold, in (approximate) bytes.
const CACHE_BYTES: u64 = 512 << 20;
/// The cache's shards; each holds an equal part of [`CACHE_BYTES`].
const CACHE_SHARDS: usize = 16;
/// The most one session weighs: the cache refuses an entry heavier than its shard's budget,
/// and a session that is never cached would be folded from its first event on every read.
const MAX_WEIGHT: u64 = CACHE_BYTES / CACHE_SHARDS as u64 / 4;
const LOCK_SHARDS: usize = 1024;

/// A folded session's weight in the cache: a base for its agents plus what it holds.
#[derive(Clone)]
struct ByBytes;

impl quick_cache::Weighter<SessionId, Arc<SessionState>> for ByBytes {
    fn weight(&self, _: &SessionId, s: &Arc<SessionState>) -> u64 {
        ((1024 + 256 * s.agents.len() + s.bytes) as u64).min(MAX_WEIGHT)
    }
}

type FoldCache = Cache<
    SessionId,
    Arc<SessionState>,
    ByBytes,
    quick_cache::DefaultHashBuilder,
    quick_cache::sync::DefaultLifecycle<SessionId, Arc<SessionState>>,
>;

fn fold_cache() -> FoldCache {
    let options = quick_cache::OptionsBuilder::new()
        .estimated_items_capacity(CACHE_SESSIONS)
        .weight_capacity(CACHE_BYTES)
        .shards(CACHE_SHARDS)
        .build()
        .unwrap_or_else(|e| unreachable!("the cache options are constants: {e:?}"));
    Cache::with_options(options, ByBytes, Default::default(), Default::default())
}

#[derive(Clone, Debug, thiserror::Error)]
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
    /// The OS random source failed, so no session id can be drawn.
    #[error("no random session id: {0}")]
    NoEntropy(String),
    /// A tenant quota refused (sessions, running turns…); nothing was appended.
    #[error(transparent)]
    Quota(#[from] crate::limits::Quota),
    /// A keyed request's earlier attempt committed this decision (up to seq `seq`), but its
    /// result cannot be rebuilt: the log was compacted past it since.
    #[error("this request was applied already, up to event {seq}-0")]
    AlreadyApplied { seq: u64 },
}

/// A committed decision: its value, the state after it, and the events it appended.
pub struct Decided<T> {
    pub value: T,
    pub state: Arc<SessionState>,
    pub events: Vec<Recorded>,
}

pub struct Sessions {
    log: Arc<dyn EventLog>,
    cache: FoldCache,
    /// Serializes a session's commits with its deletion.
    locks: Box<[tokio::sync::Mutex<()>]>,
    /// Decisions waiting for their session's next commit ([`group`]).
    queues: group::Queues,
    /// The tenants' session quotas: a new session is admitted before it is created, and its
    /// expiry in the count follows its writes.
    limits: Option<Arc<Limits>>,
    /// Where committed events are announced to the tenants' webhooks ([`webhooks`]).
    webhooks: Option<Arc<dyn crate::store::WebhookStore>>,
}

impl Sessions {
    pub fn new(log: Arc<dyn EventLog>) -> Self {
        Self {
            log,
            cache: fold_cache(),
            locks: (0..LOCK_SHARDS)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            queues: group::Queues::default(),
            limits: None,
            webhooks: None,
        }
    }

    /// These sessions, counted against their tenants' `max_sessions`.
    pub fn with_limits(mut self, limits: Arc<Limits>) -> Self {
        self.limits = Some(limits);
        self
    }

    /// `redis` or `memory`, as `/v1/status` reports it.
    pub fn store_kind(&self) -> &'static str {
        self.log.kind()
    }

    /// Checks that the store answers (readiness).
    pub async fn ping(&self) -> Result<(), ServiceError> {
        Ok(self.log.ping().await?)
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

    /// The tenant that owns `sid` (`None`: created on an open server). A session's owner never
    /// changes, so a cached fold answers without a store round trip.
    pub async fn owner(&self, sid: &SessionId) -> Result<Option<TenantId>, ServiceError> {
        if let Some(cached) = self.cache.get(sid) {
            return Ok(cached.terms.tenant.clone());
        }
        Ok(self.state(sid).await?.terms.tenant.clone())
    }

    /// Folds every event after `state.seq`, reading until the log's end. If the log no
    /// longer holds the last event `state` folded (Redis lost its data, or a compaction trimmed
    /// it), the session is folded again from its first event.
    async fn catch_up(
        &self,
        sid: &SessionId,
        state: Arc<SessionState>,
    ) -> Result<Arc<SessionState>, ServiceError> {
        let mut state = state;
        let mut refolds = 0;
        loop {
            let Some(events) = self.log.read_after(sid, anchor(&state), FOLD_BATCH).await? else {
                tracing::warn!(session = %sid, seq = state.seq, "the log no longer holds what this replica folded; folding it again");
                self.cache.remove(sid);
                // A log replaced again and again under a fold (compactions racing it) must
                // not keep this request folding forever.
                refolds += 1;
                if refolds > MAX_REFOLDS {
                    return Err(ServiceError::Contention);
                }
                state = Arc::default();
                continue;
            };
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
        self.remember(sid, next.clone());
        Ok(next)
    }

    /// Caches `state` unless the cache holds a newer fold.
    fn remember(&self, sid: &SessionId, state: Arc<SessionState>) {
        if state.exists() && self.cache.get(sid).is_none_or(|c| c.seq < state.seq) {
            self.cache.insert(sid.clone(), state);
        }
    }

    fn lock(&self, sid: &SessionId) -> &tokio::sync::Mutex<()> {
        &self.locks[shard(sid, self.locks.len())]
    }

    /// Runs `decide` on the current state and commits its events atomically: if another writer
    /// got there first, `decide` runs again on the newer state. A decision that appends nothing
    /// is still checked against the log's end, so its answer is never based on a stale view.
    /// Concurrent decisions on one session share one commit ([`group`]): `decide` runs on the
    /// state the decisions queued before it leave, in arrival order.
    ///
    /// Within a keyed request ([`idempotency`]) the commit carries the request's marker: if an
    /// earlier attempt of the request committed this decision already, nothing is appended and
    /// the earlier result is rebuilt from the log (`decide` run again on the state it saw).
    pub async fn decide<T, F>(
        self: &Arc<Self>,
        sid: &SessionId,
        decide: F,
    ) -> Result<Decided<T>, ServiceError>
    where
        T: Send + 'static,
        F: Fn(&SessionState) -> Result<(T, Vec<NewEvent>), DomainError> + Send + Sync + 'static,
    {
        let decide = Arc::new(decide);
        let erased: group::Decide = {
            let decide = decide.clone();
            Box::new(move |s| decide(s).map(|(v, events)| (Box::new(v) as group::Value, events)))
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = group::Job {
            decide: erased,
            keyed: idempotency::current(),
            reply,
        };
        self.enqueue(sid, job);
        // The runner answers every decision it takes; it drops them unanswered only if it dies
        // (its runtime shutting down, or a bug outside the decisions).
        let Ok(answer) = answer.await else {
            return Err(ServiceError::Store(StoreError::Unavailable(
                "the commit was abandoned: the replica is stopping".into(),
            )));
        };
        match answer {
            group::Answer::Decided(d) => {
                let value = d.value.downcast::<T>().unwrap_or_else(|_| {
                    unreachable!("a decision's value keeps its type through the queue")
                });
                self.announce(sid, &d.state, &d.events).await;
                Ok(Decided {
                    value: *value,
                    state: d.state,
                    events: d.events,
                })
            }
            group::Answer::Already { first, last } => {
                // The earlier attempt may have died before it announced its events.
                let rebuilt = self.rebuild(sid, first, last, &*decide).await?;
                self.announce(sid, &rebuilt.state, &rebuilt.events).await;
                Ok(rebuilt)
            }
            group::Answer::Failed(e) => Err(e),
            group::Answer::Panicked(p) => std::panic::resume_unwind(p),
        }
    }

    /// Creates a session (with its root agent, or a fork's agents) and returns its id and state.
    pub async fn create(
        &self,
        parent: Option<ForkOrigin>,
        agents: Option<Vec<AgentSnapshot>>,
        terms: SessionTerms,
    ) -> Result<(SessionId, Arc<SessionState>), ServiceError> {
        let ttl_ms = terms.retention_ms;
        let (tenant, retention) = (terms.tenant.clone(), Duration::from_millis(ttl_ms));
        let events = decide_create(parent, agents, terms);
        let keyed = idempotency::current();
        loop {
            // A keyed request draws the same id on a retry, so it finds the session its first
            // attempt created (by the marker beside it) instead of creating another.
            let sid = match idempotency::drawn("session") {
                Some(bits) => SessionId::from_bytes(bits),
                None => {
                    SessionId::generate().map_err(|e| ServiceError::NoEntropy(e.to_string()))?
                }
            };
            let mark = keyed.as_ref().map(|k| k.mark());
            // Counted before it exists: a session over the tenant's quota appends nothing.
            if let Some(limits) = &self.limits {
                limits
                    .admit_session(tenant.as_ref(), &sid, retention)
                    .await?;
            }
            let appended = self
                .append(&sid, Anchor::default(), &events, ttl_ms, mark.as_ref())
                .await;
            match appended {
                Ok(Append::Committed(recorded)) => {
                    if let Some(k) = &keyed {
                        k.committed(false);
                    }
                    let state = self.advance(&sid, Arc::default(), &recorded)?;
                    return Ok((sid, state));
                }
                Ok(Append::Already { last, .. }) => {
                    if let Some(k) = &keyed {
                        k.committed(true);
                    }
                    let state = self.created(&sid, last).await?;
                    return Ok((sid, state));
                }
                _ => {}
            }
            // Not created (an id collision, or the store failed — then a commit it hid goes
            // uncounted, which is better than a slot held forever by a session that may not
            // exist).
            if let Some(limits) = &self.limits {
                if let Err(e) = limits.forget_session(tenant.as_ref(), &sid).await {
                    tracing::warn!(session = %sid, error = %e, "releasing an uncreated session's quota failed");
                }
            }
            appended?;
        }
    }

    /// The session folded up to and including seq `at` (for a fork): the cached state when
    /// `at` is the head, else a fold from the first event. `None` when `at` was trimmed.
    pub async fn state_at(
        &self,
        sid: &SessionId,
        at: u64,
    ) -> Result<Option<Arc<SessionState>>, ServiceError> {
        let head = self.state(sid).await?;
        if head.seq == at {
            return Ok(Some(head));
        }
        let mut state = SessionState::default();
        while state.seq < at {
            let want = FOLD_BATCH.min((at - state.seq) as usize);
            let batch = self.log.read(sid, state.seq, want).await?;
            // Past `at` (the entries up to it were trimmed), or the log ended early.
            if batch.first().is_none_or(|e| e.seq() > at) {
                return Ok(None);
            }
            for e in batch.iter().take_while(|e| e.seq() <= at) {
                state.evolve(e)?;
            }
        }
        Ok(Some(Arc::new(state)))
    }

    /// Deletes the session: its log and every other key it has, and this replica's fold of it.
    /// Other replicas notice at their next read (the anchor is gone); live streams end. A turn
    /// running on it stops at its next commit, which finds the log gone and appends nothing.
    pub async fn delete(&self, sid: &SessionId) -> Result<(), ServiceError> {
        // Serialized with this replica's decisions on the session, so none commits after it.
        let _serial = self.lock(sid).lock().await;
        let owner = match self.cache.get(sid) {
            Some(s) => Some(s.terms.tenant.clone()),
            None => self
                .catch_up(sid, Arc::default())
                .await
                .ok()
                .filter(|s| s.exists())
                .map(|s| s.terms.tenant.clone()),
        };
        let existed = self.log.delete(sid).await?;
        self.cache.remove(sid);
        // Its slot in the tenant's session quota is free again.
        if let (Some(limits), Some(tenant)) = (&self.limits, owner) {
            if let Err(e) = limits.forget_session(tenant.as_ref(), sid).await {
                tracing::warn!(session = %sid, error = %e, "releasing a deleted session's quota slot failed; it frees itself when its retention ends");
            }
        }
        match existed {
            true => Ok(()),
            false => Err(ServiceError::SessionNotFound(sid.clone())),
        }
    }

    /// Whether the store refuses writes for want of memory (readiness).
    pub async fn store_full(&self) -> Result<bool, ServiceError> {
        Ok(self.log.full().await?)
    }

    /// Drops the entries before seq `keep_from`, which a compaction snapshot replaced.
    pub async fn trim(&self, sid: &SessionId, keep_from: u64) -> Result<(), ServiceError> {
        Ok(self.log.trim(sid, keep_from).await?)
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
}

/// Which of `n` shards `sid` falls in.
fn shard(sid: &SessionId, n: usize) -> usize {
    // A shard only spreads sessions over locks, so a keyed hash (SipHash: ~1k instructions a
    // write over the three lookups) buys nothing here.
    (crate::store::fnv1a(sid.as_str().as_bytes()) % n as u64) as usize
}

/// Where a fold stands in its log: what a catch-up reads past and an append expects.
fn anchor(state: &SessionState) -> Anchor {
    Anchor {
        seq: state.seq,
        ts: state.tail_ts,
    }
}
