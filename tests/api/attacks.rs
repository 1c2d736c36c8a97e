//! Attacks on credentials and limits found in review: each once got through.
//! Every test here failed before its fix; each names the attack in its own words.

use std::time::{Duration, Instant};

use dsh_plan::auth::{Auth, KEY_CACHE};
use dsh_plan::domain::TenantId;
use dsh_plan::store::{FileKeys, KeyStore, RedisLog};
use serde_json::json;

use crate::auth::{key_for, mint, secured, AcmeSession};
use crate::helpers::{spawn_with, TestRedis};

/// Reads `res` until its body ends or `deadline` passes; true when it ended.
async fn ends_before(res: &mut reqwest::Response, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, res.chunk()).await {
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None)) | Ok(Err(_)) => return true,
            Err(_) => return false,
        }
    }
}

/// Revoking a key must end what it (and its tokens) opened within the promised 5 s: an open
/// event stream is a read that would otherwise go on for as long as the connection lives (a
/// key's stream has no deadline at all, a token's up to an hour).
#[tokio::test]
async fn event_streams_opened_with_a_key_or_its_token_end_within_five_seconds_of_revoking_the_key()
{
    let redis = TestRedis::start().await;
    let (k1_id, k1) = key_for(&redis, "acme", None).await;
    let (_, k2) = key_for(&redis, "acme", None).await;
    let app = secured(&redis, "r1").await;
    let acme = app.as_caller(&k1);
    let sid = acme.create_session().await;
    let token = mint(
        &acme,
        &sid,
        json!({"scopes": ["read"], "ttl_seconds": 3600}),
    )
    .await;
    let mut by_key = acme
        .client
        .get(acme.url(&format!("/v1/sessions/{sid}/events")))
        .send()
        .await
        .unwrap();
    assert_eq!(by_key.status(), 200);
    let mut by_token = app
        .client
        .get(app.url(&format!("/v1/sessions/{sid}/events?access_token={token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(by_token.status(), 200);

    let store = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    assert!(store
        .revoke(&k1_id, dsh_plan::store::now_ms())
        .await
        .unwrap());
    let revoked = Instant::now();
    // New requests are refused in time (this part holds)...
    loop {
        if acme.session(&sid).await.status == 401 {
            break;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(5),
            "key still accepted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...while the tenant's other key keeps writing, and the revoked streams keep reading.
    let other = app.as_caller(&k2);
    let sid2 = sid.clone();
    let writer = tokio::spawn(async move {
        for i in 0..40 {
            other.set_plan(&sid2, "main", i % 2 == 0).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let deadline = revoked + Duration::from_secs(6);
    let key_ended = ends_before(&mut by_key, deadline).await;
    let token_ended = ends_before(&mut by_token, deadline).await;
    writer.abort();
    assert!(
        key_ended,
        "a stream opened with a revoked key still delivers events"
    );
    assert!(
        token_ended,
        "a stream opened with a revoked key's token still delivers events"
    );
}

/// Compaction asks the provider for one summary per agent: paid calls like a turn's, so they
/// count against the tenant's `max_provider_calls` too.
#[tokio::test]
async fn compaction_is_refused_when_the_tenants_provider_call_quota_is_used_up() {
    let redis = TestRedis::start().await;
    let a = spawn_with(Some(&redis), "a", |_| {}).await;
    // A second replica on the same counter, whose tenant limit the first turn already used up.
    let b = spawn_with(Some(&redis), "b", |s| s.max_provider_calls = 1).await;
    let sid = a.create_session().await;
    let reply = a.prompt(&sid, "main", "hello").await;
    assert_eq!(reply.status, 202, "{reply:?}");
    let turn = reply.body["turn"].as_str().unwrap().to_owned();
    a.await_turn_end(&sid, &turn).await;
    // Over the quota, a turn's step would wait for the next window; a compaction goes ahead.
    let r = b
        .post_json(&format!("/v1/sessions/{sid}/compact"), json!({}))
        .await;
    r.assert_problem(429, "provider-call-quota");
    // When the window rolls over, the client may try again.
    let wait: u64 = r.retry_after.as_deref().unwrap().parse().unwrap();
    assert!(wait >= 1, "{r:?}");
}

/// On a public bind, `DSH_AUTH=auto` starts only because keys exist; if they later vanish (the
/// keys file deleted or moved, a Redis restarted without persistence), the server must not
/// quietly serve everyone open, which it refuses to do at startup.
#[tokio::test]
async fn a_public_server_does_not_turn_open_when_its_keys_disappear() {
    let mut rnd = [0u8; 8];
    getrandom::fill(&mut rnd).unwrap();
    let path =
        std::env::temp_dir().join(format!("dsh-review-keys-{}.jsonl", u64::from_le_bytes(rnd)));
    let file = FileKeys::new(Some(path.clone()));
    Auth::create_key(&file, TenantId::parse("acme").unwrap(), None)
        .await
        .unwrap();
    let keys_file = path.display().to_string();
    let app = spawn_with(None, "r1", |s| {
        s.bind = "0.0.0.0:0".into();
        s.keys_file = Some(keys_file);
    })
    .await;
    app.post_json("/v1/sessions", json!({}))
        .await
        .assert_problem(401, "unauthorized");
    std::fs::remove_file(&path).unwrap();
    tokio::time::sleep(KEY_CACHE + Duration::from_millis(300)).await;
    app.post_json("/v1/sessions", json!({}))
        .await
        .assert_problem(401, "unauthorized");
}

/// `?access_token=` is for the events route only (a token in a URL leaks into logs and
/// histories); the check looks at the path's last segment, so any route whose path happens to
/// end in `/events` takes it too: an agent or a session named `events`.
#[tokio::test]
async fn a_token_in_the_query_is_refused_on_routes_that_merely_end_in_events() {
    let t = AcmeSession::start().await;
    let (app, acme, sid) = (&t.app, &t.acme, t.sid.clone());
    let token = mint(acme, &sid, json!({"scopes": ["read"]})).await;
    app.get(&format!(
        "/v1/sessions/{sid}/agents/events?access_token={token}"
    ))
    .await
    .assert_problem(401, "unauthorized");
}

/// A well-formed key with an unknown id costs a Redis round trip per request, unthrottled
/// (no rate applies before a key is known) and each negative answer takes a place in the
/// replica's key cache, pushing real keys out of it.
#[tokio::test]
async fn requests_with_unknown_key_ids_do_not_each_cost_a_store_lookup() {
    let redis = TestRedis::start().await;
    key_for(&redis, "acme", None).await;
    let app = secured(&redis, "r1").await;
    // Summed over every node of a cluster.
    let lookups = async |redis: &TestRedis| -> u64 {
        let mut total = 0;
        for info in redis.info("commandstats").await {
            total += info
                .lines()
                .find_map(|l| l.strip_prefix("cmdstat_hgetall:calls="))
                .and_then(|l| l.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap());
        }
        total
    };
    let before = lookups(&redis).await;
    let started = std::time::Instant::now();
    for i in 0..100u32 {
        let forged = format!(
            "dsh_{:016x}_{}",
            0xdead_0000u64 + u64::from(i),
            "a".repeat(64)
        );
        app.as_caller(&forged)
            .get("/v1/sessions/0123456789abcdef0123456789abcdef")
            .await
            .assert_problem(401, "unauthorized");
    }
    let spent = lookups(&redis).await - before;
    // The replica's miss budget: a burst of 5, then 5 lookups a second (however slow the
    // machine is, 100 requests never cost 100 lookups).
    let allowed = 5 + (5.0 * started.elapsed().as_secs_f64()).ceil() as u64;
    assert!(
        spent <= allowed && spent < 50,
        "100 requests with made-up keys cost {spent} Redis lookups (budget {allowed}) in {:?}",
        started.elapsed()
    );
}

/// The credential middleware decides which requests to authenticate from the raw path, the
/// router matches the percent-decoded one: `/v1/%73essions/…` reaches a session handler with
/// no caller recorded. It fails closed, but as a 500 that logs an internal error, and a
/// missing credential should read 401 like on `/v1/sessions/…`.
#[tokio::test]
async fn a_percent_encoded_session_path_is_authenticated_like_the_plain_one() {
    let redis = TestRedis::start().await;
    let (_, key) = key_for(&redis, "acme", None).await;
    let app = secured(&redis, "r1").await;
    let sid = app.as_caller(&key).create_session().await;
    app.get(&format!("/v1/%73essions/{sid}"))
        .await
        .assert_problem(401, "unauthorized");
    let owner = app
        .as_caller(&key)
        .get(&format!("/v1/%73essions/{sid}"))
        .await;
    assert_eq!(owner.status, 200, "{owner:?}");
}
