//! Minting browser tokens: the integrator's backend (holding an API key) asks for a token
//! scoped to one session and hands it to its frontend.

use std::time::Duration;

use actix_web::{post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{session_id, ApiError, Code, State};
use crate::auth::{Action, Caller, Claims, Scope, MAX_TTL_SECS};
use crate::domain::{AgentId, SessionId, TenantId};

const DEFAULT_TTL_SECS: u64 = 900;
const MAX_SUBJECT: usize = 128;

/// Body of `POST /v1/sessions/{sid}/tokens`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MintToken {
    /// What the token may do: `read` (state, log, questions, events), `plan` (plan mode,
    /// commands), `prompt` (messages, cancel), `answer` (answer or dismiss questions).
    #[schema(example = json!(["read", "plan", "prompt", "answer"]))]
    pub scopes: Vec<Scope>,
    /// Limit the token to one agent's plan, prompts and questions.
    #[schema(value_type = Option<String>, example = "main")]
    pub agent: Option<AgentId>,
    /// Lifetime in seconds, 1-3600 (default 900).
    #[schema(minimum = 1, maximum = 3600)]
    pub ttl_seconds: Option<u64>,
    /// Who the user is in your system (recorded with their answers); default: the key's id.
    #[schema(example = "user-42")]
    pub subject: Option<String>,
}

/// A minted token.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MintedToken {
    /// Send as `Authorization: Bearer <token>`, or as `?access_token=` on the event routes.
    pub token: String,
    #[serde(with = "crate::domain::event::rfc3339_ms")]
    #[schema(value_type = String, example = "2026-12-02T10:38:53.000Z")]
    pub expires_at: u64,
    #[schema(value_type = String)]
    pub session: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub agent: Option<AgentId>,
    pub scopes: Vec<Scope>,
}

/// Mint a short-lived browser token for one session.
///
/// API keys only. The token carries the listed scopes, optionally one agent, and lives at most
/// an hour; revoking the key that minted it ends it too.
#[utoipa::path(
    tag = "sessions",
    operation_id = "createToken",
    params(("sid" = String, Path, description = "Session id")),
    request_body(content = MintToken, example = json!({"scopes": ["read", "plan", "prompt", "answer"], "agent": "main", "ttl_seconds": 900, "subject": "user-42"})),
    responses(
        (status = 201, description = "The token; it is not stored, so keep it until it expires", body = MintedToken),
    )
)]
#[post("/v1/sessions/{sid}/tokens")]
pub async fn mint_token(
    state: State,
    caller: Caller,
    path: web::Path<String>,
    body: web::Json<MintToken>,
) -> Result<HttpResponse, ApiError> {
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, Action::Manage).await?;
    let MintToken {
        scopes,
        agent,
        ttl_seconds,
        subject,
    } = body.into_inner();
    let mut scopes = scopes;
    scopes.sort_by_key(|s| s.name());
    scopes.dedup();
    if scopes.is_empty() {
        return Err(ApiError::new(
            Code::InvalidBody,
            "`scopes` must name at least one of read, plan, prompt, answer",
        ));
    }
    let ttl = ttl_seconds.unwrap_or(DEFAULT_TTL_SECS);
    if !(1..=MAX_TTL_SECS).contains(&ttl) {
        return Err(ApiError::new(
            Code::InvalidBody,
            format!("`ttl_seconds` must be 1-{MAX_TTL_SECS}, got {ttl}"),
        ));
    }
    if let Some(s) = &subject {
        if s.is_empty() || s.len() > MAX_SUBJECT || s.chars().any(char::is_control) {
            return Err(ApiError::new(
                Code::InvalidBody,
                format!("`subject` must be 1-{MAX_SUBJECT} printable characters"),
            ));
        }
    }
    if let Some(a) = &agent {
        let session = state.sessions.state(&sid).await?;
        session
            .agent(a)
            .map_err(crate::service::ServiceError::from)?;
    }
    // On an open server the token is not needed (nothing is checked) but is still minted, so
    // an integrator's code path is the same in development; it is refused once keys exist.
    let (tenant, key) = match &caller {
        Caller::Key { id, tenant, .. } => (tenant.clone(), id.clone()),
        _ => (TenantId::open(), "open".to_owned()),
    };
    let claims = Claims {
        sub: subject.unwrap_or_else(|| format!("key:{key}")),
        iss: String::new(),
        iat: 0,
        exp: 0,
        ten: tenant,
        key,
        sid: sid.clone(),
        agt: agent.clone(),
        scp: scopes.clone(),
    };
    let (token, exp) = state
        .auth
        .mint(claims, Duration::from_secs(ttl))
        .map_err(|e| ApiError::opaque(Code::Internal, "the token could not be signed", e))?;
    // A credential is never cached, nor kept for an idempotent replay (a keyed retry mints
    // another token instead: minting records nothing).
    Ok(HttpResponse::Created()
        .insert_header(("Cache-Control", "no-store"))
        .json(MintedToken {
            token,
            expires_at: exp * 1000,
            session: sid,
            agent,
            scopes,
        }))
}
