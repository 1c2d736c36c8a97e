//! What a tool call returns to the model (`tool/result.result`): typed, so the spec publishes
//! the wire form and the code that builds results cannot drift from it. Recorded as JSON; a
//! result recorded before these types existed reads back as one of them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a tool call returned to the model: an approved plan review, or a failure with its
/// reason. Built from these types, so the schema is the wire form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ToolOutcome {
    Approved(ReviewApproved),
    Failed(ToolFailure),
}

/// `exit_plan_mode` after the user approved the plan: plan mode ends at the next step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewApproved {
    /// Always `true`.
    pub approved: bool,
    /// What the user wrote with the approval, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// Who decided: `key:<key id>` or `token:<subject>`; absent on an open server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
}

/// A failed call: why, and what the model is told to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolFailure {
    pub reason: FailureReason,
    /// The instruction the model reads.
    pub message: String,
    /// `rejected`: the user's feedback (their text, else the option they chose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// `rejected`: who decided, `key:<key id>` or `token:<subject>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
}

/// Why a tool call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FailureReason {
    /// `exit_plan_mode` outside plan mode: nothing to exit.
    Inactive,
    /// `exit_plan_mode` without `{plan: string}`.
    InvalidArguments,
    /// A child agent cannot open a plan review.
    Child,
    /// The review could not be shown (questions not composed, the turn ended): plan mode stays.
    Unavailable,
    /// The user chose Keep planning or wrote feedback.
    Rejected,
    /// The user closed the review to talk.
    Dismissed,
    /// The turn ended before the call ran.
    Cancelled,
    /// No tool of that name is registered.
    UnknownTool,
}

impl ToolOutcome {
    /// A failure with `reason` and `message`.
    pub fn failed(reason: FailureReason, message: impl Into<String>) -> Self {
        Self::Failed(ToolFailure {
            reason,
            message: message.into(),
            feedback: None,
            decided_by: None,
        })
    }

    /// The JSON the log records (a `tool/result`'s `result`).
    pub fn to_value(&self) -> serde_json::Value {
        // Strings, booleans and unit variants: as infallible as any `json!` literal.
        serde_json::json!(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_outcomes_keep_the_wire_form_older_logs_recorded() {
        let approved = ToolOutcome::Approved(ReviewApproved {
            approved: true,
            feedback: None,
            decided_by: Some("key:k1".into()),
        });
        assert_eq!(
            approved.to_value(),
            serde_json::json!({"approved": true, "decided_by": "key:k1"})
        );
        let failed = ToolOutcome::failed(FailureReason::InvalidArguments, "say it");
        assert_eq!(
            failed.to_value(),
            serde_json::json!({"reason": "invalid-arguments", "message": "say it"})
        );
        // A result recorded before these types existed reads back as one of them.
        let old = serde_json::json!({"reason": "rejected", "feedback": "more", "message": "m"});
        assert!(matches!(
            serde_json::from_value::<ToolOutcome>(old),
            Ok(ToolOutcome::Failed(ToolFailure {
                reason: FailureReason::Rejected,
                ..
            }))
        ));
    }
}
