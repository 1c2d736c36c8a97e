//! The test harness: a real redis-server per test (or `REDIS_URL` with a per-test key
//! prefix; a test that stops Redis always gets its own), real servers on loopback ports, and
//! typed helpers per endpoint.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use dsh_plan::config::Settings;
use dsh_plan::startup::Application;
use dsh_plan::store::redis::{lease_group, Conn, LEASE_GROUPS};
use reqwest::StatusCode;
use serde_json::{json, Value};

mod cluster;
mod listed;

pub use self::cluster::TestCluster;

/// A redis-server owned by one test: killed when the test (its thread) ends.
pub struct TestRedis {
    pub url: String,
    port: u16,
    /// Key prefix unique to this test, so a shared `REDIS_URL` server is never disturbed.
    pub prefix: String,
    /// `--requirepass` of a private server, kept for a restart.
    password: Option<String>,
    child: Option<Child>,
}

impl TestRedis {
    /// This test's Redis: the `REDIS_URL` server when set (under a key prefix of its own),
    /// otherwise a redis-server of its own.
    pub async fn start() -> Self {
        match std::env::var("REDIS_URL") {
            Ok(url) => Self::shared(url, fresh_prefix()),
            Err(_) => Self::start_private().await,
        }
    }

    /// A Redis someone else runs (a cluster of the test's own), under `prefix`.
    pub(crate) fn shared(url: String, prefix: String) -> Self {
        Self {
            url,
            port: 0,
            prefix,
            password: None,
            child: None,
        }
    }

    /// A redis-server of this test's own even when `REDIS_URL` is set: for a test that stops
    /// Redis, which a shared server must never see.
    pub async fn start_private() -> Self {
        Self::start_private_with(None).await
    }

    /// A redis-server of this test's own that requires `password` (`--requirepass`); its
    /// `url` carries the password in the userinfo.
    pub async fn start_with_password(password: &str) -> Self {
        Self::start_private_with(Some(password.to_owned())).await
    }

    /// A port free when picked can be taken before redis-server binds it (by another test's
    /// server, or as an outgoing connection's port): the server then exits, and another one
    /// may be answering on that port. So it starts again on another port until the server
    /// that answers is this one.
    async fn start_private_with(password: Option<String>) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let mut child = Self::spawn(port, password.as_deref());
            let url = match &password {
                Some(pw) => format!("redis://default:{pw}@127.0.0.1:{port}"),
                None => format!("redis://127.0.0.1:{port}"),
            };
            if answers_as(&url, &mut child).await {
                return Self {
                    url,
                    port,
                    prefix: fresh_prefix(),
                    password,
                    child: Some(child),
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start: five free ports were taken before it bound them");
    }

    /// Kills this test's redis-server and starts an empty one on the same port, as a Redis
    /// that restarted without persistence would come back (only for a private
    /// server started with [`Self::start_private`]).
    pub async fn restart_empty(&mut self) {
        self.kill();
        self.child = Some(Self::spawn(self.port, self.password.as_deref()));
        self.wait_ready().await;
    }

    fn spawn(port: u16, password: Option<&str>) -> Child {
        let mut cmd =
            Command::new(std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()));
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]);
        if let Some(pw) = password {
            cmd.args(["--requirepass", pw]);
        }
        spawn_server(cmd)
    }

    async fn wait_ready(&self) {
        wait_ping(&self.url).await;
    }

    /// A connection for arranging or inspecting the log directly (a cluster connection, which
    /// routes every command by its key, when `REDIS_URL` names a cluster).
    pub async fn conn(&self) -> Conn {
        Conn::open(&self.url).await.unwrap()
    }

    /// The expiry set of the turn leases' group that holds `member` (`<sid> <agent> <turn>`).
    pub fn lease_expiry_key(&self, member: &str) -> String {
        format!("{}:{{leases:{}}}:expiry", self.prefix, lease_group(member))
    }

    /// How many turn leases are held, over every group.
    pub async fn lease_count(&self) -> u64 {
        let mut conn = self.conn().await;
        let mut total = 0;
        for group in 0..LEASE_GROUPS {
            let n: u64 = redis::cmd("ZCARD")
                .arg(format!("{}:{{leases:{group}}}:expiry", self.prefix))
                .query_async(&mut conn)
                .await
                .unwrap();
            total += n;
        }
        total
    }

    /// `INFO section` of every node (one text per node: several on a cluster).
    pub async fn info(&self, section: &str) -> Vec<String> {
        let reply: redis::Value = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
        fn texts(v: &redis::Value) -> Vec<String> {
            match v {
                redis::Value::Map(nodes) => nodes.iter().flat_map(|(_, v)| texts(v)).collect(),
                redis::Value::BulkString(b) => vec![String::from_utf8_lossy(b).into_owned()],
                redis::Value::VerbatimString { text, .. } => vec![text.clone()],
                other => panic!("INFO answered {other:?}"),
            }
        }
        texts(&reply)
    }

    pub fn key(&self, sid: &str) -> String {
        format!("{}:{{{sid}}}:log", self.prefix)
    }

    /// Writes an event of agent `main` straight into the session's log, as another replica's
    /// append leaves it (entry `id`, commit time `ts`), and sends no live message.
    pub async fn write_event(&self, sid: &str, id: &str, ty: &str, data: &str, ts: u64) {
        let _: String = redis::cmd("XADD")
            .arg(self.key(sid))
            .arg(id)
            .arg("type")
            .arg(ty)
            .arg("agent")
            .arg("main")
            .arg("data")
            .arg(data)
            .arg("ts")
            .arg(ts)
            .arg("v")
            .arg(1)
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
    }

    /// What the session's stream holds now (`DUMP`), for [`TestRedis::lose_since`].
    pub async fn snapshot(&self, sid: &str) -> Vec<u8> {
        redis::cmd("DUMP")
            .arg(self.key(sid))
            .query_async(&mut self.conn().await)
            .await
            .unwrap()
    }

    /// Redis loses what the session's stream gained since `snapshot` (`RESTORE … REPLACE` of
    /// the stream key alone, as a failover to a replica that lagged can).
    pub async fn lose_since(&self, sid: &str, snapshot: Vec<u8>) {
        let _: () = redis::cmd("RESTORE")
            .arg(self.key(sid))
            .arg(0)
            .arg(snapshot)
            .arg("REPLACE")
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
    }

    /// Stops the server abruptly. Only a server from [`TestRedis::start_private`] can be
    /// stopped: on a shared one this panics rather than let the test pass without the outage.
    #[track_caller]
    pub fn kill(&mut self) {
        assert!(
            self.child.is_some(),
            "a shared REDIS_URL server is not ours to stop: use TestRedis::start_private"
        );
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            // Already gone is fine: the server only has to be down afterwards.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a redis-server command, quiet, dying with the thread that spawned it even if the
/// test panics or is killed.
pub(crate) fn spawn_server(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .expect("redis-server must be installed (scripts/test.sh installs it)")
}

/// Waits until the redis-server at `url` answers PING.
pub(crate) async fn wait_ping(url: &str) {
    let client = redis::Client::open(url).unwrap();
    for _ in 0..1000 {
        if let Ok(mut c) = client.get_multiplexed_async_connection().await {
            if redis::cmd("PING")
                .query_async::<String>(&mut c)
                .await
                .is_ok()
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("redis-server did not start at {url}");
}

/// Waits until the redis-server at `url` answers and tells whether it is `child` (false:
/// `child` exited, or another server holds its port).
async fn answers_as(url: &str, child: &mut Child) -> bool {
    let client = redis::Client::open(url).unwrap();
    let ours = format!("process_id:{}", child.id());
    for _ in 0..1000 {
        if !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        if let Ok(mut c) = client.get_multiplexed_async_connection().await {
            let mut info = redis::cmd("INFO");
            if let Ok(info) = info.arg("server").query_async::<String>(&mut c).await {
                return info.lines().any(|line| line.trim() == ours);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("redis-server did not start at {url}");
}

fn fresh_prefix() -> String {
    format!("dshtest-{}", uuid::Uuid::now_v7().simple())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One running replica (in this process, or another one's address).
pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    handle: Option<ServerHandle>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            drop(h.stop(false));
        }
    }
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

pub async fn spawn_replica(redis: Option<&TestRedis>, replica: &str) -> TestApp {
    spawn_with(redis, replica, |_| {}).await
}

/// A replica with adjusted settings (provider, token delay, workspace…).
pub async fn spawn_with(
    redis: Option<&TestRedis>,
    replica: &str,
    adjust: impl FnOnce(&mut Settings),
) -> TestApp {
    let mut settings = Settings::local(redis.map(|r| r.url.clone()));
    settings.fixture_token_delay_ms = 1;
    if let Some(r) = redis {
        settings.key_prefix = r.prefix.clone();
    }
    settings.replica_id = Some(replica.to_owned());
    settings.workers = Some(1);
    adjust(&mut settings);
    let app = Application::build(settings)
        .await
        .expect("the application builds");
    serve(app)
}

/// Serves a built application in this test's runtime.
pub fn serve(app: Application) -> TestApp {
    // Generated now, not inside a test's timed loop at its first problem.
    listed::spec();
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    tokio::spawn(app.run_until_stopped());
    TestApp {
        address,
        client: http_client(),
        handle: Some(handle),
    }
}

/// An HTTP answer: status, content type and JSON body, and the request it answered.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: String,
    pub retry_after: Option<String>,
    pub body: Value,
    /// `X-Request-Id` of the answer.
    pub request_id: Option<String>,
    /// The request's method and URL path (no query).
    pub method: String,
    pub path: String,
}

impl Reply {
    /// Asserts this is an RFC 9457 problem with `code` and returns its detail.
    #[track_caller]
    pub fn assert_problem(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status.as_u16(), status, "{self:?}");
        assert_eq!(self.body["code"], code, "{self:?}");
        self.assert_listed_problem()
    }

    /// Asserts this is an RFC 9457 problem whose `code` the spec lists for this request's
    /// operation and status (so a route answering a code missing from `http::problems` fails
    /// every test that meets it), naming this request in `instance`; returns its detail.
    #[track_caller]
    pub fn assert_listed_problem(&self) -> String {
        let status = self.status.as_u16();
        let code = self.body["code"].as_str().unwrap_or_default();
        assert_eq!(self.content_type, "application/problem+json", "{self:?}");
        assert_eq!(self.body["status"], status, "{self:?}");
        assert_eq!(self.body["type"], format!("urn:dsh-plan:problem:{code}"));
        let (operation, listed) = listed::codes(&self.method, &self.path, status);
        assert!(
            listed.iter().any(|c| c == code),
            "{} {} ({operation}) answered {status} `{code}`, which the spec does not list for it \
             (listed: {listed:?}); add it to its row in http::problems::OPERATIONS",
            self.method,
            self.path
        );
        let id = self
            .request_id
            .as_deref()
            .expect("every answer has an X-Request-Id");
        assert_eq!(
            self.body["instance"],
            format!("urn:dsh-plan:request:{id}"),
            "the problem names its request"
        );
        let detail = self.body["detail"].as_str().unwrap_or_default().to_owned();
        assert!(
            !detail.is_empty(),
            "a problem says what went wrong: {self:?}"
        );
        detail
    }

    #[track_caller]
    pub fn ok(self) -> Value {
        assert!(self.status.is_success(), "{self:?}");
        self.body
    }
}

impl TestApp {
    /// A replica running elsewhere (e.g. a child process).
    pub fn remote(address: String) -> Self {
        Self {
            address,
            client: http_client(),
            handle: None,
        }
    }

    pub async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        let (client, req) = req.build_split();
        let req = req.expect("the request builds");
        let (method, path) = (req.method().to_string(), req.url().path().to_owned());
        let res = client.execute(req).await.expect("the server answers");
        let status = res.status();
        let header = |n: &str| {
            res.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header("content-type").unwrap_or_default();
        let retry_after = header("retry-after");
        let request_id = header("x-request-id");
        let bytes = res.bytes().await.unwrap_or_default();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            content_type,
            retry_after,
            body,
            request_id,
            method,
            path,
        }
    }

    /// This replica as seen by a caller presenting `credential` (an API key or a token) as a
    /// bearer header on every request.
    pub fn as_caller(&self, credential: &str) -> TestApp {
        let mut headers = reqwest::header::HeaderMap::new();
        let value = format!("Bearer {credential}");
        headers.insert(reqwest::header::AUTHORIZATION, value.parse().unwrap());
        TestApp {
            address: self.address.clone(),
            client: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .default_headers(headers)
                .build()
                .unwrap(),
            handle: None,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// The value of the `/metrics` sample named `sample` (with its labels, e.g.
    /// `dsh_live_messages_total{for="watched"}`).
    pub async fn metric(&self, sample: &str) -> u64 {
        let text = self.text("/metrics").await;
        let prefix = format!("{sample} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {sample} in {text}"))
            .parse()
            .unwrap()
    }

    /// The body of a GET of `path` as text (for what is not JSON).
    pub async fn text(&self, path: &str) -> String {
        let reply = self.client.get(self.url(path)).send().await.unwrap();
        reply.text().await.unwrap()
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.client.get(self.url(path))).await
    }

    /// A write: every POST sends JSON (`json!({})` where the route takes no body), because the
    /// server answers 415 to any write without `Content-Type: application/json`.
    pub async fn post_json(&self, path: &str, body: Value) -> Reply {
        self.send(self.client.post(self.url(path)).json(&body))
            .await
    }

    pub async fn create_session(&self) -> String {
        let reply = self.post_json("/v1/sessions", json!({})).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
        reply.body["id"].as_str().unwrap().to_owned()
    }

    pub async fn session(&self, sid: &str) -> Reply {
        self.get(&format!("/v1/sessions/{sid}")).await
    }

    pub async fn spawn_agent(&self, sid: &str, owner: Option<&str>) -> Reply {
        self.post_json(
            &format!("/v1/sessions/{sid}/agents"),
            json!({ "owner": owner }),
        )
        .await
    }

    pub async fn plan(&self, sid: &str, aid: &str) -> Reply {
        self.get(&format!("/v1/sessions/{sid}/agents/{aid}/plan"))
            .await
    }

    pub async fn set_plan(&self, sid: &str, aid: &str, active: bool) -> Reply {
        let url = self.url(&format!("/v1/sessions/{sid}/agents/{aid}/plan"));
        self.send(self.client.put(url).json(&json!({ "active": active })))
            .await
    }

    /// Every event of the session, through the paged log route.
    pub async fn events(&self, sid: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after = "0-0".to_owned();
        loop {
            let page = self
                .get(&format!("/v1/sessions/{sid}/log?after={after}&limit=1000"))
                .await
                .ok();
            out.extend(page["events"].as_array().unwrap().iter().cloned());
            after = page["cursor"].as_str().unwrap().to_owned();
            if !page["has_more"].as_bool().unwrap() {
                return out;
            }
        }
    }

    pub async fn prompt(&self, sid: &str, aid: &str, text: &str) -> Reply {
        self.post_json(
            &format!("/v1/sessions/{sid}/agents/{aid}/messages"),
            json!({ "text": text }),
        )
        .await
    }

    pub async fn cancel(&self, sid: &str, aid: &str) -> Reply {
        self.post_json(
            &format!("/v1/sessions/{sid}/agents/{aid}/cancel"),
            json!({}),
        )
        .await
    }

    /// Waits until the log holds an event matching `pred` and returns the whole log then.
    pub async fn await_event(
        &self,
        sid: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let events = self.events(sid).await;
            if events.iter().any(&pred) {
                return events;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}; log: {events:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the turn to end and returns the log.
    pub async fn await_turn_end(&self, sid: &str, turn: &str) -> Vec<Value> {
        self.await_event(sid, "turn/ended", |e| {
            e["type"] == "turn/ended" && e["data"]["turn"] == turn
        })
        .await
    }

    /// Waits for the next open question of the session and returns it.
    pub async fn await_question(&self, sid: &str) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let open = self
                .get(&format!("/v1/sessions/{sid}/questions"))
                .await
                .ok();
            if let Some(q) = open["questions"].as_array().and_then(|q| q.first()) {
                return q.clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no question was asked"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn answer(&self, sid: &str, qid: &str, body: Value) -> Reply {
        self.post_json(&format!("/v1/sessions/{sid}/questions/{qid}/answer"), body)
            .await
    }

    pub async fn dismiss(&self, sid: &str, qid: &str) -> Reply {
        self.post_json(
            &format!("/v1/sessions/{sid}/questions/{qid}/dismiss"),
            json!({}),
        )
        .await
    }

    /// Drives a turn to its end, dismissing every question it asks.
    pub async fn finish_turn_dismissing(&self, sid: &str, turn: &str) -> Vec<Value> {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let events = self.events(sid).await;
            if events
                .iter()
                .any(|e| e["type"] == "turn/ended" && e["data"]["turn"] == turn)
            {
                return events;
            }
            let open = self
                .get(&format!("/v1/sessions/{sid}/questions"))
                .await
                .ok();
            for q in open["questions"].as_array().into_iter().flatten() {
                self.dismiss(sid, q["id"].as_str().unwrap()).await;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "turn {turn} did not end: {events:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn events_of_type(&self, sid: &str, ty: &str) -> Vec<Value> {
        self.events(sid)
            .await
            .into_iter()
            .filter(|e| e["type"] == ty)
            .collect()
    }
}

/// Runs `dsh-plan verify` on a session, as an operator would.
pub fn verify(redis: &TestRedis, sid: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-plan"))
        .args(["verify", "--session", sid])
        .env("REDIS_URL", &redis.url)
        .env("DSH_KEY_PREFIX", &redis.prefix)
        .output()
        .expect("the dsh-plan binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Defines a scenario once and runs it on Redis and on the in-memory log.
#[macro_export]
macro_rules! on_both_stores {
    ($(async fn $name:ident($app:ident: TestApp) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                async fn scenario($app: $crate::helpers::TestApp) $body

                #[tokio::test]
                async fn on_redis() {
                    let redis = $crate::helpers::TestRedis::start().await;
                    scenario($crate::helpers::spawn_replica(Some(&redis), "a").await).await;
                }

                #[tokio::test]
                async fn on_memory() {
                    scenario($crate::helpers::spawn_replica(None, "a").await).await;
                }
            }
        )*
    };
}

/// A test's redis-server that could not bind its port (another server took it first) is not
/// mistaken for the server answering there.
#[tokio::test]
async fn a_redis_server_whose_port_was_taken_is_not_mistaken_for_the_one_answering() {
    let first = TestRedis::start_private().await;
    let mut second = TestRedis::spawn(first.port, None);
    let mistaken = answers_as(&first.url, &mut second).await;
    let _ = second.kill();
    let _ = second.wait();
    assert!(
        !mistaken,
        "the first server's answer was taken for the second's"
    );
}
