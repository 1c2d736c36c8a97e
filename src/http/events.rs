//! Server-Sent Events: every committed event of a session (`id:` = event id, `event:` = type,
//! `data:` = the event with `committed_at`), a derived `plan/view` whenever an agent's plan view
//! changes, and assistant deltas as ephemeral events without an id.
//!
//! A stream subscribes to the replica's live feed first, then catches up from the log past its
//! cursor (`Last-Event-ID`, else `?after=`), then follows the feed, reading any gap from the
//! log, so it never skips or repeats an event. A cursor older than the trimmed log gets a
//! `reset` event (re-read the session, then reconnect). Heartbeat comments keep proxies open;
//! `max_events` / `max_ms` end the stream cleanly for load tools; shutdown ends it so clients
//! reconnect elsewhere.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{get, web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use utoipa::IntoParams;

use super::{session_id, ApiError, Code, Problem, State};
use crate::domain::plan::{PlanProjection, PlanView};
use crate::domain::{EventId, Recorded, SessionId};
use crate::live::{FeedItem, Subscription};
use crate::store::EventLog;

/// Events read from the log per round trip while catching up.
const CATCH_UP_BATCH: usize = 500;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Resume after this event id (the `Last-Event-ID` header wins over it).
    pub after: Option<String>,
    /// Comma-separated event types; `plan/*` matches a prefix. Includes `plan/view` and
    /// `assistant/delta`.
    pub types: Option<String>,
    /// Only events of this agent.
    pub agent: Option<String>,
    /// End the stream after this many events (for load tools).
    pub max_events: Option<u64>,
    /// End the stream after this many milliseconds (for load tools).
    pub max_ms: Option<u64>,
}

struct Filter {
    types: Vec<String>,
    agent: Option<String>,
}

impl Filter {
    fn passes(&self, ty: &str, agent: &str) -> bool {
        let type_ok = self.types.is_empty()
            || self.types.iter().any(|t| match t.strip_suffix('*') {
                Some(prefix) => ty.starts_with(prefix),
                None => t == ty,
            });
        type_ok && self.agent.as_deref().is_none_or(|a| a == agent)
    }
}

struct Sse {
    sid: SessionId,
    log: Arc<dyn EventLog>,
    sub: Subscription,
    /// The last event sent (or skipped by the filter): the stream's cursor.
    last: u64,
    filter: Filter,
    plans: PlanProjection,
    /// Whether plan mode is composed (no `plan/view` frames otherwise).
    plan_views: bool,
    queue: VecDeque<Bytes>,
    sent: u64,
    max_events: Option<u64>,
    deadline: Option<Instant>,
    heartbeat: tokio::time::Interval,
    shutdown: tokio::sync::watch::Receiver<bool>,
    done: bool,
    /// Reading the log (lazily, a batch per poll) instead of the live feed.
    catching_up: bool,
    /// Just caught up: a lag now comes from the catch-up, not from a slow client.
    fresh: bool,
}

fn frame(id: Option<EventId>, event: &str, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + event.len() + 32);
    if let Some(id) = id {
        out.push_str(&format!("id: {id}\n"));
    }
    out.push_str("event: ");
    out.push_str(event);
    out.push_str("\ndata: ");
    out.push_str(data);
    out.push_str("\n\n");
    Bytes::from(out)
}

impl Sse {
    fn push(&mut self, bytes: Bytes) {
        self.queue.push_back(bytes);
        self.sent += 1;
    }

    /// Queues one committed event (if the filter passes) and any plan views it changed.
    fn emit(&mut self, e: &Recorded) {
        let before = self.plans.view();
        self.plans.apply(e.agent.as_str(), &e.kind);
        self.last = e.seq();
        if self.filter.passes(e.kind.type_name(), e.agent.as_str()) {
            let data = serde_json::to_string(e).unwrap_or_default();
            self.push(frame(Some(e.id), e.kind.type_name(), &data));
        }
        for (agent, view) in self.plans.view() {
            if before.get(&agent) != Some(&view) {
                self.view(Some(e.id), &agent, view);
            }
        }
    }

    fn view(&mut self, id: Option<EventId>, agent: &str, view: PlanView) {
        if self.plan_views && self.filter.passes("plan/view", agent) {
            let mut data = serde_json::json!({ "agent": agent, "active": view.active });
            if let Some(p) = view.pending {
                data["pending"] = p.into();
            }
            self.push(frame(id, "plan/view", &data.to_string()));
        }
    }

    /// Reads and queues one batch of the log past the cursor; catching up ends with a short
    /// batch. One batch at a time keeps a subscriber's memory bounded however long the log.
    async fn catch_up_batch(&mut self) {
        let batch = match self.log.read(&self.sid, self.last, CATCH_UP_BATCH).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(session = %self.sid, error = %e, "SSE catch-up failed; closing the stream");
                self.done = true;
                return;
            }
        };
        if let Some(first) = batch.first() {
            if self.last > 0 && first.seq() > self.last + 1 {
                let data = serde_json::json!({
                    "reason": "trimmed",
                    "message": "events after your cursor were compacted away; re-read the session, then reconnect after its last_event_id",
                    "first_available": first.id,
                });
                self.queue
                    .push_back(frame(None, "reset", &data.to_string()));
                self.done = true;
                return;
            }
        }
        if batch.len() < CATCH_UP_BATCH {
            self.catching_up = false;
            self.fresh = true;
        }
        for e in &batch {
            self.emit(e);
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.queue.pop_front() {
                return Some(b);
            }
            if self.done || self.max_events.is_some_and(|m| self.sent >= m) {
                return None;
            }
            if self.catching_up {
                self.catch_up_batch().await;
                continue;
            }
            let deadline = self.deadline;
            tokio::select! {
                item = self.sub.rx().recv() => match item {
                    Ok(FeedItem::Events(batch)) => {
                        self.fresh = false;
                        for e in batch.iter() {
                            if e.seq() <= self.last {
                                continue;
                            }
                            if e.seq() > self.last + 1 {
                                // A gap (a lost message): the log has it, and the rest.
                                self.catching_up = true;
                                break;
                            }
                            self.emit(e);
                        }
                    }
                    Ok(FeedItem::Ephemeral(msg)) => {
                        if self.filter.passes(&msg.kind, msg.agent.as_str()) {
                            self.push(frame(None, &msg.kind, &msg.body));
                        }
                    }
                    Ok(FeedItem::Resync) => self.catching_up = true,
                    // Fell behind while catching up from the log: not a slow client; skip what
                    // the feed buffered and read it from the log instead.
                    Err(RecvError::Lagged(_)) if self.fresh => {
                        self.sub.skip_to_tail();
                        self.catching_up = true;
                    }
                    Err(RecvError::Lagged(n)) => {
                        tracing::info!(session = %self.sid, behind = n, "slow SSE subscriber cut off; it resumes with Last-Event-ID");
                        self.done = true;
                    }
                    Err(RecvError::Closed) => self.done = true,
                },
                _ = self.heartbeat.tick() => self.queue.push_back(Bytes::from_static(b": heartbeat\n\n")),
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => self.done = true,
                _ = self.shutdown.changed() => self.done = true,
            }
        }
    }
}

/// Subscribe to a session's events (Server-Sent Events).
#[utoipa::path(
    tag = "sessions",
    params(
        ("sid" = String, Path, description = "Session id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
        EventsQuery
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream` (bounded with `max_events`/`max_ms`)", content_type = "text/event-stream", body = String),
        (status = "4XX", body = Problem, content_type = "application/problem+json"),
        (status = "5XX", body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/v1/sessions/{sid}/events")]
pub async fn events(
    state: State,
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    let sid = session_id(&path)?;
    let header = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty());
    let cursor = match header.or(query.after.as_deref()) {
        Some(raw) => EventId::parse(raw)
            .map_err(|e| ApiError::new(Code::InvalidQuery, e))?
            .seq(),
        None => 0,
    };
    let filter = Filter {
        types: query
            .types
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        agent: query.agent.clone(),
    };
    // Subscribe before reading, so nothing committed meanwhile is missed.
    let sub = state.hub.subscribe(&sid);
    let head = state.sessions.state(&sid).await?;
    // The plan views as of the cursor, to derive plan/view changes from there on.
    let plans = if cursor == 0 {
        PlanProjection::default()
    } else if head.seq == cursor {
        PlanProjection {
            agents: head
                .agents
                .iter()
                .map(|(id, a)| (id.to_string(), a.plan))
                .collect(),
        }
    } else {
        state.sessions.plans_at(&sid, cursor).await?
    };
    let heartbeat = state.sse_heartbeat;
    let mut sse = Sse {
        sid,
        log: state.sessions.log().clone(),
        sub,
        last: cursor,
        filter,
        plans,
        queue: VecDeque::from([Bytes::from_static(b"retry: 2000\n\n")]),
        sent: 0,
        max_events: query.max_events,
        deadline: query
            .max_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms)),
        heartbeat: tokio::time::interval_at(Instant::now() + heartbeat, heartbeat),
        shutdown: state.shutdown.clone(),
        done: false,
        catching_up: true,
        fresh: false,
        plan_views: state.composition.plan_mode.is_some(),
    };
    // The current plan view of every agent, so a client never folds by itself.
    let views: BTreeMap<String, PlanView> = sse.plans.view();
    for (agent, view) in views {
        sse.view(None, &agent, view);
    }
    sse.sent = 0;
    let body = futures_util::stream::unfold(sse, |mut sse| async move {
        sse.next()
            .await
            .map(|b| (Ok::<_, actix_web::Error>(b), sse))
    });
    Ok(HttpResponse::Ok()
        .insert_header(("Content-Type", "text/event-stream"))
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
}
