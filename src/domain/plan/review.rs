//! The `exit_plan_mode` review table (DESIGN §2): the only model-initiated way out of plan
//! mode is a plan the user approves through a question with the `plan-review` intent.

use serde_json::Value;

use super::revisions::{digest, Close};
use super::{decide_set, EXIT_TOOL};
use crate::domain::agent::OpenCall;
use crate::domain::event::options::{APPROVE, KEEP_PLANNING};
use crate::domain::event::{
    EventKind, FailureReason, Intent, OptionKind, QuestionAsked, QuestionOption, ReviewApproved,
    RevisionRef, ToolCall, ToolFailure, ToolOutcome,
};
use crate::domain::questions::QuestionStatus;
use crate::domain::{AgentId, SessionState};

pub const REVIEW_KIND: &str = "plan-review";

/// What an `exit_plan_mode` call does next.
#[derive(Clone, Debug, PartialEq)]
pub enum ReviewStep {
    /// Open the review question.
    Ask(QuestionAsked),
    /// The question is open: the turn waits (holding no replica).
    Wait,
    /// Record the tool result, then these events (e.g. the queued exit after an approval).
    Done {
        ok: bool,
        result: Value,
        then: Vec<EventKind>,
    },
}

fn failed(reason: FailureReason, message: String) -> ReviewStep {
    ReviewStep::Done {
        ok: false,
        result: ToolOutcome::failed(reason, message).to_value(),
        then: vec![],
    }
}

const UNAVAILABLE: &str = "The plan review could not be shown to the user. Stay in plan mode and \
ask the user to switch plan mode off themselves (for example with `/plan off`) once they accept \
your plan.";

/// Each row of the review table, for one open call of `agent` in `turn`. `questions`: whether
/// the question channel is composed. The question is the one this call occurrence asked
/// (never looked up by the provider's call id, which some servers reuse).
pub fn review(
    state: &SessionState,
    agent: &AgentId,
    turn: &str,
    open: &OpenCall,
    questions: bool,
) -> ReviewStep {
    let call = &open.call;
    let Some(a) = state.agents.get(agent) else {
        return failed(FailureReason::Unavailable, UNAVAILABLE.into());
    };
    if !a.plan.active {
        return failed(
            FailureReason::Inactive,
            "Plan mode is not active, so there is nothing to exit. Carry on with the task.".into(),
        );
    }
    let plan = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|v| v["plan"].as_str().map(str::to_owned));
    let Some(plan) = plan else {
        return failed(
            FailureReason::InvalidArguments,
            format!("`{EXIT_TOOL}` takes {{\"plan\": string}} with the complete plan in Markdown."),
        );
    };
    if a.owner.is_some() {
        return failed(
            FailureReason::Child,
            "You are a child agent and cannot open a plan review. Put the undecided decision and \
             your plan in your final result for the agent that owns you."
                .into(),
        );
    }
    if !questions {
        return failed(FailureReason::Unavailable, UNAVAILABLE.into());
    }
    let asked = open.question.as_ref().and_then(|q| state.questions.get(q));
    let Some(q) = asked else {
        // The plan this review decides, numbered after the agent's earlier submissions.
        let revision = RevisionRef {
            number: a.revisions.next_number(),
            digest: digest(&plan),
        };
        return ReviewStep::Ask(QuestionAsked {
            id: format!("{REVIEW_KIND}-{}", state.seq + 1),
            intent: Some(Intent {
                kind: REVIEW_KIND.into(),
                approve: APPROVE.1.into(),
            }),
            title: "Review the plan".into(),
            detail: plan,
            options: vec![
                QuestionOption::new(APPROVE.0, OptionKind::Approve, APPROVE.1),
                QuestionOption::new(KEEP_PLANNING.0, OptionKind::KeepPlanning, KEEP_PLANNING.1),
            ],
            allow_text: true,
            turn: turn.to_owned(),
            call_id: call.id.clone(),
            revision: Some(revision),
        });
    };
    match (q.state, q.answer.as_ref()) {
        (QuestionStatus::Open, _) => ReviewStep::Wait,
        // Decided by the chosen option's kind: no label, however worded, changes the outcome.
        (QuestionStatus::Answered, Some(ans)) if q.chosen_kind() == Some(OptionKind::Approve) => {
            // Leaving is queued for the next step's pre-step; this batch is not rewritten.
            let (_, exit) = decide_set(a.plan.view(), true, false);
            let result = ToolOutcome::Approved(ReviewApproved {
                approved: true,
                // What the user said with the approval is for the model too.
                feedback: ans.text.clone(),
                decided_by: ans.by.clone(),
            });
            ReviewStep::Done { ok: true, result: result.to_value(), then: exit.into_iter().collect() }
        }
        (QuestionStatus::Answered, ans) => {
            // The same feedback the revision records as `revising`.
            let feedback = ans
                .and_then(|a| Close::answered(q.chosen_kind(), a).feedback)
                .unwrap_or_else(|| KEEP_PLANNING.1.into());
            let result = ToolOutcome::Failed(ToolFailure {
                reason: FailureReason::Rejected,
                message: "The user did not approve the plan. Stay in plan mode, revise the plan with their feedback and submit it again with `exit_plan_mode`.".into(),
                feedback: Some(feedback),
                decided_by: ans.and_then(|a| a.by.clone()),
            });
            ReviewStep::Done {
                ok: false,
                result: result.to_value(),
                then: vec![],
            }
        }
        (QuestionStatus::Dismissed, _) => failed(
            FailureReason::Dismissed,
            "The user closed the review to talk to you. Stay in plan mode and wait for their message.".into(),
        ),
        (QuestionStatus::Aborted, _) => failed(FailureReason::Unavailable, UNAVAILABLE.into()),
    }
}

/// The result of a call still open when its turn ends (cancelled or failed): a review fails
/// closed as `unavailable`; any other call as `cancelled`.
pub fn aborted(call: &ToolCall, reason: &str) -> (bool, Value) {
    let outcome = if call.name == EXIT_TOOL {
        ToolOutcome::failed(FailureReason::Unavailable, UNAVAILABLE)
    } else {
        ToolOutcome::failed(
            FailureReason::Cancelled,
            format!("The turn ended ({reason}) before this call ran."),
        )
    };
    (false, outcome.to_value())
}
