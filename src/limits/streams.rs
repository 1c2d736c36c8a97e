//! Open event streams as counted members: each stream holds a [`StreamPermit`] whose member
//! expires [`STREAM_TTL`] after its last refresh. One task per replica refreshes all of its
//! open streams every [`STREAM_REFRESH`] in one round trip; dropping a permit (the stream
//! ended or its client went away) releases the member at once. A replica that dies stops
//! refreshing, so its streams stop counting within the ttl.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::store::{CountedSet, LimitStore};

/// How long an open stream counts without a refresh.
pub const STREAM_TTL: Duration = Duration::from_secs(30);
/// How often this replica refreshes its open streams.
pub const STREAM_REFRESH: Duration = Duration::from_secs(10);

/// This replica's open streams: id → (tenant, member).
#[derive(Default)]
pub struct Registry {
    next: AtomicU64,
    open: Mutex<HashMap<u64, (String, String)>>,
}

impl Registry {
    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (String, String)>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A member name unique across replicas (`replica` is this process's own token).
    pub(super) fn member(&self, replica: &str) -> (u64, String) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        (id, format!("{replica}-{id}"))
    }

    pub(super) fn insert(&self, id: u64, tenant: String, member: String) {
        self.open().insert(id, (tenant, member));
    }

    /// How many streams this replica has open.
    pub(super) fn len(&self) -> usize {
        self.open().len()
    }

    /// Starts the refresher; it ends when the registry is dropped.
    pub(super) fn start(self: &Arc<Self>, store: Arc<dyn LimitStore>) {
        let registry: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(STREAM_REFRESH);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                let members: Vec<_> = registry
                    .open()
                    .values()
                    .map(|(t, m)| (t.clone(), CountedSet::Streams, m.clone()))
                    .collect();
                drop(registry);
                let ttl = STREAM_TTL.as_millis() as u64;
                if let Err(e) = store.refresh(&members, ttl).await {
                    tracing::warn!(error = %e, streams = members.len(), "refreshing open streams failed; retrying at the next tick");
                }
            }
        });
    }
}

/// One open stream's place in its tenant's quota, released when dropped.
pub struct StreamPermit {
    pub(super) id: u64,
    pub(super) tenant: String,
    pub(super) member: String,
    pub(super) registry: Arc<Registry>,
    pub(super) store: Arc<dyn LimitStore>,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        self.registry.open().remove(&self.id);
        let (store, tenant, member) = (
            self.store.clone(),
            std::mem::take(&mut self.tenant),
            std::mem::take(&mut self.member),
        );
        // Without a runtime (process exit), the member expires by itself.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = store.release(&tenant, CountedSet::Streams, &member).await {
                    tracing::warn!(error = %e, "releasing a stream's quota failed; it expires");
                }
            });
        }
    }
}
