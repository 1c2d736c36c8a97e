//! Limits that hold across replicas: the request rate of each API key and the quotas of each
//! tenant (live sessions, running turns, provider calls per minute, open event streams).
//!
//! The counting is the store's ([`LimitStore`]: atomic scripts in Redis, one lock in memory);
//! this facade owns what each replica keeps to call it rarely: its share of each key's rate
//! bucket ([`rate`]), the tenants' effective limits (cached [`TENANT_CACHE`]), when it last
//! refreshed a session's expiry, and the refresher of its open streams ([`streams`]).
//!
//! A session without a tenant (the server runs open, without credentials) counts against the
//! tenant named [`OPEN_TENANT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Settings;
use crate::domain::{SessionId, TenantId};
use crate::store::{Admission, CountedSet, LimitStore, StoreError, TenantOverrides};

pub mod admin;
mod quota;
pub mod rate;
mod streams;
mod turns;

pub use quota::{LimitError, Quota, QuotaKind};
pub use rate::RateDecision;
pub use streams::{StreamPermit, STREAM_REFRESH, STREAM_TTL};
pub use turns::{TurnHold, TURN_REFRESH, TURN_TTL};

/// The quota name of sessions that have no tenant (open mode).
pub const OPEN_TENANT: &str = "_open";
/// How long a replica trusts a tenant's limits before reading its overrides again.
pub const TENANT_CACHE: Duration = Duration::from_secs(5);
/// Sessions whose last expiry refresh a replica remembers.
const TOUCHED: usize = 100_000;

/// The quota name of a session's tenant.
pub fn tenant_name(tenant: Option<&TenantId>) -> &str {
    tenant.map_or(OPEN_TENANT, TenantId::as_str)
}

/// One tenant's effective limits: the server-wide defaults, each overridable per tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantLimits {
    /// How long an idle session is kept; zero keeps it until deleted.
    pub retention: Duration,
    pub max_sessions: u64,
    pub max_running_turns: u64,
    /// Per window (a minute, unless configured shorter for tests).
    pub max_provider_calls: u64,
    pub max_streams: u64,
}

impl TenantLimits {
    /// The server-wide defaults (`DSH_RETENTION`, `DSH_TENANT_MAX_*`).
    pub fn from_settings(s: &Settings) -> Self {
        Self {
            retention: s.retention,
            max_sessions: s.max_sessions,
            max_running_turns: s.max_running_turns,
            max_provider_calls: s.max_provider_calls,
            max_streams: s.max_streams,
        }
    }

    /// These limits with the tenant's overrides applied.
    pub fn with(mut self, o: &TenantOverrides) -> Self {
        if let Some(ms) = o.retention_ms {
            self.retention = Duration::from_millis(ms);
        }
        self.max_sessions = o.max_sessions.unwrap_or(self.max_sessions);
        self.max_running_turns = o.max_running_turns.unwrap_or(self.max_running_turns);
        self.max_provider_calls = o.max_provider_calls.unwrap_or(self.max_provider_calls);
        self.max_streams = o.max_streams.unwrap_or(self.max_streams);
        self
    }
}

pub struct Limits {
    store: Arc<dyn LimitStore>,
    defaults: TenantLimits,
    /// The provider-call window: a minute (shorter in tests).
    window: Duration,
    /// This process's token in stream members, unique across replicas.
    replica: String,
    tenants: Mutex<HashMap<String, (Instant, TenantLimits)>>,
    rate: rate::RateFront,
    streams: Arc<streams::Registry>,
    touched: quick_cache::sync::Cache<SessionId, Instant>,
}

impl Limits {
    /// The limits of `settings` over `store`; starts this replica's stream refresher (so it
    /// must be called on a Tokio runtime).
    pub fn new(store: Arc<dyn LimitStore>, settings: &Settings) -> Arc<Self> {
        let streams = Arc::new(streams::Registry::default());
        streams.start(store.clone());
        Arc::new(Self {
            rate: rate::RateFront::new(store.clone()),
            store,
            defaults: TenantLimits::from_settings(settings),
            window: Duration::from_millis(settings.provider_call_window_ms.max(1)),
            replica: format!(
                "{}#{}",
                settings.replica_id(),
                uuid::Uuid::now_v7().simple()
            ),
            tenants: Mutex::new(HashMap::new()),
            streams,
            touched: quick_cache::sync::Cache::new(TOUCHED),
        })
    }

    pub fn store(&self) -> &Arc<dyn LimitStore> {
        &self.store
    }

    /// Counts one request of API key `key_id`, whose rate is `rate` requests per second.
    pub async fn check_rate(&self, key_id: &str, rate: u32) -> Result<RateDecision, StoreError> {
        self.rate.check(key_id, rate).await
    }

    /// The tenant's effective limits (cached for [`TENANT_CACHE`]).
    pub async fn tenant_limits(
        &self,
        tenant: Option<&TenantId>,
    ) -> Result<TenantLimits, StoreError> {
        let name = tenant_name(tenant);
        let now = Instant::now();
        let cached = self.tenants().get(name).cloned();
        if let Some((_, limits)) = cached.filter(|(at, _)| now < *at + TENANT_CACHE) {
            return Ok(limits);
        }
        let limits = self
            .defaults
            .clone()
            .with(&self.store.overrides(name).await?);
        let mut tenants = self.tenants();
        // Tenants come and go: start over rather than grow without bound.
        if tenants.len() > 10_000 {
            tenants.clear();
        }
        tenants.insert(name.to_owned(), (now, limits.clone()));
        Ok(limits)
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, TenantLimits)>> {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn quota(&self, kind: QuotaKind, tenant: &str, limit: u64) -> Quota {
        Quota {
            kind,
            tenant: tenant.to_owned(),
            limit,
            retry_after: None,
        }
    }

    /// Counts a new session against its tenant's `max_sessions` until `retention` after its
    /// last write (zero: until [`Self::forget_session`]).
    pub async fn admit_session(
        &self,
        tenant: Option<&TenantId>,
        sid: &SessionId,
        retention: Duration,
    ) -> Result<(), LimitError> {
        let max = self.tenant_limits(tenant).await?.max_sessions;
        let name = tenant_name(tenant);
        let ttl = retention.as_millis() as u64;
        match self
            .store
            .admit(name, CountedSet::Sessions, sid.as_str(), ttl, max)
            .await?
        {
            Admission::Admitted => Ok(()),
            Admission::Full { .. } => Err(self.quota(QuotaKind::Sessions, name, max).into()),
        }
    }

    /// Stops counting a session (it was deleted, or its creation failed).
    pub async fn forget_session(
        &self,
        tenant: Option<&TenantId>,
        sid: &SessionId,
    ) -> Result<(), StoreError> {
        self.touched.remove(sid);
        let name = tenant_name(tenant);
        self.store
            .release(name, CountedSet::Sessions, sid.as_str())
            .await
    }

    /// Up to `at_most` of the tenant's live sessions, as its session quota counts them (for a
    /// tenant-wide event stream).
    pub async fn tenant_sessions(
        &self,
        tenant: Option<&TenantId>,
        at_most: usize,
    ) -> Result<Vec<SessionId>, StoreError> {
        let members = self
            .store
            .members(tenant_name(tenant), CountedSet::Sessions, at_most)
            .await?;
        // Only this service writes the set; a member that is no session id is skipped.
        Ok(members
            .iter()
            .filter_map(|m| SessionId::parse(m).ok())
            .collect())
    }

    /// A session was written: moves its expiry in the count to `retention` from now, at most
    /// once per tenth of the retention per replica, in the background. Nothing for a session
    /// kept until deleted.
    pub fn touch_session(
        self: &Arc<Self>,
        tenant: Option<&TenantId>,
        sid: &SessionId,
        retention: Duration,
    ) {
        if retention.is_zero() {
            return;
        }
        let now = Instant::now();
        let every = (retention / 10).max(Duration::from_secs(1));
        if self.touched.get(sid).is_some_and(|at| now < at + every) {
            return;
        }
        self.touched.insert(sid.clone(), now);
        let (limits, tenant, sid) = (self.clone(), tenant_name(tenant).to_owned(), sid.clone());
        tokio::spawn(async move {
            let ttl = retention.as_millis() as u64;
            if let Err(e) = limits.store.touch(&tenant, sid.as_str(), ttl).await {
                // Forget the throttle so the next write tries again.
                limits.touched.remove(&sid);
                tracing::warn!(session = %sid, error = %e, "refreshing a session's quota expiry failed");
            }
        });
    }

    /// Counts a turn about to start against its tenant's `max_running_turns`, for
    /// [`TURN_TTL`] unless refreshed. `member` names the turn, the same in every call.
    pub async fn admit_turn(
        &self,
        tenant: Option<&TenantId>,
        member: &str,
    ) -> Result<(), LimitError> {
        let max = self.tenant_limits(tenant).await?.max_running_turns;
        let name = tenant_name(tenant);
        let ttl = TURN_TTL.as_millis() as u64;
        match self
            .store
            .admit(name, CountedSet::Turns, member, ttl, max)
            .await?
        {
            Admission::Admitted => Ok(()),
            Admission::Full { .. } => Err(self.quota(QuotaKind::RunningTurns, name, max).into()),
        }
    }

    /// Keeps a running turn counted for another [`TURN_TTL`] (counting it again if it had
    /// expired: a turn adopted from a replica that died).
    pub async fn refresh_turn(
        &self,
        tenant: Option<&TenantId>,
        member: &str,
    ) -> Result<(), StoreError> {
        let one = [(
            tenant_name(tenant).to_owned(),
            CountedSet::Turns,
            member.to_owned(),
        )];
        self.store.refresh(&one, TURN_TTL.as_millis() as u64).await
    }

    /// Stops counting a turn (it ended, waits on a question, or moved to another replica).
    pub async fn end_turn(
        &self,
        tenant: Option<&TenantId>,
        member: &str,
    ) -> Result<(), StoreError> {
        self.store
            .release(tenant_name(tenant), CountedSet::Turns, member)
            .await
    }

    /// Counts a provider call in its tenant's window, or says when the window ends.
    pub async fn admit_provider_call(&self, tenant: Option<&TenantId>) -> Result<(), LimitError> {
        let max = self.tenant_limits(tenant).await?.max_provider_calls;
        let name = tenant_name(tenant);
        let window = self.window.as_millis() as u64;
        match self.store.count_call(name, window, max).await? {
            Admission::Admitted => Ok(()),
            Admission::Full { retry_after_ms, .. } => Err(Quota {
                retry_after: Some(Duration::from_millis(retry_after_ms.clamp(1, window))),
                ..self.quota(QuotaKind::ProviderCalls, name, max)
            }
            .into()),
        }
    }

    /// Counts an event stream about to open against its tenant's `max_streams`; it counts
    /// until the permit is dropped (or, if this replica dies, for [`STREAM_TTL`]).
    pub async fn admit_stream(
        &self,
        tenant: Option<&TenantId>,
    ) -> Result<StreamPermit, LimitError> {
        let max = self.tenant_limits(tenant).await?.max_streams;
        let name = tenant_name(tenant);
        let (id, member) = self.streams.member(&self.replica);
        let ttl = STREAM_TTL.as_millis() as u64;
        match self
            .store
            .admit(name, CountedSet::Streams, &member, ttl, max)
            .await?
        {
            Admission::Admitted => {
                self.streams.insert(id, name.to_owned(), member.clone());
                Ok(StreamPermit {
                    id,
                    tenant: name.to_owned(),
                    member,
                    registry: self.streams.clone(),
                    store: self.store.clone(),
                })
            }
            Admission::Full { .. } => Err(self.quota(QuotaKind::Streams, name, max).into()),
        }
    }

    /// Event streams open on this replica.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }
}
