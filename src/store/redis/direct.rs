//! A cluster link that sends a command for one key straight to the primary serving the key's
//! slot, on a connection of its own, instead of through the cluster client's routing task.
//!
//! Why: through the cluster client every command crosses one more task each way (a channel to
//! the routing task, a oneshot back) and is copied once more; on this machine that made a
//! session write cost the replica ~30 % more than on one node, and every Redis node wake up for
//! fewer commands at a time (measured in README.md, "Benchmarks").
//!
//! What stays with the cluster client: commands without a key this module knows where to find
//! (see [`first_key`]), pipelines but those whose commands all have such keys in one slot,
//! `WAIT` after a write that went through it, subscriptions, and a command whose direct attempt
//! met what the cluster client would also send again (see [`Detour`]): an error reply saying
//! the command did not run there (`MOVED`, `ASK` naming a node not among the routes,
//! `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`), or a connection that was
//! lost or refused (the command may have run: the cluster client, too, sends such a command
//! again). A timed-out command is not sent again (it may still run; the cluster client does not
//! resend one either): its error is the caller's, within the same response timeout. After a
//! lost connection or a timeout of the node's connection (not one of what was left of the
//! caller's timeout, which bounds a resend and every `ASK` followed) the node is left out, and
//! after those, `MOVED`, `CLUSTERDOWN`, `MASTERDOWN` or `READONLY` the routes are read again
//! (`CLUSTER SLOTS`, at most once a second while commands fall back), so a failover or a moved
//! slot costs a detour, not a failed request. `ASK`, `TRYAGAIN` and `LOADING` (a slot being
//! migrated, a node starting) leave the routes as they are. `ASK` is followed here when it
//! names a primary of the routes (`ASKING` and the command on that node's connection), so a
//! `WAIT` can follow the write to the node that took it; a write with a key that the cluster
//! client carried is taken as acknowledged by no replica (see [`Last::Unknown`]). A command answered `TRYAGAIN` or
//! `LOADING` (directly, or after `ASK`) is sent again here, from the routes, after a pause of
//! 5 ms doubled up to 100 ms, each time within what is left of the response timeout: the
//! cluster client waits 1.28 s before it asks again and gives up after a second refusal, which
//! failed writes to a session whose slot took longer than that to move.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{
    Arg, AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisError,
    RedisFuture, RedisResult, Value,
};

use super::conn::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};

/// Hash slots of a Redis Cluster.
const SLOTS: usize = 16384;
/// While commands fall back to the cluster client, the routes are read again at most this
/// often.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Commands whose key is their first argument, and that touch no other key: sent directly.
/// (The rest of the store's commands are rare or multi-key, and go through the cluster client.)
/// `SPUBLISH`'s shard channel is routed as a key.
const ONE_KEY: [&[u8]; 12] = [
    b"XRANGE",
    b"XREVRANGE",
    b"XLEN",
    b"XADD",
    b"GET",
    b"HGET",
    b"HMGET",
    b"HGETALL",
    b"ZSCORE",
    b"PEXPIRE",
    b"PERSIST",
    b"SPUBLISH",
];

/// A cluster connection whose one-key commands go straight to their slot's primary.
#[derive(Clone)]
pub(super) struct Routed {
    pub(super) cluster: ClusterConnection,
    table: Arc<Table>,
    /// Where this handle's last command went: a `WAIT` must follow its write there.
    last: Last,
}

/// Where a handle's last command went, for the `WAIT` that follows a write.
#[derive(Clone, Default)]
pub(super) enum Last {
    /// Through the cluster client, without a key this link routes (a `WAIT` goes by the key
    /// the caller names, where the cluster client routes it).
    #[default]
    Cluster,
    /// Straight to a primary, on this connection (a `WAIT` follows it on the same connection:
    /// it covers what that connection wrote).
    Direct(MultiplexedConnection),
    /// A command with a key that the cluster client carried: its slot had no usable route, or
    /// the direct attempt met a redirection (other than an `ASK` followed here), a lost
    /// connection or a failing cluster. The cluster client may have followed `ASK` to a node
    /// without changing its routes, so a `WAIT` routed by the key could reach a node that never
    /// had the write and acknowledge it at once: no replica is taken as having acknowledged
    /// it. Also a command that failed here without a reply to go by: one that met `TRYAGAIN`
    /// or `LOADING` until the response timeout was nearly over, or whose resend (or `ASK`
    /// followed) ran out of it.
    Unknown,
}

struct Table {
    /// A seed node's settings (credentials, database): every node is reached with them.
    template: ConnectionInfo,
    /// The runtime the table was made on, where its refreshes run and the node connections
    /// they open have their drivers (a worker's own, or the main runtime's for the shared one).
    runtime: tokio::runtime::Handle,
    routes: RwLock<Arc<Routes>>,
    refreshing: AtomicBool,
    refreshed: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Routes {
    /// Per slot: 1 + the index of its primary in `nodes`; 0 when not known.
    slots: Vec<u16>,
    nodes: Vec<Node>,
}

struct Node {
    addr: (String, u16),
    /// `None`: not reachable when the routes were read.
    conn: Option<MultiplexedConnection>,
    /// Set when a command sent to it met a lost connection or a timeout: its slots go through
    /// the cluster client until the routes are read again (which opens a new connection).
    left_out: AtomicBool,
}

impl Routed {
    /// Reads the cluster's routes through `cluster` and connects to each primary (on the
    /// calling runtime). Routes that cannot be read yet leave every command to the cluster
    /// client until they can.
    pub(super) async fn new(cluster: ClusterConnection, template: ConnectionInfo) -> Self {
        let table = Arc::new(Table {
            template,
            runtime: tokio::runtime::Handle::current(),
            routes: RwLock::new(Arc::default()),
            refreshing: AtomicBool::new(false),
            refreshed: Mutex::new(None),
        });
        let mut routed = Self {
            cluster,
            table,
            last: Last::Cluster,
        };
        if let Ok(routes) = read_routes(&mut routed.cluster, &routed.table, None).await {
            *routed.table.write() = Arc::new(routes);
            *routed
                .table
                .refreshed
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        }
        routed
    }

    /// The node connection a command for `cmd`'s key goes on, if it goes directly; `Err(true)`
    /// when it has a key whose slot has no usable route (the routes want reading again).
    fn direct(&self, cmd: &Cmd) -> Result<(MultiplexedConnection, Arc<Routes>, usize), bool> {
        let key = first_key(cmd).ok_or(false)?;
        self.route(key_slot(key))
    }

    /// The node connection a pipeline goes on directly: when every command in it has a key this
    /// link knows, all in one slot with a usable route (`Err` as for [`Routed::direct`]).
    fn direct_pipeline(
        &self,
        pipeline: &Pipeline,
    ) -> Result<(MultiplexedConnection, Arc<Routes>, usize), bool> {
        let mut slots = pipeline.cmd_iter().map(|cmd| first_key(cmd).map(key_slot));
        let slot = slots.next().flatten().ok_or(false)?;
        if !slots.all(|s| s == Some(slot)) {
            return Err(false);
        }
        self.route(slot)
    }

    /// The connection to `slot`'s primary, unless the slot has no usable route (`Err(true)`).
    fn route(&self, slot: u16) -> Result<(MultiplexedConnection, Arc<Routes>, usize), bool> {
        let routes = self.table.read();
        let at = routes.slots.get(usize::from(slot)).copied();
        let Some(i) = at.and_then(|at| usize::from(at).checked_sub(1)) else {
            return Err(true);
        };
        let node = &routes.nodes[i];
        match &node.conn {
            Some(conn) if !node.left_out.load(Ordering::Relaxed) => Ok((conn.clone(), routes, i)),
            _ => Err(true),
        }
    }

    /// Reads the routes again in the background, unless that is under way or was done less
    /// than [`REFRESH_EVERY`] ago.
    fn refresh(&self) {
        {
            let mut refreshed = self
                .table
                .refreshed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if refreshed.is_some_and(|at| at.elapsed() < REFRESH_EVERY)
                || self.table.refreshing.swap(true, Ordering::AcqRel)
            {
                return;
            }
            *refreshed = Some(Instant::now());
        }
        let table = self.table.clone();
        let mut cluster = self.cluster.clone();
        // Cleared however the task ends, even unpolled (a runtime shutting down drops it).
        let done = Refreshed(table.clone());
        self.table.runtime.spawn(async move {
            let _done = done;
            let old = table.read();
            match read_routes(&mut cluster, &table, Some(&old)).await {
                Ok(routes) => *table.write() = Arc::new(routes),
                Err(e) => tracing::debug!(kind = ?e.kind(), "the Redis Cluster's routes could not be read; commands go through the cluster client"),
            }
        });
    }

    /// Where this handle's last command went: a `WAIT` must follow a write there.
    pub(super) fn last(&mut self) -> &mut Last {
        &mut self.last
    }

    /// A command the slot's primary answered with `ASK` (the slot is being migrated and the key
    /// has left): sent with `ASKING` to the primary `ASK` names, on this handle's connection to
    /// it, within `left`, so a `WAIT` can follow it there. `None` when that node is not one of
    /// the routes' primaries with a usable connection, or answered with another redirection
    /// (the cluster client then carries the command).
    async fn follow_ask(
        &mut self,
        error: &RedisError,
        cmd: &Cmd,
        routes: &Routes,
        left: Duration,
    ) -> Option<RedisResult<Value>> {
        let (addr, _) = error.redirect_node()?;
        let (host, port) = addr.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let i = routes
            .nodes
            .iter()
            .position(|n| n.addr.0 == host && n.addr.1 == port)?;
        let node = &routes.nodes[i];
        if node.left_out.load(Ordering::Relaxed) {
            return None;
        }
        let mut conn = node.conn.clone()?;
        // One write on the connection: nothing of another caller comes between the two.
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(cmd.clone());
        let reply = match tokio::time::timeout(left, conn.req_packed_commands(&pipe, 1, 1)).await {
            Ok(Ok(mut replies)) if replies.len() == 1 => Ok(replies.remove(0)),
            Ok(Ok(_)) => return None,
            Ok(Err(e)) => Err(e),
            // What was left of the caller's timeout ran out (the node's own is longer): the
            // command may still run; the node is not left out for it.
            Err(_) => {
                self.last = Last::Unknown;
                return Some(Err(timed_out()));
            }
        };
        match self.noted(&reply, node) {
            Detour::None => {
                self.last = Last::Direct(conn);
                Some(reply)
            }
            Detour::LeaveOut => {
                self.last = Last::Unknown;
                Some(reply)
            }
            // The caller sends it again after a pause.
            Detour::Resend if is_try_again(&reply) => Some(reply),
            Detour::LeaveOutAndResend | Detour::Reroute | Detour::Resend => None,
        }
    }

    /// What a direct reply from `node` asks for, with the node left out (a lost connection, a
    /// timeout) and the routes read again (those, and redirections that change them) as it
    /// says.
    fn noted(&self, reply: &RedisResult<Value>, node: &Node) -> Detour {
        let detour = Detour::after(reply);
        if matches!(detour, Detour::LeaveOut | Detour::LeaveOutAndResend) {
            node.left_out.store(true, Ordering::Relaxed);
        }
        if !matches!(detour, Detour::None | Detour::Resend) {
            self.refresh();
        }
        detour
    }
}

/// Marks the table's refresh as over when dropped.
struct Refreshed(Arc<Table>);

impl Drop for Refreshed {
    fn drop(&mut self) {
        self.0.refreshing.store(false, Ordering::Release);
    }
}

impl Table {
    fn read(&self) -> Arc<Routes> {
        self.routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Arc<Routes>> {
        self.routes.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ConnectionLike for Routed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.last = Last::Cluster;
            let started = Instant::now();
            let mut pause = TRY_AGAIN_FIRST;
            let mut attempted = false;
            loop {
                let (mut conn, routes, i) = match self.direct(cmd) {
                    Ok(direct) => direct,
                    Err(true) => {
                        self.last = Last::Unknown;
                        self.refresh();
                        break;
                    }
                    Err(false) => break,
                };
                // A command sent again gets what is left of the response timeout.
                let reply = if attempted {
                    let left = RESPONSE_TIMEOUT.saturating_sub(started.elapsed());
                    match tokio::time::timeout(left, conn.req_packed_command(cmd)).await {
                        Ok(reply) => reply,
                        Err(_) => {
                            self.last = Last::Unknown;
                            return Err(timed_out());
                        }
                    }
                } else {
                    conn.req_packed_command(cmd).await
                };
                attempted = true;
                let detour = self.noted(&reply, &routes.nodes[i]);
                let reply = match detour {
                    Detour::None => {
                        self.last = Last::Direct(conn);
                        return reply;
                    }
                    Detour::LeaveOut => {
                        self.last = Last::Unknown;
                        return reply;
                    }
                    Detour::LeaveOutAndResend | Detour::Reroute => {
                        self.last = Last::Unknown;
                        break;
                    }
                    Detour::Resend => {
                        let left = RESPONSE_TIMEOUT.saturating_sub(started.elapsed());
                        if left < TRY_AGAIN_LEFT {
                            // Too little left to send it anywhere: it did not run.
                            self.last = Last::Unknown;
                            return reply;
                        }
                        let asked = match error_of(&reply) {
                            Some(e) => self.follow_ask(&e, cmd, &routes, left).await,
                            None => None,
                        };
                        match asked {
                            Some(asked) if !is_try_again(&asked) => return asked,
                            Some(asked) => asked,
                            None if is_try_again(&reply) => reply,
                            None => {
                                self.last = Last::Unknown;
                                break;
                            }
                        }
                    }
                };
                // `TRYAGAIN` (the keys of a multi-key command are split between the two nodes
                // of a slot being migrated, or the one it was asked on lacks some) or `LOADING`:
                // the command did not run. Sent again after a pause, from the routes, while the
                // response timeout allows (the cluster client would wait over a second first).
                // Not sent again with less than `TRY_AGAIN_LEFT` left after the pause: a resend
                // that times out may have run, where this refusal says it did not.
                let left = RESPONSE_TIMEOUT.saturating_sub(started.elapsed());
                if left < pause + TRY_AGAIN_LEFT {
                    self.last = Last::Unknown;
                    return reply;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(TRY_AGAIN_MAX);
            }
            if attempted {
                // The detour gets what is left of the response timeout, so a command fails
                // within it as through the cluster client alone (whose retries stop once the
                // caller has gone).
                let left = RESPONSE_TIMEOUT.saturating_sub(started.elapsed());
                return match tokio::time::timeout(left, self.cluster.req_packed_command(cmd)).await
                {
                    Ok(reply) => reply,
                    Err(_) => Err(timed_out()),
                };
            }
            self.cluster.req_packed_command(cmd).await
        })
    }

    /// A pipeline whose commands all have a key this link knows, in one slot (a direct append's
    /// `XADD` and read), goes straight to that slot's primary, in one write; any other through
    /// the cluster client. A direct pipeline is not sent again: what met a redirection or a
    /// lost connection is in its replies (or its error), with the node left out and the routes
    /// read again as for one command, and its caller decides what to do (the direct append
    /// goes on to the script after a redirection, which takes the cluster client's detours,
    /// and answers an outage after a lost connection: its `XADD` may have run).
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.last = Last::Cluster;
            let (mut conn, routes, i) = match self.direct_pipeline(pipeline) {
                Ok(direct) => direct,
                // As for one command: a `WAIT` cannot know where the cluster client took it.
                Err(true) => {
                    self.last = Last::Unknown;
                    self.refresh();
                    return self
                        .cluster
                        .req_packed_commands(pipeline, offset, count)
                        .await;
                }
                Err(false) => {
                    return self
                        .cluster
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
            };
            let replies = conn.req_packed_commands(pipeline, offset, count).await;
            let first_error = match &replies {
                Ok(values) => values
                    .iter()
                    .find(|v| matches!(v, Value::ServerError(_)))
                    .map(|v| Ok(v.clone())),
                Err(e) => Some(Err(e.clone())),
            };
            let detour = first_error.map_or(Detour::None, |e| self.noted(&e, &routes.nodes[i]));
            self.last = match detour {
                Detour::None => Last::Direct(conn),
                _ => Last::Unknown,
            };
            replies
        })
    }

    fn get_db(&self) -> i64 {
        self.cluster.get_db()
    }
}

/// What a direct attempt's reply asks for.
#[derive(Debug, PartialEq)]
enum Detour {
    /// Nothing: the reply is the caller's.
    None,
    /// The connection timed out (the command may still run): the reply is the caller's, and
    /// the node is left out until the routes are read again.
    LeaveOut,
    /// The connection was lost or refused: the node is left out, the routes read again, and
    /// the command sent through the cluster client (which does the same with its own).
    LeaveOutAndResend,
    /// The slot is elsewhere now or the cluster is failing over (`MOVED`, `CLUSTERDOWN`,
    /// `MASTERDOWN`, `READONLY`; the command did not run): the routes are read again and the
    /// command goes through the cluster client.
    Reroute,
    /// The command did not run for a passing reason (`ASK`: the slot is being migrated;
    /// `TRYAGAIN`, `LOADING`): `ASK` is followed, `TRYAGAIN` and `LOADING` are sent again after
    /// a pause (both within the response timeout), the routes stay.
    Resend,
}

/// The first pause before a command answered `TRYAGAIN` or `LOADING` is sent again, and the
/// longest: the pause doubles from the first up to it.
const TRY_AGAIN_FIRST: Duration = Duration::from_millis(5);
const TRY_AGAIN_MAX: Duration = Duration::from_millis(100);
/// A resend, or an `ASK` followed, needs at least this much of the response timeout left.
const TRY_AGAIN_LEFT: Duration = Duration::from_millis(20);

/// Whether a reply says the command did not run, and may once the node is ready (`TRYAGAIN`,
/// `LOADING`).
fn is_try_again(reply: &RedisResult<Value>) -> bool {
    use redis::{ErrorKind, ServerErrorKind as Server};
    error_of(reply).is_some_and(|e| {
        matches!(
            e.kind(),
            ErrorKind::Server(Server::TryAgain | Server::BusyLoading)
        )
    })
}

/// The error of a command that ran out of what was left of the caller's response timeout.
fn timed_out() -> RedisError {
    std::io::Error::from(std::io::ErrorKind::TimedOut).into()
}

/// The error a reply is, whether it came as an error or as an error reply.
fn error_of(reply: &RedisResult<Value>) -> Option<RedisError> {
    match reply {
        Ok(Value::ServerError(e)) => Some(RedisError::from(e.clone())),
        Err(e) => Some(e.clone()),
        Ok(_) => None,
    }
}

impl Detour {
    fn after(reply: &RedisResult<Value>) -> Self {
        use redis::{ErrorKind, ServerErrorKind as Server};
        let Some(error) = error_of(reply) else {
            return Self::None;
        };
        match error.kind() {
            ErrorKind::Server(Server::Moved | Server::ClusterDown | Server::MasterDown) => {
                Self::Reroute
            }
            ErrorKind::Server(Server::ReadOnly) => Self::Reroute,
            ErrorKind::Server(Server::Ask | Server::TryAgain | Server::BusyLoading) => Self::Resend,
            _ if error.is_connection_dropped() || error.is_connection_refusal() => {
                Self::LeaveOutAndResend
            }
            _ if error.is_timeout() => Self::LeaveOut,
            _ => Self::None,
        }
    }
}

/// The cluster's routes (`CLUSTER SLOTS`): each primary's slots, with a connection to it (the
/// one in `old` when the node is still there and was not left out).
async fn read_routes(
    cluster: &mut ClusterConnection,
    table: &Table,
    old: Option<&Routes>,
) -> RedisResult<Routes> {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    let mut reply: Value = cmd.query_async(cluster).await?;
    // A node that does not know its own address (one alone in its cluster) gives it as '',
    // meaning the address it was asked at: such a reply is asked again of the seed, on a
    // connection of its own. (Not through the cluster client by address: a seed it does not
    // hold a connection to under that name, a hostname, makes it reconnect to every node.)
    let mut asked_at = None;
    if has_unknown_host(&reply) {
        if let ConnectionAddr::Tcp(host, port) = table.template.addr() {
            let seed = (host.clone(), *port);
            if let Some(mut conn) = connect(&table.template, &seed).await {
                if let Ok(again) = cmd.query_async(&mut conn).await {
                    reply = again;
                    asked_at = Some(host.as_str());
                }
            }
        }
    }
    let mut routes = Routes {
        slots: vec![0; SLOTS],
        nodes: Vec::new(),
    };
    let Value::Array(ranges) = reply else {
        return Ok(routes);
    };
    // (new index, old index) of each node whose connection is kept.
    let mut kept_from = Vec::new();
    for range in &ranges {
        let Some((start, end, addr)) = slot_range(range, asked_at) else {
            continue;
        };
        let i = match routes.nodes.iter().position(|n| n.addr == addr) {
            Some(i) => i,
            None => {
                let kept = old.and_then(|old| {
                    let at = old.nodes.iter().position(|n| n.addr == addr)?;
                    let node = &old.nodes[at];
                    let conn = node.conn.clone()?;
                    (!node.left_out.load(Ordering::Relaxed)).then_some((at, conn))
                });
                let conn = match kept {
                    Some((at, conn)) => {
                        kept_from.push((routes.nodes.len(), at));
                        Some(conn)
                    }
                    None => connect(&table.template, &addr).await,
                };
                routes.nodes.push(Node {
                    addr,
                    conn,
                    left_out: AtomicBool::new(false),
                });
                routes.nodes.len() - 1
            }
        };
        if let Ok(at) = u16::try_from(i + 1) {
            routes.slots[start..=end].fill(at);
        }
    }
    // A kept connection whose node was left out while the other nodes were being connected
    // (its timeout's own refresh was turned away: this one was under way) stays out.
    if let Some(old) = old {
        for (new, at) in kept_from {
            if old.nodes[at].left_out.load(Ordering::Relaxed) {
                routes.nodes[new].left_out.store(true, Ordering::Relaxed);
            }
        }
    }
    Ok(routes)
}

/// Whether a `CLUSTER SLOTS` reply names a primary by the host '' (the node that answered).
fn has_unknown_host(reply: &Value) -> bool {
    let Value::Array(ranges) = reply else {
        return false;
    };
    ranges.iter().any(|range| {
        primary_of(range)
            .and_then(|p| host_text(p.first()?))
            .as_deref()
            == Some("")
    })
}

/// The primary's part of a `CLUSTER SLOTS` range: `[host, port, id, …]`.
fn primary_of(range: &Value) -> Option<&[Value]> {
    let Value::Array(parts) = range else {
        return None;
    };
    match parts.get(2)? {
        Value::Array(primary) => Some(primary),
        _ => None,
    }
}

fn host_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `[start, end, [host, port, …], …replicas]`: the slots and their primary's address (a host
/// given as '' is `asked_at`, the host of the node that answered, when known).
fn slot_range(range: &Value, asked_at: Option<&str>) -> Option<(usize, usize, (String, u16))> {
    let Value::Array(parts) = range else {
        return None;
    };
    let int = |v: &Value| match v {
        Value::Int(n) => usize::try_from(*n).ok(),
        _ => None,
    };
    let (start, end) = (int(parts.first()?)?, int(parts.get(1)?)?);
    let primary = primary_of(range)?;
    let mut host = host_text(primary.first()?)?;
    if host.is_empty() {
        host = asked_at.unwrap_or_default().to_owned();
    }
    let port = u16::try_from(int(primary.get(1)?)?).ok()?;
    // An unknown host ('?', or '' from an unknown node) is the cluster client's to find.
    if host.is_empty() || host == "?" || start > end || end >= SLOTS {
        return None;
    }
    Some((start, end, (host, port)))
}

/// A connection to the node at `addr`, with the seed's settings, its driver on the calling
/// runtime; `None` when it cannot be opened (its slots then go through the cluster client), or
/// when the seed is not a plain TCP address (TLS, a socket): direct routing is only for those.
async fn connect(template: &ConnectionInfo, addr: &(String, u16)) -> Option<MultiplexedConnection> {
    if !matches!(template.addr(), ConnectionAddr::Tcp(..)) {
        return None;
    }
    let info = template
        .clone()
        .set_addr(ConnectionAddr::Tcp(addr.0.clone(), addr.1));
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    let client = Client::open(info).ok()?;
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .ok()
}

/// The key `cmd` is about, when it is one this module routes: a script's first key (every key
/// of the store's scripts shares the session's slot) or a one-key command's key.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(a) => Some(a),
        _ => None,
    });
    let name = args.next()??;
    if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") {
        let _script = args.next()??;
        let keys = std::str::from_utf8(args.next()??).ok()?;
        return match keys.parse::<u32>() {
            Ok(n) if n > 0 => args.next()?,
            _ => None,
        };
    }
    if ONE_KEY.iter().any(|c| name.eq_ignore_ascii_case(c)) {
        return args.next()?;
    }
    None
}

/// A key's hash slot, as Redis Cluster computes it: CRC16 (XMODEM) of its hash tag (what is
/// between the first `{` and the next `}`, if that is not empty) or else of the whole key,
/// modulo 16384.
pub(super) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

/// CRC16/XMODEM (polynomial 0x1021, initial 0), a byte at a time from a table.
fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0, |crc, &byte| {
        (crc << 8) ^ CRC16[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

const CRC16: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_goes_to_the_slot_redis_cluster_gives_it() {
        // `CLUSTER KEYSLOT` on Redis 7.0.15 for each.
        for (key, slot) in [
            ("foo", 12182),
            ("123456789", 12739),
            ("{user1000}.following", 3443),
            ("{user1000}.followers", 3443),
            ("foo{}{bar}", 8363),
            ("foo{{bar}}zap", 4015),
            ("foo{bar}{zap}", 5061),
            ("dsh:{75875526c7619934929340736cfb04d7}:log", 5474),
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }

    #[test]
    fn a_reply_is_resent_only_where_the_command_did_not_run_or_its_connection_was_lost() {
        let reply = |resp: &str| Ok(redis::parse_redis_value(resp.as_bytes()).unwrap());
        let io = |kind| Err(std::io::Error::from(kind).into());
        assert_eq!(Detour::after(&reply("+OK\r\n")), Detour::None);
        // A script's own error, or NOSCRIPT, is the caller's.
        assert_eq!(Detour::after(&reply("-ERR boom\r\n")), Detour::None);
        assert_eq!(Detour::after(&reply("-NOSCRIPT no\r\n")), Detour::None);
        for moved in [
            "-MOVED 3999 127.0.0.1:7001\r\n",
            "-CLUSTERDOWN down\r\n",
            "-READONLY replica\r\n",
        ] {
            assert_eq!(Detour::after(&reply(moved)), Detour::Reroute, "{moved}");
        }
        for passing in ["-ASK 3999 127.0.0.1:7001\r\n", "-TRYAGAIN later\r\n"] {
            assert_eq!(Detour::after(&reply(passing)), Detour::Resend, "{passing}");
        }
        for lost in [
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::ConnectionRefused,
        ] {
            assert_eq!(
                Detour::after(&io(lost)),
                Detour::LeaveOutAndResend,
                "{lost:?}"
            );
        }
        // A command that timed out may still run: never sent twice.
        assert_eq!(
            Detour::after(&io(std::io::ErrorKind::TimedOut)),
            Detour::LeaveOut
        );
    }

    #[test]
    fn a_primary_that_does_not_know_its_host_is_reached_where_it_was_asked() {
        let range = |host: &str| {
            Value::Array(vec![
                Value::Int(0),
                Value::Int(16383),
                Value::Array(vec![
                    Value::BulkString(host.as_bytes().to_vec()),
                    Value::Int(7000),
                    Value::BulkString(b"id".to_vec()),
                ]),
            ])
        };
        let at = |host: &str| (0, 16383, (host.to_owned(), 7000));
        // A node alone in its cluster gives its host as ''.
        assert_eq!(
            slot_range(&range(""), Some("10.0.0.5")),
            Some(at("10.0.0.5"))
        );
        assert_eq!(slot_range(&range(""), None), None);
        assert_eq!(slot_range(&range("?"), Some("10.0.0.5")), None);
        assert_eq!(
            slot_range(&range("10.0.0.7"), Some("10.0.0.5")),
            Some(at("10.0.0.7"))
        );
        // Only a reply with a '' host is asked again of the seed.
        assert!(has_unknown_host(&Value::Array(vec![range("")])));
        assert!(!has_unknown_host(&Value::Array(vec![
            range("10.0.0.7"),
            range("?")
        ])));
    }

    #[test]
    fn only_commands_with_a_known_key_go_directly() {
        let key = |cmd: &Cmd| first_key(cmd).map(|k| String::from_utf8_lossy(k).into_owned());
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("abc").arg(2).arg("k1").arg("k2").arg("argv");
        assert_eq!(key(&eval).as_deref(), Some("k1"));
        let mut no_keys = redis::cmd("EVALSHA");
        no_keys.arg("abc").arg(0).arg("argv");
        assert_eq!(key(&no_keys), None);
        let mut read = redis::cmd("xrevrange");
        read.arg("log").arg("+").arg("-");
        assert_eq!(key(&read).as_deref(), Some("log"));
        let mut many = redis::cmd("EXISTS");
        many.arg("a").arg("b");
        assert_eq!(key(&many), None);
        assert_eq!(key(&redis::cmd("PING")), None);
    }
}
