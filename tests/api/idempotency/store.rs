//! The markers a keyed request leaves in a session log, on Redis (`append.lua`) and in memory:
//! a marked commit happens once, whatever the expected seq of a retry says.

use std::sync::Arc;

use dsh_plan::domain::event::{EventKind, PlanSelect};
use dsh_plan::domain::{AgentId, NewEvent, SessionId};
use dsh_plan::store::{Anchor, Append, EventLog, Mark, MemoryLog, RedisLog};

use crate::helpers::TestRedis;

fn select(active: bool) -> NewEvent {
    NewEvent::new(
        &AgentId::root(),
        EventKind::PlanSelect(PlanSelect { active }),
    )
}

fn mark(n: u32) -> Mark {
    Mark {
        name: "0123456789abcdef0123456789abcdef".into(),
        n,
    }
}

async fn a_marked_commit_happens_once(log: Arc<dyn EventLog>) {
    let sid = SessionId::generate().unwrap();
    let once = |expected: u64, events: Vec<NewEvent>, n: u32| {
        let log = log.clone();
        let sid = sid.clone();
        async move {
            log.append_once(&sid, Anchor::seq_only(expected), &events, 60_000, &mark(n))
                .await
                .unwrap()
        }
    };
    let first = once(0, vec![select(true), select(false)], 1).await;
    assert!(
        matches!(first, Append::Committed(ref e) if e.len() == 2),
        "{first:?}"
    );
    // The retry of commit 1 expects what its stale view saw: it meets the marker instead.
    for expected in [0, 2, 7] {
        let again = once(expected, vec![select(true), select(false)], 1).await;
        assert!(
            matches!(again, Append::Already { first: 1, last: 2 }),
            "{again:?}"
        );
    }
    // An empty append (a decision that refused) meets it too.
    let check = once(0, vec![], 1).await;
    assert!(
        matches!(check, Append::Already { first: 1, last: 2 }),
        "{check:?}"
    );
    // Commit 2 is its own: a stale expectation conflicts and sets no marker…
    let stale = once(1, vec![select(true)], 2).await;
    assert!(
        matches!(stale, Append::Conflict { head: 2, .. }),
        "{stale:?}"
    );
    // …a check of the current end neither…
    assert!(matches!(once(2, vec![], 2).await, Append::Committed(ref e) if e.is_empty()));
    // …and the commit does.
    assert!(
        matches!(once(2, vec![select(true)], 2).await, Append::Committed(ref e) if e.len() == 1)
    );
    assert!(matches!(
        once(3, vec![select(true)], 2).await,
        Append::Already { first: 3, last: 3 }
    ));
    // Another request's marker, or none, is no hindrance.
    let other = Mark {
        name: "another".into(),
        n: 1,
    };
    let plain = log
        .append_once(&sid, Anchor::seq_only(3), &[select(false)], 60_000, &other)
        .await
        .unwrap();
    assert!(
        matches!(plain, Append::Committed(ref e) if e.len() == 1),
        "{plain:?}"
    );
    assert!(matches!(
        log.append(&sid, Anchor::seq_only(4), &[select(true)], 60_000)
            .await
            .unwrap(),
        Append::Committed(_)
    ));
    let seqs: Vec<u64> = log
        .read(&sid, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq())
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5], "nothing was appended twice");
}

#[tokio::test]
async fn a_marked_commit_happens_once_on_redis() {
    let redis = TestRedis::start().await;
    let log = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    let sid_key = |sid: &SessionId| log.mark_key(sid, &mark(1));
    let probe = SessionId::parse("probe").unwrap();
    assert_eq!(
        sid_key(&probe),
        format!(
            "{}:{{probe}}:idem:0123456789abcdef0123456789abcdef:1",
            redis.prefix
        ),
        "a marker lives in its session's slot"
    );
    a_marked_commit_happens_once(Arc::new(log)).await;
    let mut conn = redis.conn().await;
    let markers: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*:idem:*", redis.prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(markers.len(), 3, "{markers:?}");
    for marker in markers {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&marker)
            .query_async(&mut conn)
            .await
            .unwrap();
        let day = 24 * 3600 * 1000;
        assert!(
            ttl > day - 60_000 && ttl <= day,
            "{marker}: kept 24 h, not {ttl} ms"
        );
    }
}

#[tokio::test]
async fn a_marked_commit_happens_once_in_memory() {
    a_marked_commit_happens_once(Arc::new(MemoryLog::default())).await;
}
