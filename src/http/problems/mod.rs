//! Which problem `code`s each operation can answer: one table, by `operationId`.
//!
//! The table is what the spec publishes (one response per status, its `code` restricted to the
//! operation's codes, an example of each: [`document`]), what the README's problem table is
//! generated from ([`markdown`]), and what the integration tests hold every problem the server
//! sends against: a route that answers a code its row does not list fails them. An operation
//! without a row, or a row without an operation, fails a unit test below.
//!
//! Rows are built from groups named after what raises the codes (the credential check, the
//! store, a JSON body…). A new route adds a row; a new code goes into the groups or rows of the
//! operations that can raise it.

use actix_web::http::StatusCode;

use super::Code;
use Code::*;

mod catalog;
mod document;

pub use catalog::describe;
pub use document::{markdown, Document};

/// The credential check of `/v1/sessions…` routes (the `authenticate` middleware and
/// `AppState::guard`): an operation with these requires a credential when auth is on.
const CREDENTIALS: &[Code] = &[Unauthorized, TokenExpired, InsufficientScope, RateLimited];
/// Any store round trip (the credential check's included) and wiring bugs.
const STORE: &[Code] = &[StoreUnavailable, Internal];
/// Folding a session's log.
const FOLD: &[Code] = &[WriteContention, LogCorrupt];
/// Appending to a session's log.
const APPEND: &[Code] = &[StoreFull];
/// `{sid}` (and `{aid}`, `{qid}`) in the path.
const SESSION: &[Code] = &[InvalidId, SessionNotFound];
const AGENT: &[Code] = &[AgentNotFound];
/// `{rev}` in the path: a revision number of the agent.
const REVISION: &[Code] = &[RevisionNotFound];
const QUESTION: &[Code] = &[QuestionNotFound, QuestionClosed];
/// Every POST and PUT (`guard::json_writes`), and its `Idempotency-Key` (`http::idempotency`).
const WRITE: &[Code] = &[
    UnsupportedMediaType,
    InvalidIdempotencyKey,
    IdempotencyKeyReused,
    IdempotencyKeyInUse,
    IdempotencyKeyQuota,
    AlreadyApplied,
];
/// A JSON body, required or optional.
const BODY: &[Code] = &[MalformedJson, InvalidBody, PayloadTooLarge];
/// Query parameters.
const QUERY: &[Code] = &[InvalidQuery];
/// A route of a plugin that may not be composed (`require_plan_mode`, `require_questions`).
const PLUGIN: &[Code] = &[FeatureDisabled];

/// Every operation and the codes it can answer.
pub const OPERATIONS: &[(&str, &[&[Code]])] = &[
    ("getStatus", &[]),
    ("getHealth", &[]),
    (
        "getReadiness",
        &[&[StoreUnavailable, StoreFull, ReplicaDraining]],
    ),
    ("getMetrics", &[]),
    ("listTools", &[]),
    ("listCommands", &[]),
    (
        "createSession",
        &[CREDENTIALS, STORE, WRITE, BODY, APPEND, &[SessionQuota]],
    ),
    ("getSession", &[CREDENTIALS, STORE, SESSION, FOLD]),
    ("deleteSession", &[CREDENTIALS, STORE, SESSION, FOLD]),
    (
        "spawnAgent",
        &[
            CREDENTIALS,
            STORE,
            SESSION,
            FOLD,
            WRITE,
            BODY,
            APPEND,
            &[OwnerNotFound, AgentLimit],
        ],
    ),
    ("listSessions", &[CREDENTIALS, STORE, QUERY]),
    (
        "createWebhook",
        &[
            CREDENTIALS,
            STORE,
            BODY,
            APPEND,
            WRITE,
            &[InvalidWebhook, WebhookQuota, FeatureDisabled],
        ],
    ),
    ("listWebhooks", &[CREDENTIALS, STORE, &[FeatureDisabled]]),
    (
        "getWebhook",
        &[CREDENTIALS, STORE, &[WebhookNotFound, FeatureDisabled]],
    ),
    (
        "deleteWebhook",
        &[CREDENTIALS, STORE, &[WebhookNotFound, FeatureDisabled]],
    ),
    (
        "listWebhookDeliveries",
        &[
            CREDENTIALS,
            STORE,
            QUERY,
            &[WebhookNotFound, FeatureDisabled],
        ],
    ),
    ("listAgents", &[CREDENTIALS, STORE, SESSION, FOLD]),
    ("getAgent", &[CREDENTIALS, STORE, SESSION, AGENT, FOLD]),
    (
        "readLog",
        &[
            CREDENTIALS,
            STORE,
            SESSION,
            FOLD,
            QUERY,
            &[CursorOutOfRange],
        ],
    ),
    (
        "streamEvents",
        &[
            CREDENTIALS,
            STORE,
            SESSION,
            FOLD,
            QUERY,
            &[CursorOutOfRange, StreamQuota, ReplicaDraining],
        ],
    ),
    (
        "streamManyEvents",
        &[
            CREDENTIALS,
            STORE,
            SESSION,
            FOLD,
            QUERY,
            &[
                CursorOutOfRange,
                TooManySessions,
                StreamQuota,
                ReplicaDraining,
            ],
        ],
    ),
    (
        "getPlan",
        &[PLUGIN, CREDENTIALS, STORE, SESSION, AGENT, FOLD],
    ),
    (
        "setPlan",
        &[
            PLUGIN,
            CREDENTIALS,
            STORE,
            SESSION,
            AGENT,
            FOLD,
            WRITE,
            BODY,
            APPEND,
        ],
    ),
    (
        "listPlanRevisions",
        &[PLUGIN, CREDENTIALS, STORE, SESSION, AGENT, FOLD, QUERY],
    ),
    (
        "getPlanRevision",
        &[PLUGIN, CREDENTIALS, STORE, SESSION, AGENT, FOLD, REVISION],
    ),
    (
        "getPlanRevisionDiff",
        &[
            PLUGIN,
            CREDENTIALS,
            STORE,
            SESSION,
            AGENT,
            FOLD,
            QUERY,
            REVISION,
        ],
    ),
    (
        "getPlanProjection",
        &[PLUGIN, CREDENTIALS, STORE, SESSION, FOLD],
    ),
    (
        "postMessage",
        &[
            CREDENTIALS,
            STORE,
            SESSION,
            AGENT,
            FOLD,
            WRITE,
            BODY,
            APPEND,
            &[TurnQuota],
        ],
    ),
    (
        "cancelTurn",
        &[CREDENTIALS, STORE, SESSION, AGENT, FOLD, WRITE, APPEND],
    ),
    (
        "runCommand",
        &[
            CREDENTIALS,
            STORE,
            SESSION,
            AGENT,
            FOLD,
            WRITE,
            BODY,
            APPEND,
            &[NotACommand, UnknownCommand, TurnQuota],
        ],
    ),
    (
        "listQuestions",
        &[PLUGIN, CREDENTIALS, STORE, SESSION, FOLD, QUERY],
    ),
    (
        "getQuestion",
        &[
            PLUGIN,
            CREDENTIALS,
            STORE,
            SESSION,
            FOLD,
            &[QuestionNotFound],
        ],
    ),
    (
        "answerQuestion",
        &[
            PLUGIN,
            CREDENTIALS,
            STORE,
            SESSION,
            QUESTION,
            FOLD,
            WRITE,
            BODY,
            APPEND,
            &[
                UnknownOption,
                UnknownLabel,
                TextNotAllowed,
                EmptyAnswer,
                RevisionSuperseded,
            ],
        ],
    ),
    (
        "dismissQuestion",
        &[
            PLUGIN,
            CREDENTIALS,
            STORE,
            SESSION,
            QUESTION,
            FOLD,
            WRITE,
            BODY,
            APPEND,
            &[RevisionSuperseded],
        ],
    ),
    (
        "forkSession",
        &[
            CREDENTIALS,
            STORE,
            SESSION,
            FOLD,
            WRITE,
            BODY,
            APPEND,
            &[InvalidForkPoint, SessionQuota],
        ],
    ),
    (
        "compactSession",
        &[
            CREDENTIALS,
            STORE,
            SESSION,
            FOLD,
            WRITE,
            APPEND,
            &[TurnRunning, ProviderCallQuota, ProviderFailed],
        ],
    ),
    (
        "createToken",
        &[CREDENTIALS, STORE, SESSION, AGENT, FOLD, WRITE, BODY],
    ),
];

/// What a request that matches no operation can get: an unknown path, a wrong method, a write
/// that is not JSON, a refused CORS preflight, and on `/v1/sessions…` the credential check.
pub const UNROUTED: &[Code] = &[
    NotFound,
    MethodNotAllowed,
    UnsupportedMediaType,
    CorsRefused,
    Unauthorized,
    TokenExpired,
    RateLimited,
];

/// Codes sent with another status than [`Code::status`] by one operation: `/readyz` reports a
/// full store as not ready (503), where a write gets 507.
const STATUS_EXCEPTIONS: &[(&str, Code, StatusCode)] =
    &[("getReadiness", StoreFull, StatusCode::SERVICE_UNAVAILABLE)];

/// The status `operation` sends `code` with.
pub fn status(operation: &str, code: Code) -> StatusCode {
    STATUS_EXCEPTIONS
        .iter()
        .find(|(op, c, _)| *op == operation && *c == code)
        .map_or_else(|| code.status(), |(_, _, s)| *s)
}

/// The codes `operation` can answer, each once, in table order; `None` for an operation
/// without a row.
pub fn codes(operation: &str) -> Option<Vec<Code>> {
    let (_, groups) = OPERATIONS.iter().find(|(op, _)| *op == operation)?;
    let mut out: Vec<Code> = Vec::new();
    for code in groups.iter().flat_map(|g| g.iter()) {
        if !out.contains(code) {
            out.push(*code);
        }
    }
    Some(out)
}

/// The Markdown tables of this server's problem codes, as the README carries them.
pub fn table() -> String {
    markdown(&super::openapi())
}

/// Whether `operation` takes a credential (it can answer 401).
pub fn authenticated(operation: &str) -> bool {
    codes(operation).is_some_and(|c| c.contains(&Unauthorized))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operation_ids() -> Vec<String> {
        let spec = crate::http::openapi();
        spec.paths
            .paths
            .values()
            .flat_map(|item| {
                [&item.get, &item.put, &item.post, &item.delete, &item.patch]
                    .into_iter()
                    .flatten()
                    .map(|op| op.operation_id.clone().unwrap_or_default())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn every_operation_has_a_row_and_every_row_an_operation() {
        let ids = operation_ids();
        for id in &ids {
            assert!(
                codes(id).is_some(),
                "operation `{id}` has no row in http::problems::OPERATIONS: list the codes it can answer"
            );
        }
        for (op, _) in OPERATIONS {
            assert!(
                ids.iter().any(|id| id == op),
                "http::problems::OPERATIONS has a row for `{op}`, which no route has"
            );
        }
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "operationIds are unique: {ids:?}");
    }

    #[test]
    fn a_code_keeps_its_status_except_where_the_table_says_otherwise() {
        assert_eq!(status("setPlan", StoreFull).as_u16(), 507);
        assert_eq!(status("getReadiness", StoreFull).as_u16(), 503);
        assert_eq!(status("getPlan", SessionNotFound).as_u16(), 404);
    }

    #[test]
    fn session_routes_take_credentials_and_the_system_routes_do_not() {
        assert!(authenticated("getPlan"));
        assert!(authenticated("createSession"));
        assert!(!authenticated("getStatus"));
        assert!(!authenticated("getReadiness"));
    }
}
