//! Running one turn: read from the folded session what comes next and do it — the pre-step
//! and step, a retry, the tool calls (with the plan review), the end — each as a domain
//! decision committed through [`crate::service::Sessions::decide`].
//!
//! The runner keeps no events of its own. It reads the session through the replica's fold
//! cache (one range read past what the fold has seen), and a decision made on a view that the
//! log has left behind is made again on the newer state, or appends nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::assembly::ModelRequest;
use super::provider::{Completion, ProviderError};
use super::{Engine, Exit, TurnRef, TurnStop};
use crate::domain::event::frames::AssistantDelta;
use crate::domain::turn::StepRequest;
use crate::domain::{Next, SessionState, TenantId};
use crate::limits::LimitError;

impl Engine {
    pub(super) async fn run_turn(&self, t: &TurnRef, lost: &AtomicBool) -> Result<Exit, TurnStop> {
        let stopping = self.stopping.subscribe();
        let mut state = self.sessions.state(&t.sid).await?;
        let tenant = state.terms.tenant.clone();
        // Counted against the tenant's running turns while this runner works on it.
        let mut hold = None;
        // Whether this runner took a step of the turn, and whether it ended the turn itself.
        let (mut worked, mut ended_here) = (false, false);
        loop {
            if lost.load(Ordering::SeqCst) {
                return Err(TurnStop::LeaseLost);
            }
            if *stopping.borrow() {
                return Err(TurnStop::Stopping);
            }
            let (rules, agent, turn) = (self.rules, &t.agent, t.turn.as_str());
            let next = state.next(agent, turn, rules);
            if hold.is_none() && !matches!(next, Next::Closed | Next::Wait) {
                hold = Some(self.limits.hold_turn(tenant.clone(), t.member()));
            }
            if matches!(next, Next::Closed) && worked && !ended_here {
                // Ended elsewhere under this runner (a cancel): the replica that ended it may
                // have died before announcing the end to webhooks.
                if let Err(e) = self.sessions.announce_recent(&t.sid).await {
                    tracing::warn!(session = %t.sid, error = %e, "announcing a turn's end again failed");
                }
            }
            worked = true;
            state = match next {
                Next::Closed => return Ok(Exit::Closed),
                Next::Wait => return Ok(Exit::Waiting),
                Next::End { .. } => {
                    ended_here = true;
                    let on = t.clone();
                    let d = self
                        .sessions
                        .decide(&t.sid, move |s| s.decide_finish(&on.agent, &on.turn, rules));
                    d.await?.state
                }
                Next::RunTool(_) => {
                    let on = t.clone();
                    let d = self
                        .sessions
                        .decide(&t.sid, move |s| s.decide_tool(&on.agent, &on.turn, rules));
                    d.await?.state
                }
                Next::NewStep { step } => {
                    let (prompting, tools) = (self.prompting.clone(), self.tools.clone());
                    let frame = move |active: bool, approved: Option<&_>, messages: &_| {
                        prompting.frame(active, approved, messages, &tools)
                    };
                    let (on, replica) = (t.clone(), self.replica.clone());
                    let d = self.sessions.decide(&t.sid, move |s| {
                        s.decide_step(&on.agent, &on.turn, step, rules, &replica, &frame)
                    });
                    let d = d.await?;
                    match d.value {
                        Some(request) => {
                            let at = (step, 1);
                            self.run_step(t, at, request, tenant.as_ref(), lost).await?
                        }
                        None => d.state,
                    }
                }
                Next::Retry { step, attempt } => {
                    // Only the lease holder retries: a runner that slept through losing its
                    // lease must not take the step back from the replica that adopted it.
                    self.hold_lease(t).await?;
                    let (on, replica) = (t.clone(), self.replica.clone());
                    let d = self.sessions.decide(&t.sid, move |s| {
                        let at = (step, attempt);
                        s.decide_retry(&on.agent, &on.turn, at, rules, &replica)
                    });
                    let d = d.await?;
                    match d.value {
                        Some(request) => {
                            let at = (step, attempt);
                            self.run_step(t, at, request, tenant.as_ref(), lost).await?
                        }
                        None => d.state,
                    }
                }
            };
        }
    }

    /// Sends attempt `at` of a step's frozen request and records the answer (or the failure),
    /// unless the turn was cancelled or the attempt superseded meanwhile — then the request is
    /// abandoned. Returns the session as the recording left it.
    async fn run_step(
        &self,
        t: &TurnRef,
        at: (u32, u32),
        request: StepRequest,
        tenant: Option<&TenantId>,
        lost: &AtomicBool,
    ) -> Result<Arc<SessionState>, TurnStop> {
        let (agent, turn) = (&t.agent, t.turn.as_str());
        let frozen = request.assembly_hash;
        let request = ModelRequest {
            system: request.system,
            messages: request.messages,
            tools: (*self.tools).clone(),
        };
        if at.1 > 1 && request.hash() != frozen {
            tracing::error!(%turn, step = at.0, "the rebuilt request differs from the frozen assembly");
        }
        let on_delta = |text: &str| {
            let delta = AssistantDelta {
                turn,
                step: at.0,
                attempt: at.1,
                text,
            };
            self.deltas.send(&t.sid, agent, delta)
        };
        // Waiting for the tenant's provider-call window is part of the call: a cancel, a
        // lost lease or a stopping replica ends the wait like it ends a request in flight.
        let call = async {
            self.provider_slot(tenant, turn).await?;
            self.provider.complete(&request, &on_delta).await
        };
        tokio::pin!(call);
        let mut stopping = self.stopping.subscribe();
        let start = tokio::time::Instant::now() + self.timing.poll_every;
        let mut poll = tokio::time::interval_at(start, self.timing.poll_every);
        let outcome = loop {
            tokio::select! {
                result = &mut call => break result,
                _ = super::placement::stopped(&mut stopping) => return Err(TurnStop::Stopping),
                _ = poll.tick() => {
                    if lost.load(Ordering::SeqCst) {
                        return Err(TurnStop::LeaseLost);
                    }
                    let state = self.sessions.state(&t.sid).await?;
                    if !state.holds_attempt(agent, turn, at) {
                        tracing::info!(%turn, step = at.0, "the step was cancelled or taken over; request abandoned");
                        return match state.next(agent, turn, self.rules) {
                            Next::Closed => Ok(state),
                            // Another replica runs this turn now.
                            _ => Err(TurnStop::LeaseLost),
                        };
                    }
                }
            }
        };
        let decided = match outcome {
            Ok(Completion { text, tool_calls }) => {
                self.deltas.flush().await;
                let on = t.clone();
                let d = self.sessions.decide(&t.sid, move |s| {
                    let (text, calls) = (text.clone(), tool_calls.clone());
                    s.decide_model_answer(&on.agent, &on.turn, at, text, calls)
                });
                d.await?
            }
            Err(e) => {
                tracing::warn!(%turn, step = at.0, error = %e, "the provider failed; ending the turn");
                let on = t.clone();
                let d = self
                    .sessions
                    .decide(&t.sid, move |s| s.decide_failed(&on.agent, &on.turn, at));
                d.await?
            }
        };
        Ok(decided.state)
    }
}

/// The longest a step waits for its tenant's provider-call quota before it fails.
const QUOTA_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

impl Engine {
    /// Counts this step's provider call in its tenant's window, waiting (asleep) for the
    /// window to roll over while it is full — at most [`QUOTA_WAIT`], then the step fails.
    /// If the limits cannot be read, the call goes ahead: an outage of the count must not
    /// stop every turn.
    async fn provider_slot(
        &self,
        tenant: Option<&TenantId>,
        turn: &str,
    ) -> Result<(), ProviderError> {
        let deadline = tokio::time::Instant::now() + QUOTA_WAIT;
        loop {
            match self.limits.admit_provider_call(tenant).await {
                Ok(()) => return Ok(()),
                Err(LimitError::Quota(q)) => {
                    let wait = q.retry_after.unwrap_or(std::time::Duration::from_secs(1));
                    if tokio::time::Instant::now() + wait > deadline {
                        return Err(ProviderError::Fatal(q.detail()));
                    }
                    tracing::info!(%turn, wait_ms = wait.as_millis() as u64, tenant = %q.tenant, "provider-call quota used up; the step waits for the next window");
                    tokio::time::sleep(wait).await;
                }
                Err(LimitError::Store(e)) => {
                    tracing::warn!(%turn, error = %e, "the provider-call quota could not be checked; calling anyway");
                    return Ok(());
                }
            }
        }
    }
}
