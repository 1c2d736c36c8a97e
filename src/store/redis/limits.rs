//! Limits in Redis: every Redis command behind [`LimitStore`].
//!
//! Keys: `<prefix>:{k:<key id>}:rate` (a key's bucket, `rate.lua`), and per tenant
//! `<prefix>:{t:<tenant>}:sessions|turns|streams` (counted sets, `admit.lua` / `refresh.lua`,
//! read by `members.lua`),
//! `:sessions:order` (the sessions' creation order, kept by `admit.lua` beside the counted
//! set and paged by `list.lua`), `:calls` (the provider-call window, `window.lua`) and
//! `:settings` (a hash of overrides). Every script declares its keys, all of one tenant's
//! slot.

use futures_util::future::BoxFuture;
use redis::{Script, Value};

use super::super::entries::int;
use super::super::limits::{
    Admission, Bucket, CountedSet, LimitStore, Listed, Refresh, SessionPage, TenantOverrides,
    LIST_READS,
};
use super::super::StoreResult;
use super::{unavailable, Conn, RedisLog};

pub struct RedisLimits {
    conn: Conn,
    prefix: String,
    rate: Script,
    admit: Script,
    refresh: Script,
    window: Script,
    list: Script,
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
            list: Script::new(include_str!("../list.lua")),
            members: Script::new(include_str!("../members.lua")),
        }
    }

    fn tenant_key(&self, tenant: &str, what: &str) -> String {
        format!("{}:{{t:{tenant}}}:{what}", self.prefix)
    }

    /// The sessions' creation order, beside their counted set (same slot).
    fn order_key(&self, tenant: &str) -> String {
        self.tenant_key(tenant, "sessions:order")
    }
}

/// A page as `list.lua` answers it: `{more, resume, member, order, expiry, …}`.
fn session_page(reply: Value) -> StoreResult<SessionPage> {
    let corrupt =
        || super::super::entries::corrupt("sessions", "the list script answered something else");
    let Value::Array(items) = reply else {
        return Err(corrupt());
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    };
    // Scores come back as decimal strings; creation orders stay below 2^53, so exact.
    let number = |v: &Value| {
        text(v)
            .and_then(|t| t.parse::<f64>().ok())
            .map(|f| f as u64)
    };
    let (Some(more), Some(resume)) = (items.first(), items.get(1)) else {
        return Err(corrupt());
    };
    let mut page = SessionPage::default();
    if matches!(more, Value::Int(1)) {
        page.resume = Some(number(resume).ok_or_else(corrupt)?);
    }
    for chunk in items[2..].chunks(3) {
        let [id, order, expiry] = chunk else {
            return Err(corrupt());
        };
        let expiry = number(expiry).ok_or_else(corrupt)?;
        page.sessions.push(Listed {
            id: text(id).ok_or_else(corrupt)?,
            order: number(order).ok_or_else(corrupt)?,
            expires_at: (expiry < NEVER).then_some(expiry),
        });
    }
    Ok(page)
}

/// The expiry `admit.lua` gives a member that never expires.
const NEVER: u64 = 1_000_000_000_000_000;

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
            let mut conn = self.conn.here();
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
            let mut conn = self.conn.here();
            let mut admit = self.admit.key(self.tenant_key(tenant, set.name()));
            if set == CountedSet::Sessions {
                admit.key(self.order_key(tenant));
            }
            let reply: Value = admit
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
            // One pipeline per slot: a cluster refuses one that spans slots, and all of a
            // tenant's sets share its slot. A single node takes them all in one.
            let mut batches: Vec<Vec<&Refresh>> = Vec::new();
            if self.conn.is_cluster() {
                let mut by_tenant: std::collections::BTreeMap<&str, Vec<&Refresh>> =
                    std::collections::BTreeMap::new();
                for m in members {
                    by_tenant.entry(m.0.as_str()).or_default().push(m);
                }
                batches.extend(by_tenant.into_values());
            } else {
                batches.push(members.iter().collect());
            }
            let runs = batches.into_iter().map(|batch| async move {
                let mut pipe = redis::pipe();
                // Loaded first in the same round trip, so the invocations never meet NOSCRIPT.
                pipe.load_script(&self.refresh).ignore();
                let invocations: Vec<_> = batch
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
                let mut conn = self.conn.here();
                pipe.query_async::<Value>(&mut conn).await.map(drop)
            });
            futures_util::future::try_join_all(runs)
                .await
                .map_err(unavailable)?;
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
            let mut conn = self.conn.here();
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
            let mut conn = self.conn.here();
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
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("ZREM")
                .arg(self.tenant_key(tenant, set.name()))
                .arg(member)
                .ignore();
            if set == CountedSet::Sessions {
                pipe.cmd("ZREM")
                    .arg(self.order_key(tenant))
                    .arg(member)
                    .ignore();
            }
            let mut conn = self.conn.here();
            let _: Value = pipe.query_async(&mut conn).await.map_err(unavailable)?;
            Ok(())
        })
    }

    fn list_sessions<'a>(
        &'a self,
        tenant: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<SessionPage>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let before = before.map_or_else(|| "+inf".to_owned(), |b| b.to_string());
            let reply: Value = self
                .list
                .key(self.order_key(tenant))
                .key(self.tenant_key(tenant, CountedSet::Sessions.name()))
                .arg(before)
                .arg(limit.max(1))
                .arg(LIST_READS)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            session_page(reply)
        })
    }

    fn count_call<'a>(
        &'a self,
        tenant: &'a str,
        window_ms: u64,
        max: u64,
    ) -> BoxFuture<'a, StoreResult<Admission>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
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
            let mut conn = self.conn.here();
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
            let mut conn = self.conn.here();
            let _: Value = cmd.query_async(&mut conn).await.map_err(unavailable)?;
            Ok(())
        })
    }
}
