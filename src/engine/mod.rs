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
use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::Instrument;

use crate::composition::Composition;
use crate::domain::turn::{Prompted, TurnRules};
use crate::domain::{AgentId, DomainError, NewEvent, SessionId, SessionState};
use crate::limits::Limits;
use crate::service::{Decided, ServiceError, Sessions};
use crate::store::{LiveBus, StoreError, TurnLeases};

pub mod assembly;
mod deltas;
mod lifecycle;
mod placement;
pub mod provider;
mod runner;

use placement::{Settling, TurnRef};

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

pub struct Engine {
    sessions: Arc<Sessions>,
    rules: TurnRules,
    /// The serialized tool list (identical in both plan states).
    tools: Arc<serde_json::Value>,
    leases: Arc<dyn TurnLeases>,
    provider: Arc<dyn ModelClient>,
    prompting: Arc<Prompting>,
    replica: Arc<str>,
    /// Lease owner token: the replica id plus a per-process nonce.
    owner: String,
    timing: Timing,
    deltas: deltas::Publisher,
    /// Turns this process is running, so a sweep never starts a second runner here.
    running: Mutex<HashSet<String>>,
    /// Turn openings ([`Engine::submit`], [`Engine::close_question`]) and runners' last
    /// re-checks under way: each may start a runner yet, so [`Engine::finish`] waits for them
    /// as for the runners.
    settling: AtomicUsize,
    /// Set when the replica stops: no adoption, runners hand their turns over.
    stopping: tokio::sync::watch::Sender<bool>,
    /// The runtime turn runners live on (not an HTTP worker's), so they outlive requests.
    runtime: tokio::runtime::Handle,
    /// Running turns and provider calls count against their session's tenant.
    limits: Arc<Limits>,
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
    /// The tenants' quotas on running turns and provider calls.
    pub limits: Arc<Limits>,
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
            tools: Arc::new(assembly::tools(composition.plan_mode.is_some())),
            leases,
            provider,
            prompting: Arc::new(prompting),
            replica: config.replica.into(),
            owner,
            timing: config.timing,
            deltas: deltas::Publisher::start(live),
            running: Mutex::new(HashSet::new()),
            settling: AtomicUsize::new(0),
            stopping: tokio::sync::watch::channel(false).0,
            runtime: tokio::runtime::Handle::current(),
            limits: config.limits,
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

    /// A prompt: opens a turn on an idle agent (and runs it), or steers the running turn.
    pub async fn prompt(
        self: &Arc<Self>,
        sid: &SessionId,
        agent: &AgentId,
        text: &str,
    ) -> Result<Prompted, ServiceError> {
        let (on, text) = (agent.clone(), text.to_owned());
        self.submit(
            sid,
            agent,
            move |s, turn| s.decide_prompt(&on, &text, turn),
            |p| Some(p),
        )
        .await
        .map(|d| d.value)
    }

    /// Commits a decision that may open turn `<new id>` on `agent` (`opened` says whether it
    /// did), and runs that turn here.
    pub async fn submit<T: Send + 'static>(
        self: &Arc<Self>,
        sid: &SessionId,
        agent: &AgentId,
        decide: impl Fn(&SessionState, &str) -> Result<(T, Vec<NewEvent>), DomainError>
            + Send
            + Sync
            + 'static,
        opened: impl Fn(&T) -> Option<&Prompted> + Send + Sync + 'static,
    ) -> Result<Decided<T>, ServiceError> {
        let decide = Arc::new(decide);
        // A keyed request's retry draws the same turn id, so it rebuilds the turn its first
        // attempt opened (see `service::idempotency`).
        let turn = match crate::service::idempotency::drawn("turn") {
            Some(bits) => format!("turn-{}", crate::domain::ids::hex(&bits)),
            None => format!("turn-{}", uuid::Uuid::now_v7().simple()),
        };
        let t = TurnRef {
            sid: sid.clone(),
            agent: agent.clone(),
            turn,
        };
        let opens = |s: &SessionState| {
            decide(s, &t.turn)
                .ok()
                .and_then(|(v, _)| opened(&v).map(|p| !p.steered && p.turn == t.turn))
                .unwrap_or(false)
        };
        let state = self.sessions.state(sid).await?;
        let tenant = state.terms.tenant.clone();
        let admitted = opens(&state);
        let (this, sid) = (self.clone(), sid.clone());
        self.detached(async move {
            // A decision that would open a turn counts against the tenant's running turns
            // first: over the quota, nothing is appended. Steering a running turn is never
            // refused.
            if admitted {
                this.limits.admit_turn(tenant.as_ref(), &t.member()).await?;
            }
            // The lease exists before the turn does: a crash right after the commit leaves a
            // lease that expires and gets adopted, never an open turn nobody will run.
            let (held, decided) = match this
                .leases
                .acquire(&t.member(), &this.owner, this.ttl_ms())
                .await
            {
                Ok(held) => {
                    let (decide, turn) = (decide.clone(), t.turn.clone());
                    let on_turn = move |s: &SessionState| decide(s, &turn);
                    (held, this.sessions.decide(&sid, on_turn).await)
                }
                Err(e) => (false, Err(e.into())),
            };
            let started = decided
                .as_ref()
                .ok()
                .and_then(|d| opened(&d.value))
                .is_some_and(|p| !p.steered && p.turn == t.turn);
            if admitted && !started {
                if let Err(e) = this.limits.end_turn(tenant.as_ref(), &t.member()).await {
                    tracing::warn!(error = %e, "releasing an unopened turn's quota failed; it expires");
                }
            }
            match &decided {
                // Its runner keeps it counted (also when it opened without an admission: the
                // agent looked busy, then its turn ended just before this one opened).
                _ if started && held => this.spawn_turn(t),
                // A keyed retry of a request whose first attempt opened the turn elsewhere:
                // the replica holding its lease runs it (or, gone, lets it expire for a sweep).
                _ if started => {}
                // An outage may have hidden a commit: keep the lease, so if a turn did open,
                // the sweeper adopts it when the lease expires (and releases it if none did).
                Err(ServiceError::Store(_)) => {}
                _ => this.leases.release(&t.member(), &this.owner).await?,
            }
            decided
        })
        .await
    }

    /// Closes a question (answer or dismiss) and continues its waiting turn here. The turn's
    /// lease is taken before the commit, so a crash in between leaves an expiring lease that
    /// another replica adopts, never a waiting turn nobody resumes; a replica that took the
    /// lease runs the turn whichever answer won.
    pub async fn close_question(
        self: &Arc<Self>,
        sid: &SessionId,
        qid: &str,
        decide: impl Fn(&SessionState) -> Result<(AgentId, Vec<NewEvent>), DomainError>
            + Send
            + Sync
            + 'static,
    ) -> Result<Decided<AgentId>, ServiceError> {
        let state = self.sessions.state(sid).await?;
        let turn = state.questions.get(qid).map(|q| TurnRef {
            sid: sid.clone(),
            agent: q.agent.clone(),
            turn: q.asked.turn.clone(),
        });
        let (this, sid) = (self.clone(), sid.clone());
        self.detached(async move {
            let mut leased = None;
            if let Some(t) = turn {
                // Held elsewhere: that runner is leaving and re-checks the log after it lets
                // go.
                if this
                    .leases
                    .acquire(&t.member(), &this.owner, this.ttl_ms())
                    .await?
                {
                    leased = Some(t);
                }
            }
            let decided = this.sessions.decide(&sid, decide).await;
            match (&decided, leased) {
                // An outage may have hidden a commit: the lease expires and a sweeper looks.
                (Err(ServiceError::Store(_)), _) | (_, None) => {}
                // Refused too (another answer won): the winner found this lease taken, so the
                // runner starts here all the same, and reads from the log what the turn does.
                (_, Some(t)) => this.spawn_turn(t),
            }
            decided
        })
        .await
    }

    /// Runs `work` (a turn's opening or resumption: a lease taken, a commit, a runner started)
    /// to its end as a task on the engine's runtime, and waits for it. A caller that goes away
    /// meanwhile (its client hung up) does not cut it short: otherwise a turn could open with
    /// its lease taken and no runner, and wait out the lease's ttl for a sweep. The task runs
    /// as the keyed request the caller runs, if any.
    async fn detached<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl Future<Output = Result<T, ServiceError>> + Send + 'static,
    ) -> Result<T, ServiceError> {
        let settling = Settling::new(self);
        let work = async move {
            let _settling = settling;
            work.await
        }
        // Its log lines keep the request's id.
        .instrument(tracing::Span::current());
        let task = match crate::service::idempotency::current() {
            Some(request) => self
                .runtime
                .spawn(crate::service::idempotency::run(request, work)),
            None => self.runtime.spawn(work),
        };
        match task.await {
            Ok(done) => done,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(ServiceError::Store(StoreError::Unavailable(
                "the replica is stopping".into(),
            ))),
        }
    }

    /// Ends the agent's running turn from any replica; the replica running it abandons the
    /// provider request when it sees the end in the log. Pending plan choices are kept.
    pub async fn cancel(
        &self,
        sid: &SessionId,
        agent: &AgentId,
    ) -> Result<Option<String>, ServiceError> {
        let agent = agent.clone();
        let done = self
            .sessions
            .decide(sid, move |s| {
                s.decide_end_turn(&agent, None, crate::domain::agent::reason::CANCELLED)
            })
            .await?;
        Ok(done.value)
    }
}
