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
