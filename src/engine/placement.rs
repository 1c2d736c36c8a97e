//! Where a turn runs: per-turn leases, the sweeper that adopts turns whose replica died or
//! handed them over, the runner task with its lease renewal, and the hand-over when this
//! replica stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Engine, Exit, TurnStop};
use crate::domain::{AgentId, Next, SessionId};
use crate::service::ServiceError;

/// One turn, named in leases as `<session> <agent> <turn>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct TurnRef {
    pub(super) sid: SessionId,
    pub(super) agent: AgentId,
    pub(super) turn: String,
}

impl TurnRef {
    pub(super) fn member(&self) -> String {
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

impl Engine {
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
        self.wait_until(grace, |e| e.running_turns() == 0).await;
    }

    /// The last wait before the process ends (its server stopped): [`Engine::stop`], and also
    /// for the turn openings and runners' re-checks still under way (whose callers may be
    /// gone), which may start a runner yet; that runner hands its turn over at once. Waits up
    /// to `grace` in all.
    pub async fn finish(&self, grace: Duration) {
        self.stopping.send_replace(true);
        self.wait_until(grace, |e| {
            e.running_turns() == 0 && e.settling.load(Ordering::SeqCst) == 0
        })
        .await;
    }

    async fn wait_until(&self, grace: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + grace;
        while !done(self) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Claims expired leases, a batch per round trip, until none are left (or one sweep's
    /// share is reached): a replica that stops hands over all its turns at once.
    ///
    /// A stopping replica claims nothing more, and `finish` waits for a round between its
    /// claim and its runners' start: what it claimed is handed over, not left to lapse.
    async fn sweep(self: &Arc<Self>) {
        for _ in 0..SWEEP_ROUNDS {
            if *self.stopping.borrow() {
                return;
            }
            let _settling = Settling::new(self);
            let claimed = self
                .leases
                .claim_expired(&self.owner, self.ttl_ms(), SWEEP_BATCH)
                .await;
            match claimed {
                Ok(members) if members.is_empty() => return,
                Ok(members) => {
                    let more = members.len() == SWEEP_BATCH;
                    self.adopt(members).await;
                    if !more {
                        return;
                    }
                }
                Err(e) => return tracing::warn!(error = %e, "lease sweep failed"),
            }
        }
    }

    async fn adopt(self: &Arc<Self>, members: Vec<String>) {
        for member in members {
            match TurnRef::parse(&member) {
                Some(t) => {
                    tracing::info!(session = %t.sid, agent = %t.agent, turn = %t.turn, "adopting a turn whose lease expired");
                    // Its replica may have died between a commit and announcing it to webhooks.
                    if let Err(e) = self.sessions.announce_recent(&t.sid).await {
                        tracing::warn!(session = %t.sid, error = %e, "announcing the adopted turn's events again failed");
                    }
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

    pub(super) fn spawn_turn(self: &Arc<Self>, t: TurnRef) {
        let member = t.member();
        if !self.running().insert(member.clone()) {
            return;
        }
        let engine = self.clone();
        self.runtime.spawn(async move {
            // Leaves the running set however the runner ends, a panic included.
            let _running = Running(&engine, &member);
            let lost = Arc::new(AtomicBool::new(false));
            let renew = AbortOnDrop(engine.clone().keep_lease(member.clone(), lost.clone()));
            let run = std::panic::AssertUnwindSafe(engine.run_turn(&t, &lost));
            let result = match futures_util::FutureExt::catch_unwind(run).await {
                Ok(result) => result,
                // A bug, not an outage: adopting the turn again would panic again, forever.
                Err(_) => {
                    tracing::error!(%member, "the turn runner panicked; ending the turn as failed");
                    engine.fail_turn(&t).await
                }
            };
            drop(renew);
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
                Err(TurnStop::Service(ServiceError::SessionNotFound(_))) => {
                    tracing::info!(%member, "the session was deleted or expired; the turn stops");
                    engine.leases.release(&member, &engine.owner).await
                }
                // Its log cannot be folded: adopting it again would fail the same way, forever.
                Err(TurnStop::Service(e)) => {
                    tracing::error!(%member, error = %e, "turn runner stopped for good");
                    engine.leases.release(&member, &engine.owner).await
                }
            };
            if let Err(e) = let_go {
                tracing::warn!(%member, error = %e, "letting go of the lease failed; it expires");
            }
            // Counted as settling from before it leaves the running set until its re-check
            // is done, so the last wait before the process ends (`finish`) covers both.
            let settling = Settling::new(&engine);
            drop(_running);
            if matches!(result, Ok(Exit::Waiting)) {
                // An answer that landed while we were leaving found the lease taken: look
                // once more, now that it is free.
                engine.recheck(t).await;
            }
            drop(settling);
        });
    }

    /// Renews `t`'s lease now; [`TurnStop::LeaseLost`] when another replica holds it.
    pub(super) async fn hold_lease(&self, t: &TurnRef) -> Result<(), TurnStop> {
        match self
            .leases
            .renew(&t.member(), &self.owner, self.ttl_ms())
            .await?
        {
            true => Ok(()),
            false => Err(TurnStop::LeaseLost),
        }
    }

    /// Ends a turn whose runner failed by a bug (it panicked).
    async fn fail_turn(&self, t: &TurnRef) -> Result<Exit, TurnStop> {
        let failed = crate::domain::agent::reason::FAILED;
        let (agent, turn) = (t.agent.clone(), t.turn.clone());
        let end =
            move |s: &crate::domain::SessionState| s.decide_end_turn(&agent, Some(&turn), failed);
        self.sessions.decide(&t.sid, end).await?;
        Ok(Exit::Closed)
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
/// Leases one sweep claims per round trip, and round trips per sweep.
const SWEEP_BATCH: usize = 64;
const SWEEP_ROUNDS: usize = 16;

/// Aborts the task when dropped: a lease is renewed only while its runner lives.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves once the engine is stopping.
pub(super) async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
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

/// Counts work that may start a runner yet in [`Engine::settling`] while it lives.
pub(super) struct Settling(Arc<Engine>);

impl Settling {
    pub(super) fn new(engine: &Arc<Engine>) -> Self {
        engine.settling.fetch_add(1, Ordering::SeqCst);
        Self(engine.clone())
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        self.0.settling.fetch_sub(1, Ordering::SeqCst);
    }
}
