//! Request assembly: what the provider receives for a step (DESIGN §2 "Request assembly").
//!
//! The system prompt is the registered sections sorted by `order`; `plan:policy` (order 50)
//! is present only while the step is in plan mode, so entering or leaving plan mode changes the
//! prompt from order 50 on and nothing before it. The tool list always holds `exit_plan_mode`
//! and serializes to the same bytes in both states (prompt-cache stability). History is the
//! agent's recorded messages before the step's header.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::domain::event::{SectionRef, StepStarted};
use crate::domain::plan::NOTIFICATION_SOURCE;
use crate::domain::{AgentId, EventKind, Recorded};

pub const PLAN_SECTION: &str = "plan:policy";
pub const PLAN_ORDER: u32 = 50;
pub use crate::domain::plan::EXIT_TOOL;

const BASE_PROMPT: &str = "You are dsh, an AI agent working with a user on their software \
project. Be accurate and concise, and say what you did and what you did not do.";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub order: u32,
    pub text: String,
}

/// The section registry: the product base, workspace instructions, and the plan policy.
#[derive(Clone, Debug)]
pub struct Prompting {
    sections: Vec<Section>,
    /// The `plan:policy` text; `None` when plan mode is not composed.
    plan_policy: Option<String>,
}

impl Prompting {
    /// `workspace_instructions`: the text of the workspace's `AGENTS.md`, if any.
    pub fn new(plan_policy: Option<String>, workspace_instructions: Option<String>) -> Self {
        let mut sections = vec![Section {
            name: "product:base".into(),
            order: 10,
            text: BASE_PROMPT.into(),
        }];
        if let Some(text) = workspace_instructions.filter(|t| !t.trim().is_empty()) {
            sections.push(Section {
                name: "workspace:instructions".into(),
                order: 100,
                text,
            });
        }
        Self {
            sections,
            plan_policy,
        }
    }

    /// Reads `AGENTS.md` from `dir`, if there is one.
    pub fn workspace_instructions(dir: Option<&str>) -> Option<String> {
        let path = std::path::Path::new(dir?).join("AGENTS.md");
        std::fs::read_to_string(path).ok()
    }

    pub fn plan_policy(&self) -> Option<&str> {
        self.plan_policy.as_deref()
    }

    /// The sections of a step, sorted by order.
    pub fn sections(&self, plan_active: bool) -> Vec<Section> {
        let mut out = self.sections.clone();
        if let (true, Some(text)) = (plan_active, &self.plan_policy) {
            out.push(Section {
                name: PLAN_SECTION.into(),
                order: PLAN_ORDER,
                text: text.clone(),
            });
        }
        out.sort_by_key(|s| s.order);
        out
    }

    /// The system prompt and the header's section list for a step.
    pub fn system(&self, plan_active: bool) -> (String, Vec<SectionRef>) {
        let sections = self.sections(plan_active);
        let text = sections
            .iter()
            .map(|s| s.text.trim_end())
            .collect::<Vec<_>>()
            .join("\n\n");
        let refs = sections
            .into_iter()
            .map(|s| SectionRef {
                name: s.name,
                order: s.order,
            })
            .collect();
        (text, refs)
    }
}

/// The tool list, identical in both plan states; empty when plan mode is not composed.
pub fn tools(plan_mode: bool) -> Value {
    if !plan_mode {
        return json!([]);
    }
    json!([{
        "type": "function",
        "function": {
            "name": EXIT_TOOL,
            "description": "Submit your complete plan for the user's review and leave plan mode \
                            once they approve it. Only works in plan mode.",
            "parameters": {
                "type": "object",
                "properties": {
                    "plan": { "type": "string", "description": "The complete plan, in Markdown." }
                },
                "required": ["plan"],
                "additionalProperties": false
            }
        }
    }])
}

pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn tools_hash(tools: &Value) -> String {
    sha256(tools.to_string().as_bytes())
}

/// A frozen step request: everything the provider receives except the model name.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    pub system: String,
    /// Chat messages after the system message, OpenAI-shaped.
    pub messages: Vec<Value>,
    pub tools: Value,
}

impl ModelRequest {
    /// The request for the step whose `step/started` is at `header_seq`: its frozen system
    /// prompt and the agent's messages recorded before it.
    pub fn for_step(
        events: &[Recorded],
        agent: &AgentId,
        header_seq: u64,
        step: &StepStarted,
        tools: Value,
    ) -> Self {
        Self {
            system: step.system.clone(),
            messages: history(events, agent, header_seq),
            tools,
        }
    }

    /// The OpenAI Chat Completions body; the same request always gives the same bytes.
    pub fn body(&self, model: &str) -> Value {
        let mut messages = vec![json!({"role": "system", "content": self.system})];
        messages.extend(self.messages.iter().cloned());
        let mut body = json!({ "model": model, "stream": true, "messages": messages });
        if self.tools.as_array().is_some_and(|t| !t.is_empty()) {
            body["tools"] = self.tools.clone();
        }
        body
    }

    pub fn hash(&self) -> String {
        sha256(self.body("").to_string().as_bytes())
    }
}

/// The agent's provider history before seq `before`: the latest snapshot's history for it (a
/// fork's copy or a compaction summary), then its recorded user, assistant and tool messages.
///
/// A user message recorded while a step was in flight or its tool calls were unanswered (a
/// steer, or a message sent during a review) is placed after that step's answer and results:
/// that is when the model reads it, and a request must not interleave a user message between
/// tool calls and their results.
pub fn history(events: &[Recorded], agent: &AgentId, before: u64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut deferred: Vec<Value> = Vec::new();
    let mut in_step = false;
    let mut open_calls: Vec<String> = Vec::new();
    for e in events.iter().take_while(|e| e.seq() < before) {
        if let Some(snapshot) = e.kind.snapshot() {
            out = snapshot
                .iter()
                .find(|a| &a.id == agent)
                .map(|a| a.history.clone())
                .unwrap_or_default();
            (deferred, in_step, open_calls) = (Vec::new(), false, Vec::new());
            continue;
        }
        if &e.agent != agent {
            continue;
        }
        match &e.kind {
            EventKind::StepStarted(_) => in_step = true,
            EventKind::TurnEnded(_) => {
                in_step = false;
                out.append(&mut deferred);
            }
            EventKind::UserMessage(m) => {
                let content = match m.source.as_deref() {
                    Some(src) if src == NOTIFICATION_SOURCE => format!("[{src}] {}", m.text),
                    _ => m.text.clone(),
                };
                let msg = json!({"role": "user", "content": content});
                if in_step || !open_calls.is_empty() {
                    deferred.push(msg);
                } else {
                    out.push(msg);
                }
            }
            EventKind::AssistantMessage(m) => {
                in_step = false;
                let mut msg = json!({"role": "assistant", "content": m.text});
                if !m.tool_calls.is_empty() {
                    msg["tool_calls"] = m
                        .tool_calls
                        .iter()
                        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                        .collect();
                }
                out.push(msg);
                open_calls = m.tool_calls.iter().map(|c| c.id.clone()).collect();
                if open_calls.is_empty() {
                    out.append(&mut deferred);
                }
            }
            EventKind::ToolResult(r) => {
                let content = if r.ok {
                    r.result.clone()
                } else {
                    json!({ "error": r.result })
                };
                out.push(json!({"role": "tool", "tool_call_id": r.call_id, "content": content.to_string()}));
                open_calls.retain(|id| id != &r.call_id);
                if open_calls.is_empty() {
                    out.append(&mut deferred);
                }
            }
            _ => {}
        }
    }
    out.append(&mut deferred);
    out
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
                    m.as_object_mut().map(|o| o.remove("tool_calls"));
                }
            }
            m
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_policy_sits_between_lower_and_higher_orders_only_while_active() {
        let p = Prompting::new(Some("POLICY".into()), Some("WORKSPACE".into()));
        let (on, refs) = p.system(true);
        let (off, _) = p.system(false);
        let names: Vec<_> = refs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["product:base", "plan:policy", "workspace:instructions"]
        );
        assert!(!off.contains("POLICY"));
        let cut = on.find("POLICY").unwrap();
        assert_eq!(
            &on[..cut],
            &off[..cut],
            "bytes before order 50 are identical"
        );
        assert!(on.ends_with("WORKSPACE") && off.ends_with("WORKSPACE"));
    }

    fn rec(seq: u64, kind: EventKind) -> Recorded {
        Recorded {
            id: crate::domain::EventId(seq),
            agent: AgentId::root(),
            kind,
            committed_at: 0,
            v: 1,
        }
    }

    fn user(text: &str) -> EventKind {
        EventKind::UserMessage(crate::domain::event::UserMessage {
            text: text.into(),
            source: None,
            steer: false,
        })
    }

    #[test]
    fn history_starts_from_the_latest_snapshot() {
        use crate::domain::event::{AgentSnapshot, SessionCompacted};
        let snapshot = EventKind::SessionCompacted(SessionCompacted {
            summary: "s".into(),
            created_at: 0,
            parent: None,
            agents: vec![AgentSnapshot {
                id: AgentId::root(),
                owner: None,
                active: false,
                pending: None,
                last_header_plan: None,
                history: vec![json!({"role": "user", "content": "[summary] earlier"})],
            }],
        });
        let events = vec![rec(1, user("old")), rec(2, snapshot), rec(3, user("new"))];
        let h = history(&events, &AgentId::root(), u64::MAX);
        assert_eq!(
            h,
            vec![
                json!({"role": "user", "content": "[summary] earlier"}),
                json!({"role": "user", "content": "new"})
            ]
        );
    }

    #[test]
    fn a_message_sent_during_a_step_or_review_follows_its_answer_and_results() {
        use crate::domain::event::{
            AssistantMessage, PlanMode, StepHeader, StepStarted, ToolCall, ToolResult,
        };
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
        let events = vec![
            rec(1, user("plan it")),
            rec(
                2,
                EventKind::StepStarted(StepStarted {
                    turn: "t".into(),
                    step: 1,
                    header,
                    system: String::new(),
                }),
            ),
            rec(3, user("during the step")),
            rec(
                4,
                EventKind::AssistantMessage(AssistantMessage {
                    turn: "t".into(),
                    step: 1,
                    text: "plan".into(),
                    tool_calls: vec![call],
                }),
            ),
            rec(5, user("during the review")),
            rec(
                6,
                EventKind::ToolResult(ToolResult {
                    turn: "t".into(),
                    call_id: "c1".into(),
                    name: "exit_plan_mode".into(),
                    ok: true,
                    result: json!({"approved": true}),
                }),
            ),
        ];
        let roles: Vec<String> = history(&events, &AgentId::root(), u64::MAX)
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool", "user", "user"]);
    }

    #[test]
    fn without_plan_mode_composed_no_state_adds_a_section() {
        let p = Prompting::new(None, None);
        assert_eq!(p.system(true), p.system(false));
    }
}
