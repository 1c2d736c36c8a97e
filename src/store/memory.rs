//! The embedded in-memory log: one process, nothing persisted. For trying the service out; the
//! tests that matter run on Redis.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::{now_ms, stamp, Append, EventLog, StoreResult, CONFLICT_BATCH};
use crate::domain::{NewEvent, Recorded, SessionId};

#[derive(Default)]
pub struct MemoryLog {
    sessions: Mutex<HashMap<SessionId, Arc<Mutex<Vec<Recorded>>>>>,
}

impl MemoryLog {
    fn log(&self, sid: &SessionId, create: bool) -> Option<Arc<Mutex<Vec<Recorded>>>> {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(sid) {
            Some(l) => Some(l.clone()),
            None if create => Some(map.entry(sid.clone()).or_default().clone()),
            None => None,
        }
    }
}

fn after(log: &[Recorded], seq: u64, limit: usize) -> Vec<Recorded> {
    // seqs are dense and 1-based, so the event with seq `n` sits at index `n - 1`.
    let start = (seq as usize).min(log.len());
    log[start..].iter().take(limit).cloned().collect()
}

impl EventLog for MemoryLog {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn read<'a>(
        &'a self,
        sid: &'a SessionId,
        seq: u64,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Recorded>>> {
        Box::pin(async move {
            Ok(match self.log(sid, false) {
                Some(l) => after(&l.lock().unwrap_or_else(|p| p.into_inner()), seq, limit),
                None => Vec::new(),
            })
        })
    }

    fn append<'a>(
        &'a self,
        sid: &'a SessionId,
        expected: u64,
        events: &'a [NewEvent],
    ) -> BoxFuture<'a, StoreResult<Append>> {
        Box::pin(async move {
            let Some(log) = self.log(sid, expected == 0 && !events.is_empty()) else {
                return Ok(if expected == 0 {
                    Append::Committed(Vec::new())
                } else {
                    Append::Conflict {
                        head: 0,
                        missing: Vec::new(),
                    }
                });
            };
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            let head = log.len() as u64;
            if head != expected {
                return Ok(Append::Conflict {
                    head,
                    missing: after(&log, expected, CONFLICT_BATCH),
                });
            }
            let recorded = stamp(events, head + 1, now_ms());
            log.extend(recorded.iter().cloned());
            Ok(Append::Committed(recorded))
        })
    }

    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async { Ok(()) })
    }
}

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

impl super::TurnLeases for MemoryLeases {
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
