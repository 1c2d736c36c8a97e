//! Which committed events a tenant's webhooks hear about, and what each delivery says.
//!
//! A webhook reports; it never decides. Five event types exist: a plan review opened
//! (`plan.review_requested`), a plan decided (`plan.approved`, `plan.revising`,
//! `plan.dismissed`) and a turn's end (`turn.ended`). Each is judged from one log event and the
//! session folded past it: a revision is decided once, so the fold at or after the event says
//! what the event made of it. A delivery is identified by its session, the event's seq and the
//! endpoint, so announcing the same event twice (a replica that adopts a turn, a keyed retry)
//! names the same delivery, which the queue keeps once.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::event::{EventKind, TurnEnded};
use super::plan::revisions::{is_review, sha256_hex, Revision, RevisionStatus};
use super::{Recorded, SessionId, SessionState};

/// What a webhook endpoint can subscribe to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum WebhookEvent {
    /// An `exit_plan_mode` submission opened a plan review (a question asked).
    #[serde(rename = "plan.review_requested")]
    PlanReviewRequested,
    /// The user approved a plan revision.
    #[serde(rename = "plan.approved")]
    PlanApproved,
    /// The user sent a plan back with feedback (Keep planning, or free text).
    #[serde(rename = "plan.revising")]
    PlanRevising,
    /// The user dismissed a plan review to talk instead.
    #[serde(rename = "plan.dismissed")]
    PlanDismissed,
    /// A turn ended (completed, cancelled, failed, step-limit).
    #[serde(rename = "turn.ended")]
    TurnEnded,
}

impl WebhookEvent {
    pub const ALL: [Self; 5] = [
        Self::PlanReviewRequested,
        Self::PlanApproved,
        Self::PlanRevising,
        Self::PlanDismissed,
        Self::TurnEnded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PlanReviewRequested => "plan.review_requested",
            Self::PlanApproved => "plan.approved",
            Self::PlanRevising => "plan.revising",
            Self::PlanDismissed => "plan.dismissed",
            Self::TurnEnded => "turn.ended",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == raw)
    }
}

/// One event worth a delivery: its type and the `data` of the payload.
#[derive(Clone, Debug, PartialEq)]
pub struct Notable {
    pub kind: WebhookEvent,
    pub seq: u64,
    pub committed_at: u64,
    pub data: Value,
}

/// What `e` (committed in `sid`, which `state` is folded at or past) means to webhooks, if
/// anything.
pub fn notable(state: &SessionState, sid: &SessionId, e: &Recorded) -> Option<Notable> {
    let agent = state.agents.get(&e.agent);
    let revision = |qid: &str| agent.and_then(|a| a.revisions.of_question(qid)).cloned();
    let (kind, extra) = match &e.kind {
        EventKind::QuestionAsked(q) if is_review(q) => {
            // As it was when the review opened, whatever became of it since.
            let r = revision(&q.id)?;
            let asked = Revision {
                status: RevisionStatus::Pending,
                feedback: None,
                decided_by: None,
                decided_at: None,
                ..(*r).clone()
            };
            (WebhookEvent::PlanReviewRequested, revision_data(&asked))
        }
        EventKind::QuestionAnswered(a) => decided(&*revision(&a.id)?)?,
        EventKind::QuestionDismissed(d) => decided(&*revision(&d.id)?)?,
        EventKind::TurnEnded(TurnEnded { turn, reason }) => (
            WebhookEvent::TurnEnded,
            json!({"turn": turn, "reason": reason}),
        ),
        _ => return None,
    };
    let mut data = json!({
        "session": sid.as_str(),
        "agent": e.agent.as_str(),
        "event_id": e.id.to_string(),
    });
    if let (Value::Object(data), Value::Object(extra)) = (&mut data, extra) {
        data.extend(extra);
    }
    Some(Notable {
        kind,
        seq: e.seq(),
        committed_at: e.committed_at,
        data,
    })
}

/// The event a closed review's revision reports, by what became of it.
fn decided(r: &Revision) -> Option<(WebhookEvent, Value)> {
    let kind = match r.status {
        RevisionStatus::Approved => WebhookEvent::PlanApproved,
        RevisionStatus::Revising => WebhookEvent::PlanRevising,
        RevisionStatus::Dismissed => WebhookEvent::PlanDismissed,
        RevisionStatus::Pending | RevisionStatus::Unavailable => return None,
    };
    Some((kind, revision_data(r)))
}

fn revision_data(r: &Revision) -> Value {
    json!({"question": r.question, "turn": r.turn, "revision": r})
}

/// The delivery id (`webhook-id`) of `seq` of `sid` to `endpoint`: the same every time the
/// event is announced, so a second announcement is recognised as the same delivery.
pub fn delivery_id(sid: &SessionId, seq: u64, endpoint: &str) -> String {
    let digest = sha256_hex(format!("{sid}/{seq}/{endpoint}").as_bytes());
    format!("msg_{}", &digest[..32])
}

/// The body of a delivery: Standard Webhooks' `{type, timestamp, data}`.
pub fn payload(n: &Notable) -> Value {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(n.committed_at);
    json!({
        "type": n.kind.as_str(),
        "timestamp": humantime::format_rfc3339_millis(at).to_string(),
        "data": n.data,
    })
}

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not delivered yet: waiting for its first attempt or its next one.
    Pending,
    /// The endpoint answered 2xx.
    Succeeded,
    /// Every attempt failed for 24 hours; no more are made.
    Failed,
}

/// One try at a delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Attempt {
    /// When it was sent.
    #[serde(with = "crate::domain::event::rfc3339_ms")]
    #[schema(value_type = String, example = "2026-12-02T10:25:02.456Z")]
    pub at: u64,
    /// The endpoint's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = 503)]
    pub status: Option<u16>,
    /// Why no answer came (timeout, connection refused, a refused destination…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[schema(example = 42)]
    pub duration_ms: u64,
}

/// One event sent (or to be sent) to one endpoint, with its attempts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Delivery {
    /// The delivery id, sent as `webhook-id` on every attempt: de-duplicate on it.
    #[schema(example = "msg_4f1c2a9d0b7e6c5a4f3e2d1c0b9a8f7e")]
    pub id: String,
    pub event: WebhookEvent,
    /// The session the event happened in.
    #[schema(example = "9f2c41d07a3e4b6c8d1e2f3a4b5c6d7e")]
    pub session: String,
    pub status: DeliveryStatus,
    /// The latest attempts, oldest first (at most 20 are kept).
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// When the next attempt is due, while the delivery is pending after a failure.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::domain::event::rfc3339_ms_opt"
    )]
    #[schema(value_type = Option<String>, example = "2026-12-02T10:25:04.456Z")]
    pub next_attempt_at: Option<u64>,
    /// When the event was committed.
    #[serde(with = "crate::domain::event::rfc3339_ms")]
    #[schema(value_type = String, example = "2026-12-02T10:25:02.123Z")]
    pub created_at: u64,
}

/// How long a delivery is retried before it is `failed` (`DSH_WEBHOOK_GIVE_UP_MS`, shorter only
/// in tests).
pub const GIVE_UP_MS: u64 = 24 * 3600 * 1000;
/// The longest wait between two attempts.
pub const MAX_BACKOFF_MS: u64 = 3600 * 1000;

/// The wait after attempt `n` (1-based) failed: `base`, doubling each time, at most
/// [`MAX_BACKOFF_MS`]; `None` once the next attempt would come more than `give_up_ms` (see
/// [`GIVE_UP_MS`]) after the event (`age_ms` old now).
pub fn backoff(base_ms: u64, n: u32, age_ms: u64, give_up_ms: u64) -> Option<u64> {
    let wait = base_ms
        .max(1)
        .saturating_mul(1u64 << n.saturating_sub(1).min(40))
        .min(MAX_BACKOFF_MS);
    (age_ms.saturating_add(wait) <= give_up_ms).then_some(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_read_back_and_nothing_else_does() {
        for e in WebhookEvent::ALL {
            assert_eq!(WebhookEvent::parse(e.as_str()), Some(e));
            assert_eq!(serde_json::to_value(e).unwrap(), e.as_str());
        }
        assert_eq!(WebhookEvent::parse("plan.approve"), None);
    }

    #[test]
    fn a_delivery_id_is_fixed_by_session_seq_and_endpoint() {
        let sid = SessionId::parse("s1").unwrap();
        let id = delivery_id(&sid, 7, "wh_1");
        assert_eq!(id, delivery_id(&sid, 7, "wh_1"));
        assert_ne!(id, delivery_id(&sid, 8, "wh_1"));
        assert_ne!(id, delivery_id(&sid, 7, "wh_2"));
        assert_eq!(id.len(), 36);
    }

    #[test]
    fn retries_back_off_exponentially_up_to_a_cap_and_stop_after_a_day() {
        assert_eq!(backoff(1000, 1, 0, GIVE_UP_MS), Some(1000));
        assert_eq!(backoff(1000, 2, 0, GIVE_UP_MS), Some(2000));
        assert_eq!(backoff(1000, 5, 0, GIVE_UP_MS), Some(16_000));
        assert_eq!(backoff(1000, 30, 0, GIVE_UP_MS), Some(MAX_BACKOFF_MS));
        assert_eq!(backoff(1000, 1, GIVE_UP_MS - 1000, GIVE_UP_MS), Some(1000));
        assert_eq!(backoff(1000, 1, GIVE_UP_MS - 999, GIVE_UP_MS), None);
    }
}
