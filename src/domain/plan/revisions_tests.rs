//! The revision fold: numbering, what each way a review ends makes of its revision, snapshots,
//! and the decisions that name a revision.

use std::collections::BTreeMap;

use super::*;
use crate::domain::agent::reason;
use crate::domain::event::ToolCall;
use crate::domain::plan::EXIT_TOOL;
use crate::domain::questions::Reply;
use crate::domain::session::decide_create;
use crate::domain::turn::tests::{answer, commit, main, rules, running, start_step, TURN};
use crate::domain::{DomainError, SessionState};

fn plan_call(plan: &str) -> ToolCall {
    ToolCall {
        id: "call_0".into(),
        name: EXIT_TOOL.into(),
        arguments: serde_json::json!({ "plan": plan }).to_string(),
    }
}

/// Step `step` submits `plan`; returns its review question's id.
fn submit(s: &mut SessionState, step: u32, plan: &str) -> String {
    start_step(s, step, 50);
    answer(s, (step, 1), vec![plan_call(plan)]);
    let (_, asked) = s.decide_tool(&main(), TURN, rules(50)).unwrap();
    let EventKind::QuestionAsked(q) = &asked[0].kind else {
        panic!("a review: {asked:?}");
    };
    let id = q.id.clone();
    commit(s, asked).unwrap();
    id
}

/// Answers `qid` with `reply` (by `token:ann`) and lets the turn read the result.
fn decide(s: &mut SessionState, qid: &str, reply: Reply) {
    let (_, events) = s
        .decide_answer(qid, reply, Some("token:ann".into()))
        .unwrap();
    commit(s, events).unwrap();
    let (_, events) = s.decide_tool(&main(), TURN, rules(50)).unwrap();
    commit(s, events).unwrap();
}

fn option(id: &str, text: Option<&str>) -> Reply {
    Reply {
        option: Some(id.into()),
        text: text.map(str::to_owned),
        ..Default::default()
    }
}

fn revisions(s: &SessionState) -> Vec<Revision> {
    let a = s.agent(&main()).unwrap();
    a.revisions.all().iter().map(|r| (**r).clone()).collect()
}

#[test]
fn submissions_are_numbered_per_agent_and_follow_their_review_to_approval() {
    let mut s = running(true);
    let q1 = submit(&mut s, 1, "# Plan\n\n1. Fix it.\n");
    let [r1] = revisions(&s).try_into().unwrap();
    assert_eq!((r1.number, r1.step, r1.turn.as_str()), (1, 1, TURN));
    assert_eq!(
        (r1.status, r1.question.as_str()),
        (RevisionStatus::Pending, q1.as_str())
    );
    assert_eq!(r1.digest, digest("# Plan\n\n1. Fix it.\n"));
    assert!(r1.digest.starts_with("sha256:") && r1.digest.len() == 7 + 64);
    assert_eq!(r1.decided_at, None);

    decide(&mut s, &q1, option("keep_planning", Some("Cover SSO.")));
    let q2 = submit(&mut s, 2, "# Plan\n\n1. Fix it, with SSO.\n");
    let [r1, r2] = revisions(&s).try_into().unwrap();
    assert_eq!(r1.status, RevisionStatus::Revising);
    assert_eq!(r1.feedback.as_deref(), Some("Cover SSO."));
    assert_eq!(r1.decided_by.as_deref(), Some("token:ann"));
    assert!(r1.decided_at.is_some_and(|at| at > r1.submitted_at));
    assert_eq!(
        (r2.number, r2.step, r2.status),
        (2, 2, RevisionStatus::Pending)
    );
    let agent = s.agent(&main()).unwrap();
    assert_eq!(agent.revisions.approved(), None);

    decide(&mut s, &q2, option("approve", None));
    let [_, r2] = revisions(&s).try_into().unwrap();
    assert_eq!((r2.status, r2.feedback), (RevisionStatus::Approved, None));
    let agent = s.agent(&main()).unwrap();
    assert_eq!(agent.revisions.approved().map(|r| r.number), Some(2));
    assert_eq!(agent.revisions.get(1).map(|r| r.number), Some(1));
    assert!(agent.revisions.get(0).is_none() && agent.revisions.get(3).is_none());
}

#[test]
fn a_label_alone_sends_the_plan_back_with_the_label_as_feedback() {
    let mut s = running(true);
    let q = submit(&mut s, 1, "# Plan");
    decide(&mut s, &q, option("keep_planning", None));
    assert_eq!(revisions(&s)[0].feedback.as_deref(), Some("Keep planning"));
}

#[test]
fn a_dismissed_review_and_an_aborted_one_say_so_and_nobody_decided_the_aborted_one() {
    let mut s = running(true);
    let q = submit(&mut s, 1, "# Plan");
    let (_, events) = s
        .decide_dismiss(&q, &Named::default(), Some("key:k1".into()))
        .unwrap();
    commit(&mut s, events).unwrap();
    let r = &revisions(&s)[0];
    assert_eq!(r.status, RevisionStatus::Dismissed);
    assert_eq!(r.decided_by.as_deref(), Some("key:k1"));

    let (_, events) = s.decide_tool(&main(), TURN, rules(50)).unwrap();
    commit(&mut s, events).unwrap();
    submit(&mut s, 2, "# Plan 2");
    let (_, events) = s.decide_end_turn(&main(), None, reason::CANCELLED).unwrap();
    commit(&mut s, events).unwrap();
    let r = &revisions(&s)[1];
    assert_eq!((r.number, r.status), (2, RevisionStatus::Unavailable));
    assert_eq!(r.decided_by, None);
    assert!(r.decided_at.is_some());
}

#[test]
fn compaction_keeps_the_revisions_and_a_fork_cannot_decide_an_open_one() {
    let mut s = running(true);
    let q = submit(&mut s, 1, "# Plan");
    decide(&mut s, &q, option("approve", Some("Go.")));
    // The user stays in plan mode (withdrawing the exit the approval queued) and it plans on.
    let (_, events) = s.decide_set_plan(&main(), true).unwrap();
    commit(&mut s, events).unwrap();
    submit(&mut s, 2, "# Plan 2");
    let before = revisions(&s);

    let forked = s.snapshot(|_| Vec::new(), false);
    let mut fork = SessionState::default();
    commit(
        &mut fork,
        decide_create(None, Some(forked), Default::default()),
    )
    .unwrap();
    let [r1, r2] = revisions(&fork).try_into().unwrap();
    assert_eq!(r1, before[0], "decided revisions are copied as they are");
    assert_eq!(r2.status, RevisionStatus::Unavailable);
    assert_eq!(fork.agent(&main()).unwrap().revisions.next_number(), 3);

    let (_, events) = s.decide_end_turn(&main(), None, reason::CANCELLED).unwrap();
    commit(&mut s, events).unwrap();
    let (_, events) = s.decide_compact("summary", &BTreeMap::new()).unwrap();
    let decided = revisions(&s);
    commit(&mut s, events).unwrap();
    assert_eq!(revisions(&s), decided);
    let agent = s.agent(&main()).unwrap();
    assert_eq!(agent.revisions.approved().map(|r| r.number), Some(1));
    assert_eq!(
        agent.revisions.approved().unwrap().feedback.as_deref(),
        Some("Go.")
    );
}

#[test]
fn a_decision_naming_another_revision_than_its_reviews_is_refused() {
    let mut s = running(true);
    let q1 = submit(&mut s, 1, "# Plan");
    decide(&mut s, &q1, option("keep_planning", Some("More.")));
    let q2 = submit(&mut s, 2, "# Plan 2");
    let current = digest("# Plan 2");
    // The closed review of revision 1: naming it says it was superseded, not just answered.
    let named_1 = Named {
        number: Some(1),
        digests: None,
    };
    let reply = Reply {
        revision: named_1,
        ..option("approve", None)
    };
    let err = s.decide_answer(&q1, reply, None).unwrap_err();
    assert!(
        matches!(
            &err,
            DomainError::RevisionSuperseded {
                latest: Some(2),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("which revision 2 superseded"),
        "{err}"
    );
    assert!(matches!(
        s.decide_answer(&q1, option("approve", None), None),
        Err(DomainError::QuestionClosed { .. })
    ));
    let stale = Named {
        number: Some(1),
        digests: None,
    };
    let err = s
        .decide_answer(
            &q2,
            Reply {
                revision: stale,
                ..option("approve", None)
            },
            None,
        )
        .unwrap_err();
    let DomainError::RevisionSuperseded { decides, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(decides, &Some((2, current.clone())));
    assert!(err.to_string().contains("not revision 1"), "{err}");
    for digests in [vec![digest("# Plan")], vec![], vec!["W/x".into()]] {
        let named = Named {
            number: None,
            digests: Some(digests),
        };
        assert!(matches!(
            s.decide_dismiss(&q2, &named, None),
            Err(DomainError::RevisionSuperseded { .. })
        ));
    }
    let named = Named {
        number: Some(2),
        digests: Some(vec!["sha256:other".into(), current]),
    };
    let reply = Reply {
        revision: named,
        ..option("approve", None)
    };
    assert!(s.decide_answer(&q2, reply, None).is_ok());
}

#[test]
fn a_review_recording_another_revision_than_it_submits_is_corruption() {
    let mut s = running(true);
    start_step(&mut s, 1, 50);
    answer(&mut s, (1, 1), vec![plan_call("# Plan")]);
    let (_, mut asked) = s.decide_tool(&main(), TURN, rules(50)).unwrap();
    let EventKind::QuestionAsked(q) = &mut asked[0].kind else {
        panic!("{asked:?}");
    };
    q.revision = Some(RevisionRef {
        number: 2,
        digest: digest("# Plan"),
    });
    let err = commit(&mut s, asked).unwrap_err();
    assert!(err.reason.contains("revision 2"), "{err}");
}
