//! Compare-and-append: the one path that writes a session's events. `append.lua` does it in
//! one atomic step, with the marker of a keyed request (`Idempotency-Key`) checked and set in
//! it. The markers are fields of one hash of the session (see [`RedisLog::session_keys`]), so
//! they expire and are deleted with it. One event of an unkeyed request, the usual write, goes
//! without the script (see [`RedisLog::append_direct`]), which costs Redis about half as much;
//! whatever that path cannot settle alone goes on to the script.

use std::io::Write as _;

use redis::aio::ConnectionLike;
use redis::{RedisWrite as _, Value};

use super::super::capacity;
use super::super::entries::{bytes, corrupt, decode_entry, entry_anchor, int};
use super::super::requests::mark_keep_ms;
use super::super::wire::encode_committed;
use super::super::StoreError;
use super::super::{encode, stamp, Anchor, Append, Mark, StoreResult};
use super::{eval, evalsha, Conn, RedisLog, WAIT_TIMEOUT};
use crate::domain::event::SCHEMA_VERSION;
use crate::domain::{EventId, NewEvent, SessionId};

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
        // One event of an unkeyed request after a known entry, small enough to be encoded
        // here (the usual write): the direct path, unless it meets anything but a clean append.
        if let ([event], [data], None, true) =
            (events, data.as_slice(), mark, direct(expected, &tail))
        {
            if let Some(done) = self
                .append_direct(sid, expected, event, data, (&head, &tail), ttl_ms)
                .await?
            {
                return Ok(done);
            }
        }
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
        let mut read = redis::Cmd::with_capacity(6, 32 + key.len());
        read.arg("XREVRANGE")
            .arg(key)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1);
        // The reply as it comes (`query_async` would walk all of it for nested errors, which
        // an `XREVRANGE` never holds); a refusal is an error as there.
        let reply = conn
            .req_packed_command(&read)
            .await
            .map_err(|e| self.failed(e))?;
        if let Value::ServerError(e) = reply {
            return Err(self.failed(e.into()));
        }
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

/// Whether an append after `expected` may take the direct path: the caller folded the entry
/// it builds on (its seq and commit time), and its batch's message was encoded here.
fn direct(expected: Anchor, tail: &str) -> bool {
    expected.seq > 0 && expected.ts > 0 && !tail.is_empty()
}

impl RedisLog {
    /// The usual write without the script: `XADD` of the one event with the next seq as its id
    /// (`NOMKSTREAM`), and in the same round trip a read of the entry the caller built on, then
    /// the live message once both say the append is the caller's to report. `None` when the
    /// `XADD` was refused (the log moved on, or is gone): the script then says what happened and
    /// hands back what was missed.
    ///
    /// The `XADD` alone only refuses a log that moved past the caller's entry; the read catches
    /// one that went back (Redis lost entries, and the log is shorter or grew back to that seq
    /// with other entries). An entry written on such a log is taken back (`undo.lua`) before
    /// anything is published, and the caller hears `Replaced`, as from the script. (Unless a
    /// replica read it and wrote after it in that round trip: then it stays, is logged, and
    /// the caller hears an outage.)
    /// The two commands go in one write on one connection: Redis runs them one after the other,
    /// and losing entries between them would take the connection down with it.
    /// The commit time is Redis's clock as this replica carries it ([`super::clock`]), never
    /// before the entry it follows.
    async fn append_direct(
        &self,
        sid: &SessionId,
        expected: Anchor,
        event: &NewEvent,
        data: &str,
        (head, tail): (&str, &str),
        ttl_ms: u64,
    ) -> StoreResult<Option<Append>> {
        let mut conn = self.conn.here();
        // Without a reading of Redis's clock (a cluster sends `TIME` to any node, which may be
        // failing over) the script, which reads it where the session is, commits instead.
        let Ok(now) = self.clock.now_ms(&mut conn).await else {
            return Ok(None);
        };
        let ms = now.max(expected.ts);
        let key = self.key(sid);
        let (kind, agent) = (event.kind.type_name(), event.agent.as_str());
        // Each command sized up front (the replica's busiest commands: growing their buffers
        // as the arguments go in cost more than building them).
        let mut add =
            redis::Cmd::with_capacity(14, key.len() + kind.len() + agent.len() + data.len() + 96);
        add.arg("XADD").arg(&key).arg("NOMKSTREAM");
        stream_id(&mut add, expected.seq + 1);
        add.arg("type")
            .arg(kind)
            .arg("agent")
            .arg(agent)
            .arg("data")
            .arg(data)
            .arg("ts")
            .arg(ms)
            .arg("v")
            .arg(SCHEMA_VERSION);
        // Backwards: Redis finds an entry at the end of a stream's last node at once, where a
        // forward read walks the node (up to 100 entries) from its start.
        let mut read = redis::Cmd::with_capacity(4, key.len() + 64);
        read.arg("XREVRANGE").arg(&key);
        stream_id(&mut read, expected.seq);
        stream_id(&mut read, expected.seq);
        let refresh = refresh_due(expected.ts, ms, ttl_ms).then(|| self.session_keys(sid));
        let mut pipe = redis::Pipeline::with_capacity(2 + refresh.as_ref().map_or(0, Vec::len));
        pipe.add_command(add).add_command(read);
        for k in refresh.into_iter().flatten() {
            match ttl_ms {
                0 => pipe.cmd("PERSIST").arg(k),
                ttl => pipe.cmd("PEXPIRE").arg(k).arg(ttl),
            };
        }
        // A lost connection is an error, as for the script: the `XADD` may have run, and only
        // a keyed request can learn whether it did (the script, asked now, would take this
        // write for another's and the decision would be made twice).
        let replies = conn
            .req_packed_commands(&pipe, 0, pipe.len())
            .await
            .map_err(|e| self.failed(e))?;
        let (added, read) = match replies.as_slice() {
            [added, read, ..] => (added, read),
            _ => return Err(corrupt(sid.as_str(), "a direct append's reply is short")),
        };
        match added {
            Value::BulkString(_) | Value::SimpleString(_) => {}
            Value::ServerError(e) if capacity::is_oom(&e.clone().into()) => {
                return Err(self.failed(e.clone().into()));
            }
            // Refused: the log's last id is at or past this seq, or the stream is gone.
            _ => return Ok(None),
        }
        let builds_on = match read {
            Value::Array(entries) => entries.first().and_then(entry_anchor),
            _ => None,
        };
        if !builds_on.is_some_and(|a| expected.names(a)) {
            let mut undo = evalsha(&self.undo, 1, 2, key.len() + 48);
            undo.arg(&key);
            stream_id(&mut undo, expected.seq + 1);
            undo.arg(ms);
            let taken_back = eval(&mut conn, &self.undo, &undo)
                .await
                .map_err(|e| self.failed(e))?;
            let taken_back = match taken_back {
                Value::Int(n) => n,
                _ => return Err(corrupt(sid.as_str(), "undo.lua's reply is not a number")),
            };
            if taken_back >= 0 {
                return Ok(Some(Append::Replaced));
            }
            // Another replica read it and wrote after it within the round trip: it is part of
            // the log now. Neither answer fits: `Replaced` would have the decision made again
            // (twice, then), `Committed` would keep this replica's fold of what Redis lost. The
            // caller hears an outage (the write may have happened); the fold is found out by
            // the session's next write, which the log refuses.
            tracing::error!(session = %sid, seq = expected.seq + 1, "an entry written on a log that had lost entries was built on before it could be taken back");
            return Err(StoreError::Unavailable(
                "Redis lost entries of this session's log; this write may have been kept".into(),
            ));
        }
        self.pressure.wrote();
        // `WAIT` first, on the connection the write went on; the live message then follows
        // whether or not enough replicas acknowledged it (the write is in the log either way).
        let replicated = self.replicated(sid, &mut conn).await;
        // Sent, not waited for: the connection keeps it before anything the caller sends next
        // (the session's next append), and a subscriber that misses it (its connection lost)
        // reads the gap from the log when the next message comes. The write is done: a failure
        // here is not the caller's.
        let channel = self.live_channel(sid);
        let mut publish =
            redis::Cmd::with_capacity(3, channel.len() + head.len() + tail.len() + 48);
        publish.arg(self.publish_command()).arg(channel);
        // The message is `head`, the commit time, `tail`, written as one argument.
        let _ = write!(publish.writer_for_next_arg(), "{head}{ms}{tail}");
        publish.set_no_response(true);
        if let Err(e) = conn.req_packed_command(&publish).await {
            tracing::warn!(session = %sid, kind = ?e.kind(), "a committed write's live message could not be sent; subscribers read it from the log with the next one");
        }
        replicated?;
        Ok(Some(Append::Committed(stamp(
            std::slice::from_ref(event),
            expected.seq + 1,
            ms,
        ))))
    }
}

/// Adds the stream id of entry `seq` (its event id) to `cmd` as its next argument.
fn stream_id(cmd: &mut redis::Cmd, seq: u64) {
    // Writing to a `Vec` cannot fail.
    let _ = write!(cmd.writer_for_next_arg(), "{}", EventId(seq));
}

/// Whether a write at `ms` after an entry committed at `prev_ts` sets the session's keys to
/// expire again, as `append.lua` decides it: once per window of a second (a hundredth of a
/// retention under 100 s), so a busy session refreshes with the first write of each window.
fn refresh_due(prev_ts: u64, ms: u64, keep_ms: u64) -> bool {
    let window = if keep_ms == 0 || keep_ms >= 100_000 {
        1000
    } else {
        (keep_ms / 100).max(1)
    };
    prev_ts / window != ms / window
}

#[cfg(test)]
mod tests {
    use super::refresh_due;

    #[test]
    fn a_direct_append_refreshes_ttls_with_the_first_write_of_each_window_as_the_script_does() {
        // Retention of 100 s or more (or none): windows of a second, by the commit times'
        // seconds.
        for keep in [0, 100_000, 2_592_000_000] {
            assert!(!refresh_due(1_764_900_000_001, 1_764_900_000_999, keep));
            assert!(refresh_due(1_764_900_000_999, 1_764_900_001_000, keep));
        }
        // Under 100 s: a hundredth of it (600 ms for a minute), at least a millisecond.
        assert!(!refresh_due(1_764_900_000_000, 1_764_900_000_599, 60_000));
        assert!(refresh_due(1_764_900_000_599, 1_764_900_000_600, 60_000));
        assert!(refresh_due(1_764_900_000_000, 1_764_900_000_001, 50));
    }
}
