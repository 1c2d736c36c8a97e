//! Idempotency records in Redis: every command behind [`RequestStore`], all in
//! `requests.lua`, which declares the record and the tenant's index (both `{t:<tenant>}`).

use futures_util::future::BoxFuture;
use redis::{Script, Value};

use super::super::entries::{bytes, corrupt, int};
use super::super::requests::{Begin, RecordTerms, RequestStore, StoredResponse};
use super::super::StoreResult;
use super::{unavailable, Conn, RedisLog};

pub struct RedisRequests {
    conn: Conn,
    prefix: String,
    script: Script,
}

impl RedisRequests {
    pub fn new(log: &RedisLog) -> Self {
        Self {
            conn: log.conn.clone(),
            prefix: log.prefix.clone(),
            script: Script::new(include_str!("../requests.lua")),
        }
    }

    /// The record and the tenant's index.
    fn keys(&self, tenant: &str, digest: &str) -> [String; 2] {
        [
            format!("{}:{{t:{tenant}}}:idem:{digest}", self.prefix),
            format!("{}:{{t:{tenant}}}:idem", self.prefix),
        ]
    }

    async fn run(
        &self,
        tenant: &str,
        digest: &str,
        op: &str,
        owner: &str,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        let [record, index] = self.keys(tenant, digest);
        let mut inv = self.script.key(record);
        inv.key(index).arg(op).arg(owner).arg(digest);
        for a in args {
            inv.arg(*a);
        }
        let mut conn = self.conn.here();
        inv.invoke_async(&mut conn).await.map_err(unavailable)
    }
}

fn text(v: &Value) -> String {
    String::from_utf8_lossy(bytes(v).unwrap_or_default()).into_owned()
}

fn decode_begin(reply: &Value) -> StoreResult<Begin> {
    let bad = || corrupt("idempotency", "the record script answered something else");
    let Value::Array(parts) = reply else {
        return Err(bad());
    };
    let ms = |v: &Value| int(v).ok_or_else(bad);
    Ok(match parts.as_slice() {
        [op, nonce, again] if bytes(op) == Some(b"run") => Begin::Run {
            nonce: text(nonce),
            again: int(again) == Some(1),
        },
        [op, status, headers, body] if bytes(op) == Some(b"replay") => {
            let status = int(status)
                .and_then(|s| u16::try_from(s).ok())
                .ok_or_else(bad)?;
            let headers = serde_json::from_slice(bytes(headers).unwrap_or_default())
                .map_err(|e| corrupt("idempotency", format!("stored headers: {e}")))?;
            Begin::Replay(StoredResponse {
                status,
                headers,
                body: bytes(body).unwrap_or_default().to_vec(),
            })
        }
        [op] if bytes(op) == Some(b"mismatch") => Begin::Mismatch,
        [op, wait] if bytes(op) == Some(b"busy") => Begin::InUse {
            retry_after_ms: ms(wait)?,
        },
        [op, wait] if bytes(op) == Some(b"full") => Begin::Full {
            retry_after_ms: ms(wait)?,
        },
        _ => return Err(bad()),
    })
}

impl RequestStore for RedisRequests {
    fn begin<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        fingerprint: &'a str,
        owner: &'a str,
        nonce: &'a str,
        terms: RecordTerms,
    ) -> BoxFuture<'a, StoreResult<Begin>> {
        Box::pin(async move {
            let (lock, keep, max) = (
                terms.lock_ms.to_string(),
                terms.keep_ms.to_string(),
                terms.max_records.to_string(),
            );
            let args: [&[u8]; 5] = [
                fingerprint.as_bytes(),
                nonce.as_bytes(),
                lock.as_bytes(),
                keep.as_bytes(),
                max.as_bytes(),
            ];
            let reply = self.run(tenant, digest, "begin", owner, &args).await?;
            decode_begin(&reply)
        })
    }

    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        owner: &'a str,
        lock_ms: u64,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            let lock = lock_ms.to_string();
            let reply = self
                .run(tenant, digest, "renew", owner, &[lock.as_bytes()])
                .await?;
            Ok(int(&reply) == Some(1))
        })
    }

    fn finish<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        owner: &'a str,
        response: Option<&'a StoredResponse>,
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let (status, headers, body) = match response {
                Some(r) => (
                    r.status.to_string(),
                    serde_json::to_vec(&r.headers).map_err(|e| {
                        super::super::StoreError::Unencodable(format!("stored headers: {e}"))
                    })?,
                    r.body.as_slice(),
                ),
                None => (String::new(), Vec::new(), &[][..]),
            };
            let args: [&[u8]; 3] = [status.as_bytes(), &headers, body];
            self.run(tenant, digest, "finish", owner, &args).await?;
            Ok(())
        })
    }
}
