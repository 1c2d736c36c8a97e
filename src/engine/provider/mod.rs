//! Model providers behind one trait: the OpenAI-compatible streaming client and the
//! deterministic fixture (the default, needing no key and no network).

use futures_util::future::BoxFuture;

use super::assembly::ModelRequest;
use crate::domain::event::ToolCall;

pub mod fixture;
pub mod openai;

/// What one step's request produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// Worth retrying with the same request (5xx, 429, a broken connection, a timeout).
    #[error("provider error (retryable): {0}")]
    Retryable(String),
    /// Retrying the same request will not help (4xx, an unreadable answer).
    #[error("provider error: {0}")]
    Fatal(String),
}

/// Receives assistant text as it streams.
pub type OnDelta<'a> = &'a (dyn Fn(&str) + Send + Sync);

pub trait ModelClient: Send + Sync + 'static {
    /// `fixture` or `openai`, as `/v1/status` reports it.
    fn name(&self) -> &'static str;

    /// Sends one step's frozen request and streams the answer. A retryable failure may be
    /// retried by calling again with the same request, which sends the same bytes.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_delta: OnDelta<'a>,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>>;

    /// Summarizes a conversation for compaction. By default: one more request asking for it.
    fn summarize<'a>(
        &'a self,
        messages: &'a [serde_json::Value],
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        Box::pin(async move {
            let mut messages: Vec<_> = messages.iter().cloned().map(std::sync::Arc::new).collect();
            messages.push(std::sync::Arc::new(
                serde_json::json!({"role": "user", "content": SUMMARY_REQUEST}),
            ));
            let request = ModelRequest {
                system: SUMMARY_SYSTEM.into(),
                messages,
                tools: serde_json::json!([]),
            };
            Ok(self.complete(&request, &|_| {}).await?.text)
        })
    }
}

const SUMMARY_SYSTEM: &str = "You compress conversations between a user and an AI agent.";
const SUMMARY_REQUEST: &str = "Summarize the conversation so far for your own later use: the \
user's goals, decisions made, the current plan if any, and open questions. Be complete but brief.";
