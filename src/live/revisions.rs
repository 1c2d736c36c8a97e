//! Plan revision changes for one live stream: a `plan/revision` item whenever an event after
//! the session's head submits a revision (a review asked) or decides one (its review answered,
//! dismissed, or aborted by the end of its turn).
//!
//! A stream keeps only the open reviews — at most one per agent, usually none — with the
//! revision each decides (recorded in its `question/asked`) and its options, so an answer is
//! judged by the chosen option's kind exactly as the fold judges it ([`Close`]). Like the plan
//! views, the start comes from the folded head the handler already read.

use std::collections::HashMap;

use crate::domain::event::frames::RevisionChanged;
use crate::domain::event::options::chosen_kind;
use crate::domain::event::{EventKind, QuestionOption, RevisionRef};
use crate::domain::plan::revisions::{is_review, Close, RevisionStatus};
use crate::domain::{AgentId, Recorded, SessionState};

struct Open {
    agent: AgentId,
    revision: RevisionRef,
    options: Vec<QuestionOption>,
}

pub(super) struct OpenReviews {
    /// By question id.
    open: HashMap<String, Open>,
    /// Events up to this seq are already in the state the stream started from.
    head: u64,
}

impl OpenReviews {
    /// The reviews open at `state`'s head: only an agent waiting on a question can have one.
    pub(super) fn at_head(state: &SessionState) -> Self {
        let mut open = HashMap::new();
        for (id, a) in state.agents.iter() {
            let Some(qid) = a.turn.as_ref().and_then(|t| t.waiting_on.as_ref()) else {
                continue;
            };
            let revision = a.revisions.of_question(qid);
            let revision = revision.filter(|r| r.status == RevisionStatus::Pending);
            if let (Some(r), Some(q)) = (revision, state.questions.get(qid)) {
                let entry = Open {
                    agent: id.clone(),
                    revision: r.reference(),
                    options: q.asked.options.clone(),
                };
                open.insert(qid.clone(), entry);
            }
        }
        Self {
            open,
            head: state.seq,
        }
    }

    /// Follows `e` (if it comes after the head): the revision it submitted or decided.
    pub(super) fn apply(&mut self, e: &Recorded) -> Option<RevisionChanged> {
        if e.seq() <= self.head {
            return None;
        }
        let (qid, close) = match &e.kind {
            EventKind::QuestionAsked(q) if is_review(q) => {
                // Logs older than revisions record none; their reviews are not followed.
                let revision = q.revision.clone()?;
                let open = Open {
                    agent: e.agent.clone(),
                    revision: revision.clone(),
                    options: q.options.clone(),
                };
                self.open.insert(q.id.clone(), open);
                let pending = Close {
                    status: RevisionStatus::Pending,
                    feedback: None,
                    by: None,
                };
                return Some(changed(&revision, &q.id, pending));
            }
            EventKind::QuestionAnswered(a) => {
                let kind = chosen_kind(&self.open.get(&a.id)?.options, a);
                (a.id.clone(), Close::answered(kind, a))
            }
            EventKind::QuestionDismissed(d) => {
                let close = Close {
                    status: RevisionStatus::Dismissed,
                    feedback: None,
                    by: d.by.clone(),
                };
                (d.id.clone(), close)
            }
            EventKind::TurnEnded(_) => {
                let (qid, _) = self.open.iter().find(|(_, o)| o.agent == e.agent)?;
                let close = Close {
                    status: RevisionStatus::Unavailable,
                    feedback: None,
                    by: None,
                };
                (qid.clone(), close)
            }
            // A snapshot holds no open review (compaction waits for idle agents; a fork
            // copies none).
            EventKind::SessionCompacted(_) | EventKind::SessionCreated(_) => {
                self.open.clear();
                return None;
            }
            _ => return None,
        };
        let open = self.open.remove(&qid)?;
        Some(changed(&open.revision, &qid, close))
    }
}

fn changed(r: &RevisionRef, question: &str, close: Close) -> RevisionChanged {
    RevisionChanged {
        number: r.number,
        digest: r.digest.clone(),
        status: close.status,
        question: question.to_owned(),
        feedback: close.feedback,
        decided_by: close.by,
    }
}
