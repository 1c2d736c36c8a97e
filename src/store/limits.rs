//! The storage seam for limits that must hold across replicas: a request-rate bucket per API
//! key, and per-tenant quotas (counted sets of live things, a per-window call counter, and the
//! tenant's own overrides of the server-wide limits). The counted set of live sessions doubles
//! as the tenant's session list: beside it, each session's place in the creation order, kept
//! and dropped together with it, so the list shows exactly the sessions the quota counts.
//!
//! Every check is one atomic step in the store (one Lua script on one key in Redis, one lock
//! in memory) on the store's own clock, so replicas with drifting clocks still agree. Keys are
//! hash-tagged per API key (`{k:<key id>}`) or per tenant (`{t:<tenant>}`) and no call touches
//! two of them, so the model moves to Redis Cluster unchanged.

use futures_util::future::BoxFuture;

use super::StoreResult;

/// What one take from a key's bucket left (rate `r` per second, room for `r`: one second's
/// worth, so N replicas sharing the bucket never pass more than `r × seconds + r`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Requests granted by this take, at most the `n` asked for.
    pub granted: u32,
    /// Requests the bucket would still grant right now.
    pub remaining: u32,
    /// Milliseconds until one more request would be granted (0 when `remaining > 0`).
    pub retry_after_ms: u64,
    /// Milliseconds until the bucket is full again.
    pub reset_ms: u64,
}

/// The per-tenant sets of live things, each member scored by its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CountedSet {
    /// Live sessions, scored by when their retention runs out (never, for 0).
    Sessions,
    /// Turns a runner is running, scored by a short ttl the runner keeps refreshing.
    Turns,
    /// Open event streams, scored by a short ttl the replica's refresher keeps refreshing.
    Streams,
}

impl CountedSet {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sessions => "sessions",
            Self::Turns => "turns",
            Self::Streams => "streams",
        }
    }
}

/// The answer to an admission into a counted set or a call window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    /// Already at the limit: `live` members (or calls this window); for a window, when it ends.
    Full {
        live: u64,
        retry_after_ms: u64,
    },
}

/// A tenant's own limits, each overriding the server-wide default when set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantOverrides {
    pub retention_ms: Option<u64>,
    pub max_sessions: Option<u64>,
    pub max_running_turns: Option<u64>,
    pub max_provider_calls: Option<u64>,
    pub max_streams: Option<u64>,
}

impl TenantOverrides {
    /// The stored field names, as the Redis hash holds them.
    pub const FIELDS: [&'static str; 5] = [
        "retention_ms",
        "max_sessions",
        "max_running_turns",
        "max_provider_calls",
        "max_streams",
    ];

    pub fn fields(&self) -> [(&'static str, Option<u64>); 5] {
        [
            (Self::FIELDS[0], self.retention_ms),
            (Self::FIELDS[1], self.max_sessions),
            (Self::FIELDS[2], self.max_running_turns),
            (Self::FIELDS[3], self.max_provider_calls),
            (Self::FIELDS[4], self.max_streams),
        ]
    }

    pub fn set(&mut self, field: &str, value: u64) {
        let slot = match field {
            "retention_ms" => &mut self.retention_ms,
            "max_sessions" => &mut self.max_sessions,
            "max_running_turns" => &mut self.max_running_turns,
            "max_provider_calls" => &mut self.max_provider_calls,
            "max_streams" => &mut self.max_streams,
            _ => return,
        };
        *slot = Some(value);
    }
}

/// A live session in a page of its tenant's sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    /// Its place in the tenant's creation order: unique, larger for a later session.
    pub order: u64,
    /// When it stops counting unless written again (ms since the epoch); `None`: never.
    pub expires_at: Option<u64>,
}

/// A page of a tenant's live sessions, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionPage {
    pub sessions: Vec<Listed>,
    /// Where the next page starts (an `order` to list before), when there may be one.
    pub resume: Option<u64>,
}

/// Index reads one page may spend skipping deleted or expired sessions (each reads a page's
/// worth and drops those it finds), so a page is bounded work even after mass expiry.
pub const LIST_READS: usize = 4;

/// A member to refresh in a counted set: `(tenant, set, member)`.
pub type Refresh = (String, CountedSet, String);

/// Limits shared by every replica. Tenants and key ids are plain names here (`[A-Za-z0-9_-]`);
/// the caller picks them.
pub trait LimitStore: Send + Sync + 'static {
    /// Takes up to `n` requests from `key_id`'s bucket (`rate` per second, burst `rate`).
    fn take(&self, key_id: &str, rate: u32, n: u32) -> BoxFuture<'_, StoreResult<Bucket>>;

    /// Adds `member` to the tenant's `set` with an expiry `ttl_ms` from now (0: never) if the
    /// set holds fewer than `max` live members or already holds `member` (then only its expiry
    /// moves). A few expired members are dropped on the way. A new session also takes the
    /// next place in its tenant's creation order, which [`Self::list_sessions`] pages through.
    fn admit<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        member: &'a str,
        ttl_ms: u64,
        max: u64,
    ) -> BoxFuture<'a, StoreResult<Admission>>;

    /// Moves each member's expiry to `ttl_ms` from now, adding it back if it expired (a turn
    /// adopted from a dead replica, a stream through a store hiccup) — without a limit check.
    /// One round trip for the whole batch.
    fn refresh<'a>(&'a self, members: &'a [Refresh], ttl_ms: u64)
        -> BoxFuture<'a, StoreResult<()>>;

    /// Moves a session's expiry to `ttl_ms` from now only if it is still counted (a deleted
    /// session is not brought back).
    fn touch<'a>(
        &'a self,
        tenant: &'a str,
        member: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<()>>;

    /// Up to `limit` of the tenant's live sessions (admitted, not released, not expired),
    /// newest first, created before `before` (an [`Listed::order`]) when given. A page costs at
    /// most [`LIST_READS`] index reads of `limit + 1` members, never a scan; deleted and expired
    /// members met on the way are dropped from the index and the count alike.
    fn list_sessions<'a>(
        &'a self,
        tenant: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<SessionPage>>;

    /// Up to `at_most` live members of the tenant's `set` (in no particular order).
    fn members<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        at_most: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<String>>>;

    /// Removes `member` from the tenant's `set` (a session from the list too).
    fn release<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        member: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>>;

    /// Counts one provider call in the tenant's current window, unless `max` were already made
    /// in it. A window starts with its first call and lasts `window_ms`.
    fn count_call<'a>(
        &'a self,
        tenant: &'a str,
        window_ms: u64,
        max: u64,
    ) -> BoxFuture<'a, StoreResult<Admission>>;

    /// The tenant's overrides (all unset for a tenant nobody configured).
    fn overrides<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<TenantOverrides>>;

    /// Stores the overrides that are set; unset ones keep their stored value.
    fn set_overrides<'a>(
        &'a self,
        tenant: &'a str,
        overrides: &'a TenantOverrides,
    ) -> BoxFuture<'a, StoreResult<()>>;
}

/// The bucket arithmetic both stores share (GCRA): `tat` is the theoretical arrival time, in
/// microseconds, of the next request at a steady rate. Returns the new `tat` and the answer.
pub fn gcra(tat: f64, now: f64, rate: u32, n: u32) -> (f64, Bucket) {
    let rate = f64::from(rate.max(1));
    let interval = 1e6 / rate;
    // One second's worth of room: a full bucket holds `rate` requests.
    let room = 1e6;
    let base = tat.max(now);
    let free = ((now + room - base) / interval + 1e-9).floor().max(0.0);
    let granted = free.min(f64::from(n));
    let tat = base + granted * interval;
    let remaining = ((now + room - tat) / interval + 1e-9).floor().max(0.0);
    let retry_after_us = if remaining >= 1.0 {
        0.0
    } else {
        (tat + interval - room - now).max(0.0)
    };
    let bucket = Bucket {
        granted: granted as u32,
        remaining: remaining as u32,
        retry_after_ms: (retry_after_us / 1e3).ceil() as u64,
        reset_ms: ((tat - now).max(0.0) / 1e3).ceil() as u64,
    };
    (tat, bucket)
}

#[cfg(test)]
mod tests {
    use super::gcra;

    #[test]
    fn a_full_bucket_grants_one_seconds_worth_then_one_per_interval() {
        let (tat, b) = gcra(0.0, 1e9, 10, 15);
        assert_eq!((b.granted, b.remaining), (10, 0));
        assert_eq!(b.retry_after_ms, 100);
        assert_eq!(b.reset_ms, 1000);
        let (_, b) = gcra(tat, 1e9 + 50_000.0, 10, 1);
        assert_eq!(b.granted, 0, "half an interval later: nothing yet");
        let (tat, b) = gcra(tat, 1e9 + 100_000.0, 10, 5);
        assert_eq!((b.granted, b.remaining), (1, 0));
        let (_, b) = gcra(tat, 1e9 + 1_100_000.0, 10, 0);
        assert_eq!((b.granted, b.remaining, b.reset_ms), (0, 10, 0));
    }
}
