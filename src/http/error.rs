//! The one error type of the HTTP surface, rendered as RFC 9457 `application/problem+json`.
//!
//! Every error has a stable machine `code`; the table in [`Code::status`] maps codes to HTTP
//! statuses. 5xx bodies are opaque: the cause goes to the log, never to the client. Extractor
//! failures (JSON, query) are routed through here by the handlers in [`json_config`] and
//! [`query_config`], so a malformed request looks like every other error.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::DomainError;
use crate::service::ServiceError;
use crate::store::StoreError;

/// Largest request body accepted, in bytes.
pub const MAX_BODY: usize = 64 * 1024;

/// Stable machine-readable error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Code {
    MalformedJson,
    InvalidBody,
    PayloadTooLarge,
    UnsupportedMediaType,
    InvalidId,
    InvalidQuery,
    NotFound,
    SessionNotFound,
    AgentNotFound,
    OwnerNotFound,
    QuestionNotFound,
    QuestionClosed,
    UnknownLabel,
    TextNotAllowed,
    EmptyAnswer,
    UnknownCommand,
    NotACommand,
    TurnRunning,
    AgentLimit,
    InvalidForkPoint,
    ProviderFailed,
    FeatureDisabled,
    WriteContention,
    StoreUnavailable,
    /// No credential, or one that is not (or no longer) valid.
    Unauthorized,
    /// A browser token past its `expires_at`.
    TokenExpired,
    /// A valid credential that does not carry this action (a token's scopes or agent, or a
    /// route for API keys only).
    InsufficientScope,
    /// A CORS preflight from an origin not in `DSH_CORS_ORIGINS`, or asking for a method or
    /// header the API does not allow across origins.
    CorsRefused,
    /// The key's request rate is used up; see `Retry-After` and `RateLimit`.
    RateLimited,
    /// The tenant has as many live sessions as it may.
    SessionQuota,
    /// The tenant has as many running turns as it may.
    TurnQuota,
    /// The tenant made as many provider calls this minute as it may.
    ProviderCallQuota,
    /// The tenant has as many open event streams as it may.
    StreamQuota,
    /// The event store is out of memory: nothing can be written until space is freed.
    StoreFull,
    /// This replica is stopping: it opens no new event stream and is not ready.
    ReplicaDraining,
    /// An answer names an option id the question does not offer.
    UnknownOption,
    /// A known path asked with a method it does not take; `Allow` lists the ones it does.
    MethodNotAllowed,
    /// A cursor (`Last-Event-ID`, `after`) past the session log's last event.
    CursorOutOfRange,
    /// An event stream asked to follow more sessions than one stream may.
    TooManySessions,
    /// The `Idempotency-Key` header is not 1-255 printable ASCII characters (or was sent
    /// twice).
    InvalidIdempotencyKey,
    /// This `Idempotency-Key` was used for a different request (method, path, body or
    /// credential) in the last 24 hours; use a new key for a new request.
    IdempotencyKeyReused,
    /// A request with this `Idempotency-Key` is still running; retry after `Retry-After`.
    IdempotencyKeyInUse,
    /// The tenant holds as many idempotency keys (of the last 24 hours) as it may; see
    /// `Retry-After`, or send the write without a key.
    IdempotencyKeyQuota,
    /// The agent has no plan revision with this number.
    RevisionNotFound,
    /// A decision names another plan revision (`revision`, `If-Match`) than the one its review
    /// decides: the plan changed since the client read it.
    RevisionSuperseded,
    /// A retry of a request that was applied already, whose response can no longer be rebuilt
    /// (the log was compacted since): read the resource to see its state.
    AlreadyApplied,
    /// The tenant has no webhook endpoint with this id.
    WebhookNotFound,
    /// The tenant has as many webhook endpoints as it may (16).
    WebhookQuota,
    /// A webhook registration with a URL that cannot be one (not http/https, too long, with
    /// credentials, or a private address) or an unknown event type.
    InvalidWebhook,
    LogCorrupt,
    Internal,
}

impl Code {
    pub fn status(self) -> StatusCode {
        use Code::*;
        match self {
            MalformedJson | InvalidId | InvalidQuery | UnknownCommand | NotACommand
            | CursorOutOfRange | InvalidWebhook => StatusCode::BAD_REQUEST,
            NotFound | SessionNotFound | AgentNotFound | QuestionNotFound | RevisionNotFound
            | WebhookNotFound | FeatureDisabled => StatusCode::NOT_FOUND,
            QuestionClosed | RevisionSuperseded | TurnRunning | AgentLimit
            | IdempotencyKeyInUse | AlreadyApplied => StatusCode::CONFLICT,
            InvalidIdempotencyKey => StatusCode::BAD_REQUEST,
            IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            InvalidBody | OwnerNotFound | UnknownLabel | UnknownOption | TextNotAllowed
            | EmptyAnswer | InvalidForkPoint | TooManySessions => StatusCode::UNPROCESSABLE_ENTITY,
            WriteContention | StoreUnavailable | ReplicaDraining => StatusCode::SERVICE_UNAVAILABLE,
            Unauthorized | TokenExpired => StatusCode::UNAUTHORIZED,
            InsufficientScope | CorsRefused => StatusCode::FORBIDDEN,
            RateLimited | SessionQuota | TurnQuota | ProviderCallQuota | StreamQuota
            | IdempotencyKeyQuota | WebhookQuota => StatusCode::TOO_MANY_REQUESTS,
            StoreFull => StatusCode::INSUFFICIENT_STORAGE,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            LogCorrupt | Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ProviderFailed => StatusCode::BAD_GATEWAY,
        }
    }

    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// An RFC 9457 problem document.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// A URI naming the problem type: `urn:dsh-plan:problem:<code>`.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// A short, human-readable summary of the problem type.
    pub title: String,
    pub status: u16,
    /// What went wrong with this request, in words a developer can act on.
    pub detail: String,
    pub code: Code,
    /// The request this problem answered, `urn:dsh-plan:request:<X-Request-Id>`: quote it
    /// when reporting a problem; the server's log lines about the request carry the same id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "urn:dsh-plan:request:0190f5c2-7b7e-7c4a-9d1e-3f6a2b8c9d10")]
    pub instance: Option<String>,
}

impl Problem {
    /// The document for `code` sent with `status` (normally `code.status()`), naming the
    /// request being handled.
    pub fn new(code: Code, status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            type_uri: format!("urn:dsh-plan:problem:{}", code.as_str()),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            code,
            instance: super::request_id::instance(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct ApiError {
    pub code: Code,
    pub detail: String,
    /// The internal cause of a 5xx, logged and never sent.
    cause: Option<String>,
    /// Seconds until a retry can succeed, sent as `Retry-After` (a 503 says 1 without it).
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            cause: None,
            retry_after: None,
        }
    }

    /// Tells the client when a retry can succeed (`Retry-After`).
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub(crate) fn opaque(code: Code, detail: &str, cause: impl ToString) -> Self {
        Self {
            code,
            detail: detail.to_owned(),
            cause: Some(cause.to_string()),
            retry_after: None,
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::SessionNotFound(_) => ApiError::new(Code::SessionNotFound, e.to_string()),
            ServiceError::Domain(d) => {
                let code = match d {
                    DomainError::AgentNotFound(_) => Code::AgentNotFound,
                    DomainError::OwnerNotFound(_) => Code::OwnerNotFound,
                    DomainError::QuestionNotFound(_) => Code::QuestionNotFound,
                    DomainError::QuestionClosed { .. } => Code::QuestionClosed,
                    // `label` is the deprecated alias of `option`: its refusals keep their code.
                    DomainError::UnknownLabel { .. } | DomainError::LabelMismatch { .. } => {
                        Code::UnknownLabel
                    }
                    DomainError::UnknownOption { .. } => Code::UnknownOption,
                    DomainError::TextNotAllowed(_) => Code::TextNotAllowed,
                    DomainError::EmptyAnswer => Code::EmptyAnswer,
                    DomainError::TurnRunning(_) => Code::TurnRunning,
                    // Nothing is wrong with the request: the session moved on; try again.
                    DomainError::ChangedDuringCompaction => Code::WriteContention,
                    DomainError::AgentLimit { .. } => Code::AgentLimit,
                    DomainError::RevisionSuperseded { .. } => Code::RevisionSuperseded,
                };
                ApiError::new(code, d.to_string())
            }
            ServiceError::Store(s @ StoreError::Unavailable(_)) => ApiError::opaque(
                Code::StoreUnavailable,
                "the event store is unavailable; retry shortly",
                s,
            ),
            ServiceError::Store(s @ StoreError::Full(_)) => ApiError::opaque(
                Code::StoreFull,
                "the event store is full: nothing can be recorded until an operator frees space",
                s,
            ),
            ServiceError::Store(s @ StoreError::Corrupt { .. }) => {
                ApiError::opaque(Code::LogCorrupt, "the session log could not be read", s)
            }
            ServiceError::Store(s @ StoreError::Unencodable(_)) => {
                ApiError::opaque(Code::Internal, "the change could not be recorded", s)
            }
            ServiceError::Corrupt(f) => {
                ApiError::opaque(Code::LogCorrupt, "the session log could not be folded", f)
            }
            ServiceError::Contention => ApiError::new(Code::WriteContention, e.to_string()),
            ServiceError::InvalidForkPoint(_) => {
                ApiError::new(Code::InvalidForkPoint, e.to_string())
            }
            ServiceError::Quota(q) => q.into(),
            ServiceError::Provider(p) => ApiError::opaque(
                Code::ProviderFailed,
                "the model provider failed; retry shortly",
                p,
            ),
            ServiceError::AlreadyApplied { seq } => ApiError::new(
                Code::AlreadyApplied,
                format!(
                    "an earlier attempt of this request (same Idempotency-Key) was applied, up to \
                     event {seq}-0, but its response cannot be rebuilt because the log was \
                     compacted since: read the resource to see its state"
                ),
            ),
            ServiceError::NoEntropy(r) => {
                ApiError::opaque(Code::Internal, "no session id could be drawn", r)
            }
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.code.status()
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if let Some(cause) = &self.cause {
            tracing::error!(code = %self.code.as_str(), %cause, "request failed");
        }
        let body = Problem::new(self.code, status, self.detail.clone());
        let mut res = HttpResponse::build(status);
        res.insert_header((header::CONTENT_TYPE, "application/problem+json"));
        match self.retry_after {
            Some(secs) => {
                res.insert_header((header::RETRY_AFTER, secs.max(1).to_string()));
            }
            None if status == StatusCode::SERVICE_UNAVAILABLE => {
                res.insert_header((header::RETRY_AFTER, "1"));
            }
            None => {}
        }
        if status == StatusCode::UNAUTHORIZED {
            let error = if self.code == Code::TokenExpired {
                "Bearer error=\"invalid_token\", error_description=\"expired\""
            } else {
                "Bearer"
            };
            res.insert_header((header::WWW_AUTHENTICATE, error));
        }
        res.body(serde_json::to_string(&body).unwrap_or_default())
    }
}

/// A JSON body that may be omitted (an empty body means "all defaults"). Errors, including
/// an oversize body, are problems like any other.
pub struct OptionalJson<T>(pub T);

impl<T: serde::de::DeserializeOwned + Default + 'static> actix_web::FromRequest
    for OptionalJson<T>
{
    type Error = actix_web::Error;
    type Future = futures_util::future::LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(
        req: &actix_web::HttpRequest,
        payload: &mut actix_web::dev::Payload,
    ) -> Self::Future {
        let bytes = <actix_web::web::Bytes as actix_web::FromRequest>::from_request(req, payload);
        Box::pin(async move {
            let body = bytes.await.map_err(payload_error)?;
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(OptionalJson(T::default()));
            }
            let value: serde_json::Value = serde_json::from_slice(&body).map_err(json_error)?;
            // serde reads a struct from an array too (`[]` as "all defaults"): a body is an
            // object, as the spec says.
            if !value.is_object() {
                return Err(ApiError::new(
                    Code::InvalidBody,
                    "the request body must be a JSON object",
                )
                .into());
            }
            Ok(OptionalJson(
                serde_json::from_value(value).map_err(json_error)?,
            ))
        })
    }
}

fn json_error(e: serde_json::Error) -> ApiError {
    if e.is_data() {
        ApiError::new(
            Code::InvalidBody,
            format!("the request body does not fit this route: {e}"),
        )
    } else {
        ApiError::new(
            Code::MalformedJson,
            format!("the request body is not valid JSON: {e}"),
        )
    }
}

pub fn json_config() -> actix_web::web::JsonConfig {
    use actix_web::error::JsonPayloadError as E;
    actix_web::web::JsonConfig::default()
        .limit(MAX_BODY)
        .error_handler(|err, _req| {
            match err {
                E::Overflow { .. } | E::OverflowKnownLength { .. } => ApiError::new(
                    Code::PayloadTooLarge,
                    format!("the request body exceeds {MAX_BODY} bytes"),
                ),
                E::ContentType => ApiError::new(
                    Code::UnsupportedMediaType,
                    "send the body as JSON with `Content-Type: application/json`",
                ),
                E::Deserialize(e) => json_error(e),
                other => ApiError::new(
                    Code::MalformedJson,
                    format!("the request body could not be read: {other}"),
                ),
            }
            .into()
        })
}

pub fn payload_config() -> actix_web::web::PayloadConfig {
    actix_web::web::PayloadConfig::new(MAX_BODY)
}

pub fn query_config() -> actix_web::web::QueryConfig {
    actix_web::web::QueryConfig::default().error_handler(|err, _req| {
        ApiError::new(
            Code::InvalidQuery,
            format!("the query string is not valid here: {err}"),
        )
        .into()
    })
}

/// Turns actix's own payload errors (e.g. a `Bytes` body over the limit) into problems.
pub(crate) fn payload_error(e: actix_web::Error) -> ApiError {
    let status = e.as_response_error().status_code();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            Code::PayloadTooLarge,
            format!("the request body exceeds {MAX_BODY} bytes"),
        )
    } else {
        ApiError::new(
            Code::MalformedJson,
            format!("the request body could not be read: {e}"),
        )
    }
}
