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

/// How long a marker is kept in a session whose retention is `retention_ms` (0: forever): no
/// longer than the session itself, which takes its markers along when it expires or is
/// deleted.
pub fn mark_keep_ms(retention_ms: u64) -> u64 {
    match retention_ms {
        0 => KEEP_MS,
        r => KEEP_MS.min(r),
    }
}

/// The marker of one committed append of a keyed request, in the log it wrote to: `name`
/// (derived from the record's nonce) and `n`, the request's n-th commit (1-based), so a
/// handler that commits twice finds each of its commits again in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub name: String,
    pub n: u32,
}

impl Mark {
    /// How the session's markers name this one: `<name>:<n>`.
    pub fn field(&self) -> String {
        format!("{}:{}", self.name, self.n)
    }
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

/// A record as the rules read and change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub fingerprint: String,
    pub nonce: String,
    /// The attempt that runs the request now (or ran it last).
    pub owner: String,
    /// When the running attempt's lock expires (ms); 0: released.
    pub lock: u64,
    /// The final answer, once there is one.
    pub response: Option<StoredResponse>,
}

/// How many live records the tenant keeps, and when the oldest of them expires (ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub live: u64,
    pub oldest: Option<u64>,
}

/// The rules of a record, once: a store loads the record (`None`: there is none, or it
/// expired), calls these at `now` (ms), and stores what they left in it. `requests.lua` runs
/// the same table inside Redis, where reading and writing must be one atomic step.
pub mod rules {
    use super::{Begin, Held, Record, RecordTerms, StoredResponse};

    /// Starts an attempt of `owner` at the request `fingerprint` (proposing `nonce` for a new
    /// record): a new key runs (unless the tenant holds all it may), the same request replays
    /// its answer, waits for a held lock or takes an expired or released one, and another
    /// request is refused.
    pub fn begin(
        record: &mut Option<Record>,
        fingerprint: &str,
        owner: &str,
        nonce: &str,
        terms: RecordTerms,
        held: Held,
        now: u64,
    ) -> Begin {
        let Some(r) = record else {
            if held.live >= terms.max_records {
                let oldest = held.oldest.unwrap_or(now + 1);
                return Begin::Full {
                    retry_after_ms: oldest.saturating_sub(now).max(1),
                };
            }
            *record = Some(Record {
                fingerprint: fingerprint.to_owned(),
                nonce: nonce.to_owned(),
                owner: owner.to_owned(),
                lock: now + terms.lock_ms,
                response: None,
            });
            return Begin::Run {
                nonce: nonce.to_owned(),
                again: false,
            };
        };
        if r.fingerprint != fingerprint {
            return Begin::Mismatch;
        }
        if let Some(response) = &r.response {
            return Begin::Replay(response.clone());
        }
        if r.lock > now {
            return Begin::InUse {
                retry_after_ms: r.lock - now,
            };
        }
        r.owner = owner.to_owned();
        r.lock = now + terms.lock_ms;
        Begin::Run {
            nonce: r.nonce.clone(),
            again: true,
        }
    }

    /// Extends `owner`'s lock while it holds an unanswered record.
    pub fn renew(record: Option<&mut Record>, owner: &str, lock_ms: u64, now: u64) -> bool {
        match record {
            Some(r) if r.response.is_none() && r.owner == owner => {
                r.lock = now + lock_ms;
                true
            }
            _ => false,
        }
    }

    /// Ends an attempt: the first final answer stands, whoever gives it; without one, only
    /// the owner releases its lock.
    pub fn finish(record: Option<&mut Record>, owner: &str, response: Option<&StoredResponse>) {
        let Some(r) = record.filter(|r| r.response.is_none()) else {
            return;
        };
        match response {
            Some(response) => {
                r.response = Some(response.clone());
                r.lock = 0;
            }
            None if r.owner == owner => r.lock = 0,
            None => {}
        }
    }
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

#[cfg(test)]
mod tests {
    use super::rules::{begin, finish, renew};
    use super::*;

    const TERMS: RecordTerms = RecordTerms {
        lock_ms: 100,
        keep_ms: 1000,
        max_records: 2,
    };
    const ROOM: Held = Held {
        live: 0,
        oldest: None,
    };

    fn answer(status: u16) -> StoredResponse {
        StoredResponse {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn a_new_key_runs_unless_the_tenant_holds_all_it_may() {
        let mut none = None;
        let full = Held {
            live: 2,
            oldest: Some(250),
        };
        assert_eq!(
            begin(&mut none, "fp", "a", "n", TERMS, full, 200),
            Begin::Full { retry_after_ms: 50 }
        );
        assert_eq!(none, None, "a refused key leaves no record");
        let run = begin(&mut none, "fp", "a", "n", TERMS, ROOM, 200);
        assert_eq!(
            run,
            Begin::Run {
                nonce: "n".into(),
                again: false
            }
        );
        assert_eq!(none.map(|r| (r.owner, r.lock)), Some(("a".into(), 300)));
    }

    #[test]
    fn the_same_request_waits_for_a_held_lock_then_takes_it_with_the_first_nonce() {
        let mut r = None;
        begin(&mut r, "fp", "a", "n1", TERMS, ROOM, 0);
        assert_eq!(
            begin(&mut r, "fp", "b", "n2", TERMS, ROOM, 40),
            Begin::InUse { retry_after_ms: 60 }
        );
        assert_eq!(
            begin(&mut r, "other", "b", "n2", TERMS, ROOM, 40),
            Begin::Mismatch
        );
        assert!(!renew(r.as_mut(), "b", 100, 50), "b holds no lock");
        assert!(renew(r.as_mut(), "a", 100, 50));
        finish(r.as_mut(), "b", None);
        assert!(matches!(
            begin(&mut r, "fp", "b", "n2", TERMS, ROOM, 60),
            Begin::InUse { .. }
        ));
        assert_eq!(
            begin(&mut r, "fp", "b", "n2", TERMS, ROOM, 150),
            Begin::Run {
                nonce: "n1".into(),
                again: true
            },
            "an expired lock is taken over"
        );
    }

    #[test]
    fn the_first_final_answer_stands_and_is_replayed() {
        let mut r = None;
        begin(&mut r, "fp", "a", "n", TERMS, ROOM, 0);
        finish(r.as_mut(), "b", Some(&answer(201)));
        finish(r.as_mut(), "a", Some(&answer(200)));
        assert!(
            !renew(r.as_mut(), "a", 100, 10),
            "an answered record holds no lock"
        );
        assert_eq!(
            begin(&mut r, "fp", "c", "n2", TERMS, ROOM, 10),
            Begin::Replay(answer(201))
        );
    }
}
