//! One stream for many sessions: `GET /v1/events?sessions=a,b,…`, or every session of the
//! caller's tenant. Each session is followed by its own [`LiveStream`] (the same catch-up,
//! gap and resume rules as its own route), and the streams are merged as they yield, so each
//! session's frames stay in its order.
//!
//! The `id:` of a frame is a composite [`Cursor`]: every followed session's last event
//! delivered (or passed over by the filter), so `Last-Event-ID` resumes all of them at once.
//! A session whose cursor is older than its trimmed log gets a `reset` frame and goes on from
//! the first event it still has; a deleted one gets `session/deleted` and is dropped. If any
//! one session's stream ends otherwise (a slow client cut off, an unreadable log), the whole
//! stream ends and the client resumes with its cursor.
//!
//! A tenant-wide stream reads the tenant's live sessions (as its session quota counts them)
//! every [`PICK_UP_EVERY`] and follows new ones from their first event.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use actix_web::{get, web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::stream::{BoxStream, SelectAll};
use futures_util::StreamExt;

use super::cursor::Cursor;
use super::sse::{deleted, Filter, Framing, Sse};
use super::{presented_cursor, within_log, EventFrame, EventsQuery};
use crate::auth::{self, Caller};
use crate::domain::{EventId, SessionId, TenantId};
use crate::http::{session_id, ApiError, AppState, Code, State};
use crate::live::{Item, LiveStream};
use crate::service::ServiceError;

/// How often a tenant-wide stream looks for the tenant's new sessions.
pub const PICK_UP_EVERY: Duration = Duration::from_secs(2);

/// What a `reset` frame on this stream asks for: the session goes on.
pub(super) const RESET_MANY: &str =
    "events of this session after your cursor were compacted away; its \
                          frames go on from first_available: re-read the session and skip its \
                          events up to the last_event_id you read";

/// One session's item, tagged with the generation of the stream it came from; `None` when
/// that stream ended.
type Tagged = (SessionId, u64, Option<Item>);

/// Where the sessions of a stream come from.
enum Scope {
    /// The sessions the client listed.
    Listed,
    /// Every session of a tenant (`None`: the sessions of an open server), read again every
    /// [`PICK_UP_EVERY`].
    Tenant(Option<TenantId>, tokio::time::Interval),
}

/// The merged streams of many sessions, as frames.
struct Many {
    state: web::Data<AppState>,
    streams: SelectAll<BoxStream<'static, Tagged>>,
    /// Followed sessions and the generation of their current stream (a reset reopens one).
    following: HashMap<SessionId, u64>,
    generation: u64,
    cursor: Cursor,
    framing: Framing,
    scope: Scope,
    /// Frames to send before anything else (e.g. for sessions gone while the client was away).
    queue: VecDeque<Result<Bytes, String>>,
    ended: bool,
}

/// Opens `sid`'s live stream after `after`: subscribed before its head is read.
async fn open_live(
    state: &AppState,
    sid: &SessionId,
    after: Option<EventId>,
) -> Result<LiveStream, ServiceError> {
    LiveStream::open(
        &state.hub,
        sid,
        after,
        state.composition.plan_mode.is_some(),
        state.sessions.state(sid),
    )
    .await
}

impl Many {
    fn follow(&mut self, sid: SessionId, live: LiveStream) {
        self.generation += 1;
        let generation = self.generation;
        self.following.insert(sid.clone(), generation);
        let tag = sid.clone();
        let items = live
            .into_stream()
            .map(move |item| (tag.clone(), generation, Some(item)))
            .chain(futures_util::stream::once(async move {
                (sid, generation, None)
            }));
        self.streams.push(items.boxed());
    }

    fn forget(&mut self, sid: &SessionId) {
        self.following.remove(sid);
        self.cursor.remove(sid);
    }

    async fn next(&mut self) -> Option<Result<Bytes, String>> {
        loop {
            if let Some(frame) = self.queue.pop_front() {
                return Some(frame);
            }
            if self.ended {
                return None;
            }
            let tenant_wide = matches!(self.scope, Scope::Tenant(..));
            tokio::select! {
                tagged = self.streams.next(), if !self.streams.is_empty() => {
                    if let Some(tagged) = tagged {
                        self.take(tagged).await;
                    }
                }
                _ = async {
                    match &mut self.scope {
                        Scope::Tenant(_, every) => { every.tick().await; }
                        Scope::Listed => std::future::pending().await,
                    }
                }, if tenant_wide => self.pick_up().await,
                // A listed stream whose sessions were all deleted.
                else => self.ended = true,
            }
        }
    }

    /// Frames one session's item.
    async fn take(&mut self, (sid, generation, item): Tagged) {
        if self.following.get(&sid) != Some(&generation) {
            return; // a stream that was replaced (reset) or dropped (deleted)
        }
        let Some(item) = item else {
            tracing::info!(session = %sid, "a session's live stream ended; ending the merged stream, the client resumes with its cursor");
            self.ended = true;
            return;
        };
        if let Item::Event(e) = &item {
            self.cursor.set(&sid, e.seq());
        }
        let cursor = &self.cursor;
        let frame = self.framing.encode(&sid, &item, |_| cursor.to_string());
        if let Some(frame) = frame.transpose() {
            self.queue.push_back(frame);
        }
        match item {
            Item::Deleted => self.forget(&sid),
            Item::Reset { first_available } => {
                let after = EventId(first_available.seq().saturating_sub(1));
                self.cursor.set(&sid, after.seq());
                match open_live(&self.state, &sid, Some(after)).await {
                    Ok(live) => self.follow(sid, live),
                    Err(ServiceError::SessionNotFound(_)) => {
                        self.queue.push_back(deleted(&sid));
                        self.forget(&sid);
                    }
                    Err(e) => {
                        tracing::warn!(session = %sid, error = %e, "reopening a reset session failed; ending the merged stream");
                        self.ended = true;
                    }
                }
            }
            _ => {}
        }
    }

    /// Follows the tenant's sessions created since the last look, from their first event.
    async fn pick_up(&mut self) {
        let Scope::Tenant(tenant, _) = &self.scope else {
            return;
        };
        let max = self.state.stream_max_sessions;
        let sessions = match self
            .state
            .limits
            .tenant_sessions(tenant.as_ref(), max + 1)
            .await
        {
            Ok(sessions) => sessions,
            Err(e) => {
                tracing::warn!(error = %e, "reading the tenant's sessions failed; retrying at the next look");
                return;
            }
        };
        let new: Vec<_> = sessions
            .into_iter()
            .filter(|sid| !self.following.contains_key(sid))
            .collect();
        if self.following.len() + new.len() > max {
            tracing::info!(max, "the tenant has more sessions than one stream follows; ending the stream (a reconnect gets 422 too-many-sessions)");
            self.ended = true;
            return;
        }
        for sid in new {
            match open_live(&self.state, &sid, None).await {
                Ok(live) => self.follow(sid, live),
                // Created but not written yet, or deleted meanwhile: the next look decides.
                Err(ServiceError::SessionNotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(session = %sid, error = %e, "following a new session failed; retrying at the next look")
                }
            }
        }
    }
}

/// 422 `too-many-sessions` past `max`.
fn at_most(n: usize, max: usize, what: &str) -> Result<(), ApiError> {
    if n <= max {
        return Ok(());
    }
    Err(ApiError::new(
        Code::TooManySessions,
        format!(
            "{what} {n} sessions; one stream follows at most {max} (DSH_STREAM_MAX_SESSIONS): \
             list the sessions to follow in `sessions=`, or open another stream"
        ),
    ))
}

/// The sessions a request names: `sessions=a,b` (deduplicated, in order).
fn listed(raw: &str) -> Result<Vec<SessionId>, ApiError> {
    let mut out: Vec<SessionId> = Vec::new();
    for sid in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let sid = session_id(sid)?;
        if !out.contains(&sid) {
            out.push(sid);
        }
    }
    if out.is_empty() {
        return Err(ApiError::new(
            Code::InvalidQuery,
            "`sessions` names no session: list session ids separated by commas, or omit it to \
             follow every session of your tenant",
        ));
    }
    Ok(out)
}

/// What a stream follows.
struct Following {
    sessions: Vec<SessionId>,
    /// Sessions the cursor names that no longer exist: the stream starts by telling of them.
    gone: Vec<SessionId>,
    /// The 404 of the first listed session that does not exist (or is not the caller's): the
    /// answer when none of them does.
    missing: Option<ApiError>,
    scope: Scope,
}

/// The sessions `caller` may follow on one stream: `sessions=` (each must be theirs), a
/// token's own session, or every session of the caller's tenant (and those its cursor names
/// that are still theirs). Drops the cursor's other sessions and checks the rest are within
/// their logs.
async fn following(
    state: &AppState,
    caller: &Caller,
    listed_raw: Option<&str>,
    cursor: &mut Cursor,
) -> Result<Following, ApiError> {
    let max = state.stream_max_sessions;
    let token_session = match &caller {
        Caller::Token { claims, .. } => Some(claims.sid.clone()),
        _ => None,
    };
    let (sessions, scope) = match (listed_raw, token_session) {
        (Some(raw), _) => (listed(raw)?, Scope::Listed),
        // A browser token is scoped to one session: that one.
        (None, Some(sid)) => (vec![sid], Scope::Listed),
        (None, None) => {
            let tenant = caller.tenant().cloned();
            let sessions = state
                .limits
                .tenant_sessions(tenant.as_ref(), max + 1)
                .await
                .map_err(ServiceError::from)?;
            let every = tokio::time::interval_at(
                tokio::time::Instant::now() + PICK_UP_EVERY,
                PICK_UP_EVERY,
            );
            (sessions, Scope::Tenant(tenant, every))
        }
    };
    at_most(sessions.len(), max, "this stream would follow")?;
    let tenant_wide = matches!(scope, Scope::Tenant(..));
    let mut candidates = sessions.clone();
    if tenant_wide {
        // Sessions the client followed before: still the tenant's (the count may lag), or
        // gone while it was away, which it learns now.
        candidates.extend(cursor.sessions().filter(|s| !sessions.contains(s)).cloned());
        at_most(candidates.len(), max, "this stream and its cursor name")?;
    }
    let (mut follow, mut gone, mut missing) = (Vec::new(), Vec::new(), None);
    for sid in candidates {
        match state.guard(caller, &sid, None, auth::READ).await {
            Ok(()) => follow.push(sid),
            // Counted but not written yet (the next look decides), or gone; a listed one is
            // left out, unless none is left.
            Err(e) if e.code == Code::SessionNotFound => {
                if cursor.get(&sid).is_some() {
                    gone.push(sid);
                }
                missing.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    cursor.keep(&follow);
    let mut checked = Vec::with_capacity(follow.len());
    for sid in follow {
        if let Some(c) = cursor.get(&sid) {
            match state.sessions.state(&sid).await {
                Ok(head) => within_log(&sid, c, head.seq)?,
                // Counted for the tenant but not written yet (being created) or just deleted.
                Err(ServiceError::SessionNotFound(_)) if tenant_wide => {}
                Err(ServiceError::SessionNotFound(_)) => {
                    missing
                        .get_or_insert_with(|| ServiceError::SessionNotFound(sid.clone()).into());
                    cursor.remove(&sid);
                    gone.push(sid);
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        checked.push(sid);
    }
    Ok(Following {
        sessions: checked,
        gone,
        missing,
        scope,
    })
}

/// Subscribe to the events of many sessions on one connection (Server-Sent Events).
///
/// `sessions=a,b,…` names the sessions (a browser token: only its own); without it an API key
/// follows every session of its tenant, including sessions created while the stream is open
/// (picked up within 2 s, from their first event). At most `DSH_STREAM_MAX_SESSIONS` (100)
/// sessions per stream: past it 422 `too-many-sessions` (a tenant-wide stream whose tenant
/// grows past it ends; its reconnect gets the 422). It counts as one stream against the
/// tenant's `max-streams`.
///
/// Frames are those of `GET /v1/sessions/{sid}/events`, each naming its `session`, in each
/// session's order. The `id:` is a composite cursor: `<sid>:<seq>` of every followed session's
/// last event, joined by `,` (e.g. `3f9c…:12,7ab0…:4`); send it back as `Last-Event-ID` (or
/// `?after=`) to resume every session with no gap and no duplicate; a session it does not name
/// starts from its first event. An entry past its session's last event gets 400
/// `cursor-out-of-range`. A session whose cursor is older than its trimmed log gets a `reset`
/// frame and its frames go on from `first_available` (re-read that session and skip its
/// events up to the `last_event_id` you read). A deleted session gets `session/deleted` and is
/// dropped from the stream (and from the cursor). On connect, a listed session that does not
/// exist (or is not yours) is left out of the stream; if the cursor names it (it was deleted
/// while you were away) the stream starts with its `session/deleted`. When none of the listed
/// sessions exists: 404 `session-not-found`. Sessions named by the cursor that no longer
/// exist get `session/deleted` at the start of a tenant-wide stream too.
#[utoipa::path(
    tag = "sessions",
    operation_id = "streamManyEvents",
    params(
        ("sessions" = Option<String>, Query, description = "Comma-separated session ids to follow (at most `DSH_STREAM_MAX_SESSIONS`, default 100); omit to follow every session of your tenant (API key)"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this composite cursor (`<sid>:<seq>,…`, as the last frame's `id:` said)"),
        EventsQuery
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream` (bounded with `max_events`/`max_ms`). Each frame is `id: <composite cursor>` (frames without an event id have no `id:` line), `event: <type>`, `data: <one line of JSON>` valid against `EventFrame` (its `session` says which session), then a blank line; lines starting with `:` are heartbeats.", content_type = "text/event-stream", body = EventFrame),
    )
)]
#[get("/v1/events")]
pub async fn many_events(
    state: State,
    caller: Caller,
    req: HttpRequest,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    state.refuse_if_draining()?;
    let max = state.stream_max_sessions;
    let mut cursor = presented_cursor(&req, &query)
        .map(|raw| Cursor::parse(raw, max))
        .transpose()
        .map_err(|e| ApiError::new(Code::InvalidQuery, e))?
        .unwrap_or_default();
    let Following {
        sessions: follow,
        gone,
        mut missing,
        scope,
    } = following(&state, &caller, query.sessions.as_deref(), &mut cursor).await?;
    let listed = matches!(scope, Scope::Listed);
    if let (true, true, Some(e)) = (listed, follow.is_empty(), missing.take()) {
        return Err(e);
    }
    let permit = state.limits.admit_stream(caller.tenant()).await?;
    let mut many = Many {
        state: state.clone(),
        streams: SelectAll::new(),
        following: HashMap::new(),
        generation: 0,
        cursor,
        framing: Framing {
            filter: Filter::new(&query),
            reset: RESET_MANY,
        },
        scope,
        queue: gone.iter().map(deleted).collect(),
        ended: false,
    };
    let opened = futures_util::future::join_all(follow.iter().map(|sid| {
        let after = many.cursor.get(sid);
        let state = &state;
        async move { (sid, open_live(state, sid, after).await) }
    }))
    .await;
    for (sid, live) in opened {
        match live {
            Ok(live) => many.follow(sid.clone(), live),
            Err(ServiceError::SessionNotFound(_)) if !listed => {}
            // Deleted since it was checked: told of if the client followed it, else left out.
            Err(ServiceError::SessionNotFound(gone)) => {
                if many.cursor.get(&gone).is_some() {
                    many.queue.push_back(deleted(&gone));
                    many.cursor.remove(&gone);
                }
                missing.get_or_insert_with(|| ServiceError::SessionNotFound(gone).into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let (true, true, Some(e)) = (listed, many.following.is_empty(), missing) {
        return Err(e);
    }
    let label = format!("{} sessions", many.following.len());
    let frames = futures_util::stream::unfold(many, |mut many| async move {
        many.next().await.map(|frame| (frame, many))
    });
    Ok(Sse::new(&state, &caller, &query, permit, label, Box::pin(frames)).response())
}
