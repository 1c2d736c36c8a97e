//! The fixture provider: deterministic, offline, and reading the same assembled request the
//! real provider would get. Its script (issue 3):
//! - last message is an `exit_plan_mode` result: approved → "Plan approved. Starting work.";
//!   rejected → a revised plan through `exit_plan_mode` quoting the feedback; any other failure
//!   → a short text;
//! - else, with `plan:policy` in the system prompt → a short text and an `exit_plan_mode` call
//!   whose Markdown plan quotes the user's last message;
//! - else → `Done: <last user text>`.

use std::borrow::Borrow;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{Completion, ModelClient, OnDelta, ProviderError};
use crate::domain::event::ToolCall;
use crate::engine::assembly::{ModelRequest, EXIT_TOOL};

pub struct Fixture {
    /// The plan policy text, to recognise a plan-mode request by its system prompt.
    plan_policy: Option<String>,
    token_delay: Duration,
}

impl Fixture {
    pub fn new(plan_policy: Option<String>, token_delay: Duration) -> Self {
        Self {
            plan_policy,
            token_delay,
        }
    }
}

fn last_user_text<M: Borrow<Value>>(messages: &[M]) -> String {
    messages
        .iter()
        .map(|m| -> &Value { m.borrow() })
        .rev()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .find(|t| !t.starts_with("[plugin:"))
        .unwrap_or("")
        .to_owned()
}

/// The name of the tool a `tool` message answers.
fn tool_name<'a, M: Borrow<Value>>(messages: &'a [M], call_id: &str) -> Option<&'a str> {
    messages
        .iter()
        .map(|m| -> &Value { m.borrow() })
        .rev()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .find(|c| c["id"] == call_id)?["function"]["name"]
        .as_str()
}

fn quote(text: &str) -> String {
    text.lines()
        .map(|l| format!("> {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn plan_call(id: String, plan: String) -> ToolCall {
    ToolCall {
        id,
        name: EXIT_TOOL.into(),
        arguments: json!({ "plan": plan }).to_string(),
    }
}

/// The script: the reply text and tool calls for a request.
pub fn script(request: &ModelRequest, plan_policy: Option<&str>) -> Completion {
    let messages = &request.messages;
    let call_id = format!("call-{}", messages.len());
    // Plugin notifications added by a pre-step are context, not the conversation's last turn.
    let last = messages.iter().rev().find(|m| {
        !(m["role"] == "user"
            && m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("[plugin:")))
    });
    if let Some(last) = last.filter(|m| m["role"] == "tool") {
        if tool_name(messages, last["tool_call_id"].as_str().unwrap_or("")) == Some(EXIT_TOOL) {
            let content: Value =
                serde_json::from_str(last["content"].as_str().unwrap_or("{}")).unwrap_or_default();
            if content["approved"] == true {
                return Completion {
                    text: "Plan approved. Starting work.".into(),
                    tool_calls: vec![],
                };
            }
            if content["error"]["reason"] == "rejected" {
                let feedback = content["error"]["feedback"].as_str().unwrap_or("");
                let plan = format!(
                    "# Revised plan\n\nReview feedback:\n\n{}\n\n## Steps\n\n1. Address the feedback above.\n2. {}\n",
                    quote(feedback),
                    "Verify the change with the tests."
                );
                return Completion {
                    text: "Revising the plan.".into(),
                    tool_calls: vec![plan_call(call_id, plan)],
                };
            }
            let reason = content["error"]["reason"].as_str().unwrap_or("failed");
            return Completion {
                text: format!("The plan review did not complete ({reason})."),
                tool_calls: vec![],
            };
        }
    }
    let user = last_user_text(messages);
    if plan_policy.is_some_and(|p| request.system.contains(p.trim_end())) {
        let plan = format!(
            "# Plan\n\nRequest:\n\n{}\n\n## Steps\n\n1. Inspect the code involved.\n2. Make the change.\n3. Verify it with the tests.\n",
            quote(&user)
        );
        return Completion {
            text: "Here is my plan.".into(),
            tool_calls: vec![plan_call(call_id, plan)],
        };
    }
    Completion {
        text: format!("Done: {user}"),
        tool_calls: vec![],
    }
}

impl ModelClient for Fixture {
    fn name(&self) -> &'static str {
        "fixture"
    }

    fn summarize<'a>(
        &'a self,
        messages: &'a [Value],
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        let last = last_user_text(messages);
        let summary = format!(
            "{} earlier messages. The last request was: {}",
            messages.len(),
            if last.is_empty() { "(none)" } else { &last }
        );
        Box::pin(async move { Ok(summary) })
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_delta: OnDelta<'a>,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>> {
        Box::pin(async move {
            let completion = script(request, self.plan_policy.as_deref());
            for token in completion.text.split_inclusive(' ') {
                tokio::time::sleep(self.token_delay).await;
                on_delta(token);
            }
            Ok(completion)
        })
    }
}
