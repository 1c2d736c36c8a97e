//! A Redis Cluster of a test's own (for a test that kills a node): redis-server processes in
//! cluster mode on free ports, joined by `redis-cli --cluster create`, killed with the test.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::{fresh_prefix, spawn_server, wait_ping, TestRedis};

struct Node {
    port: u16,
    child: Option<Child>,
}

pub struct TestCluster {
    /// `redis+cluster://…` naming every node.
    pub url: String,
    pub prefix: String,
    dir: PathBuf,
    node_timeout_ms: u64,
    nodes: Vec<Node>,
}

impl TestCluster {
    /// `masters` primaries with `replicas` replicas each; a primary is failed over once the
    /// others have not heard from it for `node_timeout_ms`.
    pub async fn start(masters: usize, replicas: usize, node_timeout_ms: u64) -> Self {
        let dir = std::env::temp_dir().join(format!("dsh-cluster-{}", fresh_prefix()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = Self {
            url: String::new(),
            prefix: fresh_prefix(),
            dir,
            node_timeout_ms,
            nodes: Vec::new(),
        };
        for _ in 0..masters * (1 + replicas) {
            let port = node_port();
            let child = cluster.spawn(port);
            cluster.nodes.push(Node {
                port,
                child: Some(child),
            });
        }
        for node in &cluster.nodes {
            wait_ping(&format!("redis://127.0.0.1:{}", node.port)).await;
        }
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new(std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into()))
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed with redis-server");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.url = format!("redis+cluster://{}", addrs.join(","));
        for node in &cluster.nodes {
            cluster.wait_ok(node.port).await;
        }
        cluster.wait_replicas_synced().await;
        cluster
    }

    /// Waits until every replica has synchronized with its primary (a `WAIT` before that
    /// counts no replica).
    async fn wait_replicas_synced(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for n in self.nodes.iter().filter(|n| n.child.is_some()) {
            loop {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut node(n.port).await)
                    .await
                    .unwrap_or_default();
                let replica = info.lines().any(|l| l.trim() == "role:slave");
                if !replica || info.lines().any(|l| l.trim() == "master_link_status:up") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "replica {} never synchronized",
                    n.port
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    fn spawn(&self, port: u16) -> Child {
        let dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd =
            Command::new(std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()));
        cmd.current_dir(&dir).args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &self.node_timeout_ms.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ]);
        spawn_server(cmd)
    }

    /// This cluster as the harness's Redis (for `spawn_replica` and the like), under a key
    /// prefix of its own.
    pub fn redis(&self) -> TestRedis {
        TestRedis::shared(self.url.clone(), self.prefix.clone())
    }

    /// The port of the primary serving `key`'s slot.
    pub async fn master_of(&self, key: &str) -> u16 {
        let (port, slot) = self.slot_of(key).await;
        self.master_of_slot(port, slot)
            .await
            .expect("every slot has a primary")
    }

    /// A running node and the slot of `key`.
    async fn slot_of(&self, key: &str) -> (u16, u16) {
        let port = self.live_port();
        let slot = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut node(port).await)
            .await
            .unwrap();
        (port, slot)
    }

    /// The primary of `slot` as the node at `port` sees it (not one flagged as failed).
    async fn master_of_slot(&self, port: u16, slot: u16) -> Option<u16> {
        let mut conn = node(port).await;
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut conn)
            .await
            .ok()?;
        nodes.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let flags = fields.get(2)?;
            if !flags.contains("master") || flags.contains("fail") {
                return None;
            }
            let serves = fields[8..].iter().any(|range| {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
            });
            let addr = fields.get(1)?.split('@').next()?;
            serves.then(|| addr.rsplit(':').next()?.parse().ok())?
        })
    }

    /// Moves the slot of `key` (with its keys) from its primary to another one, as
    /// `redis-cli --cluster reshard` does: importing on the target, migrating on the source,
    /// the keys moved with `MIGRATE`, then the slot given to the target on every primary.
    /// Returns (from, to) ports.
    pub async fn move_slot(&self, key: &str) -> (u16, u16) {
        let moving = self.begin_move(key).await;
        self.finish_move(&moving).await;
        (moving.from, moving.to)
    }

    /// The first half of [`Self::move_slot`]: the slot of `key` is importing on another
    /// primary and migrating on its own, and every key of it has been moved there. Until
    /// [`Self::finish_move`], a command for the slot sent to the source meets `ASK` (its keys
    /// are gone), and the target takes it only after `ASKING`.
    pub async fn begin_move(&self, key: &str) -> SlotMove {
        let (port, slot) = self.slot_of(key).await;
        let from = self
            .master_of_slot(port, slot)
            .await
            .expect("the slot has a primary");
        let masters = primaries(&cluster_nodes(from).await);
        let id_of = |port: u16| masters.iter().find(|m| m.1 == port).unwrap().0.clone();
        let to = masters
            .iter()
            .map(|m| m.1)
            .find(|&p| p != from)
            .expect("another primary");
        let moving = SlotMove {
            slot,
            from,
            to,
            to_id: id_of(to),
            masters: masters.iter().map(|m| m.1).collect(),
        };
        let _: () = setslot(slot, "IMPORTING", &id_of(from))
            .query_async(&mut node(to).await)
            .await
            .unwrap();
        let _: () = setslot(slot, "MIGRATING", &moving.to_id)
            .query_async(&mut node(from).await)
            .await
            .unwrap();
        migrate_keys(&moving).await;
        moving
    }

    /// The second half of [`Self::move_slot`]: keys written to the source meanwhile are moved
    /// too, and the slot is given to the target on every primary.
    pub async fn finish_move(&self, moving: &SlotMove) {
        migrate_keys(moving).await;
        // The target first, then the source, then the rest (as `redis-cli --cluster` does):
        // the other way round, for a moment each node sends the slot's commands to the other
        // with `MOVED`.
        let mut order = vec![moving.to, moving.from];
        order.extend(
            moving
                .masters
                .iter()
                .filter(|p| **p != moving.to && **p != moving.from),
        );
        for port in &order {
            let _: () = setslot(moving.slot, "NODE", &moving.to_id)
                .query_async(&mut node(*port).await)
                .await
                .unwrap();
        }
    }

    /// The port of a running replica of the primary at `port`, replicating from it (asked of
    /// the replicas themselves: the primary's `CLUSTER NODES` may not list it yet).
    pub async fn replica_of(&self, port: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for n in self.nodes.iter().filter(|n| n.child.is_some()) {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut node(n.port).await)
                    .await
                    .unwrap_or_default();
                let field = |name: &str| {
                    info.lines()
                        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                        .map(str::to_owned)
                };
                if field("role").as_deref() == Some("slave")
                    && field("master_port") == Some(port.to_string())
                    && field("master_link_status").as_deref() == Some("up")
                {
                    return n.port;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the primary at {port} has no replica"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn live_port(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.child.is_some())
            .map(|n| n.port)
            .expect("a node is running")
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the node at `port`: a node that hangs without
    /// closing its connections.
    pub fn pause(&self, port: u16, paused: bool) {
        let node = self.nodes.iter().find(|n| n.port == port).unwrap();
        let pid = node.child.as_ref().expect("the node runs").id();
        let signal = if paused { "-STOP" } else { "-CONT" };
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// `kill -9` of the node at `port`.
    pub fn kill(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|n| n.port == port).unwrap();
        if let Some(mut c) = node.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the node at `port` again with its cluster configuration: it rejoins (a failed
    /// over primary comes back as a replica of its successor).
    pub async fn restart(&mut self, port: u16) {
        let child = self.spawn(port);
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap()
            .child = Some(child);
        self.wait_ok(port).await;
        self.wait_replicas_synced().await;
    }

    /// Waits until a node other than `old` is the primary of the slot of `key`, as every
    /// running node sees it; returns its port.
    pub async fn await_failover(&self, key: &str, old: u16) -> u16 {
        let (_, slot) = self.slot_of(key).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut seen = Vec::new();
            for n in self.nodes.iter().filter(|n| n.child.is_some()) {
                seen.push(self.master_of_slot(n.port, slot).await);
            }
            if let Some(Some(new)) = seen.first().copied() {
                if new != old && seen.iter().all(|s| *s == Some(new)) {
                    return new;
                }
            }
            assert!(
                Instant::now() < deadline,
                "slot {slot} was not failed over: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_ok(&self, port: u16) {
        wait_ping(&format!("redis://127.0.0.1:{port}")).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut conn = node(port).await;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut conn)
                .await
                .unwrap_or_default();
            if info.lines().any(|l| l.trim() == "cluster_state:ok") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {port} never saw the cluster ok: {info}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(c) = node.child.as_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A plain connection to one node. A node busy with a full sync on a loaded machine can miss
/// the client's connect timeout: it is tried again for 10 s.
/// A port for a cluster node: free, with its cluster bus port (+ 10000) free too, both below
/// the kernel's ephemeral range (32768+), where a port free a moment ago can become an outgoing
/// connection's before the node binds it (as in scripts/redis-cluster.sh). Nodes are given
/// ports in 10000–19999 (their buses 20000–29999, never another node's port), each once per
/// test process: clusters of tests running at once do not pick each other's ports before
/// their nodes bind them.
fn node_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    loop {
        let p = 10_000 + (getrandom::u32().expect("random bytes") % 10_000) as u16;
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&p) && free(p) && free(p + 10_000) {
            given.push(p);
            return p;
        }
    }
}

/// A slot being moved between primaries (see [`TestCluster::begin_move`]).
pub struct SlotMove {
    pub slot: u16,
    /// The ports of the source and of the target.
    pub from: u16,
    pub to: u16,
    to_id: String,
    /// Every primary's port.
    masters: Vec<u16>,
}

fn setslot(slot: u16, state: &str, id: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
    cmd
}

/// Moves every key of the slot still on the source to the target.
async fn migrate_keys(moving: &SlotMove) {
    let mut source = node(moving.from).await;
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(moving.slot)
            .arg(100)
            .query_async(&mut source)
            .await
            .unwrap();
        if keys.is_empty() {
            return;
        }
        let _: redis::Value = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(moving.to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query_async(&mut source)
            .await
            .unwrap();
    }
}

/// `CLUSTER NODES` as the node at `port` sees it.
async fn cluster_nodes(port: u16) -> String {
    redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut node(port).await)
        .await
        .unwrap()
}

/// (id, port) of every primary serving slots in a `CLUSTER NODES` reply (a replica the node
/// has not yet heard is one shows as a primary without slots).
fn primaries(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            if !fields.get(2)?.contains("master") || fields.len() <= 8 {
                return None;
            }
            Some((fields[0].to_owned(), node_port_of(fields[1])?))
        })
        .collect()
}

/// The port in a `CLUSTER NODES` address (`ip:port@bus`).
fn node_port_of(addr: &str) -> Option<u16> {
    addr.split('@').next()?.rsplit(':').next()?.parse().ok()
}

async fn node(port: u16) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.get_multiplexed_async_connection().await {
            Ok(conn) => return conn,
            Err(e) if Instant::now() >= deadline => panic!("node {port}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
