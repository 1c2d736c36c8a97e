//! Turn leases for the embedded in-memory store: the same rules as `lease.lua`, under one lock.

use std::collections::HashMap;
use std::sync::Mutex;

use futures_util::future::BoxFuture;

use super::super::{now_ms, StoreResult};

/// In-process turn leases, for the embedded single-process mode.
#[derive(Default)]
pub struct MemoryLeases {
    leases: Mutex<HashMap<String, (String, u64)>>,
}

impl MemoryLeases {
    fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut HashMap<String, (String, u64)>, u64) -> T,
    ) -> BoxFuture<'_, StoreResult<T>> {
        let out = f(
            &mut self.leases.lock().unwrap_or_else(|p| p.into_inner()),
            now_ms(),
        );
        Box::pin(async move { Ok(out) })
    }
}

impl super::super::TurnLeases for MemoryLeases {
    fn acquire<'a>(
        &'a self,
        member: &'a str,
        owner: &'a str,
        ttl: u64,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        self.with(|m, now| match m.get(member) {
            Some((holder, expiry)) if holder != owner && *expiry >= now => false,
            _ => {
                m.insert(member.to_owned(), (owner.to_owned(), now + ttl));
                true
            }
        })
    }

    fn renew<'a>(
        &'a self,
        member: &'a str,
        owner: &'a str,
        ttl: u64,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        self.with(|m, now| match m.get_mut(member) {
            Some((holder, expiry)) if holder == owner => {
                *expiry = now + ttl;
                true
            }
            _ => false,
        })
    }

    fn release<'a>(&'a self, member: &'a str, owner: &'a str) -> BoxFuture<'a, StoreResult<()>> {
        self.with(|m, _| {
            if m.get(member).is_some_and(|(holder, _)| holder == owner) {
                m.remove(member);
            }
        })
    }

    fn handoff<'a>(&'a self, member: &'a str, owner: &'a str) -> BoxFuture<'a, StoreResult<()>> {
        self.with(|m, _| {
            if let Some((holder, expiry)) = m.get_mut(member) {
                if holder == owner {
                    // Held by no one: a renew under way when the runner let go fails.
                    holder.clear();
                    *expiry = 0;
                }
            }
        })
    }

    fn claim_expired<'a>(
        &'a self,
        owner: &'a str,
        ttl: u64,
        max: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<String>>> {
        self.with(|m, now| {
            let expired: Vec<String> = m
                .iter()
                .filter(|(_, (_, e))| *e < now)
                .map(|(k, _)| k.clone())
                .take(max)
                .collect();
            for k in &expired {
                m.insert(k.clone(), (owner.to_owned(), now + ttl));
            }
            expired
        })
    }
}
