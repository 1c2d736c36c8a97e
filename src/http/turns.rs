//! Prompts and cancellation.

use crate::auth::{self, Caller};
use actix_web::{post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ids, ApiError, Code, State};
use crate::domain::turn::Prompted;

/// Largest prompt accepted, in bytes (the body limit also applies).
const MAX_TEXT: usize = 32 * 1024;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    /// The user's message.
    #[schema(example = "Fix the login bug")]
    pub text: String,
}

/// Send a user message.
///
/// An idle agent starts a turn (`steered: false`); a running agent gets the message as a steer
/// that its next step includes (`steered: true`). Follow the turn on the event stream.
#[utoipa::path(
    tag = "turns",
    operation_id = "postMessage",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id")),
    request_body(content = PostMessage, example = json!({"text": "Fix the login bug"})),
    responses(
        (status = 202, description = "Accepted: a turn started, or the running one will read it", body = Prompted),
    )
)]
#[post("/v1/sessions/{sid}/agents/{aid}/messages")]
pub async fn post_message(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
    body: web::Json<PostMessage>,
) -> Result<HttpResponse, ApiError> {
    let (sid, aid) = ids(&path)?;
    state.guard(&caller, &sid, Some(&aid), auth::PROMPT).await?;
    let text = body.into_inner().text;
    if text.trim().is_empty() {
        return Err(ApiError::new(Code::InvalidBody, "`text` must not be empty"));
    }
    if text.len() > MAX_TEXT {
        return Err(ApiError::new(
            Code::InvalidBody,
            format!("`text` must be at most {MAX_TEXT} bytes"),
        ));
    }
    let prompted = state.engine.prompt(&sid, &aid, &text).await?;
    Ok(HttpResponse::Accepted().json(prompted))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Cancelled {
    /// The turn that was ended; `null` when no turn was running.
    pub turn: Option<String>,
}

/// Stop the agent's running turn.
///
/// Works from any replica. A pending plan choice is kept for the next prompt's pre-step; an
/// open plan review fails closed.
#[utoipa::path(
    tag = "turns",
    operation_id = "cancelTurn",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id")),
    responses(
        (status = 200, description = "The turn that was ended, if any", body = Cancelled),
    )
)]
#[post("/v1/sessions/{sid}/agents/{aid}/cancel")]
pub async fn cancel(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<web::Json<Cancelled>, ApiError> {
    let (sid, aid) = ids(&path)?;
    state.guard(&caller, &sid, Some(&aid), auth::PROMPT).await?;
    let turn = state.engine.cancel(&sid, &aid).await?;
    Ok(web::Json(Cancelled { turn }))
}
