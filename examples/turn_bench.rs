//! Engine overhead per step: one turn that keeps stepping until `DSH_MAX_STEPS`, against an
//! instant mock provider, on a session of 10 events and on one whose log already holds many
//! (100,000 by default).
//!
//! The example hosts the mock: an OpenAI-compatible `POST /v1/chat/completions` on 127.0.0.1
//! that answers every request at once with a streamed call of tool `search` (id `call_0`, args
//! `{"q":"x"}`). The server records the answer, gives the unknown tool a failed result and
//! starts the next step, so the turn runs until the step limit and what it costs is the
//! engine's own work: three compare-and-appends, the request assembly and one provider round
//! trip per step.
//!
//! Each session gets an extra agent (`agent-1`) whose `plan/select` events, written straight
//! into the Redis stream, make up the log's length; one GET folds them before the clock starts.
//! Per session: steps per second of wall time (prompt sent → the agent reads `idle` again,
//! polled every 10 ms), the server's CPU time per step (utime + stime from `/proc/<pid>/stat`,
//! the polling included), and the rate over the first and the last 100 steps (from the
//! `step/started` commit times; every step sends the whole, growing, history).
//!
//! Run by `k6/bench-turn.sh`. Arguments:
//! `<server_url> <server_pid> <mock_port> <redis_url> <key_prefix> <big_events> <rounds>`.

#[allow(dead_code)]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use actix_web::{web, App, HttpResponse, HttpServer};
use anyhow::{bail, Context};
use futures_util::StreamExt;
use serde_json::{json, Value};

use common::{cpu_seconds, median, str_field, Api, Argv};

struct Args {
    api: Api,
    pid: u32,
    mock_port: u16,
    redis_url: String,
    prefix: String,
    big: u64,
    rounds: usize,
}

fn args() -> anyhow::Result<Args> {
    let a = Argv::read(
        "turn_bench",
        &[
            "server_url",
            "server_pid",
            "mock_port",
            "redis_url",
            "key_prefix",
            "big_events",
            "rounds",
        ],
    )?;
    Ok(Args {
        api: Api::new(&a.get::<String>("server_url")?)?,
        pid: a.get("server_pid")?,
        mock_port: a.get("mock_port")?,
        redis_url: a.get("redis_url")?,
        prefix: a.get("key_prefix")?,
        big: a.get("big_events")?,
        rounds: a.get("rounds")?,
    })
}

/// The streamed answer to every request: one call of the unregistered tool `search`.
fn tool_call_reply() -> String {
    let chunk = |delta: Value, finish: Value| {
        let c = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {c}\n\n")
    };
    let call = json!({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
        "function": {"name": "search", "arguments": "{\"q\":\"x\"}"}}]});
    chunk(call, Value::Null) + &chunk(json!({}), json!("tool_calls")) + "data: [DONE]\n\n"
}

async fn completions(
    mut body: web::Payload,
    count: web::Data<AtomicU64>,
    reply: web::Data<String>,
) -> HttpResponse {
    // Drained, never buffered: late steps send the whole history.
    while let Some(chunk) = body.next().await {
        if chunk.is_err() {
            return HttpResponse::BadRequest().finish();
        }
    }
    count.fetch_add(1, Ordering::Relaxed);
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .body(reply.get_ref().clone())
}

/// Starts the mock provider on `127.0.0.1:<port>`; returns its request counter.
fn start_mock(port: u16) -> anyhow::Result<Arc<AtomicU64>> {
    let count = web::Data::new(AtomicU64::new(0));
    let reply = web::Data::new(tool_call_reply());
    let shared = count.clone().into_inner();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(count.clone())
            .app_data(reply.clone())
            .route("/v1/chat/completions", web::post().to(completions))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", port))
    .with_context(|| format!("binding the mock provider on port {port}"))?
    .run();
    tokio::spawn(server);
    Ok(shared)
}

/// A session of `events` events: `session/created`, `agent/spawned` for `agent-1`, then
/// `plan/select` events of `agent-1` written straight into the stream. Returns its id and how
/// long the first (cold) fold took.
async fn prepare(a: &Args, events: u64) -> anyhow::Result<(String, Duration)> {
    let sid = a.api.create_session().await?;
    let agent = a.api.spawn_agent(&sid).await?;
    let written = events.saturating_sub(2);
    let select = |seq: u64| format!("{{\"active\":{}}}", seq.is_multiple_of(2));
    let kind = ("plan/select", agent.as_str());
    common::append_raw(&a.redis_url, &a.prefix, &sid, 3, written, kind, select).await?;
    let t = Instant::now();
    let head = a.api.head(&sid).await?;
    let cold = t.elapsed();
    if head != written + 2 {
        bail!(
            "session {sid} holds {head} events, expected {}",
            written + 2
        );
    }
    Ok((sid, cold))
}

struct Run {
    events: u64,
    steps: usize,
    reason: String,
    wall: Duration,
    cpu: f64,
    first100: f64,
    last100: f64,
    cold: Duration,
    requests: u64,
}

fn committed_ms(e: &Value) -> anyhow::Result<u64> {
    let at = str_field(e, "committed_at")?;
    let t = humantime::parse_rfc3339(&at).with_context(|| format!("committed_at {at}"))?;
    Ok(t.duration_since(UNIX_EPOCH)?.as_millis() as u64)
}

/// Steps per second between step `from` and step `from + 100` (0-based), from commit times.
fn rate(starts: &[u64], from: usize) -> f64 {
    match (starts.get(from), starts.get(from + 100)) {
        (Some(a), Some(b)) if b > a => 100_000.0 / (b - a) as f64,
        _ => f64::NAN,
    }
}

/// Prompts `main` once and waits for the turn to end.
async fn run(a: &Args, events: u64, mock: &AtomicU64) -> anyhow::Result<Run> {
    let (sid, cold) = prepare(a, events).await?;
    let before = a.api.head(&sid).await?;
    let main = format!("/v1/sessions/{sid}/agents/main");
    let requests0 = mock.load(Ordering::Relaxed);
    let cpu0 = cpu_seconds(a.pid)?;
    let t0 = Instant::now();
    a.api
        .post(&format!("{main}/messages"), json!({"text": "search for x"}))
        .await?;
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if a.api.get(&main).await?["status"] == "idle" {
            break;
        }
        if t0.elapsed() > Duration::from_secs(900) {
            bail!("the turn on session {sid} did not end within 15 minutes");
        }
    }
    let wall = t0.elapsed();
    let cpu = cpu_seconds(a.pid)? - cpu0;
    let requests = mock.load(Ordering::Relaxed) - requests0;

    let log = a.api.events_after(&sid, before).await?;
    let starts: Vec<u64> = log
        .iter()
        .filter(|e| e["type"] == "step/started")
        .map(committed_ms)
        .collect::<anyhow::Result<_>>()?;
    let reason = log
        .iter()
        .rev()
        .find(|e| e["type"] == "turn/ended")
        .and_then(|e| e["data"]["reason"].as_str())
        .unwrap_or("(no turn/ended)")
        .to_owned();
    Ok(Run {
        events: before,
        steps: starts.len(),
        reason,
        wall,
        cpu,
        first100: rate(&starts, 0),
        last100: rate(&starts, starts.len().saturating_sub(101)),
        cold,
        requests,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let mock = start_mock(a.mock_port)?;
    println!("| events before the turn | steps | turn end | wall s | steps/s | server CPU ms/step | steps/s, first 100 | steps/s, last 100 | cold fold s | provider requests |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut small = Vec::new();
    let mut big = Vec::new();
    for _ in 0..a.rounds {
        for (events, into) in [(10, &mut small), (a.big, &mut big)] {
            let r = run(&a, events, &mock).await?;
            let steps = r.steps.max(1) as f64;
            println!(
                "| {} | {} | {} | {:.2} | {:.0} | {:.3} | {:.0} | {:.0} | {:.2} | {} |",
                r.events,
                r.steps,
                r.reason,
                r.wall.as_secs_f64(),
                steps / r.wall.as_secs_f64(),
                r.cpu * 1000.0 / steps,
                r.first100,
                r.last100,
                r.cold.as_secs_f64(),
                r.requests
            );
            into.push((steps / r.wall.as_secs_f64(), r.cpu * 1000.0 / steps));
        }
    }
    let rate = |v: &[(f64, f64)]| median(v.iter().map(|r| r.0).collect());
    let cpu = |v: &[(f64, f64)]| median(v.iter().map(|r| r.1).collect());
    println!(
        "\nmedian of {} rounds: 10 events {:.0} steps/s, {:.3} ms CPU/step; {} events {:.0} steps/s, {:.3} ms CPU/step",
        a.rounds,
        rate(&small),
        cpu(&small),
        a.big,
        rate(&big),
        cpu(&big)
    );
    println!(
        "targets: >= 300 steps/s ({}), {}-event CPU/step within 20% of 10-event ({:+.1}%)",
        if rate(&small).min(rate(&big)) >= 300.0 {
            "met"
        } else {
            "NOT met"
        },
        a.big,
        (cpu(&big) / cpu(&small) - 1.0) * 100.0
    );
    Ok(())
}
