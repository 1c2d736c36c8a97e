//! Secrets stay secret: the real binary runs with a secret in every variable, at debug level,
//! against a gateway that echoes the credentials it received into its error body; afterwards
//! no secret is in the process's output, in any answer the API gave, or in `--help`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::helpers::{free_port, TestRedis};

/// One secret of each kind, fresh per run so nothing else can contain them by chance.
struct Secrets {
    redis_password: String,
    url_password: String,
    url_api_key: String,
    provider_key: String,
    token_key: String,
}

impl Secrets {
    fn new() -> Self {
        let fresh = |what: &str| format!("{what}{}", random_hex());
        Self {
            redis_password: fresh("redispw"),
            url_password: fresh("urlpw"),
            url_api_key: fresh("urlkey"),
            provider_key: format!("sk-{}", fresh("prov")),
            token_key: fresh("tokensecret"),
        }
    }

    fn all(&self) -> [(&'static str, &str); 5] {
        [
            ("the Redis password", &self.redis_password),
            ("the provider URL's password", &self.url_password),
            ("the provider URL's api-key", &self.url_api_key),
            ("the provider key", &self.provider_key),
            ("the token signing key", &self.token_key),
        ]
    }

    /// The environment of a server holding every secret.
    fn env(&self, redis: &TestRedis, provider: &str) -> Vec<(&'static str, String)> {
        let provider_url =
            provider.replacen("http://", &format!("http://user:{}@", self.url_password), 1);
        vec![
            ("REDIS_URL", redis.url.clone()),
            ("DSH_KEY_PREFIX", redis.prefix.clone()),
            ("DSH_PROVIDER", "openai".into()),
            (
                "DSH_PROVIDER_URL",
                format!("{provider_url}/v1?api-key={}", self.url_api_key),
            ),
            ("DSH_PROVIDER_KEY", self.provider_key.clone()),
            ("DSH_TOKEN_KEYS", format!("k1:{}", self.token_key)),
            ("DSH_AUTH", "off".into()),
            ("DSH_WORKERS", "1".into()),
            ("RUST_LOG", "debug".into()),
        ]
    }

    #[track_caller]
    fn assert_absent(&self, place: &str, text: &str) {
        for (what, secret) in self.all() {
            assert!(!text.contains(secret), "{what} leaked in {place}:\n{text}");
        }
    }
}

/// A gateway that refuses every request with status `.0` and an error echoing what it
/// received: the URL and every header, as JSON and as raw `Name: value` lines.
struct EchoingGateway(u16);

impl Respond for EchoingGateway {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let headers: serde_json::Map<String, Value> = req
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().into()))
            .collect();
        let raw: String = req
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or_default()))
            .collect();
        let body = json!({"error": {
            "message": format!("refused {} {}\n{raw}", req.method, req.url),
            "request": {"url": req.url.to_string(), "headers": headers},
        }});
        ResponseTemplate::new(self.0).set_body_json(body)
    }
}

/// 128 random bits in hex (as session ids are made).
fn random_hex() -> String {
    dsh_plan::domain::SessionId::generate().unwrap().to_string()
}

/// Every answer the test received, as text, to be searched at the end.
struct Client {
    http: reqwest::Client,
    base: String,
    seen: String,
}

impl Client {
    async fn call(&mut self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let res = req.send().await.expect("the server answers");
        let status = res.status().as_u16();
        for (k, v) in res.headers() {
            self.seen
                .push_str(&format!("{k}: {}\n", v.to_str().unwrap_or_default()));
        }
        let text = res.text().await.expect("a readable body");
        self.seen.push_str(&text);
        self.seen.push('\n');
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn get(&mut self, path: &str) -> (u16, Value) {
        let req = self.http.get(format!("{}{path}", self.base));
        self.call(req).await
    }
}

fn output_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dshtest-{}-{name}", random_hex()))
}

fn spawn_server(env: &[(&str, String)], port: u16, out: &PathBuf, err: &PathBuf) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-plan"));
    cmd.envs(env.iter().map(|(k, v)| (*k, v)))
        .env("DSH_BIND", format!("127.0.0.1:{port}"))
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::fs::File::create(err).unwrap());
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().expect("the dsh-plan binary starts")
}

/// SIGTERM, so the shutdown path logs too, and waits for the exit.
fn stop(mut child: Child) {
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the server did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_and_remove(path: &PathBuf) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let _ = std::fs::remove_file(path);
    text
}

#[tokio::test]
async fn no_secret_reaches_the_logs_the_api_or_help_even_when_the_gateway_echoes_them() {
    let secrets = Secrets::new();
    let redis = TestRedis::start_with_password(&secrets.redis_password).await;
    // Two 500s (retried, so the retry warning is covered), then 401s (the turn fails).
    let gateway = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(EchoingGateway(500))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&gateway)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(EchoingGateway(401))
        .with_priority(10)
        .mount(&gateway)
        .await;
    let env = secrets.env(&redis, &gateway.uri());
    let (out, err) = (output_file("stdout"), output_file("stderr"));
    let port = free_port();
    let server = spawn_server(&env, port, &out, &err);
    let mut client = Client {
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
        base: format!("http://127.0.0.1:{port}"),
        seen: String::new(),
    };

    let deadline = Instant::now() + Duration::from_secs(15);
    while client
        .http
        .get(format!("{}/readyz", client.base))
        .send()
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the server did not start: {}",
            read_and_remove(&err)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for path in ["/readyz", "/healthz", "/v1/status"] {
        client.get(path).await;
    }
    let (status, created) = client
        .call(
            client
                .http
                .post(format!("{}/v1/sessions", client.base))
                .json(&json!({})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let sid = created["id"].as_str().unwrap().to_owned();
    let req = client
        .http
        .post(format!(
            "{}/v1/sessions/{sid}/agents/main/messages",
            client.base
        ))
        .json(&json!({"text": "hello"}));
    let (status, accepted) = client.call(req).await;
    assert_eq!(status, 202, "{accepted}");
    let turn = accepted["turn"].as_str().unwrap().to_owned();

    let deadline = Instant::now() + Duration::from_secs(20);
    let ended = loop {
        let (_, page) = client
            .get(&format!("/v1/sessions/{sid}/log?after=0-0&limit=1000"))
            .await;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if let Some(e) = events
            .iter()
            .find(|e| e["type"] == "turn/ended" && e["data"]["turn"] == turn.as_str())
        {
            break e.clone();
        }
        assert!(Instant::now() < deadline, "the turn never ended: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ended["data"]["reason"], "failed", "{ended}");
    for path in [
        format!("/v1/sessions/{sid}"),
        format!("/v1/sessions/{sid}/agents/main/plan"),
        "/v1/status".to_owned(),
    ] {
        client.get(&path).await;
    }
    stop(server);

    // The gateway did receive (and echo) every provider credential: without scrubbing they
    // would be in the server's log.
    let received = gateway.received_requests().await.unwrap();
    assert_eq!(received.len(), 3, "two 500s retried, then the 401");
    let auth: Vec<_> = received[0]
        .headers
        .get_all("authorization")
        .iter()
        .collect();
    assert!(
        auth.iter()
            .any(|v| v.to_str().unwrap() == format!("Bearer {}", secrets.provider_key)),
        "{auth:?}"
    );
    assert!(received[0].url.as_str().contains(&secrets.url_api_key));

    let logs = format!("{}{}", read_and_remove(&out), read_and_remove(&err));
    assert!(
        logs.contains("provider request failed") && logs.contains("the provider failed"),
        "the provider's errors are logged (scrubbed), so the check below means something:\n{logs}"
    );
    assert!(logs.contains("DEBUG"), "debug logs were on:\n{logs}");
    secrets.assert_absent("the server's output", &logs);
    secrets.assert_absent("the API's answers", &client.seen);

    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["keys", "create", "--help"],
    ] {
        let help = run(&env, args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&help.stdout),
            String::from_utf8_lossy(&help.stderr)
        );
        assert!(text.contains("DSH_PROVIDER_URL"), "{text}");
        secrets.assert_absent(&format!("`dsh-plan {}`", args.join(" ")), &text);
    }
}

#[tokio::test]
async fn a_redis_refusing_the_password_is_reported_without_it() {
    let secrets = Secrets::new();
    let redis = TestRedis::start_with_password(&secrets.redis_password).await;
    let wrong = format!("wrongpw{}", random_hex());
    let mut env = secrets.env(&redis, "http://127.0.0.1:9");
    env[0].1 = redis.url.replace(&secrets.redis_password, &wrong);
    let output = run(&env, &["serve"]);
    assert!(!output.status.success(), "the server must not start");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("connecting to Redis at redis://***@127.0.0.1"),
        "{text}"
    );
    assert!(!text.contains(&wrong), "the wrong password leaked:\n{text}");
    secrets.assert_absent("a failed start", &text);
}

fn run(env: &[(&str, String)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsh-plan"))
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .env("DSH_BIND", "127.0.0.1:0")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the dsh-plan binary runs")
}
