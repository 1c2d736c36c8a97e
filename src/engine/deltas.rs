//! Assistant text deltas: streamed live to every replica's subscribers, never recorded.
//!
//! One publisher task per replica sends them in order. Before a runner records a step's answer
//! it flushes the publisher, so every delta of the step is published before the answer's
//! commit is: on any one stream the deltas of a step precede its `assistant/message`.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::domain::{AgentId, SessionId};
use crate::store::{Ephemeral, LiveBus, StepRef};

/// How long a runner waits for its deltas to go out before recording the answer anyway (the
/// live bus may be down; the recorded answer matters more than the order of ephemera).
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// The SSE event name of a delta.
pub const KIND: &str = "assistant/delta";

/// An assistant text delta as subscribers see it.
#[derive(Clone, Debug, Serialize)]
pub struct Delta<'a> {
    /// Always `assistant/delta`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: &'a str,
    pub agent: &'a str,
    pub turn: &'a str,
    pub step: u32,
    /// The step's attempt (1 for the first; a retried step streams its text again).
    pub attempt: u32,
    pub text: &'a str,
}

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
            kind: Arc::from(KIND),
        }
    }

    /// Publishes `delta` of the session `sid`, routed by its agent and step.
    pub fn send(&self, sid: &SessionId, agent: &AgentId, delta: &Delta<'_>) {
        let body = match serde_json::to_string(delta) {
            Ok(body) => body,
            Err(e) => return tracing::error!(error = %e, "a delta could not be serialized"),
        };
        let msg = Ephemeral {
            sid: sid.clone(),
            agent: agent.clone(),
            kind: self.kind.clone(),
            step: Some(StepRef {
                turn: delta.turn.to_owned(),
                step: delta.step,
                attempt: delta.attempt,
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
