//! Server-Sent Events: the wire form of [`LiveStream`]s. Every committed event of a session
//! (`id:` = event id, `event:` = type, `data:` = the event naming its session, with
//! `committed_at`), a derived `plan/view` whenever an agent's plan view changes, assistant
//! deltas as ephemeral frames without an id, a `reset` when the cursor is older than the
//! trimmed log, and a final `session/deleted` when the session is deleted. Every frame's data
//! has one envelope (`type`, `session`, `agent`, `id`, `data`; see
//! [`crate::domain::event::frames`]) and a schema in the OpenAPI document ([`schema`]).
//!
//! What is sent, and in which order, is the live stream's (cursor, gaps, catch-up, plan
//! views, stale deltas). This module owns the HTTP side: the cursor from `Last-Event-ID` (else
//! `?after=`) and its rules, the `types`/`agent` filters, framing, heartbeat comments that keep
//! proxies open, `max_events` / `max_ms` that end the stream cleanly for load tools, and
//! shutdown, which ends it so clients reconnect elsewhere. [`many`] merges the streams of many
//! sessions into one response.

use actix_web::{get, web, HttpRequest, HttpResponse};
use futures_util::StreamExt;
use serde::Deserialize;
use utoipa::IntoParams;

use super::{session_id, ApiError, Code, State};
use crate::auth::{self, Caller};
use crate::domain::{EventId, SessionId};
use crate::live::LiveStream;

mod cursor;
mod examples;
mod many;
pub mod schema;
mod sse;

pub use many::many_events;
pub use schema::EventFrame;
use sse::{Filter, Framing, Sse};

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Resume after this cursor (the `Last-Event-ID` header wins over it): an event id
    /// `<seq>-0` on a session's stream, a composite cursor on `GET /v1/events`. A cursor past
    /// the log's end gets 400 `cursor-out-of-range`.
    pub after: Option<String>,
    /// Comma-separated event types; `plan/*` matches a prefix. Includes `plan/view`,
    /// `plan/revision` and `assistant/delta`.
    pub types: Option<String>,
    /// Only events of this agent.
    pub agent: Option<String>,
    /// End the stream after this many frames (events, plan views, deltas; not heartbeats), for
    /// load tools.
    pub max_events: Option<u64>,
    /// End the stream after this many milliseconds (for load tools).
    pub max_ms: Option<u64>,
    /// A browser token, for clients that cannot set `Authorization` (`EventSource`); read by
    /// the authentication layer, accepted on the event routes only.
    #[serde(rename = "access_token")]
    #[allow(dead_code)]
    pub access_token: Option<String>,
    /// `GET /v1/events` only (documented there).
    #[param(ignore)]
    pub sessions: Option<String>,
}

/// The cursor a client resumes from: `Last-Event-ID`, else `?after=`.
fn presented_cursor<'a>(req: &'a HttpRequest, query: &'a EventsQuery) -> Option<&'a str> {
    req.headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .or(query.after.as_deref())
}

/// 400 `cursor-out-of-range` unless `cursor` is at most `head`, the session's last event. A
/// cursor past it (e.g. a parent's id reused on its fork) would silently swallow every event
/// up to it.
pub(crate) fn within_log(sid: &SessionId, cursor: EventId, head: u64) -> Result<(), ApiError> {
    if cursor.seq() <= head {
        return Ok(());
    }
    Err(ApiError::new(
        Code::CursorOutOfRange,
        format!(
            "cursor `{cursor}` is past the last event of session `{sid}` (`{}`); event ids count \
             each session's events from 1-0 (compare the number before `-0` numerically), so \
             resume after an id this session gave you",
            EventId(head)
        ),
    ))
}

/// What a single session's `reset` frame asks for.
pub(super) const RESET_ONE: &str =
    "events after your cursor were compacted away; re-read the session, then \
                         reconnect after its last_event_id";

/// Subscribe to a session's events (Server-Sent Events).
///
/// Frames: `id: <event id>` (only on frames that carry one), `event: <type>`, `data: <JSON>`
/// (schema `EventFrame`: `type` equals the `event:` line, then `session`, `agent`, `id` and
/// the payload in `data`). The stream opens with `retry: 2000` and the `plan/view` of every
/// agent, and sends `: heartbeat` comments. Event ids are `<seq>-0`: order them by `seq`
/// numerically, never as strings (`"10-0"` follows `"9-0"`).
///
/// Resume with `Last-Event-ID` (or `?after=`): every event after it exactly once. A cursor
/// past the session's last event gets 400 `cursor-out-of-range`; one older than a
/// compaction's trimmed log gets a `reset` frame and the stream ends (re-read the session,
/// reconnect after its `last_event_id`). When the session is deleted (`DELETE
/// /v1/sessions/{sid}`, on any replica) the stream sends a last `session/deleted` frame (no
/// `id`) and ends; a reconnect then gets 404 `session-not-found`.
#[utoipa::path(
    tag = "sessions",
    operation_id = "streamEvents",
    params(
        ("sid" = String, Path, description = "Session id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (`<seq>-0`)"),
        EventsQuery
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream` (bounded with `max_events`/`max_ms`). Each frame is `id: <event id>` (frames without an event id have no `id:` line), `event: <type>`, `data: <one line of JSON>` valid against `EventFrame`, then a blank line; lines starting with `:` are heartbeats.", content_type = "text/event-stream", body = EventFrame),
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
    state.refuse_if_draining()?;
    let sid = session_id(&path)?;
    if query.sessions.is_some() {
        return Err(ApiError::new(
            Code::InvalidQuery,
            "`sessions` belongs to GET /v1/events; this stream follows the session in its path",
        ));
    }
    state.guard(&caller, &sid, None, auth::READ).await?;
    let cursor = presented_cursor(&req, &query)
        .map(EventId::parse)
        .transpose()
        .map_err(|e| ApiError::new(Code::InvalidQuery, e))?;
    let head = state.sessions.state(&sid).await?;
    if let Some(c) = cursor {
        within_log(&sid, c, head.seq)?;
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
    let framing = Framing {
        filter: Filter::new(&query),
        reset: RESET_ONE,
    };
    let label = sid.to_string();
    let frames = live.into_stream().filter_map(move |item| {
        let frame = framing.encode(&sid, &item, |id| id.to_string());
        std::future::ready(frame.transpose())
    });
    Ok(Sse::new(&state, &caller, &query, permit, label, Box::pin(frames)).response())
}
