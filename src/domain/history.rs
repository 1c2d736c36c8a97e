//! An agent's provider history, folded event by event: the OpenAI-shaped messages the model
//! reads, starting from the latest snapshot (a fork's copy or a compaction summary).
//!
//! It lives in the fold so a step's request is built from the folded state in O(history), never
//! by rescanning the log. A user message recorded while a step was in flight or its tool calls
//! were unanswered (a steer, or a message sent during a review) is deferred until that step's
//! answer and results: that is when the model reads it, and a request must not interleave a
//! user message between tool calls and their results.

use std::sync::Arc;

use serde_json::{json, Value};

use super::event::{AssistantMessage, EventKind, ToolResult, UserMessage};
use super::plan::NOTIFICATION_SOURCE;

/// One chat message, shared between folds (cloning a history is cheap).
pub type Message = Arc<Value>;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// What the next request sends after the system message.
    messages: imbl::Vector<Message>,
    /// User messages that wait for the current step's answer and results.
    deferred: Vec<Message>,
    /// A step was started and has no answer yet.
    in_step: bool,
    /// Tool calls of the last answer without a result yet.
    open_calls: Vec<String>,
    /// Approximate size in bytes, for the cache's weight.
    bytes: usize,
}

impl History {
    /// A history restored from a snapshot.
    pub fn restore(messages: &[Value]) -> Self {
        let mut h = Self::default();
        for m in messages {
            h.push(Arc::new(m.clone()));
        }
        h
    }

    /// The messages a request sends now (deferred messages wait for their step to finish).
    pub fn messages(&self) -> &imbl::Vector<Message> {
        &self.messages
    }

    /// Everything recorded, deferred messages last: what a fork or compaction keeps.
    pub fn all(&self) -> Vec<Value> {
        self.messages
            .iter()
            .chain(&self.deferred)
            .map(|m| (**m).clone())
            .collect()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn push(&mut self, m: Message) {
        self.bytes += weight(&m);
        self.messages.push_back(m);
    }

    fn flush(&mut self) {
        // Counted when deferred.
        self.messages.extend(std::mem::take(&mut self.deferred));
    }

    /// Folds one of the agent's events; events that carry no message only move the state.
    pub fn apply(&mut self, kind: &EventKind) {
        match kind {
            EventKind::StepStarted(_) => self.in_step = true,
            EventKind::TurnEnded(_) => {
                self.in_step = false;
                self.flush();
            }
            EventKind::UserMessage(m) => {
                let msg = Arc::new(user(m));
                if self.in_step || !self.open_calls.is_empty() {
                    self.bytes += weight(&msg);
                    self.deferred.push(msg);
                } else {
                    self.push(msg);
                }
            }
            EventKind::AssistantMessage(m) => {
                self.in_step = false;
                self.push(Arc::new(assistant(m)));
                self.open_calls = m.tool_calls.iter().map(|c| c.id.clone()).collect();
                if self.open_calls.is_empty() {
                    self.flush();
                }
            }
            EventKind::ToolResult(r) => {
                self.push(Arc::new(tool(r)));
                self.open_calls.retain(|id| id != &r.call_id);
                if self.open_calls.is_empty() {
                    self.flush();
                }
            }
            _ => {}
        }
    }
}

/// A rough size of a message in memory, without serializing it.
fn weight(v: &Value) -> usize {
    16 + match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(weight).sum(),
        Value::Object(o) => o.iter().map(|(k, v)| k.len() + weight(v)).sum(),
        _ => 0,
    }
}

fn user(m: &UserMessage) -> Value {
    let content = match m.source.as_deref() {
        Some(src) if src == NOTIFICATION_SOURCE => format!("[{src}] {}", m.text),
        _ => m.text.clone(),
    };
    json!({"role": "user", "content": content})
}

fn assistant(m: &AssistantMessage) -> Value {
    let mut msg = json!({"role": "assistant", "content": m.text});
    if !m.tool_calls.is_empty() {
        msg["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
    }
    msg
}

fn tool(r: &ToolResult) -> Value {
    let content = if r.ok {
        r.result.clone()
    } else {
        json!({ "error": r.result })
    };
    json!({"role": "tool", "tool_call_id": r.call_id, "content": content.to_string()})
}

/// Drops tool calls that never got a result (a fork taken mid-turn), so the history is a valid
/// request on its own.
pub fn well_formed(messages: Vec<Value>) -> Vec<Value> {
    let answered: std::collections::HashSet<String> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["tool_call_id"].as_str().map(str::to_owned))
        .collect();
    messages
        .into_iter()
        .map(|mut m| {
            if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                calls.retain(|c| c["id"].as_str().is_some_and(|id| answered.contains(id)));
                if calls.is_empty() {
                    if let Some(o) = m.as_object_mut() {
                        o.remove("tool_calls");
                    }
                }
            }
            m
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::{
        AssistantMessage, PlanMode, StepHeader, StepStarted, ToolCall, ToolResult,
    };

    fn user_msg(text: &str) -> EventKind {
        EventKind::UserMessage(UserMessage {
            text: text.into(),
            source: None,
            steer: false,
        })
    }

    fn roles(h: &History) -> Vec<String> {
        h.messages()
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn a_message_sent_during_a_step_or_review_follows_its_answer_and_results() {
        let header = StepHeader {
            plan: PlanMode { active: true },
            sections: vec![],
            tools_hash: String::new(),
            assembly_hash: String::new(),
            replica: String::new(),
        };
        let call = ToolCall {
            id: "c1".into(),
            name: "exit_plan_mode".into(),
            arguments: "{}".into(),
        };
        let mut h = History::default();
        h.apply(&user_msg("plan it"));
        h.apply(&EventKind::StepStarted(StepStarted {
            turn: "t".into(),
            step: 1,
            header,
            system: String::new(),
        }));
        h.apply(&user_msg("during the step"));
        assert_eq!(roles(&h), ["user"], "a steer waits for the step's answer");
        h.apply(&EventKind::AssistantMessage(AssistantMessage {
            turn: "t".into(),
            step: 1,
            text: "plan".into(),
            tool_calls: vec![call],
        }));
        h.apply(&user_msg("during the review"));
        assert_eq!(roles(&h), ["user", "assistant"]);
        h.apply(&EventKind::ToolResult(ToolResult {
            turn: "t".into(),
            call_id: "c1".into(),
            name: "exit_plan_mode".into(),
            ok: true,
            result: json!({"approved": true}),
        }));
        assert_eq!(roles(&h), ["user", "assistant", "tool", "user", "user"]);
        assert_eq!(h.messages()[3]["content"], "during the step");
        assert_eq!(h.messages()[4]["content"], "during the review");
    }

    #[test]
    fn a_restored_history_continues_after_the_snapshot() {
        let mut h = History::restore(&[json!({"role": "user", "content": "[summary] earlier"})]);
        h.apply(&user_msg("new"));
        let contents: Vec<&str> = h
            .messages()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(contents, ["[summary] earlier", "new"]);
    }
}
