//! The HTTP surface: thin handlers over [`crate::service::Sessions`], one error type, and the
//! OpenAPI document generated from the handlers themselves.

use std::sync::Arc;

use actix_web::web;
use utoipa::OpenApi;
use utoipa_actix_web::service_config::ServiceConfig;

use crate::composition::Composition;
use crate::domain::{AgentId, SessionId, SessionTerms, TenantId};
use crate::engine::Engine;
use crate::live::Hub;
use crate::service::Sessions;

mod auth;
mod client;
mod commands;
pub mod cors;
pub mod error;
mod events;
pub mod guard;
pub mod idempotency;
pub mod layers;
mod lists;
mod methods;
mod metrics;
mod plan;
pub mod problems;
mod questions;
pub mod rate_limit;
pub mod request_id;
mod revisions;
mod sessions;
mod system;
mod tokens;
mod turns;
mod webhooks;

pub use auth::authenticate;
pub use error::{ApiError, Code, Problem};
pub use methods::head_as_get;
pub use system::close_while_draining;

/// What every handler shares.
pub struct AppState {
    pub sessions: Arc<Sessions>,
    pub engine: Arc<Engine>,
    pub composition: Composition,
    pub replica_id: String,
    /// This replica's live fan-out.
    pub hub: Arc<Hub>,
    /// Flips to true on shutdown; SSE streams end so clients reconnect elsewhere.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    pub sse_heartbeat: std::time::Duration,
    /// Whether compaction trims the entries it replaced.
    pub trim_on_compact: bool,
    /// Agents one session may have (`DSH_MAX_AGENTS`).
    pub max_agents: usize,
    /// Sessions one event stream may follow (`DSH_STREAM_MAX_SESSIONS`).
    pub stream_max_sessions: usize,
    /// Who is calling: API keys, browser tokens.
    pub auth: Arc<crate::auth::Auth>,
    /// Responses and latencies for `/metrics`.
    pub requests: metrics::RequestMetrics,
    /// Request rates per API key and quotas per tenant (see [`crate::limits`]).
    pub limits: Arc<crate::limits::Limits>,
    /// The records of writes sent with an `Idempotency-Key`.
    pub idempotency: Arc<crate::service::idempotency::Idempotency>,
    /// Webhook endpoints and their deliveries (none without Redis).
    pub webhooks: Option<Arc<dyn crate::store::WebhookStore>>,
    /// `DSH_WEBHOOK_ALLOW_PRIVATE`.
    pub webhook_allow_private: bool,
}

pub type State = web::Data<AppState>;

impl AppState {
    /// Whether this replica is stopping (SIGTERM): not ready, and it opens no new stream.
    pub fn draining(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Refuses what a stopping replica no longer starts (an event stream): 503, retry now
    /// elsewhere.
    pub fn refuse_if_draining(&self) -> Result<(), ApiError> {
        if self.draining() {
            return Err(ApiError::new(
                Code::ReplicaDraining,
                "this replica is stopping; reconnect to another one",
            )
            .retry_after(1));
        }
        Ok(())
    }

    /// The terms a new session of `tenant` is created under: its retention is the tenant's own
    /// (`dsh-plan tenants set --retention`) or the server's `DSH_RETENTION`.
    pub async fn session_terms(&self, tenant: Option<TenantId>) -> Result<SessionTerms, ApiError> {
        let limits = self
            .limits
            .tenant_limits(tenant.as_ref())
            .await
            .map_err(crate::service::ServiceError::from)?;
        Ok(SessionTerms {
            tenant,
            retention_ms: u64::try_from(limits.retention.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// 404 `feature-disabled` unless plan mode is composed.
    pub fn require_plan_mode(&self) -> Result<(), ApiError> {
        match self.composition.plan_mode {
            Some(_) => Ok(()),
            None => Err(ApiError::new(
                Code::FeatureDisabled,
                "plan mode is not composed on this server (see GET /v1/status)",
            )),
        }
    }

    /// 404 `feature-disabled` unless questions are composed.
    pub fn require_questions(&self) -> Result<(), ApiError> {
        if self.composition.questions {
            Ok(())
        } else {
            Err(ApiError::new(
                Code::FeatureDisabled,
                "questions are not composed on this server (see GET /v1/status)",
            ))
        }
    }

    /// The commands registered by the composed plugins: `plan-mode` registers `/plan` when
    /// `commands` is composed.
    pub fn commands(&self) -> Vec<crate::domain::commands::CommandSpec> {
        let mut out = Vec::new();
        if self.composition.commands && self.composition.plan_mode.is_some() {
            out.push(crate::domain::commands::plan_command());
        }
        out
    }
}

pub(crate) fn session_id(raw: &str) -> Result<SessionId, ApiError> {
    SessionId::parse(raw).map_err(|e| ApiError::new(Code::InvalidId, e))
}

pub(crate) fn ids(raw: &(String, String)) -> Result<(SessionId, AgentId), ApiError> {
    let sid = session_id(&raw.0)?;
    let aid = AgentId::parse(&raw.1).map_err(|e| ApiError::new(Code::InvalidId, e))?;
    Ok((sid, aid))
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "dsh-plan",
        description = "Agent sessions with a recorded, human-reviewed plan mode. Every state is \
                       folded from a per-session event log; errors are RFC 9457 problem \
                       documents whose `code` each operation lists; every response carries an \
                       `X-Request-Id`."
    ),
    components(schemas(Problem)),
    servers(
        (url = "/", description = "The server that serves this document (`GET /openapi.json`)"),
        (url = "http://127.0.0.1:8080", description = "A local server on the default `DSH_BIND`")
    ),
    tags(
        (name = "sessions", description = "Sessions, agents, their event logs and event streams, browser tokens"),
        (name = "plan", description = "Plan mode: the recorded state and the user's pending choice"),
        (name = "turns", description = "Prompts, steering and cancelling turns"),
        (name = "questions", description = "Questions to the user, e.g. plan reviews"),
        (name = "commands", description = "Slash commands such as /plan"),
        (name = "webhooks", description = "Webhook endpoints of a tenant and their signed deliveries (plan reviews, decisions, turn ends)"),
        (name = "system", description = "Status, health, readiness, metrics and the model's tools")
    )
)]
struct ApiDoc;

/// Registers every documented route. The router tries routes in this order (a regex match
/// per route with parameters), so the ones a running frontend calls most come first.
pub fn routes(cfg: &mut ServiceConfig) {
    cfg.service(plan::put_plan)
        .service(plan::get_plan)
        .service(turns::post_message)
        .service(events::events)
        .service(questions::answer)
        .service(sessions::get_session)
        .service(system::status)
        .service(system::healthz)
        .service(system::readyz)
        .service(sessions::create_session)
        .service(lists::list_sessions)
        .service(sessions::delete_session)
        .service(sessions::spawn_agent)
        .service(lists::list_agents)
        .service(sessions::get_agent)
        .service(sessions::read_log)
        .service(plan::plan_projection)
        .service(revisions::list_revisions)
        .service(revisions::get_revision)
        .service(revisions::diff_revisions)
        .service(turns::cancel)
        .service(system::tools)
        .service(system::metrics)
        .service(commands::list_commands)
        .service(commands::run_command)
        .service(questions::list_questions)
        .service(questions::get_question)
        .service(questions::dismiss)
        .service(sessions::fork_session)
        .service(sessions::compact_session)
        .service(tokens::mint_token)
        .service(events::many_events)
        .service(webhooks::create_webhook)
        .service(webhooks::list_webhooks)
        .service(webhooks::get_webhook)
        .service(webhooks::delete_webhook)
        .service(webhooks::list_deliveries);
}

/// The OpenAPI document, as `/openapi.json` serves it and `openapi/openapi.json` records it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    use utoipa_actix_web::AppExt;
    let (_, mut spec) = actix_web::App::new()
        .into_utoipa_app()
        .openapi(ApiDoc::openapi())
        .configure(routes)
        .split_for_parts();
    guard::document_json_writes(&mut spec);
    utoipa::Modify::modify(&problems::Document, &mut spec);
    idempotency::document(&mut spec);
    events::schema::document_streams(&mut spec);
    spec
}

/// The pages served beside the API (GET only; a trailing `*` matches any rest).
pub(crate) fn pages() -> Vec<&'static str> {
    let mut pages = client::paths();
    pages.extend(["/openapi.json", "/docs", "/docs/*"]);
    pages
}

/// The spec as committed: pretty JSON with a trailing newline.
pub fn openapi_json() -> String {
    let mut s = openapi().to_pretty_json().unwrap_or_default();
    s.push('\n');
    s
}

/// Mounts the API, `/openapi.json`, Swagger UI at `/docs`, and problem+json for everything else.
pub fn configure(app_state: web::Data<AppState>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        methods::prepare();
        std::sync::LazyLock::force(&SERVED_SPEC);
        cfg.app_data(app_state)
            .app_data(error::json_config())
            .app_data(error::payload_config())
            .app_data(error::query_config())
            .configure(|c| routes(&mut ServiceConfig::new(c)))
            .configure(client::configure)
            .route("/openapi.json", web::get().to(served_spec))
            .service(
                utoipa_swagger_ui::SwaggerUi::new("/docs/{_:.*}")
                    .config(utoipa_swagger_ui::Config::from("/openapi.json")),
            )
            .route(
                "/docs",
                web::get().to(|| async {
                    actix_web::HttpResponse::PermanentRedirect()
                        .insert_header(("Location", "/docs/"))
                        .finish()
                }),
            )
            .default_service(web::to(not_found));
    }
}

/// The spec `/openapi.json` serves, serialized once per process and shared by every worker
/// (each worker held its own as a document tree of ~7 MB).
static SERVED_SPEC: std::sync::LazyLock<web::Bytes> = std::sync::LazyLock::new(|| {
    let json = openapi()
        .to_json()
        .expect("the OpenAPI document serializes");
    json.into()
});

async fn served_spec() -> actix_web::HttpResponse {
    actix_web::HttpResponse::Ok()
        .content_type("application/json")
        .body(SERVED_SPEC.clone())
}

/// 405 with `Allow` for a known path asked with another method, else 404.
async fn not_found(req: actix_web::HttpRequest) -> actix_web::HttpResponse {
    use actix_web::ResponseError;
    let path = req.match_info().as_str();
    match methods::allowed(path) {
        Some(allowed) if !allowed.contains(req.method()) => {
            let allow = methods::allow_header(&allowed);
            let err = ApiError::new(
                Code::MethodNotAllowed,
                format!(
                    "{} is not allowed on {path}; allowed: {allow}",
                    req.method()
                ),
            );
            let mut res = err.error_response();
            if let Ok(value) = actix_web::http::header::HeaderValue::from_str(&allow) {
                res.headers_mut()
                    .insert(actix_web::http::header::ALLOW, value);
            }
            res
        }
        _ => ApiError::new(
            Code::NotFound,
            format!("no route for {} {}", req.method(), req.path()),
        )
        .error_response(),
    }
}
