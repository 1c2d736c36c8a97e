//! Questions the agent asks the user: asked once, answered or dismissed once. The first
//! answer wins; anything after it is refused and appends nothing.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::event::{EventKind, Intent, QuestionAnswered, QuestionAsked, QuestionDismissed};
use super::session::{DomainError, SessionState};
use super::{AgentId, EventId, NewEvent};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum QuestionStatus {
    Open,
    Answered,
    Dismissed,
    /// Closed without an answer because its turn ended (e.g. cancelled).
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuestionState {
    pub agent: AgentId,
    pub asked: QuestionAsked,
    pub asked_at: EventId,
    pub state: QuestionStatus,
    pub answer: Option<QuestionAnswered>,
}

/// A question as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QuestionView {
    #[schema(example = "plan-review-7")]
    pub id: String,
    #[schema(value_type = String, example = "main")]
    pub agent: AgentId,
    pub state: QuestionStatus,
    /// Presentation hint; `{kind: "plan-review", approve: "Approve"}` for plan reviews.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent: Option<Intent>,
    pub title: String,
    /// Markdown from the model: untrusted, render it sanitized.
    pub detail: String,
    pub options: Vec<String>,
    pub allow_text: bool,
    /// The event that asked it.
    #[schema(value_type = String, example = "7-0")]
    pub asked_at: EventId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Answer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl QuestionState {
    pub fn view(&self) -> QuestionView {
        let q = &self.asked;
        QuestionView {
            id: q.id.clone(),
            agent: self.agent.clone(),
            state: self.state,
            intent: q.intent.clone(),
            title: q.title.clone(),
            detail: q.detail.clone(),
            options: q.options.clone(),
            allow_text: q.allow_text,
            asked_at: self.asked_at,
            answer: self.answer.as_ref().map(|a| Answer {
                label: a.label.clone(),
                text: a.text.clone(),
            }),
        }
    }
}

impl SessionState {
    fn open_question(&self, id: &str) -> Result<&QuestionState, DomainError> {
        let q = self
            .questions
            .get(id)
            .ok_or_else(|| DomainError::QuestionNotFound(id.to_owned()))?;
        if q.state != QuestionStatus::Open {
            return Err(DomainError::QuestionClosed {
                id: id.to_owned(),
                state: q.state,
            });
        }
        Ok(q)
    }

    /// Answers an open question with one of its labels, free text, or both.
    pub fn decide_answer(
        &self,
        id: &str,
        label: Option<String>,
        text: Option<String>,
        by: Option<String>,
    ) -> Result<(AgentId, Vec<NewEvent>), DomainError> {
        let q = self.open_question(id)?;
        let text = text.filter(|t| !t.trim().is_empty());
        if label.is_none() && text.is_none() {
            return Err(DomainError::EmptyAnswer);
        }
        if let Some(l) = &label {
            if !q.asked.options.contains(l) {
                return Err(DomainError::UnknownLabel {
                    label: l.clone(),
                    options: q.asked.options.clone(),
                });
            }
        }
        if text.is_some() && !q.asked.allow_text {
            return Err(DomainError::TextNotAllowed(id.to_owned()));
        }
        let answer = EventKind::QuestionAnswered(QuestionAnswered {
            id: id.to_owned(),
            label,
            text,
            by,
        });
        Ok((q.agent.clone(), vec![NewEvent::new(&q.agent, answer)]))
    }

    /// Dismisses an open question (the user closed it to talk instead).
    pub fn decide_dismiss(
        &self,
        id: &str,
        by: Option<String>,
    ) -> Result<(AgentId, Vec<NewEvent>), DomainError> {
        let q = self.open_question(id)?;
        let event = EventKind::QuestionDismissed(QuestionDismissed {
            id: id.to_owned(),
            by,
        });
        Ok((q.agent.clone(), vec![NewEvent::new(&q.agent, event)]))
    }
}
