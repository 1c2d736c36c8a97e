//! Adversarial reproductions (review of issue 9): each test names a defect and fails while it
//! stands.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{spawn_replica, spawn_with, verify, TestApp, TestRedis};
use crate::mock_provider::{text_reply, MockProvider};

async fn run_command(app: &TestApp, sid: &str, input: &str) -> crate::helpers::Reply {
    app.post_json(
        &format!("/v1/sessions/{sid}/agents/main/commands"),
        json!({ "input": input }),
    )
    .await
}

/// `/plan <message>` on an idle agent and the review question it leads to.
async fn plan_and_await_review(app: &TestApp, sid: &str, message: &str) -> (String, String) {
    let ran = run_command(app, sid, &format!("/plan {message}"))
        .await
        .ok();
    let turn = ran["message"]["turn"].as_str().unwrap().to_owned();
    let q = app.await_question(sid).await;
    (turn, q["id"].as_str().unwrap().to_owned())
}

/// Whether `turn` ends within `wait`.
async fn ends_within(app: &TestApp, sid: &str, turn: &str, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        let events = app.events(sid).await;
        if events
            .iter()
            .any(|e| e["type"] == "turn/ended" && e["data"]["turn"] == turn)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Two users answer the same review at once, one through each replica. The first answer wins
/// and the other gets 409 — and the turn must go on. It does not when the loser was the
/// replica that took the turn's lease before committing: the winner found the lease taken (so
/// it does not run the turn), the loser releases it after its refusal (so no sweeper adopts
/// it). The turn stays `running` forever with nobody running it.
#[tokio::test]
async fn racing_answers_on_two_replicas_never_leave_an_answered_turn_without_a_runner() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let mut reviews = Vec::new();
    for _ in 0..12 {
        let sid = a.create_session().await;
        let (turn, qid) = plan_and_await_review(&a, &sid, "fix the login bug").await;
        b.await_question(&sid).await;
        reviews.push((sid, turn, qid));
    }
    let races = reviews.iter().map(|(sid, _, qid)| {
        let (a, b) = (&a, &b);
        async move {
            let approve = json!({"label": "Approve"});
            let (x, y) = tokio::join!(
                a.answer(sid, qid, approve.clone()),
                b.answer(sid, qid, approve)
            );
            let mut codes = [x.status.as_u16(), y.status.as_u16()];
            codes.sort();
            assert_eq!(codes, [200, 409], "one answer wins: {x:?} {y:?}");
        }
    });
    futures_util::future::join_all(races).await;
    let mut stuck = Vec::new();
    for (sid, turn, _) in &reviews {
        if !ends_within(&a, sid, turn, Duration::from_secs(8)).await {
            let session = a.session(sid).await.ok();
            stuck.push(format!("{sid}: {}", session["agents"][0]));
        }
    }
    assert!(
        stuck.is_empty(),
        "{} of {} approved turns never continued: {stuck:#?}",
        stuck.len(),
        reviews.len()
    );
}

/// Redis loses the tail of a session's log (restart from an older RDB/AOF, or a failover to a
/// replica that had not received the last writes) and other replicas keep writing, so the log
/// grows back past the seq a replica folded — with different events. Reads notice (the anchor
/// holds the commit time), but `Sessions::decide` starts from the cache without catching up,
/// and the append script compares only the seq: the stale decision is committed and the log
/// is corrupt for good.
#[tokio::test]
async fn a_decision_is_never_committed_on_a_cache_that_the_log_has_replaced() {
    let redis = TestRedis::start().await;
    let a = spawn_replica(Some(&redis), "a").await;
    let b = spawn_replica(Some(&redis), "b").await;
    let sid = a.create_session().await;
    let mut conn = redis.conn().await;
    let key = redis.key(&sid);
    let snapshot: Vec<u8> = redis::cmd("DUMP")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    // A caches a session with `agent-1` in it (seq 2)...
    let spawned = a.spawn_agent(&sid, None).await.ok();
    assert_eq!(spawned["id"], "agent-1");
    // ...which Redis then loses: it comes back from the snapshot taken at seq 1.
    let _: () = redis::cmd("RESTORE")
        .arg(&key)
        .arg(0)
        .arg(snapshot)
        .arg("REPLACE")
        .query_async(&mut conn)
        .await
        .unwrap();
    // B writes seq 2 anew.
    b.set_plan(&sid, "main", true).await.ok();
    // A decides on its cache, in which agent-1 still exists.
    let reply = a.set_plan(&sid, "agent-1", true).await;
    let session = b.session(&sid).await;
    let (ok, out) = verify(&redis, &sid);
    assert!(
        reply.status.as_u16() == 404 && session.status.as_u16() == 200 && ok,
        "agent-1 no longer exists, yet A decided on its stale fold: {reply:?}\n\
         the session on B now: {session:?}\nverify: {out}"
    );
}

async fn openai_replica(redis: &TestRedis, mock: &MockProvider, id: &str) -> TestApp {
    let url = mock.url();
    spawn_with(Some(redis), id, move |s| {
        s.provider = "openai".into();
        s.provider_url = url;
    })
    .await
}

/// A provider chunk whose tool-call `index` is absurd (here u64::MAX; a large one instead
/// allocates `index + 1` slots) panics the runner task. The runner's lease-renewal task is a
/// separate task that only `renew.abort()` stops — which a panic skips — so the dead runner's
/// lease is renewed every second forever: no replica ever adopts the turn, which stays
/// `running` with nobody running it.
#[tokio::test]
async fn a_runner_that_panics_does_not_keep_its_turn_leased_forever() {
    let redis = TestRedis::start().await;
    let mock = MockProvider::start().await;
    let bad = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":18446744073709551615,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"x\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n";
    mock.next(bad.to_owned(), Duration::ZERO).await;
    mock.otherwise(text_reply("Done after all.")).await;
    let a = openai_replica(&redis, &mock, "a").await;
    let _b = openai_replica(&redis, &mock, "b").await;
    let sid = a.create_session().await;
    let turn = a.prompt(&sid, "main", "hello").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    mock.await_requests(1).await;
    let ended = ends_within(&a, &sid, &turn, Duration::from_secs(10)).await;
    let mut conn = redis.conn().await;
    let member = format!("{sid} main {turn}");
    let expiry: Option<f64> = redis::cmd("ZSCORE")
        .arg(format!("{}:{{leases}}:expiry", redis.prefix))
        .arg(&member)
        .query_async(&mut conn)
        .await
        .unwrap();
    let requests = mock.requests().await.len();
    assert!(
        ended,
        "10 s after its runner died the turn is still {} with {requests} provider request(s); \
         its lease expires at {expiry:?} (still renewed)",
        a.session(&sid).await.ok()["agents"][0]["status"]
    );
}

/// Bytes Redis has sent to clients so far.
async fn redis_bytes_out(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The fold cache is weighted by the history a session holds (new with issue 9, since the
/// history moved into the fold), and quick_cache refuses an entry heavier than one shard's
/// hot budget: 512 MiB / (4 x cores, rounded to a power of two) x 0.97 — about 62 MB here on
/// 2 cores, 15 MB on 8. A session with more history than that (a few hundred to a few
/// thousand 32 KB messages — the API accepts them) is never cached, so every read and every
/// decision folds it again from its first event: the full-log scans on hot paths are back
/// (GET plan, every decide, and a running turn's 200 ms poll).
#[tokio::test]
async fn a_session_with_a_large_history_is_still_read_only_past_its_fold() {
    let redis = TestRedis::start().await;
    let app = spawn_replica(Some(&redis), "a").await;
    let sid = app.create_session().await;
    // 2,500 messages of 32,000 bytes on `main`, as 2,500 POSTs of the largest accepted text
    // would record them (written directly: the turns they start do not matter here).
    let mut conn = redis.conn().await;
    let text = "x".repeat(32_000);
    let data = json!({ "text": text }).to_string();
    for chunk in (2..2_502u64).collect::<Vec<_>>().chunks(250) {
        let mut pipe = redis::pipe();
        for seq in chunk {
            pipe.cmd("XADD")
                .arg(redis.key(&sid))
                .arg(format!("{seq}-0"))
                .arg("type")
                .arg("user/message")
                .arg("agent")
                .arg("main")
                .arg("data")
                .arg(&data)
                .arg("ts")
                .arg(1_764_670_000_000u64 + seq)
                .arg("v")
                .arg(1)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await.unwrap();
    }
    app.plan(&sid, "main").await.ok(); // folds the session once
    let before = redis_bytes_out(&mut conn).await;
    let started = std::time::Instant::now();
    for _ in 0..5 {
        app.plan(&sid, "main").await.ok();
    }
    let took = started.elapsed();
    let sent = redis_bytes_out(&mut conn).await - before;
    assert!(
        sent < 1_000_000,
        "5 GET plan on an unchanged session read {} MB from Redis in {took:?}: the fold is \
         not cached, each read folds all 80 MB again",
        sent / 1_000_000
    );
}

/// A replica process on `redis` (as in failover.rs).
async fn spawn_process(
    redis: &TestRedis,
    id: &str,
    token_delay_ms: u64,
) -> (std::process::Child, TestApp) {
    use std::os::unix::process::CommandExt;
    let port = crate::helpers::free_port();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-plan"));
    cmd.env("REDIS_URL", &redis.url)
        .env("DSH_KEY_PREFIX", &redis.prefix)
        .env("DSH_BIND", format!("127.0.0.1:{port}"))
        .env("DSH_REPLICA_ID", id)
        .env("DSH_WORKERS", "1")
        .env("DSH_FIXTURE_TOKEN_DELAY_MS", token_delay_ms.to_string())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().expect("the dsh-plan binary starts");
    let app = TestApp::remote(format!("http://127.0.0.1:{port}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while app
        .client
        .get(app.url("/readyz"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "replica {id} did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, app)
}

/// A replica paused longer than the lease ttl (GC-like stall, VM freeze; here SIGSTOP) loses
/// its turn to another replica, which records `step/retried` attempt 2. When the paused one
/// wakes, its runner notices the step was taken over — and, not having looked at its lease
/// yet (renewal runs on its own 1 s tick), decides again from the log: `Next::Retry`, so it
/// commits attempt 3 and sends the step again. The other replica then sees itself superseded
/// and commits attempt 4, and so on until the first one's renewal fails: every round burns
/// an attempt (8 end the turn as `failed`) and a provider request.
#[tokio::test]
async fn a_runner_woken_after_losing_its_lease_does_not_take_the_step_back() {
    let redis = TestRedis::start().await;
    let mut bad = Vec::new();
    for round in 0..3 {
        let (mut a, a_app) = spawn_process(&redis, "a", 200).await;
        let (mut b, b_app) = spawn_process(&redis, "b", 200).await;
        let sid = a_app.create_session().await;
        let prompt = "tell me everything about the login flow and its many parts ".repeat(4);
        let turn = a_app.prompt(&sid, "main", &prompt).await.ok()["turn"]
            .as_str()
            .unwrap()
            .to_owned();
        a_app
            .await_event(&sid, "step/started", |e| e["type"] == "step/started")
            .await;
        unsafe { libc::kill(a.id() as i32, libc::SIGSTOP) };
        b_app
            .await_event(&sid, "step/retried", |e| e["type"] == "step/retried")
            .await;
        unsafe { libc::kill(a.id() as i32, libc::SIGCONT) };
        let events = b_app.await_turn_end(&sid, &turn).await;
        let retries: Vec<String> = events
            .iter()
            .filter(|e| e["type"] == "step/retried")
            .map(|e| {
                format!(
                    "attempt {} by {}",
                    e["data"]["attempt"], e["data"]["replica"]
                )
            })
            .collect();
        if retries.len() != 1 {
            bad.push(format!(
                "round {round}: {retries:?}, ended {}",
                events.last().unwrap()["data"]["reason"]
            ));
        }
        let _ = a.kill();
        let _ = b.kill();
        let _ = a.wait();
        let _ = b.wait();
    }
    assert!(
        bad.is_empty(),
        "a woken runner took the step back: {bad:#?}"
    );
}
