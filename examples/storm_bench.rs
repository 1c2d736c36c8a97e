//! SSE delivery under a storm of plan flips, on a session of many agents (1,000 by default)
//! against a session of one.
//!
//! Per session: `agents - 1` agents are spawned next to `main`, `subscribers` SSE streams
//! (`GET /v1/sessions/{sid}/events`, no filter, so every frame including the derived `plan/view`
//! ones) open after the session's head, then `writers` concurrent writers toggle `main` with
//! `PUT …/agents/main/plan` until `flips` of them have committed a `plan/mode` (a writer that
//! races another gets `noop`; only committed outcomes count, each with its event id). A
//! subscriber the server cuts off resumes with `Last-Event-ID`, as `EventSource` does; the
//! resumptions are counted.
//!
//! Measured: committed `plan/mode` events a subscriber never received (missing), delivery
//! throughput (committed events delivered to every subscriber per second, from the first PUT
//! to the last delivery), commit-to-delivery latency (from just before the committing PUT was
//! sent), and the server's CPU time (utime + stime) over the storm.
//!
//! Run by `k6/bench-storm.sh`. Arguments:
//! `<server_url> <server_pid> <agents> <subscribers> <flips> <writers> <rounds>`.

#[allow(dead_code)]
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures_util::StreamExt;
use serde_json::json;

use common::{cpu_seconds, median, percentile, seq_of, str_field, Api, Argv};

struct Args {
    api: Api,
    pid: u32,
    agents: usize,
    subscribers: usize,
    flips: usize,
    writers: usize,
    rounds: usize,
}

fn args() -> anyhow::Result<Args> {
    let a = Argv::read(
        "storm_bench",
        &[
            "server_url",
            "server_pid",
            "agents",
            "subscribers",
            "flips",
            "writers",
            "rounds",
        ],
    )?;
    Ok(Args {
        api: Api::new(&a.get::<String>("server_url")?)?,
        pid: a.get("server_pid")?,
        agents: a.get("agents")?,
        subscribers: a.get("subscribers")?,
        flips: a.get("flips")?,
        writers: a.get("writers")?,
        rounds: a.get("rounds")?,
    })
}

/// What one subscriber received.
#[derive(Default)]
struct Received {
    /// Every `plan/mode` frame: its seq and arrival.
    modes: Mutex<Vec<(u64, Instant)>>,
    count: AtomicUsize,
    resumed: AtomicUsize,
}

/// Reads one SSE stream until `stop`, resuming with `Last-Event-ID` when the server ends it.
async fn subscribe(
    http: reqwest::Client,
    url: String,
    after: u64,
    got: Arc<Received>,
    connected: Arc<AtomicUsize>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut last_id = format!("{after}-0");
    let mut first = true;
    loop {
        let res = http.get(&url).header("Last-Event-ID", &last_id).send();
        let mut body = match res.await {
            Ok(res) if res.status().is_success() => res.bytes_stream(),
            _ => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if std::mem::take(&mut first) {
            connected.fetch_add(1, Ordering::SeqCst);
        }
        let mut buf = String::new();
        loop {
            let chunk = tokio::select! {
                chunk = body.next() => chunk,
                _ = stop.changed() => return,
            };
            let Some(Ok(chunk)) = chunk else { break };
            let now = Instant::now();
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let (mut id, mut event) = (None, None);
                for line in buf[..end].lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = Some(v.to_owned());
                    }
                }
                buf.drain(..end + 2);
                let Some(id) = id else { continue };
                if event.as_deref() == Some("plan/mode") {
                    if let Ok(seq) = seq_of(&id) {
                        got.modes
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((seq, now));
                        got.count.fetch_add(1, Ordering::SeqCst);
                    }
                }
                last_id = id;
            }
        }
        if *stop.borrow() {
            return;
        }
        got.resumed.fetch_add(1, Ordering::SeqCst);
    }
}

/// Shared by the writers: PUTs sent (their targets alternate by ticket, so writers in flight
/// together ask for opposite states) and flips committed.
#[derive(Default)]
struct Tickets {
    sent: AtomicUsize,
    committed: AtomicUsize,
}

/// Toggles `main` until `flips` commits were made between all writers; returns each
/// committed event's seq with the time its PUT was sent, and how many PUTs answered `noop`
/// (two in flight arrived out of order).
async fn write(
    api: Api,
    sid: String,
    flips: usize,
    tickets: Arc<Tickets>,
) -> anyhow::Result<(Vec<(u64, Instant)>, usize)> {
    let path = format!("{}/v1/sessions/{sid}/agents/main/plan", api.base);
    let (mut mine, mut noops) = (Vec::new(), 0);
    while tickets.committed.load(Ordering::SeqCst) < flips {
        // `main` starts inactive: even tickets ask for active.
        let target = tickets
            .sent
            .fetch_add(1, Ordering::SeqCst)
            .is_multiple_of(2);
        let sent = Instant::now();
        let res = api
            .http
            .put(&path)
            .json(&json!({ "active": target }))
            .send();
        let res: serde_json::Value = res.await?.error_for_status()?.json().await?;
        match res["outcome"].as_str() {
            Some("committed") => {
                mine.push((seq_of(&str_field(&res, "last_event_id")?)?, sent));
                tickets.committed.fetch_add(1, Ordering::SeqCst);
            }
            Some("noop") => noops += 1,
            other => bail!("PUT plan answered {other:?}: {res}"),
        }
    }
    Ok((mine, noops))
}

struct Storm {
    agents: usize,
    committed: usize,
    noops: usize,
    missing: usize,
    duplicates: usize,
    resumed: usize,
    write_s: f64,
    deliver_s: f64,
    lag: Vec<f64>,
    cpu: f64,
}

async fn storm(a: &Args, agents: usize) -> anyhow::Result<Storm> {
    let sid = a.api.create_session().await?;
    for _ in 1..agents {
        a.api.spawn_agent(&sid).await?;
    }
    let head = a.api.head(&sid).await?;

    let sse = reqwest::Client::builder().no_proxy().build()?;
    let url = format!("{}/v1/sessions/{sid}/events", a.api.base);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let connected = Arc::new(AtomicUsize::new(0));
    let received: Vec<Arc<Received>> = (0..a.subscribers).map(|_| Arc::default()).collect();
    let readers: Vec<_> = received
        .iter()
        .map(|got| {
            let (got, connected, stopped) = (got.clone(), connected.clone(), stopped.clone());
            tokio::spawn(subscribe(
                sse.clone(),
                url.clone(),
                head,
                got,
                connected,
                stopped,
            ))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while connected.load(Ordering::SeqCst) < a.subscribers {
        if Instant::now() > deadline {
            bail!(
                "only {} subscribers connected",
                connected.load(Ordering::SeqCst)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the initial plan/view frames of every agent drain before the storm.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let cpu0 = cpu_seconds(a.pid)?;
    let start = Instant::now();
    let tickets = Arc::new(Tickets::default());
    let writers: Vec<_> = (0..a.writers)
        .map(|_| tokio::spawn(write(a.api.clone(), sid.clone(), a.flips, tickets.clone())))
        .collect();
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    let mut noops = 0;
    for w in writers {
        let (mine, n) = w.await??;
        sent.extend(mine);
        noops += n;
    }
    let write_s = start.elapsed().as_secs_f64();

    let deadline = Instant::now() + Duration::from_secs(60);
    while received
        .iter()
        .any(|r| r.count.load(Ordering::SeqCst) < sent.len())
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let cpu = cpu_seconds(a.pid)? - cpu0;
    stop.send_replace(true);
    for r in readers {
        r.abort();
    }

    let (mut missing, mut duplicates, mut lag) = (0, 0, Vec::new());
    let mut last = start;
    for r in &received {
        let modes = r.modes.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = HashSet::new();
        for (seq, at) in modes.iter() {
            let Some(t0) = sent.get(seq) else { continue };
            if !seen.insert(*seq) {
                duplicates += 1;
                continue;
            }
            lag.push(at.duration_since(*t0).as_secs_f64() * 1000.0);
            last = last.max(*at);
        }
        missing += sent.len() - seen.len();
    }
    lag.sort_by(f64::total_cmp);
    Ok(Storm {
        agents,
        committed: sent.len(),
        noops,
        missing,
        duplicates,
        resumed: received
            .iter()
            .map(|r| r.resumed.load(Ordering::SeqCst))
            .sum(),
        write_s,
        deliver_s: last.duration_since(start).as_secs_f64(),
        lag,
        cpu,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    println!("| agents | subscribers | committed flips (noops) | missing | duplicates | resumed after cut-off | PUTs s | first PUT → last delivery s | events/s to all subscribers | deliveries/s (events × subscribers) | lag p50 ms | lag p99 ms | server CPU s |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut one, mut many) = (Vec::new(), Vec::new());
    for _ in 0..a.rounds {
        for agents in [1, a.agents] {
            let s = storm(&a, agents).await?;
            let rate = s.committed as f64 / s.deliver_s;
            println!(
                "| {} | {} | {} ({}) | {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {:.1} | {:.1} | {:.2} |",
                s.agents,
                a.subscribers,
                s.committed,
                s.noops,
                s.missing,
                s.duplicates,
                s.resumed,
                s.write_s,
                s.deliver_s,
                rate,
                rate * a.subscribers as f64,
                percentile(&s.lag, 0.5),
                percentile(&s.lag, 0.99),
                s.cpu
            );
            let into = if agents == 1 { &mut one } else { &mut many };
            into.push((rate, s.missing));
        }
    }
    let rate = |v: &[(f64, usize)]| median(v.iter().map(|r| r.0).collect());
    let missing: usize = one.iter().chain(&many).map(|r| r.1).sum();
    println!(
        "\nmedian of {} rounds: 1 agent {:.0} events/s, {} agents {:.0} events/s ({:+.1}%); missing {missing} in all",
        a.rounds,
        rate(&one),
        a.agents,
        rate(&many),
        (rate(&many) / rate(&one) - 1.0) * 100.0
    );
    let met = rate(&many) >= 0.8 * rate(&one) && missing == 0;
    println!(
        "target: {} agents within 20% of 1 agent, 0 missing ({})",
        a.agents,
        if met { "met" } else { "NOT met" }
    );
    Ok(())
}
