//! Compare-and-append (`append.lua`): the one command that writes a session's events, with the
//! marker of a keyed request (`Idempotency-Key`) checked and set in the same atomic step. The
//! markers are fields of one hash of the session (see [`RedisLog::session_keys`]), so they
//! expire and are deleted with it.
//!
//! **Group commit across sessions.** Every append of the replica goes through one
//! [`Appender`]: while [`IN_FLIGHT`] script calls are under way, the appends that come meanwhile
//! wait, and the next call carries all of them (up to [`MAX_APPENDS`]): one round trip and one
//! script run for many sessions' commits, each checked and applied on its own exactly as if it
//! were called alone (a lone append is a call of one). On a cluster a call carries the appends
//! of one hash slot (a script's keys share a slot); the appends of other slots go in calls of
//! their own, at the same time.

use std::sync::Arc;

use redis::cluster_routing::Slot;
use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::super::capacity::Pressure;
use super::super::entries::{bytes, corrupt, decode_entry, entry_anchor, int};
use super::super::requests::mark_keep_ms;
use super::super::StoreError;
use super::super::{encode, stamp, Anchor, Append, Mark, StoreResult};
use super::{Conn, RedisLog, WAIT_TIMEOUT};
use crate::domain::event::SCHEMA_VERSION;
use crate::domain::{NewEvent, SessionId};

/// The most appends one script call carries.
const MAX_APPENDS: usize = 64;
/// A call takes no more appends once it carries this many events.
const MAX_EVENTS: usize = 1024;
/// Script calls under way at once; appends that come meanwhile go together in the next.
const IN_FLIGHT: usize = 2;

/// The replica's queue of appends, and the task that sends them (see the module's docs).
pub(super) struct Appender {
    queue: mpsc::UnboundedSender<Pending>,
}

/// One session's append, its arguments ready for `append.lua`.
struct Pending {
    /// The session's slot, on a cluster.
    slot: Option<Slot>,
    keys: Vec<String>,
    /// Its header and its events, as `append.lua` reads them.
    args: Vec<Vec<u8>>,
    events: usize,
    /// Its own result of the call: `{ok, head, rest}`.
    reply: oneshot::Sender<StoreResult<Value>>,
}

impl Appender {
    /// Starts the sending task (on the current runtime).
    pub(super) fn start(conn: Conn, script: Script, pressure: Arc<Pressure>) -> Self {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(send(waiting, conn, Arc::new(script), pressure));
        Self { queue }
    }

    /// Queues one session's append (`keys`, then `args`: its header and events) and waits for
    /// its own result.
    async fn append(
        &self,
        slot: Option<Slot>,
        keys: Vec<String>,
        args: Vec<Vec<u8>>,
        events: usize,
    ) -> StoreResult<Value> {
        let (reply, result) = oneshot::channel();
        let stopped = || StoreError::Unavailable("the replica's append queue has stopped".into());
        let pending = Pending {
            slot,
            keys,
            args,
            events,
            reply,
        };
        self.queue.send(pending).map_err(|_| stopped())?;
        result.await.map_err(|_| stopped())?
    }
}

/// Takes what is queued, up to [`MAX_APPENDS`], whenever fewer than [`IN_FLIGHT`] calls are
/// under way, and sends it.
async fn send(
    mut waiting: mpsc::UnboundedReceiver<Pending>,
    conn: Conn,
    script: Arc<Script>,
    pressure: Arc<Pressure>,
) {
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let Ok(permit) = gate.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = waiting.recv().await else {
            return;
        };
        let mut events = first.events;
        let mut batch = vec![first];
        while batch.len() < MAX_APPENDS && events < MAX_EVENTS {
            let Ok(next) = waiting.try_recv() else { break };
            events += next.events;
            batch.push(next);
        }
        let (conn, script, pressure) = (conn.clone(), script.clone(), pressure.clone());
        tokio::spawn(async move {
            let calls = by_slot(batch)
                .into_iter()
                .map(|appends| call(&conn, &script, &pressure, appends));
            futures_util::future::join_all(calls).await;
            drop(permit);
        });
    }
}

/// The appends of each slot, in queue order (one group on a single node).
fn by_slot(batch: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut groups: Vec<Vec<Pending>> = Vec::new();
    for pending in batch {
        match groups.iter_mut().find(|g| g[0].slot == pending.slot) {
            Some(group) => group.push(pending),
            None => groups.push(vec![pending]),
        }
    }
    groups
}

/// One script call carrying `appends`; answers each with its own result.
async fn call(conn: &Conn, script: &Script, pressure: &Pressure, appends: Vec<Pending>) {
    let mut inv = script.prepare_invoke();
    inv.arg(SCHEMA_VERSION).arg(appends.len());
    for pending in &appends {
        for key in &pending.keys {
            inv.key(key);
        }
        for arg in &pending.args {
            inv.arg(&arg[..]);
        }
    }
    let mut conn = conn.clone();
    match inv.invoke_async::<Value>(&mut conn).await {
        Ok(Value::Array(results)) if results.len() == appends.len() => {
            for (pending, result) in appends.into_iter().zip(results) {
                let _ = pending.reply.send(Ok(result));
            }
        }
        Ok(_) => {
            for pending in appends {
                let _ = pending.reply.send(Err(corrupt(
                    "?",
                    "append reply is not one result per append",
                )));
            }
        }
        Err(e) => {
            let error = pressure.error(e);
            for pending in appends {
                let _ = pending.reply.send(Err(error.clone()));
            }
        }
    }
}

impl RedisLog {
    pub(super) async fn append_marked(
        &self,
        sid: &SessionId,
        expected: Anchor,
        events: &[NewEvent],
        ttl_ms: u64,
        mark: Option<&Mark>,
    ) -> StoreResult<Append> {
        let data = encode(events)?;
        let keys = self.session_keys(sid);
        let number = |n: u64| n.to_string().into_bytes();
        let mut args = Vec::with_capacity(9 + 3 * events.len());
        args.extend([
            number(keys.len() as u64),
            number(expected.seq),
            self.live_channel(sid).into_bytes(),
            sid.as_str().as_bytes().to_vec(),
            number(expected.ts),
            number(ttl_ms),
            number(mark.map_or(0, |_| mark_keep_ms(ttl_ms))),
            mark.map(Mark::field).unwrap_or_default().into_bytes(),
            number(events.len() as u64),
        ]);
        for (e, data) in events.iter().zip(data) {
            args.push(e.kind.type_name().as_bytes().to_vec());
            args.push(e.agent.as_str().as_bytes().to_vec());
            args.push(data.into_bytes());
        }
        let slot = self.is_cluster().then(|| Slot::for_key(&keys[0]));
        let reply = self.appender.append(slot, keys, args, events.len()).await?;
        let Value::Array(parts) = &reply else {
            return Err(corrupt("?", "append reply is not an array"));
        };
        let [ok, head, rest] = parts.as_slice() else {
            return Err(corrupt("?", "append reply is short"));
        };
        let head = int(head).ok_or_else(|| corrupt("?", "append reply has no head"))?;
        if int(ok) == Some(2) {
            return already(rest);
        }
        if int(ok) == Some(1) {
            let ms = int(rest).ok_or_else(|| corrupt("?", "append reply has no time"))?;
            if !events.is_empty() {
                self.pressure.wrote();
                self.replicated(sid, &mut self.conn.clone()).await?;
            }
            return Ok(Append::Committed(stamp(events, expected.seq + 1, ms)));
        }
        if head < expected.seq {
            return Ok(Append::Replaced);
        }
        let entries = match rest {
            Value::Array(entries) => entries.as_slice(),
            _ => &[],
        };
        // From an existing session the reply starts with the caller's own last entry.
        let missing = match entries.split_first() {
            _ if expected.seq == 0 => entries,
            Some((first, rest)) if entry_anchor(first).is_some_and(|a| expected.names(a)) => rest,
            _ => return Ok(Append::Replaced),
        };
        Ok(Append::Conflict {
            head,
            missing: missing
                .iter()
                .map(decode_entry)
                .collect::<StoreResult<_>>()?,
        })
    }
}

impl RedisLog {
    /// With `DSH_REDIS_WAIT_REPLICAS=N`, waits until N replicas of the node holding the
    /// session acknowledge what was just written there; fewer within [`WAIT_TIMEOUT`] is
    /// `Unavailable` (the write may or may not survive a failover: a client retrying with its
    /// `Idempotency-Key` learns which).
    async fn replicated(&self, sid: &SessionId, conn: &mut Conn) -> StoreResult<()> {
        if self.wait_replicas == 0 {
            return Ok(());
        }
        let acked = conn
            .wait_replicas(&self.key(sid), self.wait_replicas, WAIT_TIMEOUT)
            .await
            .map_err(|e| self.failed(e))?;
        if acked < u64::from(self.wait_replicas) {
            return Err(StoreError::Unavailable(format!(
                "the append was acknowledged by {acked} of the {} Redis replicas \
                 DSH_REDIS_WAIT_REPLICAS asks for within {} ms",
                self.wait_replicas,
                WAIT_TIMEOUT.as_millis()
            )));
        }
        Ok(())
    }
}

/// What a marker holds: `first last`, the seqs its request committed.
fn already(value: &Value) -> StoreResult<Append> {
    let text = bytes(value).and_then(|b| std::str::from_utf8(b).ok());
    let seqs = text
        .and_then(|t| t.split_once(' '))
        .and_then(|(first, last)| Some((first.parse().ok()?, last.parse().ok()?)));
    match seqs {
        Some((first, last)) => Ok(Append::Already { first, last }),
        None => Err(corrupt("?", "a request marker holds no seqs")),
    }
}
