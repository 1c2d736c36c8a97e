//! Who follows a session, as a writer on a Redis Cluster needs to know it: whether a commit's
//! live message has anyone to reach.
//!
//! A replica that starts following a session (its first subscriber there) `SSUBSCRIBE`s the
//! session's channel, then sets the session's follow mark (`<prefix>:{<sid>}:followed`, with a
//! TTL it renews while it follows, see `live.rs`), then reads the log past what its subscribers
//! hold. A direct append reads the mark (`GET`) in the round trip of its `XADD`, on the node
//! connection the `XADD` goes on, with Redis's client-side caching on for that read (`CLIENT
//! TRACKING ON OPTIN`, RESP3): from then on Redis sends that connection an invalidation
//! whenever the mark is set, renewed or lapses, ahead of the reply to any command it runs
//! after. So a writer that finds no mark, and has heard no invalidation of it by the time its
//! `XADD`'s reply arrives, knows that no follower set the mark before its `XADD`: a follower
//! that sets it later reads the log after, and finds the commit there. Such a commit is not
//! published. Anything unsure publishes: a mark not yet read on that connection, one the
//! connection heard change since, a write the cluster client carried, a single node (which
//! publishes every commit; its one connection reconnects by itself, and with it goes what the
//! server tracked).
//!
//! This module keeps, per node connection, what its reads of marks found, and drops each entry
//! as Redis says it changed (the invalidation push is handled on the connection's driver, in
//! the order the frames arrive: before the reply that follows it reaches its caller).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use redis::{PushInfo, PushKind, Value};

/// Marks a connection remembers at most; past this, what it learns is not kept (its writes
/// read the mark again, and publish when it is there).
const MAX_MARKS: usize = 65_536;

/// What one node connection knows of follow marks.
#[derive(Default)]
pub(in crate::store) struct Follows {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Redis tracks this connection's `CLIENT CACHING yes` reads: set once `CLIENT TRACKING
    /// ON OPTIN` was confirmed, cleared when the connection is lost.
    on: bool,
    /// Counts the invalidations heard: a read's answer is kept only when none came between
    /// the read being sent and its answer being kept (its key may have been among them).
    epoch: u64,
    /// Mark key → whether it was there when read.
    marks: HashMap<Box<[u8]>, bool>,
}

/// What a connection knows of one mark before a write: whether it was there (`None`: not
/// known, read it with the write), and the epoch to keep that read's answer under.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::store) struct Known {
    pub followed: Option<bool>,
    epoch: u64,
}

impl Follows {
    pub(super) fn new() -> Arc<Self> {
        Arc::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Redis confirmed `CLIENT TRACKING ON OPTIN` on the connection.
    pub(super) fn tracking(&self) {
        self.state().on = true;
    }

    /// What the connection knows of `mark`; `None` when Redis does not track its reads.
    pub(in crate::store) fn known(&self, mark: &[u8]) -> Option<Known> {
        let state = self.state();
        state.on.then(|| Known {
            followed: state.marks.get(mark).copied(),
            epoch: state.epoch,
        })
    }

    /// Keeps what a tracked read of `mark` sent under `before` found, unless the connection
    /// heard an invalidation since (or was lost).
    pub(in crate::store) fn learn(&self, mark: &[u8], followed: bool, before: Known) {
        let mut state = self.state();
        if state.on && state.epoch == before.epoch && state.marks.len() < MAX_MARKS {
            state.marks.insert(mark.into(), followed);
        }
    }

    /// A push on the connection: an invalidation drops the keys it names (all of them when it
    /// names none: Redis flushed, or stopped tracking); a lost connection takes everything.
    pub(super) fn pushed(&self, push: &PushInfo) {
        let mut state = self.state();
        match push.kind {
            PushKind::Invalidate => {
                state.epoch += 1;
                match push.data.first() {
                    Some(Value::Array(keys)) => {
                        for key in keys {
                            if let Value::BulkString(key) = key {
                                state.marks.remove(key.as_slice());
                            }
                        }
                    }
                    _ => state.marks.clear(),
                }
            }
            PushKind::Disconnection => {
                state.epoch += 1;
                state.on = false;
                state.marks.clear();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalidate(keys: Option<&[&str]>) -> PushInfo {
        let data = match keys {
            Some(keys) => vec![Value::Array(
                keys.iter()
                    .map(|k| Value::BulkString(k.as_bytes().to_vec()))
                    .collect(),
            )],
            None => vec![Value::Nil],
        };
        PushInfo {
            kind: PushKind::Invalidate,
            data,
        }
    }

    #[test]
    fn a_mark_is_known_only_while_tracked_and_until_redis_says_it_changed() {
        let follows = Follows::new();
        assert_eq!(follows.known(b"m"), None, "not tracked yet");
        follows.tracking();
        let before = follows.known(b"m").unwrap();
        assert_eq!(before.followed, None);
        follows.learn(b"m", false, before);
        follows.learn(b"n", true, before);
        assert_eq!(follows.known(b"m").unwrap().followed, Some(false));
        follows.pushed(&invalidate(Some(&["m"])));
        assert_eq!(follows.known(b"m").unwrap().followed, None);
        assert_eq!(follows.known(b"n").unwrap().followed, Some(true));
        follows.pushed(&invalidate(None));
        assert_eq!(follows.known(b"n").unwrap().followed, None);
    }

    #[test]
    fn a_read_answered_across_an_invalidation_is_not_kept() {
        let follows = Follows::new();
        follows.tracking();
        let before = follows.known(b"m").unwrap();
        // The mark was set after the read ran: its invalidation came before the answer was
        // kept.
        follows.pushed(&invalidate(Some(&["m"])));
        follows.learn(b"m", false, before);
        assert_eq!(follows.known(b"m").unwrap().followed, None);
    }

    #[test]
    fn a_lost_connection_forgets_every_mark_and_is_no_longer_tracked() {
        let follows = Follows::new();
        follows.tracking();
        let before = follows.known(b"m").unwrap();
        follows.learn(b"m", false, before);
        follows.pushed(&PushInfo {
            kind: PushKind::Disconnection,
            data: vec![],
        });
        assert_eq!(follows.known(b"m"), None);
        follows.learn(b"m", false, before);
        assert_eq!(follows.known(b"m"), None);
    }
}
