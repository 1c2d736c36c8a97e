//! Replicas as real processes on one Redis: kill -9 the one running a step, and another one
//! finishes the turn.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::helpers::{free_port, verify, TestApp, TestRedis};

/// A replica running as its own process.
pub struct Replica {
    pub child: Child,
    pub app: TestApp,
}

pub async fn spawn_process(redis: &TestRedis, id: &str, token_delay_ms: u64) -> Replica {
    spawn_process_with(redis, id, token_delay_ms, &[]).await
}

/// [`spawn_process`] with more environment variables.
pub async fn spawn_process_with(
    redis: &TestRedis,
    id: &str,
    token_delay_ms: u64,
    env: &[(&str, &str)],
) -> Replica {
    spawn_process_on(redis, id, free_port(), token_delay_ms, env).await
}

/// [`spawn_process_with`] listening on `port` (a replica restarted where it was).
pub async fn spawn_process_on(
    redis: &TestRedis,
    id: &str,
    port: u16,
    token_delay_ms: u64,
    env: &[(&str, &str)],
) -> Replica {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-plan"));
    cmd.envs(env.iter().copied());
    cmd.env("REDIS_URL", &redis.url)
        .env("DSH_KEY_PREFIX", &redis.prefix)
        .env("DSH_BIND", format!("127.0.0.1:{port}"))
        .env("DSH_REPLICA_ID", id)
        .env("DSH_WORKERS", "1")
        .env("DSH_FIXTURE_TOKEN_DELAY_MS", token_delay_ms.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().expect("the dsh-plan binary starts");
    let app = TestApp::remote(format!("http://127.0.0.1:{port}"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while app
        .client
        .get(app.url("/readyz"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        assert!(
            Instant::now() < deadline,
            "replica {id} did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Replica { child, app }
}

fn ms_since_epoch(rfc3339: &str) -> u128 {
    humantime::parse_rfc3339(rfc3339)
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

#[tokio::test]
async fn kill_9_of_the_replica_running_a_step_lets_another_finish_the_turn_without_duplicates() {
    let redis = TestRedis::start().await;
    let mut a = spawn_process(&redis, "a", 400).await;
    let b = spawn_process(&redis, "b", 400).await;
    let sid = a.app.create_session().await;
    let reply = a.app.prompt(&sid, "main", "hello there").await;
    let turn = reply.body["turn"].as_str().unwrap().to_owned();

    let events = b
        .app
        .await_event(&sid, "step/started", |e| e["type"] == "step/started")
        .await;
    let header = events.iter().find(|e| e["type"] == "step/started").unwrap();
    assert_eq!(
        header["data"]["header"]["replica"], "a",
        "the accepting replica runs the turn"
    );
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let killed_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();

    let events = b.app.await_turn_end(&sid, &turn).await;
    let retried = events
        .iter()
        .find(|e| e["type"] == "step/retried")
        .expect("the step was retried");
    assert_eq!(retried["data"]["replica"], "b");
    assert_eq!(retried["data"]["step"], 1);
    let adopted_after =
        ms_since_epoch(retried["committed_at"].as_str().unwrap()).saturating_sub(killed_at);
    assert!(
        adopted_after < 5_000,
        "resumed {adopted_after} ms after the kill"
    );

    let answers: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .collect();
    assert_eq!(
        answers.len(),
        1,
        "no duplicated assistant message: {events:#?}"
    );
    assert_eq!(answers[0]["data"]["text"], "Done: hello there");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "step/started")
            .count(),
        1,
        "the retry reused the frozen step"
    );
    assert_eq!(events.last().unwrap()["data"]["reason"], "completed");
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn kill_9_of_a_replica_with_subscribers_attached_loses_them_nothing_after_reconnecting_elsewhere(
) {
    use crate::sse::{raw_ids, SseClient};
    let redis = TestRedis::start().await;
    let mut a = spawn_process(&redis, "a", 1).await;
    let b = spawn_process(&redis, "b", 1).await;
    let c = spawn_process(&redis, "c", 1).await;
    let sid = b.app.create_session().await;
    let url = |r: &Replica| r.app.url(&format!("/v1/sessions/{sid}/events"));
    let mut subs = Vec::new();
    for _ in 0..3 {
        subs.push(SseClient::connect(&url(&a), None).await);
    }
    b.app.set_plan(&sid, "main", true).await.ok();
    for s in subs.iter_mut() {
        s.until("2-0", |f| {
            f.id.as_deref() == Some("2-0") && f.event == "plan/mode"
        })
        .await;
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    for s in subs.iter_mut() {
        s.drain().await; // the stream breaks with the replica
    }
    // Commits while the subscribers are away.
    for active in [false, true] {
        b.app.set_plan(&sid, "main", active).await.ok();
    }
    for s in subs.iter_mut() {
        let last = s.last_id.clone();
        let mut again = SseClient::connect(&url(&c), last.as_deref()).await;
        let frames = again
            .until("4-0", |f| {
                f.id.as_deref() == Some("4-0") && f.event == "plan/mode"
            })
            .await;
        assert_eq!(
            raw_ids(&frames),
            vec![3, 4],
            "exactly the missing events, once each"
        );
        *s = again;
    }
    b.app.set_plan(&sid, "main", false).await.ok();
    for s in subs.iter_mut() {
        let frames = s
            .until("5-0", |f| {
                f.id.as_deref() == Some("5-0") && f.event == "plan/mode"
            })
            .await;
        assert_eq!(raw_ids(&frames), vec![5]);
    }
}

#[tokio::test]
async fn after_every_replica_is_killed_a_new_one_reads_sessions_back_and_finishes_the_running_turn()
{
    let redis = TestRedis::start().await;
    let mut a = spawn_process(&redis, "a", 300).await;
    let sid = a.app.create_session().await;
    a.app.set_plan(&sid, "main", true).await.ok();
    let other = a.app.create_session().await;
    let turn = a.app.prompt(&sid, "main", "keep going").await.body["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    a.app
        .await_event(&sid, "step/started", |e| e["type"] == "step/started")
        .await;
    let before = a.app.session(&other).await.ok();
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let d = spawn_process(&redis, "d", 1).await;
    assert_eq!(
        d.app.session(&other).await.ok(),
        before,
        "sessions read back identically"
    );
    let q = d.app.await_question(&sid).await;
    assert_eq!(
        q["intent"]["kind"], "plan-review",
        "the adopted turn continued to its review"
    );
    d.app.dismiss(&sid, q["id"].as_str().unwrap()).await.ok();
    let events = d.app.await_turn_end(&sid, &turn).await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "assistant/message" && e["data"]["step"] == 1)
            .count(),
        1
    );
    let e = spawn_process(&redis, "e", 1).await;
    assert_eq!(
        e.app.session(&sid).await.ok(),
        d.app.session(&sid).await.ok()
    );
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn sigterm_ends_event_streams_so_clients_reconnect_elsewhere() {
    use crate::sse::SseClient;
    let redis = TestRedis::start().await;
    let mut a = spawn_process(&redis, "a", 1).await;
    let sid = a.app.create_session().await;
    let mut sub = SseClient::connect(&a.app.url(&format!("/v1/sessions/{sid}/events")), None).await;
    sub.until("the first event", |f| f.event == "session/created")
        .await;
    let started = Instant::now();
    unsafe {
        libc::kill(a.child.id() as i32, libc::SIGTERM);
    }
    sub.drain().await;
    assert!(*sub.ended.borrow(), "the stream ended");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "ended promptly: {:?}",
        started.elapsed()
    );
    assert!(
        (250..=1000).contains(&sub.retry_ms()),
        "the stream's last words ask for a prompt reconnect: retry {} ms",
        sub.retry_ms()
    );
    let status = a.child.wait().unwrap();
    assert!(status.success(), "a graceful exit: {status:?}");
}

#[tokio::test]
async fn a_second_sigterm_stops_a_draining_replica_at_once() {
    let redis = TestRedis::start().await;
    // A drain that would take 10 s on its own.
    let mut a = spawn_process_with(&redis, "a", 1, &[("DSH_DRAIN_DELAY_MS", "10000")]).await;
    let pid = a.child.id() as i32;
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    // The drain has begun once the replica says it is not ready.
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.app.get("/readyz").await.status != 503 {
        assert!(
            Instant::now() < deadline,
            "the replica never started draining"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = Instant::now();
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let status = tokio::task::spawn_blocking(move || a.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        second.elapsed() < Duration::from_secs(3),
        "stopped {:?} after the second signal, not after the drain",
        second.elapsed()
    );
    assert!(
        !status.success(),
        "an exit that says it did not drain: {status:?}"
    );
}

#[tokio::test]
async fn a_draining_replica_is_not_ready_and_opens_no_stream_but_still_serves_writes() {
    let redis = TestRedis::start().await;
    // A drain window long enough to look at what the replica answers meanwhile.
    let mut a = spawn_process_with(&redis, "a", 1, &[("DSH_DRAIN_DELAY_MS", "3000")]).await;
    let sid = a.app.create_session().await;
    let mut sub =
        crate::sse::SseClient::connect(&a.app.url(&format!("/v1/sessions/{sid}/events")), None)
            .await;
    sub.until("the first event", |f| f.event == "session/created")
        .await;
    unsafe {
        libc::kill(a.child.id() as i32, libc::SIGTERM);
    }
    // The open stream ends with its reconnect hint: the drain has begun.
    sub.drain().await;
    assert!(*sub.ended.borrow());
    let detail = a
        .app
        .get("/readyz")
        .await
        .assert_problem(503, "replica-draining");
    assert!(detail.contains("stopping"), "{detail}");
    let stream = a.app.get(&format!("/v1/sessions/{sid}/events")).await;
    stream.assert_problem(503, "replica-draining");
    assert_eq!(stream.retry_after.as_deref(), Some("1"));
    // Requests other than new streams are still served until it stops accepting, each
    // closing its connection: a proxy does not keep one to a replica that is leaving.
    assert_eq!(
        a.app.set_plan(&sid, "main", true).await.ok()["outcome"],
        "committed"
    );
    let res = a
        .app
        .client
        .get(a.app.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["connection"], "close");
    let status = a.child.wait().unwrap();
    assert!(status.success(), "a graceful exit: {status:?}");
}

#[tokio::test]
async fn sigterm_of_the_replica_running_a_step_hands_the_turn_to_another_within_a_second() {
    use crate::sse::SseClient;
    let redis = TestRedis::start().await;
    let mut a = spawn_process(&redis, "a", 300).await;
    let b = spawn_process(&redis, "b", 20).await;
    let sid = a.app.create_session().await;
    let mut sse = SseClient::connect(&b.app.url(&format!("/v1/sessions/{sid}/events")), None).await;
    let reply = a.app.prompt(&sid, "main", "hello there my friend").await;
    let turn = reply.body["turn"].as_str().unwrap().to_owned();
    sse.until("a first delta", |f| f.event == "assistant/delta")
        .await;
    unsafe {
        libc::kill(a.child.id() as i32, libc::SIGTERM);
    }
    let stopped_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let frames = sse.until("turn/ended", |f| f.event == "turn/ended").await;
    let status = a.child.wait().unwrap();
    assert!(status.success(), "a graceful exit: {status:?}");

    let retried = frames
        .iter()
        .find(|f| f.event == "step/retried")
        .expect("the step was retried elsewhere");
    assert_eq!(retried.data["data"]["replica"], "b");
    assert_eq!(retried.data["data"]["attempt"], 2);
    let resumed_after =
        ms_since_epoch(retried.data["committed_at"].as_str().unwrap()).saturating_sub(stopped_at);
    assert!(
        resumed_after < 1_000,
        "resumed {resumed_after} ms after SIGTERM"
    );
    // Deltas name their attempt; the retried attempt streams its text again, and every delta
    // of the step comes before the step's recorded answer.
    let position = |pred: &dyn Fn(&crate::sse::Frame) -> bool| frames.iter().position(pred);
    let retry_at = position(&|f| f.event == "step/retried").unwrap();
    let answer_at = position(&|f| f.event == "assistant/message").unwrap();
    for (i, f) in frames.iter().enumerate() {
        if f.event == "assistant/delta" {
            assert_eq!(f.data["data"]["step"], 1);
            assert_eq!(
                f.data["data"]["attempt"],
                if i < retry_at { 1 } else { 2 },
                "{f:?}"
            );
            assert!(
                i < answer_at,
                "a delta after the step's answer: {frames:#?}"
            );
        }
    }
    assert!(
        frames[retry_at..answer_at]
            .iter()
            .any(|f| f.event == "assistant/delta"),
        "the retried attempt streamed"
    );
    let events = b.app.await_turn_end(&sid, &turn).await;
    let answers: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .collect();
    assert_eq!(answers.len(), 1, "{events:#?}");
    let (ok, out) = verify(&redis, &sid);
    assert!(ok, "{out}");
}
