//! Refusals by a tenant quota: which limit, for whom, and when to try again; each knows its
//! problem code.

use std::time::Duration;

use crate::http::{ApiError, Code};
use crate::store::StoreError;

/// Which per-tenant limit refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaKind {
    Sessions,
    RunningTurns,
    ProviderCalls,
    Streams,
}

impl QuotaKind {
    /// The setting that raises it, as `tenants set` spells it.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Sessions => "max-sessions",
            Self::RunningTurns => "max-running-turns",
            Self::ProviderCalls => "max-provider-calls",
            Self::Streams => "max-streams",
        }
    }
}

/// A refusal by a tenant quota.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.detail())]
pub struct Quota {
    pub kind: QuotaKind,
    /// The tenant's name (`_open` when the server runs without credentials).
    pub tenant: String,
    pub limit: u64,
    /// For the provider-call window: when it ends.
    pub retry_after: Option<Duration>,
}

impl Quota {
    pub fn code(&self) -> Code {
        match self.kind {
            QuotaKind::Sessions => Code::SessionQuota,
            QuotaKind::RunningTurns => Code::TurnQuota,
            QuotaKind::ProviderCalls => Code::ProviderCallQuota,
            QuotaKind::Streams => Code::StreamQuota,
        }
    }

    /// What a developer reads in the problem document.
    pub fn detail(&self) -> String {
        let (who, limit, setting) = (&self.tenant, self.limit, self.kind.setting());
        match self.kind {
            QuotaKind::Sessions => format!(
                "tenant `{who}` has {limit} live sessions, its limit ({setting}); delete one or \
                 let one expire first"
            ),
            QuotaKind::RunningTurns => format!(
                "tenant `{who}` has {limit} turns running, its limit ({setting}); retry when one \
                 has ended"
            ),
            QuotaKind::ProviderCalls => format!(
                "tenant `{who}` made {limit} provider calls in this window, its limit \
                 ({setting} per minute); retry in {} s",
                self.retry_after.unwrap_or_default().as_secs_f64().ceil()
            ),
            QuotaKind::Streams => format!(
                "tenant `{who}` has {limit} event streams open, its limit ({setting}); close one \
                 first"
            ),
        }
    }
}

impl From<Quota> for ApiError {
    fn from(q: Quota) -> Self {
        let e = ApiError::new(q.code(), q.detail());
        match q.retry_after {
            Some(wait) => e.retry_after(wait.as_secs_f64().ceil() as u64),
            None => e,
        }
    }
}

/// Why a limit check did not admit: the quota, or the store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error(transparent)]
    Quota(#[from] Quota),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<LimitError> for crate::service::ServiceError {
    fn from(e: LimitError) -> Self {
        match e {
            LimitError::Quota(q) => Self::Quota(q),
            LimitError::Store(s) => Self::Store(s),
        }
    }
}

impl From<LimitError> for ApiError {
    fn from(e: LimitError) -> Self {
        crate::service::ServiceError::from(e).into()
    }
}
