//! The server binary's credential modes and `dsh-plan keys`, as an operator meets them.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::auth::key_for;
use crate::helpers::{free_port, spawn_with, TestApp, TestRedis};

fn dsh(envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-plan"));
    cmd.env_remove("REDIS_URL")
        .env("RUST_LOG", "warn")
        .args(args)
        .stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[tokio::test]
async fn keys_create_prints_the_key_once_on_its_last_line_and_list_never_shows_it() {
    let redis = TestRedis::start().await;
    let env = [
        ("REDIS_URL", redis.url.as_str()),
        ("DSH_KEY_PREFIX", redis.prefix.as_str()),
    ];
    let out = dsh(&env, &["keys", "create", "--tenant", "acme", "--rate", "7"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let key = stdout.lines().last().unwrap().trim().to_owned();
    assert!(key.starts_with("dsh_"), "{stdout}");
    assert_eq!(stdout.matches(&key).count(), 1);
    let listed = dsh(&env, &["keys", "list"]);
    let listed = text(&listed.stdout);
    assert!(
        listed.contains("acme") && listed.contains(" 7 "),
        "{listed}"
    );
    assert!(
        !listed.contains(&key[4..]),
        "the list shows ids, never keys"
    );
    // Nothing in Redis holds the key in clear.
    let mut conn = redis.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", redis.prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    for k in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        let secret = &key[key.rfind('_').unwrap() + 1..];
        assert!(
            !String::from_utf8_lossy(&dump).contains(secret),
            "{k} holds the key"
        );
    }
    let bad = dsh(&env, &["keys", "create", "--tenant", "no spaces"]);
    assert!(!bad.status.success());
    let missing = dsh(&env, &["keys", "revoke", "0000000000000000"]);
    assert!(!missing.status.success());
}

#[tokio::test]
async fn a_revoked_key_and_its_tokens_stop_working_on_every_replica_within_seconds() {
    let redis = TestRedis::start().await;
    let (id, key) = key_for(&redis, "acme", None).await;
    let r1 = crate::auth::secured(&redis, "r1").await;
    let r2 = crate::auth::secured(&redis, "r2").await;
    let sid = r1.as_caller(&key).create_session().await;
    let token = crate::auth::mint(&r1.as_caller(&key), &sid, json!({"scopes": ["read"]})).await;
    // Both replicas have the key cached now.
    r2.as_caller(&key).session(&sid).await.ok();
    r2.as_caller(&token).session(&sid).await.ok();
    let env = [
        ("REDIS_URL", redis.url.as_str()),
        ("DSH_KEY_PREFIX", redis.prefix.as_str()),
    ];
    let out = dsh(&env, &["keys", "revoke", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let revoked = Instant::now();
    for app in [&r1, &r2] {
        for credential in [&key, &token] {
            loop {
                let r = app.as_caller(credential).session(&sid).await;
                if r.status == 401 {
                    r.assert_problem(401, "unauthorized");
                    break;
                }
                assert!(
                    revoked.elapsed() < Duration::from_secs(5),
                    "still accepted: {r:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test]
async fn with_no_keys_on_loopback_the_server_runs_open_and_the_first_key_closes_it() {
    let redis = TestRedis::start().await;
    let app = spawn_with(Some(&redis), "r1", |_| {}).await;
    let sid = app.create_session().await;
    app.set_plan(&sid, "main", true).await.ok();
    let (_, key) = key_for(&redis, "acme", None).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = app.session(&sid).await;
        if r.status == 401 {
            break;
        }
        assert!(Instant::now() < deadline, "auth never turned on: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A session made while open belongs to no tenant: no key reaches it.
    app.as_caller(&key)
        .session(&sid)
        .await
        .assert_problem(404, "session-not-found");
    // Public routes stay public.
    assert_eq!(app.get("/v1/status").await.status, 200);
    assert_eq!(app.get("/readyz").await.status, 200);
}

#[tokio::test]
async fn keys_in_a_file_turn_credentials_on_for_the_in_memory_server() {
    let dir = std::env::temp_dir().join(format!("dsh-keys-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys.jsonl");
    let file_s = file.to_str().unwrap().to_owned();
    let out = dsh(
        &[("DSH_KEYS_FILE", &file_s)],
        &["keys", "create", "--tenant", "acme"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key = text(&out.stdout).lines().last().unwrap().trim().to_owned();
    assert!(!std::fs::read_to_string(&file).unwrap().contains(&key[21..]));
    let app = spawn_with(None, "m1", |s| s.keys_file = Some(file_s.clone())).await;
    app.post_json("/v1/sessions", json!({}))
        .await
        .assert_problem(401, "unauthorized");
    let sid = app.as_caller(&key).create_session().await;
    app.as_caller(&key).session(&sid).await.ok();
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_public_bind_without_keys_refuses_to_start_unless_auth_is_explicitly_off() {
    let port = free_port().to_string();
    let bind = format!("0.0.0.0:{port}");
    let out = dsh(&[("DSH_BIND", &bind)], &[]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("refusing to serve") && stderr.contains("DSH_AUTH=off"),
        "{stderr}"
    );

    // DSH_AUTH=off starts (and says so); stop it once it answers.
    let child = Command::new(env!("CARGO_BIN_EXE_dsh-plan"))
        .env_remove("REDIS_URL")
        .env("DSH_BIND", &bind)
        .env("DSH_AUTH", "off")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let app = TestApp::remote(format!("http://127.0.0.1:{port}"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while app.client.get(app.url("/readyz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "the open server did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.create_session().await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(text(&out.stderr).contains("DSH_AUTH=off"), "it warns");
}
