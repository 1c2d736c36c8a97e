//! Status, liveness and readiness.

use actix_web::{get, web::Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, Code, Problem, State};

/// Plan mode's composition, when it is composed.
#[derive(Serialize, ToSchema)]
pub struct PlanModeFeature {
    /// The system-prompt section name while active.
    pub section: &'static str,
    /// Its order among system-prompt sections.
    pub order: u32,
    /// The review-gated exit tool.
    pub exit_tool: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct Features {
    /// `null` when plan mode is not composed: hide plan controls.
    pub plan_mode: Option<PlanModeFeature>,
    pub commands: bool,
    pub questions: bool,
}

#[derive(Serialize, ToSchema)]
pub struct Status {
    pub service: &'static str,
    pub version: &'static str,
    /// `redis` or `memory` (embedded, single process).
    pub store: &'static str,
    /// This replica's id.
    pub replica: String,
    /// The model provider: `fixture` or `openai`.
    pub provider: &'static str,
    pub features: Features,
}

/// Service status and composed features.
///
/// What a frontend reads first: which plugins are composed (hide the plan control when
/// `features.plan_mode` is `null`), the store, the provider and the version. Public.
#[utoipa::path(
    tag = "system",
    operation_id = "getStatus",
    responses((status = 200, description = "This replica's status and composition", body = Status))
)]
#[get("/v1/status")]
pub async fn status(state: State) -> Json<Status> {
    Json(Status {
        service: "dsh-plan",
        version: env!("CARGO_PKG_VERSION"),
        store: state.sessions.store_kind(),
        replica: state.replica_id.clone(),
        provider: state.engine.provider_name(),
        features: Features {
            plan_mode: state
                .composition
                .plan_mode
                .as_ref()
                .map(|_| PlanModeFeature {
                    section: crate::engine::assembly::PLAN_SECTION,
                    order: crate::engine::assembly::PLAN_ORDER,
                    exit_tool: crate::domain::plan::EXIT_TOOL,
                }),
            commands: state.composition.commands,
            questions: state.composition.questions,
        },
    })
}

#[derive(Serialize, ToSchema)]
pub struct Tools {
    /// The tool list every step sends, in OpenAI function-tool form; identical in both plan
    /// states.
    #[schema(value_type = Vec<crate::engine::assembly::FunctionTool>)]
    pub tools: serde_json::Value,
}

/// The tools the model is offered.
///
/// The list every step sends to the provider, in OpenAI function-tool form. It is the same in
/// both plan states, so entering or leaving plan mode never invalidates a prompt cache. Public.
#[utoipa::path(
    tag = "system",
    operation_id = "listTools",
    responses((status = 200, description = "The tool list", body = Tools))
)]
#[get("/v1/tools")]
pub async fn tools(state: State) -> Json<Tools> {
    Json(Tools {
        tools: state.engine.tools().clone(),
    })
}

#[derive(Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
}

/// Liveness: the process answers.
///
/// Does not touch the event store, so a Redis outage never restarts a replica. Public.
#[utoipa::path(
    tag = "system",
    operation_id = "getHealth",
    responses((status = 200, description = "The process is alive", body = Health,
               example = json!({"status": "ok"})))
)]
#[get("/healthz")]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the event store answers and has room.
///
/// A full store (Redis at its `maxmemory`,
/// where writes answer 507) is reported as 503 with the problem `code` `store-full`, until space
/// is freed; reads keep working meanwhile. A replica that is stopping (SIGTERM) answers 503
/// `replica-draining` until it exits.
#[utoipa::path(
    tag = "system",
    operation_id = "getReadiness",
    responses((status = 200, description = "The event store answers and has room", body = Health,
               example = json!({"status": "ready"})))
)]
#[get("/readyz")]
pub async fn readyz(state: State) -> Result<actix_web::HttpResponse, ApiError> {
    state.refuse_if_draining()?;
    state.sessions.ping().await?;
    if state.sessions.store_full().await? {
        return Ok(store_full());
    }
    Ok(actix_web::HttpResponse::Ok().json(Health { status: "ready" }))
}

/// `/readyz`'s answer while the store is full: not ready (503), and why, by its problem code
/// (which on a write answers 507).
fn store_full() -> actix_web::HttpResponse {
    let unavailable = actix_web::http::StatusCode::SERVICE_UNAVAILABLE;
    let code = Code::StoreFull;
    let body = Problem::new(
        code,
        unavailable,
        "the event store is full: writes are refused until an operator frees space",
    );
    actix_web::HttpResponse::build(unavailable)
        .content_type("application/problem+json")
        .json(body)
}

/// Prometheus metrics of this replica (text exposition format).
///
/// Responses by status class, response latencies, SSE subscribers, running turns and build
/// info. Public: put it behind your network's access rules.
#[utoipa::path(
    tag = "system",
    operation_id = "getMetrics",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String))
)]
#[get("/metrics")]
pub async fn metrics(state: State) -> actix_web::HttpResponse {
    let (received, unwatched) = state.hub.received();
    let body = format!(
        "# HELP dsh_sse_subscribers SSE subscribers connected to this replica.\n\
         # TYPE dsh_sse_subscribers gauge\n\
         dsh_sse_subscribers {}\n\
         # HELP dsh_sse_sessions Sessions with SSE subscribers on this replica.\n\
         # TYPE dsh_sse_sessions gauge\n\
         dsh_sse_sessions {}\n\
         # HELP dsh_live_messages_total Session messages (commits, deltas, deletions) the live bus delivered to this replica; `unwatched`: for sessions without subscribers here.\n\
         # TYPE dsh_live_messages_total counter\n\
         dsh_live_messages_total{{for=\"watched\"}} {}\n\
         dsh_live_messages_total{{for=\"unwatched\"}} {}\n\
         # HELP dsh_turns_running Turns this replica is running.\n\
         # TYPE dsh_turns_running gauge\n\
         dsh_turns_running {}\n\
         # HELP dsh_build_info Build and composition.\n\
         # TYPE dsh_build_info gauge\n\
         dsh_build_info{{version=\"{}\",store=\"{}\",provider=\"{}\",replica=\"{}\"}} 1\n",
        state.hub.subscribers(),
        state.hub.active_feeds(),
        received - unwatched,
        unwatched,
        state.engine.running_turns(),
        env!("CARGO_PKG_VERSION"),
        state.sessions.store_kind(),
        state.engine.provider_name(),
        state.replica_id.replace(['"', '\\', '\n'], "_"),
    ) + &state.requests.render();
    actix_web::HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(body)
}

/// While the replica drains (SIGTERM), every answer closes its connection
/// (`Connection: close`), so a proxy retires each connection after its exchange instead of
/// keeping it for the next request. When the replica stops, the connections it closes are then
/// only the ones the proxy left idle (which a proxy whose keep-alive is shorter than the drain,
/// as deploy/nginx.conf's, has closed by then): never one the proxy may just have sent a
/// request on, which it could not retry if it is a POST (nginx answers 502).
pub async fn close_while_draining<B>(
    req: actix_web::dev::ServiceRequest,
    next: impl super::layers::Rest<B>,
) -> Result<actix_web::dev::ServiceResponse<B>, actix_web::Error> {
    use actix_web::http::ConnectionType;
    let state = req
        .app_data::<actix_web::web::Data<super::AppState>>()
        .cloned();
    let draining = move || state.as_ref().is_some_and(|s| s.draining());
    match next.call(req).await {
        Ok(mut res) => {
            if draining() {
                res.response_mut()
                    .head_mut()
                    .set_connection_type(ConnectionType::Close);
            }
            Ok(res)
        }
        Err(mut err) => {
            if draining() {
                err.add_response_mapper(|mut res| {
                    res.head_mut().set_connection_type(ConnectionType::Close);
                    res
                });
            }
            Err(err)
        }
    }
}
