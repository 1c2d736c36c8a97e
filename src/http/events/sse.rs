//! The wire side both event routes share: a live item as an SSE frame (`id:`, `event:`,
//! `data:` with the frame's JSON), the `types`/`agent` filter, and the response that sends
//! frames with heartbeat comments, ends them at `max_events` / `max_ms`, at shutdown, at a
//! browser token's expiry or when the credential is revoked.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::time::Instant;

use super::EventsQuery;
use crate::auth::{self, Caller};
use crate::domain::event::frames::{
    Frame, ResetReason, SessionDeleted, StreamReset, PLAN_REVISION, PLAN_VIEW, RESET,
    SESSION_DELETED,
};
use crate::domain::{AgentId, EventId, SessionId};
use crate::http::AppState;
use crate::limits::StreamPermit;
use crate::live::Item;

/// Which frames a client asked for (`types`, `agent`).
pub(super) struct Filter {
    types: Vec<String>,
    agent: Option<String>,
}

impl Filter {
    /// Every frame passes (no `types`, no `agent`).
    pub(super) fn everything() -> Self {
        Self {
            types: Vec::new(),
            agent: None,
        }
    }

    pub(super) fn new(query: &EventsQuery) -> Self {
        Self {
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
        }
    }

    fn passes(&self, ty: &str, agent: &str) -> bool {
        let type_ok = self.types.is_empty()
            || self.types.iter().any(|t| match t.strip_suffix('*') {
                Some(prefix) => ty.starts_with(prefix),
                None => t == ty,
            });
        type_ok && self.agent.as_deref().is_none_or(|a| a == agent)
    }
}

/// Turns live items into frames for one route.
pub(super) struct Framing {
    pub filter: Filter,
    /// What a `reset` frame tells the client to do (the two routes recover differently).
    pub reset: &'static str,
}

/// What a stream opens with: the reconnection delay for `EventSource`.
pub(super) const RETRY: &str = "retry: 2000\n\n";
/// A heartbeat comment, sent every `DSH_SSE_HEARTBEAT_MS`.
pub(super) const HEARTBEAT: &str = ": heartbeat\n\n";

fn frame(id: Option<&str>, event: &str, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + event.len() + 32);
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(id);
        out.push('\n');
    }
    out.push_str("event: ");
    out.push_str(event);
    out.push_str("\ndata: ");
    out.push_str(data);
    out.push_str("\n\n");
    Bytes::from(out)
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string(value).map_err(|e| e.to_string())
}

impl Framing {
    /// The frame for `item` of session `sid`, or `None` when the filter drops it. A frame that
    /// carries an event id gets the `id:` line `cursor(id)` makes.
    pub(super) fn encode(
        &self,
        sid: &SessionId,
        item: &Item,
        cursor: impl FnOnce(EventId) -> String,
    ) -> Result<Option<Bytes>, String> {
        Ok(match item {
            // Serialized once per replica, however many subscribers send it.
            Item::Event(e) => match self.filter.passes(e.kind.type_name(), e.agent.as_str()) {
                true => Some(frame(Some(&cursor(e.id)), e.kind.type_name(), e.json()?)),
                false => None,
            },
            Item::PlanView { id, agent, view } => {
                self.derived(PLAN_VIEW, sid, agent, *id, view, cursor)?
            }
            Item::PlanRevision { id, agent, change } => {
                self.derived(PLAN_REVISION, sid, agent, Some(*id), change, cursor)?
            }
            // The producer wrote the whole frame; the live path never parses it.
            Item::Ephemeral(msg) => self
                .filter
                .passes(&msg.kind, msg.agent.as_str())
                .then(|| frame(None, &msg.kind, &msg.body)),
            Item::Reset { first_available } => {
                let data = json(&Frame {
                    kind: RESET,
                    session: sid,
                    agent: None,
                    id: None,
                    data: StreamReset {
                        reason: ResetReason::Trimmed,
                        message: self.reset,
                        first_available: *first_available,
                    },
                })?;
                Some(frame(None, RESET, &data))
            }
            // Sent whatever the filter: it ends the session's stream, and a reconnect naming
            // the session gets 404.
            Item::Deleted => Some(deleted(sid)?),
        })
    }
}

impl Framing {
    /// The frame of an agent's derived item (`plan/view`, `plan/revision`), unless the filter
    /// drops it; with an `id:` line when it names the event that made it.
    fn derived<D: serde::Serialize>(
        &self,
        kind: &str,
        sid: &SessionId,
        agent: &AgentId,
        id: Option<EventId>,
        data: D,
        cursor: impl FnOnce(EventId) -> String,
    ) -> Result<Option<Bytes>, String> {
        if !self.filter.passes(kind, agent.as_str()) {
            return Ok(None);
        }
        let data = json(&Frame {
            kind,
            session: sid,
            agent: Some(agent),
            id,
            data,
        })?;
        Ok(Some(frame(id.map(cursor).as_deref(), kind, &data)))
    }
}

/// The `session/deleted` frame of `sid`.
pub(super) fn deleted(sid: &SessionId) -> Result<Bytes, String> {
    let data = json(&Frame {
        kind: SESSION_DELETED,
        session: sid,
        agent: None,
        id: None,
        data: SessionDeleted::NOW,
    })?;
    Ok(frame(None, SESSION_DELETED, &data))
}

/// The frames one response sends.
pub(super) type Frames = Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

/// One open event stream: frames, heartbeats and every reason to end.
pub(super) struct Sse {
    /// What the stream follows, for logs.
    label: String,
    frames: Frames,
    /// Frames sent, for `max_events` (heartbeats do not count).
    sent: u64,
    max_events: Option<u64>,
    deadline: Option<Instant>,
    heartbeat: tokio::time::Interval,
    shutdown: tokio::sync::watch::Receiver<bool>,
    done: bool,
    /// This stream's place in its tenant's `max_streams`, released when the stream is dropped.
    _permit: StreamPermit,
    /// The credential the stream was opened with, checked again every [`auth::KEY_CACHE`]:
    /// revoking a key ends its streams (and its tokens' streams) as it ends its requests.
    credential: Option<(Arc<auth::Auth>, Caller, tokio::time::Interval)>,
}

impl Sse {
    pub(super) fn new(
        state: &AppState,
        caller: &Caller,
        query: &EventsQuery,
        permit: StreamPermit,
        label: String,
        frames: Frames,
    ) -> Self {
        let heartbeat = state.sse_heartbeat;
        Self {
            label,
            frames,
            sent: 0,
            max_events: query.max_events,
            deadline: earliest(
                query
                    .max_ms
                    .map(|ms| Instant::now() + Duration::from_millis(ms)),
                token_expiry(caller),
            ),
            heartbeat: tokio::time::interval_at(Instant::now() + heartbeat, heartbeat),
            shutdown: state.shutdown.clone(),
            done: false,
            _permit: permit,
            credential: (!matches!(caller, Caller::Open)).then(|| {
                let every =
                    tokio::time::interval_at(Instant::now() + auth::KEY_CACHE, auth::KEY_CACHE);
                (state.auth.clone(), caller.clone(), every)
            }),
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if self.done || self.max_events.is_some_and(|m| self.sent >= m) {
                return None;
            }
            let deadline = self.deadline;
            tokio::select! {
                frame = self.frames.next() => match frame {
                    Some(Ok(bytes)) => {
                        self.sent += 1;
                        return Some(bytes);
                    }
                    Some(Err(e)) => {
                        tracing::error!(stream = %self.label, error = %e, "an SSE frame could not be serialized; ending the stream");
                        self.done = true;
                    }
                    None => self.done = true,
                },
                _ = self.heartbeat.tick() => return Some(Bytes::from_static(HEARTBEAT.as_bytes())),
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => self.done = true,
                _ = self.shutdown.changed() => {
                    // The last frame: reconnect soon (spread over a second, so a replica's
                    // clients do not all land on the next one at once) with Last-Event-ID.
                    self.done = true;
                    return Some(Bytes::from(format!(
                        "retry: {}\n: this replica is stopping; reconnect with Last-Event-ID\n\n",
                        reconnect_after_ms(&self.label)
                    )));
                }
                _ = async {
                    match self.credential.as_mut() {
                        Some((_, _, every)) => { every.tick().await; }
                        None => std::future::pending().await,
                    }
                } => {
                    if let Some((auth, caller, _)) = &self.credential {
                        // An outage is not a revocation: keep streaming until we know.
                        if auth.still_valid(caller).await == Some(false) {
                            self.done = true;
                        }
                    }
                }
            }
        }
    }

    /// The `text/event-stream` response: `retry: 2000`, then the frames.
    pub(super) fn response(self) -> HttpResponse {
        let retry = futures_util::stream::once(async { Ok(Bytes::from_static(RETRY.as_bytes())) });
        let body = retry.chain(futures_util::stream::unfold(self, |mut sse| async move {
            sse.next()
                .await
                .map(|b| (Ok::<_, actix_web::Error>(b), sse))
        }));
        HttpResponse::Ok()
            .insert_header(("Content-Type", "text/event-stream"))
            .insert_header(("Cache-Control", "no-cache"))
            .insert_header(("X-Accel-Buffering", "no"))
            .streaming(body)
    }
}

/// How long a client of a stopping replica waits before it reconnects: 250-1000 ms, spread by
/// stream and time so reconnects do not arrive all at once.
fn reconnect_after_ms(label: &str) -> u64 {
    use std::hash::BuildHasher;
    250 + std::collections::hash_map::RandomState::new().hash_one(label) % 751
}

/// When a stream opened with a browser token must end: at the token's expiry (the client
/// reconnects with a fresh token; a stream never outlives its credential).
fn token_expiry(caller: &Caller) -> Option<Instant> {
    let Caller::Token { claims, .. } = caller else {
        return None;
    };
    let now = jsonwebtoken::get_current_timestamp();
    Some(Instant::now() + Duration::from_secs(claims.exp.saturating_sub(now)))
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
