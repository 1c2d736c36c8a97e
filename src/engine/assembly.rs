//! Request assembly: what the provider receives for a step (DESIGN §2 "Request assembly").
//!
//! The system prompt is the registered sections sorted by `order`; `plan:policy` (order 50)
//! is present only while the step is in plan mode, so entering or leaving plan mode changes the
//! prompt from order 50 on and nothing before it. `plan:approved` (order 55) is the agent's
//! latest approved plan revision, in both plan states: it is folded from the log (and carried by
//! snapshots), so the plan the user agreed to stays in the model's context through compaction
//! and fork, and its text depends on the revision alone (byte-stable from step to step). The tool list always holds `exit_plan_mode`
//! and serializes to the same bytes in both states (prompt-cache stability). History is the
//! agent's folded history (`domain::history`) as the step's pre-step left it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::domain::event::SectionRef;
use crate::domain::history::Message;
use crate::domain::plan::revisions::Revision;
use crate::domain::turn::Framed;

pub const PLAN_SECTION: &str = "plan:policy";
pub const PLAN_ORDER: u32 = 50;
pub const APPROVED_SECTION: &str = "plan:approved";
pub const APPROVED_ORDER: u32 = 55;
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

    /// The sections of a step, sorted by order: `approved` is the agent's latest approved
    /// plan revision, kept whatever the plan state (when plan mode is composed).
    pub fn sections(&self, plan_active: bool, approved: Option<&Revision>) -> Vec<Section> {
        let mut out = self.sections.clone();
        if let (true, Some(text)) = (plan_active, &self.plan_policy) {
            out.push(Section {
                name: PLAN_SECTION.into(),
                order: PLAN_ORDER,
                text: text.clone(),
            });
        }
        if let (Some(r), Some(_)) = (approved, &self.plan_policy) {
            out.push(Section {
                name: APPROVED_SECTION.into(),
                order: APPROVED_ORDER,
                text: approved_section(r),
            });
        }
        out.sort_by_key(|s| s.order);
        out
    }

    /// Frames a step: its system prompt, sections and hashes, for the request that sends
    /// `messages` with `tools`.
    pub fn frame(
        &self,
        active: bool,
        approved: Option<&Revision>,
        messages: &imbl::Vector<Message>,
        tools: &Value,
    ) -> Framed {
        let (system, sections) = self.system(active, approved);
        let request = ModelRequest {
            system: system.as_str().into(),
            messages: messages.iter().cloned().collect(),
            tools: tools.clone(),
        };
        Framed {
            assembly_hash: request.hash(),
            system,
            sections,
            tools_hash: tools_hash(tools),
        }
    }

    /// The system prompt and the header's section list for a step.
    pub fn system(
        &self,
        plan_active: bool,
        approved: Option<&Revision>,
    ) -> (String, Vec<SectionRef>) {
        let sections = self.sections(plan_active, approved);
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

/// The `plan:approved` section of revision `r`: made of the revision alone, so every step
/// (and every replica) sends the same bytes for it. What the user said with the approval is
/// part of what they agreed to ("…but skip step 3"), and after a compaction this section is
/// the only place the model still reads it.
pub fn approved_section(r: &Revision) -> String {
    let mut section = format!(
        "The user approved this plan (revision {}, {}). Carry it out unless they ask for \
         something else or approve a newer plan.\n\n{}",
        r.number,
        r.digest,
        r.text.trim_end()
    );
    if let Some(said) = r
        .feedback
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        section.push_str("\n\nWith their approval the user said:\n\n");
        section.push_str(said);
    }
    section
}

/// One entry of the tool list, in OpenAI function-tool form: the schema `GET /v1/tools`
/// publishes (the list itself is built as JSON by [`tools`]; a test holds the two together).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionTool {
    /// Always `function`.
    #[serde(rename = "type")]
    #[schema(example = "function")]
    pub kind: String,
    pub function: FunctionSpec,
}

/// A tool's name, what it is for, and the JSON Schema of its arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    #[schema(example = "exit_plan_mode")]
    pub name: String,
    pub description: String,
    /// A JSON Schema (an object schema) of the call's arguments.
    #[schema(value_type = Object)]
    pub parameters: Value,
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

pub use crate::domain::plan::revisions::sha256_hex as sha256;

pub fn tools_hash(tools: &Value) -> String {
    sha256(tools.to_string().as_bytes())
}

/// A frozen step request: everything the provider receives except the model name.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    pub system: Arc<str>,
    /// Chat messages after the system message, OpenAI-shaped (shared with the fold).
    pub messages: Vec<Message>,
    pub tools: Value,
}

/// The Chat Completions body, serialized straight from the request (no copy of the history).
#[derive(Serialize)]
struct Body<'a> {
    messages: Messages<'a>,
    model: &'a str,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a Value>,
}

struct Messages<'a>(&'a ModelRequest);

impl Serialize for Messages<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.messages.len() + 1))?;
        seq.serialize_element(&json!({"role": "system", "content": &*self.0.system}))?;
        for m in &self.0.messages {
            seq.serialize_element(&**m)?;
        }
        seq.end()
    }
}

impl ModelRequest {
    /// The OpenAI Chat Completions body; the same request always gives the same bytes.
    pub fn body(&self, model: &str) -> Vec<u8> {
        let body = Body {
            messages: Messages(self),
            model,
            stream: true,
            tools: self
                .tools
                .as_array()
                .filter(|t| !t.is_empty())
                .map(|_| &self.tools),
        };
        // Strings and JSON values always serialize.
        serde_json::to_vec(&body).unwrap_or_else(|e| unreachable!("a request serializes: {e}"))
    }

    pub fn hash(&self) -> String {
        sha256(&self.body(""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_policy_sits_between_lower_and_higher_orders_only_while_active() {
        let p = Prompting::new(Some("POLICY".into()), Some("WORKSPACE".into()));
        let (on, refs) = p.system(true, None);
        let (off, _) = p.system(false, None);
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

    #[test]
    fn the_tool_list_has_the_published_shape() {
        let list: Vec<FunctionTool> = serde_json::from_value(tools(true)).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].kind, "function");
        assert_eq!(list[0].function.name, EXIT_TOOL);
        assert_eq!(list[0].function.parameters["type"], "object");
    }

    #[test]
    fn without_plan_mode_composed_no_state_adds_a_section() {
        let p = Prompting::new(None, None);
        assert_eq!(p.system(true, None), p.system(false, None));
        let approved = approved_revision();
        assert_eq!(p.system(true, Some(&approved)), p.system(false, None));
    }

    fn approved_revision() -> Revision {
        use crate::domain::plan::revisions::{digest, RevisionStatus};
        Revision {
            number: 2,
            digest: digest("# Plan\n\n1. Do it.\n"),
            text: "# Plan\n\n1. Do it.\n".into(),
            submitted_at: 1,
            turn: "turn-1".into(),
            step: 3,
            question: "plan-review-9".into(),
            status: RevisionStatus::Approved,
            feedback: None,
            decided_by: None,
            decided_at: Some(2),
        }
    }

    #[test]
    fn the_approved_plan_follows_plan_policy_in_both_plan_states_with_the_same_bytes() {
        let p = Prompting::new(Some("POLICY".into()), Some("WORKSPACE".into()));
        let approved = approved_revision();
        let (on, refs) = p.system(true, Some(&approved));
        let (off, off_refs) = p.system(false, Some(&approved));
        let names: Vec<_> = refs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "product:base",
                "plan:policy",
                "plan:approved",
                "workspace:instructions"
            ]
        );
        assert!(off_refs.iter().any(|r| r.name == APPROVED_SECTION));
        let section = approved_section(&approved);
        assert!(section.contains("revision 2") && section.contains(&approved.digest));
        assert!(on.contains(&section) && off.contains(&section));
        let (without, _) = p.system(false, None);
        let cut = off.find(&section).unwrap();
        assert_eq!(&off[..cut], &without[..cut], "nothing before it changes");
    }
}
