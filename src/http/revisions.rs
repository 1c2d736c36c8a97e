//! Plan revisions over HTTP: an agent's submitted plans (list, one, the diff between two), each
//! folded from the log, so every replica answers the same, also after fork and compaction.

use actix_web::http::header;
use actix_web::{get, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::lists::page_limit;
use super::{ids, ApiError, Code, State};
use crate::auth::{self, Caller};
use crate::domain::plan::revisions::{Revision, RevisionStatus};
use crate::domain::{AgentId, SessionId};
use crate::service::ServiceError;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RevisionsQuery {
    /// Only the revisions with this status (default: all), e.g. `approved`: what the user
    /// agreed to.
    #[param(inline)]
    pub status: Option<RevisionStatus>,
    /// Revisions per page, 1-200 (default 50).
    #[param(minimum = 1, maximum = 200, example = 50)]
    pub limit: Option<u32>,
    /// Opaque: the `next_cursor` of the previous page. Omit it for the first revisions.
    pub cursor: Option<String>,
}

/// A page of an agent's plan revisions, oldest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RevisionList {
    pub revisions: Vec<Revision>,
    /// Pass as `cursor` for the next (newer) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "r50")]
    pub next_cursor: Option<String>,
    /// True when more revisions follow.
    pub has_more: bool,
}

/// A cursor as clients see it: the number of the last revision listed, behind a tag.
fn cursor(number: u32) -> String {
    format!("r{number}")
}

fn parse_cursor(raw: &str) -> Result<u32, ApiError> {
    raw.strip_prefix('r')
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidQuery,
                format!(
                    "`{}` is not a cursor of this list: pass the `next_cursor` of a page as it came",
                    raw.chars().take(40).collect::<String>()
                ),
            )
        })
}

/// A revision number: 1 or more, in decimal.
fn number(raw: &str, bad: impl FnOnce(String) -> ApiError) -> Result<u32, ApiError> {
    match raw.parse::<u32>() {
        Ok(n) if n >= 1 && raw.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(bad(format!(
            "`{}` is not a revision number: revisions are numbered 1, 2, …",
            raw.chars().take(40).collect::<String>()
        ))),
    }
}

fn not_found(aid: &AgentId, n: u32) -> ApiError {
    ApiError::new(
        Code::RevisionNotFound,
        format!("agent `{aid}` has no plan revision {n}"),
    )
}

/// The agent's revisions, after the guard and the composition check.
async fn revisions_of(
    state: &State,
    caller: &Caller,
    path: &(String, String),
) -> Result<(AgentId, Vec<std::sync::Arc<Revision>>), ApiError> {
    state.require_plan_mode()?;
    let (sid, aid): (SessionId, AgentId) = ids(path)?;
    state.guard(caller, &sid, Some(&aid), auth::READ).await?;
    let session = state.sessions.state(&sid).await?;
    let agent = session.agent(&aid).map_err(ServiceError::from)?;
    Ok((aid, agent.revisions.all().to_vec()))
}

/// An agent's plan revisions.
///
/// Every `exit_plan_mode` submission that opened a plan review, oldest first: its number, the
/// digest and text of the plan, when and in which step it was submitted, the review question,
/// and what became of it (`pending`, `approved`, `revising` with the feedback, `dismissed`,
/// `unavailable`), by whom and when. `?status=approved` answers "what did the user approve".
#[utoipa::path(
    tag = "plan",
    operation_id = "listPlanRevisions",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id"), RevisionsQuery),
    responses(
        (status = 200, description = "A page of the agent's plan revisions, oldest first", body = RevisionList),
    )
)]
#[get("/v1/sessions/{sid}/agents/{aid}/plans")]
pub async fn list_revisions(
    state: State,
    caller: Caller,
    path: web::Path<(String, String)>,
    query: web::Query<RevisionsQuery>,
) -> Result<web::Json<RevisionList>, ApiError> {
    let limit = page_limit(query.limit)?;
    let after = query.cursor.as_deref().map(parse_cursor).transpose()?;
    let (_, all) = revisions_of(&state, &caller, &path).await?;
    let mut matching = all
        .iter()
        .filter(|r| after.is_none_or(|a| r.number > a))
        .filter(|r| query.status.is_none_or(|s| r.status == s));
    let revisions: Vec<Revision> = matching
        .by_ref()
        .take(limit)
        .map(|r| (**r).clone())
        .collect();
    let has_more = matching.next().is_some();
    let next_cursor = revisions
        .last()
        .filter(|_| has_more)
        .map(|r| cursor(r.number));
    Ok(web::Json(RevisionList {
        revisions,
        next_cursor,
        has_more,
    }))
}

/// One plan revision.
///
/// Its `ETag` is the revision's digest: send it back as `If-Match` when you answer its review,
/// so the answer decides exactly the plan you read (409 `revision-superseded` otherwise).
#[utoipa::path(
    tag = "plan",
    operation_id = "getPlanRevision",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id"),
           ("rev" = u32, Path, description = "Revision number (1, 2, …)", minimum = 1)),
    responses(
        (status = 200, description = "The revision", body = Revision,
         headers(("ETag" = String, description = "The revision's digest, quoted: `\"sha256:<hex>\"`"))),
    )
)]
#[get("/v1/sessions/{sid}/agents/{aid}/plans/{rev}")]
pub async fn get_revision(
    state: State,
    caller: Caller,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (sid, aid, rev) = path.into_inner();
    let n = number(&rev, |m| ApiError::new(Code::InvalidId, m))?;
    let (aid, all) = revisions_of(&state, &caller, &(sid, aid)).await?;
    let r = all.get(n as usize - 1).ok_or_else(|| not_found(&aid, n))?;
    Ok(HttpResponse::Ok()
        .insert_header((header::ETAG, format!("\"{}\"", r.digest)))
        .json(&**r))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DiffQuery {
    /// The revision to compare with (the old side); default: the one before (none for 1).
    #[param(value_type = Option<u32>, minimum = 1, example = 1)]
    pub against: Option<String>,
}

/// How one plan revision differs from another.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RevisionDiff {
    /// The revision shown (the new side, `+++`).
    #[schema(example = 2)]
    pub revision: u32,
    /// The revision it is compared with (the old side, `---`); absent for revision 1 compared
    /// with nothing (every line is added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = 1)]
    pub against: Option<u32>,
    /// A unified diff of the plans' lines (`--- revision 1`, `+++ revision 2`, `@@` hunks with
    /// three lines of context); empty when the texts are equal.
    #[schema(
        example = "--- revision 1\n+++ revision 2\n@@ -1,3 +1,3 @@\n # Plan\n-1. Fix it.\n+1. Fix it, with SSO.\n"
    )]
    pub diff: String,
}

/// The diff between two plan revisions.
///
/// A unified diff from `against` (default: the revision before) to `rev`, made with the
/// `similar` crate: what the model changed between two submissions, e.g. after the user's
/// feedback.
#[utoipa::path(
    tag = "plan",
    operation_id = "getPlanRevisionDiff",
    params(("sid" = String, Path, description = "Session id"), ("aid" = String, Path, description = "Agent id"),
           ("rev" = u32, Path, description = "Revision number (1, 2, …)", minimum = 1), DiffQuery),
    responses(
        (status = 200, description = "The unified diff", body = RevisionDiff),
    )
)]
#[get("/v1/sessions/{sid}/agents/{aid}/plans/{rev}/diff")]
pub async fn diff_revisions(
    state: State,
    caller: Caller,
    path: web::Path<(String, String, String)>,
    query: web::Query<DiffQuery>,
) -> Result<web::Json<RevisionDiff>, ApiError> {
    let (sid, aid, rev) = path.into_inner();
    let n = number(&rev, |m| ApiError::new(Code::InvalidId, m))?;
    let against = match query.against.as_deref() {
        Some(raw) => Some(number(raw, |m| {
            ApiError::new(Code::InvalidQuery, format!("against: {m}"))
        })?),
        None => n.checked_sub(1).filter(|p| *p >= 1),
    };
    let (aid, all) = revisions_of(&state, &caller, &(sid, aid)).await?;
    let find = |n: u32| all.get(n as usize - 1).ok_or_else(|| not_found(&aid, n));
    let new = find(n)?;
    let old = against.map(find).transpose()?;
    let old_name = against.map_or("/dev/null".to_owned(), |a| format!("revision {a}"));
    let diff = unified(
        old.map_or("", |o| &o.text),
        &new.text,
        (&old_name, &format!("revision {n}")),
    );
    Ok(web::Json(RevisionDiff {
        revision: n,
        against,
        diff,
    }))
}

/// The unified diff of two texts' lines, given up past a time budget for pathological inputs
/// (the diff is then coarser, never wrong).
fn unified(old: &str, new: &str, names: (&str, &str)) -> String {
    similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .timeout(std::time::Duration::from_millis(200))
        .diff_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(names.0, names.1)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_numbers_and_cursors_read_back_and_anything_else_is_refused() {
        let bad = |m: String| ApiError::new(Code::InvalidId, m);
        assert_eq!(number("7", bad).unwrap(), 7);
        for raw in ["0", "-1", "+1", "1.0", "x", "", "99999999999"] {
            assert_eq!(number(raw, bad).unwrap_err().code, Code::InvalidId, "{raw}");
        }
        assert_eq!(parse_cursor(&cursor(12)).unwrap(), 12);
        for raw in ["", "r", "12", "r-1", "rx"] {
            assert_eq!(
                parse_cursor(raw).unwrap_err().code,
                Code::InvalidQuery,
                "{raw}"
            );
        }
    }

    #[test]
    fn a_unified_diff_names_both_revisions_and_is_empty_for_equal_texts() {
        let d = unified("a\nb\nc\n", "a\nB\nc\n", ("revision 1", "revision 2"));
        assert_eq!(
            d,
            "--- revision 1\n+++ revision 2\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
        assert_eq!(
            unified("same\n", "same\n", ("revision 1", "revision 2")),
            ""
        );
    }
}
