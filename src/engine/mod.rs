//! The turn engine: prompts open turns, and every step of a turn runs behind a pre-step at the
//! model-request boundary (DESIGN §2 "Turn / step").
//!
//! Placement across replicas: a turn is run by the replica holding its lease in Redis
//! ([`crate::store::TurnLeases`]); the holder renews it every second. If the holder dies, its
//! lease expires and any replica's sweeper claims the turn and continues it from the log —
//! [`crate::domain::turn::next_action`] reads from the log alone what comes next, and a step
//! whose answer is missing is retried with its frozen request. Answers are fenced: only the
//! replica that owns the step's current attempt may record its answer, so a paused replica
//! that wakes up cannot duplicate one.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::composition::Composition;
use crate::domain::plan::review::{review, ReviewStep};
use crate::domain::plan::EXIT_TOOL;
use crate::domain::turn::Prompted;
use crate::domain::turn::{next_action, Next};
use crate::domain::{AgentId, NewEvent, SessionId, SessionState};
use crate::service::{ServiceError, Sessions};
use crate::store::{Ephemeral, EventLog, LiveBus, StoreError, TurnLeases};

pub mod assembly;
mod lifecycle;
pub mod provider;
mod runner;
pub mod tools;

use assembly::Prompting;
use provider::ModelClient;
use runner::Transcript;

/// Timing of leases and polling.
#[derive(Clone, Debug)]
pub struct Timing {
    pub lease_ttl: Duration,
    pub renew_every: Duration,
    pub sweep_every: Duration,
    /// How often a running step looks for a cancel in the log.
    pub poll_every: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_millis(3000),
            renew_every: Duration::from_millis(1000),
            sweep_every: Duration::from_millis(1000),
            poll_every: Duration::from_millis(200),
        }
    }
}

/// An assistant text delta, streamed live to every replica's subscribers and never recorded.
#[derive(Clone, Debug, Serialize)]
pub struct Delta {
    /// Always `assistant/delta`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: String,
    pub agent: String,
    pub turn: String,
    pub step: u32,
    /// The step's attempt: 1 for the first, as `step/retried` counts them.
    pub attempt: u32,
    pub text: String,
}

/// One turn, named in leases as `<session> <agent> <turn>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TurnRef {
    sid: SessionId,
    agent: AgentId,
    turn: String,
}

impl TurnRef {
    fn member(&self) -> String {
        format!("{} {} {}", self.sid, self.agent, self.turn)
    }

    fn parse(member: &str) -> Option<Self> {
        let mut parts = member.split(' ');
        let sid = SessionId::parse(parts.next()?).ok()?;
        let agent = AgentId::parse(parts.next()?).ok()?;
        let turn = parts.next()?.to_owned();
        Some(Self { sid, agent, turn })
    }
}

pub struct Engine {
    /// Whether `questions` is composed: without it, reviews fail closed.
    questions: bool,
    /// The serialized tool list (identical in both plan states).
    tools: serde_json::Value,
    log: Arc<dyn EventLog>,
    leases: Arc<dyn TurnLeases>,
    provider: Arc<dyn ModelClient>,
    prompting: Prompting,
    replica: String,
    /// Lease owner token: the replica id plus a per-process nonce.
    owner: String,
    timing: Timing,
    /// Deltas go out in order through one publisher task per replica.
    deltas: tokio::sync::mpsc::UnboundedSender<Ephemeral>,
    /// Turns this process is running, so a sweep never starts a second runner here.
    running: Mutex<HashSet<String>>,
    /// The runtime turn runners live on (not an HTTP worker's), so they outlive requests.
    runtime: tokio::runtime::Handle,
}

/// Why a turn runner stopped without an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// The turn is no longer open.
    Closed,
    /// The turn waits on a question; no replica holds it until the answer comes.
    Waiting,
}

#[derive(Debug, thiserror::Error)]
enum TurnStop {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the session log is corrupt: {0}")]
    Corrupt(#[from] crate::domain::FoldError),
    #[error("the lease on this turn was lost")]
    LeaseLost,
}

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        log: Arc<dyn EventLog>,
        live: Arc<dyn LiveBus>,
        leases: Arc<dyn TurnLeases>,
        provider: Arc<dyn ModelClient>,
        prompting: Prompting,
        composition: &Composition,
        replica: String,
        timing: Timing,
    ) -> Arc<Self> {
        let owner = format!("{replica}#{}", uuid::Uuid::now_v7().simple());
        Arc::new(Self {
            questions: composition.questions,
            tools: assembly::tools(composition.plan_mode.is_some()),
            log,
            leases,
            provider,
            prompting,
            replica,
            owner,
            timing,
            deltas: {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Ephemeral>();
                tokio::spawn(async move {
                    while let Some(msg) = rx.recv().await {
                        if let Err(e) = live.publish(msg).await {
                            tracing::debug!(error = %e, "a delta was not published");
                        }
                    }
                });
                tx
            },
            running: Mutex::new(HashSet::new()),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// Turns this replica is running now.
    pub fn running_turns(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn provider_name(&self) -> &'static str {
        self.provider.name()
    }

    pub fn prompting(&self) -> &Prompting {
        &self.prompting
    }

    /// The tool list every step sends.
    pub fn tools(&self) -> &serde_json::Value {
        &self.tools
    }

    /// Starts the sweeper that adopts turns whose replica died. Runs until the runtime stops.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let engine = Arc::downgrade(self);
        let every = self.timing.sweep_every;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                engine.sweep().await;
            }
        })
    }

    async fn sweep(self: &Arc<Self>) {
        let ttl = self.timing.lease_ttl.as_millis() as u64;
        match self.leases.claim_expired(&self.owner, ttl, 16).await {
            Ok(members) => {
                for member in members {
                    match TurnRef::parse(&member) {
                        Some(t) => {
                            tracing::info!(session = %t.sid, agent = %t.agent, turn = %t.turn, "adopting a turn whose lease expired");
                            self.spawn_turn(t);
                        }
                        None => {
                            let _ = self.leases.release(&member, &self.owner).await;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "lease sweep failed"),
        }
    }

    /// A prompt: opens a turn on an idle agent (and runs it), or steers the running turn.
    pub async fn prompt(
        self: &Arc<Self>,
        sessions: &Sessions,
        sid: &SessionId,
        agent: &AgentId,
        text: &str,
    ) -> Result<Prompted, ServiceError> {
        self.submit(
            sessions,
            sid,
            agent,
            |s, turn| s.decide_prompt(agent, text, turn),
            |p| Some(p),
        )
        .await
        .map(|d| d.value)
    }

    /// Commits a decision that may open turn `<new id>` on `agent` (`opened` says whether it
    /// did), and runs that turn here.
    pub async fn submit<T>(
        self: &Arc<Self>,
        sessions: &Sessions,
        sid: &SessionId,
        agent: &AgentId,
        decide: impl Fn(&SessionState, &str) -> Result<(T, Vec<NewEvent>), crate::domain::DomainError>,
        opened: impl Fn(&T) -> Option<&Prompted>,
    ) -> Result<crate::service::Decided<T>, ServiceError> {
        let turn = format!("turn-{}", uuid::Uuid::now_v7().simple());
        let t = TurnRef {
            sid: sid.clone(),
            agent: agent.clone(),
            turn,
        };
        let ttl = self.timing.lease_ttl.as_millis() as u64;
        // The lease exists before the turn does: a crash right after the commit leaves a lease
        // that expires and gets adopted, never an open turn nobody will run.
        self.leases.acquire(&t.member(), &self.owner, ttl).await?;
        let decided = sessions.decide(sid, |s| decide(s, &t.turn)).await;
        let started = decided
            .as_ref()
            .ok()
            .and_then(|d| opened(&d.value))
            .is_some_and(|p| !p.steered && p.turn == t.turn);
        match &decided {
            _ if started => self.spawn_turn(t),
            // An outage may have hidden a commit: keep the lease, so if a turn did open, the
            // sweeper adopts it when the lease expires (and releases it if none did).
            Err(ServiceError::Store(_)) => {}
            _ => self.leases.release(&t.member(), &self.owner).await?,
        }
        decided
    }

    /// Closes a question (answer or dismiss) and continues its waiting turn here. The turn's
    /// lease is taken before the commit, so a crash in between leaves an expiring lease that
    /// another replica adopts, never a waiting turn nobody resumes.
    pub async fn close_question(
        self: &Arc<Self>,
        sessions: &Sessions,
        sid: &SessionId,
        qid: &str,
        decide: impl Fn(&SessionState) -> Result<(AgentId, Vec<NewEvent>), crate::domain::DomainError>,
    ) -> Result<crate::service::Decided<AgentId>, ServiceError> {
        let state = sessions.state(sid).await?;
        let turn = state.questions.get(qid).map(|q| TurnRef {
            sid: sid.clone(),
            agent: q.agent.clone(),
            turn: q.asked.turn.clone(),
        });
        let ttl = self.timing.lease_ttl.as_millis() as u64;
        let mut leased = None;
        if let Some(t) = turn {
            // Held elsewhere: that runner is leaving and re-checks the log after it lets go.
            if self.leases.acquire(&t.member(), &self.owner, ttl).await? {
                leased = Some(t);
            }
        }
        let decided = sessions.decide(sid, decide).await;
        match (&decided, leased) {
            (Ok(_), Some(t)) => self.spawn_turn(t),
            (Err(ServiceError::Store(_)), _) | (_, None) => {}
            (Err(_), Some(t)) => self.leases.release(&t.member(), &self.owner).await?,
        }
        decided
    }

    /// Continues `agent`'s open turn here, if no replica holds it.
    async fn resume(
        self: &Arc<Self>,
        state: &SessionState,
        sid: &SessionId,
        agent: &AgentId,
    ) -> Result<(), ServiceError> {
        let Some(turn) = state.agents.get(agent).and_then(|a| a.turn.clone()) else {
            return Ok(());
        };
        let t = TurnRef {
            sid: sid.clone(),
            agent: agent.clone(),
            turn,
        };
        let ttl = self.timing.lease_ttl.as_millis() as u64;
        if self.leases.acquire(&t.member(), &self.owner, ttl).await? {
            self.spawn_turn(t);
        }
        Ok(())
    }

    /// Ends the agent's running turn from any replica; the replica running it aborts the
    /// provider request when it sees the end in the log. Pending plan choices are kept.
    pub async fn cancel(
        &self,
        sessions: &Sessions,
        sid: &SessionId,
        agent: &AgentId,
    ) -> Result<Option<String>, ServiceError> {
        let done = sessions
            .decide(sid, |s| s.decide_end_turn(agent, None, "cancelled"))
            .await?;
        Ok(done.value)
    }

    fn spawn_turn(self: &Arc<Self>, t: TurnRef) {
        let member = t.member();
        if !self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(member.clone())
        {
            return;
        }
        let engine = self.clone();
        self.runtime.spawn(async move {
            let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let renew = engine.clone().keep_lease(member.clone(), lost.clone());
            let result = engine.run_turn(&t, &lost).await;
            renew.abort();
            match result {
                Ok(exit) => {
                    let _ = engine.leases.release(&member, &engine.owner).await;
                    engine
                        .running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&member);
                    if exit == Exit::Waiting {
                        // An answer that landed while we were leaving found the lease taken:
                        // look once more, now that it is free.
                        engine.recheck(t).await;
                    }
                    return;
                }
                Err(TurnStop::LeaseLost) => {
                    tracing::warn!(%member, "lost the lease; another replica continues")
                }
                // The lease expires and another replica (or this one) tries again from the log.
                Err(e) => tracing::error!(%member, error = %e, "turn runner stopped"),
            }
            engine
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&member);
        });
    }

    async fn recheck(self: &Arc<Self>, t: TurnRef) {
        let Ok(tx) = Transcript::load(self.log.clone(), t.sid.clone()).await else {
            return;
        };
        let waiting = matches!(next_action(&tx.events, &t.agent, &t.turn), Next::Closed)
            || matches!(self.next_tool_step(&tx, &t), Some(ReviewStep::Wait));
        if !waiting {
            let _ = self.resume(&tx.state, &t.sid, &t.agent).await;
        }
    }

    /// For a turn whose next action is running tools: what the first exit call's review does.
    fn next_tool_step(&self, tx: &Transcript, t: &TurnRef) -> Option<ReviewStep> {
        match next_action(&tx.events, &t.agent, &t.turn) {
            Next::RunTools { calls } => calls
                .iter()
                .find(|c| c.name == EXIT_TOOL && !self.tools_is_empty())
                .map(|c| review(&tx.state, &t.agent, &t.turn, c, self.questions)),
            _ => None,
        }
    }

    fn tools_is_empty(&self) -> bool {
        self.tools.as_array().is_none_or(|t| t.is_empty())
    }

    fn keep_lease(
        self: Arc<Self>,
        member: String,
        lost: Arc<std::sync::atomic::AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        self.runtime.clone().spawn(async move {
            let ttl = self.timing.lease_ttl.as_millis() as u64;
            let mut tick = tokio::time::interval(self.timing.renew_every);
            let mut renewed = tokio::time::Instant::now();
            loop {
                tick.tick().await;
                match self.leases.renew(&member, &self.owner, ttl).await {
                    Ok(true) => renewed = tokio::time::Instant::now(),
                    Ok(false) => {
                        lost.store(true, std::sync::atomic::Ordering::SeqCst);
                        return;
                    }
                    // Unrenewed past its ttl, the lease may be someone else's by now.
                    Err(e) if renewed.elapsed() >= self.timing.lease_ttl => {
                        tracing::warn!(error = %e, "lease renewal failed past its ttl; stopping");
                        lost.store(true, std::sync::atomic::Ordering::SeqCst);
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
                }
            }
        })
    }
}
