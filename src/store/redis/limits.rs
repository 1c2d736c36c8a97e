//! Limits in Redis: every Redis command behind [`LimitStore`].
//!
//! Keys: `<prefix>:{k:<key id>}:rate` (a key's bucket, `rate.lua`), and per tenant
//! `<prefix>:{t:<tenant>}:sessions|turns|streams` (counted sets, `admit.lua` / `refresh.lua`,
//! read by `members.lua`),
//! `:calls` (the provider-call window, `window.lua`) and `:settings` (a hash of overrides).
//! Every script declares its one key.

use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::{Script, Value};

use super::super::entries::int;
use super::super::limits::{Admission, Bucket, CountedSet, LimitStore, Refresh, TenantOverrides};
use super::super::StoreResult;
use super::{unavailable, RedisLog};

pub struct RedisLimits {
    conn: ConnectionManager,
    prefix: String,
    rate: Script,
    admit: Script,
    refresh: Script,
    window: Script,
    members: Script,
}

impl RedisLimits {
    pub fn new(log: &RedisLog) -> Self {
        Self {
            conn: log.conn.clone(),
            prefix: log.prefix.clone(),
            rate: Script::new(include_str!("../rate.lua")),
            admit: Script::new(include_str!("../admit.lua")),
            refresh: Script::new(include_str!("../refresh.lua")),
            window: Script::new(include_str!("../window.lua")),
            members: Script::new(include_str!("../members.lua")),
        }
    }

    fn tenant_key(&self, tenant: &str, what: &str) -> String {
        format!("{}:{{t:{tenant}}}:{what}", self.prefix)
    }
}

/// The integers of a script's array reply.
fn ints(reply: &Value) -> Vec<i64> {
    match reply {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Int(i) => *i,
                other => int(other).map_or(0, |i| i as i64),
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn admission(reply: &Value) -> Admission {
    match ints(reply).as_slice() {
        [1, ..] => Admission::Admitted,
        [_, live, wait, ..] => Admission::Full {
            live: (*live).max(0) as u64,
            retry_after_ms: (*wait).max(0) as u64,
        },
        _ => Admission::Full {
            live: 0,
            retry_after_ms: 0,
        },
    }
}

impl LimitStore for RedisLimits {
    fn take(&self, key_id: &str, rate: u32, n: u32) -> BoxFuture<'_, StoreResult<Bucket>> {
        let key = format!("{}:{{k:{key_id}}}:rate", self.prefix);
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let reply: Value = self
                .rate
                .key(key)
                .arg(rate)
                .arg(n)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            let n = |i: i64| i.max(0) as u64;
            Ok(match ints(&reply).as_slice() {
                [granted, remaining, retry, reset] => Bucket {
                    granted: n(*granted) as u32,
                    remaining: n(*remaining) as u32,
                    retry_after_ms: n(*retry),
                    reset_ms: n(*reset),
                },
                _ => {
                    return Err(super::super::entries::corrupt(
                        "rate",
                        "the rate script answered something else",
                    ))
                }
            })
        })
    }

    fn admit<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        member: &'a str,
        ttl_ms: u64,
        max: u64,
    ) -> BoxFuture<'a, StoreResult<Admission>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let reply: Value = self
                .admit
                .key(self.tenant_key(tenant, set.name()))
                .arg(member)
                .arg(ttl_ms)
                .arg(max)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            Ok(admission(&reply))
        })
    }

    fn refresh<'a>(
        &'a self,
        members: &'a [Refresh],
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            if members.is_empty() {
                return Ok(());
            }
            let mut pipe = redis::pipe();
            // Loaded first in the same round trip, so the invocations never meet NOSCRIPT.
            pipe.load_script(&self.refresh).ignore();
            let invocations: Vec<_> = members
                .iter()
                .map(|(tenant, set, member)| {
                    let mut inv = self.refresh.key(self.tenant_key(tenant, set.name()));
                    inv.arg(member.as_str()).arg(ttl_ms).arg("add");
                    inv
                })
                .collect();
            for inv in &invocations {
                pipe.invoke_script(inv).ignore();
            }
            let mut conn = self.conn.clone();
            let _: Value = pipe.query_async(&mut conn).await.map_err(unavailable)?;
            Ok(())
        })
    }

    fn touch<'a>(
        &'a self,
        tenant: &'a str,
        member: &'a str,
        ttl_ms: u64,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let _: Value = self
                .refresh
                .key(self.tenant_key(tenant, CountedSet::Sessions.name()))
                .arg(member)
                .arg(ttl_ms)
                .arg("xx")
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn members<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        at_most: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<String>>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            self.members
                .key(self.tenant_key(tenant, set.name()))
                .arg(at_most)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)
        })
    }

    fn release<'a>(
        &'a self,
        tenant: &'a str,
        set: CountedSet,
        member: &'a str,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let _: Value = redis::cmd("ZREM")
                .arg(self.tenant_key(tenant, set.name()))
                .arg(member)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn count_call<'a>(
        &'a self,
        tenant: &'a str,
        window_ms: u64,
        max: u64,
    ) -> BoxFuture<'a, StoreResult<Admission>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let reply: Value = self
                .window
                .key(self.tenant_key(tenant, "calls"))
                .arg(window_ms.max(1))
                .arg(max)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            Ok(admission(&reply))
        })
    }

    fn overrides<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<TenantOverrides>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let values: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(self.tenant_key(tenant, "settings"))
                .arg(&TenantOverrides::FIELDS[..])
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            let mut out = TenantOverrides::default();
            for (field, value) in TenantOverrides::FIELDS.iter().zip(values) {
                // A value someone wrote by hand that is not a number is no override.
                if let Some(v) = value.and_then(|v| v.trim().parse().ok()) {
                    out.set(field, v);
                }
            }
            Ok(out)
        })
    }

    fn set_overrides<'a>(
        &'a self,
        tenant: &'a str,
        overrides: &'a TenantOverrides,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let fields: Vec<(&str, u64)> = overrides
                .fields()
                .into_iter()
                .filter_map(|(f, v)| Some((f, v?)))
                .collect();
            if fields.is_empty() {
                return Ok(());
            }
            let mut cmd = redis::cmd("HSET");
            cmd.arg(self.tenant_key(tenant, "settings"));
            for (f, v) in fields {
                cmd.arg(f).arg(v);
            }
            let mut conn = self.conn.clone();
            let _: Value = cmd.query_async(&mut conn).await.map_err(unavailable)?;
            Ok(())
        })
    }
}
