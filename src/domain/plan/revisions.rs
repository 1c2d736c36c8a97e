//! Plan revisions: every `exit_plan_mode` submission that opens a plan review is a numbered
//! revision of its agent's plan (1, 2, … per agent), with the digest of its text, the step that
//! submitted it, and what became of it — `pending` while its review is open, then `approved`,
//! `revising` (with the feedback), `dismissed` or `unavailable` (its turn ended first, or a
//! fork copied it without its open review).
//!
//! A revision is exactly one review question's subject, and follows that question: the fold
//! closes it when the question closes. Revisions are carried by snapshots (fork, compaction),
//! so the history survives both, and the latest approved one is what request assembly keeps in
//! the model's context.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use super::review::REVIEW_KIND;
use crate::domain::event::options::KEEP_PLANNING;
use crate::domain::event::{
    EventKind, OptionKind, QuestionAnswered, QuestionAsked, QuestionDismissed, RevisionRef,
};
use crate::domain::questions::{QuestionState, QuestionStatus};
use crate::domain::Recorded;

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A plan text's digest as revisions name it: `sha256:<hex>`.
pub fn digest(text: &str) -> String {
    format!("sha256:{}", sha256_hex(text.as_bytes()))
}

/// What became of a revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RevisionStatus {
    /// Its review is open.
    Pending,
    /// The user approved it.
    Approved,
    /// The user sent it back with feedback (Keep planning, or free text).
    Revising,
    /// The user closed the review to talk instead.
    Dismissed,
    /// Never decided: its turn ended first (e.g. cancelled), or a fork copied it without its
    /// open review.
    Unavailable,
}

/// One submission of a plan: the API's view, the snapshot's record and the fold's state alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Revision {
    /// 1 for the agent's first submission, then 2, …
    #[schema(minimum = 1, example = 2)]
    pub number: u32,
    /// `sha256:` and the hex SHA-256 of `text`: send it as `If-Match: "<digest>"` to decide
    /// exactly this revision.
    #[schema(example = "sha256:9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e")]
    pub digest: String,
    /// The plan as the model submitted it: Markdown, untrusted (render it sanitized).
    #[schema(value_type = String)]
    pub text: Arc<str>,
    /// When it was submitted (the commit time of its review question).
    #[serde(with = "crate::domain::event::rfc3339_ms")]
    #[schema(value_type = String, example = "2026-12-02T10:23:53.123Z")]
    pub submitted_at: u64,
    /// The turn that submitted it.
    pub turn: String,
    /// The step (1-based, within the turn) whose answer submitted it.
    #[schema(minimum = 1, example = 2)]
    pub step: u32,
    /// The review question that decides it.
    #[schema(example = "plan-review-7")]
    pub question: String,
    pub status: RevisionStatus,
    /// What the user said with the decision: the feedback of `revising`, the text sent with an
    /// approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// Who decided: `key:<key id>` or `token:<subject>`; absent on an open server, and for
    /// `pending` and `unavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "token:user-42")]
    pub decided_by: Option<String>,
    /// When it was decided (or became unavailable); absent while pending.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::domain::event::rfc3339_ms_opt"
    )]
    #[schema(value_type = Option<String>, example = "2026-12-02T10:25:02.456Z")]
    pub decided_at: Option<u64>,
}

impl Revision {
    /// The reference a review question records.
    pub fn reference(&self) -> RevisionRef {
        RevisionRef {
            number: self.number,
            digest: self.digest.clone(),
        }
    }

    fn closed(&self, close: Close, at: Option<u64>) -> Self {
        Self {
            status: close.status,
            feedback: close.feedback,
            decided_by: close.by,
            decided_at: at,
            ..self.clone()
        }
    }
}

/// How a review's close decides its revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    pub status: RevisionStatus,
    pub feedback: Option<String>,
    pub by: Option<String>,
}

impl Close {
    /// An answer: approved by the chosen option's kind (never by its wording); anything else
    /// sends the plan back, with the text, else the option's label, as its feedback — what the
    /// model reads in the review's tool result.
    pub fn answered(kind: Option<OptionKind>, answer: &QuestionAnswered) -> Self {
        let (status, feedback) = match kind {
            Some(OptionKind::Approve) => (RevisionStatus::Approved, answer.text.clone()),
            _ => {
                let feedback = answer.text.clone().or_else(|| answer.label.clone());
                let feedback = feedback.unwrap_or_else(|| KEEP_PLANNING.1.into());
                (RevisionStatus::Revising, Some(feedback))
            }
        };
        Self {
            status,
            feedback,
            by: answer.by.clone(),
        }
    }

    /// What `e` makes of the revision `question` decides (after the fold recorded it in the
    /// question), if it closes that question.
    pub fn of(e: &EventKind, question: &QuestionState) -> Option<Self> {
        let by_event = match e {
            EventKind::QuestionDismissed(QuestionDismissed { by, .. }) => by.clone(),
            _ => None,
        };
        let (status, feedback, by) = match (question.state, &question.answer) {
            (QuestionStatus::Open, _) => return None,
            (QuestionStatus::Answered, Some(a)) => {
                return Some(Self::answered(question.chosen_kind(), a))
            }
            (QuestionStatus::Answered, None) => (RevisionStatus::Revising, None, None),
            (QuestionStatus::Dismissed, _) => (RevisionStatus::Dismissed, None, by_event),
            (QuestionStatus::Aborted, _) => (RevisionStatus::Unavailable, None, None),
        };
        Some(Self {
            status,
            feedback,
            by,
        })
    }
}

/// Which plan revision a decision says it decides: by number (`revision` in an answer), by
/// digest (`If-Match`), or both. Nothing named: whichever revision the review decides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    pub number: Option<u32>,
    /// Any of these digests (`If-Match` may list several); `Some(empty)` matches nothing.
    pub digests: Option<Vec<String>>,
}

impl Named {
    /// Whether the decision names no revision at all.
    pub fn is_empty(&self) -> bool {
        self.number.is_none() && self.digests.is_none()
    }

    /// Whether `decides` (the revision a review decides, if it decides one) is the one named.
    pub fn matches(&self, decides: Option<&Revision>) -> bool {
        let number = self
            .number
            .is_none_or(|n| decides.is_some_and(|r| r.number == n));
        let digest = self
            .digests
            .as_ref()
            .is_none_or(|ds| decides.is_some_and(|r| ds.contains(&r.digest)));
        number && digest
    }

    /// The revision named, in words.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.number {
            parts.push(format!("revision {n}"));
        }
        match self.digests.as_deref() {
            Some([]) => parts.push("an If-Match without a strong digest".into()),
            Some([one]) => parts.push(format!("digest {}", shown(one))),
            Some(many) => parts.push(format!(
                "digests {}",
                many.iter().map(|d| shown(d)).collect::<Vec<_>>().join(", ")
            )),
            None => {}
        }
        parts.join(" and ")
    }
}

/// At most this much of a caller's value is repeated in an error.
fn shown(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Whether `q` is a plan review (and so submits a revision).
pub fn is_review(q: &QuestionAsked) -> bool {
    q.intent.as_ref().is_some_and(|i| i.kind == REVIEW_KIND)
}

/// An agent's revisions, oldest first. Shared between folds: a submission or a decision copies
/// the list of pointers (a few per agent), never a plan's text; none costs one word.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Revisions(Option<Arc<Vec<Arc<Revision>>>>);

impl Revisions {
    pub fn all(&self) -> &[Arc<Revision>] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Revision `number`, if it exists.
    pub fn get(&self, number: u32) -> Option<&Arc<Revision>> {
        let i = usize::try_from(number).ok()?.checked_sub(1)?;
        self.all().get(i)
    }

    pub fn latest(&self) -> Option<&Arc<Revision>> {
        self.all().last()
    }

    /// The latest approved revision: the plan the user agreed to.
    pub fn approved(&self) -> Option<&Arc<Revision>> {
        self.all()
            .iter()
            .rev()
            .find(|r| r.status == RevisionStatus::Approved)
    }

    /// The revision review question `qid` decides.
    pub fn of_question(&self, qid: &str) -> Option<&Arc<Revision>> {
        self.all().iter().rev().find(|r| r.question == qid)
    }

    /// What the next submission will be numbered.
    pub fn next_number(&self) -> u32 {
        u32::try_from(self.all().len()).map_or(u32::MAX, |n| n.saturating_add(1))
    }

    /// From a snapshot's records.
    pub fn restore(records: &[Revision]) -> Self {
        if records.is_empty() {
            return Self::default();
        }
        Self(Some(Arc::new(
            records.iter().cloned().map(Arc::new).collect(),
        )))
    }

    /// The records a snapshot carries. A fork (`open_reviews: false`) copies no open question,
    /// so a pending revision can never be decided there: it is `unavailable` in the fork.
    pub fn snapshot(&self, open_reviews: bool) -> Vec<Revision> {
        self.all()
            .iter()
            .map(|r| match r.status {
                RevisionStatus::Pending if !open_reviews => r.closed(
                    Close {
                        status: RevisionStatus::Unavailable,
                        feedback: None,
                        by: None,
                    },
                    None,
                ),
                _ => (**r).clone(),
            })
            .collect()
    }

    fn list(&mut self) -> &mut Vec<Arc<Revision>> {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }

    /// Follows one of the agent's events, after the fold recorded it in `questions`: a review
    /// asked submits the next revision (of step `step`); a review closed decides the pending
    /// one. A review that records another revision than the one it submits is corruption.
    pub(crate) fn evolve(
        &mut self,
        e: &Recorded,
        questions: &imbl::OrdMap<String, Arc<QuestionState>>,
        step: Option<u32>,
    ) -> Result<(), String> {
        if let EventKind::QuestionAsked(q) = &e.kind {
            if !is_review(q) {
                return Ok(());
            }
            let number = self.next_number();
            let digest = match &q.revision {
                Some(r) if r.number != number => {
                    return Err(format!(
                        "question `{}` records plan revision {}, but it submits revision {number}",
                        q.id, r.number
                    ))
                }
                Some(r) => r.digest.clone(),
                // Logs older than revisions record none: the fold derives it.
                None => digest(&q.detail),
            };
            self.list().push(Arc::new(Revision {
                number,
                digest,
                text: q.detail.as_str().into(),
                submitted_at: e.committed_at,
                turn: q.turn.clone(),
                step: step.unwrap_or_default(),
                question: q.id.clone(),
                status: RevisionStatus::Pending,
                feedback: None,
                decided_by: None,
                decided_at: None,
            }));
            return Ok(());
        }
        // Only the latest can be pending: the next review opens after this one closed.
        let Some(last) = self
            .latest()
            .filter(|r| r.status == RevisionStatus::Pending)
        else {
            return Ok(());
        };
        let closed = questions
            .get(&last.question)
            .and_then(|q| Close::of(&e.kind, q));
        if let Some(close) = closed {
            let decided = Arc::new(last.closed(close, Some(e.committed_at)));
            if let Some(slot) = self.list().last_mut() {
                *slot = decided;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "revisions_tests.rs"]
mod tests;
