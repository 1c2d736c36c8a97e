//! Webhooks in Redis: every command behind [`WebhookStore`].
//!
//! A tenant's keys (`{t:<tenant>}`, changed only by `webhook_records.lua`): the endpoints
//! (`:webhooks`, id → JSON), and per endpoint its delivery records (`:wh:<id>:deliveries`) and
//! their age order (`:wh:<id>:order`). The queue (`{wh:<n>}`, changed only by
//! `webhook_queue.lua`), in [`LEASE_GROUPS`] groups by session like the leases: a stream of
//! jobs with one consumer group, the retries waiting for their time, and a marker per queued
//! delivery id that makes enqueuing idempotent.

use futures_util::future::BoxFuture;
use redis::{Script, Value};

use super::super::entries::{bytes, corrupt, int};
use super::super::webhooks::{
    Created, DeliveryPage, Endpoint, Job, Recording, Taken, WebhookStore, KEPT_ATTEMPTS,
    KEPT_DELIVERIES, QUEUE_MAX, SEEN_MS,
};
use super::super::{StoreError, StoreResult};
use super::{unavailable, Conn, RedisLog, LEASE_GROUPS};
use crate::domain::webhooks::{Attempt, Delivery};

pub struct RedisWebhooks {
    conn: Conn,
    prefix: String,
    queue: Script,
    records: Script,
}

impl RedisWebhooks {
    pub fn new(log: &RedisLog) -> Self {
        Self {
            conn: log.conn.clone(),
            prefix: log.prefix.clone(),
            queue: Script::new(include_str!("../webhook_queue.lua")),
            records: Script::new(include_str!("../webhook_records.lua")),
        }
    }

    fn endpoints_key(&self, tenant: &str) -> String {
        format!("{}:{{t:{tenant}}}:webhooks", self.prefix)
    }

    /// The endpoint's delivery records and their order.
    fn record_keys(&self, tenant: &str, endpoint: &str) -> [String; 2] {
        let base = format!("{}:{{t:{tenant}}}:wh:{endpoint}", self.prefix);
        [format!("{base}:deliveries"), format!("{base}:order")]
    }

    /// The group's stream and retries.
    fn queue_keys(&self, group: usize) -> [String; 2] {
        let base = format!("{}:{{wh:{}}}", self.prefix, group % LEASE_GROUPS);
        [format!("{base}:jobs"), format!("{base}:later")]
    }

    async fn queue_op(
        &self,
        group: usize,
        extra_key: Option<String>,
        args: &[&str],
    ) -> StoreResult<Value> {
        let [stream, later] = self.queue_keys(group);
        let mut inv = self.queue.key(stream);
        inv.key(later);
        if let Some(k) = extra_key {
            inv.key(k);
        }
        for a in args {
            inv.arg(*a);
        }
        let mut conn = self.conn.here();
        inv.invoke_async(&mut conn).await.map_err(unavailable)
    }

    async fn records_op(&self, tenant: &str, endpoint: &str, args: &[&str]) -> StoreResult<Value> {
        let [records, order] = self.record_keys(tenant, endpoint);
        let mut inv = self.records.key(self.endpoints_key(tenant));
        inv.key(records).key(order);
        for a in args {
            inv.arg(*a);
        }
        let mut conn = self.conn.here();
        inv.invoke_async(&mut conn).await.map_err(unavailable)
    }
}

fn json<T: serde::Serialize>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Unencodable(e.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, raw: &[u8]) -> StoreResult<T> {
    serde_json::from_slice(raw).map_err(|e| corrupt(what, e.to_string()))
}

/// A delivery's place in its endpoint's age order.
fn order_member(d: &Delivery) -> String {
    format!("{:013}:{}", d.created_at, d.id)
}

/// Whether `raw` is a position [`WebhookStore::deliveries`] handed out.
pub fn is_position(raw: &str) -> bool {
    let (Some(ms), Some(id)) = (raw.get(..13), raw.get(13..)) else {
        return false;
    };
    ms.bytes().all(|b| b.is_ascii_digit())
        && id
            .strip_prefix(":msg_")
            .is_some_and(|hex| hex.len() <= 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `[[id, [field, value, …]], …]` as a stream read answers it → the jobs this replica can read.
fn decode_taken(group: usize, reply: &Value) -> StoreResult<Vec<Taken>> {
    let Value::Array(entries) = reply else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let Value::Array(parts) = e else { continue };
        let (Some(id), Some(Value::Array(fields))) = (parts.first().and_then(bytes), parts.get(1))
        else {
            continue;
        };
        let entry = String::from_utf8_lossy(id).into_owned();
        let job = fields
            .chunks(2)
            .find(|kv| kv.first().and_then(bytes) == Some(b"job"))
            .and_then(|kv| kv.get(1).and_then(bytes));
        // One entry this replica cannot read (garbage, or a newer version's job) is left
        // pending, claimed again later (maybe by a replica that reads it); it does not fail
        // the take, which would strand the jobs taken with it.
        let read = job
            .ok_or_else(|| corrupt(&format!("webhook job {entry}"), "no job field"))
            .and_then(|raw| decode(&format!("webhook job {entry}"), raw));
        match read {
            Ok(job) => out.push(Taken { group, job, entry }),
            Err(e) => {
                tracing::warn!(group, error = %e, "an unreadable webhook job is left pending")
            }
        }
    }
    Ok(out)
}

impl WebhookStore for RedisWebhooks {
    fn create<'a>(
        &'a self,
        tenant: &'a str,
        endpoint: &'a Endpoint,
        max: usize,
    ) -> BoxFuture<'a, StoreResult<Created>> {
        Box::pin(async move {
            let body = json(endpoint)?;
            let args = ["create", &endpoint.id, &body, &max.to_string()];
            let reply = self.records_op(tenant, &endpoint.id, &args).await?;
            Ok(match int(&reply) {
                Some(1) => Created::Stored,
                Some(2) => Created::Exists,
                _ => Created::Full,
            })
        })
    }

    fn endpoints<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<Vec<Endpoint>>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let all: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
                .arg(self.endpoints_key(tenant))
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            let mut out = all
                .iter()
                .map(|(id, raw)| decode::<Endpoint>(&format!("webhook {id}"), raw))
                .collect::<StoreResult<Vec<_>>>()?;
            out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
            Ok(out)
        })
    }

    fn endpoint<'a>(
        &'a self,
        tenant: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, StoreResult<Option<Endpoint>>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let raw: Option<Vec<u8>> = redis::cmd("HGET")
                .arg(self.endpoints_key(tenant))
                .arg(id)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            raw.map(|r| decode(&format!("webhook {id}"), &r))
                .transpose()
        })
    }

    fn session_exists<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            // An id that does not parse names no session there can be.
            let Ok(sid) = crate::domain::SessionId::parse(session) else {
                return Ok(false);
            };
            let mut conn = self.conn.here();
            let n: i64 = redis::cmd("EXISTS")
                .arg(super::log_key(&self.prefix, &sid))
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            Ok(n > 0)
        })
    }

    fn remove<'a>(&'a self, tenant: &'a str, id: &'a str) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            let reply = self.records_op(tenant, id, &["remove", id]).await?;
            Ok(int(&reply) == Some(1))
        })
    }

    fn enqueue<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            let body = json(job)?;
            let seen = format!(
                "{}:{{wh:{}}}:seen:{}",
                self.prefix,
                job.group % LEASE_GROUPS,
                job.id
            );
            let args = [
                "enqueue",
                &body,
                &SEEN_MS.to_string(),
                &QUEUE_MAX.to_string(),
            ];
            let reply = self.queue_op(job.group, Some(seen), &args).await?;
            Ok(int(&reply) == Some(1))
        })
    }

    fn take<'a>(
        &'a self,
        group: usize,
        consumer: &'a str,
        max: usize,
        claim_idle_ms: u64,
    ) -> BoxFuture<'a, StoreResult<Vec<Taken>>> {
        Box::pin(async move {
            let args = [
                "take",
                consumer,
                &max.max(1).to_string(),
                &claim_idle_ms.to_string(),
                &QUEUE_MAX.to_string(),
            ];
            let reply = self.queue_op(group, None, &args).await?;
            decode_taken(group, &reply)
        })
    }

    fn finish<'a>(&'a self, taken: &'a Taken) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let args = ["finish", taken.entry.as_str()];
            self.queue_op(taken.group, None, &args).await.map(|_| ())
        })
    }

    fn retry<'a>(&'a self, taken: &'a Taken, due_ms: u64) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let job = json(&taken.job)?;
            let args = ["retry", taken.entry.as_str(), &job, &due_ms.to_string()];
            self.queue_op(taken.group, None, &args).await.map(|_| ())
        })
    }

    fn record<'a>(&'a self, r: Recording<'a>) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let d = r.delivery;
            let record = json(&Delivery {
                attempts: Vec::new(),
                ..d.clone()
            })?;
            let attempt = r.attempt.map(json).transpose()?.unwrap_or_default();
            let args = [
                "record",
                r.endpoint,
                &d.id,
                &order_member(d),
                &record,
                &attempt,
                if r.create_only { "1" } else { "0" },
                &KEPT_DELIVERIES.to_string(),
                &KEPT_ATTEMPTS.to_string(),
            ];
            self.records_op(r.tenant, r.endpoint, &args)
                .await
                .map(|_| ())
        })
    }

    fn deliveries<'a>(
        &'a self,
        tenant: &'a str,
        endpoint: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<DeliveryPage>> {
        Box::pin(async move {
            let [records, order] = self.record_keys(tenant, endpoint);
            let mut conn = self.conn.here();
            let start = after.map_or_else(|| "+".to_owned(), |a| format!("({a}"));
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(&order)
                .arg(start)
                .arg("-")
                .arg("BYLEX")
                .arg("REV")
                .arg("LIMIT")
                .arg(0)
                .arg(limit + 1)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            let more = members.len() > limit;
            let members = &members[..members.len().min(limit)];
            if members.is_empty() {
                return Ok(DeliveryPage::default());
            }
            let mut fields = redis::cmd("HMGET");
            fields.arg(&records);
            for m in members {
                let id = m.get(14..).unwrap_or_default();
                fields.arg(id).arg(format!("{id}:a"));
            }
            let values: Vec<Option<Vec<u8>>> =
                fields.query_async(&mut conn).await.map_err(unavailable)?;
            let mut deliveries = Vec::with_capacity(members.len());
            for pair in values.chunks(2) {
                let Some(Some(raw)) = pair.first() else {
                    continue;
                };
                let mut d: Delivery = decode("webhook delivery", raw)?;
                if let Some(Some(lines)) = pair.get(1) {
                    for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                        d.attempts.push(decode::<Attempt>("webhook attempt", line)?);
                    }
                }
                deliveries.push(d);
            }
            Ok(DeliveryPage {
                deliveries,
                next: more.then(|| members.last().cloned()).flatten(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_what_the_order_holds_and_nothing_else() {
        assert!(is_position("1764780000000:msg_0123456789abcdef"));
        assert!(!is_position("1764780000000:msg_é"));
        assert!(!is_position("176478000000é:msg_01"));
        assert!(!is_position("1764780000000-msg_0123"));
        assert!(!is_position("176478000000a:msg_0123"));
        assert!(!is_position("1764780000000:evil"));
        assert!(!is_position(""));
    }
}
