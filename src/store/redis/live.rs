//! The live bus on Redis: one channel per session, `<prefix>:{<sid>}:live` (in the session's
//! hash slot), and one subscriber connection per replica that subscribes to exactly the
//! sessions the replica's hub watches. A replica with no subscribers receives nothing; one
//! with subscribers on a few sessions receives only theirs, however busy the rest are.
//!
//! On a cluster the channel is a shard channel (`SPUBLISH` / `SSUBSCRIBE`, served by the node
//! of the session's slot, so a commit reaches only that node and the replicas subscribed to
//! the session), on a single node a plain one (see `conn.rs`).
//!
//! The subscriber connection speaks RESP3: messages arrive as pushes, the client resubscribes
//! by itself after a reconnect, and every subscription the server confirms — the first one or
//! one renewed after a reconnect — is reported as [`LiveMessage::Watching`], on which that
//! session's streams read what they may have missed from the log.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use super::super::{wire, Ephemeral, LiveBus, LiveMessage, StoreResult, Watch, Watcher};
use super::{Conn, RedisLog, Target};
use crate::domain::SessionId;

/// How often the subscriber checks its connection (and retries what failed) while it is down.
const RETRY_EVERY: Duration = Duration::from_millis(250);

impl RedisLog {
    /// `SPUBLISH` on a cluster (the session's shard channel), `PUBLISH` on one node (see
    /// `conn.rs` for why).
    pub(super) fn publish_command(&self) -> &'static str {
        if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// The session's live channel: committed events, deltas and its deletion notice.
    pub fn live_channel(&self, sid: &SessionId) -> String {
        super::session_name(&self.prefix, sid, "live")
    }
}

/// The session a live channel of `prefix` names.
fn channel_session(prefix: &str, channel: &[u8]) -> Option<SessionId> {
    let name = std::str::from_utf8(channel).ok()?;
    let sid = name
        .strip_prefix(prefix)?
        .strip_prefix(":{")?
        .strip_suffix("}:live")?;
    SessionId::parse(sid).ok()
}

impl LiveBus for RedisLog {
    fn publish(&self, msg: Ephemeral) -> BoxFuture<'_, StoreResult<()>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let message = wire::encode_ephemeral(&msg)?;
            let _: Value = redis::cmd(self.publish_command())
                .arg(self.live_channel(&msg.sid))
                .arg(message)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            Ok(())
        })
    }

    fn listen(&self, tx: UnboundedSender<LiveMessage>) -> Watcher {
        let (watcher, watches) = Watcher::channel();
        let listener = Listener {
            target: self.target.clone(),
            prefix: self.prefix.clone(),
            tx,
        };
        tokio::spawn(listener.run(watches));
        watcher
    }
}

struct Listener {
    target: Target,
    prefix: String,
    tx: UnboundedSender<LiveMessage>,
}

impl Listener {
    fn channel(&self, sid: &SessionId) -> String {
        super::session_name(&self.prefix, sid, "live")
    }

    async fn connect(&self, pushes: UnboundedSender<PushInfo>) -> Option<Conn> {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.target.subscriber(pushes.clone()).await {
                Ok(conn) => return Some(conn),
                Err(e) => tracing::warn!(error = %e, "live subscriber cannot connect; retrying"),
            }
            if self.tx.is_closed() {
                return None;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    async fn run(self, mut watches: UnboundedReceiver<Watch>) {
        let (push_tx, mut pushes) = mpsc::unbounded_channel();
        let Some(mut conn) = self.connect(push_tx).await else {
            return;
        };
        // What the hub wants, and what is yet to be (un)subscribed after a failure.
        let mut watched: HashSet<SessionId> = HashSet::new();
        let mut retry: Vec<Watch> = Vec::new();
        let mut down = false;
        let mut tick = tokio::time::interval(RETRY_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                watch = watches.recv() => {
                    let Some(watch) = watch else { return };
                    match &watch {
                        Watch::On(sid) => watched.insert(sid.clone()),
                        Watch::Off(sid) => watched.remove(sid),
                    };
                    if !self.apply(&mut conn, &watch).await {
                        retry.push(watch);
                    }
                }
                push = pushes.recv() => {
                    let Some(push) = push else { return };
                    if push.kind == PushKind::Disconnection {
                        down = true;
                    } else if !self.deliver(push) {
                        return;
                    }
                }
                _ = tick.tick(), if down || !retry.is_empty() => {
                    // A command makes the client reconnect (and resubscribe) once Redis is back.
                    let ping: redis::RedisResult<Value> = redis::cmd("PING").query_async(&mut conn).await;
                    if ping.is_ok() {
                        down = false;
                        let pending = std::mem::take(&mut retry);
                        for watch in pending {
                            // Only what the hub still wants (or still does not).
                            let wanted = match &watch {
                                Watch::On(sid) => watched.contains(sid),
                                Watch::Off(sid) => !watched.contains(sid),
                            };
                            if wanted && !self.apply(&mut conn, &watch).await {
                                retry.push(watch);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Subscribes or unsubscribes; false when Redis did not confirm it.
    async fn apply(&self, conn: &mut Conn, watch: &Watch) -> bool {
        let result = match watch {
            Watch::On(sid) => conn.watch(&self.channel(sid)).await,
            Watch::Off(sid) => conn.unwatch(&self.channel(sid)).await,
        };
        if let Err(e) = &result {
            tracing::warn!(error = %e, "live subscription change failed; retrying");
        }
        result.is_ok()
    }

    /// Hands a push to the hub; false once the hub is gone.
    fn deliver(&self, push: PushInfo) -> bool {
        let channel = match push.data.first() {
            Some(Value::BulkString(name)) => name.as_slice(),
            _ => return true,
        };
        let msg = match push.kind {
            PushKind::Message | PushKind::SMessage => match push.data.get(1) {
                Some(Value::BulkString(payload)) => wire::decode(payload),
                _ => None,
            },
            PushKind::Subscribe | PushKind::SSubscribe => {
                channel_session(&self.prefix, channel).map(|sid| LiveMessage::Watching { sid })
            }
            _ => None,
        };
        match msg {
            Some(msg) => self.tx.send(msg).is_ok(),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_channel_names_its_session_and_no_other_prefix_matches() {
        let sid = SessionId::parse("s-1").unwrap();
        let channel = format!("dsh:{{{sid}}}:live");
        assert_eq!(channel_session("dsh", channel.as_bytes()), Some(sid));
        assert_eq!(channel_session("other", channel.as_bytes()), None);
        assert_eq!(channel_session("dsh", b"dsh:{s-1}:log"), None);
    }
}
