//! Announcing committed events to the tenant's webhooks: after a commit, and before the
//! decision's caller hears of it (an HTTP answer, a turn runner's next step or its lease's
//! release), each event a subscribed endpoint wants becomes a job in the delivery queue.
//!
//! Announcing is idempotent (a job's id is its session, the event's seq and the endpoint, and
//! the queue keeps an id once), so it is done again wherever a commit may have been made
//! without its announcement: a keyed retry that finds its commit made, and a replica that
//! adopts a turn ([`Sessions::announce_recent`]). A failure to announce is logged, never
//! answered: the commit stands.

use std::sync::Arc;

use super::{ServiceError, Sessions};
use crate::domain::webhooks::{delivery_id, notable, payload, Delivery, DeliveryStatus, Notable};
use crate::domain::{Recorded, SessionId, SessionState};
use crate::limits::tenant_name;
use crate::store::redis::lease_group;
use crate::store::webhooks::{Job, Recording, SEEN_MS};
use crate::store::{now_ms, StoreError, WebhookStore};

/// Events of a session's log end announced again when a replica adopts one of its turns: the
/// last commits of the replica that died, with room for what was committed after them.
pub const RECENT: usize = 64;

/// Whether an event committed at `committed_at` may still be queued at `now` (ms): only within
/// half the life of a queued id's marker ([`SEEN_MS`]; the other half covers clocks that
/// disagree). An older event may have been delivered already and its marker be gone, so
/// announcing it again (a turn of an old session adopted or cancelled) would deliver it twice,
/// days later; and its retries would be over anyway.
pub fn announceable(committed_at: u64, now: u64) -> bool {
    now.saturating_sub(committed_at) < SEEN_MS / 2
}

impl Sessions {
    /// Announces these sessions' events to their tenants' webhooks.
    pub fn with_webhooks(mut self, store: Arc<dyn WebhookStore>) -> Self {
        self.webhooks = Some(store);
        self
    }

    /// Queues the deliveries `events` (committed in `sid`; `state` is folded at or past them)
    /// make. Reads the tenant's endpoints only when an event is one webhooks report.
    pub(super) async fn announce(
        &self,
        sid: &SessionId,
        state: &SessionState,
        events: &[Recorded],
    ) {
        let Some(store) = &self.webhooks else { return };
        let notable: Vec<_> = events
            .iter()
            .filter_map(|e| notable(state, sid, e))
            .collect();
        if notable.is_empty() {
            return;
        }
        let tenant = tenant_name(state.terms.tenant.as_ref()).to_owned();
        let (store, sid) = (store.clone(), sid.clone());
        // A task of its own, awaited: a caller that goes away (a client that hung up) does not
        // cancel it halfway.
        let queued = tokio::spawn(async move {
            if let Err(e) = queue(store.as_ref(), &tenant, &sid, &notable).await {
                tracing::warn!(session = %sid, error = %e, "queueing webhook deliveries failed; they are not sent");
            }
        });
        if let Err(e) = queued.await {
            tracing::error!(error = %e, "queueing webhook deliveries panicked");
        }
    }

    /// Announces the last [`RECENT`] events of `sid` again (a replica adopting a turn: the
    /// replica that ran it may have died between a commit and its announcement).
    pub async fn announce_recent(&self, sid: &SessionId) -> Result<(), ServiceError> {
        if self.webhooks.is_none() {
            return Ok(());
        }
        let state = self.state(sid).await?;
        let from = state.seq.saturating_sub(RECENT as u64);
        let events = self.log.read(sid, from, RECENT).await?;
        self.announce(sid, &state, &events).await;
        Ok(())
    }
}

async fn queue(
    store: &dyn WebhookStore,
    tenant: &str,
    sid: &SessionId,
    notable: &[Notable],
) -> Result<(), StoreError> {
    let now = now_ms();
    let notable: Vec<_> = notable
        .iter()
        .filter(|n| announceable(n.committed_at, now))
        .collect();
    if notable.is_empty() {
        return Ok(());
    }
    let endpoints = store.endpoints(tenant).await?;
    for n in notable {
        let body = payload(n).to_string();
        for ep in endpoints.iter().filter(|ep| ep.events.contains(&n.kind)) {
            let job = Job {
                id: delivery_id(sid, n.seq, &ep.id),
                tenant: tenant.to_owned(),
                endpoint: ep.id.clone(),
                event: n.kind,
                session: sid.to_string(),
                group: lease_group(sid.as_str()),
                created_at: n.committed_at,
                attempts: 0,
                body: body.clone(),
            };
            if !store.enqueue(&job).await? {
                continue;
            }
            let delivery = Delivery {
                id: job.id.clone(),
                event: n.kind,
                session: job.session.clone(),
                status: DeliveryStatus::Pending,
                attempts: Vec::new(),
                next_attempt_at: None,
                created_at: n.committed_at,
            };
            store
                .record(Recording {
                    tenant,
                    endpoint: &ep.id,
                    delivery: &delivery,
                    attempt: None,
                    create_only: true,
                })
                .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_queued_only_while_its_marker_would_still_be_there() {
        let now = 10 * SEEN_MS;
        assert!(announceable(now, now));
        assert!(announceable(now - 3600 * 1000, now));
        assert!(announceable(now + 5000, now), "a clock a little behind");
        assert!(!announceable(now - SEEN_MS / 2, now));
        assert!(
            !announceable(now - 3 * 24 * 3600 * 1000, now),
            "a turn.ended of three days ago, announced again as its session's recent events"
        );
    }
}
