//! Plan revision changes for one live stream: a `plan/revision` item for each event the stream
//! sends that submits a revision (a review asked) or decides one (its review answered,
//! dismissed, or cut off by the end of its turn).
//!
//! Events up to the head the stream opened at (a resume's catch-up) are judged by the head's
//! own fold: a revision is decided once, so the head already holds what each of those events
//! made of it — looked up by question, or for a turn's end by the turn. Later events are
//! followed: the stream keeps only the reviews open since the head (at most one per agent,
//! usually none) with the options each offers, so an answer is judged by the chosen option's
//! kind exactly as the fold judges it ([`Close`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::event::frames::RevisionChanged;
use crate::domain::event::options::chosen_kind;
use crate::domain::event::{EventKind, QuestionOption, RevisionRef, TurnEnded};
use crate::domain::plan::revisions::{is_review, Close, Revision, RevisionStatus};
use crate::domain::{AgentId, AgentState, Recorded, SessionState};

struct Open {
    agent: AgentId,
    revision: RevisionRef,
    options: Vec<QuestionOption>,
}

pub(super) struct OpenReviews {
    /// The agents as of the head (shared with the fold), until the stream has passed it.
    at_head: Option<imbl::OrdMap<AgentId, Arc<AgentState>>>,
    head: u64,
    /// The reviews open at the stream's position past the head, by question id.
    open: HashMap<String, Open>,
}

impl OpenReviews {
    /// Starts at `state`'s head: its pending revisions are the open reviews there. `catch_up`:
    /// the stream first sends events up to the head (it resumes from an older cursor).
    pub(super) fn at_head(state: &SessionState, catch_up: bool) -> Self {
        let mut open = HashMap::new();
        for (id, a) in state.agents.iter() {
            let pending = a.revisions.latest();
            let pending = pending.filter(|r| r.status == RevisionStatus::Pending);
            if let Some((r, q)) = pending.and_then(|r| Some((r, state.questions.get(&r.question)?)))
            {
                let entry = Open {
                    agent: id.clone(),
                    revision: r.reference(),
                    options: q.asked.options.clone(),
                };
                open.insert(r.question.clone(), entry);
            }
        }
        Self {
            at_head: catch_up.then(|| state.agents.clone()),
            head: state.seq,
            open,
        }
    }

    /// What `e` did to a revision, if anything.
    pub(super) fn apply(&mut self, e: &Recorded) -> Option<RevisionChanged> {
        if e.seq() > self.head {
            self.at_head = None;
            return self.follow(e);
        }
        let agent = self.at_head.as_ref()?.get(&e.agent)?.clone();
        if e.seq() == self.head {
            // Past the head, nothing more is judged by it.
            self.at_head = None;
        }
        let decided = match &e.kind {
            EventKind::QuestionAsked(q) if is_review(q) => {
                let r = agent.revisions.of_question(&q.id)?;
                return Some(changed(&r.reference(), &q.id, pending()));
            }
            EventKind::QuestionAnswered(a) => agent.revisions.of_question(&a.id)?,
            EventKind::QuestionDismissed(d) => agent.revisions.of_question(&d.id)?,
            // The review this turn's end cut off, if it had one open.
            EventKind::TurnEnded(TurnEnded { turn, .. }) => {
                let mut all = agent.revisions.all().iter().rev();
                all.find(|r| &r.turn == turn && r.status == RevisionStatus::Unavailable)?
            }
            _ => return None,
        };
        Some(as_decided(decided))
    }

    /// Follows an event after the head.
    fn follow(&mut self, e: &Recorded) -> Option<RevisionChanged> {
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
                return Some(changed(&revision, &q.id, pending()));
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
            // A compaction snapshot holds no open review: it waits for idle agents.
            EventKind::SessionCompacted(_) => {
                self.open.clear();
                return None;
            }
            _ => return None,
        };
        let open = self.open.remove(&qid)?;
        Some(changed(&open.revision, &qid, close))
    }
}

fn pending() -> Close {
    Close {
        status: RevisionStatus::Pending,
        feedback: None,
        by: None,
    }
}

/// The frame of a decided revision as the fold holds it.
fn as_decided(r: &Revision) -> RevisionChanged {
    let close = Close {
        status: r.status,
        feedback: r.feedback.clone(),
        by: r.decided_by.clone(),
    };
    changed(&r.reference(), &r.question, close)
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
