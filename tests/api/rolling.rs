//! A rolling restart behind nginx: three replicas as processes of the built binary, Debian's
//! nginx in front of them with the proxy settings of `deploy/nginx.conf`, 200 SSE clients that
//! reconnect as a browser's `EventSource` does (after the `retry:` hint, with
//! `Last-Event-ID`), and a writer that keeps committing and running turns through nginx while
//! every replica is restarted in turn (SIGTERM, graceful exit, started again on its port).

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::failover::{spawn_process_on, Replica};
use crate::helpers::{free_port, verify, TestRedis};

const SESSIONS: usize = 20;
const CLIENTS_PER_SESSION: usize = 10;
/// Per fixture token: a turn's step streams for about a second, so turns are in flight on
/// every replica when it is stopped.
const TOKEN_DELAY_MS: u64 = 100;
/// A `step/started` received within this of its commit counts as a step in flight: half of a
/// step here (the fixture answers `PROMPT` with ten words, `TOKEN_DELAY_MS` apart).
const FRESH_STEP_MS: u64 = TOKEN_DELAY_MS * 5;
/// What a writer's prompt says (the fixture answers `Done: <it>`, a token per word).
const PROMPT: &str = "please keep working on the plan while replicas restart";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn ms_since_epoch(rfc3339: &str) -> u64 {
    humantime::parse_rfc3339(rfc3339)
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn seq(id: &str) -> u64 {
    id.trim_end_matches("-0").parse().unwrap()
}

/// Debian's nginx, run by the test as one process (no master: it dies with the test thread
/// that started it, even if the test is killed), with its config, pid, logs and temp files in
/// a directory of its own. Stopped and removed when dropped.
struct Nginx {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Nginx {
    async fn start(upstreams: &[u16]) -> Self {
        let dir = std::env::temp_dir().join(format!("dsh-nginx-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(&dir, port, upstreams)).unwrap();
        let bin = nginx_binary();
        let mut cmd = Command::new(&bin);
        cmd.arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("error.log"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap());
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{} did not start ({e}): {INSTALL_NGINX}", bin.display()));
        let mut nginx = Self { child, dir, port };
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited ({status}): {}", nginx.logs());
            }
            let ok = client.get(nginx.url("/healthz")).send().await;
            if ok.is_ok_and(|r| r.status() == 200) {
                return nginx;
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not proxy /healthz: {}",
                nginx.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// What nginx wrote to stderr and its error log.
    fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!("{}{}", read("stderr.log"), read("error.log"))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `nginx` from `NGINX`, else from `PATH` (or `/usr/sbin`, which a non-root `PATH` may lack).
fn nginx_binary() -> PathBuf {
    if let Ok(bin) = std::env::var("NGINX") {
        return bin.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("nginx"))
        .find(|bin| bin.is_file())
        .unwrap_or_else(|| panic!("nginx is not installed: {INSTALL_NGINX}"))
}

const INSTALL_NGINX: &str = "the rolling-restart test runs Debian's nginx in front of the \
    replicas. Install it with `apt-get install nginx` (scripts/test.sh, which .ci/run runs, \
    installs it without starting a system nginx), or point NGINX at an nginx binary.";

/// The `{ … }` block that follows `opening` in `text` (braces included).
fn block<'a>(text: &'a str, opening: &str) -> &'a str {
    let start = text
        .find(opening)
        .unwrap_or_else(|| panic!("deploy/nginx.conf has no `{opening}`"));
    let open = start + text[start..].find('{').unwrap();
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open..=open + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces after `{opening}` in deploy/nginx.conf")
}

/// The test's nginx config: deploy/nginx.conf's upstream settings (its `server` lines, which
/// name the compose service, replaced by the replicas' loopback ports) and its `location /`
/// verbatim, so the test exercises the proxy settings that are deployed.
fn nginx_conf(dir: &Path, port: u16, upstreams: &[u16]) -> String {
    let deploy = include_str!("../../deploy/nginx.conf");
    let upstream = block(deploy, "upstream dsh").trim_matches(|c| c == '{' || c == '}');
    let is_server = |l: &&str| l.trim_start().starts_with("server ");
    let settings: String = upstream
        .lines()
        .filter(|l| !is_server(l))
        .map(|l| format!("{l}\n"))
        .collect();
    // The deployed server line's parameters, but `resolve` (for a DNS name).
    let server = upstream.lines().find(is_server).expect("a server line");
    let params: Vec<&str> = server
        .trim()
        .trim_end_matches(';')
        .split_whitespace()
        .collect();
    let params: Vec<&str> = params[2..]
        .iter()
        .copied()
        .filter(|p| *p != "resolve")
        .collect();
    let servers: String = upstreams
        .iter()
        .map(|p| format!("    server 127.0.0.1:{p} {};\n", params.join(" ")))
        .collect();
    let location = block(deploy, "location /");
    let dir = dir.display();
    format!(
        "master_process off;\n\
         pid {dir}/nginx.pid;\n\
         error_log {dir}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n\
         \x20 access_log off;\n\
         \x20 client_body_temp_path {dir}/client_body;\n\
         \x20 proxy_temp_path {dir}/proxy;\n\
         \x20 fastcgi_temp_path {dir}/fastcgi;\n\
         \x20 uwsgi_temp_path {dir}/uwsgi;\n\
         \x20 scgi_temp_path {dir}/scgi;\n\
         \x20 upstream dsh {{\n{servers}{settings}  }}\n\
         \x20 server {{\n\
         \x20   listen 127.0.0.1:{port};\n\
         \x20   location / {location}\n\
         \x20 }}\n\
         }}\n"
    )
}

/// A free port below the kernel's ephemeral range (32768+), for a replica that is restarted on
/// it: while it is down, an outgoing connection may take a free ephemeral port as its source,
/// and the replica could not bind it again.
fn stable_port() -> u16 {
    loop {
        let port = 10_000 + (uuid::Uuid::now_v7().as_u128() % 22_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `DSH_DRAIN_DELAY_MS` of the replicas in deploy/compose.yaml (the topology behind nginx).
fn compose_drain_delay() -> &'static str {
    let compose = include_str!("../../deploy/compose.yaml");
    compose
        .lines()
        .find_map(|l| l.trim().strip_prefix("- DSH_DRAIN_DELAY_MS="))
        .expect("deploy/compose.yaml sets DSH_DRAIN_DELAY_MS")
}

/// What one SSE client saw.
#[derive(Debug, Default)]
struct Seen {
    sid: String,
    /// The sequence numbers of the committed events it received, in order.
    ids: Vec<u64>,
    /// Streams opened (1 + reconnects).
    streams: u32,
    /// Streams that broke (not a clean end of the response).
    broken: u32,
    /// Connection attempts that did not open a stream (a browser's `EventSource` gives up).
    refused: Vec<String>,
    /// `reset` frames: events the stream could not deliver.
    resets: u32,
}

/// One SSE client through nginx, as a browser's `EventSource`: reconnects when its stream ends
/// (after the last `retry:` hint) with `Last-Event-ID` = the last `id:` it received. Stops once
/// it has received the event `targets` names for its session.
async fn subscribe(
    client: reqwest::Client,
    url: String,
    sid: String,
    connected: Arc<AtomicUsize>,
    mut targets: watch::Receiver<Option<Arc<HashMap<String, u64>>>>,
    steps: watch::Sender<HashMap<String, u64>>,
) -> Seen {
    let mut seen = Seen {
        sid,
        ..Seen::default()
    };
    let done = |seen: &Seen, targets: &Option<Arc<HashMap<String, u64>>>| {
        let target = targets.as_ref().map(|t| t[&seen.sid]);
        target.is_some_and(|t| seen.ids.last().is_some_and(|&last| last >= t))
    };
    let mut last_id: Option<String> = None;
    let mut retry = Duration::from_millis(3000); // a browser's default, until the server's hint
    let mut first = true;
    loop {
        let mut req = client.get(&url).header("accept", "text/event-stream");
        if let Some(id) = &last_id {
            req = req.header("last-event-id", id);
        }
        match req.send().await {
            Ok(res) if res.status() == 200 => {
                seen.streams += 1;
                if first {
                    first = false;
                    connected.fetch_add(1, Ordering::SeqCst);
                }
                let mut body = res.bytes_stream();
                let mut buf = String::new();
                let clean = loop {
                    let chunk = tokio::select! {
                        chunk = body.next() => chunk,
                        _ = targets.changed() => {
                            if done(&seen, &targets.borrow()) {
                                return seen;
                            }
                            continue;
                        }
                    };
                    let chunk = match chunk {
                        Some(Ok(chunk)) => chunk,
                        Some(Err(_)) => break false,
                        None => break true,
                    };
                    buf.push_str(&String::from_utf8_lossy(&chunk));
                    while let Some(end) = buf.find("\n\n") {
                        let raw: String = buf.drain(..end + 2).collect();
                        let (mut id, mut event, mut data) = (None, None, None);
                        for line in raw.lines() {
                            if let Some(v) = line.strip_prefix("retry: ") {
                                retry = Duration::from_millis(v.trim().parse().unwrap());
                            } else if let Some(v) = line.strip_prefix("id: ") {
                                id = Some(v.to_owned());
                            } else if let Some(v) = line.strip_prefix("event: ") {
                                event = Some(v.to_owned());
                            } else if let Some(v) = line.strip_prefix("data: ") {
                                data = Some(v);
                            }
                        }
                        if let (Some("step/started"), Some(data)) = (event.as_deref(), data) {
                            step_started(&steps, data);
                        }
                        match (event.as_deref(), &id) {
                            (Some("reset"), _) => seen.resets += 1,
                            (Some("plan/view"), _) | (_, None) => {}
                            (Some(_), Some(id)) => seen.ids.push(seq(id)),
                            (None, Some(_)) => {}
                        }
                        if id.is_some() {
                            last_id = id;
                        }
                    }
                    if done(&seen, &targets.borrow()) {
                        return seen;
                    }
                };
                if !clean {
                    seen.broken += 1;
                }
            }
            Ok(res) => seen
                .refused
                .push(format!("{} at {}", res.status(), now_ms())),
            Err(e) => seen.refused.push(format!("{e} at {}", now_ms())),
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = targets.changed() => {}
        }
        if done(&seen, &targets.borrow()) {
            return seen;
        }
    }
}

/// A failed attempt of a writer request: what, when, and what came back.
#[derive(Debug)]
struct Failure {
    at_ms: u64,
    request: String,
    answer: String,
}

fn describe(failures: &[Failure]) -> String {
    let lines: Vec<String> = failures
        .iter()
        .map(|f| format!("{} at {} ms: {}", f.request, f.at_ms, f.answer))
        .collect();
    lines.join("\n")
}

/// The writer's HTTP side, through nginx: every write carries an `Idempotency-Key`, and a
/// request that fails is sent again (the same key), as a real client would; every failed
/// attempt is recorded.
#[derive(Clone)]
struct Writer {
    client: reqwest::Client,
    base: String,
    /// nginx's error log, for a request that keeps failing.
    nginx_log: PathBuf,
    requests: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<Failure>>>,
}

impl Writer {
    fn new(nginx: &Nginx) -> Self {
        Self {
            client: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            base: nginx.url(""),
            nginx_log: nginx.dir.join("error.log"),
            requests: Arc::default(),
            failures: Arc::default(),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, Vec<Failure>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let key = uuid::Uuid::now_v7().to_string();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let mut req = self
                .client
                .request(method.clone(), format!("{}{path}", self.base));
            if let Some(body) = &body {
                req = req.header("idempotency-key", &key).json(body);
            }
            let answer = match req.send().await {
                Ok(res) if res.status().is_success() => return res.json().await.unwrap(),
                Ok(res) => {
                    let status = res.status();
                    let body = res.text().await.unwrap_or_default();
                    format!("{status} {}", body.lines().next().unwrap_or_default())
                }
                Err(e) => format!("{e:?}"),
            };
            self.failures().push(Failure {
                at_ms: now_ms(),
                request: format!("{method} {path}"),
                answer,
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "{method} {path} kept failing: {}\nnginx: {}",
            describe(&self.failures()),
            std::fs::read_to_string(&self.nginx_log).unwrap_or_default()
        );
    }

    async fn events(&self, sid: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after = "0-0".to_owned();
        loop {
            let path = format!("/v1/sessions/{sid}/log?after={after}&limit=1000");
            let page = self.send(reqwest::Method::GET, &path, None).await;
            out.extend(page["events"].as_array().unwrap().iter().cloned());
            after = page["cursor"].as_str().unwrap().to_owned();
            if !page["has_more"].as_bool().unwrap() {
                return out;
            }
        }
    }
}

/// One session's writer: prompts its main agent and, while the turn runs, toggles the plan mode
/// of a second agent, until told to stop (the running turn is seen to its end first). Returns
/// the turns it started.
async fn write(w: Writer, sid: String, helper: String, stop: watch::Receiver<bool>) -> Vec<String> {
    use reqwest::Method;
    let mut turns = Vec::new();
    let mut active = false;
    while !*stop.borrow() {
        let path = format!("/v1/sessions/{sid}/agents/main/messages");
        let prompted = w
            .send(Method::POST, &path, Some(json!({ "text": PROMPT })))
            .await;
        assert_eq!(prompted["steered"], false, "{prompted}");
        let turn = prompted["turn"].as_str().unwrap().to_owned();
        turns.push(turn.clone());
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            active = !active;
            let path = format!("/v1/sessions/{sid}/agents/{helper}/plan");
            w.send(Method::PUT, &path, Some(json!({ "active": active })))
                .await;
            let path = format!("/v1/sessions/{sid}/agents/main");
            let agent = w.send(Method::GET, &path, None).await;
            if agent["turn"] != turn.as_str() {
                break;
            }
        }
    }
    turns
}

/// One replica's restart: when it was sent SIGTERM, and how long it took to exit and to be
/// ready again.
#[derive(Debug)]
struct Restart {
    replica: &'static str,
    sigterm_at_ms: u64,
    exit: Duration,
    ready: Duration,
}

/// Counts a `step/started` an SSE client received, by the replica that started it, only when it
/// was committed within the last [`FRESH_STEP_MS`] (so not a replay of an older one).
fn step_started(steps: &watch::Sender<HashMap<String, u64>>, data: &str) {
    fn malformed(data: &str) -> ! {
        panic!("a step/started frame without its replica or time: {data}")
    }
    let event: Value = serde_json::from_str(data).unwrap_or_else(|_| malformed(data));
    let replica = event["data"]["header"]["replica"].as_str();
    let at = event["committed_at"].as_str();
    let (Some(replica), Some(at)) = (replica, at) else {
        malformed(data)
    };
    let (replica, at) = (replica.to_owned(), ms_since_epoch(at));
    if now_ms().saturating_sub(at) <= FRESH_STEP_MS {
        steps.send_modify(|seen| *seen.entry(replica).or_default() += 1);
    }
}

/// Waits until the replica starts a step, so its SIGTERM has one in flight to hand over (a
/// step here streams its answer's ten words 100 ms apart: ~1 s). Waiting for a running turn
/// was not enough: at the start every turn may still be before its first step, which another
/// replica then starts afresh instead of retrying it (a CI run saw `[0, 9, 6]` handed over).
async fn await_running_step(name: &str, steps: &mut watch::Receiver<HashMap<String, u64>>) {
    let before = steps.borrow_and_update().get(name).copied().unwrap_or(0);
    let started = steps.wait_for(|seen| seen.get(name).copied().unwrap_or(0) > before);
    tokio::time::timeout(Duration::from_secs(15), started)
        .await
        .expect("the replica started no step")
        .unwrap();
}

/// SIGTERMs the replica and waits for its graceful exit; returns when the signal was sent.
async fn stop_gracefully(replica: &mut Replica) -> (u64, Duration) {
    let sent = Instant::now();
    let at = now_ms();
    unsafe {
        libc::kill(replica.child.id() as i32, libc::SIGTERM);
    }
    let deadline = sent + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = replica.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the replica did not exit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(status.success(), "a graceful exit: {status:?}");
    (at, sent.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_behind_nginx_loses_no_event_no_turn_and_no_write() {
    let started = Instant::now();
    let redis = TestRedis::start().await;
    let names = ["r1", "r2", "r3"];
    let mut ports = Vec::new();
    while ports.len() < names.len() {
        let port = stable_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    // The replicas drain as deploy/compose.yaml's do.
    let env = [("DSH_DRAIN_DELAY_MS", compose_drain_delay())];
    let mut replicas = Vec::new();
    for (name, &port) in names.iter().zip(&ports) {
        replicas.push(spawn_process_on(&redis, name, port, TOKEN_DELAY_MS, &env).await);
    }
    let nginx = Nginx::start(&ports).await;
    let w = Writer::new(&nginx);

    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let sid = w.send(reqwest::Method::POST, "/v1/sessions", Some(json!({})));
        let sid = sid.await["id"].as_str().unwrap().to_owned();
        let path = format!("/v1/sessions/{sid}/agents");
        let helper = w.send(reqwest::Method::POST, &path, Some(json!({}))).await;
        sessions.push((sid, helper["id"].as_str().unwrap().to_owned()));
    }

    let (targets_tx, targets) = watch::channel(None);
    let (steps_tx, mut steps) = watch::channel(HashMap::new());
    let connected = Arc::new(AtomicUsize::new(0));
    let sse = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut clients = Vec::new();
    for (sid, _) in &sessions {
        for _ in 0..CLIENTS_PER_SESSION {
            let url = nginx.url(&format!("/v1/sessions/{sid}/events"));
            clients.push(tokio::spawn(subscribe(
                sse.clone(),
                url,
                sid.clone(),
                connected.clone(),
                targets.clone(),
                steps_tx.clone(),
            )));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while connected.load(Ordering::SeqCst) < clients.len() {
        assert!(Instant::now() < deadline, "the SSE clients did not connect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let (stop_tx, stop) = watch::channel(false);
    let writers: Vec<_> = sessions
        .iter()
        .map(|(sid, helper)| {
            let run = write(w.clone(), sid.clone(), helper.clone(), stop.clone());
            tokio::spawn(run)
        })
        .collect();

    let mut restarts = Vec::new();
    for (i, name) in names.iter().enumerate() {
        await_running_step(name, &mut steps).await;
        let (sigterm_at_ms, exit) = stop_gracefully(&mut replicas[i]).await;
        let starting = Instant::now();
        replicas[i] = spawn_process_on(&redis, name, ports[i], TOKEN_DELAY_MS, &env).await;
        restarts.push(Restart {
            replica: name,
            sigterm_at_ms,
            exit,
            ready: starting.elapsed(),
        });
    }
    stop_tx.send(true).unwrap();
    let mut turns: HashMap<String, Vec<String>> = HashMap::new();
    for ((sid, _), writer) in sessions.iter().zip(writers) {
        turns.insert(sid.clone(), writer.await.unwrap());
    }

    // Every turn the writer started ended, completed; and the log holds up.
    let mut logs = HashMap::new();
    for (sid, _) in &sessions {
        let events = w.events(sid).await;
        for turn in &turns[sid] {
            let ended = events
                .iter()
                .find(|e| e["type"] == "turn/ended" && e["data"]["turn"] == turn.as_str())
                .unwrap_or_else(|| panic!("turn {turn} of {sid} did not end"));
            assert_eq!(ended["data"]["reason"], "completed", "{ended}");
        }
        // A prompt sent again (same Idempotency-Key) was not recorded twice.
        let prompts = events.iter().filter(|e| e["type"] == "user/message");
        assert_eq!(prompts.count(), turns[sid].len(), "one message per prompt");
        let (ok, out) = verify(&redis, sid);
        assert!(ok, "{out}");
        logs.insert(sid.clone(), events);
    }

    // Each SIGTERM handed running steps over, each retried elsewhere within 1 s of it (per
    // restart, ms after its SIGTERM); each turn started within 1 s of its prompt.
    let mut resumes: Vec<Vec<u64>> = vec![Vec::new(); restarts.len()];
    let mut max_start = 0;
    for events in logs.values() {
        let mut runs_on: HashMap<(String, u64), String> = HashMap::new();
        let mut opened: HashMap<String, u64> = HashMap::new();
        for e in events {
            let at = ms_since_epoch(e["committed_at"].as_str().unwrap());
            let d = &e["data"];
            let step = || {
                (
                    d["turn"].as_str().unwrap().to_owned(),
                    d["step"].as_u64().unwrap(),
                )
            };
            match e["type"].as_str().unwrap() {
                "turn/started" => {
                    opened.insert(d["turn"].as_str().unwrap().to_owned(), at);
                }
                "step/started" => {
                    if d["step"] == 1 {
                        let prompted = opened[d["turn"].as_str().unwrap()];
                        max_start = max_start.max(at.saturating_sub(prompted));
                    }
                    runs_on.insert(step(), d["header"]["replica"].as_str().unwrap().into());
                }
                "step/retried" => {
                    let before = runs_on.insert(step(), d["replica"].as_str().unwrap().into());
                    let before = before.expect("a retried step had started");
                    let restart = restarts
                        .iter()
                        .rposition(|r| r.replica == before && r.sigterm_at_ms <= at)
                        .unwrap_or_else(|| {
                            panic!("a step of {before} was retried without its SIGTERM: {e}")
                        });
                    resumes[restart].push(at - restarts[restart].sigterm_at_ms);
                }
                _ => {}
            }
        }
    }
    let turns_run: usize = turns.values().map(Vec::len).sum();
    let max_resume = resumes.iter().flatten().copied().max().unwrap_or_default();
    let handed: Vec<usize> = resumes.iter().map(Vec::len).collect();

    // Every client ends with every event of its session: tell them where the logs end.
    let heads: HashMap<String, u64> = logs
        .iter()
        .map(|(sid, events)| {
            (
                sid.clone(),
                seq(events.last().unwrap()["id"].as_str().unwrap()),
            )
        })
        .collect();
    targets_tx.send(Some(Arc::new(heads))).unwrap();
    let mut seen = Vec::new();
    for client in clients {
        let s = tokio::time::timeout(Duration::from_secs(15), client)
            .await
            .expect("an SSE client caught up with its session's log")
            .unwrap();
        seen.push(s);
    }

    let streams: u32 = seen.iter().map(|s| s.streams).sum();
    let broken: u32 = seen.iter().map(|s| s.broken).sum();
    let refused: Vec<&String> = seen.iter().flat_map(|s| &s.refused).collect();
    let failures = w.failures();
    let nginx_log = nginx.logs();
    let count = |what: &str| nginx_log.matches(what).count();
    eprintln!(
        "rolling restart: {} clients, {}..{} events each, {streams} streams ({broken} broken, \
         {} reconnects refused); {turns_run} turns, steps handed over {handed:?}, max resume \
         {max_resume} ms, max first step {max_start} ms; {} writer requests, {} failed \
         attempts; nginx: {} refused connections, {} closed before answering, {} without a live \
         upstream; restarts (exit, ready): {}; {:.1} s in all",
        seen.len(),
        seen.iter().map(|s| s.ids.len()).min().unwrap(),
        seen.iter().map(|s| s.ids.len()).max().unwrap(),
        refused.len(),
        w.requests.load(Ordering::SeqCst),
        failures.len(),
        count("Connection refused"),
        count("prematurely closed"),
        count("no live upstreams"),
        restarts
            .iter()
            .map(|r| format!("{} {:?} {:?}", r.replica, r.exit, r.ready))
            .collect::<Vec<_>>()
            .join(", "),
        started.elapsed().as_secs_f64(),
    );

    for s in &seen {
        let expected: Vec<u64> = logs[&s.sid]
            .iter()
            .map(|e| seq(e["id"].as_str().unwrap()))
            .collect();
        if s.ids != expected {
            let mut counts: HashMap<u64, usize> = HashMap::new();
            for id in &s.ids {
                *counts.entry(*id).or_default() += 1;
            }
            let twice: Vec<_> = counts.iter().filter(|(_, &n)| n > 1).collect();
            let missing: Vec<_> = expected
                .iter()
                .filter(|i| !counts.contains_key(i))
                .collect();
            panic!(
                "a client of {} did not get every event exactly once, in order: missing \
                 {missing:?}, duplicated {twice:?} ({} streams)",
                s.sid, s.streams
            );
        }
        assert_eq!(s.resets, 0, "a client was sent a reset");
    }
    assert!(
        refused.is_empty(),
        "reconnects did not open a stream (an EventSource gives up on those): {refused:?}\n\
         nginx: {nginx_log}"
    );
    assert!(
        failures.is_empty(),
        "writer requests failed during the restarts (SIGTERMs at {:?} ms):\n{}\nnginx: {nginx_log}",
        restarts.iter().map(|r| r.sigterm_at_ms).collect::<Vec<_>>(),
        describe(&failures),
    );
    assert!(
        handed.iter().all(|&n| n > 0),
        "each SIGTERM handed a running step over: {handed:?}"
    );
    assert!(
        max_resume < 1_000,
        "a handed-over step resumed {max_resume} ms after its replica's SIGTERM: {resumes:?}"
    );
    assert!(
        max_start < 1_000,
        "a turn's first step started {max_start} ms after its prompt"
    );
}
