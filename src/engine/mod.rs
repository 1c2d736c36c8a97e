//! The turn engine: prompts open turns, and every step of a turn runs behind a pre-step at the
//! model-request boundary (DESIGN §2 "Turn / step").
//!
//! The engine decides nothing by itself: what a turn does next is read from the folded session
//! ([`crate::domain::AgentState::next`]) and every decision (pre-step, retry, answer, tool
//! result, end) is a domain function committed through [`Sessions::decide`], the one
//! compare-and-append path. A runner acting on a stale view appends nothing.
//!
//! Placement across replicas: a turn is run by the replica holding its lease
//! ([`crate::store::TurnLeases`]); the holder renews it every second. If the holder dies, its
//! lease expires and any replica's sweeper claims the turn and continues it from the log; a step
//! whose answer is missing is retried with its frozen request. Answers are fenced by the step's
//! attempt: only the runner that committed an attempt can record its answer. A replica that
//! stops hands its leases over (expired at once), so another continues within a sweep.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::composition::Composition;
use crate::domain::turn::{Prompted, TurnRules};
use crate::domain::{AgentId, DomainError, NewEvent, Next, SessionId, SessionState};
use crate::service::{Decided, ServiceError, Sessions};
use crate::store::{LiveBus, StoreError, TurnLeases};

pub mod assembly;
mod deltas;
mod lifecycle;
pub mod provider;
mod runner;

use assembly::Prompting;
use provider::ModelClient;

/// Default of `DSH_MAX_STEPS`: steps one turn may take.
pub const DEFAULT_MAX_STEPS: u32 = 50;

/// Timing of leases and polling.
#[derive(Clone, Debug)]
pub struct Timing {
    pub lease_ttl: Duration,
    pub renew_every: Duration,
    /// How often a replica looks for expired (or handed-over) leases to adopt.
    pub sweep_every: Duration,
    /// How often a running step looks for a cancel in the log.
    pub poll_every: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_millis(3000),
            renew_every: Duration::from_millis(1000),
            sweep_every: Duration::from_millis(250),
            poll_every: Duration::from_millis(200),
        }
    }
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
    sessions: Arc<Sessions>,
    rules: TurnRules,
    /// The serialized tool list (identical in both plan states).
    tools: serde_json::Value,
    leases: Arc<dyn TurnLeases>,
    provider: Arc<dyn ModelClient>,
    prompting: Prompting,
    replica: String,
    /// Lease owner token: the replica id plus a per-process nonce.
    owner: String,
    timing: Timing,
    deltas: deltas::Publisher,
    /// Turns this process is running, so a sweep never starts a second runner here.
    running: Mutex<HashSet<String>>,
    /// Set when the replica stops: no adoption, runners hand their turns over.
    stopping: tokio::sync::watch::Sender<bool>,
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
    Service(#[from] ServiceError),
    #[error("the lease on this turn was lost")]
    LeaseLost,
    #[error("this replica is stopping")]
    Stopping,
}

impl From<StoreError> for TurnStop {
    fn from(e: StoreError) -> Self {
        Self::Service(e.into())
    }
}

/// What a settings file gives the engine.
pub struct EngineConfig {
    pub replica: String,
    pub timing: Timing,
    pub max_steps: u32,
}

impl Engine {
    pub fn new(
        sessions: Arc<Sessions>,
        live: Arc<dyn LiveBus>,
        leases: Arc<dyn TurnLeases>,
        provider: Arc<dyn ModelClient>,
        prompting: Prompting,
        composition: &Composition,
        config: EngineConfig,
    ) -> Arc<Self> {
        let owner = format!("{}#{}", config.replica, uuid::Uuid::now_v7().simple());
        Arc::new(Self {
            sessions,
            rules: TurnRules {
                max_steps: config.max_steps.max(1),
                exit_tool: composition.plan_mode.is_some(),
                questions: composition.questions,
            },
            tools: assembly::tools(composition.plan_mode.is_some()),
            leases,
            provider,
            prompting,
            replica: config.replica,
            owner,
            timing: config.timing,
            deltas: deltas::Publisher::start(live),
            running: Mutex::new(HashSet::new()),
            stopping: tokio::sync::watch::channel(false).0,
            runtime: tokio::runtime::Handle::current(),
        })
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns this replica is running now.
    pub fn running_turns(&self) -> usize {
        self.running().len()
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

    fn ttl_ms(&self) -> u64 {
        self.timing.lease_ttl.as_millis() as u64
    }

    /// Starts the sweeper that adopts turns whose replica died or handed them over. It runs
    /// until the engine stops.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let engine = Arc::downgrade(self);
        let every = self.timing.sweep_every;
        let mut stopping = self.stopping.subscribe();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped(&mut stopping) => return,
                }
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                engine.sweep().await;
            }
        })
    }

    /// Stops adopting turns and hands every running turn over at its next safe point (a
    /// provider request in flight is abandoned; its step is retried elsewhere with the same
    /// frozen request). Waits up to `grace` for the runners to let go.
    pub async fn stop(&self, grace: Duration) {
        self.stopping.send_replace(true);
        let deadline = tokio::time::Instant::now() + grace;
        while self.running_turns() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn sweep(self: &Arc<Self>) {
        match self
            .leases
            .claim_expired(&self.owner, self.ttl_ms(), 16)
            .await
        {
            Ok(members) => {
                for member in members {
                    match TurnRef::parse(&member) {
                        Some(t) => {
                            tracing::info!(session = %t.sid, agent = %t.agent, turn = %t.turn, "adopting a turn whose lease expired");
                            self.spawn_turn(t);
                        }
                        None => {
                            if let Err(e) = self.leases.release(&member, &self.owner).await {
                                tracing::warn!(error = %e, "releasing a malformed lease failed");
                            }
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
        sid: &SessionId,
        agent: &AgentId,
        text: &str,
    ) -> Result<Prompted, ServiceError> {
        self.submit(
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
        sid: &SessionId,
        agent: &AgentId,
        decide: impl Fn(&SessionState, &str) -> Result<(T, Vec<NewEvent>), DomainError>,
        opened: impl Fn(&T) -> Option<&Prompted>,
    ) -> Result<Decided<T>, ServiceError> {
        let turn = format!("turn-{}", uuid::Uuid::now_v7().simple());
        let t = TurnRef {
            sid: sid.clone(),
            agent: agent.clone(),
            turn,
        };
        // The lease exists before the turn does: a crash right after the commit leaves a lease
        // that expires and gets adopted, never an open turn nobody will run.
        self.leases
            .acquire(&t.member(), &self.owner, self.ttl_ms())
            .await?;
        let decided = self.sessions.decide(sid, |s| decide(s, &t.turn)).await;
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
        sid: &SessionId,
        qid: &str,
        decide: impl Fn(&SessionState) -> Result<(AgentId, Vec<NewEvent>), DomainError>,
    ) -> Result<Decided<AgentId>, ServiceError> {
        let state = self.sessions.state(sid).await?;
        let turn = state.questions.get(qid).map(|q| TurnRef {
            sid: sid.clone(),
            agent: q.agent.clone(),
            turn: q.asked.turn.clone(),
        });
        let mut leased = None;
        if let Some(t) = turn {
            // Held elsewhere: that runner is leaving and re-checks the log after it lets go.
            if self
                .leases
                .acquire(&t.member(), &self.owner, self.ttl_ms())
                .await?
            {
                leased = Some(t);
            }
        }
        let decided = self.sessions.decide(sid, decide).await;
        match (&decided, leased) {
            (Ok(_), Some(t)) => self.spawn_turn(t),
            (Err(ServiceError::Store(_)), _) | (_, None) => {}
            (Err(_), Some(t)) => self.leases.release(&t.member(), &self.owner).await?,
        }
        decided
    }

    /// Ends the agent's running turn from any replica; the replica running it abandons the
    /// provider request when it sees the end in the log. Pending plan choices are kept.
    pub async fn cancel(
        &self,
        sid: &SessionId,
        agent: &AgentId,
    ) -> Result<Option<String>, ServiceError> {
        let done = self
            .sessions
            .decide(sid, |s| {
                s.decide_end_turn(agent, None, crate::domain::agent::reason::CANCELLED)
            })
            .await?;
        Ok(done.value)
    }

    fn spawn_turn(self: &Arc<Self>, t: TurnRef) {
        let member = t.member();
        if !self.running().insert(member.clone()) {
            return;
        }
        let engine = self.clone();
        self.runtime.spawn(async move {
            // Leaves the running set however the runner ends, a panic included.
            let _running = Running(&engine, &member);
            let lost = Arc::new(AtomicBool::new(false));
            let renew = engine.clone().keep_lease(member.clone(), lost.clone());
            let result = engine.run_turn(&t, &lost).await;
            renew.abort();
            let let_go = match &result {
                Ok(_) => engine.leases.release(&member, &engine.owner).await,
                Err(TurnStop::Stopping) => {
                    tracing::info!(%member, "handing the turn over: this replica is stopping");
                    engine.leases.handoff(&member, &engine.owner).await
                }
                Err(TurnStop::LeaseLost) => {
                    tracing::warn!(%member, "lost the lease; another replica continues");
                    Ok(())
                }
                // An outage: the lease expires and a replica (maybe this one) tries again.
                Err(TurnStop::Service(e @ (ServiceError::Store(_) | ServiceError::Contention))) => {
                    tracing::warn!(%member, error = %e, "turn runner interrupted; it resumes once its lease expires");
                    Ok(())
                }
                // The session is gone or its log cannot be folded: adopting it again would
                // fail the same way, forever.
                Err(TurnStop::Service(e)) => {
                    tracing::error!(%member, error = %e, "turn runner stopped for good");
                    engine.leases.release(&member, &engine.owner).await
                }
            };
            if let Err(e) = let_go {
                tracing::warn!(%member, error = %e, "letting go of the lease failed; it expires");
            }
            drop(_running);
            if matches!(result, Ok(Exit::Waiting)) {
                // An answer that landed while we were leaving found the lease taken: look
                // once more, now that it is free.
                engine.recheck(t).await;
            }
        });
    }

    /// Continues a turn here if it has something to do and no replica holds it.
    async fn recheck(self: &Arc<Self>, t: TurnRef) {
        let state = match self.sessions.state(&t.sid).await {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(session = %t.sid, error = %e, "re-checking a waiting turn failed; its answer resumes it");
                return;
            }
        };
        if matches!(
            state.next(&t.agent, &t.turn, self.rules),
            Next::Closed | Next::Wait
        ) {
            return;
        }
        match self
            .leases
            .acquire(&t.member(), &self.owner, self.ttl_ms())
            .await
        {
            Ok(true) => self.spawn_turn(t),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(session = %t.sid, error = %e, "re-checking a waiting turn failed; its answer resumes it")
            }
        }
    }

    fn keep_lease(
        self: Arc<Self>,
        member: String,
        lost: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        self.runtime.clone().spawn(async move {
            let ttl = self.ttl_ms();
            let mut tick = tokio::time::interval(self.timing.renew_every);
            let mut renewed = tokio::time::Instant::now();
            loop {
                tick.tick().await;
                match self.leases.renew(&member, &self.owner, ttl).await {
                    Ok(true) => renewed = tokio::time::Instant::now(),
                    Ok(false) => {
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    // Unrenewed past its ttl, the lease may be someone else's by now.
                    Err(e) if renewed.elapsed() >= self.timing.lease_ttl => {
                        tracing::warn!(error = %e, "lease renewal failed past its ttl; stopping");
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
                }
            }
        })
    }
}

/// Resolves once the engine is stopping.
async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    // A closed channel means the engine is gone: stopping too.
    let _ = rx.wait_for(|s| *s).await;
}

/// A turn in this process's running set, until dropped.
struct Running<'a>(&'a Engine, &'a str);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running().remove(self.1);
    }
}
