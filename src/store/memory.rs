//! The embedded in-memory log: one process, nothing persisted. For trying the service out; the
//! tests that matter run on Redis.
//!
//! Retention works as on Redis: a committed append sets the session's deadline, a session past
//! it is gone for reads and appends alike, and each lookup also drops a few sessions whose
//! deadline passed (an index ordered by deadline), so forgotten sessions do not pile up.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio::sync::mpsc::UnboundedSender;

use super::requests::mark_keep_ms;
use super::{
    encode, now_ms, stamp, Anchor, Append, Ephemeral, EventLog, LiveBus, LiveMessage, Mark,
    StoreResult, Watcher, CONFLICT_BATCH,
};
use crate::domain::{NewEvent, Recorded, SessionId};

/// Expired sessions one lookup removes at most, so no request pays for a big sweep.
const PURGE_BATCH: usize = 16;

mod leases;
mod limits;
mod requests;
pub use self::leases::MemoryLeases;
pub use self::limits::MemoryLimits;
pub use self::requests::MemoryRequests;

/// One session's log: dense seqs from `first`.
#[derive(Default)]
struct Log {
    events: VecDeque<Recorded>,
    /// The last seq ever appended (entries may have been trimmed).
    head: u64,
    /// Keyed requests' markers (`<name>:<n>` → the seqs committed and when the marker
    /// expires), as `append.lua` keeps them beside the stream.
    marks: HashMap<String, (u64, u64, u64)>,
    /// `(expiry, marker)` in the order they were set: mostly oldest first (a marker is kept
    /// as long as the session's retention allows, at most a day).
    mark_expiry: VecDeque<(u64, String)>,
}

impl Log {
    /// What the request marked `mark` committed here, if it did.
    fn marked(&mut self, mark: &Mark, now: u64) -> Option<Append> {
        while let Some((at, name)) = self.mark_expiry.front() {
            if *at > now {
                break;
            }
            if self.marks.get(name).is_some_and(|m| m.2 <= now) {
                self.marks.remove(name);
            }
            self.mark_expiry.pop_front();
        }
        let (first, last, expires) = self.marks.get(&mark.field())?;
        if *expires <= now {
            return None;
        }
        Some(Append::Already {
            first: *first,
            last: *last,
        })
    }

    fn mark(&mut self, mark: &Mark, first: u64, last: u64, now: u64, keep_ms: u64) {
        let expires = now + keep_ms;
        self.marks.insert(mark.field(), (first, last, expires));
        self.mark_expiry.push_back((expires, mark.field()));
    }

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

struct Entry {
    log: Arc<Mutex<Log>>,
    /// When the session expires (ms since the epoch); 0: never.
    deadline: u64,
}

/// The sessions and their deadlines, under one lock. A session's own lock is taken after this
/// one is released, or before it (a commit setting its deadline), never the other way round.
#[derive(Default)]
struct Sessions {
    logs: HashMap<SessionId, Entry>,
    /// `(deadline, session)` of every session that expires, soonest first.
    expiry: BTreeSet<(u64, SessionId)>,
}

impl Sessions {
    /// Removes up to [`PURGE_BATCH`] sessions whose deadline passed.
    fn purge(&mut self, now: u64) {
        for _ in 0..PURGE_BATCH {
            match self.expiry.first() {
                Some((deadline, _)) if *deadline <= now => {}
                _ => return,
            }
            if let Some((_, sid)) = self.expiry.pop_first() {
                self.logs.remove(&sid);
            }
        }
    }

    /// Removes `sid`; whether it was there.
    fn remove(&mut self, sid: &SessionId) -> bool {
        match self.logs.remove(sid) {
            Some(entry) => {
                self.expiry.remove(&(entry.deadline, sid.clone()));
                true
            }
            None => false,
        }
    }
}

#[derive(Default)]
pub struct MemoryLog {
    sessions: Mutex<Sessions>,
    listeners: Mutex<Vec<UnboundedSender<LiveMessage>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryLog {
    /// The session's log unless it does not exist or expired (then it is removed); `create`
    /// makes a new one.
    fn log(&self, sid: &SessionId, create: bool) -> Option<Arc<Mutex<Log>>> {
        let now = now_ms();
        let mut sessions = lock(&self.sessions);
        sessions.purge(now);
        if let Some(entry) = sessions.logs.get(sid) {
            if entry.deadline == 0 || entry.deadline > now {
                return Some(entry.log.clone());
            }
            sessions.remove(sid);
        }
        create.then(|| {
            let log = Arc::new(Mutex::new(Log::default()));
            let entry = Entry {
                log: log.clone(),
                deadline: 0,
            };
            sessions.logs.insert(sid.clone(), entry);
            log
        })
    }

    /// Sets the deadline of `sid` to `ttl_ms` from now, if `log` is still its live log (it was
    /// not deleted, expired or replaced since it was looked up); whether it was.
    fn keep(&self, sid: &SessionId, log: &Arc<Mutex<Log>>, ttl_ms: u64) -> bool {
        let now = now_ms();
        let mut sessions = lock(&self.sessions);
        let Some(entry) = sessions.logs.get_mut(sid) else {
            return false;
        };
        if !Arc::ptr_eq(&entry.log, log) || (entry.deadline != 0 && entry.deadline <= now) {
            return false;
        }
        let old = std::mem::replace(
            &mut entry.deadline,
            if ttl_ms == 0 { 0 } else { now + ttl_ms },
        );
        let new = entry.deadline;
        sessions.expiry.remove(&(old, sid.clone()));
        if new != 0 {
            sessions.expiry.insert((new, sid.clone()));
        }
        true
    }

    /// Compare-and-append, with a keyed request's marker checked and set under the session's
    /// lock (as `append.lua` does in one step).
    fn append_marked(
        &self,
        sid: &SessionId,
        expected: Anchor,
        events: &[NewEvent],
        ttl_ms: u64,
        mark: Option<&Mark>,
    ) -> StoreResult<Append> {
        // Kept typed, but refused as Redis refuses it: an event that cannot be serialized
        // could never be read back over the API.
        encode(events)?;
        let Some(entry) = self.log(sid, expected.seq == 0 && !events.is_empty()) else {
            return Ok(if expected.seq == 0 {
                Append::Committed(Vec::new())
            } else {
                Append::Replaced
            });
        };
        let mut log = lock(&entry);
        let now = now_ms();
        if let Some(done) = mark.and_then(|m| log.marked(m, now)) {
            return Ok(done);
        }
        if log.head < expected.seq || (expected.seq > 0 && !log.holds(expected)) {
            return Ok(Append::Replaced);
        }
        if log.head != expected.seq {
            return Ok(Append::Conflict {
                head: log.head,
                missing: log.after(expected.seq, CONFLICT_BATCH),
            });
        }
        if events.is_empty() {
            return Ok(Append::Committed(Vec::new()));
        }
        // Deleted or expired since the lookup: gone, as on Redis.
        if !self.keep(sid, &entry, ttl_ms) {
            return Ok(Append::Replaced);
        }
        let recorded = stamp(events, log.head + 1, now);
        log.events.extend(recorded.iter().cloned());
        log.head += recorded.len() as u64;
        if let Some(m) = mark {
            let head = log.head;
            log.mark(m, expected.seq + 1, head, now, mark_keep_ms(ttl_ms));
        }
        // Published under the session's lock: in commit order, as Redis does from inside
        // the append script.
        self.broadcast(LiveMessage::Events {
            sid: sid.clone(),
            events: recorded.clone(),
        });
        Ok(Append::Committed(recorded))
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
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<Append>> {
        Box::pin(async move { self.append_marked(sid, expected, events, ttl_ms, None) })
    }

    fn append_once<'a>(
        &'a self,
        sid: &'a SessionId,
        expected: Anchor,
        events: &'a [NewEvent],
        ttl_ms: u64,
        mark: &'a Mark,
    ) -> BoxFuture<'a, StoreResult<Append>> {
        Box::pin(async move { self.append_marked(sid, expected, events, ttl_ms, Some(mark)) })
    }

    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async { Ok(()) })
    }

    fn full(&self) -> BoxFuture<'_, StoreResult<bool>> {
        Box::pin(async { Ok(false) })
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

    fn delete<'a>(&'a self, sid: &'a SessionId) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            // Looked up first, so an expired session counts as already gone; removed under its
            // own lock, so no append commits in between and the notice follows every commit.
            let Some(entry) = self.log(sid, false) else {
                return Ok(false);
            };
            let _log = lock(&entry);
            if !lock(&self.sessions).remove(sid) {
                return Ok(false);
            }
            self.broadcast(LiveMessage::Deleted { sid: sid.clone() });
            Ok(true)
        })
    }
}

impl LiveBus for MemoryLog {
    fn publish(&self, msg: Ephemeral) -> BoxFuture<'_, StoreResult<()>> {
        self.broadcast(LiveMessage::Ephemeral(msg));
        Box::pin(async { Ok(()) })
    }

    fn listen(&self, tx: UnboundedSender<LiveMessage>) -> Watcher {
        lock(&self.listeners).push(tx);
        Watcher::everything()
    }
}
