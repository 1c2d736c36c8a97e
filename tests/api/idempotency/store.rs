//! The stores behind idempotent requests, on Redis (`append.lua`, `requests.lua`) and in
//! memory: a marked commit happens once, whatever the expected seq of a retry says; a record
//! runs its request once at a time, replays its answer and keeps a tenant's keys bounded.

use std::sync::Arc;

use dsh_plan::domain::event::{EventKind, PlanSelect};
use dsh_plan::domain::{AgentId, NewEvent, SessionId};
use dsh_plan::store::{
    Anchor, Append, Begin, EventLog, Mark, MemoryLog, MemoryRequests, RecordTerms, RedisLog,
    RedisRequests, RequestStore, StoredResponse,
};

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
    let probe = SessionId::parse("probe").unwrap();
    let p = &redis.prefix;
    assert_eq!(
        log.session_keys(&probe),
        [
            format!("{p}:{{probe}}:log"),
            format!("{p}:{{probe}}:idem"),
            format!("{p}:{{probe}}:idem:exp"),
        ],
        "markers live in their session's slot, among its keys"
    );
    a_marked_commit_happens_once(Arc::new(log)).await;
    let mut conn = redis.conn().await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{p}:*:idem*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    assert_eq!(
        keys.len(),
        2,
        "one hash of markers and its expiry: {keys:?}"
    );
    let marks: u64 = redis::cmd("HLEN")
        .arg(&keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(marks, 3);
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            ttl > 0 && ttl <= 60_000,
            "{key}: kept as long as the session (60 s), not {ttl} ms"
        );
    }
}

/// A session's markers go with it: a session made again under its id is not taken for the
/// one a keyed request wrote before the delete.
async fn a_deleted_session_takes_its_markers_along(log: &dyn EventLog) -> SessionId {
    let sid = SessionId::generate().unwrap();
    let (events, first) = ([select(true)], mark(1));
    let once = || log.append_once(&sid, Anchor::seq_only(0), &events, 60_000, &first);
    assert!(matches!(once().await.unwrap(), Append::Committed(_)));
    assert!(log.delete(&sid).await.unwrap());
    let again = once().await.unwrap();
    assert!(
        matches!(again, Append::Committed(ref e) if e.len() == 1),
        "not answered from the deleted session's marker: {again:?}"
    );
    assert_eq!(log.read(&sid, 0, 10).await.unwrap().len(), 1);
    assert!(log.delete(&sid).await.unwrap());
    sid
}

#[tokio::test]
async fn a_deleted_session_takes_its_markers_along_on_redis() {
    let redis = TestRedis::start().await;
    let log = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    let sid = a_deleted_session_takes_its_markers_along(&log).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:{{{sid}}}*", redis.prefix))
        .query_async(&mut redis.conn().await)
        .await
        .unwrap();
    assert_eq!(keys, Vec::<String>::new(), "nothing of the session is left");
}

#[tokio::test]
async fn a_deleted_session_takes_its_markers_along_in_memory() {
    a_deleted_session_takes_its_markers_along(&MemoryLog::default()).await;
}

#[tokio::test]
async fn a_marked_commit_happens_once_in_memory() {
    a_marked_commit_happens_once(Arc::new(MemoryLog::default())).await;
}

const TERMS: RecordTerms = RecordTerms {
    lock_ms: 60_000,
    keep_ms: 60_000,
    max_records: 2,
};

fn run(nonce: &str, again: bool) -> Begin {
    Begin::Run {
        nonce: nonce.into(),
        again,
    }
}

async fn a_record_runs_its_request_once_at_a_time_and_replays_its_answer(s: &dyn RequestStore) {
    let stored = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body: b"{\"id\":1}".to_vec(),
    };
    let begin =
        |digest: &'static str, fp: &'static str, owner: &'static str, nonce: &'static str| {
            s.begin("t", digest, fp, owner, nonce, TERMS)
        };
    assert_eq!(begin("k", "fp", "a", "n1").await.unwrap(), run("n1", false));
    let busy = begin("k", "fp", "b", "n2").await.unwrap();
    assert!(
        matches!(busy, Begin::InUse { retry_after_ms } if retry_after_ms > 0 && retry_after_ms <= 60_000),
        "{busy:?}"
    );
    assert_eq!(
        begin("k", "other", "b", "n2").await.unwrap(),
        Begin::Mismatch
    );
    // Only its owner releases a lock; then the next attempt runs, with the record's nonce.
    s.finish("t", "k", "b", None).await.unwrap();
    assert!(matches!(
        begin("k", "fp", "b", "n2").await.unwrap(),
        Begin::InUse { .. }
    ));
    s.finish("t", "k", "a", None).await.unwrap();
    assert_eq!(begin("k", "fp", "b", "n2").await.unwrap(), run("n1", true));
    assert!(
        !s.renew("t", "k", "a", 1000).await.unwrap(),
        "the lock is b's now"
    );
    assert!(s.renew("t", "k", "b", 1000).await.unwrap());
    // The first final answer stands, whoever gives it.
    s.finish("t", "k", "a", Some(&stored)).await.unwrap();
    let later = StoredResponse {
        status: 200,
        ..stored.clone()
    };
    s.finish("t", "k", "b", Some(&later)).await.unwrap();
    assert_eq!(
        begin("k", "fp", "c", "n3").await.unwrap(),
        Begin::Replay(stored.clone())
    );
    assert!(
        !s.renew("t", "k", "b", 1000).await.unwrap(),
        "an answered record holds no lock"
    );
    // Another tenant's key of the same name is its own.
    assert_eq!(
        s.begin("u", "k", "fp", "a", "n4", TERMS).await.unwrap(),
        run("n4", false)
    );
    // A lock nobody renews expires: a crashed attempt never holds a key for good.
    let short = RecordTerms {
        lock_ms: 0,
        ..TERMS
    };
    assert_eq!(
        s.begin("v", "j", "fp", "a", "n5", short).await.unwrap(),
        run("n5", false)
    );
    assert_eq!(
        s.begin("v", "j", "fp", "b", "n6", TERMS).await.unwrap(),
        run("n5", true)
    );
    // A tenant keeps at most `max_records`, and hears when the oldest expires.
    assert_eq!(
        begin("k2", "fp", "a", "n7").await.unwrap(),
        run("n7", false)
    );
    let full = begin("third", "fp", "a", "n7").await.unwrap();
    assert!(
        matches!(full, Begin::Full { retry_after_ms } if retry_after_ms > 0 && retry_after_ms <= 60_000),
        "{full:?}"
    );
    // An expired record is gone: its key is new again.
    let gone = RecordTerms {
        keep_ms: 1,
        ..TERMS
    };
    s.begin("w", "k", "fp", "a", "n8", gone).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(
        s.begin("w", "k", "fp2", "a", "n9", TERMS).await.unwrap(),
        run("n9", false)
    );
}

#[tokio::test]
async fn a_record_runs_its_request_once_at_a_time_and_replays_its_answer_on_redis() {
    let redis = TestRedis::start().await;
    let log = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    a_record_runs_its_request_once_at_a_time_and_replays_its_answer(&RedisRequests::new(&log))
        .await;
    let mut conn = redis.conn().await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{}:{{t:t}}:idem:k", redis.prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "a record expires: {ttl}");
}

#[tokio::test]
async fn a_record_runs_its_request_once_at_a_time_and_replays_its_answer_in_memory() {
    a_record_runs_its_request_once_at_a_time_and_replays_its_answer(&MemoryRequests::default())
        .await;
}
