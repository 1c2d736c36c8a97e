//! A mock OpenAI-compatible Chat Completions server on loopback (wiremock) that records every
//! request and answers with streamed SSE chunks.

use std::time::Duration;

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

pub struct MockProvider {
    pub server: MockServer,
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

/// A streamed text answer, split into a few chunks.
pub fn text_reply(text: &str) -> String {
    let mut body = String::new();
    for part in text.split_inclusive(' ') {
        body.push_str(&chunk(json!({"content": part}), None));
    }
    body.push_str(&chunk(json!({}), Some("stop")));
    body.push_str("data: [DONE]\n\n");
    body
}

/// A streamed `exit_plan_mode` call, its arguments split across chunks.
pub fn plan_call_reply(plan: &str) -> String {
    tool_call_reply("exit_plan_mode", &json!({ "plan": plan }), "call_1")
}

/// A streamed call of tool `name` with call id `id` (some servers name every call `call_0`).
pub fn tool_call_reply(name: &str, arguments: &Value, id: &str) -> String {
    let args = arguments.to_string();
    let (a, b) = args.split_at(args.len() / 2);
    let mut body = chunk(json!({"content": "Here is the plan."}), None);
    body.push_str(&chunk(json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": a}}]}), None));
    body.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
        None,
    ));
    body.push_str(&chunk(json!({}), Some("tool_calls")));
    body.push_str("data: [DONE]\n\n");
    body
}

impl MockProvider {
    pub async fn start() -> Self {
        Self {
            server: MockServer::start().await,
        }
    }

    pub fn url(&self) -> String {
        format!("{}/v1", self.server.uri())
    }

    /// A replica on `redis` that sends every step to this mock, with `adjust`ed settings.
    pub async fn replica(
        &self,
        redis: &crate::helpers::TestRedis,
        adjust: impl FnOnce(&mut dsh_plan::config::Settings),
    ) -> crate::helpers::TestApp {
        self.replica_named(redis, "a", adjust).await
    }

    /// [`Self::replica`] with replica id `id`.
    pub async fn replica_named(
        &self,
        redis: &crate::helpers::TestRedis,
        id: &str,
        adjust: impl FnOnce(&mut dsh_plan::config::Settings),
    ) -> crate::helpers::TestApp {
        let url = self.url();
        crate::helpers::spawn_with(Some(redis), id, move |s| {
            s.provider = "openai".into();
            s.provider_url = url;
            adjust(s);
        })
        .await
    }

    /// Answers the next request (only that one) with `body` after `delay`.
    pub async fn next(&self, body: String, delay: Duration) {
        self.answer(200, body, delay, Some(1)).await;
    }

    /// Answers every request not taken by a `next` answer.
    pub async fn otherwise(&self, body: String) {
        self.answer(200, body, Duration::ZERO, None).await;
    }

    pub async fn next_status(&self, status: u16, delay: Duration) {
        self.answer(status, "{\"error\":\"boom\"}".into(), delay, Some(1))
            .await;
    }

    async fn answer(&self, status: u16, body: String, delay: Duration, times: Option<u64>) {
        let template = ResponseTemplate::new(status)
            .insert_header("content-type", "text/event-stream")
            .set_body_string(body)
            .set_delay(delay);
        let mut mock = Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(template);
        // One-shot answers take precedence over the fallback.
        mock = match times {
            Some(n) => mock.up_to_n_times(n).with_priority(1),
            None => mock.with_priority(10),
        };
        mock.mount(&self.server).await;
    }

    /// Every request body received so far, in order.
    pub async fn requests(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }

    pub async fn raw_requests(&self) -> Vec<Vec<u8>> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.body)
            .collect()
    }

    /// Waits until `n` requests have arrived.
    pub async fn await_requests(&self, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while self
            .server
            .received_requests()
            .await
            .unwrap_or_default()
            .len()
            < n
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the provider never got request {n}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

pub fn system_of(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}
