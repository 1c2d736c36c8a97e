//! A running turn's place in its tenant's `max_running_turns`: admitted where the turn starts
//! ([`super::Limits::admit_turn`]), then held by its runner with a [`TurnHold`] that refreshes
//! it every [`TURN_REFRESH`] and releases it when the runner lets go. A runner that dies (its
//! replica crashed) stops refreshing, so its turn stops counting within [`TURN_TTL`].
//!
//! "Running" means a runner is on it: a turn waiting on a question holds no place.

use std::sync::Arc;
use std::time::Duration;

use super::Limits;
use crate::domain::TenantId;

/// How long a running turn counts without a refresh.
pub const TURN_TTL: Duration = Duration::from_secs(30);
/// How often a runner refreshes its turn.
pub const TURN_REFRESH: Duration = Duration::from_secs(10);

/// Keeps a turn counted while it lives; releases it when dropped.
pub struct TurnHold {
    limits: Arc<Limits>,
    tenant: Option<TenantId>,
    member: String,
    refresher: tokio::task::JoinHandle<()>,
}

impl Limits {
    /// Holds `member` (a turn this replica runs) in its tenant's count until the hold is
    /// dropped, refreshing it now and every [`TURN_REFRESH`]. Never refuses: the turn was
    /// admitted when it started, or was adopted and must finish.
    pub fn hold_turn(self: &Arc<Self>, tenant: Option<TenantId>, member: String) -> TurnHold {
        let (limits, t, m) = (self.clone(), tenant.clone(), member.clone());
        let refresher = tokio::spawn(async move {
            let mut tick = tokio::time::interval(TURN_REFRESH);
            loop {
                tick.tick().await;
                if let Err(e) = limits.refresh_turn(t.as_ref(), &m).await {
                    tracing::warn!(turn = %m, error = %e, "refreshing a running turn's quota failed");
                }
            }
        });
        TurnHold {
            limits: self.clone(),
            tenant,
            member,
            refresher,
        }
    }
}

impl Drop for TurnHold {
    fn drop(&mut self) {
        self.refresher.abort();
        let (limits, tenant, member) = (
            self.limits.clone(),
            self.tenant.take(),
            std::mem::take(&mut self.member),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = limits.end_turn(tenant.as_ref(), &member).await {
                    tracing::warn!(turn = %member, error = %e, "releasing a turn's quota failed; it expires");
                }
            });
        }
    }
}
