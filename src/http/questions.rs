//! Questions: list, answer (first answer wins), dismiss. An answer resumes the waiting turn
//! on this replica, whichever replica started it.

use crate::auth::{self, Caller};
use actix_web::http::header;
use actix_web::{get, post, web, HttpRequest};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::error::OptionalJson;
use super::{session_id, ApiError, Code, State};
use crate::domain::plan::revisions::Named;
use crate::domain::questions::{QuestionStatus, QuestionView, Reply};
use crate::domain::{AgentId, SessionId};
use crate::service::Decided;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QuestionQuery {
    /// Which questions: `open` (the default), `answered`, `dismissed`, `aborted` (closed
    /// because their turn ended) or `all`.
    #[param(example = "open")]
    pub status: Option<String>,
    /// Deprecated alias of `status` (same values); if both are given they must agree.
    #[deprecated = "use `status`"]
    pub state: Option<String>,
}

#[derive(Debug, serde::Serialize, Deserialize, ToSchema)]
pub struct QuestionList {
    pub questions: Vec<QuestionView>,
}

/// The statuses `status` selects, `None` for all.
#[allow(deprecated)] // reads the alias
fn status_filter(query: &QuestionQuery) -> Result<Option<QuestionStatus>, ApiError> {
    let wanted = match (query.status.as_deref(), query.state.as_deref()) {
        (Some(status), Some(state)) if status != state => {
            return Err(ApiError::new(
                Code::InvalidQuery,
                "`state` is a deprecated alias of `status`; send only `status`",
            ))
        }
        (Some(v), _) | (None, Some(v)) => v,
        (None, None) => "open",
    };
    Ok(Some(match wanted {
        "all" => return Ok(None),
        "open" => QuestionStatus::Open,
        "answered" => QuestionStatus::Answered,
        "dismissed" => QuestionStatus::Dismissed,
        "aborted" => QuestionStatus::Aborted,
        other => {
            return Err(ApiError::new(
                Code::InvalidQuery,
                format!(
                    "status must be `open`, `answered`, `dismissed`, `aborted` or `all`, not `{}`",
                    other.chars().take(40).collect::<String>()
                ),
            ))
        }
    }))
}

/// The session's questions, oldest first.
///
/// The open ones unless `status` asks for others (`answered`, `dismissed`, `aborted`, `all`),
/// each with its options (`id`, `kind`, display `label`) and, once closed, its answer.
#[utoipa::path(
    tag = "questions",
    operation_id = "listQuestions",
    params(("sid" = String, Path, description = "Session id"), QuestionQuery),
    responses(
        (status = 200, description = "The questions, oldest first", body = QuestionList),
    )
)]
#[get("/v1/sessions/{sid}/questions")]
pub async fn list_questions(
    state: State,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<QuestionQuery>,
) -> Result<web::Json<QuestionList>, ApiError> {
    state.require_questions()?;
    let sid = session_id(&path)?;
    let wanted = status_filter(&query)?;
    state.guard(&caller, &sid, None, auth::READ).await?;
    let session = state.sessions.state(&sid).await?;
    let mut questions: Vec<_> = session
        .questions
        .values()
        .filter(|q| wanted.is_none_or(|w| q.state == w))
        .map(|q| q.view())
        .collect();
    questions.sort_by_key(|q| q.asked_at);
    Ok(web::Json(QuestionList { questions }))
}

/// One question of the session.
///
/// In whatever state it is (404 `question-not-found` for an id the session never asked).
#[utoipa::path(
    tag = "questions",
    operation_id = "getQuestion",
    params(("sid" = String, Path, description = "Session id"), ("qid" = String, Path, description = "Question id")),
    responses(
        (status = 200, description = "The question, in any state", body = QuestionView),
    )
)]
#[get("/v1/sessions/{sid}/questions/{qid}")]
pub async fn get_question(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<web::Json<QuestionView>, ApiError> {
    state.require_questions()?;
    let (sid, qid) = question_ids(&path)?;
    state.guard(&caller, &sid, None, auth::READ).await?;
    let session = state.sessions.state(&sid).await?;
    let question = session.questions.get(&qid).map(|q| q.view());
    question.map(web::Json).ok_or_else(|| missing(&qid))
}

fn missing(qid: &str) -> ApiError {
    ApiError::new(
        Code::QuestionNotFound,
        format!("question `{qid}` does not exist"),
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"option": "keep_planning", "text": "Also cover SSO logins."}))]
pub struct AnswerBody {
    /// The `id` of one of the question's options, e.g. `approve` or `keep_planning`; an id it
    /// does not offer gets 422 `unknown-option`.
    #[schema(example = "approve")]
    pub option: Option<String>,
    /// Deprecated: names an option by its label as offered (`Approve`), so it breaks as soon
    /// as a label is localized; send `option` instead. A label that is not offered gets 422
    /// `unknown-label`, and so does one that names another option than `option`.
    #[schema(deprecated)]
    pub label: Option<String>,
    /// Free text (when the question allows it), alone or with an option.
    pub text: Option<String>,
    /// For a plan review: the number of the plan revision you decide (as you read it). Another
    /// than the one the review decides gets 409 `revision-superseded` and appends nothing.
    /// `If-Match: "<digest>"` says the same by the revision's digest.
    #[schema(minimum = 1, example = 2)]
    pub revision: Option<u32>,
}

/// Body of `POST …/dismiss` (may be empty).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DismissBody {
    /// For a plan review: the number of the plan revision you dismiss (as you read it), as in an
    /// answer: another than the one the review decides gets 409 `revision-superseded`.
    #[schema(minimum = 1, example = 2)]
    pub revision: Option<u32>,
}

/// The plan revision a decision names: `revision` from the body, digests from `If-Match`.
fn named(req: &HttpRequest, revision: Option<u32>) -> Result<Named, ApiError> {
    if revision == Some(0) {
        return Err(ApiError::new(
            Code::InvalidBody,
            "`revision` is a revision number: 1, 2, …",
        ));
    }
    Ok(Named {
        number: revision,
        digests: if_match(req),
    })
}

/// The digests `If-Match` lists (`None` without the header, or with `*`). A weak tag never
/// matches (strong comparison), and anything that is not a digest matches no revision.
fn if_match(req: &HttpRequest) -> Option<Vec<String>> {
    let values = req.headers().get_all(header::IF_MATCH);
    let mut tags = Vec::new();
    for value in values {
        let raw = String::from_utf8_lossy(value.as_bytes());
        for tag in raw.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if tag == "*" {
                return None;
            }
            if !tag.starts_with("W/") {
                tags.push(tag.trim_matches('"').to_owned());
            }
        }
    }
    (!tags.is_empty() || req.headers().contains_key(header::IF_MATCH)).then_some(tags)
}

fn question_ids(path: &(String, String)) -> Result<(SessionId, String), ApiError> {
    let sid = session_id(&path.0)?;
    let qid = &path.1;
    if qid.is_empty()
        || qid.len() > 128
        || !qid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(ApiError::new(
            Code::InvalidId,
            format!(
                "`{}` is not a question id",
                qid.chars().take(80).collect::<String>()
            ),
        ));
    }
    Ok((sid, qid.clone()))
}

/// Refuses unless the caller may answer `qid` (an agent-scoped token only its agent's).
async fn guard_question(
    state: &State,
    caller: &Caller,
    sid: &SessionId,
    qid: &str,
) -> Result<(), ApiError> {
    let action = auth::ANSWER;
    state.guard(caller, sid, None, action).await?;
    if let Caller::Token { claims, .. } = caller {
        if claims.agt.is_some() {
            // The agent a question belongs to never changes; an unknown one answers 404 later.
            let session = state.sessions.state(sid).await?;
            let agent = session.questions.get(qid).map(|q| q.agent.clone());
            state.guard(caller, sid, agent.as_ref(), action).await?;
        }
    }
    Ok(())
}

/// The question as the close left it.
fn closed(qid: &str, done: Decided<AgentId>) -> Result<web::Json<QuestionView>, ApiError> {
    let question = done.state.questions.get(qid).map(|q| q.view());
    question.map(web::Json).ok_or_else(|| missing(qid))
}

/// Answer an open question.
///
/// With an `option` id, free `text`, or both. The first answer wins: a later answer or dismiss gets 409 and appends nothing. The recorded answer names the option
/// by id (and its label, for readability); a plan review decides by the option's `kind`.
///
/// A plan review decides exactly one plan revision (`revision` in the question, `GET …/plans`).
/// Name it with `revision` or `If-Match: "<digest>"` and the answer is refused with 409
/// `revision-superseded` (appending nothing) unless that is the revision this review decides
/// and no newer submission superseded it (checked before `question-closed`): two reviewers can
/// never decide a plan one of them did not see.
#[utoipa::path(
    tag = "questions",
    operation_id = "answerQuestion",
    params(("sid" = String, Path, description = "Session id"), ("qid" = String, Path, description = "Question id"),
           ("If-Match" = Option<String>, Header, description = "`\"<digest>\"` of the plan revision you decide (its `ETag`); another gets 409 `revision-superseded`")),
    request_body(content = AnswerBody, examples(
        ("approve" = (summary = "Approve the plan", value = json!({"option": "approve"}))),
        ("keep_planning" = (summary = "Keep planning, with feedback", value = json!({"option": "keep_planning", "text": "Also cover the logout path"}))),
        ("text" = (summary = "Free text only", value = json!({"text": "Split it into two steps"}))),
        ("revision" = (summary = "Approve exactly revision 2", value = json!({"option": "approve", "revision": 2})))
    )),
    responses(
        (status = 200, description = "The question as this answer closed it", body = QuestionView),
    )
)]
#[post("/v1/sessions/{sid}/questions/{qid}/answer")]
pub async fn answer(
    state: State,
    caller: Caller,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    body: web::Json<AnswerBody>,
) -> Result<web::Json<QuestionView>, ApiError> {
    state.require_questions()?;
    let (sid, qid) = question_ids(&path)?;
    guard_question(&state, &caller, &sid, &qid).await?;
    let AnswerBody {
        option,
        label,
        text,
        revision,
    } = body.into_inner();
    let revision = named(&req, revision)?;
    let by = caller.principal();
    let reply = Reply {
        option,
        label,
        text,
        revision,
    };
    let id = qid.clone();
    let decide =
        move |s: &crate::domain::SessionState| s.decide_answer(&id, reply.clone(), by.clone());
    let done = state.engine.close_question(&sid, &qid, decide).await?;
    closed(&qid, done)
}

/// Dismiss an open question.
///
/// The user closes it to talk instead: the waiting tool call fails and the model is told to
/// wait for the user's message. With `revision` in the body or `If-Match: "<digest>"`, only if
/// the review decides that plan revision (409 `revision-superseded` otherwise, appending
/// nothing), as for an answer.
#[utoipa::path(
    tag = "questions",
    operation_id = "dismissQuestion",
    params(("sid" = String, Path, description = "Session id"), ("qid" = String, Path, description = "Question id"),
           ("If-Match" = Option<String>, Header, description = "`\"<digest>\"` of the plan revision you decide (its `ETag`); another gets 409 `revision-superseded`")),
    request_body(content = Option<DismissBody>, description = "May be empty", example = json!({"revision": 2})),
    responses(
        (status = 200, description = "The question, dismissed", body = QuestionView),
    )
)]
#[post("/v1/sessions/{sid}/questions/{qid}/dismiss")]
pub async fn dismiss(
    state: State,
    caller: Caller,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    body: OptionalJson<DismissBody>,
) -> Result<web::Json<QuestionView>, ApiError> {
    state.require_questions()?;
    let (sid, qid) = question_ids(&path)?;
    guard_question(&state, &caller, &sid, &qid).await?;
    let revision = named(&req, body.0.revision)?;
    let by = caller.principal();
    let id = qid.clone();
    let decide =
        move |s: &crate::domain::SessionState| s.decide_dismiss(&id, &revision, by.clone());
    let done = state.engine.close_question(&sid, &qid, decide).await?;
    closed(&qid, done)
}
