//! Slash commands: the registry for autocomplete, and running one.

use crate::auth::{self, Caller};
use actix_web::{get, post, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ids, ApiError, Code, State};
use crate::domain::commands::{parse, CommandSpec};
use crate::domain::plan::PlanCommandResult;
use crate::domain::{EventId, PlanView};
use crate::service::ServiceError;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CommandList {
    pub commands: Vec<CommandSpec>,
}

/// The registered slash commands.
///
/// For a composer's autocomplete: each command's name, arguments and what it does. Empty when
/// the `commands` plugin is not composed. Public.
#[utoipa::path(tag = "commands",
    operation_id = "listCommands",
    responses((status = 200, description = "The registered commands, for autocomplete", body = CommandList))
)]
#[get("/v1/commands")]
pub async fn list_commands(state: State) -> web::Json<CommandList> {
    web::Json(CommandList {
        commands: state.commands(),
    })
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommand {
    /// The composer input, e.g. `/plan`, `/plan off` or `/plan fix the login bug`.
    #[schema(example = "/plan fix the login bug")]
    pub input: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CommandRan {
    #[schema(example = "plan")]
    pub command: String,
    #[serde(flatten)]
    pub result: PlanCommandResult,
    /// The plan state after the command, as the host confirms it.
    pub plan: PlanView,
    /// The session's last event id after the command.
    #[schema(value_type = String, example = "4-0")]
    pub last_event_id: EventId,
}

/// Run a slash command for an agent.
///
/// `/plan` selects plan mode; `/plan <message>` selects it and sends the message (opening a
/// turn when idle; the token then needs the `prompt` scope too); `/plan off` selects inactive
/// without model input and cancels a pending entry. Every run is recorded as `command/run`.
#[utoipa::path(
    tag = "commands",
    operation_id = "runCommand",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id")),
    request_body(content = RunCommand, example = json!({"input": "/plan fix the login bug"})),
    responses(
        (status = 200, description = "The command ran; the plan state it left", body = CommandRan),
    )
)]
#[post("/v1/sessions/{sid}/agents/{aid}/commands")]
pub async fn run_command(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
    body: web::Json<RunCommand>,
) -> Result<web::Json<CommandRan>, ApiError> {
    let (sid, aid) = ids(&path)?;
    state.guard(&caller, &sid, Some(&aid), auth::PLAN).await?;
    let registry = state.commands();
    let (name, args) = parse(&body.input, &registry).map_err(|e| {
        let code = match e {
            crate::domain::commands::CommandError::NotACommand(_) => Code::NotACommand,
            crate::domain::commands::CommandError::Unknown { .. } => Code::UnknownCommand,
        };
        ApiError::new(code, e.to_string())
    })?;
    if !args.trim().is_empty() {
        // `/plan <text>` also sends the text as a prompt.
        state.guard(&caller, &sid, Some(&aid), auth::PROMPT).await?;
    }
    // `plan` is the only command today; the registry guarantees it is composed.
    let result = state
        .engine
        .submit(
            &sid,
            &aid,
            {
                let (aid, args) = (aid.clone(), args.to_owned());
                move |s, turn| s.decide_plan_command(&aid, &args, turn)
            },
            |r| r.message.as_ref(),
        )
        .await?;
    // The plan state this command left, as committed (not re-read: a turn may have moved on).
    let plan = result
        .state
        .agent(&aid)
        .map_err(ServiceError::from)?
        .plan
        .view();
    Ok(web::Json(CommandRan {
        command: name.to_owned(),
        result: result.value,
        plan,
        last_event_id: EventId(result.state.seq),
    }))
}
