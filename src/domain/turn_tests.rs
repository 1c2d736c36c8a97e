//! The turn runner's decisions over the fold: what comes next, and that a decision made on a
//! view the log has left behind appends nothing.

use serde_json::json;

use super::*;
use crate::domain::agent::reason;
use crate::domain::event::{OptionKind, QuestionOption};
use crate::domain::questions::Reply;
use crate::domain::session::decide_create;
use crate::domain::{EventId, FoldError, Recorded};

pub(crate) const TURN: &str = "turn-1";

pub(crate) fn rules(max_steps: u32) -> TurnRules {
    TurnRules {
        max_steps,
        exit_tool: true,
        questions: true,
    }
}

pub(crate) fn commit(state: &mut SessionState, events: Vec<NewEvent>) -> Result<(), FoldError> {
    let first = state.seq + 1;
    for e in crate::store::stamp(&events, first, 1_000 + first) {
        state.evolve(&e)?;
    }
    Ok(())
}

fn frame(_: bool, _: Option<&Revision>, _: &imbl::Vector<Message>) -> Framed {
    Framed {
        system: "system".into(),
        sections: vec![],
        tools_hash: "t".into(),
        assembly_hash: "a".into(),
    }
}

pub(crate) fn main() -> AgentId {
    AgentId::root()
}

/// A session whose root agent runs `TURN`, in plan mode when `plan`.
pub(crate) fn running(plan: bool) -> SessionState {
    let mut s = SessionState::default();
    commit(&mut s, decide_create(None, None, Default::default())).unwrap();
    if plan {
        let (_, events) = s.decide_set_plan(&main(), true).unwrap();
        commit(&mut s, events).unwrap();
    }
    let (_, events) = s.decide_prompt(&main(), "fix it", TURN).unwrap();
    commit(&mut s, events).unwrap();
    s
}

pub(crate) fn start_step(s: &mut SessionState, step: u32, max: u32) {
    let (req, events) = s
        .decide_step(&main(), TURN, step, rules(max), "a", &frame)
        .unwrap();
    assert!(req.is_some(), "step {step} starts");
    commit(s, events).unwrap();
}

pub(crate) fn call(name: &str, id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: json!({"plan": "# Plan"}).to_string(),
    }
}

pub(crate) fn answer(s: &mut SessionState, at: (u32, u32), calls: Vec<ToolCall>) {
    let (ok, events) = s
        .decide_model_answer(&main(), TURN, at, "text".into(), calls)
        .unwrap();
    assert!(ok);
    commit(s, events).unwrap();
}

#[test]
fn a_turn_steps_while_its_answers_call_tools_and_ends_at_the_step_limit() {
    let mut s = running(false);
    assert_eq!(s.next(&main(), TURN, rules(2)), Next::NewStep { step: 1 });
    start_step(&mut s, 1, 2);
    assert_eq!(
        s.next(&main(), TURN, rules(2)),
        Next::Retry {
            step: 1,
            attempt: 2
        },
        "an unanswered step is retried"
    );
    answer(&mut s, (1, 1), vec![call("search", "call_0")]);
    assert!(matches!(s.next(&main(), TURN, rules(2)), Next::RunTool(_)));
    let (ran, events) = s.decide_tool(&main(), TURN, rules(2)).unwrap();
    assert!(ran);
    let EventKind::ToolResult(r) = &events[0].kind else {
        panic!("a result: {events:?}");
    };
    assert_eq!(r.result["reason"], "unknown-tool");
    commit(&mut s, events).unwrap();
    assert_eq!(s.next(&main(), TURN, rules(2)), Next::NewStep { step: 2 });
    start_step(&mut s, 2, 2);
    answer(&mut s, (2, 1), vec![call("search", "call_0")]);
    let (_, events) = s.decide_tool(&main(), TURN, rules(2)).unwrap();
    commit(&mut s, events).unwrap();
    assert_eq!(
        s.next(&main(), TURN, rules(2)),
        Next::End {
            reason: reason::STEP_LIMIT
        }
    );
    let (ended, events) = s.decide_finish(&main(), TURN, rules(2)).unwrap();
    assert!(ended);
    let EventKind::TurnEnded(end) = &events[0].kind else {
        panic!("{events:?}");
    };
    assert_eq!(end.reason, "step-limit");
}

#[test]
fn only_the_current_attempt_of_a_step_can_record_its_answer() {
    let mut s = running(false);
    start_step(&mut s, 1, 50);
    let (req, events) = s
        .decide_retry(&main(), TURN, (1, 2), rules(50), "b")
        .unwrap();
    assert_eq!(req.unwrap().system.as_ref(), "system", "the frozen request");
    commit(&mut s, events).unwrap();
    let (ok, events) = s
        .decide_model_answer(&main(), TURN, (1, 1), "late".into(), vec![])
        .unwrap();
    assert!(
        !ok && events.is_empty(),
        "the superseded attempt appends nothing"
    );
    assert!(s.decide_failed(&main(), TURN, (1, 1)).unwrap().1.is_empty());
    answer(&mut s, (1, 2), vec![]);
    assert_eq!(
        s.next(&main(), TURN, rules(50)),
        Next::End {
            reason: reason::COMPLETED
        }
    );
}

#[test]
fn after_a_cancel_no_runner_decision_appends_anything() {
    let mut s = running(true);
    start_step(&mut s, 1, 50);
    let (_, events) = s.decide_end_turn(&main(), None, reason::CANCELLED).unwrap();
    commit(&mut s, events).unwrap();
    let r = rules(50);
    assert_eq!(s.next(&main(), TURN, r), Next::Closed);
    let answer = s.decide_model_answer(&main(), TURN, (1, 1), "x".into(), vec![]);
    assert!(answer.unwrap().1.is_empty());
    assert!(s.decide_tool(&main(), TURN, r).unwrap().1.is_empty());
    assert!(s.decide_finish(&main(), TURN, r).unwrap().1.is_empty());
    assert!(s
        .decide_step(&main(), TURN, 2, r, "a", &frame)
        .unwrap()
        .1
        .is_empty());
    assert!(s
        .decide_retry(&main(), TURN, (1, 2), r, "a")
        .unwrap()
        .1
        .is_empty());
}

#[test]
fn a_reused_call_id_asks_a_new_question_for_each_occurrence() {
    let mut s = running(true);
    let r = rules(50);
    start_step(&mut s, 1, 50);
    answer(&mut s, (1, 1), vec![call(EXIT_TOOL, "call_0")]);
    let (_, asked) = s.decide_tool(&main(), TURN, r).unwrap();
    let EventKind::QuestionAsked(q1) = asked[0].kind.clone() else {
        panic!("{asked:?}");
    };
    commit(&mut s, asked).unwrap();
    assert_eq!(s.next(&main(), TURN, r), Next::Wait);
    let (_, events) = s
        .decide_answer(
            &q1.id,
            crate::domain::questions::Reply {
                option: Some("keep_planning".into()),
                ..Default::default()
            },
            None,
        )
        .unwrap();
    commit(&mut s, events).unwrap();
    let (_, events) = s.decide_tool(&main(), TURN, r).unwrap();
    commit(&mut s, events).unwrap();
    start_step(&mut s, 2, 50);
    answer(&mut s, (2, 1), vec![call(EXIT_TOOL, "call_0")]);
    let (_, asked) = s.decide_tool(&main(), TURN, r).unwrap();
    let EventKind::QuestionAsked(q2) = &asked[0].kind else {
        panic!("the second plan is not decided by the first answer: {asked:?}");
    };
    assert_ne!(q2.id, q1.id);
    assert_eq!(q2.call_id, "call_0");
}

#[test]
fn the_fold_refuses_a_question_for_a_call_that_is_not_open_and_a_skipped_attempt() {
    let mut s = running(true);
    start_step(&mut s, 1, 50);
    let stray = EventKind::QuestionAsked(crate::domain::event::QuestionAsked {
        id: "plan-review-9".into(),
        intent: None,
        title: "t".into(),
        detail: "d".into(),
        options: vec![],
        allow_text: true,
        turn: TURN.into(),
        call_id: "call_0".into(),
        revision: None,
    });
    let err = commit(&mut s.clone(), vec![NewEvent::new(&main(), stray)]).unwrap_err();
    assert!(err.reason.contains("not open"), "{err}");
    let skipped = EventKind::StepRetried(crate::domain::event::StepRetried {
        turn: TURN.into(),
        step: 1,
        attempt: 3,
        replica: "b".into(),
        reason: crate::domain::event::StepRetryReason::Resumed,
    });
    let err = commit(&mut s, vec![NewEvent::new(&main(), skipped)]).unwrap_err();
    assert_eq!(err.at, EventId(s.seq + 1));
    let _: Option<Recorded> = None;
}

#[test]
fn recorded_call_ids_are_unique_within_an_answer_whatever_the_provider_sent() {
    let mut s = running(false);
    start_step(&mut s, 1, 50);
    // The second `a` is renamed to `call-1-1-1`, which the provider already used for the third.
    let calls = vec![
        call("x", "a"),
        call("x", "a"),
        call("x", "call-1-1-1"),
        call("x", ""),
    ];
    let (_, events) = s
        .decide_model_answer(&main(), TURN, (1, 1), "t".into(), calls)
        .unwrap();
    let EventKind::AssistantMessage(m) = &events[0].kind else {
        panic!("{events:?}");
    };
    let ids: Vec<&str> = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "call-1-1-1-1", "call-1-1-1", "call-1-1-3"]);
    commit(&mut s, events).unwrap();
}

/// A plan review open on `main`: the session and the question's id. `relabel` may change the
/// offered labels before the question is recorded (a localized review).
fn review_open(relabel: impl FnOnce(&mut Vec<QuestionOption>)) -> (SessionState, String) {
    let mut s = running(true);
    start_step(&mut s, 1, 50);
    answer(&mut s, (1, 1), vec![call(EXIT_TOOL, "call_0")]);
    let (_, mut asked) = s.decide_tool(&main(), TURN, rules(50)).unwrap();
    let EventKind::QuestionAsked(q) = &mut asked[0].kind else {
        panic!("{asked:?}");
    };
    relabel(&mut q.options);
    let id = q.id.clone();
    commit(&mut s, asked).unwrap();
    (s, id)
}

fn reply(option: Option<&str>, label: Option<&str>) -> Reply {
    Reply {
        option: option.map(str::to_owned),
        label: label.map(str::to_owned),
        text: None,
        ..Default::default()
    }
}

/// Answers, then returns whether the waiting `exit_plan_mode` call succeeded.
fn decided(mut s: SessionState, qid: &str, reply: Reply) -> bool {
    let (_, events) = s.decide_answer(qid, reply, None).unwrap();
    commit(&mut s, events).unwrap();
    let (_, events) = s.decide_tool(&main(), TURN, rules(50)).unwrap();
    let EventKind::ToolResult(r) = &events[0].kind else {
        panic!("{events:?}");
    };
    r.ok
}

#[test]
fn a_review_is_decided_by_the_chosen_options_kind_whatever_its_label_says() {
    // A mischievous translation: the approving option is labelled like the other one's id.
    let swap = |o: &mut Vec<QuestionOption>| {
        o[0].label = "Weiter planen".into();
        o[1].label = "Approve".into();
    };
    let (s, qid) = review_open(swap);
    assert!(decided(s.clone(), &qid, reply(Some("approve"), None)));
    assert!(!decided(
        s.clone(),
        &qid,
        reply(Some("keep_planning"), None)
    ));
    assert!(
        !decided(s, &qid, reply(None, Some("Approve"))),
        "the label `Approve` names the keep-planning option here"
    );
}

#[test]
fn an_answer_records_the_option_id_and_its_label_and_refuses_what_it_cannot_name() {
    let (s, qid) = review_open(|_| {});
    let (_, events) = s
        .decide_answer(
            &qid,
            reply(None, Some("Keep planning")),
            Some("key:k1".into()),
        )
        .unwrap();
    let EventKind::QuestionAnswered(a) = &events[0].kind else {
        panic!("{events:?}");
    };
    assert_eq!(a.option.as_deref(), Some("keep_planning"));
    assert_eq!(a.label.as_deref(), Some("Keep planning"));
    let refused = |r: Reply| s.decide_answer(&qid, r, None).unwrap_err();
    assert!(matches!(
        refused(reply(Some("Approve"), None)),
        DomainError::UnknownOption { options, .. } if options == ["approve", "keep_planning"]
    ));
    assert!(matches!(
        refused(reply(None, Some("Genehmigen"))),
        DomainError::UnknownLabel { .. }
    ));
    assert!(matches!(
        refused(reply(Some("approve"), Some("Keep planning"))),
        DomainError::LabelMismatch { .. }
    ));
    assert_eq!(refused(reply(None, None)), DomainError::EmptyAnswer);
    assert!(s
        .decide_answer(&qid, reply(Some("approve"), Some("Approve")), None)
        .is_ok());
}

#[test]
fn an_old_log_with_plain_label_options_and_a_label_answer_folds_and_decides() {
    let mut s = running(true);
    start_step(&mut s, 1, 50);
    answer(&mut s, (1, 1), vec![call(EXIT_TOOL, "call_0")]);
    let (_, asked) = s.decide_tool(&main(), TURN, rules(50)).unwrap();
    // The entry as a build before option ids wrote it.
    let mut data: serde_json::Value =
        serde_json::from_str(&asked[0].kind.data_json().unwrap()).unwrap();
    data["options"] = json!(["Approve", "Keep planning"]);
    let old = |ty: &str, data: &serde_json::Value| {
        let kind = EventKind::from_parts(ty, data.to_string().as_bytes()).unwrap();
        vec![NewEvent::new(&main(), kind)]
    };
    commit(&mut s, old("question/asked", &data)).unwrap();
    let qid = data["id"].as_str().unwrap();
    let kinds: Vec<_> = s.questions[qid]
        .asked
        .options
        .iter()
        .map(|o| o.kind)
        .collect();
    assert_eq!(kinds, [OptionKind::Approve, OptionKind::KeepPlanning]);
    // Still open: a new client answers it by id.
    assert!(decided(s.clone(), qid, reply(Some("approve"), None)));
    // Answered by an old build: the label is resolved to the option.
    commit(
        &mut s,
        old("question/answered", &json!({"id": qid, "label": "Approve"})),
    )
    .unwrap();
    assert_eq!(
        s.questions[qid].view().answer.unwrap().option.as_deref(),
        Some("approve")
    );
    let (_, events) = s.decide_tool(&main(), TURN, rules(50)).unwrap();
    assert!(matches!(&events[0].kind, EventKind::ToolResult(r) if r.ok));
}

#[test]
fn the_fold_refuses_an_answer_naming_an_option_the_question_did_not_offer() {
    let (mut s, qid) = review_open(|_| {});
    let forged = EventKind::QuestionAnswered(crate::domain::event::QuestionAnswered {
        id: qid,
        option: Some("yes".into()),
        label: None,
        text: None,
        by: None,
    });
    let err = commit(&mut s, vec![NewEvent::new(&main(), forged)]).unwrap_err();
    assert!(err.reason.contains("did not offer"), "{err}");
}
