//! Limits for the embedded in-memory store: the same buckets, counted sets and windows as the
//! Redis scripts, under one lock, so a single process has the same limits as a Redis fleet.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use futures_util::future::BoxFuture;

use super::super::limits::{
    gcra, Admission, Bucket, CountedSet, LimitStore, Listed, Refresh, SessionPage, TenantOverrides,
    LIST_READS,
};
use super::super::{now_ms, StoreResult};

/// A member that never expires (retention 0), as `admit.lua` scores it.
const NEVER: u64 = 1_000_000_000_000_000;
/// Expired members dropped per admission, as `admit.lua` does.
const CLEANUP: usize = 32;

#[derive(Default)]
struct State {
    /// Key id → theoretical arrival time of its next request (µs).
    buckets: HashMap<String, f64>,
    /// (tenant, set) → member → expiry (ms).
    sets: HashMap<(String, CountedSet), HashMap<String, u64>>,
    /// Tenant → its sessions' creation order, both ways (as `:sessions:order` in Redis).
    orders: HashMap<String, Order>,
    /// Tenant → (calls this window, when the window ends in ms).
    windows: HashMap<String, (u64, u64)>,
    overrides: HashMap<String, TenantOverrides>,
}

/// One tenant's sessions by creation order (unique, increasing) and back.
#[derive(Default)]
struct Order {
    by_order: BTreeMap<u64, String>,
    of: HashMap<String, u64>,
}

impl Order {
    fn push(&mut self, member: &str) {
        let last = self.by_order.keys().next_back().copied().unwrap_or(0);
        let order = now_us().max(last as f64 + 1.0) as u64;
        self.by_order.insert(order, member.to_owned());
        self.of.insert(member.to_owned(), order);
    }

    fn remove(&mut self, member: &str) {
        if let Some(order) = self.of.remove(member) {
            self.by_order.remove(&order);
        }
    }
}

impl State {
    /// Drops `member` from the tenant's set, and from its creation order for a session.
    fn forget(&mut self, tenant: &str, set: CountedSet, member: &str) {
        if let Some(members) = self.sets.get_mut(&(tenant.to_owned(), set)) {
            members.remove(member);
        }
        if set == CountedSet::Sessions {
            if let Some(order) = self.orders.get_mut(tenant) {
                order.remove(member);
            }
        }
    }
}

#[derive(Default)]
pub struct MemoryLimits {
    state: Mutex<State>,
}

impl MemoryLimits {
    fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut State, u64) -> T,
    ) -> BoxFuture<'_, StoreResult<T>> {
        let out = f(
            &mut self.state.lock().unwrap_or_else(|p| p.into_inner()),
            now_ms(),
        );
        Box::pin(async move { Ok(out) })
    }
}

fn now_us() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as f64)
        .unwrap_or(0.0)
}

impl LimitStore for MemoryLimits {
    fn take(&self, key_id: &str, rate: u32, n: u32) -> BoxFuture<'_, StoreResult<Bucket>> {
        let key_id = key_id.to_owned();
        self.with(move |s, _| {
            let now = now_us();
            let tat = s.buckets.get(&key_id).copied().unwrap_or(0.0);
            let (tat, bucket) = gcra(tat, now, rate, n);
            if tat <= now {
                s.buckets.remove(&key_id);
            } else {
                s.buckets.insert(key_id, tat);
            }
            // Forget full buckets now and then, as Redis expires them.
            if s.buckets.len() > 100_000 {
                s.buckets.retain(|_, tat| *tat > now);
            }
            bucket
        })
    }

    fn admit<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        member: &'a str,
        ttl_ms: u64,
        max: u64,
    ) -> BoxFuture<'a, StoreResult<Admission>> {
        self.with(move |s, now| {
            let members = s.sets.entry((tenant.to_owned(), set)).or_default();
            let stale: Vec<String> = members
                .iter()
                .filter(|(_, e)| **e < now)
                .map(|(m, _)| m.clone())
                .take(CLEANUP)
                .collect();
            for m in stale {
                s.forget(tenant, set, &m);
            }
            let members = s.sets.entry((tenant.to_owned(), set)).or_default();
            let expiry = if ttl_ms > 0 { now + ttl_ms } else { NEVER };
            if members.get(member).is_some_and(|e| *e >= now) {
                members.insert(member.to_owned(), expiry);
                return Admission::Admitted;
            }
            let live: Vec<u64> = members.values().copied().filter(|e| *e >= now).collect();
            if live.len() as u64 >= max {
                let soonest = live.iter().min().copied().filter(|e| *e < NEVER);
                return Admission::Full {
                    live: live.len() as u64,
                    retry_after_ms: soonest.map_or(0, |e| e - now),
                };
            }
            members.insert(member.to_owned(), expiry);
            if set == CountedSet::Sessions {
                s.orders.entry(tenant.to_owned()).or_default().push(member);
            }
            Admission::Admitted
        })
    }

    fn refresh<'a>(
        &'a self,
        members: &'a [Refresh],
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<()>> {
        self.with(move |s, now| {
            for (tenant, set, member) in members {
                s.sets
                    .entry((tenant.clone(), *set))
                    .or_default()
                    .insert(member.clone(), now + ttl_ms);
            }
        })
    }

    fn touch<'a>(
        &'a self,
        tenant: &'a str,
        member: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<()>> {
        self.with(move |s, now| {
            let key = (tenant.to_owned(), CountedSet::Sessions);
            if let Some(expiry) = s.sets.get_mut(&key).and_then(|m| m.get_mut(member)) {
                *expiry = now + ttl_ms;
            }
        })
    }

    fn members<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        at_most: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<String>>> {
        self.with(move |s, now| {
            s.sets
                .get(&(tenant.to_owned(), set))
                .into_iter()
                .flatten()
                .filter(|(_, expiry)| **expiry >= now)
                .map(|(m, _)| m.clone())
                .take(at_most)
                .collect()
        })
    }

    fn release<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        member: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>> {
        self.with(move |s, _| s.forget(tenant, set, member))
    }

    fn list_sessions<'a>(
        &'a self,
        tenant: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<SessionPage>> {
        self.with(move |s, now| {
            let limit = limit.max(1);
            let key = (tenant.to_owned(), CountedSet::Sessions);
            let candidates: Vec<(u64, String)> = s.orders.get(tenant).map_or_else(Vec::new, |o| {
                o.by_order
                    .range(..before.unwrap_or(u64::MAX))
                    .rev()
                    .take(LIST_READS * (limit + 1))
                    .map(|(order, m)| (*order, m.clone()))
                    .collect()
            });
            let scanned_all = candidates.len() < LIST_READS * (limit + 1);
            let mut page = SessionPage::default();
            let mut dead = Vec::new();
            let mut resume = None;
            for (order, member) in candidates {
                let expiry = s.sets.get(&key).and_then(|m| m.get(&member)).copied();
                match expiry.filter(|e| *e >= now) {
                    Some(_) if page.sessions.len() == limit => {
                        page.resume = resume;
                        break;
                    }
                    Some(e) => page.sessions.push(Listed {
                        id: member,
                        order,
                        expires_at: (e < NEVER).then_some(e),
                    }),
                    None => dead.push(member),
                }
                resume = Some(order);
            }
            if page.resume.is_none() && !scanned_all {
                page.resume = resume;
            }
            for m in dead {
                s.forget(tenant, CountedSet::Sessions, &m);
            }
            page
        })
    }

    fn count_call<'a>(
        &'a self,
        tenant: &'a str,
        window_ms: u64,
        max: u64,
    ) -> BoxFuture<'a, StoreResult<Admission>> {
        self.with(move |s, now| {
            let window = s.windows.entry(tenant.to_owned()).or_insert((0, 0));
            if window.1 <= now {
                *window = (0, now + window_ms.max(1));
            }
            if window.0 >= max {
                return Admission::Full {
                    live: window.0,
                    retry_after_ms: window.1 - now,
                };
            }
            window.0 += 1;
            Admission::Admitted
        })
    }

    fn overrides<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<TenantOverrides>> {
        self.with(move |s, _| s.overrides.get(tenant).cloned().unwrap_or_default())
    }

    fn set_overrides<'a>(
        &'a self,
        tenant: &'a str,
        overrides: &'a TenantOverrides,
    ) -> BoxFuture<'a, StoreResult<()>> {
        self.with(move |s, _| {
            let stored = s.overrides.entry(tenant.to_owned()).or_default();
            for (field, value) in overrides.fields() {
                if let Some(v) = value {
                    stored.set(field, v);
                }
            }
        })
    }
}
