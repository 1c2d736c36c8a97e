//! Property tests of the fold: folding incrementally (a cached prefix, then the rest) equals
//! folding from scratch, and the plan projection unit always agrees with the live fold.

use proptest::prelude::*;

use super::agent::AgentStatus;
use super::event::{CommandRun, EventKind, NewEvent, Recorded, TurnEnded, TurnStarted};
use super::ids::AgentId;
use super::plan::PlanProjection;
use super::session::{decide_create, SessionState};
use crate::store::stamp;

#[derive(Clone, Debug)]
enum Op {
    Spawn { owner: Option<usize> },
    Set { agent: usize, target: bool },
    PlanCommand { agent: usize, off: bool },
    StartTurn { agent: usize },
    EndTurn { agent: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => proptest::option::of(0usize..4).prop_map(|owner| Op::Spawn { owner }),
        6 => (0usize..4, any::<bool>()).prop_map(|(agent, target)| Op::Set { agent, target }),
        2 => (0usize..4, any::<bool>()).prop_map(|(agent, off)| Op::PlanCommand { agent, off }),
        2 => (0usize..4).prop_map(|agent| Op::StartTurn { agent }),
        2 => (0usize..4).prop_map(|agent| Op::EndTurn { agent }),
    ]
}

/// Plays `ops` through the domain's own decisions, producing a valid log.
fn play(ops: &[Op]) -> Vec<Recorded> {
    let mut state = SessionState::default();
    let mut log = Vec::new();
    let commit = |state: &mut SessionState, events: Vec<NewEvent>, log: &mut Vec<Recorded>| {
        for r in stamp(&events, state.seq + 1, 1_000 + state.seq) {
            state.evolve(&r).expect("decided events fold");
            log.push(r);
        }
    };
    commit(
        &mut state,
        decide_create(None, None, Default::default()),
        &mut log,
    );
    let pick = |state: &SessionState, i: usize| {
        state
            .agents
            .keys()
            .nth(i % state.agents.len())
            .cloned()
            .unwrap()
    };
    for (n, op) in ops.iter().enumerate() {
        let events = match op {
            Op::Spawn { owner } => {
                let owner = owner.map(|o| pick(&state, o));
                state.decide_spawn(owner, usize::MAX).unwrap().1
            }
            Op::Set { agent, target } => {
                state
                    .decide_set_plan(&pick(&state, *agent), *target)
                    .unwrap()
                    .1
            }
            Op::PlanCommand { agent, off } => {
                let id = pick(&state, *agent);
                let args = if *off { "off" } else { "" }.to_owned();
                // The command's effect first, then its record: the projection reads the record
                // as a target, which then equals the live state after every single event.
                let mut events = state.decide_set_plan(&id, !off).unwrap().1;
                events.push(NewEvent::new(
                    &id,
                    EventKind::CommandRun(CommandRun {
                        name: "plan".into(),
                        args,
                    }),
                ));
                events
            }
            Op::StartTurn { agent } => {
                let id = pick(&state, *agent);
                if state.agents[&id].status() != AgentStatus::Idle {
                    continue;
                }
                vec![NewEvent::new(
                    &id,
                    EventKind::TurnStarted(TurnStarted {
                        turn: format!("t{n}"),
                    }),
                )]
            }
            Op::EndTurn { agent } => {
                let id: AgentId = pick(&state, *agent);
                let Some(turn) = state.agents[&id].turn_id().map(str::to_owned) else {
                    continue;
                };
                vec![NewEvent::new(
                    &id,
                    EventKind::TurnEnded(TurnEnded {
                        turn,
                        reason: "completed".into(),
                    }),
                )]
            }
        };
        commit(&mut state, events, &mut log);
    }
    log
}

fn fold(events: &[Recorded], from: SessionState) -> SessionState {
    let mut s = from;
    for e in events {
        s.evolve(e).unwrap();
    }
    s
}

proptest! {
    #[test]
    fn incremental_fold_equals_fold_from_scratch(ops in proptest::collection::vec(op(), 0..80), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4)) {
        let log = play(&ops);
        let scratch = fold(&log, SessionState::default());
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(log.len() + 1)).collect();
        points.sort_unstable();
        let mut state = SessionState::default();
        let mut done = 0;
        for p in points.into_iter().chain([log.len()]) {
            // A replica caches `state` up to `done` and later catches up with what follows.
            state = fold(&log[done..p], state.clone());
            done = p;
        }
        prop_assert_eq!(state, scratch);
    }

    #[test]
    fn the_plan_projection_agrees_with_the_live_fold_after_every_event(ops in proptest::collection::vec(op(), 0..80)) {
        let log = play(&ops);
        let mut state = SessionState::default();
        let mut projection = PlanProjection::default();
        for e in &log {
            state.evolve(e).unwrap();
            projection.apply(e.agent.as_str(), &e.kind);
            let live: std::collections::BTreeMap<String, _> =
                state.agents.iter().map(|(id, a)| (id.to_string(), a.plan.view())).collect();
            prop_assert_eq!(&live, &projection.view());
        }
    }

    #[test]
    fn no_decision_ever_records_a_plan_mode_equal_to_the_recorded_state(ops in proptest::collection::vec(op(), 0..80)) {
        let log = play(&ops);
        let mut state = SessionState::default();
        for e in &log {
            if let EventKind::PlanMode(m) = &e.kind {
                prop_assert_ne!(state.agents[&e.agent].plan.active, m.active);
            }
            state.evolve(e).unwrap();
        }
    }
}
