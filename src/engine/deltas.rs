//! Assistant text deltas: streamed live to every replica's subscribers, never recorded.
//!
//! One publisher task per replica sends them in order. Before a runner records a step's answer
//! it flushes the publisher, so every delta of the step is published before the answer's
//! commit is: on any one stream the deltas of a step precede its `assistant/message`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::domain::event::frames::{AssistantDelta, Frame, ASSISTANT_DELTA};
use crate::domain::{AgentId, SessionId};
use crate::store::{Ephemeral, LiveBus, StepRef};

/// How long a runner waits for its deltas to go out before recording the answer anyway (the
/// live bus may be down; the recorded answer matters more than the order of ephemera).
const FLUSH_WAIT: Duration = Duration::from_secs(2);

enum Message {
    Publish(Ephemeral),
    Flush(oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct Publisher {
    tx: mpsc::UnboundedSender<Message>,
    kind: Arc<str>,
}

impl Publisher {
    pub fn start(live: Arc<dyn LiveBus>) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                match msg {
                    Message::Publish(msg) => {
                        if let Err(e) = live.publish(msg).await {
                            tracing::debug!(error = %e, "a delta was not published");
                        }
                    }
                    Message::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        Self {
            tx,
            kind: Arc::from(ASSISTANT_DELTA),
        }
    }

    /// Publishes `delta` of `agent` in the session `sid`, routed by its agent and step.
    pub fn send(&self, sid: &SessionId, agent: &AgentId, delta: AssistantDelta<'_>) {
        let (turn, step, attempt) = (delta.turn.to_owned(), delta.step, delta.attempt);
        let frame = Frame {
            kind: ASSISTANT_DELTA,
            session: sid,
            agent: Some(agent),
            id: None,
            data: delta,
        };
        let body = match serde_json::to_string(&frame) {
            Ok(body) => body,
            Err(e) => return tracing::error!(error = %e, "a delta could not be serialized"),
        };
        let msg = Ephemeral {
            sid: sid.clone(),
            agent: agent.clone(),
            kind: self.kind.clone(),
            step: Some(StepRef {
                turn,
                step,
                attempt,
            }),
            body: body.into(),
        };
        // The publisher lives as long as the runtime; a closed channel means shutdown.
        let _ = self.tx.send(Message::Publish(msg));
    }

    /// Waits until every delta sent before this call has been published.
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).is_ok()
            && tokio::time::timeout(FLUSH_WAIT, flushed).await.is_err()
        {
            tracing::warn!("deltas were not published in time; recording the answer anyway");
        }
    }
}
