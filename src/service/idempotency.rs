//! Idempotent requests (`Idempotency-Key`, Stripe's semantics), on the service side.
//!
//! Two things make a keyed write happen once. The request's **record** (in the store, per
//! tenant) answers a retry whose first attempt finished: it replays the stored response, or
//! refuses a different request under the same key, or a duplicate while the first still runs.
//! But an attempt can end without knowing its own outcome (Redis stalled, the append committed
//! after the 503 went out), and then no response was stored. So the **log** carries the key
//! too: each commit of a keyed request leaves a marker beside the session's stream, in the same
//! atomic step as the append ([`crate::store::EventLog::append_once`]). A retry runs the
//! handler again; its decision meets the marker, appends nothing, and [`super::Sessions`]
//! rebuilds the first attempt's result from the log, so the retry answers what really
//! happened. One truth, the log; the record only saves work.
//!
//! The running request is a task-local [`KeyedRequest`] ([`run`]): `Sessions` numbers its
//! commits (the n-th commit of a retry meets the n-th marker of the first attempt), and ids the
//! request creates (a session's, a turn's) are drawn from the record's random nonce
//! ([`drawn`]), so a retry draws the same ones and finds the session its first attempt made.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::ServiceError;
use crate::domain::ids::hex;
use crate::store::requests::KEEP_MS;
use crate::store::{Begin, Mark, RecordTerms, RequestStore, StoredResponse};

/// How long an attempt holds its key without renewing; a crashed replica's keys are free
/// again this long after it stopped renewing.
const LOCK: Duration = Duration::from_secs(5);
/// How often a running attempt renews its lock.
const RENEW_EVERY: Duration = Duration::from_millis(1500);
/// Records one tenant keeps at once (each for 24 h): past it, new keys are refused.
pub const MAX_RECORDS: u64 = 100_000;

tokio::task_local! {
    static REQUEST: Arc<KeyedRequest>;
}

/// The keyed request running in this task: how many commits it made, the ids it drew.
pub struct KeyedRequest {
    /// The record's random nonce (hex): names the markers, seeds the drawn ids.
    nonce: String,
    commits: AtomicU32,
    draws: Mutex<HashMap<&'static str, u32>>,
    replayed: AtomicBool,
}

impl KeyedRequest {
    pub fn new(nonce: String) -> Self {
        Self {
            nonce,
            commits: AtomicU32::new(0),
            draws: Mutex::default(),
            replayed: AtomicBool::new(false),
        }
    }

    /// Whether this attempt met a commit of an earlier one (so its answer repeats that
    /// outcome rather than making a new one).
    pub fn replayed(&self) -> bool {
        self.replayed.load(Ordering::SeqCst)
    }

    fn digest(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut all = parts.to_vec();
        all.push(self.nonce.as_bytes());
        sha256_parts(&all)
    }

    /// The marker of this request's next commit.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            name: hex(&self.digest(&[b"mark"])[..16]),
            n: self.commits.load(Ordering::SeqCst) + 1,
        }
    }

    /// Counts a commit: made now, or met (`replayed`) as an earlier attempt's.
    pub(crate) fn committed(&self, replayed: bool) {
        self.commits.fetch_add(1, Ordering::SeqCst);
        if replayed {
            self.replayed.store(true, Ordering::SeqCst);
        }
    }

    /// The `i`-th id this request draws for `label`: the same on every attempt.
    fn draw(&self, label: &'static str) -> [u8; 16] {
        let i = {
            let mut draws = self.draws.lock().unwrap_or_else(|p| p.into_inner());
            let i = draws.entry(label).or_default();
            *i += 1;
            *i
        };
        let digest = self.digest(&[b"draw", label.as_bytes(), &i.to_be_bytes()]);
        let mut id = [0u8; 16];
        id.copy_from_slice(&digest[..16]);
        id
    }
}

/// Runs `f` as the keyed request `request`.
pub async fn run<F: Future>(request: Arc<KeyedRequest>, f: F) -> F::Output {
    REQUEST.scope(request, f).await
}

/// The keyed request this task runs, if any.
pub(crate) fn current() -> Option<Arc<KeyedRequest>> {
    REQUEST.try_with(Arc::clone).ok()
}

/// 128 bits for the next `label` id the running keyed request creates (the same on a retry),
/// or `None` outside a keyed request (draw a random id then).
pub fn drawn(label: &'static str) -> Option<[u8; 16]> {
    current().map(|r| r.draw(label))
}

/// An attempt that may run: the record it holds and the request it runs as.
pub struct Ticket {
    tenant: String,
    digest: String,
    owner: String,
    pub request: Arc<KeyedRequest>,
}

/// What a request with a key may do.
pub enum Admission {
    Run(Ticket),
    Replay(StoredResponse),
    /// The key was used for a different request.
    Mismatch,
    /// Another attempt runs this request now; retry after this long.
    InUse(Duration),
    /// The tenant keeps as many keys as it may; one expires after this long.
    Full(Duration),
}

/// The records of keyed requests.
pub struct Idempotency {
    store: Arc<dyn RequestStore>,
    terms: RecordTerms,
}

fn random_hex<const N: usize>() -> Result<String, ServiceError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| ServiceError::NoEntropy(e.to_string()))?;
    Ok(hex(&bytes))
}

impl Idempotency {
    pub fn new(store: Arc<dyn RequestStore>) -> Self {
        Self {
            store,
            terms: RecordTerms {
                lock_ms: LOCK.as_millis() as u64,
                keep_ms: KEEP_MS,
                max_records: MAX_RECORDS,
            },
        }
    }

    /// Looks `key` of `tenant` up for a request with this `fingerprint` (the same on every
    /// retry of the same request: see [`fingerprint`]).
    pub async fn begin(
        &self,
        tenant: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<Admission, ServiceError> {
        let digest = hex(&Sha256::digest(key.as_bytes()));
        let owner = random_hex::<8>()?;
        let nonce = random_hex::<16>()?;
        let begun = self
            .store
            .begin(tenant, &digest, fingerprint, &owner, &nonce, self.terms)
            .await?;
        let ms = Duration::from_millis;
        Ok(match begun {
            Begin::Run { nonce, again } => {
                if again {
                    tracing::info!("running a keyed request again: its earlier attempt ended without a final answer");
                }
                Admission::Run(Ticket {
                    tenant: tenant.to_owned(),
                    digest,
                    owner,
                    request: Arc::new(KeyedRequest::new(nonce)),
                })
            }
            Begin::Replay(stored) => Admission::Replay(stored),
            Begin::Mismatch => Admission::Mismatch,
            Begin::InUse { retry_after_ms } => Admission::InUse(ms(retry_after_ms)),
            Begin::Full { retry_after_ms } => Admission::Full(ms(retry_after_ms)),
        })
    }

    /// Runs `work` as the ticket's request, renewing its lock meanwhile, so a duplicate that
    /// arrives while it runs is told the key is in use, however long it takes.
    pub async fn hold<F: Future>(&self, ticket: &Ticket, work: F) -> F::Output {
        let work = run(ticket.request.clone(), work);
        let renewing = async {
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + RENEW_EVERY, RENEW_EVERY);
            loop {
                tick.tick().await;
                let renewed = self
                    .store
                    .renew(
                        &ticket.tenant,
                        &ticket.digest,
                        &ticket.owner,
                        self.terms.lock_ms,
                    )
                    .await;
                match renewed {
                    Ok(true) => {}
                    // Taken over after a stall; the markers keep both attempts from committing
                    // twice.
                    Ok(false) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "renewing an idempotency key's lock failed")
                    }
                }
            }
        };
        tokio::pin!(work);
        tokio::select! {
            out = &mut work => return out,
            () = renewing => {}
        }
        work.await
    }

    /// Ends the attempt: with a response, the request is answered for good and later retries
    /// replay it; without, the next retry runs it again. A failure here is logged, not
    /// returned: the retry then runs again and learns the outcome from the log.
    pub async fn finish(&self, ticket: &Ticket, response: Option<&StoredResponse>) {
        let done = self
            .store
            .finish(&ticket.tenant, &ticket.digest, &ticket.owner, response)
            .await;
        if let Err(e) = done {
            tracing::warn!(error = %e, "recording a keyed request's end failed; a retry runs it again");
        }
    }
}

/// The fingerprint of a request: SHA-256 over its length-prefixed `parts` (method, path, who
/// asks, body).
pub fn fingerprint(parts: &[&[u8]]) -> String {
    hex(&sha256_parts(parts))
}

fn sha256_parts(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_retry_draws_the_same_ids_and_numbers_its_commits_the_same() {
        let first = Arc::new(KeyedRequest::new("n1".into()));
        let retry = Arc::new(KeyedRequest::new("n1".into()));
        let other = Arc::new(KeyedRequest::new("n2".into()));
        let draws = |r: Arc<KeyedRequest>| {
            run(r, async {
                let a = drawn("session").unwrap();
                let b = drawn("session").unwrap();
                let t = drawn("turn").unwrap();
                (a, b, t)
            })
        };
        let (a, b, t) = draws(first.clone()).await;
        assert_ne!(a, b, "each draw is new");
        assert_ne!(a, t, "labels draw apart");
        assert_eq!(draws(retry.clone()).await, (a, b, t));
        assert_ne!(draws(other.clone()).await.0, a);
        assert_eq!(
            drawn("session"),
            None,
            "outside a keyed request nothing is drawn"
        );

        assert_eq!(first.mark().n, 1);
        first.committed(false);
        assert_eq!(first.mark().n, 2);
        assert_eq!(first.mark().name, retry.mark().name);
        assert_ne!(first.mark().name, other.mark().name);
        assert!(!first.replayed());
        retry.committed(true);
        assert!(retry.replayed());
    }

    #[test]
    fn fingerprints_tell_where_one_part_ends() {
        assert_ne!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"a", b"bc"]));
        assert_eq!(fingerprint(&[b"PUT", b"/x"]), fingerprint(&[b"PUT", b"/x"]));
    }
}
