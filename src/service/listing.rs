//! A tenant's sessions, newest first, a page at a time.
//!
//! The list is the tenant's session quota read in creation order (see
//! [`crate::store::LimitStore::list_sessions`]): a session is listed exactly while it counts,
//! from its admission until it is deleted or its retention runs out, so list and quota never
//! disagree and no second index can drift. Each listed session is then summarized from its
//! fold (the per-replica cache makes that cheap for sessions in use).
//!
//! The cursor is a position in the creation order, which only grows: sessions created while a
//! client pages are newer than its first page, so no page repeats or skips one.

use futures_util::StreamExt;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ServiceError, Sessions};
use crate::domain::event::ForkOrigin;
use crate::domain::questions::QuestionStatus;
use crate::domain::{AgentId, EventId, SessionId, SessionState, TenantId};
use crate::limits::tenant_name;
use crate::store::StoreError;

/// Sessions summarized at once while a page is built.
const FOLDS_AT_ONCE: usize = 8;

/// A session as a list shows it: enough to render a row without fetching it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct SessionSummary {
    #[schema(value_type = String, example = "5f0c3e9a2b7d4c1e8f6a0b3c9d2e7f41")]
    pub id: SessionId,
    #[serde(with = "crate::domain::event::rfc3339_ms")]
    #[schema(value_type = String, example = "2026-12-02T10:23:53.123Z")]
    pub created_at: u64,
    /// Set when this session was forked from another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<ForkOrigin>,
    /// Its agents' ids, sorted; `GET …/agents` has their status and plan.
    #[schema(value_type = Vec<String>, example = json!(["main"]))]
    pub agents: Vec<AgentId>,
    /// Whether a turn is open on any of its agents.
    pub running: bool,
    /// Questions waiting for an answer (e.g. a plan review).
    pub open_questions: usize,
    /// The last event's id.
    #[schema(value_type = String, example = "7-0")]
    pub last_event_id: EventId,
    /// When it expires unless written again: its retention after its last write (on Redis,
    /// up to a second earlier: a session written many times a second has its TTLs refreshed
    /// by the first write of each second). Absent for a session kept until deleted.
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "crate::domain::event::rfc3339_ms_opt"
    )]
    #[schema(value_type = Option<String>, example = "2027-01-01T10:23:53.123Z")]
    pub expires_at: Option<u64>,
}

impl SessionSummary {
    pub fn of(id: SessionId, s: &SessionState) -> Self {
        Self {
            id,
            created_at: s.created_at,
            parent: s.parent.clone(),
            agents: s.agents.keys().cloned().collect(),
            running: s.agents.values().any(|a| a.turn.is_some()),
            open_questions: s
                .questions
                .values()
                .filter(|q| q.state == QuestionStatus::Open)
                .count(),
            last_event_id: EventId(s.seq),
            expires_at: (s.terms.retention_ms > 0)
                .then(|| s.tail_ts.saturating_add(s.terms.retention_ms)),
        }
    }
}

/// A page of sessions and where the next one starts.
pub struct SessionsPage {
    pub sessions: Vec<SessionSummary>,
    /// The creation order to list before for the next page, when there may be one.
    pub resume: Option<u64>,
}

impl Sessions {
    /// Up to `limit` of the tenant's live sessions created before `before` (a creation order
    /// from an earlier page), newest first. Sessions without a quota (no limits wired) are
    /// never counted, so never listed.
    pub async fn list(
        &self,
        tenant: Option<&TenantId>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<SessionsPage, ServiceError> {
        let Some(limits) = &self.limits else {
            return Ok(SessionsPage {
                sessions: Vec::new(),
                resume: None,
            });
        };
        let page = limits
            .store()
            .list_sessions(tenant_name(tenant), before, limit)
            .await?;
        let folds = page.sessions.into_iter().map(|listed| async move {
            let Ok(sid) = SessionId::parse(&listed.id) else {
                tracing::warn!(member = %listed.id, "a tenant's session list holds a malformed id");
                return Ok(None);
            };
            match self.state(&sid).await {
                Ok(state) => Ok(Some(SessionSummary::of(sid, &state))),
                // Deleted or expired since the index was read: no longer a live session.
                Err(ServiceError::SessionNotFound(_)) => Ok(None),
                // One unreadable log must not hide the tenant's other sessions.
                Err(e @ (ServiceError::Corrupt(_) | ServiceError::Store(StoreError::Corrupt { .. }))) => {
                    tracing::error!(session = %sid, error = %e, "a listed session cannot be folded; left out of the list");
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        });
        let summaries: Vec<Result<Option<SessionSummary>, ServiceError>> =
            futures_util::stream::iter(folds)
                .buffered(FOLDS_AT_ONCE)
                .collect()
                .await;
        let mut sessions = Vec::with_capacity(summaries.len());
        for s in summaries {
            sessions.extend(s?);
        }
        Ok(SessionsPage {
            sessions,
            resume: page.resume,
        })
    }
}
