//! The plan rules, row by row.
use super::*;

fn views() -> Vec<PlanView> {
    let mut v = Vec::new();
    for active in [false, true] {
        v.push(PlanView {
            active,
            pending: None,
        });
        v.push(PlanView {
            active,
            pending: Some(!active),
        });
    }
    v
}

/// The table from DESIGN §2, written independently of `decide_set` as plain conditions.
fn expected(view: PlanView, running: bool, target: bool) -> Outcome {
    let PlanView { active, pending } = view;
    if !running {
        if target != active {
            Outcome::Committed
        } else if pending.is_some() {
            Outcome::Cancelled
        } else {
            Outcome::Noop
        }
    } else if target == pending.unwrap_or(active) {
        Outcome::Noop
    } else if target == active && pending.is_some() {
        Outcome::Cancelled
    } else {
        Outcome::Queued
    }
}

#[test]
fn set_outcome_table_holds_for_every_state_status_and_target() {
    let mut seen = std::collections::BTreeSet::new();
    for view in views() {
        for running in [false, true] {
            for target in [false, true] {
                let (outcome, event) = decide_set(view, running, target);
                assert_eq!(
                    outcome,
                    expected(view, running, target),
                    "{view:?} running={running} target={target}"
                );
                seen.insert(format!("{running}{outcome:?}"));
                // Committing records the value; queueing or cancelling records the choice.
                let appended = match outcome {
                    Outcome::Committed => Some(EventKind::PlanMode(PlanMode { active: target })),
                    Outcome::Queued | Outcome::Cancelled => {
                        Some(EventKind::PlanSelect(PlanSelect { active: target }))
                    }
                    Outcome::Noop => None,
                };
                assert_eq!(
                    event, appended,
                    "{view:?} running={running} target={target}"
                );
                // Applying the event yields the documented resulting view.
                let mut rec = PlanRecord {
                    active: view.active,
                    target: view.pending,
                };
                if let Some(e) = &event {
                    rec.evolve(e);
                }
                let after = rec.view();
                match outcome {
                    Outcome::Committed => assert_eq!(
                        after,
                        PlanView {
                            active: target,
                            pending: None
                        }
                    ),
                    Outcome::Queued => assert_eq!(
                        after,
                        PlanView {
                            active: view.active,
                            pending: Some(target)
                        }
                    ),
                    Outcome::Cancelled => assert_eq!(
                        after,
                        PlanView {
                            active: view.active,
                            pending: None
                        }
                    ),
                    Outcome::Noop => assert_eq!(after, view),
                }
                // After any set(target), the desired state is the target.
                assert_eq!(after.pending.unwrap_or(after.active), target);
            }
        }
    }
    // All six rows were reached.
    assert_eq!(seen.len(), 6, "{seen:?}");
}

#[test]
fn idle_set_to_a_different_state_commits_at_once() {
    let (o, e) = decide_set(
        PlanView {
            active: false,
            pending: None,
        },
        false,
        true,
    );
    assert_eq!(o, Outcome::Committed);
    assert_eq!(e, Some(EventKind::PlanMode(PlanMode { active: true })));
}

#[test]
fn idle_set_back_to_the_recorded_state_cancels_a_pending_choice() {
    let (o, e) = decide_set(
        PlanView {
            active: true,
            pending: Some(false),
        },
        false,
        true,
    );
    assert_eq!(o, Outcome::Cancelled);
    assert_eq!(e, Some(EventKind::PlanSelect(PlanSelect { active: true })));
}

#[test]
fn idle_set_to_the_recorded_state_without_pending_is_a_noop() {
    assert_eq!(
        decide_set(
            PlanView {
                active: true,
                pending: None
            },
            false,
            true
        ),
        (Outcome::Noop, None)
    );
}

#[test]
fn running_set_to_the_desired_state_is_a_noop() {
    let v = PlanView {
        active: true,
        pending: Some(false),
    };
    assert_eq!(decide_set(v, true, false), (Outcome::Noop, None));
    assert_eq!(
        decide_set(
            PlanView {
                active: true,
                pending: None
            },
            true,
            true
        ),
        (Outcome::Noop, None)
    );
}

#[test]
fn running_set_back_to_the_recorded_state_cancels_the_pending_choice() {
    let (o, e) = decide_set(
        PlanView {
            active: true,
            pending: Some(false),
        },
        true,
        true,
    );
    assert_eq!(o, Outcome::Cancelled);
    assert_eq!(e, Some(EventKind::PlanSelect(PlanSelect { active: true })));
}

#[test]
fn running_set_to_another_state_is_queued_as_pending() {
    let (o, e) = decide_set(
        PlanView {
            active: true,
            pending: None,
        },
        true,
        false,
    );
    assert_eq!(o, Outcome::Queued);
    assert_eq!(e, Some(EventKind::PlanSelect(PlanSelect { active: false })));
}

#[test]
fn pending_false_is_a_real_state_distinct_from_no_pending() {
    let rec = PlanRecord {
        active: true,
        target: Some(false),
    };
    let json = serde_json::to_value(rec.view()).unwrap();
    assert_eq!(json, serde_json::json!({"active": true, "pending": false}));
    let none = PlanRecord {
        active: true,
        target: Some(true),
    }
    .view();
    assert_eq!(
        serde_json::to_value(none).unwrap(),
        serde_json::json!({"active": true})
    );
}

/// The plan-mode notification as the model reads it.
fn note(text: &str) -> EventKind {
    EventKind::UserMessage(super::super::event::UserMessage {
        text: text.into(),
        source: Some("plugin:plan-mode".into()),
        steer: false,
    })
}

const NOW_ACTIVE: &str = "Plan mode is now active. Explore and design before changing anything, \
                          then submit the complete plan with `exit_plan_mode` for the user's review.";
const ENDED: &str = "Plan mode has ended. You may now carry out the work.";

#[test]
fn a_prestep_commits_the_pending_choice_and_notifies_when_the_header_differs() {
    let rec = PlanRecord {
        active: true,
        target: Some(false),
    };
    let (active, events) = decide_prestep(rec, Some(true));
    assert!(!active);
    assert_eq!(
        events,
        vec![EventKind::PlanMode(PlanMode { active: false }), note(ENDED)]
    );
}

#[test]
fn a_prestep_without_a_previous_header_adds_no_notification() {
    let (active, events) = decide_prestep(
        PlanRecord {
            active: true,
            target: None,
        },
        None,
    );
    assert!(active);
    assert!(events.is_empty());
    // A pending choice is still committed, silently.
    let (active, events) = decide_prestep(
        PlanRecord {
            active: true,
            target: Some(false),
        },
        None,
    );
    assert!(!active);
    assert_eq!(
        events,
        vec![EventKind::PlanMode(PlanMode { active: false })]
    );
}

#[test]
fn a_prestep_notifies_a_change_committed_while_idle() {
    // Committed at once while idle: nothing pending, but the last header said inactive.
    let (active, events) = decide_prestep(
        PlanRecord {
            active: true,
            target: None,
        },
        Some(false),
    );
    assert!(active);
    assert_eq!(
        events,
        vec![note(NOW_ACTIVE)],
        "nothing to commit, only the notice"
    );
    // Same state as the last header: nothing to say.
    assert!(decide_prestep(
        PlanRecord {
            active: true,
            target: Some(true)
        },
        Some(true)
    )
    .1
    .is_empty());
}

#[test]
fn projection_reads_plan_commands_as_targets() {
    use super::super::event::CommandRun;
    let mut p = PlanProjection::default();
    p.apply("main", &EventKind::PlanMode(PlanMode { active: true }));
    p.apply(
        "main",
        &EventKind::CommandRun(CommandRun {
            name: "plan".into(),
            args: "off".into(),
        }),
    );
    assert_eq!(
        p.view()["main"],
        PlanView {
            active: true,
            pending: Some(false)
        }
    );
    p.apply(
        "main",
        &EventKind::CommandRun(CommandRun {
            name: "plan".into(),
            args: "fix it".into(),
        }),
    );
    assert_eq!(
        p.view()["main"],
        PlanView {
            active: true,
            pending: None
        }
    );
    p.apply(
        "main",
        &EventKind::CommandRun(CommandRun {
            name: "other".into(),
            args: "off".into(),
        }),
    );
    assert_eq!(
        p.view()["main"],
        PlanView {
            active: true,
            pending: None
        }
    );
}
