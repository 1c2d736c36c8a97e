//! How full Redis is: refused writes (`OOM command not allowed…`, Redis at its `maxmemory` with
//! `noeviction`) become [`StoreError::Full`], and readiness asks `INFO memory`.
//!
//! A full Redis is not an outage: retrying soon does not help until an operator frees space, so
//! writes answer 507 and `/readyz` says so, while reads keep working. Redis refuses a write
//! only while its memory is over the limit, and usage dips back under it between writes, so a
//! write refused moments ago counts too, until a later write goes through.

use std::sync::atomic::{AtomicU64, Ordering};

use redis::{RedisError, Value};

use super::entries::bytes;
use super::redis::Conn;
use super::{now_ms, StoreError, StoreResult};

/// How long a refused write keeps readiness failing unless a later write succeeds.
const OOM_REMEMBERED_MS: u64 = 5_000;

/// Whether Redis refused a command for want of memory (a script's refused write included).
pub(super) fn is_oom(e: &RedisError) -> bool {
    e.code() == Some("OOM") || e.to_string().contains("OOM command not allowed")
}

/// What the store last saw of Redis's memory, shared by everything writing to it.
#[derive(Debug, Default)]
pub(super) struct Pressure {
    /// When a write was last refused as out of memory (ms since the epoch); 0: not since the
    /// last write that went through.
    refused_at: AtomicU64,
}

impl Pressure {
    /// The store error for a failed command: [`StoreError::Full`] for a refused write (and
    /// remembered), [`StoreError::Unavailable`] for anything else.
    pub(super) fn error(&self, e: RedisError) -> StoreError {
        if is_oom(&e) {
            self.refused_at.store(now_ms(), Ordering::Relaxed);
            StoreError::Full(e.to_string())
        } else {
            StoreError::Unavailable(e.to_string())
        }
    }

    /// A write went through: there is room again.
    pub(super) fn wrote(&self) {
        self.refused_at.store(0, Ordering::Relaxed);
    }

    fn refused_recently(&self) -> bool {
        let at = self.refused_at.load(Ordering::Relaxed);
        at != 0 && now_ms().saturating_sub(at) < OOM_REMEMBERED_MS
    }

    /// Whether Redis is at its `maxmemory` (by `INFO memory`) or refused a write moments ago.
    pub(super) async fn full(&self, conn: &Conn) -> StoreResult<bool> {
        let mut conn = conn.here();
        // A cluster asks every primary, and answers a map of node → reply.
        let info: Result<Value, _> = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await;
        let at_limit = match info {
            Ok(reply) => node_replies(&reply).iter().any(|text| {
                match (field(text, "used_memory"), field(text, "maxmemory")) {
                    (Some(used), Some(max)) => max > 0 && used >= max,
                    _ => false,
                }
            }),
            Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                return Err(StoreError::Unavailable(e.to_string()))
            }
            // INFO refused (a managed Redis may not allow it): the refused writes tell.
            Err(_) => false,
        };
        Ok(at_limit || self.refused_recently())
    }
}

/// The text of each node's reply: one for a single node, one per node for a cluster.
fn node_replies(reply: &Value) -> Vec<String> {
    match reply {
        Value::Map(nodes) => nodes.iter().flat_map(|(_, v)| node_replies(v)).collect(),
        Value::VerbatimString { text, .. } => vec![text.clone()],
        other => bytes(other)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .into_iter()
            .collect(),
    }
}

/// A numeric `name:value` line of an `INFO` reply.
fn field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// Redis's `maxmemory-policy`, or `None` when `CONFIG GET` is refused (managed Redis).
pub(super) async fn eviction_policy(conn: &Conn) -> Option<String> {
    let mut conn = conn.clone();
    let reply: Value = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(&mut conn)
        .await
        .ok()?;
    let value = match &reply {
        Value::Array(items) => items.get(1)?,
        Value::Map(pairs) => &pairs.first()?.1,
        _ => return None,
    };
    Some(String::from_utf8_lossy(bytes(value)?).into_owned())
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn info_fields_are_read_by_their_exact_name() {
        let info = "# Memory\r\nused_memory:1024\r\nused_memory_human:1.00K\r\nmaxmemory:0\r\n";
        assert_eq!(field(info, "used_memory"), Some(1024));
        assert_eq!(field(info, "maxmemory"), Some(0));
        assert_eq!(field(info, "used_memory_peak"), None);
    }
}
