//! Compare-and-append (`append.lua`): the one command that writes a session's events, with the
//! marker of a keyed request (`Idempotency-Key`) checked and set in the same atomic step. The
//! markers are fields of one hash of the session (see [`RedisLog::session_keys`]), so they
//! expire and are deleted with it.

use redis::Value;

use super::super::entries::{bytes, corrupt, decode_entry, entry_anchor, int};
use super::super::requests::mark_keep_ms;
use super::super::wire::encode_committed;
use super::super::StoreError;
use super::super::{encode, stamp, Anchor, Append, Mark, StoreResult};
use super::{eval, evalsha, Conn, RedisLog, WAIT_TIMEOUT};
use crate::domain::event::SCHEMA_VERSION;
use crate::domain::{NewEvent, SessionId};

impl RedisLog {
    pub(super) async fn append_marked(
        &self,
        sid: &SessionId,
        expected: Anchor,
        events: &[NewEvent],
        ttl_ms: u64,
        mark: Option<&Mark>,
    ) -> StoreResult<Append> {
        // A batch that writes nothing (its decisions were no-ops or refusals) needs only to
        // know the log still ends where it was folded: one plain read instead of the script,
        // which would do the same check. Anything else goes to the script, which tells a
        // conflict from a replaced log and hands back what was missed.
        if events.is_empty()
            && mark.is_none()
            && expected.seq > 0
            && self.ends_at(sid, expected).await?
        {
            return Ok(Append::Committed(Vec::new()));
        }
        let data = encode(events)?;
        let (head, tail) = encode_committed(sid, expected.seq + 1, events, &data)?;
        let keys = self.session_keys(sid);
        let channel = self.live_channel(sid);
        // The arguments' bytes: 128 for the numbers and the marker's name, 128 per event for
        // its type and agent (a short guess only costs one more allocation).
        let bytes = keys.iter().map(String::len).sum::<usize>()
            + channel.len()
            + head.len()
            + tail.len()
            + data.iter().map(|d| d.len() + 128).sum::<usize>()
            + 128;
        let mut cmd = evalsha(&self.append, keys.len(), 9 + 3 * events.len(), bytes);
        cmd.arg(keys)
            .arg(expected.seq)
            .arg(SCHEMA_VERSION)
            .arg(channel)
            .arg(head)
            .arg(expected.ts)
            .arg(ttl_ms)
            .arg(mark.map_or(0, |_| mark_keep_ms(ttl_ms)))
            .arg(mark.map(Mark::field).unwrap_or_default())
            .arg(tail);
        for (e, data) in events.iter().zip(data) {
            cmd.arg(e.kind.type_name()).arg(e.agent.as_str()).arg(data);
        }
        let mut conn = self.conn.here();
        let reply = eval(&mut conn, &self.append, &cmd)
            .await
            .map_err(|e| self.failed(e))?;
        if let Value::BulkString(done) = &reply {
            let last = expected.seq + events.len() as u64;
            let ms = std::str::from_utf8(done)
                .ok()
                .and_then(|t| t.split_once(' '))
                .filter(|(seq, _)| seq.parse() == Ok(last))
                .and_then(|(_, ms)| ms.parse().ok())
                .ok_or_else(|| corrupt(sid.as_str(), "the append's reply is not its commit"))?;
            if !events.is_empty() {
                self.pressure.wrote();
                self.replicated(sid, &mut conn).await?;
            }
            return Ok(Append::Committed(stamp(events, expected.seq + 1, ms)));
        }
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
    /// Whether the session's log ends at the entry `anchor` names.
    async fn ends_at(&self, sid: &SessionId, anchor: Anchor) -> StoreResult<bool> {
        let mut conn = self.conn.here();
        let key = self.key(sid);
        // Sized up front, as `evalsha` does: this read is half of what a busy replica sends.
        let reply: Value = redis::Cmd::with_capacity(6, 32 + key.len())
            .arg("XREVRANGE")
            .arg(key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        let last = match &reply {
            Value::Array(entries) => entries.first(),
            _ => None,
        };
        Ok(last.and_then(entry_anchor).is_some_and(|a| anchor.names(a)))
    }

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
