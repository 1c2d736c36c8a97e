//! Idempotency records for the embedded in-memory store: storage only, under one lock; the
//! rules are [`super::super::requests::rules`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use futures_util::future::BoxFuture;

use super::super::requests::{
    rules, Begin, Held, Record, RecordTerms, RequestStore, StoredResponse,
};
use super::super::{now_ms, StoreResult};

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
            t.purge(now);
            let held = Held {
                live: t.records.len() as u64,
                oldest: t.expiry.first().map(|(at, _)| *at),
            };
            let mut record = t.records.remove(digest);
            let new = record.is_none();
            let begun = rules::begin(&mut record, fingerprint, owner, nonce, terms, held, now);
            if let Some(record) = record {
                if new {
                    t.expiry.insert((now + terms.keep_ms, digest.to_owned()));
                }
                t.records.insert(digest.to_owned(), record);
            }
            begun
        })
    }

    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        owner: &'a str,
        lock_ms: u64,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        self.with(tenant, |t, now| {
            rules::renew(t.live(digest, now), owner, lock_ms, now)
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
            rules::finish(t.live(digest, now), owner, response)
        })
    }
}
