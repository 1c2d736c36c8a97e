//! API key records and token signing secrets in Redis (the layout is in `keys.rs`).

use futures_util::future::BoxFuture;
use redis::AsyncCommands;

use super::keys::{KeyRecord, KeyStore};
use super::redis::RedisLog;
use super::{StoreError, StoreResult};
use crate::domain::TenantId;

impl RedisLog {
    fn key_key(&self, id: &str) -> String {
        format!("{}:{{k:{id}}}:key", self.prefix)
    }

    fn key_index(&self) -> String {
        format!("{}:keys", self.prefix)
    }
}

fn decode(id: &str, fields: Vec<(String, String)>) -> StoreResult<Option<KeyRecord>> {
    if fields.is_empty() {
        return Ok(None);
    }
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let corrupt = |reason: &str| StoreError::Corrupt {
        id: format!("key {id}"),
        reason: reason.to_owned(),
    };
    let tenant = get("tenant")
        .and_then(|t| TenantId::parse(t).ok())
        .ok_or_else(|| corrupt("no tenant"))?;
    let hash = get("hash").ok_or_else(|| corrupt("no hash"))?.to_owned();
    Ok(Some(KeyRecord {
        id: id.to_owned(),
        tenant,
        hash,
        rate: get("rate").and_then(|r| r.parse().ok()),
        created_at: get("created_at").and_then(|r| r.parse().ok()).unwrap_or(0),
        revoked_at: get("revoked_at").and_then(|r| r.parse().ok()),
    }))
}

impl KeyStore for RedisLog {
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, StoreResult<Option<KeyRecord>>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let fields: Vec<(String, String)> = conn
                .hgetall(self.key_key(id))
                .await
                .map_err(|e| self.failed(e))?;
            decode(id, fields)
        })
    }

    fn put<'a>(&'a self, r: &'a KeyRecord) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let mut fields = vec![
                ("tenant", r.tenant.to_string()),
                ("hash", r.hash.clone()),
                ("created_at", r.created_at.to_string()),
            ];
            if let Some(rate) = r.rate {
                fields.push(("rate", rate.to_string()));
            }
            // The record first: an id in the index always names a record.
            let created: bool = conn
                .hset_nx(self.key_key(&r.id), "hash", &r.hash)
                .await
                .map_err(|e| self.failed(e))?;
            if !created {
                return Err(StoreError::Unencodable(format!("key id {} exists", r.id)));
            }
            let () = conn
                .hset_multiple(self.key_key(&r.id), &fields)
                .await
                .map_err(|e| self.failed(e))?;
            let () = conn
                .sadd(self.key_index(), &r.id)
                .await
                .map_err(|e| self.failed(e))?;
            Ok(())
        })
    }

    fn list(&self) -> BoxFuture<'_, StoreResult<Vec<KeyRecord>>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            let ids: Vec<String> = conn
                .smembers(self.key_index())
                .await
                .map_err(|e| self.failed(e))?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(r) = self.get(&id).await? {
                    out.push(r);
                }
            }
            out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
            Ok(out)
        })
    }

    fn revoke<'a>(&'a self, id: &'a str, at: u64) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            if self.get(id).await?.is_none() {
                return Ok(false);
            }
            let mut conn = self.conn.here();
            let _: bool = conn
                .hset_nx(self.key_key(id), "revoked_at", at)
                .await
                .map_err(|e| self.failed(e))?;
            Ok(true)
        })
    }

    fn ids(&self) -> BoxFuture<'_, StoreResult<Vec<String>>> {
        Box::pin(async move {
            let mut conn = self.conn.here();
            conn.smembers(self.key_index())
                .await
                .map_err(|e| self.failed(e))
        })
    }

    fn signing_secret<'a>(
        &'a self,
        kid: &'a str,
        proposed: &'a str,
    ) -> BoxFuture<'a, StoreResult<String>> {
        Box::pin(async move {
            let key = format!("{}:token-keys", self.prefix);
            let mut conn = self.conn.here();
            let _: bool = conn
                .hset_nx(&key, kid, proposed)
                .await
                .map_err(|e| self.failed(e))?;
            let secret: Option<String> = conn.hget(&key, kid).await.map_err(|e| self.failed(e))?;
            secret.ok_or_else(|| StoreError::Unavailable("the token signing key vanished".into()))
        })
    }
}
