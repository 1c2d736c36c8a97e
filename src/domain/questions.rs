//! Questions the agent asks the user: asked once, answered or dismissed once. The first
//! answer wins; anything after it is refused and appends nothing.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::event::{
    EventKind, Intent, OptionKind, QuestionAnswered, QuestionAsked, QuestionDismissed,
    QuestionOption, RevisionRef,
};
use super::plan::revisions::Named;
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
    /// The answers offered: answer with an option's `id`; its `kind` says what it means
    /// (`approve`, `keep_planning`, `other`), its `label` is display text.
    pub options: Vec<QuestionOption>,
    pub allow_text: bool,
    /// The event that asked it.
    #[schema(value_type = String, example = "7-0")]
    pub asked_at: EventId,
    /// For a plan review: the plan revision it decides (`GET …/agents/{agent}/plans/{number}`);
    /// name it in the answer (`revision`, or `If-Match` with the digest) to decide exactly it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<RevisionRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

/// How a question was answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Answer {
    /// The chosen option's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "keep_planning")]
    pub option: Option<String>,
    /// The chosen option's label as offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "Keep planning")]
    pub label: Option<String>,
    /// The free text sent with (or instead of) an option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Who answered: `key:<key id>` or `token:<subject>`; absent on an open server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "token:user-42")]
    pub by: Option<String>,
}

/// What a caller answers: an option id, free text, or both. `label` is the deprecated way to
/// name an option (matched against the offered labels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    pub option: Option<String>,
    pub label: Option<String>,
    pub text: Option<String>,
    /// The plan revision the answer says it decides.
    pub revision: Named,
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
            revision: q.revision.clone(),
            answer: self.answer.as_ref().map(|a| Answer {
                option: a.option.clone(),
                label: a.label.clone(),
                text: a.text.clone(),
                by: a.by.clone(),
            }),
        }
    }

    /// The offered option with this id.
    pub fn option(&self, id: &str) -> Option<&QuestionOption> {
        self.asked.options.iter().find(|o| o.id == id)
    }

    /// The kind of the option the answer chose (`None`: text only, or not answered).
    pub fn chosen_kind(&self) -> Option<OptionKind> {
        super::event::options::chosen_kind(&self.asked.options, self.answer.as_ref()?)
    }

    /// Records an answer, naming its option by id. An answer from a log older than option ids
    /// names it by label only: the option is found by that label. An id the question never
    /// offered is corruption.
    pub fn record_answer(&mut self, answered: &QuestionAnswered) -> Result<(), String> {
        let mut answer = answered.clone();
        match (&answer.option, &answer.label) {
            (Some(id), _) if self.option(id).is_none() => {
                return Err(format!(
                    "answer to question `{}` names option `{id}`, which it did not offer",
                    answer.id
                ))
            }
            (None, Some(label)) => {
                let found = self.asked.options.iter().find(|o| &o.label == label);
                answer.option = found.map(|o| o.id.clone());
            }
            _ => {}
        }
        self.answer = Some(answer);
        self.state = QuestionStatus::Answered;
        Ok(())
    }
}

/// At most this much of a caller's value is repeated in an error.
fn shown(s: &str) -> String {
    s.chars().take(80).collect()
}

impl SessionState {
    /// The open question `id`, once any plan revision the decision names is checked: a
    /// decision that names one is refused as superseded before it could be refused as late.
    fn open_question(&self, id: &str, named: &Named) -> Result<&QuestionState, DomainError> {
        let q = self
            .questions
            .get(id)
            .ok_or_else(|| DomainError::QuestionNotFound(id.to_owned()))?;
        self.check_revision(q, named)?;
        if q.state != QuestionStatus::Open {
            return Err(DomainError::QuestionClosed {
                id: id.to_owned(),
                state: q.state,
            });
        }
        Ok(q)
    }

    /// Refuses a decision on `q` that names a plan revision (by number or digest) unless it is
    /// the one `q` decides and that is still the agent's latest: a review decides exactly one
    /// revision, and a client that read another plan, or one a newer submission superseded,
    /// must not decide it. A decision that names none is not checked.
    fn check_revision(&self, q: &QuestionState, named: &Named) -> Result<(), DomainError> {
        if named.is_empty() {
            return Ok(());
        }
        let revisions = self.agents.get(&q.agent).map(|a| &a.revisions);
        let decides = revisions.and_then(|r| r.of_question(&q.asked.id));
        let latest = revisions.and_then(|r| r.latest()).map(|r| r.number);
        let current = decides.is_some_and(|r| Some(r.number) == latest);
        if current && named.matches(decides.map(|r| &**r)) {
            return Ok(());
        }
        Err(DomainError::RevisionSuperseded {
            question: q.asked.id.clone(),
            decides: decides.map(|r| (r.number, r.digest.clone())),
            latest: latest.filter(|_| !current),
            named: named.describe(),
        })
    }

    /// Answers an open question with one of its options (by id, or by label, the deprecated
    /// alias), free text, or both. The answer records the option's id and its label as offered.
    pub fn decide_answer(
        &self,
        id: &str,
        reply: Reply,
        by: Option<String>,
    ) -> Result<(AgentId, Vec<NewEvent>), DomainError> {
        let q = self.open_question(id, &reply.revision)?;
        let text = reply.text.filter(|t| !t.trim().is_empty());
        let by_label = |label: &str| {
            q.asked
                .options
                .iter()
                .find(|o| o.label == label)
                .ok_or_else(|| DomainError::UnknownLabel {
                    label: shown(label),
                    options: q.asked.options.iter().map(|o| o.label.clone()).collect(),
                })
        };
        let chosen = match (reply.option.as_deref(), reply.label.as_deref()) {
            (Some(option), label) => {
                let o = q.option(option).ok_or_else(|| DomainError::UnknownOption {
                    option: shown(option),
                    options: q.asked.options.iter().map(|o| o.id.clone()).collect(),
                })?;
                // Both given must name the same option: an answer is never ambiguous.
                if let Some(label) = label.filter(|l| *l != o.label) {
                    return Err(DomainError::LabelMismatch {
                        label: shown(label),
                        option: o.id.clone(),
                    });
                }
                Some(o)
            }
            (None, Some(label)) => Some(by_label(label)?),
            (None, None) => None,
        };
        if chosen.is_none() && text.is_none() {
            return Err(DomainError::EmptyAnswer);
        }
        if text.is_some() && !q.asked.allow_text {
            return Err(DomainError::TextNotAllowed(id.to_owned()));
        }
        let answer = EventKind::QuestionAnswered(QuestionAnswered {
            id: id.to_owned(),
            option: chosen.map(|o| o.id.clone()),
            label: chosen.map(|o| o.label.clone()),
            text,
            by,
        });
        Ok((q.agent.clone(), vec![NewEvent::new(&q.agent, answer)]))
    }

    /// Dismisses an open question (the user closed it to talk instead), if it decides the plan
    /// revision `named` names.
    pub fn decide_dismiss(
        &self,
        id: &str,
        named: &Named,
        by: Option<String>,
    ) -> Result<(AgentId, Vec<NewEvent>), DomainError> {
        let q = self.open_question(id, named)?;
        let event = EventKind::QuestionDismissed(QuestionDismissed {
            id: id.to_owned(),
            by,
        });
        Ok((q.agent.clone(), vec![NewEvent::new(&q.agent, event)]))
    }
}
