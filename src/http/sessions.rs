//! Sessions, agents and the raw log.

use crate::auth::{self, Caller};
use actix_web::{delete, get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::OptionalJson;
use super::{ids, session_id, ApiError, Code, State};
use crate::domain::session::{AgentView, SessionView};
use crate::domain::{AgentId, EventId, Recorded};

/// Body of `POST /v1/sessions` (may be empty).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {}

/// Create a session with its root agent `main` (plan mode inactive).
///
/// The session is kept for `DSH_RETENTION` (default 30 days) after its last write, then it
/// expires; reads do not extend it.
#[utoipa::path(
    tag = "sessions",
    operation_id = "createSession",
    request_body(content = Option<CreateSession>, description = "May be empty", example = json!({})),
    responses(
        (status = 201, description = "Created; `Location` names the session", body = SessionView, headers(("Location" = String, description = "The new session's URL"))),
    )
)]
#[post("/v1/sessions")]
pub async fn create_session(
    state: State,
    caller: Caller,
    body: OptionalJson<CreateSession>,
) -> Result<HttpResponse, ApiError> {
    let OptionalJson(CreateSession {}) = body;
    state.require_key(&caller)?;
    let terms = state.session_terms(caller.tenant().cloned()).await?;
    let (sid, session) = state.sessions.create(None, None, terms).await?;
    Ok(HttpResponse::Created()
        .insert_header(("Location", format!("/v1/sessions/{sid}")))
        .json(session.view(&sid)))
}

/// The session folded from its log.
///
/// Its agents with their status and plan state, its parent when forked, and the last event id
/// (resume the event stream after it).
#[utoipa::path(
    tag = "sessions",
    operation_id = "getSession",
    params(("sid" = String, Path, description = "Session id")),
    responses(
        (status = 200, description = "The folded session", body = SessionView),
    )
)]
#[get("/v1/sessions/{sid}")]
pub async fn get_session(
    state: State,
    caller: Caller,
    path: web::Path<String>,
) -> Result<web::Json<SessionView>, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::READ).await?;
    let session = state.sessions.state(&sid).await?;
    Ok(web::Json(session.view(&sid)))
}

/// Delete a session: its log and everything kept for it, on every replica at once.
///
/// Afterwards every route of the session answers 404 `session-not-found`, a second delete too.
/// Open event streams of the session (on any replica) send a last `session/deleted` event and
/// end; a turn running on it stops without recording anything more.
#[utoipa::path(
    tag = "sessions",
    operation_id = "deleteSession",
    params(("sid" = String, Path, description = "Session id")),
    responses(
        (status = 204, description = "Deleted, on every replica"),
    )
)]
#[delete("/v1/sessions/{sid}")]
pub async fn delete_session(
    state: State,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::MANAGE).await?;
    state.sessions.delete(&sid).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Body of `POST /v1/sessions/{sid}/agents` (may be empty).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnAgent {
    /// The owning agent, e.g. `main`. A child owned by another agent cannot open plan reviews.
    #[schema(value_type = Option<String>, example = "main")]
    pub owner: Option<AgentId>,
}

/// Spawn an agent.
///
/// New agents start with plan mode inactive. A child owned by another agent cannot open plan
/// reviews. A session has at most `DSH_MAX_AGENTS` agents (409 `agent-limit` past it).
#[utoipa::path(
    tag = "sessions",
    operation_id = "spawnAgent",
    params(("sid" = String, Path, description = "Session id")),
    request_body(content = Option<SpawnAgent>, description = "May be empty", example = json!({"owner": "main"})),
    responses(
        (status = 201, description = "Spawned; `Location` names the agent", body = AgentView, headers(("Location" = String, description = "The new agent's URL"))),
    )
)]
#[post("/v1/sessions/{sid}/agents")]
pub async fn spawn_agent(
    state: State,
    caller: Caller,
    path: web::Path<String>,
    body: OptionalJson<SpawnAgent>,
) -> Result<HttpResponse, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::MANAGE).await?;
    let owner = body.0.owner;
    let done = state
        .sessions
        .decide(&sid, {
            let max = state.max_agents;
            move |s| s.decide_spawn(owner.clone(), max)
        })
        .await?;
    let view = done
        .state
        .agent_view(&done.value)
        .map_err(crate::service::ServiceError::from)?;
    Ok(HttpResponse::Created()
        .insert_header((
            "Location",
            format!("/v1/sessions/{sid}/agents/{}", done.value),
        ))
        .json(view))
}

/// One agent.
///
/// Its owner, whether a turn is running or waiting on a question, and its plan state.
#[utoipa::path(
    tag = "sessions",
    operation_id = "getAgent",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id")),
    responses(
        (status = 200, description = "The agent", body = AgentView),
    )
)]
#[get("/v1/sessions/{sid}/agents/{aid}")]
pub async fn get_agent(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<web::Json<AgentView>, ApiError> {
    let (sid, aid) = ids(&path)?;
    state.guard(&caller, &sid, Some(&aid), auth::READ).await?;
    let session = state.sessions.state(&sid).await?;
    Ok(web::Json(
        session
            .agent_view(&aid)
            .map_err(crate::service::ServiceError::from)?,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// Return events after this event id (exclusive); omit to start at the beginning. Past the
    /// session's last event: 400 `cursor-out-of-range`.
    #[param(example = "0-0")]
    pub after: Option<String>,
    /// Page size, 1-1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// A page of the session log.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LogPage {
    pub events: Vec<Recorded>,
    /// Pass as `after` to read on: the last event's id in this page, or the given `after`.
    #[schema(value_type = String, example = "100-0")]
    pub cursor: EventId,
    /// True when the page is full, so more events may follow right away.
    pub has_more: bool,
    /// Present when events after `after` were trimmed by a compaction: the first id the log
    /// still holds (this page starts there). The session's state is in its
    /// `session/compacted` snapshot; re-read the session rather than rebuild it from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "41-0")]
    pub trimmed_before: Option<EventId>,
}

/// Read the session log in order, a page at a time.
///
/// Event ids are `<seq>-0`, each session counting its events from `1-0`: order them by `seq`
/// as a number, never as strings (`10-0` follows `9-0`). An `after` past the last event gets
/// 400 `cursor-out-of-range`. A page that starts where a compaction trimmed the log says so
/// with `trimmed_before` (the first id still there) instead of skipping silently.
#[utoipa::path(
    tag = "sessions",
    operation_id = "readLog",
    params(("sid" = String, Path, description = "Session id"), LogQuery),
    responses(
        (status = 200, description = "A page of events, oldest first", body = LogPage),
    )
)]
#[get("/v1/sessions/{sid}/log")]
pub async fn read_log(
    state: State,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<LogQuery>,
) -> Result<web::Json<LogPage>, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::READ).await?;
    let after = match &query.after {
        Some(a) => EventId::parse(a).map_err(|e| ApiError::new(Code::InvalidQuery, e))?,
        None => EventId(0),
    };
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::new(
            Code::InvalidQuery,
            format!("limit must be 1-1000, got {limit}"),
        ));
    }
    let events = state
        .sessions
        .page(&sid, after.seq(), limit as usize)
        .await?;
    if events.is_empty() && after.seq() > 0 {
        // Nothing after it: the end of the log, or past it.
        let head = state.sessions.state(&sid).await?;
        super::events::within_log(&sid, after, head.seq)?;
    }
    let trimmed_before = events
        .first()
        .filter(|first| first.seq() > after.seq() + 1)
        .map(|first| first.id);
    let cursor = events.last().map(|e| e.id).unwrap_or(after);
    let has_more = events.len() == limit as usize;
    Ok(web::Json(LogPage {
        events,
        cursor,
        has_more,
        trimmed_before,
    }))
}

/// Body of `POST /v1/sessions/{sid}/fork` (may be empty).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkSession {
    /// The parent's event to fork at (inclusive); default: its last event.
    #[schema(value_type = Option<String>, example = "12-0")]
    pub at: Option<String>,
}

/// Fork a session at one of its events.
///
/// The new session's agents inherit their recorded plan state and history; no open turn,
/// question or pending choice carries over; the parent is unchanged.
#[utoipa::path(
    tag = "sessions",
    operation_id = "forkSession",
    params(("sid" = String, Path, description = "Session id")),
    request_body(content = Option<ForkSession>, description = "May be empty", example = json!({"at": "12-0"})),
    responses(
        (status = 201, description = "Forked; `Location` names the new session", body = SessionView, headers(("Location" = String, description = "The new session's URL"))),
    )
)]
#[post("/v1/sessions/{sid}/fork")]
pub async fn fork_session(
    state: State,
    caller: Caller,
    path: web::Path<String>,
    body: OptionalJson<ForkSession>,
) -> Result<HttpResponse, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::MANAGE).await?;
    let at = match body.0.at.as_deref() {
        Some(raw) => Some(EventId::parse(raw).map_err(|e| ApiError::new(Code::InvalidBody, e))?),
        None => None,
    };
    let (child, session) = state.engine.fork(&sid, at).await?;
    Ok(HttpResponse::Created()
        .insert_header(("Location", format!("/v1/sessions/{child}")))
        .json(session.view(&child)))
}

/// Compact a session.
///
/// The provider summarizes each agent's history and a snapshot replaces the events before it
/// (older entries may be trimmed). Refused with 409 while a turn runs.
#[utoipa::path(
    tag = "sessions",
    operation_id = "compactSession",
    params(("sid" = String, Path, description = "Session id")),
    responses(
        (status = 200, description = "The session after compaction", body = SessionView),
    )
)]
#[post("/v1/sessions/{sid}/compact")]
pub async fn compact_session(
    state: State,
    caller: Caller,
    path: web::Path<String>,
) -> Result<web::Json<SessionView>, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::MANAGE).await?;
    let session = state.engine.compact(&sid, state.trim_on_compact).await?;
    Ok(web::Json(session.view(&sid)))
}
