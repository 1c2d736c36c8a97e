//! Tool execution. `exit_plan_mode` is the only registered tool; until the review channel
//! exists its calls fail closed with `reason: "unavailable"`.

use serde_json::{json, Value};

use super::assembly::EXIT_TOOL;
use crate::domain::event::ToolCall;

/// The outcome of one tool call: `ok` and its result (for a failure, `{reason, message}`).
pub fn execute(call: &ToolCall) -> (bool, Value) {
    if call.name != EXIT_TOOL {
        return (
            false,
            json!({"reason": "unknown-tool", "message": format!("no tool named `{}` is registered", call.name)}),
        );
    }
    let plan = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|v| v["plan"].as_str().map(str::to_owned));
    if plan.is_none() {
        return (
            false,
            json!({"reason": "invalid-arguments", "message": "`exit_plan_mode` takes `{\"plan\": string}`"}),
        );
    }
    (
        false,
        json!({
            "reason": "unavailable",
            "message": "The plan review is not available here. Ask the user to switch plan mode off themselves (for example with `/plan off`) once they accept your plan."
        }),
    )
}
