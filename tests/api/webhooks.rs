//! Review webhooks: endpoints registered per tenant, deliveries signed per Standard Webhooks and
//! sent at least once to a real HTTP receiver on loopback (wiremock), retried with backoff,
//! and taken over by another replica when the one sending is killed.

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::auth::key_for;
use crate::failover::spawn_process_with;
use crate::helpers::{spawn_with, TestApp, TestRedis};
use crate::review::plan_and_await_review;

/// A replica that may deliver to loopback, retries fast and looks for work often.
pub async fn replica(redis: &TestRedis, id: &str) -> TestApp {
    spawn_with(Some(redis), id, |s| {
        s.webhook_allow_private = true;
        s.webhook_backoff_ms = 100;
        s.webhook_poll_ms = 50;
        s.default_rate = 100_000;
    })
    .await
}

/// A receiver on loopback that answers the first `n` deliveries with `first`, then 200.
pub async fn receiver(first: ResponseTemplate, n: u64) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(first)
        .up_to_n_times(n)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

pub async fn register(app: &TestApp, url: &str, events: &[&str]) -> Value {
    let body = json!({"url": url, "events": events, "description": "test receiver"});
    let reply = app.post_json("/v1/webhooks", body).await;
    assert_eq!(reply.status, 201, "{reply:?}");
    reply.body
}

/// Checks the Standard Webhooks signature of `req` with `secret`, computed here.
#[track_caller]
fn assert_signed(req: &Request, secret: &str) {
    let header = |n: &str| req.headers.get(n).unwrap().to_str().unwrap().to_owned();
    let (id, ts) = (header("webhook-id"), header("webhook-timestamp"));
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(&req.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    assert_eq!(header("webhook-signature"), expected);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        ts.parse::<u64>().unwrap().abs_diff(now) < 60,
        "a fresh timestamp"
    );
}

/// The receiver's requests once at least `n` came (within 20 s).
pub async fn await_requests(receiver: &MockServer, n: usize) -> Vec<Request> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = receiver.received_requests().await.unwrap_or_default();
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} deliveries came",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The endpoint's deliveries once every one has `status` (within 20 s).
pub async fn await_delivery(app: &TestApp, webhook: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = app
            .get(&format!("/v1/webhooks/{webhook}/deliveries"))
            .await
            .ok();
        let all = page["deliveries"].as_array().cloned().unwrap_or_default();
        if !all.is_empty() && all.iter().all(|d| d["status"] == status) {
            return page;
        }
        assert!(Instant::now() < deadline, "never {status}: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn body(req: &Request) -> Value {
    serde_json::from_slice(&req.body).unwrap()
}

#[tokio::test]
async fn a_plan_review_and_its_approval_are_delivered_signed_to_a_local_receiver() {
    let redis = TestRedis::start().await;
    let app = replica(&redis, "a").await;
    let receiver = receiver(ResponseTemplate::new(204), u64::MAX).await;
    let hook = register(
        &app,
        &format!("{}/hook?token=abc", receiver.uri()),
        &["plan.review_requested", "plan.approved", "turn.ended"],
    )
    .await;
    let secret = hook["secret"].as_str().unwrap();

    let sid = app.create_session().await;
    let (turn, q) = plan_and_await_review(&app, &sid, "fix the login bug").await;
    let asked = await_requests(&receiver, 1).await;
    assert_signed(&asked[0], secret);
    let requested = body(&asked[0]);
    assert_eq!(requested["type"], "plan.review_requested");
    assert_eq!(requested["data"]["session"], sid.as_str());
    assert_eq!(requested["data"]["question"], q["id"]);
    assert_eq!(requested["data"]["revision"]["number"], 1);
    assert_eq!(requested["data"]["revision"]["status"], "pending");
    assert_eq!(requested["data"]["revision"]["text"], q["detail"]);

    app.answer(
        &sid,
        q["id"].as_str().unwrap(),
        json!({"option": "approve"}),
    )
    .await
    .ok();
    app.await_turn_end(&sid, &turn).await;
    let all = await_requests(&receiver, 3).await;
    assert_eq!(all.len(), 3, "each event once");
    let of_type = |t: &str| {
        all.iter()
            .map(body)
            .find(|b| b["type"] == t)
            .unwrap_or_else(|| panic!("no {t}"))
    };
    for r in &all {
        assert_signed(r, secret);
        assert_eq!(r.url.query(), Some("token=abc"));
    }
    let approved = of_type("plan.approved");
    assert_eq!(approved["data"]["revision"]["status"], "approved");
    assert_eq!(
        approved["data"]["revision"]["digest"],
        requested["data"]["revision"]["digest"]
    );
    assert_eq!(of_type("turn.ended")["data"]["reason"], "completed");
    let ids: std::collections::HashSet<String> = all
        .iter()
        .map(|r| r.headers["webhook-id"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3, "one delivery id per event");

    let page = await_delivery(&app, hook["id"].as_str().unwrap(), "succeeded").await;
    let deliveries = page["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 3);
    for d in deliveries {
        assert!(ids.contains(d["id"].as_str().unwrap()), "{d}");
        assert_eq!(d["session"], sid.as_str());
    }
    // Pages, newest first, without a repeat or a gap.
    let list = format!("/v1/webhooks/{}/deliveries", hook["id"].as_str().unwrap());
    let first = app.get(&format!("{list}?limit=2")).await.ok();
    assert_eq!(
        (
            first["deliveries"].as_array().unwrap().len(),
            &first["has_more"]
        ),
        (2, &json!(true))
    );
    let cursor = first["next_cursor"].as_str().unwrap();
    let rest = app
        .get(&format!("{list}?limit=2&cursor={cursor}"))
        .await
        .ok();
    assert_eq!(
        (
            rest["deliveries"].as_array().unwrap().len(),
            &rest["has_more"]
        ),
        (1, &json!(false))
    );
    let paged: Vec<&Value> = first["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["deliveries"].as_array().unwrap())
        .collect();
    assert_eq!(paged, deliveries.iter().collect::<Vec<_>>());
    app.get(&format!("{list}?cursor=x1"))
        .await
        .assert_problem(400, "invalid-query");
}

#[tokio::test]
async fn a_receiver_that_fails_twice_gets_a_third_attempt_and_all_three_are_recorded() {
    let redis = TestRedis::start().await;
    let app = replica(&redis, "a").await;
    let receiver = receiver(ResponseTemplate::new(503), 2).await;
    let hook = register(&app, &receiver.uri(), &["turn.ended"]).await;

    let sid = app.create_session().await;
    let turn = app.prompt(&sid, "main", "hello").await.ok()["turn"]
        .as_str()
        .unwrap()
        .to_owned();
    app.await_turn_end(&sid, &turn).await;
    let page = await_delivery(&app, hook["id"].as_str().unwrap(), "succeeded").await;
    let delivery = &page["deliveries"][0];
    let statuses: Vec<Value> = delivery["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].clone())
        .collect();
    assert_eq!(statuses, [503, 503, 200]);
    assert!(delivery.get("next_attempt_at").is_none());
    let got = await_requests(&receiver, 3).await;
    assert_eq!(got.len(), 3);
    assert!(
        got.iter()
            .all(|r| r.headers["webhook-id"] == got[0].headers["webhook-id"]),
        "retries keep the delivery id"
    );
    assert_eq!(
        delivery["id"],
        got[0].headers["webhook-id"].to_str().unwrap()
    );
}

#[tokio::test]
async fn a_delivery_that_keeps_failing_is_given_up_as_failed_when_its_time_is_over() {
    let redis = TestRedis::start().await;
    let app = spawn_with(Some(&redis), "a", |s| {
        s.webhook_allow_private = true;
        s.webhook_backoff_ms = 100;
        s.webhook_poll_ms = 50;
        s.webhook_give_up_ms = 1000;
    })
    .await;
    let receiver = receiver(ResponseTemplate::new(500), u64::MAX).await;
    let hook = register(&app, &receiver.uri(), &["turn.ended"]).await;
    let sid = app.create_session().await;
    app.prompt(&sid, "main", "hello").await.ok();
    let page = await_delivery(&app, hook["id"].as_str().unwrap(), "failed").await;
    let delivery = &page["deliveries"][0];
    assert!(delivery.get("next_attempt_at").is_none(), "{delivery}");
    let attempts = delivery["attempts"].as_array().unwrap();
    // 100, 200, 400 ms apart: the next wait (800 ms) would pass the second.
    assert!((3..=5).contains(&attempts.len()), "{attempts:?}");
    assert!(attempts.iter().all(|a| a["status"] == 500));
    let sent = receiver.received_requests().await.unwrap().len();
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(
        receiver.received_requests().await.unwrap().len(),
        sent,
        "no attempt after"
    );
}

#[tokio::test]
async fn a_replica_killed_mid_delivery_leaves_it_to_another_and_the_receiver_sees_it_once_after_dedup(
) {
    let redis = TestRedis::start().await;
    let env = [
        ("DSH_WEBHOOK_ALLOW_PRIVATE", "true"),
        ("DSH_WEBHOOK_CLAIM_MS", "1500"),
        ("DSH_WEBHOOK_POLL_MS", "50"),
    ];
    let mut a = spawn_process_with(&redis, "a", 1, &env).await;
    // The first delivery is held open; whatever comes after is answered at once.
    let slow = ResponseTemplate::new(200).set_delay(Duration::from_secs(60));
    let receiver = receiver(slow, 1).await;
    let hook = register(&a.app, &receiver.uri(), &["turn.ended"]).await;
    let sid = a.app.create_session().await;
    a.app.prompt(&sid, "main", "hello").await.ok();
    let held = await_requests(&receiver, 1).await;

    a.child.kill().unwrap(); // SIGKILL, mid-delivery
    a.child.wait().unwrap();
    let b = spawn_process_with(&redis, "b", 1, &env).await;
    let got = await_requests(&receiver, 2).await;
    let ids: Vec<_> = got
        .iter()
        .map(|r| r.headers["webhook-id"].to_str().unwrap().to_owned())
        .collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "the same delivery, sent again: {ids:?}"
    );
    assert_eq!(held[0].body, got[1].body, "byte for byte");
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        1,
        "the receiver de-duplicates to exactly once"
    );
    let page = await_delivery(&b.app, hook["id"].as_str().unwrap(), "succeeded").await;
    assert_eq!(page["deliveries"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn registrations_are_validated_limited_kept_secret_and_isolated_per_tenant() {
    let redis = TestRedis::start().await;
    let (_, acme) = key_for(&redis, "acme", None).await;
    let (_, globex) = key_for(&redis, "globex", None).await;
    let server = spawn_with(Some(&redis), "a", |s| s.default_rate = 100_000).await;
    let (acme, globex) = (server.as_caller(&acme), server.as_caller(&globex));

    let bad = |url: &str, events: Value| json!({"url": url, "events": events});
    for (body, why) in [
        (bad("ftp://example.com/x", json!(["turn.ended"])), "http"),
        (
            bad("http://10.0.0.5/hook", json!(["turn.ended"])),
            "private",
        ),
        (
            bad("https://u:p@example.com/", json!(["turn.ended"])),
            "credentials",
        ),
        (
            bad("https://example.com/", json!(["plan.approve"])),
            "unknown event",
        ),
        (bad("https://example.com/", json!([])), "at least one"),
    ] {
        let detail = acme
            .post_json("/v1/webhooks", body)
            .await
            .assert_problem(400, "invalid-webhook");
        assert!(detail.contains(why), "{detail}");
    }

    let created = register(&acme, "https://hooks.example.com/dsh", &["plan.approved"]).await;
    let id = created["id"].as_str().unwrap();
    assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));
    let one = acme.get(&format!("/v1/webhooks/{id}")).await.ok();
    assert_eq!(one["url"], "https://hooks.example.com/dsh");
    assert!(one.get("secret").is_none(), "the secret is shown once");
    let list = acme.get("/v1/webhooks").await.ok();
    assert_eq!(list["webhooks"].as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains("whsec_"));

    // Another tenant sees nothing of it.
    assert_eq!(globex.get("/v1/webhooks").await.ok()["webhooks"], json!([]));
    for path in [
        format!("/v1/webhooks/{id}"),
        format!("/v1/webhooks/{id}/deliveries"),
    ] {
        globex
            .get(&path)
            .await
            .assert_problem(404, "webhook-not-found");
    }
    let gone = globex
        .send(
            globex
                .client
                .delete(globex.url(&format!("/v1/webhooks/{id}"))),
        )
        .await;
    gone.assert_problem(404, "webhook-not-found");

    for _ in 1..16 {
        register(&acme, "https://hooks.example.com/more", &["turn.ended"]).await;
    }
    let over = acme
        .post_json(
            "/v1/webhooks",
            bad("https://hooks.example.com/17", json!(["turn.ended"])),
        )
        .await;
    over.assert_problem(429, "webhook-quota");
    register(&globex, "https://hooks.example.com/globex", &["turn.ended"]).await;

    // A keyed registration sent again names the same endpoint (and is not counted twice).
    let keyed = |key: &'static str| {
        acme.client
            .post(acme.url("/v1/webhooks"))
            .header("Idempotency-Key", key)
            .json(&json!({"url": "https://hooks.example.com/keyed", "events": ["turn.ended"]}))
    };
    acme.send(acme.client.delete(acme.url(&format!("/v1/webhooks/{id}"))))
        .await;
    let first = acme.send(keyed("k-1")).await;
    let again = acme.send(keyed("k-1")).await;
    assert_eq!((first.status.as_u16(), again.status.as_u16()), (201, 201));
    assert_eq!(first.body, again.body);
    acme.send(keyed("k-2"))
        .await
        .assert_problem(429, "webhook-quota");
    let id = first.body["id"].as_str().unwrap();

    let deleted = acme
        .send(acme.client.delete(acme.url(&format!("/v1/webhooks/{id}"))))
        .await;
    assert_eq!(deleted.status, 204);
    acme.get(&format!("/v1/webhooks/{id}"))
        .await
        .assert_problem(404, "webhook-not-found");
    acme.get("/v1/webhooks/nope")
        .await
        .assert_problem(404, "webhook-not-found");
    register(&acme, "https://hooks.example.com/again", &["turn.ended"]).await;
}
