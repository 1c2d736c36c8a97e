//! The embedded in-memory log: one process, nothing persisted. For trying the service out; the
//! tests that matter run on Redis.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio::sync::mpsc::UnboundedSender;

use super::{
    encode, now_ms, stamp, Anchor, Append, Ephemeral, EventLog, LiveBus, LiveMessage, StoreResult,
    CONFLICT_BATCH,
};
use crate::domain::{NewEvent, Recorded, SessionId};

mod limits;
pub use self::limits::MemoryLimits;

/// One session's log: dense seqs from `first`.
#[derive(Default)]
struct Log {
    events: VecDeque<Recorded>,
    /// The last seq ever appended (entries may have been trimmed).
    head: u64,
}

impl Log {
    /// Whether the entry `anchor` names is still here, unchanged.
    fn holds(&self, anchor: Anchor) -> bool {
        let at = self.after(anchor.seq.saturating_sub(1), 1);
        at.first().is_some_and(|e| anchor.holds(e))
    }

    fn after(&self, seq: u64, limit: usize) -> Vec<Recorded> {
        let first = self
            .events
            .front()
            .map(|e| e.seq())
            .unwrap_or(self.head + 1);
        let skip = seq.saturating_sub(first - 1) as usize;
        self.events.iter().skip(skip).take(limit).cloned().collect()
    }
}

#[derive(Default)]
pub struct MemoryLog {
    sessions: Mutex<HashMap<SessionId, Arc<Mutex<Log>>>>,
    listeners: Mutex<Vec<UnboundedSender<LiveMessage>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryLog {
    fn log(&self, sid: &SessionId, create: bool) -> Option<Arc<Mutex<Log>>> {
        let mut map = lock(&self.sessions);
        match map.get(sid) {
            Some(l) => Some(l.clone()),
            None if create => Some(map.entry(sid.clone()).or_default().clone()),
            None => None,
        }
    }

    fn broadcast(&self, msg: LiveMessage) {
        lock(&self.listeners).retain(|tx| tx.send(msg.clone()).is_ok());
    }
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
                Some(l) => lock(&l).after(seq, limit),
                None => Vec::new(),
            })
        })
    }

    fn read_after<'a>(
        &'a self,
        sid: &'a SessionId,
        anchor: Anchor,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Option<Vec<Recorded>>>> {
        Box::pin(async move {
            let Some(log) = self.log(sid, false) else {
                return Ok((anchor.seq == 0).then(Vec::new));
            };
            let log = lock(&log);
            if anchor.seq > 0 && !log.holds(anchor) {
                return Ok(None);
            }
            Ok(Some(log.after(anchor.seq, limit)))
        })
    }

    fn append<'a>(
        &'a self,
        sid: &'a SessionId,
        expected: Anchor,
        events: &'a [NewEvent],
    ) -> BoxFuture<'a, StoreResult<Append>> {
        Box::pin(async move {
            // Kept typed, but refused as Redis refuses it: an event that cannot be serialized
            // could never be read back over the API.
            encode(events)?;
            let Some(log) = self.log(sid, expected.seq == 0 && !events.is_empty()) else {
                return Ok(if expected.seq == 0 {
                    Append::Committed(Vec::new())
                } else {
                    Append::Replaced
                });
            };
            let mut log = lock(&log);
            if log.head < expected.seq || (expected.seq > 0 && !log.holds(expected)) {
                return Ok(Append::Replaced);
            }
            if log.head != expected.seq {
                return Ok(Append::Conflict {
                    head: log.head,
                    missing: log.after(expected.seq, CONFLICT_BATCH),
                });
            }
            let recorded = stamp(events, log.head + 1, now_ms());
            log.events.extend(recorded.iter().cloned());
            log.head += recorded.len() as u64;
            if !recorded.is_empty() {
                // Published under the session's lock: in commit order, as Redis does from
                // inside the append script.
                self.broadcast(LiveMessage::Events {
                    sid: sid.clone(),
                    events: recorded.clone(),
                });
            }
            Ok(Append::Committed(recorded))
        })
    }

    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async { Ok(()) })
    }

    fn trim<'a>(&'a self, sid: &'a SessionId, keep_from: u64) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            if let Some(log) = self.log(sid, false) {
                let mut log = lock(&log);
                while log.events.front().is_some_and(|e| e.seq() < keep_from) {
                    log.events.pop_front();
                }
            }
            Ok(())
        })
    }
}

impl LiveBus for MemoryLog {
    fn publish(&self, msg: Ephemeral) -> BoxFuture<'_, StoreResult<()>> {
        self.broadcast(LiveMessage::Ephemeral(msg));
        Box::pin(async { Ok(()) })
    }

    fn listen(&self, tx: UnboundedSender<LiveMessage>) {
        lock(&self.listeners).push(tx);
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

    fn handoff<'a>(&'a self, member: &'a str, owner: &'a str) -> BoxFuture<'a, StoreResult<()>> {
        self.with(|m, _| {
            if let Some((holder, expiry)) = m.get_mut(member) {
                if holder == owner {
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
