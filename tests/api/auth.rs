//! Tenants and credentials: API keys, browser tokens, and isolation between tenants.

use dsh_plan::auth::{Auth, Claims, Scope, Signer};
use dsh_plan::domain::{SessionId, TenantId};
use dsh_plan::store::RedisLog;
use serde_json::{json, Value};

use crate::helpers::{spawn_with, Reply, TestApp, TestRedis};

/// The signing secret the tests give the server, so they can forge expired tokens.
const TOKEN_KEYS: &str = "t1:test-signing-secret-0123456789abcdef";

/// A new API key of `tenant` in this test's Redis.
pub async fn key_for(redis: &TestRedis, tenant: &str, rate: Option<u32>) -> (String, String) {
    let store = RedisLog::connect(&redis.url, &redis.prefix).await.unwrap();
    let (record, key) = Auth::create_key(&store, TenantId::parse(tenant).unwrap(), rate)
        .await
        .unwrap();
    (record.id, key)
}

/// A replica with credentials on (keys exist in `redis`) and a known signing secret.
pub async fn secured(redis: &TestRedis, replica: &str) -> TestApp {
    spawn_with(Some(redis), replica, |s| {
        s.token_keys = Some(TOKEN_KEYS.into());
        s.default_rate = 100_000;
    })
    .await
}

/// Tenant `acme` with one API key and one session, on one secured replica (the Redis lives as
/// long as this does).
pub struct AcmeSession {
    /// Held so the test's Redis outlives its replica.
    _redis: TestRedis,
    pub key_id: String,
    pub app: TestApp,
    /// `app` as seen with acme's API key.
    pub acme: TestApp,
    pub sid: String,
}

impl AcmeSession {
    pub async fn start() -> Self {
        let redis = TestRedis::start().await;
        let (key_id, key) = key_for(&redis, "acme", None).await;
        let app = secured(&redis, "r1").await;
        let acme = app.as_caller(&key);
        let sid = acme.create_session().await;
        Self {
            _redis: redis,
            key_id,
            app,
            acme,
            sid,
        }
    }
}

pub async fn mint(app: &TestApp, sid: &str, body: Value) -> String {
    let reply = app
        .post_json(&format!("/v1/sessions/{sid}/tokens"), body)
        .await;
    assert_eq!(reply.status, 201, "{reply:?}");
    reply.body["token"].as_str().unwrap().to_owned()
}

async fn call(app: &TestApp, method: &str, path: &str, body: Option<Value>) -> Reply {
    let url = app.url(path);
    let req = match method {
        "GET" => app.client.get(url),
        "PUT" => app.client.put(url),
        "DELETE" => app.client.delete(url),
        _ => app.client.post(url),
    };
    let req = match body {
        Some(b) => req.json(&b),
        None if method == "POST" || method == "PUT" => req.json(&json!({})),
        None => req,
    };
    app.send(req).await
}

/// Every session route: method, path, body, the scope a token needs (`None`: keys only).
fn routes(sid: &str) -> Vec<(&'static str, String, Option<Value>, Option<&'static str>)> {
    let s = format!("/v1/sessions/{sid}");
    vec![
        ("GET", s.clone(), None, Some("read")),
        ("GET", format!("{s}/agents/main"), None, Some("read")),
        ("GET", format!("{s}/agents/main/plan"), None, Some("read")),
        ("GET", format!("{s}/agents/main/plans"), None, Some("read")),
        ("GET", format!("{s}/projections/plan"), None, Some("read")),
        ("GET", format!("{s}/log"), None, Some("read")),
        ("GET", format!("{s}/questions"), None, Some("read")),
        (
            "GET",
            format!("{s}/events?max_events=1&max_ms=50"),
            None,
            Some("read"),
        ),
        (
            "PUT",
            format!("{s}/agents/main/plan"),
            Some(json!({"active": true})),
            Some("plan"),
        ),
        (
            "POST",
            format!("{s}/agents/main/commands"),
            Some(json!({"input": "/plan"})),
            Some("plan"),
        ),
        (
            "POST",
            format!("{s}/agents/main/messages"),
            Some(json!({"text": "hi"})),
            Some("prompt"),
        ),
        (
            "POST",
            format!("{s}/agents/main/cancel"),
            None,
            Some("prompt"),
        ),
        (
            "POST",
            format!("{s}/questions/q-1/answer"),
            Some(json!({"label": "Approve"})),
            Some("answer"),
        ),
        (
            "POST",
            format!("{s}/questions/q-1/dismiss"),
            None,
            Some("answer"),
        ),
        ("POST", format!("{s}/agents"), Some(json!({})), None),
        ("POST", format!("{s}/fork"), None, None),
        ("POST", format!("{s}/compact"), None, None),
        (
            "POST",
            format!("{s}/tokens"),
            Some(json!({"scopes": ["read"]})),
            None,
        ),
        // Last: the owner's pass below deletes the session.
        ("DELETE", s.clone(), None, None),
    ]
}

/// A token for `sid` signed with the test secret, expired a minute ago.
fn expired_token(key_id: &str, tenant: &str, sid: &str) -> String {
    let keys = Signer::parse_keys(TOKEN_KEYS).unwrap();
    let now = jsonwebtoken::get_current_timestamp();
    let claims = Claims {
        sub: "user".into(),
        iss: "dsh-plan".into(),
        iat: now - 120,
        exp: now - 60,
        ten: TenantId::parse(tenant).unwrap(),
        key: key_id.into(),
        sid: SessionId::parse(sid).unwrap(),
        agt: None,
        scp: vec![Scope::Read, Scope::Plan, Scope::Prompt, Scope::Answer],
    };
    Signer::new(&keys).unwrap().sign(&claims).unwrap()
}

const ALL: [&str; 4] = ["read", "plan", "prompt", "answer"];

#[tokio::test]
async fn every_session_route_refuses_the_wrong_credential_with_a_problem_and_appends_nothing() {
    let redis = TestRedis::start().await;
    let (a_id, a_key) = key_for(&redis, "acme", None).await;
    let (_, b_key) = key_for(&redis, "globex", None).await;
    let app = secured(&redis, "r1").await;
    let acme = app.as_caller(&a_key);
    let sid = acme.create_session().await;
    let other = acme.create_session().await;
    let before = acme.events(&sid).await.len();
    let other_before = acme.events(&other).await.len();
    let missing = acme.session("0123456789abcdef0123456789abcdef").await;
    missing.assert_problem(404, "session-not-found");

    let other_session_token = mint(&acme, &other, json!({"scopes": ALL})).await;
    let expired = expired_token(&a_id, "acme", &sid);
    let anonymous = app.as_caller("");
    let globex = app.as_caller(&b_key);
    let wrong_session = app.as_caller(&other_session_token);
    let expired = app.as_caller(&expired);

    for (method, path, body, scope) in routes(&sid) {
        let what = format!("{method} {path}");
        let r = call(&anonymous, method, &path, body.clone()).await;
        r.assert_problem(401, "unauthorized");
        let r = call(&globex, method, &path, body.clone()).await;
        let detail = r.assert_problem(404, "session-not-found");
        // Word for word what a session that does not exist answers.
        assert_eq!(detail, format!("session `{sid}` does not exist"), "{what}");
        call(&wrong_session, method, &path, body.clone())
            .await
            .assert_problem(404, "session-not-found");
        call(&expired, method, &path, body.clone())
            .await
            .assert_problem(401, "token-expired");
        // A token for this very session, with every scope but the one the route needs.
        let others: Vec<&str> = ALL.iter().copied().filter(|s| Some(*s) != scope).collect();
        let lacking = mint(&acme, &sid, json!({"scopes": others})).await;
        call(&app.as_caller(&lacking), method, &path, body.clone())
            .await
            .assert_problem(403, "insufficient-scope");
    }
    assert_eq!(acme.events(&sid).await.len(), before, "nothing appended");
    assert_eq!(acme.events(&other).await.len(), other_before);

    // The right credential passes every one of those checks.
    for (method, path, body, scope) in routes(&sid) {
        let owner = call(&acme, method, &path, body.clone()).await;
        assert!(
            ![401, 403].contains(&owner.status.as_u16())
                && owner.body["code"] != "session-not-found",
            "{method} {path}: {owner:?}"
        );
        if let Some(scope) = scope {
            let token = mint(&acme, &sid, json!({"scopes": [scope]})).await;
            let r = call(&app.as_caller(&token), method, &path, body.clone()).await;
            assert!(
                ![401, 403].contains(&r.status.as_u16()) && r.body["code"] != "session-not-found",
                "{method} {path} with a `{scope}` token: {r:?}"
            );
        }
    }
}

#[tokio::test]
async fn creating_sessions_takes_an_api_key_and_the_session_belongs_to_its_tenant() {
    let redis = TestRedis::start().await;
    let (_, a_key) = key_for(&redis, "acme", None).await;
    let app = secured(&redis, "r1").await;
    let r = app.post_json("/v1/sessions", json!({})).await;
    r.assert_problem(401, "unauthorized");
    let acme = app.as_caller(&a_key);
    let sid = acme.create_session().await;
    let created = &acme.events(&sid).await[0];
    assert_eq!(created["data"]["tenant"], "acme");
    let token = mint(&acme, &sid, json!({"scopes": ALL})).await;
    app.as_caller(&token)
        .post_json("/v1/sessions", json!({}))
        .await
        .assert_problem(403, "insufficient-scope");
    // A fork stays in its parent's tenant.
    let fork = acme
        .post_json(&format!("/v1/sessions/{sid}/fork"), json!({}))
        .await
        .ok();
    let fid = fork["id"].as_str().unwrap();
    assert_eq!(acme.events(fid).await[0]["data"]["tenant"], "acme");
    let (_, b_key) = key_for(&redis, "globex", None).await;
    app.as_caller(&b_key)
        .session(fid)
        .await
        .assert_problem(404, "session-not-found");
}

#[tokio::test]
async fn a_token_for_one_agent_cannot_act_on_another_agent() {
    let t = AcmeSession::start().await;
    let (app, acme, sid) = (&t.app, &t.acme, t.sid.clone());
    let helper = acme.spawn_agent(&sid, Some("main")).await.ok();
    let helper = helper["id"].as_str().unwrap().to_owned();
    let token = mint(acme, &sid, json!({"scopes": ALL, "agent": "main"})).await;
    let browser = app.as_caller(&token);
    browser.set_plan(&sid, "main", true).await.ok();
    browser
        .set_plan(&sid, &helper, true)
        .await
        .assert_problem(403, "insufficient-scope");
    assert_eq!(acme.plan(&sid, &helper).await.ok()["active"], false);
    // Minting for an agent that does not exist is refused.
    acme.post_json(
        &format!("/v1/sessions/{sid}/tokens"),
        json!({"scopes": ["read"], "agent": "ghost"}),
    )
    .await
    .assert_problem(404, "agent-not-found");
    for bad in [
        json!({"scopes": []}),
        json!({"scopes": ["admin"]}),
        json!({"scopes": ["read"], "ttl_seconds": 3601}),
        json!({"scopes": ["read"], "ttl_seconds": 0}),
    ] {
        let r = acme
            .post_json(&format!("/v1/sessions/{sid}/tokens"), bad)
            .await;
        assert_eq!(r.status, 422, "{r:?}");
    }
}

#[tokio::test]
async fn a_browser_token_drives_the_plan_review_and_the_answer_records_who_gave_it() {
    let t = AcmeSession::start().await;
    let (app, acme, sid) = (&t.app, &t.acme, t.sid.clone());
    let key_id = &t.key_id;
    let minted = acme
        .post_json(
            &format!("/v1/sessions/{sid}/tokens"),
            json!({"scopes": ALL, "subject": "user-42", "ttl_seconds": 600}),
        )
        .await
        .ok();
    assert!(minted["expires_at"].as_str().unwrap().ends_with('Z'));
    let browser = app.as_caller(minted["token"].as_str().unwrap());
    let (turn, q) = crate::review::plan_and_await_review(&browser, &sid, "fix the login bug").await;
    let qid = q["id"].as_str().unwrap();
    browser
        .answer(
            &sid,
            qid,
            json!({"label": "Keep planning", "text": "smaller steps"}),
        )
        .await
        .ok();
    let answered = browser.events_of_type(&sid, "question/answered").await;
    assert_eq!(answered[0]["data"]["by"], "token:user-42");
    // The review's result names who decided, for the model and the log.
    // The model revises and asks again: the second review question.
    let q2 = browser.await_question(&sid).await;
    let q2 = q2["id"].as_str().unwrap().to_owned();
    assert_ne!(q2, qid);
    let results = browser.events_of_type(&sid, "tool/result").await;
    assert_eq!(
        results[0]["data"]["result"]["decided_by"], "token:user-42",
        "{results:?}"
    );
    acme.answer(&sid, &q2, json!({"label": "Approve"}))
        .await
        .ok();
    let events = acme.await_turn_end(&sid, &turn).await;
    let answers: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "question/answered")
        .collect();
    assert_eq!(answers[1]["data"]["by"], format!("key:{key_id}"));
}

#[tokio::test]
async fn the_events_route_takes_a_token_in_the_query_and_no_other_route_does() {
    let t = AcmeSession::start().await;
    let (app, acme, sid) = (&t.app, &t.acme, t.sid.clone());
    let token = mint(acme, &sid, json!({"scopes": ["read"]})).await;
    let events = app
        .client
        .get(app.url(&format!(
            "/v1/sessions/{sid}/events?max_events=1&access_token={token}"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    assert!(events.text().await.unwrap().contains("event: "));
    app.get(&format!("/v1/sessions/{sid}?access_token={token}"))
        .await
        .assert_problem(401, "unauthorized");
}

#[tokio::test]
async fn two_tenants_at_random_never_read_each_others_sessions() {
    let redis = TestRedis::start().await;
    let (_, a) = key_for(&redis, "acme", None).await;
    let (_, b) = key_for(&redis, "globex", None).await;
    let r1 = secured(&redis, "r1").await;
    let r2 = secured(&redis, "r2").await;
    let tenants = [
        (r1.as_caller(&a), r2.as_caller(&a)),
        (r1.as_caller(&b), r2.as_caller(&b)),
    ];
    let mut owned: Vec<(usize, String)> = Vec::new();
    for (t, (app, _)) in tenants.iter().enumerate() {
        for _ in 0..5 {
            owned.push((t, app.create_session().await));
        }
    }
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).unwrap();
    let seed = u64::from_le_bytes(seed);
    let mut rng = SplitMix(seed);
    let (mut cross_reads, mut own_reads) = (0, 0);
    for _ in 0..300 {
        let t = rng.below(2);
        let app = if rng.below(2) == 0 {
            &tenants[t].0
        } else {
            &tenants[t].1
        };
        let (owner, sid) = &owned[rng.below(owned.len())];
        let path = match rng.below(5) {
            0 => format!("/v1/sessions/{sid}"),
            1 => format!("/v1/sessions/{sid}/log"),
            2 => format!("/v1/sessions/{sid}/agents/main/plan"),
            3 => format!("/v1/sessions/{sid}/questions"),
            _ => format!("/v1/sessions/{sid}/projections/plan"),
        };
        let r = if rng.below(5) == 0 {
            app.set_plan(sid, "main", rng.below(2) == 0).await
        } else {
            app.get(&path).await
        };
        if *owner == t {
            assert!(
                r.status.is_success(),
                "seed {seed}: own session {path}: {r:?}"
            );
            own_reads += 1;
        } else {
            r.assert_problem(404, "session-not-found");
            cross_reads += usize::from(r.status.is_success());
        }
    }
    assert_eq!(cross_reads, 0, "seed {seed}");
    assert!(
        own_reads > 50,
        "seed {seed}: the test exercised both tenants"
    );
    // Every session still holds only its own tenant's writes.
    for (t, sid) in &owned {
        let events = tenants[*t].0.events(sid).await;
        assert_eq!(events[0]["data"]["tenant"], ["acme", "globex"][*t]);
    }
}

/// A small seeded generator: a failing run prints its seed, so it can be replayed.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

#[tokio::test]
async fn an_event_stream_opened_with_a_token_ends_when_the_token_expires() {
    let t = AcmeSession::start().await;
    let (app, acme, sid) = (&t.app, &t.acme, t.sid.clone());
    let token = mint(acme, &sid, json!({"scopes": ["read"], "ttl_seconds": 1})).await;
    let started = std::time::Instant::now();
    let stream = app
        .client
        .get(app.url(&format!("/v1/sessions/{sid}/events?access_token={token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    // Without an end the body would never complete (heartbeats every 15 s).
    let body = stream.text().await.unwrap();
    assert!(body.contains("session/created"));
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    // Reconnecting with the expired token is refused.
    let again = app
        .get(&format!("/v1/sessions/{sid}/events?access_token={token}"))
        .await;
    again.assert_problem(401, "token-expired");
}

#[tokio::test]
async fn a_keys_request_rate_holds_in_total_across_two_replicas_with_ratelimit_headers() {
    let redis = TestRedis::start().await;
    let rate = 20;
    let (_, key) = key_for(&redis, "acme", Some(rate)).await;
    let r1 = secured(&redis, "r1").await;
    let r2 = secured(&redis, "r2").await;
    let sid = r1.as_caller(&key).create_session().await;
    let run = std::time::Duration::from_secs(2);
    let start = std::time::Instant::now();
    let mut tasks = Vec::new();
    for app in [&r1, &r2] {
        for _ in 0..3 {
            let (client, url) = (
                app.as_caller(&key).client.clone(),
                app.url(&format!("/v1/sessions/{sid}/agents/main/plan")),
            );
            tasks.push(tokio::spawn(async move {
                let (mut ok, mut refused) = (0u64, 0u64);
                while start.elapsed() < run {
                    let res = client.get(&url).send().await.unwrap();
                    let h = |n: &str| res.headers().get(n).map(|v| v.to_str().unwrap().to_owned());
                    assert_eq!(
                        h("ratelimit-policy").as_deref(),
                        Some(format!("\"default\";q={rate};w=1").as_str())
                    );
                    assert!(h("ratelimit").unwrap().starts_with("\"default\";r="));
                    match res.status().as_u16() {
                        200 => ok += 1,
                        429 => {
                            let secs: u64 = h("retry-after").unwrap().parse().unwrap();
                            assert!(secs >= 1);
                            let body: Value = res.json().await.unwrap();
                            assert_eq!(body["code"], "rate-limited");
                            refused += 1;
                            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                        }
                        other => panic!("unexpected {other}"),
                    }
                }
                (ok, refused)
            }));
        }
    }
    let (mut ok, mut refused) = (0, 0);
    for t in tasks {
        let (o, r) = t.await.unwrap();
        ok += o;
        refused += r;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let ceiling = f64::from(rate) * elapsed + f64::from(rate);
    assert!(
        (ok as f64) <= ceiling,
        "{ok} allowed in {elapsed:.2}s > {ceiling}"
    );
    assert!(
        (ok as f64) >= 0.7 * f64::from(rate) * elapsed,
        "{ok} allowed: the limit starved"
    );
    assert!(refused > 0, "the hammering went past the limit");
    // Open routes are not counted.
    assert_eq!(r1.get("/v1/status").await.status, 200);
}
