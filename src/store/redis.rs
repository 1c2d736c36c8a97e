//! The Redis Streams log. Every Redis command the service sends is in this file, or in its
//! children: `capacity.rs` (memory pressure), `limits.rs` (rate buckets and tenant quotas),
//! `redis_keys.rs` (API keys) and `webhooks.rs` (webhook endpoints, their queue and records).
//!
//! One stream per session, key `<prefix>:{<sid>}:log` (hash-tagged, so a session's keys share a
//! cluster slot), entry ids `<seq>-0`. Appends run `append.lua`, which checks the last entry id
//! and `XADD`s in one atomic step; the stream's own last id is the version, never `XLEN` (which
//! is wrong after trimming). The usual write, one event of an unkeyed request, takes a direct
//! path instead (`append.rs`): an `XADD` with the next seq as its id and a read of the entry it
//! follows, in one round trip, which together check what the script checks. Both set the
//! session's retention as a TTL on each of its keys ([`RedisLog::session_keys`]), and
//! `delete.lua` removes them all. Live messages go
//! out on the session's own channel (`live.rs`), so a replica hears only the sessions it has
//! subscribers for; their payloads are encoded and decoded in `wire.rs`. A write Redis
//! refuses for want of memory is [`StoreError::Full`], any other failure `Unavailable`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{Script, Value};

use super::capacity::{self, Pressure};
use super::entries::{bytes, decode_entries, decode_entry, entry_anchor, int};
use super::{Anchor, Append, EventLog, Mark, StoreResult};
use crate::domain::{EventId, NewEvent, Recorded, SessionId};

mod append;
mod clock;
#[cfg(test)]
mod codec_tests;
mod conn;
mod direct;
mod limits;
mod live;
mod requests;
mod webhooks;
use self::conn::Target;
pub use self::conn::{own_connections, Conn};
pub use self::limits::RedisLimits;
pub use self::requests::RedisRequests;
pub use self::webhooks::{is_position, RedisWebhooks};

/// How long an append waits for `DSH_REDIS_WAIT_REPLICAS` replicas to acknowledge it (within
/// the command's own response timeout).
const WAIT_TIMEOUT: Duration = Duration::from_millis(1000);

/// How the service uses its Redis, beyond the URL.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedisOptions {
    /// The URL names a Redis Cluster (implied by a `redis+cluster://` URL).
    pub cluster: bool,
    /// Replicas that must acknowledge an append before it is answered (`WAIT`); 0: none.
    pub wait_replicas: u32,
}

pub struct RedisLog {
    target: Target,
    pub(super) conn: Conn,
    pub(super) prefix: String,
    append: Script,
    delete: Script,
    /// Takes back an entry a direct append wrote on a log that had lost entries.
    undo: Script,
    /// Redis's clock for direct appends' commit times.
    clock: clock::RedisClock,
    wait_replicas: u32,
    /// Writes refused for want of memory, shared with the leases.
    pressure: Arc<Pressure>,
}

impl RedisLog {
    /// Connects with the default options: one node, or a cluster for a `redis+cluster://` URL.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, redis::RedisError> {
        Self::connect_with(url, prefix, RedisOptions::default()).await
    }

    pub async fn connect_with(
        url: &str,
        prefix: &str,
        options: RedisOptions,
    ) -> Result<Self, redis::RedisError> {
        let target = Target::parse(url, options.cluster)?;
        let conn = target.connect().await?;
        // A cluster would broadcast a plain PUBLISH to every node: there a session's live
        // channel is a shard channel, served by the node of the session's slot.
        let publish = |source: &str| {
            let source = if target.is_cluster() {
                source.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'")
            } else {
                source.to_owned()
            };
            Script::new(&source)
        };
        Ok(Self {
            append: publish(include_str!("append.lua")),
            delete: publish(include_str!("delete.lua")),
            undo: Script::new(include_str!("undo.lua")),
            clock: clock::RedisClock::default(),
            target,
            conn,
            prefix: prefix.to_owned(),
            wait_replicas: options.wait_replicas,
            pressure: Arc::default(),
        })
    }

    /// Whether this store is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.target.is_cluster()
    }

    pub fn key(&self, sid: &SessionId) -> String {
        log_key(&self.prefix, sid)
    }

    /// Every key of one session, its stream first, then its keyed requests' markers and their
    /// expiry (`append.lua` relies on this order): an append keeps their TTLs together and a
    /// delete removes them all, without searching for them. A new per-session key belongs here
    /// (hash-tagged `{<sid>}`).
    pub fn session_keys(&self, sid: &SessionId) -> Vec<String> {
        vec![
            self.key(sid),
            session_name(&self.prefix, sid, "idem"),
            session_name(&self.prefix, sid, "idem:exp"),
        ]
    }

    /// Redis's `maxmemory-policy`, or `None` when `CONFIG GET` is refused (managed Redis). Any
    /// policy but `noeviction` lets Redis drop session logs silently when it fills up.
    pub async fn eviction_policy(&self) -> Option<String> {
        capacity::eviction_policy(&self.conn).await
    }

    pub(super) fn failed(&self, e: redis::RedisError) -> super::StoreError {
        self.pressure.error(e)
    }
}

/// A Redis error as the store reports it: out of memory is `Full`, anything else an outage.
pub(super) fn unavailable(e: redis::RedisError) -> super::StoreError {
    if capacity::is_oom(&e) {
        super::StoreError::Full(e.to_string())
    } else {
        super::StoreError::Unavailable(e.to_string())
    }
}

/// `EVALSHA` of `script` with `keys` keys, the keys and `args` arguments of about `bytes` bytes
/// in all to be added: one command written into one buffer sized for them up front (the
/// crate's script invocation copies each argument twice, and a buffer grown argument by
/// argument costs more than writing them), run by [`eval`].
pub(super) fn evalsha(script: &Script, keys: usize, args: usize, bytes: usize) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(3 + keys + args, 64 + bytes);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    cmd
}

/// Runs a command made by [`evalsha`], loading its script first if Redis does not hold it
/// (a restarted or new node).
pub(super) async fn eval(
    conn: &mut Conn,
    script: &Script,
    cmd: &redis::Cmd,
) -> redis::RedisResult<Value> {
    match cmd.query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            cmd.query_async(conn).await
        }
        reply => reply,
    }
}

/// The key of a session's stream under `prefix`.
fn log_key(prefix: &str, sid: &SessionId) -> String {
    session_name(prefix, sid, "log")
}

/// `<prefix>:{<sid>}:<what>`: a key or channel of one session, in the session's hash slot.
/// Built in one allocation: `format!` grows its string piece by piece, and these names are
/// made on every append.
pub(super) fn session_name(prefix: &str, sid: &SessionId, what: &str) -> String {
    let sid = sid.as_str();
    let mut name = String::with_capacity(prefix.len() + sid.len() + what.len() + 4);
    for part in [prefix, ":{", sid, "}:", what] {
        name.push_str(part);
    }
    name
}

impl EventLog for RedisLog {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn read<'a>(
        &'a self,
        sid: &'a SessionId,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Recorded>>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let reply: Value = redis::cmd("XRANGE")
                .arg(self.key(sid))
                .arg(format!("({}", EventId(after)))
                .arg("+")
                .arg("COUNT")
                .arg(limit)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            decode_entries(&reply)
        })
    }

    fn read_after<'a>(
        &'a self,
        sid: &'a SessionId,
        anchor: Anchor,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Option<Vec<Recorded>>>> {
        Box::pin(async move {
            if anchor.seq == 0 {
                return self.read(sid, 0, limit).await.map(Some);
            }
            // One range read from the anchor itself: its entry must still be there, unchanged.
            let mut conn = self.conn.here();
            let reply: Value = redis::cmd("XRANGE")
                .arg(self.key(sid))
                .arg(EventId(anchor.seq).to_string())
                .arg("+")
                .arg("COUNT")
                .arg(limit + 1)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            let entries = match &reply {
                Value::Array(entries) => entries.as_slice(),
                _ => &[],
            };
            match entries.split_first() {
                Some((first, rest)) if entry_anchor(first).is_some_and(|a| anchor.names(a)) => Ok(
                    Some(rest.iter().map(decode_entry).collect::<StoreResult<_>>()?),
                ),
                _ => Ok(None),
            }
        })
    }

    fn append<'a>(
        &'a self,
        sid: &'a SessionId,
        expected: Anchor,
        events: &'a [NewEvent],
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<Append>> {
        Box::pin(self.append_marked(sid, expected, events, ttl_ms, None))
    }

    fn append_once<'a>(
        &'a self,
        sid: &'a SessionId,
        expected: Anchor,
        events: &'a [NewEvent],
        ttl_ms: u64,
        mark: &'a Mark,
    ) -> BoxFuture<'a, StoreResult<Append>> {
        Box::pin(self.append_marked(sid, expected, events, ttl_ms, Some(mark)))
    }

    fn trim<'a>(&'a self, sid: &'a SessionId, keep_from: u64) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let _: Value = self
                .trim_cmd(sid, keep_from)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            Ok(())
        })
    }

    fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let _: Value = redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            Ok(())
        })
    }

    fn full(&self) -> BoxFuture<'_, StoreResult<bool>> {
        Box::pin(self.pressure.full(&self.conn))
    }

    fn delete<'a>(&'a self, sid: &'a SessionId) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let mut inv = self.delete.prepare_invoke();
            for key in self.session_keys(sid) {
                inv.key(key);
            }
            inv.arg(self.live_channel(sid)).arg(sid.as_str());
            let removed: u64 = inv
                .invoke_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            Ok(removed > 0)
        })
    }
}

impl RedisLog {
    fn trim_cmd(&self, sid: &SessionId, keep_from: u64) -> redis::Cmd {
        let mut cmd = redis::cmd("XTRIM");
        cmd.arg(self.key(sid))
            .arg("MINID")
            .arg(EventId(keep_from).to_string());
        cmd
    }
}

/// Turn leases, in [`LEASE_GROUPS`] groups of one sorted set (member → expiry) and one hash
/// (member → owner) each, changed only by `lease.lua`. A member stays in the group of its
/// session (a stable hash of the session id), and each group's two keys share a slot of
/// their own (`{leases:<n>}`): on a cluster the leases, and the sweeps for expired ones, are
/// spread over the nodes instead of all landing on one.
pub struct RedisLeases {
    conn: Conn,
    groups: Vec<[String; 2]>,
    script: Script,
    pressure: Arc<Pressure>,
    /// The group the next sweep starts at, so a sweep cut short by its bound does not always
    /// favour the first groups.
    next_sweep: AtomicUsize,
}

/// How many slot groups the leases are spread over. Changing it moves leases between groups:
/// running turns' leases would be lost, so it is fixed.
pub const LEASE_GROUPS: usize = 16;

/// The group of a lease member `<session> <agent> <turn>`: FNV-1a of its session id, so every
/// replica (any build, any platform) puts it in the same one.
pub fn lease_group(member: &str) -> usize {
    let sid = member.split(' ').next().unwrap_or_default();
    (super::fnv1a(sid.as_bytes()) % LEASE_GROUPS as u64) as usize
}

impl RedisLeases {
    pub fn new(log: &RedisLog) -> Self {
        Self {
            conn: log.conn.clone(),
            groups: (0..LEASE_GROUPS)
                .map(|n| {
                    [
                        format!("{}:{{leases:{n}}}:expiry", log.prefix),
                        format!("{}:{{leases:{n}}}:owner", log.prefix),
                    ]
                })
                .collect(),
            script: Script::new(include_str!("lease.lua")),
            pressure: log.pressure.clone(),
            next_sweep: AtomicUsize::new(0),
        }
    }

    async fn run(
        &self,
        group: usize,
        op: &str,
        owner: &str,
        ttl: u64,
        arg: &str,
    ) -> StoreResult<Value> {
        let mut conn = self.conn.here();
        let [expiry, owners] = &self.groups[group];
        let mut inv = self.script.key(expiry);
        inv.key(owners).arg(op).arg(owner).arg(ttl).arg(arg);
        inv.invoke_async(&mut conn)
            .await
            .map_err(|e| self.pressure.error(e))
    }

    async fn run_member(
        &self,
        op: &str,
        owner: &str,
        ttl: u64,
        member: &str,
    ) -> StoreResult<Value> {
        self.run(lease_group(member), op, owner, ttl, member).await
    }
}

impl super::TurnLeases for RedisLeases {
    fn acquire<'a>(
        &'a self,
        member: &'a str,
        owner: &'a str,
        ttl: u64,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            Ok(int(&self.run_member("acquire", owner, ttl, member).await?) == Some(1))
        })
    }

    fn renew<'a>(
        &'a self,
        member: &'a str,
        owner: &'a str,
        ttl: u64,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(
            async move { Ok(int(&self.run_member("renew", owner, ttl, member).await?) == Some(1)) },
        )
    }

    fn release<'a>(&'a self, member: &'a str, owner: &'a str) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            self.run_member("release", owner, 0, member)
                .await
                .map(|_| ())
        })
    }

    fn handoff<'a>(&'a self, member: &'a str, owner: &'a str) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            self.run_member("handoff", owner, 0, member)
                .await
                .map(|_| ())
        })
    }

    fn claim_expired<'a>(
        &'a self,
        owner: &'a str,
        ttl: u64,
        max: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<String>>> {
        Box::pin(async move {
            // Every group, a bounded batch each, until `max` are claimed.
            let start = self.next_sweep.fetch_add(1, Ordering::Relaxed);
            let mut claimed = Vec::new();
            for i in 0..LEASE_GROUPS {
                let want = max - claimed.len();
                if want == 0 {
                    break;
                }
                let group = (start + i) % LEASE_GROUPS;
                let reply = self
                    .run(group, "claim", owner, ttl, &want.to_string())
                    .await?;
                if let Value::Array(items) = reply {
                    claimed.extend(
                        items
                            .iter()
                            .filter_map(bytes)
                            .map(|b| String::from_utf8_lossy(b).into_owned()),
                    );
                }
            }
            Ok(claimed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_stays_in_its_sessions_group_and_sessions_spread_over_all_groups() {
        assert_eq!(lease_group("s-1 main t1"), lease_group("s-1 child t9"));
        let groups: std::collections::HashSet<usize> = (0..1000)
            .map(|i| lease_group(&format!("{i:032x} main t")))
            .collect();
        assert_eq!(groups.len(), LEASE_GROUPS);
        // Fixed by the hash, not by the build: replicas of any version agree.
        assert_eq!(lease_group("abc main t"), 11); // FNV-1a("abc") = 0xe71fa2190541574b
    }

    #[test]
    fn the_scripts_that_publish_do_it_in_the_form_a_cluster_turns_into_spublish() {
        for source in [include_str!("append.lua"), include_str!("delete.lua")] {
            assert!(source.contains("redis.call('PUBLISH'"));
        }
    }
}
