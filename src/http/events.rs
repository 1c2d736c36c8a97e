//! Server-Sent Events: the wire form of a [`LiveStream`]. Every committed event of a session
//! (`id:` = event id, `event:` = type, `data:` = the event with `committed_at`), a derived
//! `plan/view` whenever an agent's plan view changes, assistant deltas as ephemeral events
//! without an id, a `reset` when the cursor is older than the trimmed log, and a final
//! `session/deleted` when the session is deleted.
//!
//! What is sent, and in which order, is the live stream's (cursor, gaps, catch-up, plan
//! views, stale deltas). This module owns the HTTP side: the cursor from `Last-Event-ID` (else
//! `?after=`), the `types`/`agent` filters, framing, heartbeat comments that keep proxies open,
//! `max_events` / `max_ms` that end the stream cleanly for load tools, and shutdown, which ends
//! it so clients reconnect elsewhere.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{get, web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use utoipa::IntoParams;

use super::{session_id, ApiError, Code, State};
use crate::auth::{self, Caller};
use crate::domain::{EventId, PlanView, SessionId};
use crate::limits::StreamPermit;
use crate::live::{Item, LiveStream};

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
    /// End the stream after this many frames (events, plan views, deltas; not heartbeats), for
    /// load tools.
    pub max_events: Option<u64>,
    /// End the stream after this many milliseconds (for load tools).
    pub max_ms: Option<u64>,
    /// A browser token, for clients that cannot set `Authorization` (`EventSource`); read by
    /// the authentication layer, accepted on this route only.
    #[serde(rename = "access_token")]
    #[allow(dead_code)]
    pub access_token: Option<String>,
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

/// A `plan/view` frame's data.
#[derive(Serialize)]
struct ViewData<'a> {
    agent: &'a str,
    #[serde(flatten)]
    view: PlanView,
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

/// The frame for `item`, or `None` when the filter drops it.
fn encode(item: &Item, filter: &Filter) -> Result<Option<Bytes>, String> {
    Ok(match item {
        // Serialized once per replica, however many subscribers send it.
        Item::Event(e) => match filter.passes(e.kind.type_name(), e.agent.as_str()) {
            true => Some(frame(Some(e.id), e.kind.type_name(), e.json()?)),
            false => None,
        },
        Item::PlanView { id, agent, view } => filter
            .passes("plan/view", agent.as_str())
            .then(|| {
                serde_json::to_string(&ViewData {
                    agent: agent.as_str(),
                    view: *view,
                })
            })
            .transpose()
            .map_err(|e| e.to_string())?
            .map(|data| frame(*id, "plan/view", &data)),
        Item::Ephemeral(msg) => filter
            .passes(&msg.kind, msg.agent.as_str())
            .then(|| frame(None, &msg.kind, &msg.body)),
        Item::Reset { first_available } => {
            let data = serde_json::json!({
                "reason": "trimmed",
                "message": "events after your cursor were compacted away; re-read the session, then reconnect after its last_event_id",
                "first_available": first_available,
            });
            Some(frame(None, "reset", &data.to_string()))
        }
        // Sent whatever the filter: it ends the stream, and a reconnect would get 404.
        Item::Deleted => {
            let data = serde_json::json!({
                "reason": "deleted",
                "message": "the session was deleted; it no longer exists",
            });
            Some(frame(None, "session/deleted", &data.to_string()))
        }
    })
}

struct Sse {
    sid: SessionId,
    items: Pin<Box<dyn Stream<Item = Item> + Send>>,
    filter: Filter,
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
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if self.done || self.max_events.is_some_and(|m| self.sent >= m) {
                return None;
            }
            let deadline = self.deadline;
            tokio::select! {
                item = self.items.next() => match item {
                    Some(item) => match encode(&item, &self.filter) {
                        Ok(Some(bytes)) => {
                            self.sent += 1;
                            return Some(bytes);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::error!(session = %self.sid, error = %e, "an SSE frame could not be serialized; ending the stream");
                            self.done = true;
                        }
                    },
                    None => self.done = true,
                },
                _ = self.heartbeat.tick() => return Some(Bytes::from_static(b": heartbeat\n\n")),
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => self.done = true,
                _ = self.shutdown.changed() => self.done = true,
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
}

/// Subscribe to a session's events (Server-Sent Events).
///
/// When the session is deleted (`DELETE /v1/sessions/{sid}`, on any replica) the stream sends a
/// last `session/deleted` event (no `id`) and ends; a reconnect then gets 404
/// `session-not-found`.
#[utoipa::path(
    tag = "sessions",
    operation_id = "streamEvents",
    params(
        ("sid" = String, Path, description = "Session id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
        EventsQuery
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream` (bounded with `max_events`/`max_ms`)", content_type = "text/event-stream", body = String),
    )
)]
#[get("/v1/sessions/{sid}/events")]
pub async fn events(
    state: State,
    caller: Caller,
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::READ).await?;
    let header = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty());
    let cursor = header
        .or(query.after.as_deref())
        .map(EventId::parse)
        .transpose()
        .map_err(|e| ApiError::new(Code::InvalidQuery, e))?;
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
    // A cursor past the last event (e.g. a parent's id reused on its fork) would silently
    // swallow every event up to it.
    let head = state.sessions.state(&sid).await?;
    if let Some(c) = cursor.filter(|c| c.seq() > head.seq) {
        return Err(ApiError::new(
            Code::InvalidQuery,
            format!(
                "cursor `{c}` is past the last event of session `{sid}` (`{}`); event ids count \
                 each session's events from 1-0, so resume after an id this session gave you",
                EventId(head.seq)
            ),
        ));
    }
    let permit = state
        .limits
        .admit_stream(head.terms.tenant.as_ref())
        .await?;
    let live = LiveStream::open(
        &state.hub,
        &sid,
        cursor,
        state.composition.plan_mode.is_some(),
        state.sessions.state(&sid),
    )
    .await?;
    let heartbeat = state.sse_heartbeat;
    let sse = Sse {
        sid,
        items: Box::pin(live.into_stream()),
        filter,
        sent: 0,
        max_events: query.max_events,
        deadline: earliest(
            query
                .max_ms
                .map(|ms| Instant::now() + Duration::from_millis(ms)),
            token_expiry(&caller),
        ),
        heartbeat: tokio::time::interval_at(Instant::now() + heartbeat, heartbeat),
        shutdown: state.shutdown.clone(),
        done: false,
        _permit: permit,
        credential: (!matches!(caller, Caller::Open)).then(|| {
            let every = tokio::time::interval_at(Instant::now() + auth::KEY_CACHE, auth::KEY_CACHE);
            (state.auth.clone(), caller.clone(), every)
        }),
    };
    let retry = futures_util::stream::once(async { Ok(Bytes::from_static(b"retry: 2000\n\n")) });
    let body = retry.chain(futures_util::stream::unfold(sse, |mut sse| async move {
        sse.next()
            .await
            .map(|b| (Ok::<_, actix_web::Error>(b), sse))
    }));
    Ok(HttpResponse::Ok()
        .insert_header(("Content-Type", "text/event-stream"))
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
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
