//! Shared by the benchmark examples (`turn_bench`, `storm_bench`): a small typed client for the
//! API routes they drive, the server's CPU time from `/proc`, bulk writes straight into a
//! session's Redis stream (to build a long log without paying for a request per event), and
//! percentiles.
//!
//! Everything here talks to 127.0.0.1 only; the scripts in `k6/` start the servers.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde_json::{json, Value};

/// Positional command-line arguments, read by name.
pub struct Argv(Vec<(&'static str, String)>);

impl Argv {
    /// Exactly one argument per name, in order, or a usage error.
    pub fn read(bin: &str, names: &[&'static str]) -> anyhow::Result<Self> {
        let values: Vec<String> = std::env::args().skip(1).collect();
        if values.len() != names.len() {
            let usage: Vec<String> = names.iter().map(|n| format!("<{n}>")).collect();
            bail!("usage: {bin} {}", usage.join(" "));
        }
        Ok(Self(names.iter().copied().zip(values).collect()))
    }

    pub fn get<T: FromStr>(&self, name: &str) -> anyhow::Result<T>
    where
        T::Err: std::error::Error + Send + Sync + 'static,
    {
        let (_, v) = self
            .0
            .iter()
            .find(|(n, _)| *n == name)
            .with_context(|| format!("no argument <{name}>"))?;
        v.parse()
            .with_context(|| format!("argument <{name}>: `{v}`"))
    }
}

/// The API of one replica, as the benchmarks use it.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
}

impl Api {
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    async fn send(&self, req: reqwest::RequestBuilder, what: &str) -> anyhow::Result<Value> {
        let res = req.send().await.with_context(|| what.to_owned())?;
        let status = res.status();
        let body = res.text().await.with_context(|| what.to_owned())?;
        if !status.is_success() {
            bail!("{what}: {status}: {body}");
        }
        serde_json::from_str(&body).with_context(|| format!("{what}: body {body}"))
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        self.send(self.http.get(&url), &format!("GET {path}")).await
    }

    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let req = self.http.post(&url).json(&body);
        self.send(req, &format!("POST {path}")).await
    }

    /// A new session with its root agent `main`; returns its id.
    pub async fn create_session(&self) -> anyhow::Result<String> {
        let created = self.post("/v1/sessions", json!({})).await?;
        str_field(&created, "id")
    }

    /// Spawns an unowned agent; returns its id.
    pub async fn spawn_agent(&self, sid: &str) -> anyhow::Result<String> {
        let spawned = self
            .post(&format!("/v1/sessions/{sid}/agents"), json!({}))
            .await?;
        str_field(&spawned, "id")
    }

    /// The seq of the session's last event.
    pub async fn head(&self, sid: &str) -> anyhow::Result<u64> {
        let session = self.get(&format!("/v1/sessions/{sid}")).await?;
        seq_of(&str_field(&session, "last_event_id")?)
    }

    /// Every event after seq `after`, paging through the log.
    pub async fn events_after(&self, sid: &str, after: u64) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut cursor = format!("{after}-0");
        loop {
            let page = self
                .get(&format!("/v1/sessions/{sid}/log?after={cursor}&limit=1000"))
                .await?;
            if let Some(events) = page["events"].as_array() {
                out.extend(events.iter().cloned());
            }
            cursor = str_field(&page, "cursor")?;
            if page["has_more"] != json!(true) {
                return Ok(out);
            }
        }
    }
}

pub fn str_field(v: &Value, name: &str) -> anyhow::Result<String> {
    v[name]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no string `{name}` in {v}"))
}

/// The seq of an event id `<seq>-0`.
pub fn seq_of(id: &str) -> anyhow::Result<u64> {
    id.strip_suffix("-0")
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("`{id}` is not an event id"))
}

/// User plus system CPU time the process has used so far, in seconds (`/proc/<pid>/stat`).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at `state`, field 3;
    // utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i - 3)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("field {i} of /proc/{pid}/stat"))
    };
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((ticks(14)? + ticks(15)?) as f64 / per_second)
}

/// Appends `n` entries for `agent` to session `sid`'s stream, seqs `first..first + n`, each
/// with `data(seq)` as its payload, exactly as the append script writes them (fields `type`,
/// `agent`, `data`, `ts`, `v`). The caller makes sure they are valid for the fold.
pub async fn append_raw(
    redis_url: &str,
    key_prefix: &str,
    sid: &str,
    first: u64,
    n: u64,
    (type_name, agent): (&str, &str),
    data: impl Fn(u64) -> String,
) -> anyhow::Result<()> {
    let client = redis::Client::open(redis_url).context("the Redis URL")?;
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .context("connecting to Redis")?;
    let key = format!("{key_prefix}:{{{sid}}}:log");
    let ts = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let end = first + n;
    let mut seq = first;
    while seq < end {
        let mut pipe = redis::pipe();
        for s in seq..end.min(seq + 5_000) {
            pipe.cmd("XADD")
                .arg(&key)
                .arg(format!("{s}-0"))
                .arg("type")
                .arg(type_name)
                .arg("agent")
                .arg(agent)
                .arg("data")
                .arg(data(s))
                .arg("ts")
                .arg(ts.to_string())
                .arg("v")
                .arg("1")
                .ignore();
        }
        pipe.query_async::<()>(&mut conn)
            .await
            .with_context(|| format!("XADD from seq {seq}"))?;
        seq = end.min(seq + 5_000);
    }
    Ok(())
}

/// The value at fraction `p` of an ascending slice (NaN when empty).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}
