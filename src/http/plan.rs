//! Plan mode over HTTP: read and set an agent's plan state, and the plan projection.

use crate::auth::{self, Caller};
use std::collections::BTreeMap;

use actix_web::{get, put, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ids, session_id, ApiError, State};
use crate::domain::{EventId, Outcome, PlanView};
use crate::service::ServiceError;

/// An agent's plan state.
///
/// `active` as recorded; `pending` only while a choice awaits the next step (its presence
/// matters: `pending: false` means "Default, pending").
#[utoipa::path(
    tag = "plan",
    operation_id = "getPlan",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id")),
    responses(
        (status = 200, description = "The agent's plan state", body = PlanView,
         example = json!({"active": true, "pending": false})),
    )
)]
#[get("/v1/sessions/{sid}/agents/{aid}/plan")]
pub async fn get_plan(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<web::Json<PlanView>, ApiError> {
    state.require_plan_mode()?;
    let (sid, aid) = ids(&path)?;
    state.guard(&caller, &sid, Some(&aid), auth::READ).await?;
    let session = state.sessions.state(&sid).await?;
    Ok(web::Json(
        session.agent(&aid).map_err(ServiceError::from)?.plan.view(),
    ))
}

/// Body of `PUT …/plan`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPlan {
    /// The plan state the user selects.
    pub active: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SetPlanResult {
    pub outcome: Outcome,
    /// The plan state after this request, as the host confirms it.
    pub plan: PlanView,
    /// The session's last event id after this request.
    #[schema(value_type = String, example = "4-0")]
    pub last_event_id: EventId,
}

/// Select plan mode on or off.
///
/// Idle agents commit at once (`committed`); running agents keep the choice pending for the
/// next step (`queued`); choosing the recorded state again withdraws a pending choice
/// (`cancelled`); anything else is a `noop`.
#[utoipa::path(
    tag = "plan",
    operation_id = "setPlan",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id")),
    request_body(content = SetPlan, example = json!({"active": true})),
    responses(
        (status = 200, description = "What the choice did, and the plan state after it", body = SetPlanResult,
         example = json!({"outcome": "committed", "plan": {"active": true}, "last_event_id": "2-0"})),
    )
)]
#[put("/v1/sessions/{sid}/agents/{aid}/plan")]
pub async fn put_plan(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
    body: web::Json<SetPlan>,
) -> Result<web::Json<SetPlanResult>, ApiError> {
    state.require_plan_mode()?;
    let (sid, aid) = ids(&path)?;
    state.guard(&caller, &sid, Some(&aid), auth::PLAN).await?;
    let target = body.active;
    let done = state
        .sessions
        .decide(&sid, {
            let aid = aid.clone();
            move |s| s.decide_set_plan(&aid, target)
        })
        .await?;
    let plan = done
        .state
        .agent(&aid)
        .map_err(ServiceError::from)?
        .plan
        .view();
    Ok(web::Json(SetPlanResult {
        outcome: done.value,
        plan,
        last_event_id: EventId(done.state.seq),
    }))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PlanProjectionView {
    /// `{active, pending?}` per agent id, recomputed from the log alone.
    pub agents: BTreeMap<String, PlanView>,
}

/// The plan projection: every agent's plan view.
///
/// Recomputed from `command/run`, `plan/select` and `plan/mode` events alone; always equals
/// what `GET …/plan` answers for each agent.
#[utoipa::path(
    tag = "plan",
    operation_id = "getPlanProjection",
    params(("sid" = String, Path, description = "Session id")),
    responses(
        (status = 200, description = "Every agent's plan view", body = PlanProjectionView),
    )
)]
#[get("/v1/sessions/{sid}/projections/plan")]
pub async fn plan_projection(
    state: State,
    caller: Caller,
    path: web::Path<String>,
) -> Result<web::Json<PlanProjectionView>, ApiError> {
    state.require_plan_mode()?;
    let sid = session_id(&path)?;
    state.guard(&caller, &sid, None, auth::READ).await?;
    // The projection unit is folded alongside the session: one read past the cached fold.
    let session = state.sessions.state(&sid).await?;
    Ok(web::Json(PlanProjectionView {
        agents: session.plans.view(),
    }))
}
