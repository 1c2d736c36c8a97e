//! An OpenAI-compatible Chat Completions client with `stream: true`: SSE chunks are parsed,
//! text deltas forwarded, tool-call deltas assembled by index. The key comes from the
//! environment and is never logged (this type has no `Debug`); every error text leaves through
//! [`scrub`], with the key and the URL's own credentials as known secrets, because a gateway
//! may echo the request (its `Authorization` header, its URL) into an error body.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::Value;

use super::{Completion, ModelClient, OnDelta, ProviderError};
use crate::domain::event::ToolCall;
use crate::engine::assembly::ModelRequest;
use crate::redact::{scrub, secrets_in_url};

pub struct OpenAi {
    http: reqwest::Client,
    url: String,
    key: Option<String>,
    /// What error texts are scrubbed of: the key and the URL's userinfo and query secrets.
    secrets: Vec<String>,
    model: String,
    /// Attempts after the first for retryable failures, with exponential backoff.
    retries: u32,
    backoff: Duration,
}

impl OpenAi {
    pub fn new(url: &str, key: Option<String>, model: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(Duration::from_secs(60))
            .build()?;
        let key = key.filter(|k| !k.is_empty());
        let mut secrets = secrets_in_url(url);
        secrets.extend(key.clone());
        Ok(Self {
            http,
            url: completions_url(url),
            key,
            secrets,
            model: model.to_owned(),
            retries: 3,
            backoff: Duration::from_millis(200),
        })
    }

    async fn attempt(
        &self,
        body: &bytes::Bytes,
        on_delta: OnDelta<'_>,
    ) -> Result<Completion, ProviderError> {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body.clone());
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        let res = req.send().await.map_err(|e| {
            ProviderError::Retryable(self.scrub(&format!("request failed: {}", e.without_url())))
        })?;
        let status = res.status();
        if !status.is_success() {
            let text = match res.text().await {
                Ok(text) => text,
                Err(e) => format!("(the body could not be read: {})", e.without_url()),
            };
            let msg = self.scrub(&format!("{status}: {text}"));
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                ProviderError::Retryable(msg)
            } else {
                ProviderError::Fatal(msg)
            });
        }
        let mut stream = res.bytes_stream();
        let mut buf = Vec::new();
        let mut acc = Accumulator::default();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ProviderError::Retryable(self.scrub(&format!("stream broke: {}", e.without_url())))
            })?;
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let line = String::from_utf8_lossy(&line);
                let Some(data) = line.trim_end().strip_prefix("data:") else {
                    continue;
                };
                let data = data.trim_start();
                if data == "[DONE]" {
                    return Ok(acc.finish());
                }
                let v: Value = serde_json::from_str(data)
                    .map_err(|e| ProviderError::Fatal(format!("bad chunk: {e}")))?;
                acc.feed(&v, on_delta)?;
            }
        }
        // Some servers end the stream without `[DONE]`; a finish reason means it was complete.
        if acc.finished {
            Ok(acc.finish())
        } else {
            Err(ProviderError::Retryable("stream ended early".into()))
        }
    }

    /// Error text from the provider or the HTTP stack, safe to log and to store.
    fn scrub(&self, text: &str) -> String {
        let known: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        scrub(text, &known)
    }
}

/// `…/chat/completions` under the base URL, its query (e.g. a gateway's `?api-version=`)
/// kept at the end where it belongs.
fn completions_url(base: &str) -> String {
    let (path, query) = base.split_at(base.find('?').unwrap_or(base.len()));
    format!("{}/chat/completions{query}", path.trim_end_matches('/'))
}

/// Tool calls one answer may make; a provider naming a higher index is broken.
const MAX_TOOL_CALLS: usize = 64;
/// Bytes of text and tool arguments one answer may stream.
const MAX_ANSWER_BYTES: usize = 8 << 20;

#[derive(Default)]
struct Accumulator {
    /// Bytes accumulated so far.
    bytes: usize,
    text: String,
    calls: Vec<(String, String, String)>,
    finished: bool,
}

impl Accumulator {
    fn feed(&mut self, chunk: &Value, on_delta: OnDelta<'_>) -> Result<(), ProviderError> {
        let Some(choice) = chunk["choices"].get(0) else {
            return Ok(());
        };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.count(t.len())?;
            self.text.push_str(t);
            on_delta(t);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = call["index"].as_u64().unwrap_or(self.calls.len() as u64);
            let i = usize::try_from(i)
                .ok()
                .filter(|i| *i < MAX_TOOL_CALLS)
                .ok_or_else(|| {
                    ProviderError::Fatal(format!(
                        "tool call index {i} (an answer may make {MAX_TOOL_CALLS} calls)"
                    ))
                })?;
            let len = |v: &Value| v.as_str().map_or(0, str::len);
            self.count(len(&call["id"]) + len(&call["function"]["name"]))?;
            self.count(len(&call["function"]["arguments"]))?;
            if self.calls.len() <= i {
                self.calls.resize(i + 1, Default::default());
            }
            let slot = &mut self.calls[i];
            if let Some(id) = call["id"].as_str() {
                slot.0.push_str(id);
            }
            if let Some(name) = call["function"]["name"].as_str() {
                slot.1.push_str(name);
            }
            if let Some(args) = call["function"]["arguments"].as_str() {
                slot.2.push_str(args);
            }
        }
        if !choice["finish_reason"].is_null() {
            self.finished = true;
        }
        Ok(())
    }

    fn count(&mut self, bytes: usize) -> Result<(), ProviderError> {
        self.bytes += bytes;
        if self.bytes > MAX_ANSWER_BYTES {
            return Err(ProviderError::Fatal(format!(
                "the answer exceeds {MAX_ANSWER_BYTES} bytes"
            )));
        }
        Ok(())
    }

    fn finish(self) -> Completion {
        let tool_calls = self
            .calls
            .into_iter()
            .filter(|c| !c.1.is_empty())
            .map(|(id, name, arguments)| ToolCall {
                id,
                name,
                arguments,
            })
            .collect();
        Completion {
            text: self.text,
            tool_calls,
        }
    }
}

impl ModelClient for OpenAi {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_delta: OnDelta<'a>,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>> {
        Box::pin(async move {
            // Serialized once: every attempt sends exactly these bytes.
            let body = bytes::Bytes::from(request.body(&self.model));
            let mut attempt = 0;
            loop {
                match self.attempt(&body, on_delta).await {
                    Err(ProviderError::Retryable(e)) if attempt < self.retries => {
                        tracing::warn!(attempt, error = %e, "provider request failed; retrying the same request");
                        tokio::time::sleep(self.backoff * 2u32.pow(attempt)).await;
                        attempt += 1;
                    }
                    other => return other,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_completions_path_goes_before_the_base_urls_query() {
        assert_eq!(
            completions_url("http://h/v1/"),
            "http://h/v1/chat/completions"
        );
        assert_eq!(
            completions_url("http://h/v1?api-version=2024"),
            "http://h/v1/chat/completions?api-version=2024"
        );
    }
}
