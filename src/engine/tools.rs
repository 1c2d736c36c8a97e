//! Tools other than `exit_plan_mode` (whose review lives with the plan rules in
//! `domain::plan::review`): none are registered, so any other call fails.

use serde_json::{json, Value};

use crate::domain::event::ToolCall;

/// The failed result of a call to a tool that is not registered.
pub fn unknown(call: &ToolCall) -> (bool, Value) {
    (
        false,
        json!({"reason": "unknown-tool", "message": format!("no tool named `{}` is registered", call.name)}),
    )
}
