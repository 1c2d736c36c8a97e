//! Running one turn: the loop that reads from the log what comes next and does it — the
//! pre-step and step, tool calls (with the plan review), and the end — plus the runner's own
//! copy of the session log.

use std::collections::HashSet;
use std::sync::Arc;

use super::assembly::{history, tools_hash, ModelRequest};
use super::provider::Completion;
use super::{tools, Delta, Engine, Exit, TurnRef, TurnStop};
use crate::domain::event::{
    AssistantMessage, PlanMode, StepHeader, StepRetried, StepStarted, ToolCall, ToolResult,
};
use crate::domain::plan::review::{review, ReviewStep};
use crate::domain::plan::{decide_prestep, EXIT_TOOL};
use crate::domain::turn::{current_attempt, next_action, Next};
use crate::domain::{EventKind, NewEvent, Recorded, SessionId, SessionState};
use crate::store::{stamp, Append, Ephemeral, EventLog, StepRef};

impl Engine {
    pub(super) async fn run_turn(
        &self,
        t: &TurnRef,
        lost: &std::sync::atomic::AtomicBool,
    ) -> Result<Exit, TurnStop> {
        let mut tx = Transcript::load(self.log.clone(), t.sid.clone()).await?;
        loop {
            if lost.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(TurnStop::LeaseLost);
            }
            tx.refresh().await?;
            match next_action(&tx.events, &t.agent, &t.turn) {
                Next::Closed => return Ok(Exit::Closed),
                Next::End => {
                    tx.commit(|tx| {
                        (next_action(&tx.events, &t.agent, &t.turn) == Next::End)
                            .then(|| {
                                tx.state
                                    .decide_end_turn(&t.agent, Some(&t.turn), "completed")
                                    .ok()
                            })
                            .flatten()
                            .map(|(_, events)| ((), events))
                    })
                    .await?;
                }
                Next::NewStep { step } => {
                    let committed = tx
                        .commit(|tx| {
                            (next_action(&tx.events, &t.agent, &t.turn) == Next::NewStep { step })
                                .then(|| self.prestep(tx, t, step))
                        })
                        .await?;
                    if let Some((request, _)) = committed {
                        self.run_step(&mut tx, t, step, 1, request, lost).await?;
                    }
                }
                Next::Retry {
                    step,
                    attempt,
                    header_seq,
                    started,
                } => {
                    let retried = StepRetried {
                        turn: t.turn.clone(),
                        step,
                        attempt,
                        replica: self.replica.clone(),
                        reason: "resumed".into(),
                    };
                    let committed = tx
                        .commit(|tx| {
                            let still = matches!(next_action(&tx.events, &t.agent, &t.turn), Next::Retry { step: s, attempt: a, .. } if s == step && a == attempt);
                            still.then(|| ((), vec![NewEvent::new(&t.agent, EventKind::StepRetried(retried.clone()))]))
                        })
                        .await?;
                    if committed.is_some() {
                        let request = ModelRequest::for_step(
                            &tx.events,
                            &t.agent,
                            header_seq,
                            &started,
                            self.tools.clone(),
                        );
                        if request.hash() != started.header.assembly_hash {
                            tracing::error!(turn = %t.turn, step, "the rebuilt request differs from the frozen assembly");
                        }
                        self.run_step(&mut tx, t, step, attempt, request, lost)
                            .await?;
                    }
                }
                Next::RunTools { calls } => {
                    if self.run_tools(&mut tx, t, calls).await? == Some(Exit::Waiting) {
                        return Ok(Exit::Waiting);
                    }
                }
            }
        }
    }

    /// Runs the answer's open tool calls in order; `Some(Waiting)` when a review waits on the
    /// user.
    async fn run_tools(
        &self,
        tx: &mut Transcript,
        t: &TurnRef,
        calls: Vec<ToolCall>,
    ) -> Result<Option<Exit>, TurnStop> {
        for call in calls {
            // Decided afresh on every attempt of the append, so what is committed (a question
            // id, a queued exit) always fits the log it lands on.
            let decide = |tx: &Transcript| -> Option<(ReviewStep, Vec<NewEvent>)> {
                let agent = tx.state.agents.get(&t.agent)?;
                let open = agent.open_calls.iter().any(|c| c.id == call.id);
                if !open || agent.turn.as_deref() != Some(t.turn.as_str()) {
                    return None;
                }
                let step = if call.name == EXIT_TOOL && !self.tools_is_empty() {
                    review(&tx.state, &t.agent, &t.turn, &call, self.questions)
                } else {
                    let (ok, result) = tools::unknown(&call);
                    ReviewStep::Done {
                        ok,
                        result,
                        then: vec![],
                    }
                };
                let events = match &step {
                    ReviewStep::Wait => vec![],
                    ReviewStep::Ask(q) => {
                        vec![NewEvent::new(&t.agent, EventKind::QuestionAsked(q.clone()))]
                    }
                    ReviewStep::Done { ok, result, then } => {
                        let r = ToolResult {
                            turn: t.turn.clone(),
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            ok: *ok,
                            result: result.clone(),
                        };
                        let mut events = vec![NewEvent::new(&t.agent, EventKind::ToolResult(r))];
                        events.extend(then.iter().cloned().map(|k| NewEvent::new(&t.agent, k)));
                        events
                    }
                };
                Some((step, events))
            };
            match tx.commit(decide).await? {
                Some((ReviewStep::Wait, _)) => return Ok(Some(Exit::Waiting)),
                Some((ReviewStep::Done { .. }, _)) => {}
                // A question was asked (the next read finds it waiting), or someone else moved
                // the turn on: re-read what comes next from the log.
                Some((ReviewStep::Ask(_), _)) | None => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The pre-step: commit the pending choice, notify if the state differs from the last
    /// header, freeze the request and record its header — all in one atomic append.
    fn prestep(&self, tx: &Transcript, t: &TurnRef, step: u32) -> (ModelRequest, Vec<NewEvent>) {
        let agent = &tx.state.agents[&t.agent];
        let (active, plan_events) = decide_prestep(agent.plan, agent.last_header_plan);
        let mut events: Vec<NewEvent> = plan_events
            .into_iter()
            .map(|k| NewEvent::new(&t.agent, k))
            .collect();
        let (system, sections) = self.prompting.system(active);
        // History: what is recorded, then what this append adds before the header.
        let mut messages = history(&tx.events, &t.agent, u64::MAX);
        messages.extend(history(
            &stamp(&events, tx.state.seq + 1, 0),
            &t.agent,
            u64::MAX,
        ));
        let request = ModelRequest {
            system: system.clone(),
            messages,
            tools: self.tools.clone(),
        };
        let header = StepHeader {
            plan: PlanMode { active },
            sections,
            tools_hash: tools_hash(&self.tools),
            assembly_hash: request.hash(),
            replica: self.replica.clone(),
        };
        events.push(NewEvent::new(
            &t.agent,
            EventKind::StepStarted(StepStarted {
                turn: t.turn.clone(),
                step,
                header,
                system,
            }),
        ));
        (request, events)
    }

    /// Sends a step's frozen request and records the answer, unless the turn was cancelled
    /// or another replica took the step over meanwhile.
    async fn run_step(
        &self,
        tx: &mut Transcript,
        t: &TurnRef,
        step: u32,
        attempt: u32,
        request: ModelRequest,
        lost: &std::sync::atomic::AtomicBool,
    ) -> Result<(), TurnStop> {
        let deltas = self.deltas.clone();
        let kind: Arc<str> = Arc::from("assistant/delta");
        let at = StepRef {
            turn: t.turn.clone(),
            step,
            attempt,
        };
        let on_delta = move |text: &str| {
            let delta = Delta {
                kind: "assistant/delta",
                session: t.sid.to_string(),
                agent: t.agent.to_string(),
                turn: at.turn.clone(),
                step,
                attempt,
                text: text.to_owned(),
            };
            match serde_json::to_string(&delta) {
                Ok(body) => {
                    let _ = deltas.send(Ephemeral {
                        sid: t.sid.clone(),
                        agent: t.agent.clone(),
                        kind: kind.clone(),
                        step: Some(at.clone()),
                        body: body.into(),
                    });
                }
                Err(e) => tracing::warn!(error = %e, "a delta could not be serialized"),
            }
        };
        let call = self.provider.complete(&request, &on_delta);
        tokio::pin!(call);
        let mut poll = tokio::time::interval(self.timing.poll_every);
        let outcome = loop {
            tokio::select! {
                result = &mut call => break result,
                _ = poll.tick() => {
                    if lost.load(std::sync::atomic::Ordering::SeqCst) {
                        return Err(TurnStop::LeaseLost);
                    }
                    tx.refresh().await?;
                    if next_action(&tx.events, &t.agent, &t.turn) == Next::Closed {
                        tracing::info!(turn = %t.turn, step, "turn ended while its step ran; request aborted");
                        return Ok(());
                    }
                }
            }
        };
        let mine = |tx: &Transcript| {
            next_action(&tx.events, &t.agent, &t.turn) != Next::Closed
                && current_attempt(&tx.events, &t.agent, &t.turn).is_some_and(|a| {
                    a.step == step
                        && a.attempt == attempt
                        && a.replica == self.replica
                        && !a.answered
                })
        };
        match outcome {
            Ok(Completion { text, tool_calls }) => {
                let message = AssistantMessage {
                    turn: t.turn.clone(),
                    step,
                    text,
                    tool_calls: unique_call_ids(tool_calls, &t.turn, step),
                };
                tx.commit(|tx| {
                    mine(tx).then(|| {
                        (
                            (),
                            vec![NewEvent::new(
                                &t.agent,
                                EventKind::AssistantMessage(message.clone()),
                            )],
                        )
                    })
                })
                .await?;
            }
            Err(e) => {
                tracing::warn!(turn = %t.turn, step, error = %e, "the provider failed; ending the turn");
                tx.commit(|tx| {
                    mine(tx)
                        .then(|| {
                            tx.state
                                .decide_end_turn(&t.agent, Some(&t.turn), "failed")
                                .ok()
                        })
                        .flatten()
                        .map(|(_, events)| ((), events))
                })
                .await?;
            }
        }
        Ok(())
    }
}

/// Tool-call ids as recorded: unique within the answer and never empty (some compatible
/// servers omit them), so every result names exactly one call.
fn unique_call_ids(calls: Vec<ToolCall>, turn: &str, step: u32) -> Vec<ToolCall> {
    let mut seen = HashSet::new();
    calls
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            if c.id.is_empty() || !seen.insert(c.id.clone()) {
                c.id = format!("call-{}-{step}-{i}", turn.trim_start_matches("turn-"));
                seen.insert(c.id.clone());
            }
            c
        })
        .collect()
}

/// A turn runner's own copy of one session log and its fold, caught up on demand.
pub(super) struct Transcript {
    pub(super) log: Arc<dyn EventLog>,
    pub(super) sid: SessionId,
    pub(super) events: Vec<Recorded>,
    pub(super) state: SessionState,
}

impl Transcript {
    pub(super) async fn load(log: Arc<dyn EventLog>, sid: SessionId) -> Result<Self, TurnStop> {
        let mut tx = Self {
            log,
            sid,
            events: Vec::new(),
            state: SessionState::default(),
        };
        tx.refresh().await?;
        Ok(tx)
    }

    fn apply(&mut self, events: Vec<Recorded>) -> Result<(), TurnStop> {
        for e in events {
            if e.seq() <= self.state.seq {
                continue;
            }
            self.state.evolve(&e)?;
            self.events.push(e);
        }
        Ok(())
    }

    async fn refresh(&mut self) -> Result<(), TurnStop> {
        loop {
            let batch = self.log.read(&self.sid, self.state.seq, 10_000).await?;
            let done = batch.len() < 10_000;
            self.apply(batch)?;
            if done {
                return Ok(());
            }
        }
    }

    /// Appends what `decide` returns on the current log; on a conflict, catches up and asks
    /// again. `None` from `decide` means there is nothing (left) to do.
    async fn commit<T>(
        &mut self,
        mut decide: impl FnMut(&Self) -> Option<(T, Vec<NewEvent>)>,
    ) -> Result<Option<(T, Vec<Recorded>)>, TurnStop> {
        loop {
            let Some((value, events)) = decide(self) else {
                return Ok(None);
            };
            match self.log.append(&self.sid, self.state.seq, &events).await? {
                Append::Committed(recorded) => {
                    self.apply(recorded.clone())?;
                    return Ok(Some((value, recorded)));
                }
                Append::Conflict { head, missing } => {
                    self.apply(missing)?;
                    if self.state.seq < head {
                        self.refresh().await?;
                    }
                }
            }
        }
    }
}
