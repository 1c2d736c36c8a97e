//! SSE fan-out benchmark: N subscribers on one replica, commits made on another (or the same)
//! replica, commit-to-delivery latency and server memory per idle subscriber.
//!
//! Run by `k6/bench-sse.sh`, which starts Redis and the replicas on loopback. Arguments:
//! `<subscribe_url> <commit_url> <server_pid> <subscribers> <commits> [shared|spread]`: all
//! subscribers on one session (`shared`, the default), or each on a session of its own
//! (`spread`: the usual case of one browser per session; commits go round-robin over them).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0)
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// Arrival times per (session index, seq).
type Deliveries = Arc<Mutex<HashMap<(usize, u64), Vec<Instant>>>>;

async fn subscriber(
    addr: String,
    session: usize,
    sid: String,
    after: u64,
    ready: tokio::sync::mpsc::Sender<(usize, bool)>,
    seen: Deliveries,
) {
    let Ok(mut conn) = TcpStream::connect(&addr).await else {
        return;
    };
    let req = format!("GET /v1/sessions/{sid}/events?after={after}-0&types=plan/mode HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    if conn.write_all(req.as_bytes()).await.is_err() {
        return;
    }
    let mut buf = vec![0u8; 8192];
    let mut pending = String::new();
    let mut announced = false;
    loop {
        let n = match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let now = Instant::now();
        pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        if !announced {
            if !pending.contains("\r\n") {
                continue;
            }
            announced = true;
            // A refusal (e.g. 429: the tenant's stream limit) is not a subscriber.
            let accepted = pending.starts_with("HTTP/1.1 200");
            let _ = ready.send((session, accepted)).await;
            if !accepted {
                return;
            }
        }
        while let Some(pos) = pending.find("\nid: ") {
            let rest = &pending[pos + 5..];
            let Some(end) = rest.find('\n') else { break };
            if let Some(seq) = rest[..end]
                .trim()
                .strip_suffix("-0")
                .and_then(|s| s.parse::<u64>().ok())
            {
                seen.lock()
                    .unwrap()
                    .entry((session, seq))
                    .or_default()
                    .push(now);
            }
            pending = rest[end..].to_owned();
        }
        if pending.len() > 65536 {
            pending.clear();
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (sub_url, commit_url) = (args[1].clone(), args[2].clone());
    let pid: u32 = args[3].parse().unwrap();
    let n: usize = args[4].parse().unwrap();
    let commits: usize = args[5].parse().unwrap();
    let spread = args.get(6).is_some_and(|m| m == "spread");
    let http = reqwest::Client::builder().no_proxy().build().unwrap();

    let mut sids = Vec::new();
    for _ in 0..if spread { n.max(1) } else { 1 } {
        let created: serde_json::Value = http
            .post(format!("{commit_url}/v1/sessions"))
            .json(&serde_json::json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        sids.push(created["id"].as_str().unwrap().to_owned());
    }
    // `SSE_BENCH_WARM=1`: the subscribing replica has read every session before (its fold
    // cache holds them), so the figure is what the subscriptions alone cost.
    if std::env::var("SSE_BENCH_WARM").is_ok_and(|v| v == "1") {
        for sid in &sids {
            let _ = http
                .get(format!("{sub_url}/v1/sessions/{sid}"))
                .send()
                .await;
        }
    }
    let rss_before = rss_kb(pid);

    let seen: Deliveries = Arc::default();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(n.max(1));
    let addr = host_port(&sub_url);
    for i in 0..n {
        let session = i % sids.len();
        tokio::spawn(subscriber(
            addr.clone(),
            session,
            sids[session].clone(),
            1,
            ready_tx.clone(),
            seen.clone(),
        ));
        if i % 200 == 199 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    drop(ready_tx);
    let (mut connected, mut refused) = (0, 0);
    // Accepted subscribers per session: the deliveries each commit should make.
    let mut following: HashMap<usize, usize> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while connected + refused < n && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), ready_rx.recv()).await {
            Ok(Some((session, true))) => {
                connected += 1;
                *following.entry(session).or_default() += 1;
            }
            Ok(Some((_, false))) => refused += 1,
            _ => {}
        }
    }
    if refused > 0 {
        eprintln!("{refused} subscriber(s) refused (not 200): left out of every figure");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = rss_kb(pid);

    let mut sent: HashMap<(usize, u64), Instant> = HashMap::new();
    for i in 0..commits {
        let session = i % sids.len();
        let sid = &sids[session];
        // Each session alternates on, off, on…
        let active = (i / sids.len()) % 2 == 0;
        let t0 = Instant::now();
        let res: serde_json::Value = http
            .put(format!("{commit_url}/v1/sessions/{sid}/agents/main/plan"))
            .json(&serde_json::json!({ "active": active }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let seq: u64 = res["last_event_id"]
            .as_str()
            .unwrap()
            .trim_end_matches("-0")
            .parse()
            .unwrap();
        sent.insert((session, seq), t0);
        tokio::time::sleep(Duration::from_millis(if spread { 5 } else { 100 })).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let seen = seen.lock().unwrap();
    let mut lat: Vec<f64> = Vec::new();
    let mut missing = 0usize;
    for (key, t0) in &sent {
        let got = seen.get(key).map(Vec::as_slice).unwrap_or(&[]);
        let expected = following.get(&key.0).copied().unwrap_or(0);
        missing += expected.saturating_sub(got.len());
        lat.extend(
            got.iter()
                .map(|t| t.duration_since(*t0).as_secs_f64() * 1000.0),
        );
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "subscribers {connected}/{n} on {} session(s)  commits {commits}  deliveries {}  missing {missing}\n  commit-to-delivery ms: p50 {:.2}  p99 {:.2}  max {:.2}\n  server RSS: {} KB before, {} KB with {connected} idle subscribers -> {:.1} KB per subscriber",
        sids.len(),
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(f64::NAN),
        rss_before,
        rss_idle,
        (rss_idle.saturating_sub(rss_before)) as f64 / connected.max(1) as f64
    );
}
