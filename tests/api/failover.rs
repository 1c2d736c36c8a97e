//! Replicas as real processes on one Redis: kill -9 the one running a step, and another one
//! finishes the turn.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::helpers::{free_port, verify, TestApp, TestRedis};

struct Replica {
    child: Child,
    app: TestApp,
}

async fn spawn_process(redis: &TestRedis, id: &str, token_delay_ms: u64) -> Replica {
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-plan"));
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
