//! The storage seam: one narrow trait for a session log, with the Redis Streams implementation
//! (`redis.rs`, the only place that speaks Redis) and an in-memory one side by side.
//!
//! Appends are compare-and-append: they name the seq the caller's decision was based on and
//! commit only if the log still ends there. A conflict hands back what the caller missed, so a
//! retry needs no extra read.
//!
//! Retention is the store's: every committed append sets how long the session is kept after it
//! (a Redis TTL on each of its keys, a deadline in memory), so an idle session disappears by
//! itself and reads never extend its life. An expired or deleted session reads as empty, and an
//! append that expects any of its events finds them gone and never brings the session back.

use futures_util::future::BoxFuture;

use crate::domain::{AgentId, NewEvent, Recorded, SessionId};

mod capacity;
mod entries;
pub mod keys;
pub mod limits;
pub mod memory;
pub mod redis;
mod redis_keys;
pub mod requests;
pub mod webhooks;
mod wire;

pub use self::keys::{FileKeys, KeyRecord, KeyStore};
pub use self::limits::{
    Admission, Bucket, CountedSet, LimitStore, Listed, SessionPage, TenantOverrides,
};
pub use self::memory::{MemoryLeases, MemoryLimits, MemoryLog, MemoryRequests};
pub use self::redis::{RedisLeases, RedisLimits, RedisLog, RedisRequests, RedisWebhooks};
pub use self::requests::{Begin, Mark, RecordTerms, RequestStore, StoredResponse};
pub use self::webhooks::WebhookStore;

/// How many missed events a conflict reply carries at most; the caller reads the rest.
pub const CONFLICT_BATCH: usize = 512;

#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached or did not answer in time; the request may be retried.
    #[error("the event store is unavailable: {0}")]
    Unavailable(String),
    /// The store refused a write because it is out of memory (Redis at its `maxmemory` with
    /// `noeviction`): retrying soon will not help until an operator frees space.
    #[error("the event store is full: {0}")]
    Full(String),
    /// A stored entry cannot be decoded: the log is corrupt.
    #[error("the session log holds a corrupt entry {id}: {reason}")]
    Corrupt { id: String, reason: String },
    /// Something to append or publish cannot be encoded: a bug in whoever made it, not an
    /// outage, so a retry cannot help. Nothing of its batch was written.
    #[error("the store cannot encode this: {0}")]
    Unencodable(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The result of a compare-and-append.
#[derive(Debug)]
pub enum Append {
    /// The events were committed, in order, right after the expected seq.
    Committed(Vec<Recorded>),
    /// The log had moved on: `missing` holds the first events after the expected seq (at most
    /// [`CONFLICT_BATCH`]), `head` the log's last seq.
    Conflict { head: u64, missing: Vec<Recorded> },
    /// The log no longer holds the expected entry as it was folded (Redis lost data, and the
    /// log may have grown back with other events): fold the session again from its start.
    Replaced,
    /// ([`EventLog::append_once`] only.) The request's marker is there: an earlier attempt of
    /// it committed the events at seqs `first..=last`. Nothing was appended or checked.
    Already { first: u64, last: u64 },
}

/// Where a reader's fold stands: the seq it folded to and that event's commit time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Anchor {
    pub seq: u64,
    /// The commit time of the entry at `seq`; 0 checks the seq alone (tools and tests that
    /// write a log they alone own).
    pub ts: u64,
}

impl Anchor {
    pub fn seq_only(seq: u64) -> Self {
        Self { seq, ts: 0 }
    }

    /// Whether the entry at `found` is the one this anchor names.
    pub fn names(&self, found: Anchor) -> bool {
        found.seq == self.seq && (self.ts == 0 || found.ts == self.ts)
    }

    /// Whether `entry` is the entry this anchor names.
    pub fn holds(&self, entry: &Recorded) -> bool {
        self.names(Anchor {
            seq: entry.seq(),
            ts: entry.committed_at,
        })
    }
}

/// A set of per-session append-only logs.
pub trait EventLog: Send + Sync + 'static {
    /// `redis` or `memory`, as `/v1/status` reports it.
    fn kind(&self) -> &'static str;

    /// Up to `limit` events with seq greater than `after`, in order. An unknown session reads
    /// as empty.
    fn read<'a>(
        &'a self,
        sid: &'a SessionId,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Recorded>>>;

    /// Like [`Self::read`], but only if the log still holds the event at `anchor.seq` as it was
    /// folded (same commit time); `None` when it does not: the log was lost or replaced (Redis
    /// restarted empty) or that entry was trimmed. A zero anchor reads from the start.
    fn read_after<'a>(
        &'a self,
        sid: &'a SessionId,
        anchor: Anchor,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Option<Vec<Recorded>>>>;

    /// Appends `events` if the session's log still ends with the entry `expected` names (seq
    /// 0: the session does not exist yet). An empty `events` only checks that. A commit keeps
    /// the session for `ttl_ms` from now (0: until deleted); a check or a conflict leaves its
    /// expiry as it was.
    fn append<'a>(
        &'a self,
        sid: &'a SessionId,
        expected: Anchor,
        events: &'a [NewEvent],
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<Append>>;

    /// [`Self::append`] for one commit of a keyed request (`Idempotency-Key`), in the same
    /// atomic step: if the session holds `mark` already, appends nothing and answers
    /// [`Append::Already`] with what that earlier attempt committed (also for an empty
    /// `events`); otherwise, when it commits events, it records `mark` (for
    /// [`requests::KEEP_MS`]) with their seqs.
    fn append_once<'a>(
        &'a self,
        sid: &'a SessionId,
        expected: Anchor,
        events: &'a [NewEvent],
        ttl_ms: u64,
        mark: &'a Mark,
    ) -> BoxFuture<'a, StoreResult<Append>>;

    /// Checks that the store answers.
    fn ping(&self) -> BoxFuture<'_, StoreResult<()>>;

    /// Whether the store refuses writes for want of memory (Redis at its `maxmemory`, or a
    /// write refused as out of memory moments ago): readiness reports it.
    fn full(&self) -> BoxFuture<'_, StoreResult<bool>>;

    /// Drops the entries before seq `keep_from` (a compaction snapshot keeps what they held).
    fn trim<'a>(&'a self, sid: &'a SessionId, keep_from: u64) -> BoxFuture<'a, StoreResult<()>>;

    /// Removes the session (every key it has) and tells every replica's live listeners
    /// ([`LiveMessage::Deleted`]); false when there was nothing to remove.
    fn delete<'a>(&'a self, sid: &'a SessionId) -> BoxFuture<'a, StoreResult<bool>>;
}

/// What a replica hears live: committed events of the sessions it watches, in commit order,
/// and their ephemeral deltas. Delivery is best-effort; a listener that sees a gap (or `Reconnected`)
/// reads what it missed from the log.
#[derive(Clone, Debug)]
pub enum LiveMessage {
    Events {
        sid: SessionId,
        events: Vec<Recorded>,
    },
    /// An ephemeral message, e.g. an assistant text delta.
    Ephemeral(Ephemeral),
    /// The session was deleted: its streams end.
    Deleted { sid: SessionId },
    /// The listener reconnected and may have missed messages.
    Reconnected,
    /// The bus (re)established its subscription to this session (after [`Watcher::watch`],
    /// or after a reconnect or failover): anything committed before may have been missed.
    Watching { sid: SessionId },
}

impl LiveMessage {
    /// The session the message is about (none for a reconnect).
    pub fn session(&self) -> Option<&SessionId> {
        match self {
            Self::Events { sid, .. } | Self::Deleted { sid } | Self::Watching { sid } => Some(sid),
            Self::Ephemeral(e) => Some(&e.sid),
            Self::Reconnected => None,
        }
    }
}

/// What a replica's live listener should hear: the hub names each session when it gains its
/// first local subscriber and when its last one leaves, and the bus subscribes to just those.
/// A bus that delivers every session anyway (the in-memory one) ignores it.
#[derive(Clone, Debug, Default)]
pub struct Watcher(Option<tokio::sync::mpsc::UnboundedSender<Watch>>);

/// One change of interest, in the order the hub made them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watch {
    On(SessionId),
    Off(SessionId),
}

impl Watcher {
    /// A watcher for a bus that delivers every session.
    pub fn everything() -> Self {
        Self(None)
    }

    /// A watcher whose changes the bus reads from the returned receiver.
    pub fn channel() -> (Self, tokio::sync::mpsc::UnboundedReceiver<Watch>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Self(Some(tx)), rx)
    }

    pub fn watch(&self, sid: &SessionId) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(Watch::On(sid.clone()));
        }
    }

    pub fn unwatch(&self, sid: &SessionId) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(Watch::Off(sid.clone()));
        }
    }
}

/// An ephemeral (never recorded) live message: routing fields beside an opaque JSON body.
///
/// The live path routes and filters by the fields alone, so a delta is serialized once by its
/// producer and never parsed again on its way to a subscriber.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ephemeral {
    pub sid: SessionId,
    pub agent: AgentId,
    /// The SSE event name, e.g. `assistant/delta`.
    pub kind: std::sync::Arc<str>,
    /// For an assistant delta: the step it belongs to.
    pub step: Option<StepRef>,
    /// The frame's `data:` JSON, sent as is (never parsed by the live path).
    pub body: std::sync::Arc<str>,
}

/// One attempt at one step of a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRef {
    pub turn: String,
    pub step: u32,
    /// 1 for the first attempt, as `step/retried` counts them.
    pub attempt: u32,
}

pub trait LiveBus: Send + Sync + 'static {
    /// Publishes an ephemeral message to every replica.
    fn publish(&self, msg: Ephemeral) -> BoxFuture<'_, StoreResult<()>>;
    /// Starts delivering live messages to `tx` (one listener per replica): those of the
    /// sessions named through the returned [`Watcher`] (at least; a bus may deliver more).
    fn listen(&self, tx: tokio::sync::mpsc::UnboundedSender<LiveMessage>) -> Watcher;
}

/// Leases on running turns: a turn is run by the replica holding its lease; a lease not renewed
/// within its ttl (the replica died) can be claimed by any other replica, which resumes the turn
/// from the log. Members are opaque strings naming a turn.
pub trait TurnLeases: Send + Sync + 'static {
    /// Takes the lease unless another owner holds it unexpired.
    fn acquire<'a>(
        &'a self,
        member: &'a str,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<bool>>;
    /// Extends the lease; false when `owner` no longer holds it.
    fn renew<'a>(
        &'a self,
        member: &'a str,
        owner: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<bool>>;
    fn release<'a>(&'a self, member: &'a str, owner: &'a str) -> BoxFuture<'a, StoreResult<()>>;
    /// Gives the lease up for another replica to claim at its next sweep (expires it now, held
    /// by no one, so a renew sent before it and arriving after it fails), if `owner` holds it:
    /// a replica that stops hands its running turns over.
    fn handoff<'a>(&'a self, member: &'a str, owner: &'a str) -> BoxFuture<'a, StoreResult<()>>;
    /// Takes up to `max` expired leases for `owner` and returns their members.
    fn claim_expired<'a>(
        &'a self,
        owner: &'a str,
        ttl_ms: u64,
        max: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<String>>>;
}

/// 64-bit FNV-1a of `data`: the same on every build and platform, for spreading session ids
/// over lease groups (which every replica must agree on) and over a process's lock shards.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Each event's `data` JSON, for the whole batch before anything is written: a batch with an
/// event that cannot be serialized is refused entirely, never stored with a stand-in payload.
pub(crate) fn encode(events: &[NewEvent]) -> StoreResult<Vec<String>> {
    events
        .iter()
        .map(|e| {
            e.kind.data_json().map_err(|err| {
                StoreError::Unencodable(format!(
                    "a `{}` event cannot be serialized: {err}",
                    e.kind.type_name()
                ))
            })
        })
        .collect()
}

/// Stamps events committed at `first_seq..` with the commit time.
pub(crate) fn stamp(events: &[NewEvent], first_seq: u64, committed_at: u64) -> Vec<Recorded> {
    events
        .iter()
        .zip(first_seq..)
        .map(|(e, seq)| Recorded {
            id: crate::domain::EventId(seq),
            agent: e.agent.clone(),
            kind: e.kind.clone(),
            committed_at,
            v: crate::domain::event::SCHEMA_VERSION,
        })
        .collect()
}
