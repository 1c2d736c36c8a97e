//! Group commit: concurrent decisions on one session within a replica share one
//! compare-and-append, and each still gets its own outcome, in arrival order.

use std::sync::Arc;

use dsh_plan::domain::{AgentId, DomainError, NewEvent, SessionId, SessionState, SessionTerms};
use dsh_plan::service::idempotency::{self, KeyedRequest};
use dsh_plan::service::{Decided, ServiceError, Sessions};
use dsh_plan::store::memory::MemoryLog;
use dsh_plan::store::{EventLog, RedisLog};
use futures_util::future::join_all;

use crate::counting::CountingLog;
use crate::helpers::TestRedis;

/// A log that counts its appends, over Redis or memory.
async fn counting(redis: Option<&TestRedis>) -> Arc<CountingLog> {
    let inner: Arc<dyn EventLog> = match redis {
        Some(redis) => Arc::new(RedisLog::connect(&redis.url, &redis.prefix).await.unwrap()),
        None => Arc::new(MemoryLog::default()),
    };
    Arc::new(CountingLog {
        inner,
        read: Default::default(),
        appends: Default::default(),
        held: Default::default(),
    })
}

/// Runs `scenario` on a Redis log and on a memory one, on one thread: decisions a test polls
/// together are all queued before the session's runner first runs.
macro_rules! on_both_logs {
    ($(async fn $name:ident($log:ident: Arc<CountingLog>) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                async fn scenario($log: Arc<CountingLog>) $body

                #[tokio::test]
                async fn on_redis() {
                    let redis = TestRedis::start().await;
                    scenario(counting(Some(&redis)).await).await;
                }

                #[tokio::test]
                async fn on_memory() {
                    scenario(counting(None).await).await;
                }
            }
        )*
    };
}

/// Flips the root agent's plan mode; its value is the seq and the mode it decided on.
fn flip(s: &SessionState) -> Result<((u64, bool), Vec<NewEvent>), DomainError> {
    let main = AgentId::root();
    let active = s.agent(&main)?.plan.view().active;
    let (_, events) = s.decide_set_plan(&main, !active)?;
    Ok(((s.seq, active), events))
}

async fn session(sessions: &Sessions) -> (SessionId, u64) {
    let terms = SessionTerms::default();
    let (sid, state) = sessions.create(None, None, terms).await.unwrap();
    (sid, state.seq)
}

/// Checks that `decided` are flips made one after the other from seq `base` of a session
/// created at seq `created` (flipped once per seq since), each answered with its own record
/// and the state right after it.
fn made_in_order(
    decided: Vec<Result<Decided<(u64, bool)>, ServiceError>>,
    created: u64,
    base: u64,
) {
    let main = AgentId::root();
    for (i, d) in decided.into_iter().enumerate() {
        let d = d.unwrap_or_else(|e| panic!("decision {i} failed: {e}"));
        let seq = base + i as u64;
        let flipped = (seq - created).is_multiple_of(2);
        assert_eq!(
            d.value,
            (seq, !flipped),
            "decision {i} saw the ones before it"
        );
        assert_eq!(d.events.len(), 1, "decision {i} gets its own record");
        assert_eq!(d.events[0].seq(), seq + 1);
        assert_eq!(d.state.seq, seq + 1, "decision {i} gets the state after it");
        assert_eq!(
            d.state.tail_ts, d.events[0].committed_at,
            "the real commit time"
        );
        let active = d.state.agent(&main).unwrap().plan.view().active;
        assert_eq!(active, flipped);
    }
}

on_both_logs! {
    async fn concurrent_decisions_share_commits_and_each_gets_its_own_outcome_in_order(log: Arc<CountingLog>) {
        let sessions = Arc::new(Sessions::new(log.clone()));
        let (sid, base) = session(&sessions).await;
        let before = log.appends();

        // Polled in order, so they are queued in order.
        let decided = join_all((0..50).map(|_| sessions.decide(&sid, flip))).await;

        made_in_order(decided, base, base);
        let appends = log.appends() - before;
        assert_eq!(appends, 1, "50 decisions queued together take one append");
        let state = sessions.state(&sid).await.unwrap();
        assert_eq!(state.seq, base + 50, "every decision was committed once");
    }

    async fn a_refusal_in_a_batch_leaves_the_others_to_commit(log: Arc<CountingLog>) {
        let sessions = Arc::new(Sessions::new(log.clone()));
        let (sid, base) = session(&sessions).await;
        let before = log.appends();

        let ghost = |s: &SessionState| {
            let (_, events) = s.decide_set_plan(&AgentId::parse("ghost").unwrap(), true)?;
            Ok(((s.seq, false), events))
        };
        let decisions = (0..10).map(|i| {
            let (sessions, sid) = (sessions.clone(), sid.clone());
            async move {
                match i {
                    4 => sessions.decide(&sid, ghost).await,
                    _ => sessions.decide(&sid, flip).await,
                }
            }
        });
        let mut decided = join_all(decisions).await;

        let refused = decided.remove(4);
        assert!(
            matches!(refused, Err(ServiceError::Domain(DomainError::AgentNotFound(_)))),
            "the refusal is its decision's answer"
        );
        made_in_order(decided, base, base);
        assert_eq!(log.appends() - before, 1, "one commit for the batch");
    }

    async fn a_batch_that_meets_another_replicas_write_is_made_again_whole(log: Arc<CountingLog>) {
        let here = Arc::new(Sessions::new(log.clone()));
        let there = Arc::new(Sessions::new(log.clone()));
        let (sid, base) = session(&here).await;
        here.state(&sid).await.unwrap();
        // Another replica writes: this one's fold is behind now.
        there.decide(&sid, flip).await.unwrap();
        let before = log.appends();

        let decided = join_all((0..10).map(|_| here.decide(&sid, flip))).await;

        // Each made again on the newer state: the first sees the other replica's flip.
        made_in_order(decided, base, base + 1);
        assert_eq!(log.appends() - before, 2, "one conflict, then one commit");
    }

    async fn a_keyed_decision_is_committed_alone_and_its_retry_rebuilt(log: Arc<CountingLog>) {
        let sessions = Arc::new(Sessions::new(log.clone()));
        let (sid, base) = session(&sessions).await;
        let before = log.appends();

        let first = Arc::new(KeyedRequest::new("n1".into()));
        let (a, keyed, c) = tokio::join!(
            sessions.decide(&sid, flip),
            idempotency::run(first.clone(), sessions.decide(&sid, flip)),
            sessions.decide(&sid, flip),
        );

        made_in_order(vec![a, keyed, c], base, base);
        assert_eq!(log.appends() - before, 3, "the keyed decision's commit carries it alone");
        assert!(!first.replayed());
        let retry = Arc::new(KeyedRequest::new("n1".into()));
        let again = idempotency::run(retry.clone(), sessions.decide(&sid, flip));
        let again = again.await.unwrap();
        assert!(retry.replayed(), "the retry met the first attempt's commit");
        assert_eq!(again.value, (base + 1, true), "and answers what it decided");
        assert_eq!(again.events[0].seq(), base + 2);
        assert_eq!(sessions.state(&sid).await.unwrap().seq, base + 3);
    }

    async fn a_decision_that_panics_panics_its_caller_alone(log: Arc<CountingLog>) {
        let sessions = Arc::new(Sessions::new(log.clone()));
        let (sid, base) = session(&sessions).await;
        let bug = |_: &SessionState| -> Result<((u64, bool), Vec<NewEvent>), DomainError> {
            panic!("a bug")
        };
        let decisions = (0..3).map(|i| {
            let (sessions, sid) = (sessions.clone(), sid.clone());
            tokio::spawn(async move {
                match i {
                    1 => sessions.decide(&sid, bug).await,
                    _ => sessions.decide(&sid, flip).await,
                }
            })
        });
        let mut decided = join_all(decisions).await;

        assert!(decided.remove(1).is_err_and(|e| e.is_panic()));
        let mut decided: Vec<_> = decided.into_iter().map(Result::unwrap).collect();
        decided.sort_by_key(|d| d.as_ref().map_or(0, |d| d.value.0));
        made_in_order(decided, base, base);
        // The session's runner carries on.
        let next = sessions.decide(&sid, flip).await.unwrap();
        assert_eq!(next.state.seq, base + 3);
    }
}
