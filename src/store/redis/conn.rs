//! Where the service's Redis is and how it is reached: one node (`redis://`, `redis+unix://`)
//! through a [`ConnectionManager`], or a Redis Cluster (`redis+cluster://host:port,host:port`,
//! or any URL with `DSH_REDIS_CLUSTER=true`) through the redis crate's async cluster client.
//! [`Conn`] is either, and is what every command of the store is sent on: a cluster routes
//! each command (and each script invocation) by its first key, so everything else is the same
//! code on both. On a cluster, a command for one key (a script's, a log read) goes straight to
//! the primary serving the key's slot, the rest through the cluster client ([`Routed`]).
//!
//! Commands from an HTTP worker thread (its requests and the tasks they start) go on that
//! thread's own connection (to the node, or a cluster client of its own) once it is open (see
//! [`Conn::here`]), so a request and its Redis round trips stay on one thread. The shared
//! connection serves the main runtime's work (turns, sweeps, webhooks), and a worker until its
//! own is open. (A dropped single-node connection reconnects on the runtime of the caller that
//! notices: a worker that used the shared one meanwhile may end up running its driver.)
//!
//! Live messages differ: a cluster broadcasts a plain `PUBLISH` to every node, so there the
//! session's channel is a shard channel (`SPUBLISH` / `SSUBSCRIBE`, served by the node holding
//! the session's slot). A single node keeps `PUBLISH` / `SUBSCRIBE`: the crate's
//! `ConnectionManager` cannot `SSUBSCRIBE` (nor resubscribe a shard channel after a reconnect).

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Cmd, ConnectionInfo, ErrorKind, IntoConnectionInfo, Pipeline, PushInfo, RedisError,
    RedisFuture, RedisResult, Value,
};
use tokio::sync::mpsc::UnboundedSender;

use super::direct::{Last, Routed};

/// Redis answers a command within this or the request fails with 503.
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Retries of a command that met a dropped connection (or, on a cluster, a moved slot).
const RETRIES: u32 = 2;

/// The Redis deployment `REDIS_URL` names.
#[derive(Clone)]
pub(super) enum Target {
    Single(redis::Client),
    /// The seed nodes (the cluster client learns the rest).
    Cluster(Vec<ConnectionInfo>),
}

impl Target {
    /// `url` as one node or, when it is a `redis+cluster://` URL or `cluster` is set, as the
    /// seed nodes of a cluster. Errors never quote the URL (it may hold a password).
    pub(super) fn parse(url: &str, cluster: bool) -> RedisResult<Self> {
        match url.strip_prefix("redis+cluster://") {
            Some(rest) => Ok(Self::Cluster(seeds(rest)?)),
            None if cluster => match url.strip_prefix("redis://") {
                Some(rest) => Ok(Self::Cluster(seeds(rest)?)),
                None => Err(invalid(
                    "DSH_REDIS_CLUSTER needs a redis:// or redis+cluster:// URL",
                )),
            },
            None => redis::Client::open(url).map(Self::Single),
        }
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// The connection commands are sent on: shared, and the origin of each worker's own
    /// ([`Conn::here`]).
    pub(super) async fn connect(&self) -> RedisResult<Conn> {
        Ok(Conn {
            link: self.link().await?,
            origin: Some(Arc::new(Origin {
                target: self.clone(),
            })),
        })
    }

    /// A new multiplexed connection, its driver on the calling runtime.
    async fn link(&self) -> RedisResult<Link> {
        match self {
            Self::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(RETRIES as usize);
                let conn = ConnectionManager::new_with_config(client.clone(), config).await?;
                Ok(Link::Single(conn))
            }
            Self::Cluster(nodes) => {
                let client = cluster_builder(nodes).build()?;
                let cluster = client.get_async_connection().await?;
                Ok(Link::Routed(Routed::new(cluster, nodes[0].clone()).await))
            }
        }
    }

    /// A RESP3 connection whose pushes (messages, subscription confirmations, disconnections)
    /// go to `pushes`, and which renews its subscriptions by itself after a reconnect (or, on
    /// a cluster, after a failover moves a slot).
    pub(super) async fn subscriber(&self, pushes: UnboundedSender<PushInfo>) -> RedisResult<Conn> {
        match self {
            Self::Single(client) => {
                let info = client.get_connection_info().clone();
                let redis = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP3);
                let client = redis::Client::open(info.set_redis_settings(redis))?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_push_sender(pushes)
                    .set_automatic_resubscription();
                let conn = ConnectionManager::new_with_config(client, config).await?;
                Ok(Conn::from(Link::Single(conn)))
            }
            Self::Cluster(nodes) => {
                let client = cluster_builder(nodes)
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(pushes)
                    .build()?;
                Ok(Conn::from(Link::Cluster(
                    client.get_async_connection().await?,
                )))
            }
        }
    }
}

fn cluster_builder(nodes: &[ConnectionInfo]) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes.iter().cloned())
        .connection_timeout(CONNECT_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .retries(RETRIES)
}

fn invalid(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, what))
}

/// The seed nodes of `[user:password@]host:port,host:port[/db][?query]` (what follows the
/// scheme): each node gets the userinfo, database and query.
fn seeds(rest: &str) -> RedisResult<Vec<ConnectionInfo>> {
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let nodes = hosts
        .split(',')
        .filter(|h| !h.trim().is_empty())
        .map(|host| {
            format!("redis://{userinfo}{}{tail}", host.trim())
                .into_connection_info()
                .map_err(|_| invalid("a node of the Redis Cluster URL is not host:port"))
        })
        .collect::<RedisResult<Vec<_>>>()?;
    if nodes.is_empty() {
        return Err(invalid("the Redis Cluster URL names no node"));
    }
    Ok(nodes)
}

/// A connection to one node or to a cluster, cheap to clone (both multiplex).
#[derive(Clone)]
pub struct Conn {
    link: Link,
    /// How to open another like it, for [`Conn::here`] (none: a subscriber's, or a worker's
    /// own).
    origin: Option<Arc<Origin>>,
}

#[derive(Clone)]
enum Link {
    Single(ConnectionManager),
    /// A subscriber's.
    Cluster(ClusterConnection),
    /// Commands sent on: one-key commands straight to their slot's primary.
    Routed(Routed),
}

impl From<Link> for Conn {
    fn from(link: Link) -> Self {
        Self { link, origin: None }
    }
}

struct Origin {
    target: Target,
}

/// A thread's own connection, opened from a store's [`Origin`] on the thread's runtime (the
/// slot's weak reference keeps the origin's address from being reused while it exists).
struct Slot {
    origin: Weak<Origin>,
    runtime: tokio::runtime::Id,
    state: Own,
}

enum Own {
    Ready(Conn),
    Opening,
    /// The last `failures` attempts failed: the shared connection serves until `retry`.
    Failed {
        failures: u32,
        retry: Instant,
    },
}

/// How long after a failed attempt a thread tries again to open its own connection: doubled
/// with each failure in a row, up to [`REOPEN_MAX`].
const REOPEN: Duration = Duration::from_secs(1);
const REOPEN_MAX: Duration = Duration::from_secs(30);

thread_local! {
    /// Whether this thread keeps connections of its own: set by [`own_connections`].
    static OWNS: Cell<bool> = const { Cell::new(false) };
    static OWN: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
}

/// Lets the calling thread open a connection of its own (to the node, or a cluster client)
/// for each store it sends commands through: only for a thread whose single-threaded runtime
/// lives as long as the thread (an HTTP worker). A multiplexed connection's driver then runs
/// beside the requests it serves: the shared connection's runs on the main runtime, and each
/// round trip through it from a worker costs two wake-ups across threads (measured: about one
/// eventfd write per request).
pub fn own_connections() {
    OWNS.set(true);
}

impl Conn {
    /// A connection to what `url` names (a cluster for `redis+cluster://`), with the store's
    /// timeouts: for tools and tests that inspect the store directly.
    pub async fn open(url: &str) -> RedisResult<Self> {
        Target::parse(url, false)?.connect().await
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_) | Link::Routed(_))
    }

    /// The connection to send commands on from this thread: on a thread that keeps its own
    /// ([`own_connections`]) and once it has opened it, that one; otherwise (and while it is
    /// being opened, in the background) this shared one. A caller uses what this returns for
    /// everything that must go on one connection (a write and its `WAIT`).
    pub(in crate::store) fn here(&self) -> Self {
        let Some(origin) = self.origin.as_ref().filter(|_| OWNS.get()) else {
            return self.clone();
        };
        // What the thread's runtime spawns must run on this thread (the connection is kept in
        // this thread's slots): a current-thread runtime.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.clone();
        };
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread {
            return self.clone();
        }
        let rt = runtime.id();
        let open = OWN.with_borrow_mut(|slots| {
            let Some(slot) = slots.iter_mut().find(|s| s.holds(origin, rt)) else {
                // Connections of stores that are gone, or opened on another runtime of this
                // thread, close with their slots.
                slots.retain(|s| s.origin.strong_count() > 0 && s.runtime == rt);
                slots.push(Slot {
                    origin: Arc::downgrade(origin),
                    runtime: rt,
                    state: Own::Opening,
                });
                return Err(Some(0));
            };
            match slot.state {
                Own::Ready(ref conn) => Ok(conn.clone()),
                Own::Failed { failures, retry } if Instant::now() >= retry => {
                    slot.state = Own::Opening;
                    Err(Some(failures))
                }
                Own::Opening | Own::Failed { .. } => Err(None),
            }
        });
        match open {
            Ok(conn) => conn,
            Err(opening) => {
                if let Some(failures) = opening {
                    runtime.spawn(open_own(origin.clone(), rt, failures));
                }
                self.clone()
            }
        }
    }

    /// `WAIT replicas timeout` on the node holding `key`'s slot (on one node: this
    /// connection, which made the write): how many replicas acknowledged every write this
    /// connection sent that node so far.
    pub(super) async fn wait_replicas(
        &mut self,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> RedisResult<u64> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(timeout.as_millis() as u64);
        // On a cluster: the connection the write went on directly; none acknowledged when the
        // cluster client carried it (it may have followed `ASK` to a node its routes do not
        // send the key to); else (no write with a key) the node the cluster client routes the
        // key to.
        let cluster = match &mut self.link {
            Link::Single(conn) => return cmd.query_async(conn).await,
            Link::Routed(conn) => match conn.last() {
                Last::Direct(direct) => return cmd.query_async(direct).await,
                Last::Unknown => return Ok(0),
                Last::Cluster => &mut conn.cluster,
            },
            Link::Cluster(conn) => conn,
        };
        let route = Route::with_key(key, SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        let reply = cluster.route_command(cmd, routing).await?;
        redis::from_redis_value(reply).map_err(Into::into)
    }

    /// Subscribes to a session's live channel: a shard channel on a cluster.
    pub(super) async fn watch(&mut self, channel: &str) -> RedisResult<()> {
        match &mut self.link {
            Link::Single(conn) => conn.subscribe(channel).await,
            Link::Cluster(conn) => conn.ssubscribe(channel).await,
            Link::Routed(conn) => conn.cluster.ssubscribe(channel).await,
        }
    }

    pub(super) async fn unwatch(&mut self, channel: &str) -> RedisResult<()> {
        match &mut self.link {
            Link::Single(conn) => conn.unsubscribe(channel).await,
            Link::Cluster(conn) => conn.sunsubscribe(channel).await,
            Link::Routed(conn) => conn.cluster.sunsubscribe(channel).await,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Single(conn) => conn.req_packed_command(cmd),
            Link::Cluster(conn) => conn.req_packed_command(cmd),
            Link::Routed(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.link {
            Link::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Routed(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
            Link::Routed(conn) => conn.get_db(),
        }
    }
}

/// Opens this thread's own connection for `origin` and keeps it in the thread's slot; meanwhile
/// (and after a failure, until the retry) the shared connection serves. A first failure is
/// logged, and so is the recovery after one.
async fn open_own(origin: Arc<Origin>, runtime: tokio::runtime::Id, failures: u32) {
    let state = match origin.target.link().await {
        Ok(link) => {
            if failures > 0 {
                tracing::info!(failures, "a worker opened its own Redis connection");
            }
            Own::Ready(Conn::from(link))
        }
        Err(e) => {
            if failures == 0 {
                tracing::warn!(kind = ?e.kind(), "a worker could not open its own Redis connection; the shared one serves");
            }
            let wait = REOPEN.saturating_mul(1 << failures.min(5)).min(REOPEN_MAX);
            Own::Failed {
                failures: failures + 1,
                retry: Instant::now() + wait,
            }
        }
    };
    OWN.with_borrow_mut(|slots| {
        if let Some(slot) = slots.iter_mut().find(|s| s.holds(&origin, runtime)) {
            slot.state = state;
        }
    });
}

impl Slot {
    fn holds(&self, origin: &Arc<Origin>, runtime: tokio::runtime::Id) -> bool {
        self.runtime == runtime && std::ptr::eq(self.origin.as_ptr(), Arc::as_ptr(origin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(target: &Target) -> Vec<String> {
        match target {
            Target::Cluster(nodes) => nodes.iter().map(|n| n.addr().to_string()).collect(),
            Target::Single(_) => vec!["single".into()],
        }
    }

    #[test]
    fn a_cluster_url_names_every_seed_node_with_its_credentials() {
        let target =
            Target::parse("redis+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7001", false).unwrap();
        assert_eq!(addrs(&target), ["10.0.0.1:7000", "10.0.0.2:7001"]);
        let Target::Cluster(nodes) = target else {
            unreachable!()
        };
        assert!(nodes
            .iter()
            .all(|n| n.redis_settings().password() == Some("pw")));
    }

    #[test]
    fn a_plain_url_is_one_node_unless_cluster_mode_is_asked_for() {
        let url = "redis://127.0.0.1:7000";
        assert_eq!(addrs(&Target::parse(url, false).unwrap()), ["single"]);
        assert_eq!(
            addrs(&Target::parse(url, true).unwrap()),
            ["127.0.0.1:7000"]
        );
    }

    #[test]
    fn a_bad_cluster_url_is_refused_without_quoting_its_password() {
        for url in [
            "redis+cluster://u:secret@",
            "redis+cluster://u:secret@host:notaport",
        ] {
            let Err(e) = Target::parse(url, false) else {
                panic!("{url} was accepted")
            };
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }
}
