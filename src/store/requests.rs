//! The storage seam for idempotent requests (`Idempotency-Key`): one record per key of a
//! tenant, kept for [`KEEP_MS`], and the markers a keyed request leaves in the logs it wrote.
//!
//! A record remembers what was asked (a fingerprint of method, path, body and credential),
//! who runs it now (an owner token with a lock that expires, so a crashed replica never leaves
//! a key stuck), a random nonce, and once the request is answered for good, its response. The
//! nonce names the request's markers in the session logs ([`Mark`]) and seeds the ids the
//! request draws (a new session's id, a turn's id), so a retry that runs again finds what the
//! first attempt committed and draws the same ids. The record is not truth about the session:
//! whether the write happened is the log's answer, given atomically by the append
//! ([`super::EventLog::append_once`]).
//!
//! Keys are hash-tagged per tenant: the record `<prefix>:{t:<tenant>}:idem:<sha256(key)>` and
//! the tenant's index of live records `<prefix>:{t:<tenant>}:idem` (a zset scored by expiry,
//! which bounds how many records a tenant keeps).

use futures_util::future::BoxFuture;

use super::StoreResult;

/// How long a record and a marker are kept: 24 hours, as Stripe keeps its keys.
pub const KEEP_MS: u64 = 24 * 60 * 60 * 1000;

/// The marker of one committed append of a keyed request, in the log it wrote to: `name`
/// (derived from the record's nonce) and `n`, the request's n-th commit (1-based), so a
/// handler that commits twice finds each of its commits again in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub name: String,
    pub n: u32,
}

/// A final response as stored for a replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// The headers a client needs (content type, location…), in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What a request with a key may do, as its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begin {
    /// Run the request: the record is new (`again: false`), or an earlier attempt ended
    /// without a final answer or its lock expired (`again: true`). `nonce` is the record's.
    Run { nonce: String, again: bool },
    /// The request was answered for good: send this again.
    Replay(StoredResponse),
    /// The key was used for a different request.
    Mismatch,
    /// Another attempt holds the key for this long still.
    InUse { retry_after_ms: u64 },
    /// The tenant keeps as many records as it may; the oldest expires in this long.
    Full { retry_after_ms: u64 },
}

/// The terms a record is kept under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordTerms {
    /// How long an attempt holds the key without renewing its lock.
    pub lock_ms: u64,
    /// How long the record is kept from its first request.
    pub keep_ms: u64,
    /// Records one tenant may keep at once.
    pub max_records: u64,
}

/// One record per (tenant, key digest); `owner` names the attempt that runs it now.
pub trait RequestStore: Send + Sync + 'static {
    /// Starts an attempt: creates the record (with `fingerprint` and the proposed `nonce`)
    /// or judges the one there, and on [`Begin::Run`] locks it for `owner`.
    fn begin<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        fingerprint: &'a str,
        owner: &'a str,
        nonce: &'a str,
        terms: RecordTerms,
    ) -> BoxFuture<'a, StoreResult<Begin>>;

    /// Extends `owner`'s lock; false when it no longer holds the key (it expired and another
    /// attempt took it, the request was answered, or the record is gone).
    fn renew<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        owner: &'a str,
        lock_ms: u64,
    ) -> BoxFuture<'a, StoreResult<bool>>;

    /// Ends an attempt. With a response, the request is answered for good (unless another
    /// attempt answered it first, which wins); without one, the lock is released if `owner`
    /// holds it, and the next attempt runs the request again.
    fn finish<'a>(
        &'a self,
        tenant: &'a str,
        digest: &'a str,
        owner: &'a str,
        response: Option<&'a StoredResponse>,
    ) -> BoxFuture<'a, StoreResult<()>>;
}
