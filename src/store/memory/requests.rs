//! Idempotency records for the embedded in-memory store: the same rules as `requests.lua`,
//! under one lock.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use futures_util::future::BoxFuture;

use super::super::requests::{Begin, RecordTerms, RequestStore, StoredResponse};
use super::super::{now_ms, StoreResult};

struct Record {
    fingerprint: String,
    nonce: String,
    owner: String,
    /// When the running attempt's lock expires (ms); 0: released.
    lock: u64,
    response: Option<StoredResponse>,
}

#[derive(Default)]
struct Tenant {
    records: HashMap<String, Record>,
    /// `(expiry, digest)` of every record, soonest first: the index that bounds the count.
    expiry: BTreeSet<(u64, String)>,
}

impl Tenant {
    fn purge(&mut self, now: u64) {
        while let Some((at, digest)) = self.expiry.first().cloned() {
            if at > now {
                return;
            }
            self.expiry.pop_first();
            self.records.remove(&digest);
        }
    }

    /// The live record of `digest`, if any.
    fn live(&mut self, digest: &str, now: u64) -> Option<&mut Record> {
        self.purge(now);
        self.records.get_mut(digest)
    }
}

#[derive(Default)]
pub struct MemoryRequests {
    tenants: Mutex<HashMap<String, Tenant>>,
}

impl MemoryRequests {
    fn with<T: Send + 'static>(
        &self,
        tenant: &str,
        f: impl FnOnce(&mut Tenant, u64) -> T,
    ) -> BoxFuture<'_, StoreResult<T>> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let out = f(tenants.entry(tenant.to_owned()).or_default(), now_ms());
        Box::pin(async move { Ok(out) })
    }
}

impl RequestStore for MemoryRequests {
    fn begin<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        fingerprint: &'a str,
        owner: &'a str,
        nonce: &'a str,
        terms: RecordTerms,
    ) -> BoxFuture<'a, StoreResult<Begin>> {
        self.with(tenant, |t, now| {
            let Some(record) = t.live(digest, now) else {
                if t.records.len() as u64 >= terms.max_records {
                    let oldest = t.expiry.first().map_or(now + 1, |(at, _)| *at);
                    return Begin::Full {
                        retry_after_ms: oldest.saturating_sub(now).max(1),
                    };
                }
                let expires = now + terms.keep_ms;
                t.expiry.insert((expires, digest.to_owned()));
                t.records.insert(
                    digest.to_owned(),
                    Record {
                        fingerprint: fingerprint.to_owned(),
                        nonce: nonce.to_owned(),
                        owner: owner.to_owned(),
                        lock: now + terms.lock_ms,
                        response: None,
                    },
                );
                return Begin::Run {
                    nonce: nonce.to_owned(),
                    again: false,
                };
            };
            if record.fingerprint != fingerprint {
                return Begin::Mismatch;
            }
            if let Some(response) = &record.response {
                return Begin::Replay(response.clone());
            }
            if record.lock > now {
                return Begin::InUse {
                    retry_after_ms: record.lock - now,
                };
            }
            record.owner = owner.to_owned();
            record.lock = now + terms.lock_ms;
            Begin::Run {
                nonce: record.nonce.clone(),
                again: true,
            }
        })
    }

    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        owner: &'a str,
        lock_ms: u64,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        self.with(tenant, |t, now| match t.live(digest, now) {
            Some(r) if r.response.is_none() && r.owner == owner => {
                r.lock = now + lock_ms;
                true
            }
            _ => false,
        })
    }

    fn finish<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        owner: &'a str,
        response: Option<&'a StoredResponse>,
    ) -> BoxFuture<'a, StoreResult<()>> {
        self.with(tenant, |t, now| {
            let Some(r) = t.live(digest, now) else {
                return;
            };
            if r.response.is_some() {
                return;
            }
            match response {
                Some(response) => {
                    r.response = Some(response.clone());
                    r.lock = 0;
                }
                None if r.owner == owner => r.lock = 0,
                None => {}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERMS: RecordTerms = RecordTerms {
        lock_ms: 60_000,
        keep_ms: 60_000,
        max_records: 2,
    };

    fn stored() -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: b"{}".to_vec(),
        }
    }

    #[tokio::test]
    async fn a_record_runs_once_then_replays_and_refuses_another_request() {
        let s = MemoryRequests::default();
        let first = s.begin("t", "k", "fp", "a", "n1", TERMS).await.unwrap();
        assert_eq!(
            first,
            Begin::Run {
                nonce: "n1".into(),
                again: false
            }
        );
        let busy = s.begin("t", "k", "fp", "b", "n2", TERMS).await.unwrap();
        assert!(matches!(busy, Begin::InUse { retry_after_ms } if retry_after_ms > 0));
        assert_eq!(
            s.begin("t", "k", "other", "b", "n2", TERMS).await.unwrap(),
            Begin::Mismatch
        );
        s.finish("t", "k", "a", Some(&stored())).await.unwrap();
        assert_eq!(
            s.begin("t", "k", "fp", "b", "n2", TERMS).await.unwrap(),
            Begin::Replay(stored())
        );
        // Another tenant's key of the same name is its own.
        let other = s.begin("u", "k", "fp", "a", "n3", TERMS).await.unwrap();
        assert_eq!(
            other,
            Begin::Run {
                nonce: "n3".into(),
                again: false
            }
        );
    }

    #[tokio::test]
    async fn a_released_or_expired_lock_runs_again_with_the_same_nonce() {
        let s = MemoryRequests::default();
        s.begin("t", "k", "fp", "a", "n1", TERMS).await.unwrap();
        // Only the owner releases.
        s.finish("t", "k", "x", None).await.unwrap();
        assert!(matches!(
            s.begin("t", "k", "fp", "b", "n2", TERMS).await.unwrap(),
            Begin::InUse { .. }
        ));
        s.finish("t", "k", "a", None).await.unwrap();
        let again = s.begin("t", "k", "fp", "b", "n2", TERMS).await.unwrap();
        assert_eq!(
            again,
            Begin::Run {
                nonce: "n1".into(),
                again: true
            }
        );
        assert!(
            !s.renew("t", "k", "a", 1000).await.unwrap(),
            "the lock is b's now"
        );
        assert!(s.renew("t", "k", "b", 1000).await.unwrap());
        let short = RecordTerms {
            lock_ms: 0,
            ..TERMS
        };
        s.begin("t", "j", "fp", "a", "n4", short).await.unwrap();
        let taken = s.begin("t", "j", "fp", "b", "n5", TERMS).await.unwrap();
        assert_eq!(
            taken,
            Begin::Run {
                nonce: "n4".into(),
                again: true
            }
        );
    }

    #[tokio::test]
    async fn a_tenant_keeps_at_most_max_records_and_hears_when_one_expires() {
        let s = MemoryRequests::default();
        s.begin("t", "a", "fp", "o", "n", TERMS).await.unwrap();
        s.begin("t", "b", "fp", "o", "n", TERMS).await.unwrap();
        let full = s.begin("t", "c", "fp", "o", "n", TERMS).await.unwrap();
        assert!(
            matches!(full, Begin::Full { retry_after_ms } if retry_after_ms > 0 && retry_after_ms <= 60_000)
        );
        let gone = RecordTerms {
            keep_ms: 0,
            ..TERMS
        };
        s.begin("u", "a", "fp", "o", "n", gone).await.unwrap();
        let fresh = s.begin("u", "a", "fp2", "o", "n2", TERMS).await.unwrap();
        assert_eq!(
            fresh,
            Begin::Run {
                nonce: "n2".into(),
                again: false
            },
            "an expired record is gone"
        );
    }
}
