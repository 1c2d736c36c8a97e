//! Lists: the caller's sessions (cursor pages, newest first) and a session's agents.

use actix_web::{get, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{session_id, ApiError, Code, State};
use crate::auth::{self, Caller};
use crate::domain::session::AgentView;
use crate::service::SessionSummary;

/// Items a page holds unless `limit` says otherwise, and the most it may hold.
const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SessionsQuery {
    /// Sessions per page, 1-200 (default 50).
    #[param(minimum = 1, maximum = 200, example = 50)]
    pub limit: Option<u32>,
    /// Opaque: the `next_cursor` of the previous page. Omit it for the newest sessions.
    pub cursor: Option<String>,
}

/// A page of sessions, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionSummary>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "s18d2f4c1a9b3e07")]
    pub next_cursor: Option<String>,
    /// True when older sessions may follow (a page can hold fewer than `limit` sessions even
    /// then, when deleted ones were skipped).
    pub has_more: bool,
}

/// The size of a page asked for with `limit`: 1-200, 50 unless given.
pub(super) fn page_limit(limit: Option<u32>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::new(
            Code::InvalidQuery,
            format!("limit must be 1-{MAX_PAGE}, got {limit}"),
        ));
    }
    Ok(limit as usize)
}

/// A cursor as clients see it: the creation order to list before, in hex behind a tag.
fn cursor(order: u64) -> String {
    format!("s{order:x}")
}

fn parse_cursor(raw: &str) -> Result<u64, ApiError> {
    raw.strip_prefix('s')
        .filter(|hex| !hex.is_empty() && hex.len() <= 16)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidQuery,
                format!(
                    "`{}` is not a cursor of this list: pass the `next_cursor` of a page as it \
                     came",
                    raw.chars().take(40).collect::<String>()
                ),
            )
        })
}

/// The caller's sessions, newest first, a page at a time.
///
/// An API key lists its tenant's sessions; an open server (no credentials) lists every
/// session. A browser token is scoped to one session, so it gets 403 `insufficient-scope`
/// here (it already knows its session: `GET /v1/sessions/{sid}`). Deleted and expired sessions
/// are not listed; sessions created while you page appear on a new first page, never in the
/// middle: no page repeats or skips a session.
#[utoipa::path(
    tag = "sessions",
    operation_id = "listSessions",
    params(SessionsQuery),
    responses(
        (status = 200, description = "A page of the tenant's sessions, newest first", body = SessionList),
    )
)]
#[get("/v1/sessions")]
pub async fn list_sessions(
    state: State,
    caller: Caller,
    query: web::Query<SessionsQuery>,
) -> Result<web::Json<SessionList>, ApiError> {
    state.require_key(&caller)?;
    let limit = page_limit(query.limit)?;
    let before = query.cursor.as_deref().map(parse_cursor).transpose()?;
    let page = state.sessions.list(caller.tenant(), before, limit).await?;
    Ok(web::Json(SessionList {
        sessions: page.sessions,
        has_more: page.resume.is_some(),
        next_cursor: page.resume.map(cursor),
    }))
}

/// The agents of a session.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentView>,
}

/// The agents of a session.
///
/// The session's agents, sorted by id: owner, status (`idle`, `running`, `waiting` on a
/// question), plan state and open turn of each, as `GET …/agents/{aid}` shows one.
#[utoipa::path(
    tag = "sessions",
    operation_id = "listAgents",
    params(("sid" = String, Path, description = "Session id")),
    responses(
        (status = 200, description = "The session's agents, by id", body = AgentList),
    )
)]
#[get("/v1/sessions/{sid}/agents")]
pub async fn list_agents(
    state: State,
    caller: Caller,
    path: web::Path<String>,
) -> Result<web::Json<AgentList>, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::READ).await?;
    let session = state.sessions.state(&sid).await?;
    Ok(web::Json(AgentList {
        agents: session.view(&sid).agents,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_and_anything_else_is_refused() {
        for order in [0, 1, 1_770_000_000_000_123, u64::MAX] {
            assert_eq!(parse_cursor(&cursor(order)).unwrap(), order);
        }
        for bad in ["", "s", "18d2", "sxyz", "s-1", "s11111111111111111", "S1f"] {
            assert_eq!(
                parse_cursor(bad).unwrap_err().code,
                Code::InvalidQuery,
                "{bad}"
            );
        }
    }
}
